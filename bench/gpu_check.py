"""The GPU check: every ``gpu`` test, compute-sanitizer on one launch of every kernel kind, and every bench, in
one report (``make gpu-check``).

    python -m polysat.bench.gpu_check --out DIR [--part tests,sanitize,bench] [--quick] [--jobs N]
    python -m polysat.bench.gpu_check --merge A/report.json B/report.json --out DIR
    python -m polysat.bench.gpu_check --plan [--quick]     # what each part would run (no GPU needed)

Parts (``--part``, comma list; all by default), each timed and printed as it ends, each item caught on its own
(a failing test, kernel or bench case is a FAIL row with its error, never the end of the report):

- ``env`` (always): device, compute capability, SMs, driver (nvidia-smi and cuDriverGetVersion), CUDA of nvcc,
  compute-sanitizer and PyTorch, package versions.
- ``tests``: ``pytest -m gpu`` over the test files that carry the mark, per-test outcome from its JUnit XML
  (pytest-xdist with ``--jobs`` where installed).
- ``sanitize``: for every item of bench/gpu_launch.py (gemm sm90 and sm80, conv sm90 and sm80, conv_pool,
  attention sm90 and sm80, softmax_scores, SIMT softmax and layernorm) a plain run (it fills the kernel cache
  and checks the outputs against the CPU playback), then compute-sanitizer memcheck, racecheck and synccheck on
  the same single launch; ok only with 0 errors.
- ``bench``: the copy bandwidth; every kernel the cases will launch built ahead by ``--compile-jobs`` worker
  processes into the kernel cache; then the cases of bench/gemm.py, bench/conv.py, bench/attention.py and
  bench/simt.py that ``check_cases(quick)`` lists, rows assembled by bench/gpu_report.py (ratios to the torch
  baselines, the cost model's estimate / measured). Without PyTorch the baselines read "torch missing" and the
  polysat figures still come.

Writes DIR/report.json, DIR/report.md, DIR/junit.xml, DIR/logs.txt (every subprocess's output),
DIR/measurements.csv (the measurement log of the timed kernels) and, with bench rows, DIR/<device>.json and
bench/results/<device>.json (device, driver, date, every row). The report is rewritten after each part and
each bench row, so a run cut short keeps what finished; ``--merge`` joins the reports of several runs and adds
to each bench row the extraction cost model's price of its computation (bench/gpu_estimates.py; no GPU needed).

Exit status: 0 when every part that ran is clean or was skipped with its reason (no CUDA device here: every
part but env is SKIPPED, "no CUDA device"); 1 when a test, a sanitizer run or a bench row failed; 2 on bad
arguments.

On the lent GPU machines (python3 there has PyTorch with CUDA, cuda-python, pytest, pytest-xdist, nvcc and
compute-sanitizer, but not egglog or islpy): ``make gpu-wheels`` here fetches those as cp312 wheels into
``.whl`` (about 52 MiB), and the device call carries ``.whl`` and starts with ``python3 -m pip install -q
--no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site`` (docs/gpu_check.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from polysat.bench import gpu_report as R
from polysat.bench import harness
from polysat import knobs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOLS = ("memcheck", "racecheck", "synccheck")
BENCHES = ("gemm", "conv", "attention", "simt")


def _run(cmd: list[str], timeout: float, env: "dict | None" = None) -> tuple[int, str, bool]:
    """(exit status, stdout + stderr, timed out) of a subprocess; never raises for the command's own failure. At
    the timeout it is interrupted (SIGINT: pytest still writes its JUnit XML of the tests that ran), then
    killed if it has not ended 30 s later."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    except OSError as e:
        return -1, f"{type(e).__name__}: {e}", False
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out or "", False
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return p.returncode, out or "", True


def _first_line(cmd: list[str]) -> str:
    rc, out, _ = _run(cmd, 60)
    lines = [x for x in out.strip().splitlines() if x.strip()]
    return lines[-1].strip() if rc == 0 and lines else ""


