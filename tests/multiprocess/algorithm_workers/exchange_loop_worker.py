"""Worker for test_algorithms.py's fault test: ring neighbour exchanges in a loop, printing
`step N ok`; on an error prints it to stderr and exits 3."""

import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "workers"))
from harness import pin_threads  # noqa: E402


def main():
    pin_threads()
    import tensorflow as tf

    import tf_ps_ops as hvd
    from tf_ps_ops.common.library import ops

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    peers = [(r - 1) % n, (r + 1) % n]
    try:
        for step in range(int(sys.argv[1])):
            ops().ps_neighbour_exchange(np.full(1000, r, np.float32), peers, peers, [],
                                        tensor_name="loop")
            print(f"step {step} ok", flush=True)
    except tf.errors.OpError as e:
        print(e.message, file=sys.stderr, flush=True)
        os._exit(3)
    hvd.shutdown()


if __name__ == "__main__":
    main()
