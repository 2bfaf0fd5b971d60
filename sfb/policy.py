"""HybComm (Poseidon, ATC'17): per layer, PS or SFB, whichever moves fewer floats.

Costs are floats sent + received by the busiest node per step (docs/sfb.md):
  PS, servers colocated with workers:  2·M·N·(P1+P2−2)/P2
  PS, dedicated server machines:       max(2·M·N, 2·P1·M·N/P2)   (worker node, server node)
  SFB (every worker):                  2·K·(P1−1)·(M+N)
for an N×M kernel (N inputs, M units), K factor rows per worker and step (the batch, times
the positions of a rank > 2 input), P1 workers and P2 servers. A Dense layer takes SFB when
its cost is not higher; every other layer takes the PS path.

This module needs neither TensorFlow nor the op library for the arithmetic (`ps_cost`,
`sfb_cost`, `best_scheme`); `plan` reads a Keras model.
"""

import dataclasses
import math

# The formulas live with the planner's cost model, which generalises them to time.
from tf_ps_ops.plan.cost import ps_cost, sfb_cost  # noqa: F401  (part of this API)

SFB, PS = "sfb", "ps"
CHOICES = (SFB, PS)


def best_scheme(m, n, k, workers, servers, colocated=True):
    """'sfb' if its cost is not above the PS cost, else 'ps' (Poseidon's BestScheme)."""
    return SFB if sfb_cost(m, n, k, workers) <= ps_cost(m, n, workers, servers,
                                                        colocated) else PS


@dataclasses.dataclass(frozen=True)
class Decision:
    layer: str
    n: int            # kernel rows: the layer's input size
    m: int            # kernel columns: its units
    k: object         # factor rows per worker and step; None if unknown
    ps_cost: float
    sfb_cost: object  # None if k is unknown
    choice: str
    reason: str       # "cost", "override", or why SFB was not considered


def _positions(layer):
    """Factor rows per example: the product of the input's middle dimensions (1 for a
    [batch, N] input); None when the model does not say."""
    try:
        shape = layer.input.shape
    except (AttributeError, ValueError, RuntimeError):
        return 1  # a layer not called symbolically: assume [batch, N]
    middle = list(shape[1:-1])
    if any(d is None for d in middle):
        return None
    return math.prod(middle)


def decide(name, n, m, k, workers, servers, colocated=True, override=None,
           override_reason="override"):
    """One layer's Decision. k=None (unknown) chooses PS unless overridden."""
    ps = ps_cost(m, n, workers, servers, colocated)
    sfb = None if k is None else sfb_cost(m, n, k, workers)
    if override is not None:
        if override not in CHOICES:
            raise ValueError(f"override for layer {name!r} is {override!r}; use 'sfb' or 'ps'")
        return Decision(name, n, m, k, ps, sfb, override, override_reason)
    if sfb is None:
        return Decision(name, n, m, k, ps, sfb, PS, "rows per step unknown")
    return Decision(name, n, m, k, ps, sfb, best_scheme(m, n, k, workers, servers, colocated),
                    "cost")


def dense_layers(model):
    """The Dense layers of a model (Keras 3 or tf_keras), nested models included, in
    model order."""
    from tf_ps_ops.training.keras_flavor import is_tf_keras

    if is_tf_keras(model):
        import tf_keras as keras  # the model is a tf_keras one: the package is there
    else:
        import keras

    found = []
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            found += dense_layers(layer)
        elif isinstance(layer, keras.layers.Dense):
            found.append(layer)
    return found


def plan(model, batch_size, workers, servers, colocated=True, overrides=None, mode="hybrid"):
    """A Decision for every Dense layer of a built model.

    mode 'hybrid' applies the cost model; 'sfb' takes SFB everywhere; overrides
    ({layer name: 'sfb' | 'ps'}) win over both.
    """
    overrides = dict(overrides or {})
    decisions = []
    for layer in dense_layers(model):
        if not layer.built:
            raise ValueError(f"layer {layer.name!r} is not built: give the model an Input")
        n, m = (int(d) for d in layer.kernel.shape)
        positions = _positions(layer)
        k = None if positions is None else batch_size * positions
        override, reason = overrides.pop(layer.name, None), "override"
        if override is None and mode == SFB:
            override, reason = SFB, "mode sfb"
        decisions.append(decide(layer.name, n, m, k, workers, servers, colocated, override,
                                reason))
    if overrides:
        raise ValueError(f"overrides name layers that are not Dense layers of the model: "
                         f"{sorted(overrides)}")
    return decisions


def format_table(decisions, workers, servers, colocated=True):
    """The decision table as text: layer, kernel shape, K, both costs (floats/step), choice."""
    head = (f"HybComm: {workers} workers, {servers} servers "
            f"({'colocated' if colocated else 'dedicated'}); costs in floats per step "
            f"through the busiest node")
    rows = [("layer", "kernel N×M", "K", "PS cost", "SFB cost", "choice")]
    for d in decisions:
        sfb = "?" if d.sfb_cost is None else f"{d.sfb_cost:.4g}"
        choice = d.choice if d.reason == "cost" else f"{d.choice} ({d.reason})"
        rows.append((d.layer, f"{d.n}×{d.m}", "?" if d.k is None else str(d.k),
                     f"{d.ps_cost:.4g}", sfb, choice))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("other layers (convolutions, embeddings, biases, ...) use the PS path")
    return "\n".join(lines)
