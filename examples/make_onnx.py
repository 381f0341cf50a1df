"""Write examples/gpt2_block.onnx: the GPT-2-style decoder block of examples/onnx_models.py at a small
size (sequence 16, width 32, 2 heads), randomly initialized with a fixed seed.

    python -m polysat.examples.make_onnx [--out PATH]
"""
from __future__ import annotations

import argparse
import pathlib

from .onnx_models import gpt2_block

HERE = pathlib.Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(HERE / "gpt2_block.onnx"))
    a = ap.parse_args(argv)
    m = gpt2_block(seed=2, s=16, d=32, h=2)
    pathlib.Path(a.out).write_bytes(m.SerializeToString())
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
