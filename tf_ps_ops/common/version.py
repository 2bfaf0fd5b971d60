"""The package's version: pyproject.toml reads it from here (setuptools' `attr:`), the
package exports it as `tf_ps_ops.__version__`, `tfps-run --version` prints it, and
ps_server's copy (tf_ps_ops/cc/common/version.h) is checked against it by a unit test."""

__version__ = "0.1.0"

# What to do when a native part (op library, ps_server, _core) is missing, for a checkout
# and for a pip install; stdlib-only, so the launcher and ps_server's wrapper can say it.
BUILD_HINT = (
    "from a source checkout run `make build`; for a pip install, the package was installed "
    "without its native parts: reinstall it with `pip install --force-reinstall --no-deps "
    "--no-build-isolation <checkout or sdist>`, which compiles them (it needs g++ and "
    "libzmq3-dev; docs/quickstart.md)")
