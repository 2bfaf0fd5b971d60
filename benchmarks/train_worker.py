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

This file is the command line and the modes that run one tf.function per step
(run_plain); the measurement is in train_measure.py, the models, data and step in
train_models.py, TensorFlow's strategies in train_peers.py, and the cost model's inputs
(--predict) in train_plan_inputs.py.
"""

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_measure import CodecCounters, Window, time_steps  # noqa: E402
from train_models import (LR, MODELS, build_model, constants, loss_fn,  # noqa: E402
                          make_batch, make_step, momentum, sgd)
from train_peers import pss_server, run_mwms, run_pss_chief  # noqa: E402
from train_plan_inputs import (READY_STEPS, plan_choices, plan_inputs,  # noqa: E402
                               served_paths, timeline_ready)
import zoo_models  # noqa: E402

MODES = ("single", "sum", "ps", "sfb", "hybrid", "auto", "mwms", "pss", "horovod")
TFPS = ("sum", "ps", "sfb", "hybrid", "auto")
CONVERTED = ("sfb", "hybrid", "auto")  # sfb.convert(model, mode=...) first
SUMMED = ("sum",) + CONVERTED  # tf_ps_ops.DistributedOptimizer


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
    model, optimizer = distribute(model, args.mode, args.model, args.batch)
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
        kept = (*autotune.tuning(), autotune.cycle())
        result["autotune"] = dict(done=tuner.done, kept=list(kept), history=tuner.history)
        if plan is not None:  # predicted under the settings the timed steps ran with
            result["plan_inputs"]["settings"].update(fusion_bytes=kept[0], credit=kept[1])
    return result, (hvd.shutdown if args.mode != "single" else None)


def distribute(model, mode, model_name, batch):
    """(model, optimizer) for `mode`: the model converted first for SFB's modes
    (sfb.convert), the optimizer built, and every worker on rank 0's weights. Variables
    are keyed by their paths, so models built under different keras.name_scope()s can
    train side by side in one job (benchmarks/interleaved_worker.py)."""
    if mode in CONVERTED:
        import sfb
        model = sfb.convert(model, mode=mode, batch_size=batch)
    if mode == "ps":
        import tf_ps_ops.optimizers
        optimizer = tf_ps_ops.optimizers.SGD(LR, momentum=momentum(model_name))
    elif mode in SUMMED:
        import tf_ps_ops as hvd
        optimizer = hvd.DistributedOptimizer(
            sgd(model_name), **({"plan": "auto"} if mode == "auto" else {}))
    else:
        optimizer = sgd(model_name)
    optimizer.build(model.trainable_variables)  # ps: every worker adopts rank 0's weights
    if mode in SUMMED:
        hvd.broadcast_variables(model.variables, root_rank=0)
    elif mode == "horovod":  # Horovod's needs the backing tf.Variables of Keras 3's
        import horovod.tensorflow as hvd
        hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    return model, optimizer


def _tuned(run_one, tuner):
    """run_one, and after it the autotuner's end of a batch (as Keras' fit calls it)."""
    count = [0]

    def step():
        loss = run_one()
        tuner.on_train_batch_end(count[0])
        count[0] += 1
        return loss
    return step


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
