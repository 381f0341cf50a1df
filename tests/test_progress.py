"""A long compile shows its stages on stderr when asked (a terminal, or POLYSAT_PROGRESS=1), never on stdout
and never in a --json command's output unless forced (ir/progress.py)."""
from __future__ import annotations

import json
import pathlib
import re

from polysat.cli import main

EX = str(pathlib.Path(__file__).resolve().parent.parent / "examples" / "gemm_bias_relu.json")


def test_forced_progress_names_the_stages_on_stderr_only(capsys, monkeypatch):
    monkeypatch.setenv("POLYSAT_PROGRESS", "1")
    assert main(["extract", EX, "--cost", "model"]) == 0
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.startswith("polysat [")]
    for stage in ("tiny", "saturated", "search", "priced"):
        assert any(re.search(rf"\]\s+{stage} \.\.\.$", ln) for ln in lines), (stage, err)
        assert any(re.search(rf"\]\s+{stage} done \(", ln) for ln in lines), (stage, err)
    assert any("iteration 0 (normalize):" in ln for ln in lines) and any("merge search:" in ln for ln in lines), err
    assert "polysat [" not in out


def test_json_output_stays_clean_even_when_forced(capsys, monkeypatch):
    monkeypatch.setenv("POLYSAT_PROGRESS", "1")
    assert main(["extract", EX, "--cost", "model", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout is the JSON document alone
    assert "saturated ..." in err


def test_no_progress_when_stderr_is_not_a_terminal_or_off(capsys, monkeypatch):
    monkeypatch.delenv("POLYSAT_PROGRESS", raising=False)
    assert main(["extract", EX, "--cost", "model"]) == 0  # capsys: stderr is no terminal
    assert "polysat [" not in capsys.readouterr().err
    monkeypatch.setenv("POLYSAT_PROGRESS", "0")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert main(["extract", EX, "--cost", "model"]) == 0
    assert "polysat [" not in capsys.readouterr().err
