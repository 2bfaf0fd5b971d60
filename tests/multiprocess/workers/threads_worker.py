"""Worker for test_eager_threads.py: unnamed eager collectives called from several threads
at once (issue 11, defect 4). Each thread's n-th call must meet the n-th call of the
thread of the same name on the other workers, never another thread's tensor."""

import random
import threading
import time

import numpy as np
import tensorflow as tf

from harness import env_rank, run_checks

CALLS = 10


def run_threads(bodies, names=None):
    """Runs each body in its own thread; re-raises the first failure."""
    errors = []

    def wrap(body):
        def run():
            try:
                body()
            except BaseException as error:  # reported by the caller
                errors.append(error)
        return run

    threads = [threading.Thread(target=wrap(body), name=None if names is None else names[i])
               for i, body in enumerate(bodies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), f"{thread.name} did not finish"
    if errors:
        raise errors[0]


def jitter(rng):
    # Different on every worker: the threads' calls interleave differently on each.
    time.sleep(rng.uniform(0, 0.02))


def check_concurrent_unnamed_allreduce(hvd):
    size = hvd.size()
    wrong = []

    def body(thread_index):
        rng = random.Random(env_rank() * 100 + thread_index)
        for call in range(CALLS):
            jitter(rng)
            value = 1000.0 * thread_index + 10.0 * call + hvd.rank()
            got = hvd.allreduce(tf.fill([3], value), op=hvd.Sum).numpy()
            expected = size * (1000.0 * thread_index + 10.0 * call) + sum(range(size))
            if not np.allclose(got, expected):
                wrong.append((thread_index, call, got[0], expected))

    run_threads([lambda i=i: body(i) for i in range(2)])
    assert not wrong, f"{len(wrong)} of {2 * CALLS} results mixed: {wrong}"


def check_concurrent_unnamed_broadcast_and_allgather(hvd):
    wrong = []

    def body(thread_index):
        rng = random.Random(env_rank() * 100 + thread_index + 7)
        for call in range(CALLS):
            jitter(rng)
            value = 1000.0 * thread_index + call + 0.5 * hvd.rank()
            root = hvd.broadcast(tf.fill([2], value), root_rank=0).numpy()
            if not np.allclose(root, 1000.0 * thread_index + call):
                wrong.append(("broadcast", thread_index, call, root[0]))
            gathered = hvd.allgather(tf.fill([1], value)).numpy()
            expected = [1000.0 * thread_index + call + 0.5 * r for r in range(hvd.size())]
            if not np.allclose(gathered, expected):
                wrong.append(("allgather", thread_index, call, gathered.tolist()))

    run_threads([lambda i=i: body(i) for i in range(2)])
    assert not wrong, f"mixed results: {wrong}"


def check_two_live_threads_of_one_name_are_refused(hvd):
    # Their keys would collide: the second gets a clear error before anything is sent.
    started = threading.Event()
    release = threading.Event()
    errors = []

    def first():
        hvd.allreduce(tf.ones([1]), op=hvd.Sum)  # registers the name "twin" for its life
        started.set()
        release.wait(60)

    def second():
        started.wait(60)
        try:
            hvd.allreduce(tf.ones([1]), op=hvd.Sum)
        except RuntimeError as error:
            errors.append(str(error))
        finally:
            release.set()

    run_threads([first, second], names=["twin", "twin"])
    assert len(errors) == 1, errors
    assert "twin" in errors[0] and "name=" in errors[0], errors[0]


def check_main_thread_unnamed_still_works(hvd):
    got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy()
    assert np.allclose(got, [hvd.size(), 2.0 * hvd.size()]), got


CHECKS = [check_concurrent_unnamed_allreduce, check_concurrent_unnamed_broadcast_and_allgather,
          check_two_live_threads_of_one_name_are_refused, check_main_thread_unnamed_still_works]

if __name__ == "__main__":
    run_checks(CHECKS)
