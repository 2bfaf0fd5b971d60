"""The cost model's inputs for train_worker.py --predict: what plan="auto" measures of the
cluster (plan_inputs), when the gradients are ready in the real training step
(timeline_ready), and the choice the configuration's mode made for each layer
(plan_choices), from which train_report.predict_step predicts the step.
"""

import json
import os

from train_models import momentum, sgd


def plan_inputs(model, args):
    """What train_bench needs to predict this configuration's step with the planner's
    cost model (tf_ps_ops.plan.cost): the cluster as plan="auto" measures it (a push_pull
    probe through the servers, the codecs' CPU cost, the compute lost to communication),
    the worker's optimizer update per byte (the run's SGD, on the model's shapes), and
    the model's layers: (the layers, those inputs as JSON). The compute lost to
    communication is the model's own (profile.model_compute_loss; the matmul probe's is
    kept beside it as matmul_compute_loss). The compute rate comes from the same sweep's
    single-process step (train_report.predict_step). Collective: every rank calls it,
    before the model is converted or its weights adopted."""
    import dataclasses

    from tf_ps_ops.plan import auto, layers, measure, profile, update_probe

    measured = measure.measure_cluster()
    # The run's own optimizer (momentum's slot included) on the model's variables' shapes.
    machine = dataclasses.replace(measured.machine, apply_per_byte=update_probe.optimizer_cost(
        sgd(args.model), shapes=[v.shape for v in model.trainable_variables]))
    run = profile.traced_step(model, args.batch)  # traced once for both probes
    losses = profile.model_compute_loss(model, args.batch, measured.cluster, run=run)
    if losses is not None:
        machine = dataclasses.replace(machine, compute_loss=losses[0],
                                      compute_cpu_loss=losses[1])
    per_op = profile.sync_op_cpu(model, args.batch, run=run)
    if per_op is not None:  # the TensorFlow threads' work per collective op of the step
        machine = dataclasses.replace(machine, tf_per_op=per_op)
    row_update = momentum(args.model) == 0  # Keras' momentum updates every row of a table
    lay = [dataclasses.replace(layer, row_update=row_update) if layer.sparse else layer
           for layer in layers.from_keras(model)]
    widths = sorted({layer.table[1] for layer in lay if layer.sparse})
    if widths:  # the update of every worker's gathered rows (as DistributedOptimizer's plan)
        machine = dataclasses.replace(machine, apply_row_width=widths[-1],
                                      apply_per_row=update_probe.sparse_apply_cost(
                                          sgd(args.model), widths[-1]))
    return lay, dict(layers=json.loads(layers.to_json(lay))["layers"],
                     cluster=dataclasses.asdict(measured.cluster),
                     machine=dataclasses.asdict(machine), settings=auto.engine_settings(),
                     matmul_compute_loss=measured.machine.compute_loss)


READY_STEPS = 4  # steps recorded for the gradients' ready times (the first is dropped)


def timeline_ready(plan, run_one, args, rank):
    """plan_inputs' JSON with each layer's ready time (cost model Layer.ready) from an
    engine timeline of READY_STEPS extra warm-up steps of the real training step: the
    order TensorFlow hands the gradients over, which sets how much of the link's time
    backward hides (--ready-order layers: keep the layer order; so does a timeline the
    driver asked for, TFPS_TIMELINE, which is recording). Rank 0 records; every rank
    runs the steps."""
    import shutil
    import tempfile

    import tf_ps_ops as hvd
    from tf_ps_ops.plan import layers, ready as ready_times

    lay, inputs = plan
    if args.ready_order != "timeline" or os.environ.get("TFPS_TIMELINE"):
        return inputs
    folder = tempfile.mkdtemp(prefix="tfps_ready_") if rank == 0 else None
    if folder:
        hvd.start_timeline(os.path.join(folder, "timeline.json"))
    for _ in range(READY_STEPS):
        run_one()
    if not folder:
        return inputs
    hvd.stop_timeline()
    try:
        ready = ready_times.from_timeline(os.path.join(folder, "timeline.json"), lay,
                                          lambda tensor: _layer_of(variable_path(tensor)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    timed = ready_times.apply(lay, ready)
    return dict(inputs, layers=json.loads(layers.to_json(timed))["layers"])


def served_paths(optimizer):
    """The paths of the variables DistributedOptimizer(plan="auto") gave the servers."""
    from tf_ps_ops.plan import auto

    plan = getattr(optimizer, "tfps_plan", None)
    return [] if plan is None else sorted(key.split(".", 1)[1] for key in auto.served(plan))


def variable_path(tensor):
    """The Keras path of the variable behind an engine tensor's name: '<optimizer>.<path>'
    (DistributedOptimizer), 'ps:<path>' (PS mode's optimizers) or 'ps:<optimizer>.<path>'
    (what plan="auto" gave the servers). Before PS mode's keys were read, the PS rows'
    gradients had no ready times (the layer order instead: ResNet-50 at 1 Gbit/s was
    predicted 16-29% short, against 0-16% with the measured order)."""
    from tf_ps_ops.ps.ps_mode import ps_key

    prefix = ps_key("")
    if tensor.startswith(prefix):
        tensor = tensor[len(prefix):]
    return tensor.split(".", 1)[-1]


def _layer_of(path):
    return path.rsplit("/", 1)[0].rsplit("/", 1)[-1]


def plan_choices(lay, plan, mode, sfb_kernels, served=()):
    """plan_inputs' JSON with the choice `mode` made for each of the layers `lay`: what
    the engine does unplanned (sum: an embedding's rows gathered, the rest summed, with
    the codec of TFPS_COMPRESSION), PS mode everywhere, SFB for the Dense layers
    sfb.convert converted, or the automatic plans' choices (the model's, with PS mode for
    the layers whose variables the optimizer's plan gave the servers)."""
    from tf_ps_ops.plan import auto, cost

    if mode == "auto":
        made = auto.last_model_plan()
        choices = list(made.choices) if made is not None and len(made.choices) == len(lay) \
            else None
        on_servers = {_layer_of(path) for path in served}
        if choices is not None:
            choices = [cost.Choice(cost.PS_DENSE) if layer.name.rsplit("/", 1)[-1]
                       in on_servers and choice.mode == cost.SUM else choice
                       for layer, choice in zip(lay, choices)]
    elif mode == "ps":
        choices = [cost.Choice(cost.PS_DENSE)] * len(lay)
    else:
        # train_bench's int8 mode is sum with TFPS_COMPRESSION set: every dense gradient
        codec = os.environ.get("TFPS_COMPRESSION", "none").strip().lower() or "none"
        dense = cost.Choice(cost.SUM, codec if codec in cost.CODECS else "none")
        converted = {_layer_of(path) for path in sfb_kernels}
        choices = [cost.Choice(cost.SFB) if layer.name.rsplit("/", 1)[-1] in converted
                   else cost.default_choice(layer) if layer.sparse else dense for layer in lay]
    return dict(plan, choices=None if choices is None else [str(c) for c in choices])
