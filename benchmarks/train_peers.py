"""TensorFlow's own strategies as train_worker.py modes: MultiWorkerMirroredStrategy
(run_mwms) and ParameterServerStrategy (its ps and worker tasks, pss_server, and its
chief, run_pss_chief, with balanced_placement), running the same step on the same data as
the other modes.
"""

import contextlib

from train_measure import time_steps
from train_models import build_model, constants, loss_fn, make_batch, make_step, sgd


def run_mwms(args, window):
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    rank = strategy.cluster_resolver.task_id
    workers = strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model(args.model)
        optimizer = sgd(args.model)
        optimizer.build(model.trainable_variables)
    # Each replica's loss is divided by the replica count: Keras 3 sums the gradients
    # over replicas (all_reduce SUM in optimizer.apply), which then averages them.
    inner = make_step(model, optimizer, loss_fn(), scale=1.0 / workers)
    x, y = constants(make_batch(args.model, args.batch, seed=rank))

    @tf.function(jit_compile=False)
    def step():
        per_replica = strategy.run(inner, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    result = time_steps(lambda: float(step()), args, window, workers * args.batch)
    result.update(rank=rank, workers=workers, params=int(model.count_params()))
    return result, None


def pss_server(args):
    """A ParameterServerStrategy ps or worker task: an in-process gRPC server, forever
    (the driver ends it once the chief is done)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                      inter_op_parallelism_threads=2)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", config=config,
                                  start=True)
    print("PSS_SERVER_STARTED %s %d" % (resolver.task_type, resolver.task_id), flush=True)
    server.join()


def balanced_placement(strategy, resolver):
    """A variable creator scope that puts each new variable on the ps task holding the
    fewest bytes so far (optimizer slots follow their variable).

    ParameterServerStrategy places variables round-robin in creation order: for a stack of
    Dense layers that is every kernel on ps 0 and every bias on ps 1, so one host's link
    carries the whole model. Its remedy, a variable_partitioner, does not work with Keras
    3 (a ShardedVariable has no `.handle`). Colocating with an anchor variable per task,
    as `strategy.extended.colocate_vars_with` does, balances the bytes instead.
    """
    import numpy as np
    import tensorflow as tf

    num_ps = len(resolver.cluster_spec().as_dict()["ps"])
    anchors = [tf.Variable(0.0, trainable=False, name="ps_anchor_%d" % i)
               for i in range(num_ps)]  # round-robin: anchor i lives on ps i
    load = [0] * num_ps

    def creator(next_creator, **kwargs):
        if kwargs.get("colocate_with") is not None:
            return next_creator(**kwargs)
        value = kwargs.get("initial_value")
        if callable(value):  # Keras passes its initializer as a callable: run it here
            value = kwargs["initial_value"] = value()
        shape = getattr(value, "shape", None)
        size = int(np.prod(shape)) if shape is not None and None not in list(shape) else 0
        target = load.index(min(load))
        load[target] += size
        kwargs["colocate_with"] = anchors[target]
        kwargs["use_resource"] = True
        return next_creator(**kwargs)

    return tf.variable_creator_scope(creator)


def run_pss_chief(args, window):
    """The coordinator: schedules one step on every worker per round and joins; a round
    is one global step (workers x batch samples), as in the synchronous modes."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    with strategy.scope():
        placement = balanced_placement(strategy, resolver) if args.pss_placement == "balanced" \
            else contextlib.nullcontext()
        with placement:
            model = build_model(args.model)
            optimizer = sgd(args.model)
            optimizer.build(model.trainable_variables)
    inner = make_step(model, optimizer, loss_fn())
    model_name, batch = args.model, args.batch

    def dataset_fn(_=None):
        x, y = make_batch(model_name, batch, seed=0)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function(jit_compile=False)
    def step(it):
        x, y = next(it)
        return strategy.run(inner, args=(x, y))

    def one_round():
        values = [coordinator.schedule(step, args=(iterator,)) for _ in range(workers)]
        coordinator.join()
        return float(values[-1].fetch())

    result = time_steps(one_round, args, window, workers * args.batch)
    result.update(rank=0, workers=workers, params=int(model.count_params()))
    placed = {}
    for v in model.trainable_variables + list(optimizer.variables):
        device = v.value.device.split("/device:")[0]
        placed[device] = placed.get(device, 0) + int(v.value.shape.num_elements()) * 4
    result["ps_bytes"] = placed  # variables + optimizer slots per ps task
    return result, None
