"""The fusion legality facts (rules/fusion.egg ``fusion-facts``) stay small on the graphs that made them blow up:
a walk is rooted only where a kernel can start, a path is one fact whatever spelling of a read it crossed, and a
concatenation of many pieces is a balanced sum (docs/DESIGN.md §Fusion; frontend/lower_gather.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from polysat.bench.corpora.scale_models import WeightFree, _io
from polysat.frontend import program_from_doc, with_parameters
from polysat.frontend.onnx import import_onnx
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny import Ops
from polysat.pipeline import Compilation


def _dense_block(layers: int) -> dict:
    """A DenseNet block: each layer's conv-BN-ReLU output concatenated to everything before it."""
    g = WeightFree()
    x, cin = "image", 16
    for _ in range(layers):
        x = g.op("Concat", [x, g.conv_bn(x, cin, 8, 3)], axis=1)
        cin += 8
    g.op("Identity", [x])
    g.nodes[-1].output[0] = "out"
    return import_onnx(g.built([_io("image", [1, 16, 8, 8])], "out", [1, cin, 8, 8], "dense"))


def _facts(doc) -> tuple:
    """(eval-at rows, the e-graph's frozen tables, the search's stop) of a --cost model compile."""
    c = Compilation(doc, cost="model")
    st, rep = c.saturated
    assert rep.stop.value == "saturated", rep.stop
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    return len(fz["eval-at"].rows), fz, c


def test_a_dense_block_keeps_its_facts_polynomial_and_roots_walks_only_where_kernels_start():
    """Each layer's conv reads every concatenation below it through a read of its own spelling per layer: one
    fact a path, not one per spelling (45,282 eval-at rows at 6 layers when the read was recorded, 2,493 now);
    a walk starts only at a materialized value or a program output."""
    n4, _, _ = _facts(_dense_block(4))
    n8, fz, c = _facts(_dense_block(8))
    assert n8 < 6000 and n8 < 4 * n4, (n4, n8)  # quadratic in the layers at most (exponential: 9,776 at 4)
    mats = {r.inputs[0] for r in fz["Mat"].rows}
    outs = {r.inputs[0] for r in fz["program-out"].rows}
    tops = [r.inputs[0] for r in fz["Top"].rows]
    assert tops and all(t in mats or t in outs for t in tops)
    assert c.search.best.total < c.search.baseline.total  # and the search ran on those facts


def test_a_wide_concatenation_is_a_balanced_sum_and_means_what_onnxruntime_computes():
    """13 pieces concatenated: ceil(log2 13) = 4 adds from the result to any piece, the same values as
    onnxruntime's Concat (each element one piece's value plus zeros)."""
    k = 13
    ins = [helper.make_tensor_value_info(f"x{j}", TensorProto.FLOAT, [2, j % 3 + 1]) for j in range(k)]
    width = sum(j % 3 + 1 for j in range(k))
    g = helper.make_graph([helper.make_node("Concat", [f"x{j}" for j in range(k)], ["y"], axis=1)], "cat", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    rng = np.random.default_rng(0)
    feeds = {f"x{j}": rng.standard_normal((2, j % 3 + 1)).astype(np.float32) for j in range(k)}
    feeds["x0"][0, 0] = -0.0
    doc = import_onnx(m)
    p = program_from_doc(doc)
    depth: dict = {}
    for n in p.nodes:
        depth[n.id] = max((depth[s] for s in n.src), default=0) + (n.op == Ops.ADD)
    (_, out), = p.outputs
    assert depth[out] == 4, depth[out]
    got = evaluate(p, with_parameters(doc, feeds))["y"]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
