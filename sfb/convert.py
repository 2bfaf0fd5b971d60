"""sfb.convert: a copy of a Keras model whose Dense layers use SFB where chosen."""

import logging

import keras

from sfb import policy
from sfb.layers import Dense, tf_keras_dense
from tf_ps_ops.training.keras_flavor import is_tf_keras

MODES = ("sfb", "hybrid", "ps", "sum", "auto")
_logger = logging.getLogger("sfb")


def _mode_from_environment():
    from tf_ps_ops.common import config as _config

    value, source = _config.lookup("TFPS_MODE")
    if value is None:
        return "sfb"
    value = value.lower()
    if value not in MODES:
        raise ValueError(f"{source}={value!r}: use one of {', '.join(MODES)}")
    return value


def _cluster(num_workers, num_servers):
    import tf_ps_ops

    if num_workers is None or num_servers is None:
        if not tf_ps_ops.is_initialized():
            raise ValueError("hybrid mode needs the cluster's size: call tf_ps_ops.init() "
                             "first, or pass num_workers and num_servers")
        num_workers = tf_ps_ops.size() if num_workers is None else num_workers
        num_servers = tf_ps_ops.num_servers() if num_servers is None else num_servers
    return num_workers, num_servers


def _log_once(text):
    from tf_ps_ops.common import basics

    basics.log_on_rank0(_logger, text)


def _choices(model, mode, batch_size, num_workers, num_servers, colocated, overrides):
    """{layer name: 'sfb' | 'ps'} for every Dense layer; logs the table in hybrid mode."""
    if mode in ("ps", "sum"):
        layers = policy.dense_layers(model)
        unknown = set(overrides or {}) - {layer.name for layer in layers}
        if unknown:
            raise ValueError(f"overrides name layers that are not Dense layers of the "
                             f"model: {sorted(unknown)}")
        return {layer.name: (overrides or {}).get(layer.name, policy.PS) for layer in layers}
    if mode in ("hybrid", "auto") and batch_size is None:
        raise ValueError(f"{mode} mode needs batch_size (examples per worker and step): "
                         f"the SFB cost grows with it")
    if mode == "auto":
        return _auto_choices(model, batch_size, overrides)
    if mode == "hybrid":
        num_workers, num_servers = _cluster(num_workers, num_servers)
    else:  # every Dense layer takes SFB unless overridden: the costs are only reported
        num_workers, num_servers = num_workers or 1, num_servers or 1
    decisions = policy.plan(model, batch_size or 1, num_workers, num_servers, colocated,
                            overrides, mode)
    if mode == "hybrid":
        _log_once(policy.format_table(decisions, num_workers, num_servers, colocated))
    return {d.layer: d.choice for d in decisions}


def _auto_choices(model, batch_size, overrides):
    """The planner's choice per Dense layer, from the cluster's measurements (collective:
    every worker converts at the same point). Overrides pin layers ('ps' = summation)."""
    import tf_ps_ops
    from tf_ps_ops.plan import auto

    if not tf_ps_ops.is_initialized():
        raise ValueError("auto mode measures the cluster: call tf_ps_ops.init() first")
    names = {layer.name for layer in policy.dense_layers(model)}
    unknown = set(overrides or {}) - names
    if unknown:
        raise ValueError(f"overrides name layers that are not Dense layers of the model: "
                         f"{sorted(unknown)}")
    pins = {name: {"ps": "sum"}.get(value, value) for name, value in (overrides or {}).items()}
    plan = auto.plan_model(model, batch_size, pins=pins)
    return {name: (policy.SFB if plan.choice(name).mode == policy.SFB else policy.PS)
            for name in names}


def convert(model, mode=None, batch_size=None, num_workers=None, num_servers=None,
            colocated=True, overrides=None):
    """Returns a copy of `model` (Sequential or functional) with its Dense layers replaced
    by sfb.Dense where SFB is chosen, and the same weights. Compile the copy. A tf_keras
    (Keras 2) model gets tf_keras layers (sfb.layers.tf_keras_dense()).

    Args:
      mode: 'sfb' (every Dense layer), 'hybrid' (the HybComm cost model picks per layer
        and the decision table is logged on rank 0), 'auto' (the planner picks from the
        cluster's measurements, which every worker takes here together; the plan table is
        logged on rank 0; docs/plan.md), or 'ps' / 'sum' (none). Defaults to
        TFPS_MODE, else 'sfb'.
      batch_size: examples per worker and step; needed in hybrid and auto modes.
      num_workers, num_servers: default to tf_ps_ops.size() and num_servers().
      colocated: servers run on the worker machines (tfps-run's layout); False for
        dedicated server machines.
      overrides: {layer name: 'sfb' | 'ps'}, applied in every mode.
    """
    if is_tf_keras(model):
        import tf_keras as k  # the model is a tf_keras one: the package is there
        sfb_dense = tf_keras_dense()
    else:
        k, sfb_dense = keras, Dense
    if not isinstance(model, k.Model) or not (
            isinstance(model, k.Sequential) or getattr(model, "_is_graph_network", False)
            or type(model).__name__ == "Functional"):
        raise TypeError("sfb.convert takes a Sequential or functional Keras model; in a "
                        "subclassed model use sfb.Dense in place of keras.layers.Dense")
    mode = _mode_from_environment() if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}")
    choices = _choices(model, mode, batch_size, num_workers, num_servers, colocated, overrides)

    def clone(layer):
        if k is not keras and isinstance(layer, k.Model):  # tf_keras clones one level only
            return k.models.clone_model(layer, clone_function=clone)
        config = layer.get_config()
        if isinstance(layer, k.layers.Dense):
            if choices.get(layer.name) == policy.SFB:
                return sfb_dense.from_config(config)
            if isinstance(layer, sfb_dense):  # an SFB layer the policy moves back to PS
                return k.layers.Dense.from_config(config)
        return layer.__class__.from_config(config)

    if k is keras:
        converted = keras.models.clone_model(model, clone_function=clone, recursive=True)
    else:
        converted = k.models.clone_model(model, clone_function=clone)
    converted.set_weights(model.get_weights())
    return converted
