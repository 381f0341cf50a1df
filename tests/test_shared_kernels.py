"""Identical kernels are bound, planned, rendered and compiled once (backend/common/canonical.py): a region's
kernel text does not depend on its tensors' names; the launch table keeps which of the user's tensors each
launch binds, the runtime launches the shared kernel on the right buffers, and the dumps and diagnostics name
the user's tensors."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from polysat import cli
from polysat.backend import kinds, stages
from polysat.backend.common.canonical import canonical
from polysat.ir.diagnostics import PolysatError, fail
from polysat.ir.playback import playback
from polysat.ir.region import region_json
from polysat.ir.region_load import region_from_json
from polysat.pipeline import Compilation
from polysat.runtime.host import HostReplayRuntime, host_runtime
from polysat.runtime.model import parameter_names

T, D, F = 32, 64, 128


def _layers(n: int) -> dict:
    """n residual MLP layers (GEMM + bias + ReLU, GEMM + bias + residual), each with its own weights and names."""
    tensors = {"X0": {"dtype": "fp16", "shape": [T, D]}}
    graph, inputs = [], [{"tensor": "X0"}]
    for k in range(n):
        x, y = f"X{k}", f"X{k + 1}"
        for w, shape in ((f"W{k}a", [D, F]), (f"b{k}a", [F]), (f"W{k}b", [F, D]), (f"b{k}b", [D])):
            tensors[w] = {"dtype": "fp16", "shape": shape}
            inputs.append({"tensor": w, "role": "param"})
        tensors[y] = {"dtype": "fp16", "shape": [T, D]}
        graph += [{"op": "GEMM", "name": f"fc{k}a", "inputs": [x, f"W{k}a"], "outputs": [f"G{k}"]},
                  {"op": "Elementwise", "name": f"bias{k}a", "fn": "add", "inputs": [f"G{k}", f"b{k}a"], "outputs": [f"A{k}"]},
                  {"op": "Elementwise", "name": f"relu{k}", "fn": "relu", "inputs": [f"A{k}"], "outputs": [f"H{k}"]},
                  {"op": "GEMM", "name": f"fc{k}b", "inputs": [f"H{k}", f"W{k}b"], "outputs": [f"P{k}"]},
                  {"op": "Elementwise", "name": f"bias{k}b", "fn": "add", "inputs": [f"P{k}", f"b{k}b"], "outputs": [f"Q{k}"]},
                  {"op": "Elementwise", "name": f"res{k}", "fn": "add", "inputs": [f"Q{k}", x], "outputs": [y]}]
    return {"signature": {"inputs": inputs, "outputs": [{"tensor": f"X{n}"}]}, "tensors": tensors, "graph": graph}


def _inputs(n: int) -> dict:
    rng = np.random.default_rng(7)
    out = {"X0": rng.uniform(-1, 1, (T, D)).astype(np.float16)}
    for k in range(n):
        out |= {f"W{k}a": rng.uniform(-0.2, 0.2, (D, F)).astype(np.float16), f"b{k}a": rng.uniform(-1, 1, F).astype(np.float16),
                f"W{k}b": rng.uniform(-0.2, 0.2, (F, D)).astype(np.float16), f"b{k}b": rng.uniform(-1, 1, D).astype(np.float16)}
    return out


def _numpy(ins: dict, n: int) -> np.ndarray:
    """The layers in numpy (fp32 accumulation, fp16 tensors between ops): the independent oracle."""
    h16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    x = ins["X0"].astype(np.float32)
    for k in range(n):
        g = h16(x @ ins[f"W{k}a"].astype(np.float32))
        h = h16(np.maximum(h16(g + ins[f"b{k}a"]), 0))
        p = h16(h @ ins[f"W{k}b"].astype(np.float32))
        x = h16(h16(p + ins[f"b{k}b"]) + x)
    return x


@pytest.fixture(scope="module")
def three():
    return Compilation(_layers(3), cost="model")


def test_identical_layers_share_one_kernel_text(three, tmp_path):
    regions = three.regions
    made = stages.launches(regions, "sm90")
    texts = {ks.source for _, ks, _ in made}
    assert len(made) == len(regions) == 6
    # layer 0 and 1 are the same two kernels; the last layer's second kernel writes the program output
    assert made[0][1] is made[2][1] is made[4][1] and made[1][1] is made[3][1] and len(texts) == 3
    for r, ks, _ in made:  # no user name reaches the kernel text
        assert not any(f" {b.name}[" in ks.source or f"t_{b.name}" in ks.source for b in (*r.inputs, *r.outputs))
    doc = stages.cu_json(regions, "sm90", str(tmp_path))
    assert len(doc["files"]) == 3 == len(os.listdir(tmp_path))
    by_region = {x["region"]: x for x in doc["launches"]}
    for r in regions:  # each launch binds the region's own tensors, the kernel's parameters in order
        assert list(by_region[r.name]["tensors"].values()) == [b.name for b in (*r.inputs, *r.outputs)]
    first, second = doc["launches"][0], doc["launches"][2]
    assert first["file"] == second["file"] and first["tensors"]["T1"] == "W0a" and second["tensors"]["T1"] == "W1a"
    head = open(first["file"], encoding="utf-8").read().split("#include", 1)[0]
    assert "launched by 3 region(s)" in head and "T1 = W0a" in head and "T1 = W2a" in head


def test_the_shared_kernels_run_on_each_layers_buffers(three):
    """The host runtime launches each kind's numpy meaning of the shared spec on the region's own views: with
    distinct weights per layer, a wrongly bound buffer changes the answer."""
    ins = _inputs(3)
    want = _numpy(ins, 3)
    params = parameter_names(three.doc)
    got = host_runtime(three.regions, params).run(ins)["X3"].astype(np.float32)
    ref = playback(three.regions, ins)["X3"].astype(np.float32)
    assert np.max(np.abs(got - want)) < 3e-2 and np.max(np.abs(ref - want)) < 3e-2
    assert np.max(np.abs(got - ref)) < 3e-2
    rt = HostReplayRuntime(three.regions, params)
    first = rt.run(ins)["X3"]
    again = rt.run(ins)["X3"]  # replayed from the recorded launches
    assert rt.replays == 1 and np.array_equal(first, again)
    (rec,) = rt.records.values()
    assert [name for name, _ in rec.launches] == [r.name for r in three.regions]


def test_canonical_form_is_name_free_and_leads_back():
    c = Compilation(_layers(2), cost="model")
    a, b = c.regions[0], c.regions[2]
    (ca, na), (cb, nb) = canonical(a), canonical(b)
    assert a != b and ca == cb and hash(ca) == hash(cb)
    assert dict(na.tensors)["T0"] == "X0" and dict(nb.tensors)["T0"] == b.inputs[0].name
    assert na.told("T0 and T10 of R0") == f"X0 and T10 of {a.name}"


def test_a_diagnostic_of_the_shared_binding_names_the_users_tensors(tmp_path):
    soft = Compilation("examples/softmax.json").regions
    doc = json.loads(json.dumps(region_json(soft[0])))
    doc["region"]["outputs"][0]["memref"]["layout"] = {"kind": "col_major"}
    odd = region_from_json(doc)
    with pytest.raises(PolysatError) as e:
        kinds.bind_shared(odd)
    d = e.value.diagnostics[0]
    out = odd.outputs[0].name
    assert d.code == "E1504" and f"'{out}'" in d.why and "'T" not in d.why and "R0" not in d.at + d.why


def test_dumps_tell_specs_in_the_users_names(tmp_path):
    rc = cli.main(["compile", "examples/mlp.json", "--dump=plan,cu", "--out", str(tmp_path)])
    assert rc == 0
    plans = json.load(open(tmp_path / "plan.json"))["plans"]
    assert plans[0]["spec"]["name"] == plans[0]["region"] and (plans[0]["spec"]["a"], plans[0]["spec"]["b"]) == ("X", "W1")
    assert plans[0]["spec"]["epilogue"][0]["tensor"] == "b1"
    cu = json.load(open(tmp_path / "cu.json"))
    assert [x["region"] for x in cu["launches"]] == [p["region"] for p in plans]
    assert all(x["file"] in cu["files"] for x in cu["launches"])


def test_a_failing_launch_names_its_region(three):
    """The kernels of identical layers share one spec (its name is the canonical form's), so a diagnostic raised by
    a launch is told which region of the model it came from."""
    def broken(kind, spec, tensors, env, out):
        fail("UnknownTarget", "--target cuda", f"{kind.name} kernel {spec.name!r} failed: CUDA_ERROR_LAUNCH_FAILED")
    with pytest.raises(PolysatError) as e:
        host_runtime(three.regions, parameter_names(three.doc), launch=broken).run(_inputs(3))
    (d,) = e.value.diagnostics
    first = three.regions[0].name
    assert f"region {first!r}" in d.why and dict(d.details)["region"] == first and d.code.startswith("E")
