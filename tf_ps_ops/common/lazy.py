"""A package's public names, imported from their submodules on first access (PEP 562).

    __all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)

Used by tf_ps_ops and sfb: importing either costs nothing until a name is used, so the
launcher `tfps-run` starts without TensorFlow or the op library, and `sfb.policy` works
without TensorFlow.
"""

import importlib


def exports(namespace, names, submodules=()):
    """Returns `__all__`, `__getattr__` and `__dir__` for the package whose globals are
    `namespace`: `names` maps each public name to the submodule that defines it,
    `submodules` are part of the API themselves."""
    package = namespace["__name__"]
    public = sorted(names) + list(submodules)

    def __getattr__(name):
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__():
        return sorted(set(namespace) | set(public))

    return public, __getattr__, __dir__
