"""An elastic worker without TensorFlow, under `tfps-run --elastic` (or a discovery
script): the core engine (tests/native.py) driven through the same epoch file as
tf_ps_ops.elastic (tf_ps_ops/common/elastic_epoch.py), so that elastic changes can be
measured and tested at N = 16..64 on one host (tests/scale/test_elastic_scale.py,
benchmarks/scale_elastic.py).

    elastic_worker.py OUT_DIR MIN_STEPS FINAL_EPOCH [--kill ID:STEP] [--mark STEPS]
                      [--step-sleep S]

Each step push_pulls a 64 KB float32 gradient that depends on the worker's stable id
(w<k>) and the step, and adds the sum to its weights. The sum is checked byte for byte
against NumPy's sum over the ids of the epoch's members (tests/scale/scale_worker.py's
small integers: exact in any order). After the step the worker commits (the step, the
weights and the ids of each step so far) and, as elastic.State.commit does, all members
agree on the newest epoch the driver published (an allgather of the newest each has
seen): if it is newer than theirs, every member re-initialises into it. A collective that
fails (a member lost) restores the last commit and re-initialises into the next epoch.
After every (re-)initialisation, rank 0's step and weights are broadcast: a newcomer
takes them over. The loop ends at the first step >= MIN_STEPS in an epoch >= FINAL_EPOCH;
each worker then writes OUT_DIR/<id>.json (weights, step, the members of each step it
ran), which the caller replays with NumPy.

Timings: each worker appends a line `{"epoch", "rank", "size", "first_step"}` (wall
clock, time.time(), after its first step of each epoch) to OUT_DIR/steps-<id>.jsonl, with
its first epoch's "process_start" and "announced" (before it waits for a place), or a
later epoch's "shutdown_s" and "joined_s" (the engine's shutdown, and that plus the
rendezvous).
--kill ID:STEP: worker ID writes time.time() to OUT_DIR/killed and SIGKILLs itself at the
start of step STEP. --mark STEPS: rank 0 creates OUT_DIR/mark-<epoch> after STEPS steps
of each epoch (when a caller may change the hosts). Errors go to stderr, exit code 3.
"""

import argparse
import json
import os
import signal
import sys
import time

START = time.time()

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from native import load_core  # noqa: E402
from scale_worker import check, fail, summed, value  # noqa: E402
from tf_ps_ops.common import elastic_epoch  # noqa: E402 (standard library only)

COUNT = 16_384  # float32: 64 KB
MAX_STEPS = 1000  # N = 64: the weights stay below 2**24, exact in float32


def join_next_epoch(core, after=None):
    """What init() does under TFPS_ELASTIC=1 (common/init.py), for the core: waits for an
    epoch that lists this worker, joins its rendezvous (the next epoch's if this one is
    abandoned), acknowledges it. Returns the epoch."""
    timeout = float(os.environ.get("TFPS_TIMEOUT", "120"))
    while True:
        epoch, rank, size, scheduler, num_servers = elastic_epoch.wait_for_place(
            timeout, after)
        host, port = scheduler.rsplit(":", 1)
        try:
            core.init(host, int(port), rank, size, num_servers)
        except RuntimeError as e:
            if not elastic_epoch.superseded(epoch, 5.0):
                raise
            print(f"epoch {epoch} was abandoned ({str(e).splitlines()[0][:200]}); joining "
                  "the next", file=sys.stderr, flush=True)
            after = epoch
            continue
        elastic_epoch.joined(epoch)
        return epoch


def wait_for_new_epoch(error):
    """After a failed collective: the driver publishes the next epoch once it sees the
    lost worker exit (as tf_ps_ops.elastic waits, 30 s at most)."""
    give_up = time.monotonic() + 30.0
    while elastic_epoch.latest_epoch_number() <= elastic_epoch.current_epoch_number():
        if time.monotonic() > give_up:
            raise error
        time.sleep(0.05)


