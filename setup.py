"""Builds the extension `attnlab._attnlab` with CMake (target attnlab_python) for pip.

The CMake build folder is $ATTNLAB_BUILD_DIR if set (an existing configured build, e.g. build/,
is reused: only the module is built), else build-pip/ (configured without tests or benchmarks).
The package carries the bundled default model and sample text, so `attnlab.load()` works from
any directory after `pip install`.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
BUNDLED = ["data/default-model/config.json", "data/default-model/model.safetensors",
           "data/sample.txt"]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("ATTNLAB_BUILD_DIR") or os.path.join(ROOT, "build-pip")
        if not os.path.isabs(build_dir):
            build_dir = os.path.join(ROOT, build_dir)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                "-DATTNLAB_BUILD_TESTS=OFF", "-DATTNLAB_BUILD_BENCHMARKS=OFF",
                "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "attnlab_python",
                               "-j", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(build_dir, "python", "attnlab", "_attnlab*.so"))
        if len(built) != 1:
            raise RuntimeError("expected one _attnlab*.so under %s, found %r" % (build_dir, built))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


class BuildPyWithData(build_py):
    """The pure-Python files plus the bundled data and a _paths.py pointing at it."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "attnlab")
        for rel in BUNDLED:
            dst = os.path.join(pkg, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, rel), dst)
        with open(os.path.join(pkg, "_paths.py"), "w") as f:
            f.write("import os\nRESOURCE_ROOT = os.path.dirname(os.path.abspath(__file__))\n")


setup(
    packages=["attnlab"],
    package_dir={"attnlab": "python/attnlab"},
    ext_modules=[Extension("attnlab._attnlab", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithData},
    zip_safe=False,
    # setuptools' own scratch space, away from CMake's build/ folder.
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")}},
)
