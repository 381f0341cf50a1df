"""A convolution whose lowered product (every output element times every tap) is over POLYSAT_EVAL_MAX_ELEMENTS
still evaluates, in the reference evaluator and in playback, when its inputs and outputs fit: it is a contraction
of its operands (or, in playback where an operand spans the product, one block of output positions at a time;
onnx's light AlexNet: a grouped 5x5 conv whose product has 207M elements). The values equal torch's conv2d and, bit
for bit, the evaluation without the limit."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.egraph.region_synth import default_partition, synthesize
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

# X (1, 4, 9, 9), W (6, 2, 3, 3), groups 2, pad 1: the product has 1*2*3*9*9*2*3*3 = 8748 elements.
CONV = oracle.model({"X": ("fp32", [1, 4, 9, 9]), "W": ("fp32", [6, 2, 3, 3]), "B": ("fp32", [6])},
                    [oracle.node("Conv2D", ["X", "W", "B"], "C", groups=2, pad=[1, 1, 1, 1]),
                     oracle.node("Elementwise", ["C"], "Y", fn="relu")], ["Y"])


def _inputs():
    rng = np.random.default_rng(0)
    return {"X": rng.standard_normal((1, 4, 9, 9)).astype(np.float32),
            "W": rng.standard_normal((6, 2, 3, 3)).astype(np.float32),
            "B": rng.standard_normal((6,)).astype(np.float32)}


def _torch(x):
    import torch
    y = torch.nn.functional.conv2d(torch.from_numpy(x["X"]), torch.from_numpy(x["W"]), torch.from_numpy(x["B"]),
                                   padding=1, groups=2)
    return torch.relu(y).numpy()


@pytest.mark.parametrize("target", ["reference", "playback"])
def test_a_conv_product_past_the_limit_is_summed_in_blocks(monkeypatch, target):
    program = load_model(CONV)
    x = _inputs()
    run = (lambda: evaluate(program, x)["Y"]) if target == "reference" else \
        (lambda: playback(synthesize(program, default_partition(program)), x)["Y"])
    whole = run()
    monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "3000")  # the window view (2916) fits; the product not
    got = run()
    np.testing.assert_allclose(got, _torch(x), rtol=1e-5, atol=1e-5)
    assert np.array_equal(got, whole)


@pytest.mark.parametrize("target,code", [("reference", "E1007"), ("playback", "E1505")])
def test_a_single_output_element_past_the_limit_is_still_refused(monkeypatch, target, code):
    """The sum of a 1-element input broadcast to 5000: no block of output positions is under a 4999-element
    limit, so the evaluators refuse; under 5000 it runs."""
    program = load_model(oracle.model({"X": ("fp32", [1, 1])},
                                      [oracle.node("Expand", ["X"], "E", shape=[1, 5000]),
                                       oracle.node("Reduce", ["E"], "Y", op="sum", axes=[1])], ["Y"]))
    x = {"X": np.full((1, 1), 0.5, np.float32)}
    run = (lambda: evaluate(program, x)["Y"]) if target == "reference" else \
        (lambda: playback(synthesize(program, default_partition(program)), x)["Y"])
    monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "5000")
    assert run().tolist() == [2500.0]
    monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "4999")
    with pytest.raises(PolysatError) as e:
        run()
    assert e.value.diagnostics[0].code == code


def test_an_fp32_product_is_not_copied_to_be_rounded(monkeypatch):
    """An elementwise op's fresh fp32 result is already fp32: the reference and playback keep it instead of copying it
    whole to round it (copies of VGG-19's conv products were 270 of 430 s of its reference at 224 px); the
    values are torch's conv2d as before."""
    from polysat.ir import dtypes, evaluate as ev, playback as pb
    program = load_model(CONV)
    rounded = []
    real = dtypes.round_to

    def recording(x, dt):
        rounded.append(np.shape(x))
        return real(x, dt)
    for module in (dtypes, ev, pb):
        monkeypatch.setattr(module, "round_to", recording)
    x = _inputs()
    np.testing.assert_allclose(evaluate(program, x)["Y"], _torch(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(playback(synthesize(program, default_partition(program)), x)["Y"], _torch(x),
                               rtol=1e-5, atol=1e-5)
    assert rounded and all(int(np.prod(s)) < 8748 for s in rounded), rounded  # no product went through round_to


@pytest.mark.parametrize("target", ["reference", "playback"])
@pytest.mark.parametrize("contract", [True, False])
def test_a_conv_is_one_matrix_product_not_its_product_tensor(monkeypatch, target, contract):
    """A convolution's REDUCE(SUM) of an fp32 MUL with more products than POLYSAT_EVAL_CONTRACT_ELEMENTS is evaluated
    as a contraction: no elementwise multiply runs (the literal evaluation multiplies all 8748 products, VGG-19's
    19.5G at 224 px, which ran for thousands of seconds), and the BLAS products do exactly output elements x taps
    multiply-adds; with fewer, the 8748 products are summed literally. Values as torch's conv2d."""
    monkeypatch.setenv("POLYSAT_EVAL_CONTRACT_ELEMENTS", "8747" if contract else "8748")
    from polysat.ir import evaluate as ev
    from polysat.ir.tiny import Ops
    multiplied, products = [], []
    real_mul, real_matmul = ev._BINARY[Ops.MUL], np.matmul

    def mul(a, b):
        out = real_mul(a, b)
        multiplied.append(np.size(out))
        return out

    def matmul(a, b):
        products.append(a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2])
        return real_matmul(a, b)
    monkeypatch.setitem(ev._BINARY, Ops.MUL, mul)
    monkeypatch.setattr(np, "matmul", matmul)
    program = load_model(CONV)
    x = _inputs()
    got = evaluate(program, x)["Y"] if target == "reference" else \
        playback(synthesize(program, default_partition(program)), x)["Y"]
    np.testing.assert_allclose(got, _torch(x), rtol=1e-5, atol=1e-5)
    assert sum(multiplied) == (0 if contract else 8748), multiplied
    assert sum(products) == (1 * 6 * 9 * 9 * 2 * 3 * 3 if contract else 0), products  # N Co Ho Wo x Cg Kh Kw
