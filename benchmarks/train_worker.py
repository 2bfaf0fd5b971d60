"""One process of benchmarks/train_bench.py: trains a model on synthetic data and prints
one line `TRAIN_RESULT {json}` with its step times and what it measured around them.

    python3 benchmarks/train_worker.py --mode sum --model mlp --batch 32 --warmup 3 --steps 12

Every mode runs the same custom loop: a tf.function with forward, loss, GradientTape,
then `optimizer.apply(grads, vars)` of a Keras 3 SGD (lr 0.01, momentum 0.9):

| mode | what syncs the gradients |
|---|---|
| single | nothing (one process, no network) |
| sum | tf_ps_ops.DistributedOptimizer: push_pull through the colocated ps_servers |
| ps | tf_ps_ops.optimizers.SGD: the servers run the optimizer |
| sfb | sfb.convert(model): Dense kernels by SFB, the rest by push_pull |
| hybrid | sfb.convert(model, mode="hybrid"): HybComm picks SFB or PS per Dense layer |
| auto | sfb.convert(model, mode="auto") and DistributedOptimizer(plan="auto"): the planner picks per layer |
| mwms | tf.distribute.MultiWorkerMirroredStrategy (ring all-reduce over gRPC) |
| pss | tf.distribute.ParameterServerStrategy (--role chief / worker / ps) |
| horovod | horovod.tensorflow.DistributedGradientTape over Gloo |

(train_bench's `int8` mode is `sum` with TFPS_COMPRESSION=int8 set by the driver.) Models:
mlp, cnn and their tiny_ versions here; the zoo (resnet50, mobilenetv2, bert, dlrm and
their smoke_ versions) in zoo_models.py, with its own batch and momentum per model.

Threads: intra_op 1 and inter_op 1 (--inter-op; at least 2 for every ParameterServerStrategy
process: its workers deadlock silently with 1). Data: one fixed random batch per worker, made
before timing (no input pipeline in the step), except ParameterServerStrategy, whose
workers take it from a per-worker `Dataset.from_tensors(...).repeat()`.

Around the timed steps (after the warm-up) the process samples: /proc/stat (CPU used by
the whole machine), the CPU time of every process of this configuration (pids from
--pids-file, written by the driver), and its host's eth0 byte counters (each emulated
host has its own /sys/class/net). The driver subtracts to get the CPU used by other
processes during the window.
"""

import argparse
import contextlib
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402

MODES = ("single", "sum", "ps", "sfb", "hybrid", "auto", "mwms", "pss", "horovod")
TFPS = ("sum", "ps", "sfb", "hybrid", "auto")
CONVERTED = ("sfb", "hybrid", "auto")  # sfb.convert(model, mode=...) first
SUMMED = ("sum",) + CONVERTED  # tf_ps_ops.DistributedOptimizer
MODELS = ("mlp", "cnn", "tiny_mlp", "tiny_cnn") + zoo_models.MODELS
LR, MOMENTUM = 0.01, 0.9


# --- measurement around the timed window ------------------------------------------------

def _proc_stat():
    """Machine-wide CPU seconds: {user, nice, system, idle, iowait, irq, softirq, steal}."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:9]
    hz = os.sysconf("SC_CLK_TCK")
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {name: int(value) / hz for name, value in zip(names, fields)}


def _pid_cpu(pid):
    """utime + stime of a process in seconds (all its threads), None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name may contain spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _net_bytes():
    base = "/sys/class/net/eth0/statistics/"
    try:
        with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
            return int(tx.read()), int(rx.read())
    except OSError:  # not inside an emulated host
        return 0, 0


