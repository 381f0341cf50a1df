"""Packages are found, not listed: the source tree is the package ``polysat``, and each folder under it
with an ``__init__.py`` (``tests/`` has none) is its subpackage of the same name. This file is the build's,
not the package's. Everything else is in pyproject.toml."""
import pathlib

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
SUBPACKAGES = find_packages(where=str(HERE), exclude=["tests", "tests.*", "build", "build.*"])


class BuildPy(build_py):
    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if (package, m[1]) != ("polysat", "setup")]


setup(package_dir={"polysat": "."}, packages=["polysat"] + [f"polysat.{p}" for p in SUBPACKAGES],
      cmdclass={"build_py": BuildPy})
