"""The package's version: pyproject.toml reads it from here (setuptools' `attr:`), the
package exports it as `tf_ps_ops.__version__`, `tfps-run --version` prints it, and
ps_server's copy (tf_ps_ops/cc/common/version.h) is checked against it by a unit test."""

__version__ = "0.1.0"
