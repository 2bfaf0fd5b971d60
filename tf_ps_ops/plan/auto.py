"""The automatic plan in a running job: `sfb.convert(model, mode="auto")` (SFB or
summation per Dense layer) and `DistributedOptimizer(..., plan="auto")` (a codec per
gradient, from the codecs TFPS_PLAN_CODECS allows), both from the cluster's measurements
(measure.py) and the same planner as tfps-plan.

The engine's partition size, fusion and credit are read when the engine starts: a job's
plan is made under the running ones, and the log names the planner's own choice of them
("engine settings for the next launch"), which takes effect when the job is started with
those variables.
"""

import dataclasses
import logging

from tf_ps_ops.plan import cost, layers as layer_lists, measure, planner, profile

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


def allowed_modes():
    """The modes DistributedOptimizer(plan="auto") may pick per gradient: TFPS_PLAN_MODES
    (comma-separated sum, ps), default both."""
    from tf_ps_ops.common import config

    value, source = config.lookup("TFPS_PLAN_MODES")
    modes = tuple(m.strip().lower() for m in (value or "sum,ps").split(",") if m.strip())
    for mode in modes:
        if mode not in (cost.SUM, cost.PS_DENSE):
            raise ValueError(f"{source}={value!r}: mode {mode!r}; use some of sum, ps")
    if cost.SUM not in modes:
        raise ValueError(f"{source}={value!r}: sum must stay allowed (gradients PS mode "
                         f"cannot take, and what the plan falls back to)")
    return modes


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
    """On rank 0 only: to the plan's logger when logging is configured, else stderr."""
    from tf_ps_ops.common import basics

    basics.log_on_rank0(_logger, text)


ENGINE_PINS = {"partition_bytes": "TFPS_PARTITION_BYTES", "fusion_bytes": "TFPS_FUSION_BYTES",
               "credit": "TFPS_SCHEDULING_CREDIT"}


def engine_settings():
    """The running engine's settings, as pins: a job's plan cannot change them."""
    from tf_ps_ops.common import config

    return {pin: config.engine_int(name) for pin, name in ENGINE_PINS.items()}


def describe(plan, measurements, better=None):
    """The plan's table, the measurements, and the engine settings the planner would pick
    for the next launch (`better`, a plan free to choose them) when they differ."""
    lines = [planner.format_table(plan, max_rows=40), measurements.describe()]
    if better is not None and better.step_time < 0.99 * plan.step_time:
        lines.append(f"engine settings for the next launch (predicted step "
                     f"{better.step_time * 1e3:.2f} ms): " +
                     " ".join(f"{k}={v}" for k, v in better.environment().items()))
    else:
        lines.append("engine settings: the running ones are the planner's choice")
    return "\n".join(lines)


def _plans(layers, measurements, batch_size, codecs, pins, modes=planner.MODES_AUTO):
    """(the plan under the running engine settings, the plan free to choose them). PS
    mode's pushes go uncompressed (the PS update ops take no codec). On one machine under
    hierarchical aggregation the cost model cannot see the local sum
    (measure.one_machine_hierarchical): both keep the default configuration there, but
    for the pins."""
    pins = dict(pins or {})
    if measurements.one_machine_hierarchical:
        modes, codecs = (), ("none",)
        if not _last.get("one machine logged"):
            _last["one machine logged"] = True
            log_once("plan: every worker runs on this machine and hierarchical aggregation "
                     "sums them here first, which the cost model does not price: the plan "
                     "keeps the default configuration but for the pins "
                     "(TFPS_HIERARCHICAL=0 plans every layer)")
    free = planner.make_plan(layers, measurements.cluster, batch_size, measurements.machine,
                             codecs, modes=modes, pins=pins, ps_codecs=("none",))
    running = planner.make_plan(layers, measurements.cluster, batch_size,
                                measurements.machine, codecs, modes=modes,
                                pins={**engine_settings(), **pins}, ps_codecs=("none",))
    return running, free