def _version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def collect_env() -> dict:
    """What the report says of the machine; ``cuda_device`` is False (with ``why``) where no GPU is visible."""
    from polysat.backend.common.gpu import cuda_available
    env: dict = {"python": platform.python_version(), "machine": platform.machine()}
    env["packages"] = {d: _version(d) for d in ("cuda-bindings", "torch", "numpy", "egglog", "islpy", "pytest",
                                                "pytest-xdist")}
    from polysat import knobs
    env["nvcc"] = _first_line([knobs.nvcc() or "nvcc", "--version"]) or "missing"
    env["compute_sanitizer"] = _first_line([sanitizer() or "compute-sanitizer", "--version"]) or "missing"
    env["cuda_device"] = cuda_available()
    if not env["cuda_device"]:
        env["why"] = "no CUDA device (cuda-python, an NVIDIA driver and a GPU are needed)"
        return env
    from polysat.backend.common.cuda_driver import ck, driver
    from polysat.backend.common.gpu import device
    from polysat.bench.harness import device_name
    dev = device()
    v = int(ck(driver().cuDriverGetVersion(), "cuDriverGetVersion"))
    env.update({"device": device_name(), "cc": f"{dev.cc[0]}.{dev.cc[1]}", "arch": dev.arch, "sms": dev.sms,
                "cuda": f"{v // 1000}.{v % 1000 // 10}"})
    smi = _first_line(["nvidia-smi", "--query-gpu=driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"])
    env["driver"] = smi.split(",")[0].strip() if smi else f"CUDA {env['cuda']} driver API"
    env["nvidia_smi"] = smi or "missing"
    try:
        import torch
        env["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda}, sees a GPU: {torch.cuda.is_available()})"
    except ImportError as e:
        env["torch"] = f"torch missing ({e})"
    return env


def sanitizer() -> "str | None":
    for c in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if c and os.path.exists(c):
            return c
    return None


class Log:
    """DIR/logs.txt: every subprocess's output under a header, appended as it comes."""

    def __init__(self, path: str):
        self.path = path

    def add(self, title: str, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"\n===== {title}\n{text.rstrip()}\n")


def gpu_test_files() -> list[str]:
    """tests/test_*.py files that mark tests ``gpu`` (the others have nothing ``-m gpu`` selects)."""
    tdir = os.path.join(ROOT, "tests")
    out = []
    for name in sorted(os.listdir(tdir)):
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(tdir, name), encoding="utf-8") as f:
                if "pytest.mark.gpu" in f.read():
                    out.append(os.path.join("tests", name))
    return out


def part_tests(out: str, log: Log, jobs: int, timeout: float, test_timeout: float = 120) -> dict:
    files = gpu_test_files()
    junit = os.path.join(out, "junit.xml")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", *files, "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    if jobs > 1 and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(jobs)]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd += [f"--timeout={test_timeout:g}"]  # a hung test fails alone
    if os.path.exists(junit):
        os.remove(junit)
    rc, text, timed_out = _run(cmd, timeout)
    log.add(" ".join(cmd[2:]), text)
    if not os.path.exists(junit):
        return R.part(R.FAIL, "timed out" if timed_out else f"pytest wrote no JUnit XML (exit status {rc})",
                      files=files, log_tail=text[-3000:])
    with open(junit, encoding="utf-8") as f:
        rows = R.junit_rows(f.read())
    counts = R.test_counts(rows)
    bad = counts["failed"] + counts["error"]
    why = "; ".join(x for x in ("timed out" if timed_out else "", f"{bad} failed" if bad else "",
                                f"{counts['skipped']} skipped" if counts["skipped"] else "",
                                "no gpu test passed" if not counts["passed"] else "") if x)
    status = R.FAIL if bad or timed_out or not counts["passed"] else R.OK
    return R.part(status, why, files=files, counts=counts, tests=rows, exit_status=rc,
                  log_tail=text[-3000:] if status == R.FAIL else "")