class Window:
    """Snapshots at the start and the end of the timed steps."""

    def __init__(self, pids_file):
        self.pids_file = pids_file
        self.labels = {}

    def _load_pids(self):
        if self.labels or not self.pids_file:
            return
        for _ in range(50):  # the driver writes it right after starting every process
            try:
                with open(self.pids_file) as f:
                    self.labels = {int(pid): label for pid, label in json.load(f).items()}
                return
            except (OSError, ValueError):
                time.sleep(0.1)

    def snapshot(self):
        self._load_pids()
        tx, rx = _net_bytes()
        return dict(t=time.monotonic(), stat=_proc_stat(), tx=tx, rx=rx,
                    self_cpu=time.process_time(),
                    pids={pid: _pid_cpu(pid) for pid in self.labels})

    def summary(self, start, end):
        elapsed = end["t"] - start["t"]
        delta = {k: end["stat"][k] - start["stat"][k] for k in start["stat"]}
        busy = delta["user"] + delta["nice"] + delta["system"]
        ours = {}
        for pid, label in self.labels.items():
            a, b = start["pids"].get(pid), end["pids"].get(pid)
            if a is not None and b is not None:
                ours[label] = round(b - a, 3)
        return dict(elapsed_s=round(elapsed, 4), machine_busy_s=round(busy, 3),
                    softirq_s=round(delta["softirq"] + delta["irq"], 3),
                    ours_cpu_s=ours, ours_total_s=round(sum(ours.values()), 3),
                    other_cpu_s=round(busy - sum(ours.values()), 3),
                    self_cpu_s=round(end["self_cpu"] - start["self_cpu"], 3),
                    tx_bytes=end["tx"] - start["tx"], rx_bytes=end["rx"] - start["rx"])


# --- models and data ---------------------------------------------------------------------

def build_model(name):
    import keras
    from keras import layers

    if name in zoo_models.MODELS:
        return zoo_models.build(name)
    keras.utils.set_random_seed(0)  # every rank builds the same initial weights
    if name in ("mlp", "tiny_mlp"):
        width = 4096 if name == "mlp" else 256
        return keras.Sequential([keras.Input((784,)),
                                 layers.Dense(width, activation="relu", name="fc1"),
                                 layers.Dense(width, activation="relu", name="fc2"),
                                 layers.Dense(width, activation="relu", name="fc3"),
                                 layers.Dense(10, name="logits")], name=name)
    c1, c2, fc = (32, 64, 128) if name == "cnn" else (8, 16, 32)
    return keras.Sequential([keras.Input((28, 28, 1)),
                             layers.Conv2D(c1, 3, activation="relu", name="conv1"),
                             layers.Conv2D(c2, 3, activation="relu", name="conv2"),
                             layers.MaxPooling2D(2, name="pool"),
                             layers.Flatten(name="flatten"),
                             layers.Dense(fc, activation="relu", name="fc1"),
                             layers.Dense(10, name="logits")], name=name)


def input_shape(model_name):
    return (784,) if model_name.endswith("mlp") else (28, 28, 1)


def make_batch(model_name, batch, seed):
    import numpy as np

    if model_name in zoo_models.MODELS:
        return zoo_models.make_batch(model_name, batch, seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *input_shape(model_name))).astype(np.float32)
    y = rng.integers(0, 10, size=(batch,)).astype(np.int32)
    return x, y


def momentum(model_name):
    return zoo_models.MOMENTUM.get(model_name, MOMENTUM)


def sgd(model_name):
    import keras
    return keras.optimizers.SGD(LR, momentum=momentum(model_name))


def constants(batch):
    """The batch as tf.constant tensors (x may be a tuple: the DLRM's two inputs)."""
    import tensorflow as tf
    return tf.nest.map_structure(tf.constant, batch)


def loss_fn():
    import keras
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_step(model, optimizer, loss, scale=1.0, wrap_tape=None):
    """The step every mode runs; `scale` makes a cross-replica SUM an average (TF
    strategies), `wrap_tape` turns the tape into a distributed one (Horovod)."""
    import tensorflow as tf

    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True)) * scale
        sources = model.trainable_variables
        if wrap_tape is not None:
            tape = wrap_tape(tape)
            sources = [v.value for v in sources]  # Horovod's tape wants tf.Variables
        grads = tape.gradient(value, sources)
        optimizer.apply(grads, model.trainable_variables)
        return value
    return step


# --- the modes ---------------------------------------------------------------------------

def time_steps(run_one, args, window, samples_per_step):
    times, losses = [], []
    start = None
    profiling = False
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            start = window.snapshot()
            if args.tf_profile:  # TensorFlow's profiler over the first 3 timed steps
                import tensorflow as tf
                tf.profiler.experimental.start(os.path.join(args.tf_profile,
                                                            f"{args.mode}-{os.getpid()}"))
                profiling = True
        if profiling and i == args.warmup + 3:
            tf.profiler.experimental.stop()
            profiling = False
        t0 = time.perf_counter()
        losses.append(run_one())
        times.append(time.perf_counter() - t0)
    if profiling:
        tf.profiler.experimental.stop()
    end = window.snapshot()
    return dict(warmup_s=[round(t, 4) for t in times[:args.warmup]],
                step_s=[round(t, 4) for t in times[args.warmup:]],
                samples_per_step=samples_per_step, loss_first=losses[0], loss_last=losses[-1],
                window=window.summary(start, end))