def plan_model(model, batch_size, pins=None, measurements=None, codecs=None):
    """The Plan of a built Keras model on the running cluster (measured once), with the
    model's compute at the rate of a profiled local step of it, and the compute it loses
    to communication measured with that step beside push_pulls (collective). Given
    `measurements`, those as they are. The profile covers forward and backward, not the
    optimizer's update (docs/plan.md: a step that is mostly an update is planned as if
    it were short)."""
    if measurements is None:
        measurements = measure.measure_cluster()
        run = profile.traced_step(model, batch_size)  # traced once for the three probes
        rate = profile.shared_model_rate(model, batch_size, run=run)
        losses = profile.model_compute_loss(model, batch_size, measurements.cluster, run=run)
        machine = dataclasses.replace(measurements.machine,
                                      macs_per_s=rate or measurements.machine.macs_per_s)
        if losses is not None:
            machine = dataclasses.replace(machine, compute_loss=losses[0],
                                          compute_cpu_loss=losses[1])
        per_op = profile.sync_op_cpu(model, batch_size, run=run)
        if per_op is not None:
            machine = dataclasses.replace(machine, tf_per_op=per_op)
        measurements = dataclasses.replace(measurements, machine=machine)
    layers = layer_lists.from_keras(model)
    plan, better = _plans(layers, measurements, batch_size, codecs or allowed_codecs(), pins)
    log_once(describe(plan, measurements, better))
    _last["model"] = plan
    return plan


_last = {}


def last_model_plan():
    """The Plan sfb.convert(mode="auto") made last in this process, or None."""
    return _last.get("model")


def _pins_by_key(keys, pins):
    """Pins named by a variable's path (or its key) -> by key."""
    out = {}
    for name, value in (pins or {}).items():
        if name in ENGINE_PINS:
            out[name] = value
            continue
        matches = [k for k in keys if k == name or k.endswith("." + name)]
        if not matches:
            raise ValueError(f"plan pin {name!r} names no reduced gradient; keys: "
                             f"{', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}")
        out.update({k: value for k in matches})
    return out


def compressions(keys, sizes, measurements, pins=None, codecs=None, sparse=None,
                 ps="the caller offered no PS mode", row_update=True):
    """{key: Compressor} for the gradients under `keys` (sizes: elements of each), and the
    Plan: per gradient, summation with the codec the planner picks or (where `ps` is None:
    the optimizer's update can run on the servers) PS mode, uncompressed; SFB is a model
    change, sfb.convert's. `ps`: why the servers cannot run this optimizer (or why PS
    mode is not allowed), or None.
    sparse: {key: (table rows, row width, rows in this step or None)} of the gradients
    that are tf.IndexedSlices: the plan gathers their rows, sums them dense
    (`densified`) or, in PS mode, pushes their rows (row_update: the optimizer updates
    the touched rows only) or the dense gradient."""
    from tf_ps_ops.collectives.compression import Compression

    sparse = sparse or {}
    layers = [_gradient_layer(key, size, sparse.get(key), row_update)
              for key, size in zip(keys, sizes)]
    pins = _pins_by_key(list(keys), pins)
    modes = (cost.SUM,) if ps else (cost.SUM, cost.PS_DENSE)
    for key, value in pins.items():
        if key in ENGINE_PINS or not ps:
            continue
        if (value if isinstance(value, cost.Choice) else cost.parse_choice(value)).mode == \
                cost.PS_DENSE:
            raise ValueError(f"plan pin {key!r}: 'ps' is not possible here: {ps}")
    plan, better = _plans(layers, measurements, 1, codecs or allowed_codecs(), pins,
                          modes=modes)
    log_once(describe(plan, measurements, better))
    return {key: (Compression.uncompressed if choice.codec == "none"
                  else Compression.parse(choice.codec))
            for key, choice in zip(keys, plan.choices)}, plan


def served(plan):
    """The keys of the gradients the plan gives to the servers' optimizer (PS mode)."""
    return frozenset(layer.name for layer, choice in zip(plan.layers, plan.choices)
                     if choice.mode == cost.PS_DENSE)


def _gradient_layer(key, size, table, row_update=True):
    if table is None:
        return layer_lists.Layer(key, layer_lists.OTHER, int(size))
    rows, width, step_rows = table
    # Measured rows when the step's shape is static; else unknown: the engine's gather.
    return layer_lists.Layer(key, layer_lists.EMBEDDING, int(size), None, None, 0.0,
                             (int(rows), int(width)),
                             None if step_rows is None else int(step_rows),
                             row_update=bool(row_update))


def densified(plan):
    """The keys of the sparse gradients the plan sums dense rather than gathers."""
    return frozenset(layer.name for layer, choice in zip(plan.layers, plan.choices)
                     if layer.sparse and choice.mode == cost.SUM)
