"""What a module of tf_ps_ops or sfb offers its users, for test_public_surface.py.

    python3 tests/public_surface.py    # prints the surface of the importable package

A public name is one without a leading underscore that the module offers for itself: a
module of the project, something defined in the project, or a plain value (Average = 0).
Names a module merely imported from elsewhere (`sys`, `tf`, a Keras class) are left out.
"""

import importlib
import inspect
import pprint

PROJECT = ("tf_ps_ops", "sfb")

# The public modules: `import tf_ps_ops as hvd` and the modules Horovod's and our docs name.
PUBLIC_MODULES = ("tf_ps_ops", "tf_ps_ops.tensorflow", "tf_ps_ops.keras",
                  "tf_ps_ops.callbacks", "tf_ps_ops.elastic", "tf_ps_ops.ray",
                  "tf_ps_ops.ps_mode", "tf_ps_ops.optimizers", "tf_ps_ops.algorithms",
                  "tf_ps_ops.compression", "tf_ps_ops.run", "tf_ps_ops.role", "sfb")

# Names resolved on first access that dir() may not show yet.
_LAZY = {"tf_ps_ops.elastic": ("CommitStateCallback", "UpdateBatchStateCallback",
                               "UpdateEpochStateCallback")}


def _ours(name):
    return name is not None and name.split(".")[0] in PROJECT


def offers(module, name):
    """Whether `module.name` is the module's own public name (the module docstring)."""
    if name.startswith("_"):
        return False
    try:
        value = getattr(module, name)
    except AttributeError:
        return False
    if inspect.ismodule(value):
        return _ours(value.__name__)
    defined_in = getattr(value, "__module__", None)
    if isinstance(defined_in, str):
        return _ours(defined_in)
    return True  # a plain value: an int, a string, a tuple


def public_names(module):
    names = set(dir(module)) | set(getattr(module, "__all__", ())) | \
        set(_LAZY.get(module.__name__, ()))
    return sorted(name for name in names if offers(module, name))


def missing(module, expected):
    """The names of `expected` that `module` no longer offers, as `module.name`."""
    return [f"{module.__name__}.{name}" for name in expected if not offers(module, name)]


def surface(modules=PUBLIC_MODULES):
    out = {}
    for name in modules:
        try:
            out[name] = public_names(importlib.import_module(name))
        except ModuleNotFoundError as e:  # an optional dependency (ray) is not installed
            if _ours(e.name):
                raise
    return out


if __name__ == "__main__":
    pprint.pprint(surface(), width=96, compact=True)