class CodecCounters:
    """Wraps a step: the engine's counters (compression: docs/compression.md) over the
    timed steps, per step: payload bytes sent and received, the float32 bytes the
    compressed pushes stood for, their encoded bytes, and the engine thread's CPU time
    encoding and decoding."""

    NAMES = ("bytes_sent", "bytes_received", "codec_raw_bytes", "codec_encoded_bytes",
             "codec_micros")

    def __init__(self, step, warmup):
        from tf_ps_ops.common import library as _library
        self.c_api, self.step, self.warmup, self.calls = _library.c_api(), step, warmup, 0
        self.start = self.read()

    def read(self):
        return [getattr(self.c_api, "tfps_" + name)() for name in self.NAMES]

    def __call__(self):
        if self.calls == self.warmup:
            self.start = self.read()
        self.calls += 1
        return self.step()

    def per_step(self):
        steps = max(1, self.calls - self.warmup)
        return {name: (end - start) / steps
                for name, start, end in zip(self.NAMES, self.start, self.read())}


def run_plain(args, window):
    """single, sum, ps, sfb, hybrid, auto, horovod: one tf.function per step."""
    import tensorflow as tf

    wrap_tape, workers, rank = None, 1, 0
    if args.mode in TFPS:
        import tf_ps_ops as hvd
        hvd.init()
        workers, rank = hvd.size(), hvd.rank()
    elif args.mode == "horovod":
        import horovod.tensorflow as hvd
        hvd.init()
        workers, rank = hvd.size(), hvd.rank()
        wrap_tape = hvd.DistributedGradientTape
    model = build_model(args.model)
    plan = plan_inputs(model, args) if args.predict and args.mode in TFPS else None
    if args.mode in CONVERTED:
        import sfb
        model = sfb.convert(model, mode=args.mode, batch_size=args.batch)
    if args.mode == "ps":
        import tf_ps_ops.optimizers
        optimizer = tf_ps_ops.optimizers.SGD(LR, momentum=momentum(args.model))
    elif args.mode in SUMMED:
        import tf_ps_ops as hvd
        optimizer = hvd.DistributedOptimizer(
            sgd(args.model), **({"plan": "auto"} if args.mode == "auto" else {}))
    else:
        optimizer = sgd(args.model)
    optimizer.build(model.trainable_variables)  # ps: every worker adopts rank 0's weights
    if args.mode in SUMMED:
        hvd.broadcast_variables(model.variables, root_rank=0)
    elif args.mode == "horovod":  # Horovod's needs the backing tf.Variables of Keras 3's
        hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    x, y = constants(make_batch(args.model, args.batch, seed=rank))
    step = tf.function(make_step(model, optimizer, loss_fn(), wrap_tape=wrap_tape),
                       jit_compile=False)
    run_one = lambda: float(step(x, y))  # noqa: E731
    if plan is not None:
        plan = (plan[0], timeline_ready(plan, run_one, args, rank))
    tuner = None
    if args.mode in TFPS:
        from tf_ps_ops.plan import autotune
        tuner = autotune.from_environment()  # TFPS_AUTOTUNE=1: train_bench's `tuned`
        if tuner is not None:
            run_one = _tuned(run_one, tuner)
        run_one = CodecCounters(run_one, args.warmup)
    result = time_steps(run_one, args, window, workers * args.batch)
    result.update(rank=rank, workers=workers, params=int(model.count_params()))
    if isinstance(run_one, CodecCounters):
        result["engine"] = run_one.per_step()
    if args.mode in CONVERTED:
        import sfb
        result["sfb_kernels"] = [v.path for v in model.trainable_variables
                                 if sfb.is_sfb_variable(v)]
    if plan is not None:
        result["plan_inputs"] = plan_choices(*plan, args.mode, result.get("sfb_kernels", []),
                                             served_paths(optimizer))
    if tuner is not None:
        kept = autotune.tuning()
        result["autotune"] = dict(done=tuner.done, kept=list(kept), history=tuner.history)
        if plan is not None:  # predicted under the settings the timed steps ran with
            result["plan_inputs"]["settings"].update(fusion_bytes=kept[0], credit=kept[1])
    return result, (hvd.shutdown if args.mode != "single" else None)


