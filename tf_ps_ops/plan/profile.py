"""A local step of the model, profiled: the compute rate sfb.convert(mode="auto") plans
with (plan_model), and benchmarks/plan_predict.py's.
"""

import logging
import time

import numpy as np

from tf_ps_ops.plan import measure

_logger = logging.getLogger("tf_ps_ops.plan")


def model_rate(model, batch_size, steps=5, backward_ratio=2.0):
    """Forward multiply-adds per second of `model` on this worker: a profiled local step
    (forward and backward, no communication) on made-up inputs of the model's shapes
    (floats drawn at random, integer ids 0), the median of `steps` (as the step it
    predicts is a median: on a shared host the best of 3 was up to a third faster than
    `fit`'s median local step); the planner's per-layer compute times are the layers'
    multiply-adds at this rate, so everything else the step computes (lookups, norms,
    TensorFlow's own work) is spread over them. Inference-mode layers (training=False):
    the profile must not move a BatchNormalization's statistics. None without
    multiply-adds."""
    import tensorflow as tf

    from tf_ps_ops.plan import layers as layer_lists

    lay = layer_lists.from_keras(model)
    macs = sum(layer.macs for layer in lay) * batch_size
    if not macs:
        return None
    # As steptime.compute_times counts: backward_ratio forwards per layer, one less for the
    # first (no gradient for the model's input).
    work = macs * (1 + backward_ratio) - lay[0].macs * batch_size
    inputs = [_made_up_input(tf, tensor, batch_size) for tensor in model.inputs]
    x = inputs[0] if len(inputs) == 1 else inputs

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            outputs = tf.nest.flatten(model(x, training=False))
            loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outputs])
        return tape.gradient(loss, model.trainable_variables)

    step()  # traces
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        [(g.values if isinstance(g, tf.IndexedSlices) else g).numpy()
         for g in step() if g is not None]
        times.append(time.perf_counter() - start)
    return work / float(np.median(times))


def _made_up_input(tf, tensor, batch_size):
    shape = [batch_size] + [1 if d is None else int(d) for d in tensor.shape[1:]]
    dtype = tf.as_dtype(tensor.dtype)
    if dtype.is_integer or dtype.is_bool:
        return tf.zeros(shape, dtype)
    return tf.cast(tf.random.normal(shape), dtype)


def shared_model_rate(model, batch_size, name="tfps.plan.model_rate"):
    """model_rate on rank 0, for every worker (collective: the plan must agree), or None
    where rank 0 could not profile the model (logged; the plan keeps the matmul probe's
    rate)."""
    rate = 0.0
    try:
        rate = model_rate(model, batch_size) or 0.0
    except Exception as error:  # noqa: BLE001 - a model we cannot run on made-up inputs
        _logger.warning("could not profile a local step of %s (%s): the plan takes its "
                        "compute at the matrix-multiply probe's rate", model.name, error)
    return measure.rank0_value(rate, name) or None
