"""An elastic training loop under `tfps-run --elastic` (tests/multiprocess/test_elastic.py).

    loop_worker.py OUT_DIR MIN_STEPS FINAL_SIZE KILL_ID KILL_STEP [--ps]
                   [--kill-server ID:STEP] [--stop ID:STEP] [--die-in-rendezvous ID]
                   [--mark ID:STEP] [--mark-sizes ID] [--size-runs N1,N2,...]
                   [--step-sleep S] [--momentum M]

Trains one float64 vector by SGD on a gradient that depends on the worker's stable id and
the step, averaged over the workers by hvd.allreduce, inside hvd.elastic.run with a
TensorFlowState committed after every step. The state also records, per step, the ids
that took part (an allgather_object), so the test can replay the run with NumPy. Worker
KILL_ID SIGKILLs itself at the start of step KILL_STEP. The loop ends once MIN_STEPS steps
are done and the last step had FINAL_SIZE workers; each worker then writes
OUT_DIR/<id>.json.

--kill-server ID:STEP: worker ID SIGKILLs a server of its epoch (kill_server.py) at the
start of step STEP, once. --ps: PS mode, the servers run the SGD update
(tf.raw_ops.ResourceApplyGradientDescent under the graph rewrite) on the average of the
workers' gradients, which is the same arithmetic as the allreduce loop.
--stop ID:STEP: worker ID SIGSTOPs itself at the start of step STEP (the driver kills it).
--mark ID:STEP: worker ID creates OUT_DIR/mark-STEP at the start of step STEP, so that a
test can change the job's hosts at a known point of the training (test_elastic_growth.py);
--mark-sizes ID: worker ID creates OUT_DIR/size-N once it committed a step of N workers,
and appends `TIME N` (time.time()) to OUT_DIR/steps.txt after each commit (join and
recovery times).
--size-runs N1,N2,...: instead of FINAL_SIZE, the loop ends (after MIN_STEPS) once the
sizes of the steps so far, runs of equal sizes merged, are N1,N2,... (e.g. 2,3,2: grown
by one, then shrunk back). --step-sleep S: the pause after each step (default 0.02 s).
--momentum M (with --ps): the update is tf.raw_ops.ResourceApplyMomentum with momentum M,
so the servers keep a slot (accum) that a membership change must not reset.
--die-in-rendezvous ID: every worker writes OUT_DIR/initing-<id> just before init(); worker
ID waits until all others have, gives them a second to register, and SIGKILLs itself, so
that the others wait in the first epoch's rendezvous for it.
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import tf_ps_ops as hvd  # noqa: E402
from kill_server import kill_a_server  # noqa: E402
from loop_gradient import LR, gradient  # noqa: E402

MAX_STEPS = 3000  # a bound, so that a broken join cannot loop for ever


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("min_steps", type=int)
    parser.add_argument("final_size", type=int)
    parser.add_argument("kill_id")
    parser.add_argument("kill_step", type=int)
    parser.add_argument("--ps", action="store_true")
    parser.add_argument("--kill-server", default="-:-1")
    parser.add_argument("--stop", default="-:-1")
    parser.add_argument("--die-in-rendezvous", default="-")
    parser.add_argument("--mark", default="-:-1")
    parser.add_argument("--mark-sizes", default="-")
    parser.add_argument("--size-runs", default=None)
    parser.add_argument("--step-sleep", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=None)
    parser.add_argument("--workers", type=int, default=0, help="for --die-in-rendezvous")
    args = parser.parse_args()
    out_dir, min_steps, final_size = args.out_dir, args.min_steps, args.final_size
    kill_id, kill_step = args.kill_id, args.kill_step
    server_killer, server_kill_step = args.kill_server.split(":")
    server_kill_step = int(server_kill_step)
    stopper, stop_step = args.stop.split(":")
    stop_step = int(stop_step)
    marker, mark_step = args.mark.split(":")
    mark_step = int(mark_step)
    me = os.environ["TFPS_ELASTIC_ID"]
    with open(os.path.join(out_dir, f"initing-{me}"), "w"):
        pass
    if me == args.die_in_rendezvous:
        others = [f"initing-w{k}" for k in range(args.workers) if f"w{k}" != me]
        while not all(os.path.exists(os.path.join(out_dir, o)) for o in others):
            time.sleep(0.05)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.init()
    w = tf.Variable(np.zeros(4), dtype=tf.float64)
    accum = tf.Variable(np.zeros(4), dtype=tf.float64)  # the servers hold the real one
    if args.ps:
        import tf_ps_ops.ps_mode as ps_mode
        ps_mode.enable_graph_rewrite()
        ps_mode.initialize_variables([w])
    state = hvd.elastic.TensorFlowState([w], step=0, history=())
    killed_server = []
    size_runs = [int(n) for n in args.size_runs.split(",")] if args.size_runs else None

    def done():
        if state.step < min_steps:
            return False
        if size_runs is None:
            return len(state.history[-1]) == final_size
        sizes = [len(ids) for ids in state.history]
        return [n for k, n in enumerate(sizes) if k == 0 or sizes[k - 1] != n] == size_runs

    @hvd.elastic.run
    def train(state):
        while not done():
            if state.step >= MAX_STEPS:
                raise RuntimeError(f"no step with {final_size} workers (--size-runs "
                                   f"{args.size_runs}) by step {MAX_STEPS}")
            if me == kill_id and state.step == kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            if me == marker and state.step == mark_step:
                with open(os.path.join(out_dir, f"mark-{mark_step}"), "w"):
                    pass
            if me == stopper and state.step == stop_step:
                os.kill(os.getpid(), signal.SIGSTOP)
            if me == server_killer and state.step == server_kill_step and not killed_server:
                killed_server.append(state.step)
                kill_a_server()
            if args.ps and args.momentum is not None:
                tf.raw_ops.ResourceApplyMomentum(
                    var=w.handle, accum=accum.handle, lr=tf.constant(LR, tf.float64),
                    grad=tf.constant(gradient(me, state.step)),
                    momentum=tf.constant(args.momentum, tf.float64))
            elif args.ps:
                tf.raw_ops.ResourceApplyGradientDescent(
                    var=w.handle, alpha=tf.constant(LR, tf.float64),
                    delta=tf.constant(gradient(me, state.step)))
            else:
                g = hvd.allreduce(tf.constant(gradient(me, state.step)), name="grad")
            ids = hvd.allgather_object(me, name="ids")
            if not args.ps:
                w.assign_sub(LR * g)
            state.history = state.history + (tuple(ids),)
            state.step += 1
            state.commit()
            if me == args.mark_sizes:
                with open(os.path.join(out_dir, f"size-{len(ids)}"), "w"):
                    pass
                with open(os.path.join(out_dir, "steps.txt"), "a") as f:
                    f.write(f"{time.time()} {len(ids)}\n")
            time.sleep(args.step_sleep)  # the other workers run on the same two cores

    train(state)
    with open(os.path.join(out_dir, f"{me}.json"), "w") as f:
        json.dump({"w": w.numpy().tolist(), "history": state.history, "rank": hvd.rank(),
                   "size": hvd.size(), "elastic_dir": os.environ["TFPS_ELASTIC_DIR"]}, f)


if __name__ == "__main__":
    main()