def _tuned(run_one, tuner):
    """run_one, and after it the autotuner's end of a batch (as Keras' fit calls it)."""
    count = [0]

    def step():
        loss = run_one()
        tuner.on_train_batch_end(count[0])
        count[0] += 1
        return loss
    return step


# --- the cost model's inputs (--predict) -----------------------------------------------------

def plan_inputs(model, args):
    """What train_bench needs to predict this configuration's step with the planner's
    cost model (tf_ps_ops.plan.cost): the cluster as plan="auto" measures it (a push_pull
    probe through the servers, the codecs' CPU cost, the compute lost to communication),
    the worker's optimizer update per byte, and the model's layers: (the layers, those
    inputs as JSON). The compute rate comes from the same sweep's single-process step
    (train_bench.predict_step). Collective: every rank calls it, before the model is
    converted or its weights adopted."""
    import dataclasses

    from tf_ps_ops.plan import auto, layers, measure

    measured = measure.measure_cluster()
    machine = dataclasses.replace(measured.machine, apply_per_byte=measure.apply_cost(model))
    row_update = momentum(args.model) == 0  # Keras' momentum updates every row of a table
    lay = [dataclasses.replace(layer, row_update=row_update) if layer.sparse else layer
           for layer in layers.from_keras(model)]
    return lay, dict(layers=json.loads(layers.to_json(lay))["layers"],
                     cluster=dataclasses.asdict(measured.cluster),
                     machine=dataclasses.asdict(machine), settings=auto.engine_settings())


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
                                          lambda tensor: _layer_of(tensor.split(".", 1)[-1]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    timed = ready_times.apply(lay, ready)
    return dict(inputs, layers=json.loads(layers.to_json(timed))["layers"])


def served_paths(optimizer):
    """The paths of the variables DistributedOptimizer(plan="auto") gave the servers."""
    from tf_ps_ops.plan import auto

    plan = getattr(optimizer, "tfps_plan", None)
    return [] if plan is None else sorted(key.split(".", 1)[1] for key in auto.served(plan))


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


def configure_threads(args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    inter = max(2, args.inter_op) if args.mode == "pss" else args.inter_op
    tf.config.threading.set_inter_op_parallelism_threads(inter)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--batch", type=int, default=None,
                        help="per worker; default 32, zoo models their own (zoo_models.py)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--inter-op", type=int, default=1,
                        help="TensorFlow's inter-op threads (ParameterServerStrategy: at "
                             "least 2). With 1 the executor computes a CNN's filter "
                             "gradients at the end of backward, after the input-gradient "
                             "chain")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--role", choices=("chief", "worker", "ps"), default="chief",
                        help="ParameterServerStrategy only")
    parser.add_argument("--pss-placement", choices=("balanced", "roundrobin"),
                        default="balanced", help="ParameterServerStrategy: where variables "
                        "go (see balanced_placement)")
    parser.add_argument("--pids-file", default=None)
    parser.add_argument("--ready-order", choices=("timeline", "layers"), default="timeline",
                        help="--predict: when the gradients are ready, from an engine "
                             "timeline of %d extra warm-up steps or in layer order"
                             % READY_STEPS)
    parser.add_argument("--tf-profile", default=None, metavar="DIR",
                        help="record TensorFlow's profile of the first 3 timed steps "
                             "under DIR (an XSpace per process; it slows those steps)")
    parser.add_argument("--predict", action="store_true",
                        help="tf_ps_ops modes: measure the cost model's inputs before "
                             "training (plan_inputs), for train_bench's predicted step")
    args = parser.parse_args()
    args.batch = args.batch or zoo_models.BATCH.get(args.model, 32)
    sys.path.insert(0, REPO)
    if args.mode == "pss" and args.role != "chief":
        return pss_server(args)
    configure_threads(args)
    window = Window(args.pids_file)
    runner = {"mwms": run_mwms, "pss": run_pss_chief}.get(args.mode, run_plain)
    result, shutdown = runner(args, window)
    result.update(mode=args.mode, model=args.model, batch=args.batch, pid=os.getpid())
    print("TRAIN_RESULT " + json.dumps(result), flush=True)
    if shutdown is not None:
        shutdown()
    if args.mode in ("mwms", "pss"):
        # TF's gRPC runtime can linger at interpreter exit once the peers are gone; the
        # result is out, so leave without running it down.
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
