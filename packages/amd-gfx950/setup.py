"""Build hook: compile the HIP kernels into code objects shipped as package
data. Runs clang (clang++-22 or any HIP-capable clang) when it is there; when
it is not, the package still installs and its probe says the code objects are
missing (codeobj/BUILD.json records why)."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _build_module():
    spec = importlib.util.spec_from_file_location("_stk_amd_build", HERE / "src" / "sparsetopk_amd" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildPyWithCodeObjects(build_py):
    def run(self):
        _build_module().build_code_objects()
        super().run()


setup(cmdclass={"build_py": BuildPyWithCodeObjects})
