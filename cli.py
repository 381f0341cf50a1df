"""The ``polysat`` command: compile (dumps), run (targets), demo (the main job); later extract, rules.

Bad input never produces a traceback: every problem is a coded diagnostic printed readably (or as
JSON with ``--json``), and the exit status is 1.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import sys
import traceback
from typing import Callable

import numpy as np

from . import knobs
from .egraph import watchdog
from .ir import progress
from .ir.diagnostics import Diagnostic, PolysatError, diag, dumps, fail

TARGETS: dict[str, Callable] = {}


def target(name: str):
    def deco(fn):
        TARGETS[name] = fn
        return fn
    return deco


@target("reference")
def _run_reference(c, inputs: dict) -> dict:
    from .ir.evaluate import evaluate
    return evaluate(c.program, inputs)


@target("playback")
def _run_playback(c, inputs: dict) -> dict:
    """CPU playback of the extracted RB-SSA regions (not the Tiny IR), docs/DESIGN.md §Verification."""
    from .ir.playback import playback
    return _passed_through(c, inputs, playback(c.regions, inputs))


@target("cuda")
def _run_cuda(c, inputs: dict, compile_only: bool = False) -> "dict | None":
    """The regions as CUDA kernels of their kinds in one memory arena, parameters in a constant pool, the launch
    sequence a CUDA Graph; the compiled model cached on disk, one measurement-log row per kernel (runtime/).
    Needs a GPU, except with compile_only (the compiled model is stored, nothing runs)."""
    from .runtime.compiled import run_cuda_model
    outs = run_cuda_model(c, inputs, compile_only=compile_only)
    return None if outs is None else _passed_through(c, inputs, outs)


def _passed_through(c, inputs: dict, outs: dict) -> dict:
    """outs with the program outputs that are its inputs (no region computes them), in the program's order."""
    from .ir.dtypes import round_to
    from .ir.tiny import Ops
    prog = c.program
    done = {}
    for name, nid in prog.outputs:
        n = prog[nid]
        if name in outs:
            done[name] = outs[name]
        elif n.op == Ops.INPUT and n.arg["tensor_id"] in inputs:
            done[name] = round_to(np.asarray(inputs[n.arg["tensor_id"]]), n.dtype)
    return {**done, **{k: v for k, v in outs.items() if k not in done}}


# ---- verbs -------------------------------------------------------------------------------------

def compilation(a):
    """The one pipeline every verb runs, with the options every stage may need (pipeline.py)."""
    from .pipeline import Compilation
    c = Compilation(a.model, arch=a.arch, rules_dirs=tuple(a.rules or ()), cost=a.cost, bind=_parse_bind(a.bind) or None)
    if c.bind:
        c.params  # a --bind naming a symbol the model lacks is an error whichever stages run
    return c


def cmd_compile(a) -> int:
    from .ir.printer import format_program
    from .pipeline import check_stages, expand_stages, write_dumps
    stages = expand_stages([s for s in (a.dump or "").split(",") if s])
    check_stages(stages)
    c = compilation(a)
    prog = c.program
    errors: list = []
    written = write_dumps(c, stages, a.out, errors=errors) if stages else []
    kernels = None if stages else _kernels(c)
    if a.json:
        doc = {"model": a.model, "arch": a.arch, "nodes": len(prog.nodes),
               "outputs": {n: {"dtype": prog[i].dtype.value, "shape": [str(d) for d in prog[i].shape]}
                           for n, i in prog.outputs}, "dumps": written}
        if kernels is not None:
            doc["kernels"] = kernels
        if not errors:
            print(json.dumps(doc, indent=1))
    else:
        if a.verbose:
            print(format_program(prog))
        print(f"compiled {a.model} for {a.arch}: {len(prog.nodes)} Tiny IR nodes")
        for name, nid in prog.outputs:
            n = prog[nid]
            print(f"  output {name}: {n.dtype.value}[{', '.join(str(d) for d in n.shape)}]")
        for k in kernels or ():
            print(f"  kernel {k['name']}: {', '.join(k['ops'])}  ({', '.join(k['reads'])} -> {', '.join(k['writes'])})")
        for w in written:
            print(f"  {w}" if ": failed (" in w else f"  wrote {w}")
    if errors:
        raise PolysatError(errors)
    return 0


