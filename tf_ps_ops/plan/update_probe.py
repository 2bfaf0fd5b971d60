"""The worker's optimizer update, probed for the cost model (Machine.apply_per_byte,
Machine.apply_per_row): a plain SGD update of a model's variables (apply_cost), and the
job's own optimizer, a fresh one of its class and config, updating float32 variables
(optimizer_cost) and an embedding's gathered rows (sparse_apply_cost). Timed in this
process's CPU seconds, medians of a few calls of one tf.function each
(tensor_probe.median_cpu_seconds); the job's optimizer's are rank 0's for every worker.
"""

import logging

import numpy as np

from tf_ps_ops.plan import measure, tensor_probe

_logger = logging.getLogger("tf_ps_ops.plan")


def apply_cost(model, steps=5):
    """CPU seconds per parameter byte of a plain SGD update of `model`'s trainable
    variables on this worker (variable -= rate · gradient), the median of `steps`: the
    worker's part of a step after its gradients are back (more for optimizers with
    slots)."""
    import tensorflow as tf

    variables = model.trainable_variables
    nbytes = sum(4 * int(np.prod(v.shape)) for v in variables)
    if not nbytes:
        return 0.0
    grads = [tf.zeros(v.shape, v.dtype) for v in variables]

    @tf.function
    def update():
        for v, g in zip(variables, grads):
            v.assign_sub(0.0 * g)  # the same memory traffic; the weights stay as they are
        return tf.constant(0)

    return tensor_probe.median_cpu_seconds(update, steps) / nbytes


OPTIMIZER_PROBE_BYTES = 4 << 20


def optimizer_cost(optimizer, name="tfps.plan.apply", steps=5, shapes=None):
    """CPU seconds per parameter byte of `optimizer`'s own update on this worker: a fresh
    optimizer of its class and config updating float32 variables of `shapes` (default
    one of 4 MiB), the median of `steps`. It is the worker's part of a summed gradient's
    step, and the part PS mode moves to the servers. Given a model's shapes, their
    count's overhead is in it too (MobileNetV2's 158 variables). Rank 0's number for
    every worker (collective): the plan must agree."""
    import keras
    import tensorflow as tf

    seconds = 0.0
    shapes = [(OPTIMIZER_PROBE_BYTES // 4,)] if shapes is None else \
        [tuple(int(d) for d in shape) for shape in shapes]
    nbytes = sum(4 * int(np.prod(shape)) for shape in shapes)
    try:
        with tf.init_scope():
            probe = type(optimizer).from_config(optimizer.get_config())
            variables = [keras.Variable(np.zeros(shape, np.float32),
                                        name=f"tfps_plan_apply_probe_{i}")
                         for i, shape in enumerate(shapes)]
            probe.build(variables)
            grads = [tf.fill(v.shape, 1e-6) for v in variables]

            @tf.function(autograph=False)
            def update():
                probe.apply(grads, variables)
                return tf.constant(0)

            seconds = tensor_probe.median_cpu_seconds(update, steps) / max(nbytes, 1)
    except Exception as error:  # an optimizer we cannot copy: no worker update is counted
        _logger.warning("could not time %s's update (%s): the plan counts none",
                        type(optimizer).__name__, error)
    return measure.rank0_value(seconds, name)


# The probe table of sparse_apply_cost: large enough that its rows, drawn at random, miss
# the caches as a real table's do; two counts of rows, whose difference prices one row.
SPARSE_PROBE_TABLE_BYTES = 64 << 20
SPARSE_PROBE_ROWS = (512, 2048)


def sparse_apply_cost(optimizer, width, name="tfps.plan.apply_rows", steps=7):
    """CPU seconds per row of `optimizer`'s own update of an embedding's gathered rows
    (a tf.IndexedSlices of rows `width` floats wide, drawn at random from a table of
    SPARSE_PROBE_TABLE_BYTES): the difference between updates of the two row counts of
    SPARSE_PROBE_ROWS over the rows between them, each the median of `steps`, so the
    update's fixed cost is left out. A fresh optimizer of its class and config, as
    optimizer_cost. The worker applies every worker's rows after a gather. Per 64-float
    row on an idle core here: plain SGD 99 ns, SGD with momentum 372 ns, Adagrad 1.05 us,
    where the float adds alone (Machine.sum_per_byte) say 5 ns. 0.0 where the optimizer
    cannot be copied (logged). Rank 0's number for every worker (collective)."""
    import keras
    import tensorflow as tf

    seconds = 0.0
    try:
        with tf.init_scope():
            probe = type(optimizer).from_config(optimizer.get_config())
            table_rows = max(SPARSE_PROBE_ROWS[-1], SPARSE_PROBE_TABLE_BYTES // (4 * width))
            table = keras.Variable(np.zeros((table_rows, width), np.float32),
                                   name="tfps_plan_apply_rows_probe")
            probe.build([table])
            rng = np.random.default_rng(0)

            def update_of(rows):
                grad = tf.IndexedSlices(
                    tf.fill((rows, width), 1e-6),
                    tf.constant(rng.integers(0, table_rows, rows, dtype=np.int64)),
                    tf.constant([table_rows, width], tf.int64))

                @tf.function(autograph=False)
                def update():
                    probe.apply([grad], [table])
                    return tf.constant(0)
                return update

            few, many = (update_of(rows) for rows in SPARSE_PROBE_ROWS)
            few().numpy(), many().numpy()  # traced, and the table paged in
            spent = [tensor_probe.median_cpu_seconds(f, steps) for f in (few, many)]
            seconds = max(0.0, (spent[1] - spent[0])
                          / (SPARSE_PROBE_ROWS[1] - SPARSE_PROBE_ROWS[0]))
    except Exception as error:  # an optimizer we cannot copy: rows at the adds' price
        _logger.warning("could not time %s's update of an embedding's rows (%s): the plan "
                        "prices them at a float add per element", type(optimizer).__name__,
                        error)
    return measure.rank0_value(seconds, name)
