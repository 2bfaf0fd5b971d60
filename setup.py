"""pip build of tf_ps_ops: the op library, the ps_server binary and the core module,
compiled from the same sources as Bazel's BUILD by tools/native_build.py. The package's
metadata is in pyproject.toml; this file only hooks the native build into setuptools.

    python3 setup.py build_tfps      # in place, parallel, incremental (what `make build` runs)
    pip install .                    # builds in place, then packages (a platform wheel)
    pip install -e .                 # builds in place; the checkout is what Python imports
    pip install --no-build-isolation .   # compiles against the TensorFlow already installed
"""

import os
import sys

from setuptools import Command, Distribution, find_packages, setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import native_build  # noqa: E402


class BuildTfps(Command):
    description = "compile the op library, ps_server and the core module in place"
    user_options = [("jobs=", "j", "parallel compile jobs")]

    def initialize_options(self):
        self.jobs = None

    def finalize_options(self):
        self.jobs = int(self.jobs) if self.jobs else None

    def run(self):
        native_build.build(jobs=self.jobs)


class BinaryDistribution(Distribution):
    """The wheel carries compiled code: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


class BuildPyWithNative(build_py):
    """Compiles the native parts in place before the package files are collected.

    `pip install -e .` runs this too (setuptools' editable_wheel runs build_py in editable
    mode): the artifacts land next to the sources the editable install points at.
    """

    def run(self):
        native_build.build()
        super().run()


setup(
    packages=find_packages(include=["tf_ps_ops", "tf_ps_ops.*", "sfb"]),
    package_data={"tf_ps_ops": native_build.PACKAGE_DATA},
    zip_safe=False,
    distclass=BinaryDistribution,
    cmdclass={"build_tfps": BuildTfps, "build_py": BuildPyWithNative},
)