def _kernels(c) -> list:
    """The kernels extraction made (under --cost), named by the user's ops and tensors."""
    from .pipeline import kernels
    return kernels(c)


def load_npz(path: str, wanted: "set | None" = None) -> dict:
    """The arrays of an .npz, only the keys in wanted (default all), each read only after its header shows at most
    POLYSAT_EVAL_MAX_ELEMENTS elements (E1505 ResourceLimit otherwise); an unused key is never decompressed."""
    if not os.path.isfile(path):
        fail("FileNotFound", path, f"no such file: {path}")
    limit = knobs.eval_max_elements()
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            for k in z.files:
                if wanted is not None and k not in wanted:
                    continue
                with z.zip.open(f"{k}.npy") as f:
                    fmt = np.lib.format
                    read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
                    shape, _, dtype = read(f)
                if math.prod(shape) > limit:
                    fail("ResourceLimit", f"{path}:{k}", f"array {k!r} has shape {list(shape)}: "
                         f"{math.prod(shape)} elements, over POLYSAT_EVAL_MAX_ELEMENTS = {limit}")
                if dtype.kind not in "fiub":
                    fail("BadInputFile", f"{path}:{k}", f"array {k!r} has non-numeric dtype {dtype}")
                arrays[k] = np.asarray(z[k])
    except PolysatError:
        raise
    except Exception as e:  # noqa: BLE001 — any unreadable file is the user's input problem
        fail("BadInputFile", path, f"cannot read as .npz: {type(e).__name__}: {e}")
    return arrays


def npz_members(names) -> dict:
    """Tensor name -> its npz member name: the name's '/'-separated parts without empty, '.' and '..' parts or
    control characters (a member never leaves the archive's root when unpacked), made unique."""
    out: dict = {}
    for name in names:
        parts = [p for p in re.split(r"[/\\]+", re.sub(r"[\x00-\x1f\x7f:]", "_", str(name))) if p not in ("", ".", "..")]
        base = "/".join(parts) or "_"
        member, k = base, 0
        while member in out.values():
            k += 1
            member = f"{base}_{k}"
        out[name] = member
    return out


def check_out(path: str) -> None:
    """--out names the file run writes: E1506 for '', a folder, a device, or a path whose folder cannot take it."""
    why = None
    if not path:
        why = "--out is empty"
    elif os.path.lexists(path) and not os.path.isfile(path):
        why = f"{path} exists and is not a regular file (a folder, a device or a broken link)"
    else:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.exists(folder) and not os.path.isdir(folder):
            why = f"{folder} is a file, not a folder"
        elif not os.path.isdir(folder):
            why = f"the folder {folder} does not exist"
        elif not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            why = f"{path} cannot be written (no permission)"
    if why:
        fail("BadOutputPath", "--out", why)


def save_npz(path: str, outputs: dict) -> dict:
    """Outputs in the .npz file path (exactly that path) under their member names (:func:`npz_members`); bf16 is
    saved as fp32 (npz has no portable bf16). Returns tensor name -> member name."""
    members = npz_members(outputs)
    out = {members[k]: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v) for k, v in outputs.items()}
    check_out(path)
    try:
        with open(path, "wb") as f:
            np.savez(f, **out)
    except OSError as e:
        fail("BadOutputPath", "--out", f"{path} cannot be written: {e.strerror or e}")
    return members


def cmd_run(a) -> int:
    if a.target not in TARGETS:
        fail("UnknownTarget", "--target", f"unknown target {a.target!r}; targets: {', '.join(TARGETS)}")
    c = compilation(a)
    c.program  # compile first: model errors before input errors
    if a.compile_only and a.target != "cuda":
        fail("InvalidAttribute", "--compile-only", f"--compile-only compiles for --target cuda, not {a.target}")
    if a.out is None and not a.compile_only:
        fail("InvalidAttribute", "--out", "run needs --out (the output .npz) unless --compile-only")
    if a.out is not None and not a.compile_only:
        check_out(a.out)  # before the run: a bad --out costs no compile
    from .frontend import check_int_inputs, with_parameters
    inputs = with_parameters(c.doc, load_npz(a.inputs, {n.arg["tensor_id"] for n in c.program.inputs}))
    check_int_inputs(c.program, inputs)
    try:
        outs = _run_cuda(c, inputs, compile_only=True) if a.compile_only else TARGETS[a.target](c, inputs)
    except PolysatError as e:
        from .pipeline import user_named
        raise PolysatError(user_named(c, e.diagnostics)) from None
    if a.compile_only:
        if a.json:
            print(json.dumps({"target": a.target, "compiled": True}))
        return 0
    members = save_npz(a.out, outs)
    if a.json:
        print(json.dumps({"target": a.target, "outputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                                                               "member": members[k]} for k, v in outs.items()},
                          "out": a.out}))
    else:
        for k, v in outs.items():
            print(f"{k}: {v.dtype}{list(v.shape)}" + (f" (saved as {members[k]!r})" if members[k] != k else ""))
        print(f"wrote {a.out} (target {a.target})")
    return 0


