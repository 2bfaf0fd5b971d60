"""pip build of tf_ps_ops: the op library, the ps_server binary and the test core module,
compiled from the same sources as Bazel's BUILD by tools/native_build.py.

    python3 setup.py build_tfps      # in place, parallel, incremental (what `make build` runs)
    pip install .                    # the same, then packaged
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
    """Builds the native artifacts before the package files are collected."""

    def run(self):
        native_build.build()
        super().run()


setup(
    name="tf_ps_ops",
    version="0.1.0",
    description="Parameter-server data-parallel training for TensorFlow (Horovod/BytePS API)",
    packages=find_packages(include=["tf_ps_ops", "tf_ps_ops.*", "sfb"]),
    package_data={"tf_ps_ops": ["_tf_ps_ops.so", "_core*.so", "bin/ps_server"]},
    python_requires=">=3.9",
    install_requires=["tensorflow==2.21.*", "numpy", "pyzmq", "absl-py", "pybind11"],
    entry_points={"console_scripts": ["tfps-run = tf_ps_ops.run:main",
                                      "ps_server = tf_ps_ops.server_main:main"]},
    distclass=BinaryDistribution,
    cmdclass={"build_tfps": BuildTfps, "build_py": BuildPyWithNative},
    zip_safe=False,
)