def part_sanitize(log: Log, jobs: int, timeout: float, budget: float) -> dict:
    """A plain run of every gpu_launch item (it fills the kernel cache that its sanitized runs then load from and
    checks the outputs), then each item under each compute-sanitizer tool, ``jobs`` runs at a time. Runs not started
    when ``budget`` seconds have passed are FAIL rows saying so (the device call has a hard limit)."""
    from polysat.bench.gpu_launch import ITEMS
    exe, deadline = sanitizer(), time.monotonic() + budget
    launch = [sys.executable, "-m", "polysat.bench.gpu_launch"]

    def run(item: str, tool: "str | None") -> dict:
        row = {"item": item, "tool": tool or "none", "status": R.FAIL, "errors": None, "seconds": 0.0, "why": ""}
        if time.monotonic() > deadline:
            return {**row, "why": f"not run: the sanitize part's budget of {budget:.0f} s was spent"}
        t0 = time.monotonic()
        cmd = [exe, "--tool", tool, "--print-limit", "20", *launch, item] if tool else [*launch, item]
        rc, text, timed_out = _run(cmd, timeout)
        log.add(f"{tool or 'plain run'}: gpu_launch {item}", text)
        row["seconds"] = round(time.monotonic() - t0, 1)
        res = _last_json(text)
        if tool:
            status, errors, why = R.sanitize_status(rc, text, timed_out)
            if status != R.OK and res.get("error"):
                why = f"{why}; {res['error']}"
            return {**row, "status": status, "errors": errors, "why": why}
        ok = rc == 0 and not timed_out
        return {**row, "status": R.OK if ok else R.FAIL, "max_rel_err": res.get("max_rel_err"),
                "why": "" if ok else ("timed out" if timed_out else res.get("error") or f"exit status {rc}")}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        runs = list(ex.map(lambda job: run(*job), [(i.name, None) for i in ITEMS]))
        if exe is None:
            runs.append({"item": "*", "tool": "*", "status": R.FAIL, "errors": None, "seconds": 0,
                         "why": "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"})
        else:
            runs += list(ex.map(lambda job: run(*job), [(i.name, t) for t in TOOLS for i in ITEMS]))
    bad = [r for r in runs if r["status"] != R.OK]
    return R.part(R.FAIL if bad else R.OK, f"{len(bad)} of {len(runs)} runs failed" if bad else "", runs=runs)


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


def bench_jobs(todo: list[tuple[Any, dict]], arch: str, cc: tuple) -> list[tuple]:
    """The distinct kernels the (bench module, case) pairs launch, as build jobs; a case whose plan fails here
    is left to its own measurement (a FAIL row)."""
    jobs: dict = {}
    for m, case in todo:
        try:
            for ks in m.sources(case, arch):
                jobs.setdefault(ks.source, (ks.source, ks.skeleton, arch, tuple(cc)))
        except Exception:  # noqa: BLE001 - reported by the case's measurement
            continue
    return list(jobs.values())