def random_inputs(program, bind: dict, seed: int) -> dict:
    """Random normal inputs for every INPUT, with symbols bound by `bind` or the default size."""
    from .ir.shapes import bind as bind_shape, symbols
    env = dict(bind)
    for n in program.inputs:
        for s in sorted(symbols(n.shape)):
            env.setdefault(s, knobs.demo_symbol_size())
    rng = np.random.default_rng(seed)
    return {n.arg["tensor_id"]: rng.standard_normal(bind_shape(n.shape, env)).astype(np.float32)
            for n in program.inputs}


def _parse_bind(text: str | None) -> dict:
    out = {}
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition("=")
        if not v.strip().isdigit() or int(v) <= 0:
            fail("InvalidAttribute", "--bind", f"--bind takes NAME=SIZE,..., got {part!r}")
        out[k.strip()] = int(v)
    return out


def _rounding_spread(c, inputs: dict, ref: dict, samples: int = 2) -> dict:
    """Per output, the largest move of the reference when every value it computes is moved by one rounding of its
    dtype, at random (``evaluate(nudge=)``, a few samples): what another fp32 evaluation order may differ by on an
    ill-conditioned output (random weights can make a deep network's output a difference of huge values)."""
    from .ir.evaluate import evaluate
    rng = np.random.default_rng(knobs.seed() + 1)
    out = {k: 0.0 for k in ref}
    for _ in range(samples):
        moved = evaluate(c.program, inputs, nudge=rng)
        for k, v in ref.items():
            if v.size:
                out[k] = max(out[k], float(np.nanmax(np.abs(moved[k].astype(np.float64) - v.astype(np.float64)))))
    return out


