"""The automatic plan in a running job: `sfb.convert(model, mode="auto")` (SFB or
summation per Dense layer) and `DistributedOptimizer(..., plan="auto")` (a codec per
gradient, from the codecs TFPS_PLAN_CODECS allows), both from the cluster's measurements
(measure.py) and the same planner as tfps-plan.

The engine's partition size, fusion and credit are read when the engine starts; the plan
names its choice of them in its table and log line ("engine settings for the next
launch"), and they take effect when the job is started with those variables.
"""

import logging
import sys

from tf_ps_ops.plan import cost, layers as layer_lists, measure, planner

_logger = logging.getLogger("tf_ps_ops.plan")
ENGINE_VARIABLES = ("TFPS_PARTITION_BYTES", "TFPS_FUSION_BYTES", "TFPS_SCHEDULING_CREDIT")


def allowed_codecs():
    """The codecs the automatic plan may choose: TFPS_PLAN_CODECS (comma-separated),
    default none only — any codec changes what training computes, so it is opt-in."""
    from tf_ps_ops.common import config

    value, source = config.lookup("TFPS_PLAN_CODECS")
    codecs = tuple(c.strip() for c in (value or "none").split(",") if c.strip())
    for codec in codecs:
        if codec not in cost.CODECS:
            raise ValueError(f"{source}={value!r}: codec {codec!r}; use some of "
                             f"{', '.join(cost.CODECS)}")
    return codecs or ("none",)


def plan_mode_from_environment():
    """TFPS_PLAN: 'auto' or None."""
    from tf_ps_ops.common import config

    value, source = config.lookup("TFPS_PLAN")
    if value in (None, "", "none", "off"):
        return None
    if value.lower() != "auto":
        raise ValueError(f"{source}={value!r}: use auto (or leave it unset)")
    return "auto"


def log_once(text):
    """On rank 0 only: to the logger when logging is configured, else stderr."""
    from tf_ps_ops.common import basics

    if basics.is_initialized() and basics.rank() != 0:
        return
    if _logger.handlers or logging.getLogger().handlers:
        _logger.info("%s", text)
    else:
        print(text, file=sys.stderr, flush=True)


def describe(plan, measurements):
    lines = [planner.format_table(plan, max_rows=40), measurements.describe(),
             "engine settings for the next launch: " +
             " ".join(f"{k}={v}" for k, v in plan.environment().items())]
    return "\n".join(lines)


def plan_model(model, batch_size, pins=None, measurements=None, codecs=None):
    """The Plan of a built Keras model on the running cluster (measured once)."""
    measurements = measurements or measure.measure_cluster()
    layers = layer_lists.from_keras(model)
    plan = planner.make_plan(layers, measurements.cluster, batch_size, measurements.machine,
                             codecs or allowed_codecs(), pins=pins)
    log_once(describe(plan, measurements))
    return plan


def _pins_by_key(keys, pins):
    """Pins named by a variable's path (or its key) -> by key."""
    out = {}
    for name, value in (pins or {}).items():
        matches = [k for k in keys if k == name or k.endswith("." + name)]
        if not matches:
            raise ValueError(f"plan pin {name!r} names no reduced gradient; keys: "
                             f"{', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}")
        out.update({k: value for k in matches})
    return out


def compressions(keys, sizes, measurements, pins=None, codecs=None):
    """{key: Compressor} for the gradients under `keys` (sizes: elements of each), and the
    Plan: the codec the planner picks per gradient (summation only; SFB is a model
    change, sfb.convert's)."""
    from tf_ps_ops.collectives.compression import Compression

    layers = [layer_lists.Layer(key, layer_lists.OTHER, int(size))
              for key, size in zip(keys, sizes)]
    plan = planner.make_plan(layers, measurements.cluster, 1, measurements.machine,
                             codecs or allowed_codecs(), modes=(cost.SUM,),
                             pins=_pins_by_key(list(keys), pins))
    log_once(describe(plan, measurements))
    return {key: (Compression.uncompressed if choice.codec == "none"
                  else Compression.parse(choice.codec))
            for key, choice in zip(keys, plan.choices)}, plan
