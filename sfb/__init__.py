"""sfb: Sufficient Factor Broadcasting for fully-connected layers, and HybComm.

    import sfb
    model = sfb.convert(model)                                  # every Dense layer by SFB
    model = sfb.convert(model, mode="hybrid", batch_size=32)    # the cost model picks

For a Dense layer y = x·W (x: K×N, W: N×M) the weight gradient xᵀ·dy is a sum of K outer
products: workers exchange the factors (dy, x), K·(M+N) floats, peer to peer, instead of
the M·N gradient, and each rebuilds the same averaged gradient. See docs/sfb.md.
"""

import importlib

# Public name -> the submodule that defines it. Resolved on first access (PEP 562), so that
# `sfb.policy` is usable without TensorFlow.
_EXPORTS = {"Dense": "layers", "is_sfb_variable": "layers", "convert": "convert",
            "factor_gradient": "ops"}
_SUBMODULES = ("policy",)

__all__ = sorted(_EXPORTS) + list(_SUBMODULES)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