def cmd_demo(a) -> int:
    """Compile an example through every stage there is, dump each, run every target, verify."""
    from .ir.printer import format_program
    from .pipeline import DUMPS, write_dumps
    c = compilation(a)
    prog = c.program
    print(f"== {a.model}: Tiny IR ({len(prog.nodes)} nodes)")
    print(format_program(prog))
    out_dir = a.out or os.path.join("out", os.path.splitext(os.path.basename(a.model))[0])
    for w in write_dumps(c, list(DUMPS), out_dir, tolerant=True):
        print(f"  dump {w}")
    from .frontend import with_parameters
    params = (c.doc.get("parameters") or {}) if isinstance(c.doc, dict) else {}
    inputs = {k: v for k, v in random_inputs(prog, c.bind or {}, knobs.seed()).items() if k not in params}
    print("== inputs: " + ", ".join(f"{k}{list(v.shape)}" for k, v in inputs.items())
          + (f" (+ {len(params)} parameters of the model)" if params else ""))
    inputs = with_parameters(c.doc, inputs)
    ref, spread = TARGETS["reference"](c, inputs), None
    for k, v in ref.items():
        f = v.astype(np.float64)
        print(f"  {k}: {v.dtype}{list(v.shape)} mean={np.nanmean(f):.5g} min={np.nanmin(f):.5g} max={np.nanmax(f):.5g}")
    ok = True
    for name, run in TARGETS.items():
        if name == "reference":
            continue
        try:
            got = run(c, inputs)
        except PolysatError as e:
            print(f"  target {name}: unavailable ({e.diagnostics[0].kind}: {e.diagnostics[0].why})")
            continue
        for k in ref:
            a64, r64 = got[k].astype(np.float64), ref[k].astype(np.float64)
            good = np.allclose(a64, r64, rtol=1e-3, atol=1e-3, equal_nan=True)
            err = float(np.nanmax(np.abs(a64 - r64))) if a64.size else 0.0
            note = ""
            if not good:  # an ill-conditioned output: compared within what a rounding of each value moves it by
                from .checker.tolerance import GROW
                spread = (spread if spread is not None else _rounding_spread(c, inputs, ref))
                good = bool(np.all(np.isnan(a64) == np.isnan(r64))) and err <= GROW * spread[k]
                note = (f" (ill-conditioned: a rounding of each value moves it by {spread[k]:.3g}; "
                        f"tolerance {GROW:g}x that)") if good else f" (a rounding of each value moves it by {spread[k]:.3g})"
            ok &= good
            print(f"  verify {name} vs reference, {k}: max|diff| = {err:.3g} -> {'OK' if good else 'MISMATCH'}{note}")
    print("== verification " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


# ---- argument parsing -----------------------------------------------------------------------------

def cmd_rules(a) -> int:
    from .commands.rules import rules_command
    return rules_command(check=a.check, rules_dirs=a.rules or None, cases=a.cases, as_json=a.json, only=a.only)


def cmd_extract(a) -> int:
    from .commands.extract import extract_command
    return extract_command(compilation(a), as_json=a.json, explain=a.explain)


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    from .version import __version__
    from .pipeline import ARCHS, DUMPS
    p = argparse.ArgumentParser(prog="polysat", description="polysat: fusion as an e-graph search priced by "
                                "polyhedral analyses; CUDA for sm80/sm90 from one MMA template.")
    p.add_argument("--version", action="version", version=f"polysat {__version__}")
    sub = p.add_subparsers(dest="verb", required=True)

    def common(sp):
        sp.add_argument("model", help="model file: Frontend IR JSON ({signature, tensors, graph}), Tiny IR JSON ({uops}) "
                        "or an ONNX file (.onnx, opset 13 onward; its initializers are the parameters)")
        sp.add_argument("--arch", choices=ARCHS, default="sm90", help="target architecture (default sm90)")
        sp.add_argument("--json", action="store_true", help="machine-readable output (diagnostics as JSON too)")
        sp.add_argument("--rules", action="append", metavar="DIR",
                        help="extra rule directory (.egg files), in addition to the shipped rules/; repeatable")
        sp.add_argument("--cost", default=knobs.DEFAULT_COST, help=f"extraction cost model: model | size (default {knobs.DEFAULT_COST})")
        sp.add_argument("--bind", default=None, help="sizes of symbols, e.g. M=4096,N=4096: priced, planned (and the "
                        "demo's random inputs) at these sizes (unbound symbols: POLYSAT_PRICE_SYMBOL_SIZE=256 for "
                        "prices, POLYSAT_SYMBOL_SIZE=37 for the demo's inputs); an ONNX model whose shape "
                        "computations read a dynamic axis is imported at its bound size")

    c = sub.add_parser("compile", help="lower a model, list the kernels it makes, or write stage dumps",
                       description="Lower MODEL through the pipeline. Without --dump, extract the kernels "
                       "(under --cost) and list each with the user's ops it computes; with --dump, write the "
                       f"requested stage dumps as DIR/<stage>.json (pictures as .svg). Stages: {', '.join(DUMPS)}; "
                       "all = every stage. A stage that fails does not stop the ones that do not need it.")
    common(c)
    c.add_argument("--dump", default="", help=f"comma-separated stages to dump ({', '.join(DUMPS)}), or all")
    c.add_argument("--out", default="out", help="dump directory (default ./out)")
    c.add_argument("-v", "--verbose", action="store_true", help="print the Tiny IR")
    c.set_defaults(fn=cmd_compile)

    r = sub.add_parser("run", help="run a model on inputs from an .npz",
                       description="Run MODEL on IN.npz (keys = input tensor names; float arrays are cast to the "
                       "declared dtypes; symbolic dims bind from the shapes) and save the outputs to OUT.npz under "
                       f"their tensor names. Targets: {', '.join(TARGETS)}.")
    common(r)
    r.add_argument("--inputs", required=True, help="input .npz")
    r.add_argument("--out", default=None, help="output .npz (required unless --compile-only)")
    r.add_argument("--compile-only", action="store_true",
                   help="--target cuda only: compile the model at the shapes of --inputs (kernels, memory plan, "
                   "cubins for --arch) into POLYSAT_MODEL_CACHE and stop; no GPU needed")
    r.add_argument("--target", default="reference",
                   help=f"where to run: {', '.join(TARGETS)} (default reference); cuda runs each region as a kernel "
                   "of its kind (GEMM family, conv, conv + max-pool, flash attention, softmax scores, SIMT for the rest) in one "
                   "memory arena, replayed as a CUDA Graph, cached on disk and logged to POLYSAT_MEASURE_LOG; needs a GPU")
    r.set_defaults(fn=cmd_run)

    d = sub.add_parser("demo", help="compile an example, dump every stage, run and verify every target",
                       description="The main job: compile MODEL through every stage, write all dumps, run it on "
                       "random inputs on every available target and verify each against the reference evaluator "
                       "(rtol = atol = 1e-3; an output that misses it is held within 4x of how far a rounding of "
                       "each computed value moves the reference, and reported as ill-conditioned).")
    common(d)
    d.add_argument("--out", default=None, help="dump directory (default out/<model name>)")
    d.set_defaults(fn=cmd_demo)
    e = sub.add_parser("extract", help="saturate the e-graph and print the chosen regions (kernels)",
                       description="Load MODEL into the e-graph, saturate it with the rule files, extract the "
                       "cheapest partition into kernels under --cost, and print the regions with FLOPs, bytes, "
                       "estimated time and bound, plus the saturation report.")
    common(e)
    e.add_argument("--explain", action="store_true", help="list rejected fusions and why (illegal, or priced higher), and per user rule its matches and whether the chosen partition used it (compiled again without the rule)")
    e.set_defaults(fn=cmd_extract)

    ru = sub.add_parser("rules", help="list the rewrite rules, or check their soundness",
                        description="List every rule (file, name, ruleset, law) of rules/ and --rules DIRs; with "
                        "--check, test each rule's soundness on programs built from its left-hand side and on random programs "
                        "(exit 0: all sound and exercised, 1: a rule is unsound or a file is broken, 2: a rule never fired).")
    ru.add_argument("--rules", action="append", metavar="DIR", help="extra rule directory; repeatable")
    ru.add_argument("--check", action="store_true", help="check soundness on random programs")
    ru.add_argument("--cases", type=int, default=None,
                    help="test programs each rule must fire on (default POLYSAT_RULE_CASES); exit 2 when one fires on fewer")
    ru.add_argument("--only", action="append", metavar="FILE|NAME",
                    help="check only this rule file or rule name (every rule file stays loaded as context); repeatable")
    ru.add_argument("--json", action="store_true", help="JSON output")
    ru.set_defaults(fn=cmd_rules)
    return p


def _report(diags: list[Diagnostic], as_json: bool) -> None:
    if as_json:
        print(dumps(diags))
    else:
        for dg in diags:
            print(f"error: {dg}" if dg.is_error else f"warning: {dg}", file=sys.stderr)


def debugged(fn: Callable, *args):
    """fn(*args), its traceback printed under POLYSAT_DEBUG=1 when it fails with anything but a diagnostic.
    The recursion limit stays Python's: no walk over a model recurses along its size (docs/DESIGN.md
    §Diagnostics)."""
    try:
        return fn(*args)
    except PolysatError:
        raise
    except BaseException:
        if knobs.debug():
            traceback.print_exc()
        raise


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    progress.quiet(as_json)  # a --json command shows no progress unless POLYSAT_PROGRESS=1 forces it
    watchdog.set_reporter(lambda diags: _report(diags, as_json))  # an egglog call past its bound (E1505)
    try:
        return _command(argv, as_json)
    finally:
        watchdog.set_reporter(None)  # the command is over: a library call after it must not end the process


def _command(argv: list, as_json: bool) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        return debugged(args.fn, args)
    except PolysatError as e:
        _report(e.diagnostics, as_json)
        return 1
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except RecursionError:  # a walk that still recurses along the model: a bound, not the model's fault
        _report([diag("ResourceLimit", getattr(args, "model", "polysat"), f"a walk over the model went deeper than "
                      f"Python's {sys.getrecursionlimit()} frames", "Compile a shallower model (or split it); "
                      "POLYSAT_DEBUG=1 shows where.")], as_json)
        return 1
    except Exception as e:  # noqa: BLE001 — a bug must still not dump a traceback on the user
        _report([diag("InternalError", getattr(args, "model", "polysat"), f"{type(e).__name__}: {e}")], as_json)
        return 1
