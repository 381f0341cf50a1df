"""The ONNX backend node tests through polysat's ``onnx.backend`` Backend (commands/onnx_backend.py).

Every node test case whose ops polysat takes runs on the reference evaluator; playback (the e-graph
pipeline down to RB-SSA regions, about a second a case) runs a sample of PLAYBACK_PER_OP cases per op
(``python -m polysat.bench.onnx_node`` runs them all). Each op's pass rate over the cases that were
not declined must reach MIN_RATE; a declined case must carry a coded diagnostic (an unsupported
dtype, op or attribute, or an empty tensor), never an uncoded refusal.
"""
from __future__ import annotations

import unittest

import pytest

from polysat.bench.onnx_node import run, summary
from polysat.commands.onnx_backend import ReferenceBackend, node_cases

MIN_RATE = 0.95
PLAYBACK_PER_OP = 1
DECLINE_CODES = ("E1011", "E1102", "E1007")


@pytest.fixture(scope="module")
def cases():
    return node_cases()


def _check(res: dict) -> None:
    low = {op: v for op, v in res["per_op"].items() if v["pass"] + v["fail"]
           and v["pass"] / (v["pass"] + v["fail"]) < MIN_RATE}
    fails = [d for d in res["details"] if d["verdict"] == "fail"]
    assert not low, f"{summary(res)}; ops under {MIN_RATE:.0%}: {low}; failures: {fails}"
    for d in res["details"]:
        if d["verdict"] == "declined":
            assert d["why"].startswith(DECLINE_CODES), d
    assert sum(v["pass"] for v in res["per_op"].values()) > 0


def test_node_tests_reference(cases):
    res = run("reference", cases)
    _check(res)
    ran = sum(v["pass"] + v["fail"] for v in res["per_op"].values())
    assert ran >= 450, summary(res)  # the op set's cases, not a handful


def test_node_tests_playback_sample(cases):
    res = run("playback", cases, PLAYBACK_PER_OP)
    _check(res)
    assert len(res["per_op"]) >= 60, summary(res)  # every op, one case each


def test_backend_test_api_runs_polysat():
    """onnx.backend.test.BackendTest drives the backend: selected ops run and pass, none skipped."""
    from onnx.backend.test import BackendTest
    import re
    bt = BackendTest(ReferenceBackend, __name__)
    chosen = re.compile(r"^test_(relu|gemm_default_matrix_bias|conv_with_strides_padding|softmax_axis_1|"
                        r"layer_normalization_4d_axis1|transpose_default|maxpool_2d_pads)_cpu$")
    bt.include(chosen.pattern)  # the others are loaded as skipped by BackendTest itself
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c)
                               for c in bt.test_cases.values())
    result = unittest.TextTestRunner(verbosity=0).run(suite)
    ran = result.testsRun - len(result.skipped)
    assert ran == 7 and not result.failures and not result.errors, result
    assert not [t for t, _ in result.skipped if chosen.match(t._testMethodName)]
