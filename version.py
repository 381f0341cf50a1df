"""polysat's version: the one pyproject.toml declares (the source tree's, else the installed package's)."""
from __future__ import annotations

import pathlib
import tomllib
from importlib.metadata import version


def _version() -> str:
    """The version pyproject.toml declares (the source tree's, else the installed package's)."""
    py = pathlib.Path(__file__).resolve().parent / "pyproject.toml"
    if py.is_file():
        with open(py, "rb") as f:
            return tomllib.load(f)["project"]["version"]
    return version("polysat")


__version__ = _version()
