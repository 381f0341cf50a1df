"""Four small real architectures built as ONNX graphs in code (examples/onnx_models.py), randomly
initialized: imported, compiled with --cost model, run on the reference evaluator and on playback of
the extracted kernels, and compared with onnxruntime (rtol = atol = 1e-3)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from polysat.cli import TARGETS
from polysat.examples.onnx_models import MODELS, build
from polysat.frontend import with_parameters
from polysat.frontend.onnx import import_onnx
from polysat.pipeline import Compilation


def _feeds(m) -> dict:
    """Random inputs: floats, or token ids (int64, negative ones counting from the end of the vocabulary)."""
    rng = np.random.default_rng(7)
    out = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.integers(-100, 100, shape).astype(np.int64) if i.type.tensor_type.elem_type == 7
                       else rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name):
    m = build(name)
    feeds = _feeds(m)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    doc = import_onnx(m)
    c = Compilation(doc, cost="model")
    inputs = with_parameters(doc, feeds)
    for target in ("reference", "playback"):
        got = TARGETS[target](c, inputs)
        outs = [got[e["tensor"]] for e in doc["signature"]["outputs"]]
        for g, w in zip(outs, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3, err_msg=f"{name} on {target}")
    compute = [n for n in m.graph.node if n.op_type not in ("Shape", "Gather", "Concat", "Identity")]
    assert 1 <= len(c.regions) < len(compute) // 2, (name, len(c.regions), len(compute))  # fused, not op by op
