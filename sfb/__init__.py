"""sfb: Sufficient Factor Broadcasting for fully-connected layers, and HybComm.

    import sfb
    model = sfb.convert(model)                                  # every Dense layer by SFB
    model = sfb.convert(model, mode="hybrid", batch_size=32)    # the cost model picks

For a Dense layer y = x·W (x: K×N, W: N×M) the weight gradient xᵀ·dy is a sum of K outer
products: workers exchange the factors (dy, x), K·(M+N) floats, peer to peer, instead of
the M·N gradient, and each rebuilds the same averaged gradient. See docs/sfb.md.
"""

from tf_ps_ops.common import lazy as _lazy

# Public name -> the submodule that defines it. Resolved on first access (PEP 562), so that
# `sfb.policy` is usable without TensorFlow.
_EXPORTS = {"Dense": "layers", "is_sfb_variable": "layers", "convert": "convert",
            "factor_gradient": "ops"}
_SUBMODULES = ("policy",)

__all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)