def part_bench(quick: bool, report: dict, save: Callable[[], None], budget: float, compile_jobs: int = 1) -> dict:
    """Every bench's check cases, their kernels built ahead in ``compile_jobs`` processes; the report is saved
    after each row. Cases left when ``budget`` seconds have passed are FAIL rows saying so (the device call has
    a hard limit)."""
    from polysat.bench import attention, conv, gemm, simt
    from polysat.bench.harness import Data, copy_gbps, log_kernels, open_device, run_cases, time_ms
    gpu = open_device("gpu_check", "torch.nn.functional", "torch.nn.attention")
    if gpu is None:
        return R.part(R.FAIL, "the CUDA runtime does not open the device")
    if gpu.torch is not None:
        gpu.torch.backends.cudnn.benchmark = True
    iters, warmup = (10, 3) if quick else (30, 5)

    def timed(fn):
        return time_ms(fn, iters, warmup)
    data, measured = Data(gpu.torch), []
    copy = copy_gbps(timed)
    deadline = time.monotonic() + budget
    p = R.part(R.OK, "", copy_gbps=copy, iters=iters, warmup=warmup, torch=gpu.why or "present", rows=[], benches={})
    report["parts"]["bench"] = p
    mods = {"gemm": gemm, "conv": conv, "attention": attention, "simt": simt}
    t0 = time.monotonic()
    jobs = bench_jobs([(mods[b], c) for b in BENCHES for c in mods[b].check_cases(quick)], gpu.dev.arch, gpu.dev.cc)
    errors = [e for e in harness.build_kernels(jobs, compile_jobs) if e]
    p["build"] = {"kernels": len(jobs), "failed": len(errors), "seconds": round(time.monotonic() - t0, 1)}
    print(f"gpu_check: bench: {len(jobs)} kernels built ahead in {p['build']['seconds']} s, {len(errors)} failed",
          flush=True)
    def say(line: str) -> None:  # the report is saved after every row: a call cut short keeps them
        print(line, flush=True)
        save()

    for name in BENCHES:
        m, t0 = mods[name], time.monotonic()

        def one(case, m=m):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not run: the bench part's budget of {budget:.0f} s was spent")
            extra = (copy,) if m is simt else ()
            return m.measure(gpu, case, timed, data, measured, *extra)
        run_cases(name, m.check_cases(quick), one, m.label, say, p["rows"])
        p["benches"][name] = round(time.monotonic() - t0, 1)
        print(f"gpu_check: bench {name}: {p['benches'][name]} s", flush=True)
    log_kernels("gpu_check", gpu.dev, measured)
    bad = [r for r in p["rows"] if r["status"] != R.OK]
    p.update(status=R.FAIL if bad else R.OK, reason=f"{len(bad)} of {len(p['rows'])} rows failed" if bad else "")
    return p


def show_plan(quick: bool, arch: str = "sm90", cc: tuple = (9, 0)) -> dict:
    """What each part would run (no GPU needed): the gpu test files, the sanitizer runs, the bench cases and the
    distinct kernels they launch on arch; printed and returned."""
    from polysat.bench import attention, conv, gemm, simt
    from polysat.bench.gpu_launch import ITEMS
    mods = {"gemm": gemm, "conv": conv, "attention": attention, "simt": simt}
    cases = {b: mods[b].check_cases(quick) for b in BENCHES}
    plan = {"tests": gpu_test_files(), "sanitize": [i.name for i in ITEMS], "tools": list(TOOLS),
            "bench_cases": {b: [mods[b].label(c) + f" {c.get('dtype', '')}" for c in cs] for b, cs in cases.items()},
            "bench_kernels": len(bench_jobs([(mods[b], c) for b, cs in cases.items() for c in cs], arch, cc))}
    print(f"tests: pytest -m gpu over {len(plan['tests'])} files: {' '.join(plan['tests'])}")
    print(f"sanitize: {len(ITEMS)} items x (plain, {', '.join(TOOLS)}) = {4 * len(ITEMS)} runs: "
          f"{' '.join(plan['sanitize'])}")
    for b, cs in plan["bench_cases"].items():
        print(f"bench {b}: {len(cs)} cases: {'; '.join(cs)}")
    print(f"bench: {plan['bench_kernels']} distinct kernels for {arch}")
    return plan