class Worker:
    def __init__(self, core, args):
        self.core, self.args = core, args
        self.me = os.environ["TFPS_ELASTIC_ID"]
        self.number = int(self.me[1:])
        self.step, self.w, self.history = 0, np.zeros(COUNT, np.float32), []
        self.marks = {}  # this epoch's: seconds of the shutdown and of the rejoin
        self.commit()
        self.killer, kill_step = args.kill.split(":")
        self.kill_step = int(kill_step)

    def commit(self):
        self.saved = (self.step, self.w.copy(), list(self.history))

    def restore(self):
        self.step, w, history = self.saved
        self.w, self.history = w.copy(), list(history)

    def begin_epoch(self, epoch):
        """After a (re-)initialisation: the members' ids in rank order, and rank 0's step
        and weights."""
        self.epoch, self.rank, self.size = epoch, self.core.rank(), self.core.size()
        ids = self.core.allgather("ids", np.array([self.number], np.int32))
        self.members = [int(part[0]) for part in ids]
        if self.members[self.rank] != self.number:
            fail(self.rank, f"epoch {epoch}: rank {self.rank} is w{self.members[self.rank]} "
                            f"in the allgather, expected {self.me}")
        state = np.concatenate([np.array([self.step], np.float32), self.w])
        state = self.core.push_pull("sync", state, root_rank=0)
        self.step, self.w = int(state[0]), state[1:].copy()
        self.commit()
        self.first_step_done = False

    def run_step(self):
        if self.me == self.killer and self.step == self.kill_step:
            with open(os.path.join(self.args.out_dir, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        got = self.core.push_pull("grad", value(COUNT, self.number, self.step))
        check(self.rank, f"epoch {self.epoch} step {self.step} (members "
                         f"{self.members})", got, summed(COUNT, self.members, self.step))
        self.w += got
        self.history.append(list(self.members))
        self.step += 1
        if not self.first_step_done:
            self.first_step_done = True
            self.steps_in_epoch = 0
            with open(os.path.join(self.args.out_dir, f"steps-{self.me}.jsonl"), "a") as f:
                f.write(json.dumps({"epoch": self.epoch, "rank": self.rank, "size": self.size,
                                    "first_step": time.time(), **self.marks}) + "\n")
        self.steps_in_epoch += 1
        if self.rank == 0 and self.steps_in_epoch == self.args.mark:
            with open(os.path.join(self.args.out_dir, f"mark-{self.epoch}"), "w"):
                pass
        self.commit()

    def hosts_updated(self):
        """elastic.State.check_host_updates: every member sees the same answer."""
        seen = max(elastic_epoch.latest_epoch_number(), self.epoch)
        parts = self.core.allgather("check_host_updates", np.array([seen], np.int64))
        return max(int(p[0]) for p in parts) > self.epoch

    def done(self):
        return (self.step >= self.args.min_steps and self.epoch >= self.args.final_epoch
                and self.first_step_done)

    def train(self):
        """elastic.run's loop: returns once done() on every member."""
        self.marks = {"process_start": START, "announced": time.time()}
        epoch = join_next_epoch(self.core)
        while True:
            try:
                self.begin_epoch(epoch)
                while not self.done():
                    if self.step >= MAX_STEPS:
                        fail(self.rank, f"no epoch {self.args.final_epoch} by step {MAX_STEPS}")
                    self.run_step()
                    if self.hosts_updated():
                        break
                    time.sleep(self.args.step_sleep)
                else:
                    return
            except RuntimeError as e:
                print(f"{self.me}: a collective failed in epoch {self.epoch} "
                      f"({str(e).splitlines()[0][:200]}); restoring the last commit",
                      file=sys.stderr, flush=True)
                wait_for_new_epoch(e)
                self.restore()
            began = time.time()
            self.core.shutdown()
            self.marks = {"shutdown_s": time.time() - began}
            epoch = join_next_epoch(self.core)
            self.marks["joined_s"] = time.time() - began


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("min_steps", type=int)
    parser.add_argument("final_epoch", type=int)
    parser.add_argument("--kill", default="-:-1", help="ID:STEP")
    parser.add_argument("--mark", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    args = parser.parse_args()
    core = load_core()
    worker = Worker(core, args)
    worker.train()
    core.shutdown()
    with open(os.path.join(args.out_dir, f"{worker.me}.json"), "w") as f:
        json.dump({"step": worker.step, "w": worker.w.tolist(), "history": worker.history,
                   "epoch": worker.epoch, "size": worker.size}, f)
    print(f"{worker.me}: elastic ok, rank {worker.rank} of {worker.size} in epoch "
          f"{worker.epoch}", flush=True)


if __name__ == "__main__":
    main()
