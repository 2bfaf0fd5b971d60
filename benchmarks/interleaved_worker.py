"""One worker of benchmarks/interleaved.py: several tf_ps_ops modes ("arms") of one model
trained side by side in one job, in short alternating blocks of steps, and one line
`INTERLEAVED_RESULT {json}` with every block's time and CPU.

    python3 benchmarks/interleaved_worker.py --model mobilenetv2 --arms sum,ps,auto \\
        --rounds 12 --block 10

Each arm is its own copy of the model, built under its own keras.name_scope (so its
variables, and the keys they are pushed and served under, are its own), from the same
seed, with its own optimizer set up exactly as train_worker.py sets up that mode
(train_worker.distribute). After --warmup steps of every arm, each round runs every arm
once, in an order rotated by a place per round: one step that is not timed (the switch),
then --block timed steps. Blocks of two arms in one round run seconds apart, where
separate runs of the two (train_bench.py) run minutes apart: the machine's drift, which
moves a separate run's step by 10-25% on these shared machines, mostly cancels in the
ratio of two blocks of one round.

Every step of every arm is collective, so the workers stay in step. Per block the worker
records its wall time, its own CPU and its host's ps_server's CPU (NETNS_SERVER_PID, set
by benchmarks/ps_cluster.py), and the loss of the block's last step.

--predict: before the arms, the cost model's inputs as plan="auto" measures them
(train_plan_inputs.plan_inputs: the link's probes, the codecs', the model's step beside
the link), once for every arm; after each arm's warm-up, when its gradients are ready (an
engine timeline) and the choice it made per layer (plan_choices). Each round then has
one more block, "single": rank 0 alone runs the model's local step with Keras' SGD while
the others wait at a barrier, as train_bench's single-process row does. The driver
predicts each arm's step from these (train_report.predict_step).

Threads: intra_op 1 and inter_op 1, as train_worker.py.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tensor_cpu_worker import thread_cpu  # noqa: E402
from train_measure import _pid_cpu  # noqa: E402
from train_models import MODELS, build_model, constants, loss_fn, make_batch  # noqa: E402
from train_plan_inputs import plan_choices, plan_inputs, served_paths  # noqa: E402
from train_plan_inputs import timeline_ready  # noqa: E402
from train_worker import TFPS, distribute  # noqa: E402
import zoo_models  # noqa: E402

ARMS = TFPS  # sum, ps, sfb, hybrid, auto
SINGLE = "single"  # --predict: rank 0's lone local step, a block per round


def arm_mode(arm):
    """The tf_ps_ops mode of an arm: "sum", or "sum:c250" (summation whose fusion
    batches wait up to 250 µs for more partitions, TFPS_CYCLE_US, set before each of
    its blocks)."""
    return arm.split(":", 1)[0]


def arm_cycle(arm, default):
    """The cycle time (µs) an arm's blocks run with: its ":c<µs>", else `default`."""
    _, _, tail = arm.partition(":")
    return int(tail[1:]) if tail else default


def valid_arm(arm):
    _, _, tail = arm.partition(":")
    return arm_mode(arm) in ARMS and (not tail or (tail[0] == "c" and tail[1:].isdigit()))


def rotated(arms, round_index):
    """The arms' order in round `round_index`: rotated by a place per round, so that
    no arm always runs first or right after the same one."""
    shift = round_index % len(arms)
    return list(arms[shift:]) + list(arms[:shift])


def build_arm(arm, model_name, batch):
    """(model, optimizer, step) of one arm (or SINGLE: Keras' own SGD, no communication),
    its variables under the name scope `arm`."""
    import keras
    import tensorflow as tf
    from train_models import make_step

    with keras.name_scope(arm.replace(":", "_")):
        model, optimizer = distribute(build_model(model_name), arm_mode(arm), model_name,
                                      batch)
    step = tf.function(make_step(model, optimizer, loss_fn()), jit_compile=False)
    return model, optimizer, step


def arm_layout(arm, model, optimizer):
    """What an arm's plan did (after its first step): how many variables it has, how many
    SFB exchanges (sfb.convert) and how many the servers update (PS mode, whole or by
    plan="auto")."""
    import sfb
    from train_plan_inputs import served_paths

    variables = model.trainable_variables
    served = len(variables) if arm_mode(arm) == "ps" else len(served_paths(optimizer))
    return dict(variables=len(variables),
                sfb=sum(1 for v in variables if sfb.is_sfb_variable(v)), ps=served)


class ServerCpu:
    """CPU seconds of this host's ps_server (0.0 outside an emulated host's cluster)."""

    def __init__(self):
        pid = os.environ.get("NETNS_SERVER_PID")
        self.pid = int(pid) if pid else None

    def __call__(self):
        return (_pid_cpu(self.pid) or 0.0) if self.pid else 0.0


