"""Builds the `loupe` package: the pure-Python files of loupe/ plus the compiled module _loupe,
which CMake builds from the repository this folder belongs to (target loupe_python, nothing else:
no tests, benches or kda). Needs cmake, ninja, a C++20 compiler and loupe's Debian build
dependencies (scripts/install-deps). Offline:

    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation ./python
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        package_dir = os.path.join(build_dir, "package")
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
            "-DLOUPE_BUILD_TESTS=OFF", "-DLOUPE_BUILD_BENCH=OFF", "-DLOUPE_BUILD_KDA=OFF",
            "-DLOUPE_BUILD_PYTHON=ON", "-DLOUPE_PYTHON=" + sys.executable,
            "-DLOUPE_PYTHON_DIR=" + package_dir, "-DLOUPE_BIN_DIR=" + os.path.join(build_dir, "bin"),
        ]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.check_call(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "loupe_python",
                               "-j", jobs])
        built = [name for name in os.listdir(os.path.join(package_dir, "loupe"))
                 if name.startswith("_loupe") and name.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError("expected one _loupe*.so in %s, found %s" % (package_dir, built))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(package_dir, "loupe", built[0]), target)


setup(
    name="loupe",
    version="0.1.0",
    description="Dense, objective feedback for inference engineers: tensor diffs that say where, "
                "assert_close with localisation, layer dumps, trace analyses, probes",
    packages=["loupe"],
    package_data={"loupe": ["py.typed"]},
    ext_modules=[CMakeExtension("loupe._loupe")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    entry_points={"pytest11": ["loupe = loupe.pytest_plugin"]},
    zip_safe=False,
)