def _save(report: dict, out: str, results_dir: str) -> dict:
    """The report under out, and its <device>.json (with bench rows) copied into results_dir too."""
    paths = R.write(report, out)
    if "results" in paths and os.path.abspath(results_dir) != os.path.abspath(out):
        os.makedirs(results_dir, exist_ok=True)
        shutil.copyfile(paths["results"], os.path.join(results_dir, os.path.basename(paths["results"])))
    return paths


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the report's folder (required but with --plan)")
    ap.add_argument("--plan", action="store_true", help="list what each part would run, and stop (no GPU needed)")
    ap.add_argument("--part", default="tests,sanitize,bench", help="comma list of tests, sanitize, bench")
    ap.add_argument("--quick", action="store_true", help="fewer bench cases and iterations")
    ap.add_argument("--jobs", type=int, default=4, help="pytest-xdist workers and parallel sanitizer runs")
    ap.add_argument("--tests-timeout", type=float, default=420, help="the whole pytest run (then interrupted)")
    ap.add_argument("--test-timeout", type=float, default=120, help="one test (pytest-timeout, where installed)")
    ap.add_argument("--launch-timeout", type=float, default=180, help="per gpu_launch run, sanitized or not")
    ap.add_argument("--sanitize-budget", type=float, default=240, help="seconds after which no run is started")
    ap.add_argument("--compile-jobs", type=int, default=12, help="processes building the bench kernels ahead")
    ap.add_argument("--bench-budget", type=float, default=480, help="seconds after which bench cases are not run")
    ap.add_argument("--merge", nargs="+", metavar="REPORT", help="join these report.json files into --out, each "
                    "bench row with the cost model's price of its computation (bench/gpu_estimates.py; no GPU)")
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"),
                    help="where <device>.json is copied too (default bench/results)")
    ap.add_argument("--no-model-estimates", action="store_true", help="--merge without the cost model's prices")
    a = ap.parse_args(argv)
    if a.plan:
        show_plan(a.quick)
        return 0
    if not a.out:
        ap.error("--out is required")
    if a.merge:
        reports = []
        for path in a.merge:
            with open(path, encoding="utf-8") as f:
                reports.append(json.load(f))
        merged = R.merge(reports)
        bench = merged["parts"].get("bench", {})
        if bench.get("rows") and not a.no_model_estimates:
            from polysat.bench.gpu_estimates import add_model_estimates
            n = add_model_estimates(bench["rows"], str(merged["env"].get("arch") or "sm90"))
            print(f"gpu_check: the cost model priced {n} bench row(s)")
        print(f"gpu_check: wrote {', '.join(_save(merged, a.out, a.results_dir).values())}")
        return 1 if R.overall(merged) == R.FAIL else 0
    parts = [x for x in a.part.split(",") if x]
    if any(x not in R.PARTS[1:] for x in parts):
        ap.error(f"--part takes {', '.join(R.PARTS[1:])}")
    os.makedirs(a.out, exist_ok=True)
    knobs.default_measure_log(os.path.join(os.path.abspath(a.out), "measurements.csv"))
    t0 = time.monotonic()
    env = collect_env()
    report = R.new_report(env)
    report["parts"]["env"] = R.part(R.OK, env.get("why", ""), time.monotonic() - t0)
    print(f"gpu_check: env: {json.dumps(env)}", flush=True)
    log = Log(os.path.join(a.out, "logs.txt"))
    runners: dict[str, Callable[[], dict]] = {
        "tests": lambda: part_tests(a.out, log, a.jobs, a.tests_timeout, a.test_timeout),
        "sanitize": lambda: part_sanitize(log, a.jobs, a.launch_timeout, a.sanitize_budget),
        "bench": lambda: part_bench(a.quick, report, lambda: _save(report, a.out, a.results_dir), a.bench_budget,
                                    a.compile_jobs)}
    for name in R.PARTS[1:]:
        if name not in parts:
            continue
        t0 = time.monotonic()
        if not env["cuda_device"]:
            result = R.skipped(env["why"])
        else:
            try:
                result = runners[name]()
            except Exception as e:  # noqa: BLE001 - a part that breaks is reported, the others still run
                result = R.part(R.FAIL, f"{type(e).__name__}: {e}")
        result["seconds"] = round(time.monotonic() - t0, 1)
        report["parts"][name] = result
        print(f"gpu_check: {name}: {result['status']} {result.get('reason', '')} ({result['seconds']} s)", flush=True)
        _save(report, a.out, a.results_dir)
    paths = _save(report, a.out, a.results_dir)
    print(f"gpu_check: {R.overall(report)}; wrote {', '.join(paths.values())}", flush=True)
    return 1 if R.overall(report) == R.FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