def run(args):
    import sfb
    import tensorflow as tf
    import tf_ps_ops as hvd
    from tf_ps_ops.plan import autotune

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    rank = hvd.rank()
    x, y = constants(make_batch(args.model, args.batch, seed=rank))
    steps, weights, layout, inputs, started = {}, {}, {}, {}, time.monotonic()
    if args.predict:
        # The cost model's inputs, measured once for every arm as plan="auto" measures
        # them (collective), on the lone step's model; rank 0 alone then times that step
        # in every round while the others wait at a barrier: train_bench's single process.
        single, _, steps[SINGLE] = build_arm(SINGLE, args.model, args.batch)
        measured = plan_inputs(single, args)
    for arm in args.arms:
        model, optimizer, step = build_arm(arm, args.model, args.batch)
        steps[arm], weights[arm] = step, model.trainable_variables
        for _ in range(args.warmup):
            float(step(x, y))
        layout[arm] = arm_layout(arm, model, optimizer)
        if args.predict:  # when its gradients are ready, and what it chose per layer
            ready = timeline_ready(measured, lambda: float(step(x, y)), args, rank)
            sfb_kernels = [v.path for v in model.trainable_variables
                           if sfb.is_sfb_variable(v)]
            inputs[arm] = plan_choices(measured[0], ready, arm_mode(arm), sfb_kernels,
                                       served_paths(optimizer))
        if rank == 0:
            print("[interleaved] %s: built and warmed up (%.0f s since start)"
                  % (arm, time.monotonic() - started), file=sys.stderr, flush=True)
    arms = list(args.arms) + ([SINGLE] if args.predict else [])
    if args.predict:
        lone_block(steps[SINGLE], x, y, args.warmup, rank, hvd)
    server_cpu = ServerCpu()
    blocks = {arm: [] for arm in arms}
    job_cycle = autotune.cycle()  # TFPS_CYCLE_US: the arms without a ":c<µs>" of their own
    for r in range(args.rounds):
        for arm in rotated(arms, r):
            if arm == SINGLE:
                timed = lone_block(steps[SINGLE], x, y, args.block, rank, hvd)
                if timed is not None:
                    blocks[arm].append(dict(round=r, **timed))
                continue
            autotune.set_cycle(arm_cycle(arm, job_cycle))
            blocks[arm].append(dict(round=r, **timed_block(steps[arm], x, y, args.block,
                                                           server_cpu)))
        if rank == 0:
            print("[interleaved] round %d of %d: %s" % (r + 1, args.rounds, ", ".join(
                "%s %.3f s" % (arm, blocks[arm][-1]["step_s"]) for arm in arms)),
                file=sys.stderr, flush=True)
    # Every arm started from the same weights and saw the same data: a checksum of each
    # arm's weights lets the driver see that they trained alike (an exact arm agrees with
    # summation to float rounding).
    checksums = {arm: float(sum(tf.reduce_sum(tf.abs(v)).numpy() for v in weights[arm]))
                 for arm in args.arms}
    return dict(rank=rank, workers=hvd.size(), model=args.model, batch=args.batch,
                arms=list(args.arms), block=args.block, rounds=args.rounds,
                warmup=args.warmup, blocks=blocks, weight_abs_sum=checksums, layout=layout,
                plan_inputs=inputs, pid=os.getpid()), hvd.shutdown


def timed_block(step, x, y, count, server_cpu):
    """One untimed step (the switch: caches and threads back on this step), then `count`
    timed ones: per step, {step_s, cpu_s (this process), server_cpu_s (`server_cpu()`'s
    growth), threads ({thread name: CPU s}: "main", TensorFlow's "tf_Compute", ZeroMQ's
    "ZMQbg/IO/0", the engine's "python"; /proc counts 10 ms ticks), loss (the last)}."""
    float(step(x, y))
    threads0 = thread_cpu()
    t0, cpu0, server0 = time.perf_counter(), time.process_time(), server_cpu()
    for _ in range(count):
        loss = float(step(x, y))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server, threads = server_cpu() - server0, thread_cpu()
    return dict(step_s=round(wall / count, 5), cpu_s=round(cpu / count, 5),
                server_cpu_s=round(server / count, 5), loss=loss,
                threads={name: round((cpu_s - threads0.get(name, 0.0)) / count, 6)
                         for name, cpu_s in threads.items()})


def lone_block(step, x, y, count, rank, hvd):
    """Rank 0 runs a timed_block of `count` local steps while the others wait at a
    barrier; rank 0's block (no server works for it), None elsewhere."""
    timed = timed_block(step, x, y, count, lambda: 0.0) if rank == 0 and count else None
    hvd.barrier()
    return timed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--arms", default="sum,ps,auto",
                        help="tf_ps_ops modes, comma-separated (of %s), each with an "
                             "optional cycle time: sum:c250" % ", ".join(ARMS))
    parser.add_argument("--batch", type=int, default=None,
                        help="per worker; default the zoo's (zoo_models.py), else 32")
    parser.add_argument("--warmup", type=int, default=3, help="steps of each arm first")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block", type=int, default=10, help="timed steps per block")
    parser.add_argument("--predict", action="store_true",
                        help="measure the cost model's inputs (as plan=\"auto\" does) and "
                             "each arm's choices, and time rank 0's lone local step in "
                             "every round, for the driver's predicted steps")
    parser.add_argument("--ready-order", choices=("timeline", "layers"), default="timeline",
                        help="--predict: when the gradients are ready, from an engine "
                             "timeline of a few extra steps per arm, or in layer order")
    args = parser.parse_args()
    args.arms = args.arms.split(",")
    bad = [a for a in args.arms if not valid_arm(a)]
    if bad or len(set(args.arms)) != len(args.arms):
        parser.error("--arms takes distinct modes of %s; got %s"
                     % (", ".join(ARMS), ",".join(args.arms)))
    if args.rounds < 1 or args.block < 1 or args.warmup < 0:
        parser.error("--rounds and --block must be at least 1, --warmup at least 0")
    args.batch = args.batch or zoo_models.BATCH.get(args.model, 32)
    result, shutdown = run(args)
    print("INTERLEAVED_RESULT " + json.dumps(result), flush=True)
    shutdown()


if __name__ == "__main__":
    main()
