"""A worker without TensorFlow that checks the peer-to-peer allgather against NumPy:
first dimensions that differ per rank, several calls of one name, and the error when the
trailing dimensions disagree. Exits 0 when every check passed."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def main():
    core = load_core()
    rank, size = init_from_env(core)
    for call in range(3):
        mine = np.random.default_rng(rank * 100 + call).standard_normal((rank + call, 5))
        parts = core.allgather("factors", mine.astype(np.float32))
        assert len(parts) == size
        for r, part in enumerate(parts):
            expected = np.random.default_rng(r * 100 + call).standard_normal((r + call, 5))
            np.testing.assert_array_equal(part, expected.astype(np.float32))
    big = np.full((32, 4096), rank, np.float64)
    for r, part in enumerate(core.allgather("big", big)):
        assert part.shape == (32, 4096) and np.all(part == r)
    try:
        core.allgather("mismatch", np.zeros((2, 3 + rank), np.int32))
        sys.exit("no error for mismatched trailing dimensions")
    except RuntimeError as e:
        assert "FailedPrecondition" in str(e) and "'mismatch'" in str(e), e
        print("mismatch error:", e)
    sent = core.stats()["peer_bytes_sent"]
    core.shutdown()
    print(f"peer bytes sent {sent}")


if __name__ == "__main__":
    main()
