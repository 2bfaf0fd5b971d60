"""A worker without TensorFlow that checks compressed push_pull against the NumPy model of
the same arithmetic (tests/codec_reference.py): every worker encodes its partition (with
error feedback), the server decodes, sums in float32, re-encodes the sum (with its own
error feedback), the worker decodes. Each worker models all workers and the servers, from
the seeds every worker's input comes from. Exits 0 when every check passed.

Run with TFPS_PARTITION_BYTES=16384 and TFPS_COMPRESSION=int8 (the job default)."""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import codec_reference as ref  # noqa: E402
from native import init_from_env, load_core  # noqa: E402

STEPS = 3
SPECS = ["fp16", "bf16", "int8", "onebit", "topk:0.05", "randomk:0.1", ""]  # "": the default
N = 3 * 4096 + 1001  # partitions of 4096 floats: whole chunks, then a partial one


def inputs(rank, name, step, n=N):
    rng = np.random.default_rng([rank, step, sum(map(ord, name))])
    return (rng.standard_normal(n) * (1 + rank)).astype(np.float32)


class Model:
    """What one compressed tensor's push_pull returns, step by step, on every worker."""

    def __init__(self, core, name, spec, size, feedback):
        self.name = name
        self.codec = spec.split(":")[0]
        self.ratio = float(spec.split(":")[1]) if ":" in spec else 1.0
        self.key = core.key_of_name(name)
        part_bytes = int(os.environ["TFPS_PARTITION_BYTES"])
        servers = int(os.environ["TFPS_NUM_SERVERS"])
        self.parts = core.partition_tensor(self.key, N, 4, part_bytes, servers, 1)
        self.workers = [ref.ErrorFeedbackModel() for _ in range(size)]
        self.server = ref.ErrorFeedbackModel()
        self.size, self.feedback = size, feedback

    def _encode(self, model, slot, x, k, seed):
        if self.feedback:
            return model.encode(slot, self.codec, x, k, seed)
        return ref.encode(self.codec, x, k, seed)

    def k(self, count):
        return ref.sparse_k(self.ratio, count) if self.codec in ("topk", "randomk") else 0

    def step(self, step):
        """The result of call `step` and the bytes one worker's push of it encodes to."""
        out, encoded = np.empty(N, np.float32), 0
        xs = [inputs(r, self.name, step) for r in range(self.size)]
        for part in self.parts:
            index, offset, count = part[0], part[1], part[2]
            k = self.k(count)
            seed = ref.randomk_seed(self.key, index, step)
            total = np.zeros(count, np.float32)
            for r in range(self.size):
                data = self._encode(self.workers[r], index, xs[r][offset:offset + count], k, seed)
                total += ref.decode(self.codec, data, count, k, seed)
            encoded += data.size
            data = self._encode(self.server, index, total, k, seed)
            out[offset:offset + count] = ref.decode(self.codec, data, count, k, seed)
        return out, encoded


def check(core, rank, size, spec, feedback):
    name = f"codec.{spec or 'default'}.{int(feedback)}"
    model = Model(core, name, spec or "int8", size, feedback)
    for step in range(1, STEPS + 1):
        before = core.stats()
        got = core.push_pull(name, inputs(rank, name, step), compression=spec,
                             error_feedback=int(feedback))
        after = core.stats()
        want, encoded = model.step(step)
        if model.codec == "int8":  # float sums in another order may move a code by one
            tol = np.repeat([np.ptp(want[c:c + 1024]) / 255 * 1.01 + 1e-6
                             for c in range(0, N, 1024)], 1024)[:N]
            bad = np.abs(got - want) > tol
            assert not bad.any(), (spec, step, np.flatnonzero(bad)[:5])
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{spec} {step}")
        sent = after["codec_encoded_bytes"] - before["codec_encoded_bytes"]
        assert sent == encoded, (spec, sent, encoded)
        assert after["bytes_sent"] - before["bytes_sent"] == encoded
        assert after["bytes_received"] - before["bytes_received"] == encoded
        assert after["codec_raw_bytes"] - before["codec_raw_bytes"] == 4 * N
    print(f"{spec or 'default'} feedback={feedback}: {STEPS} steps match, {encoded} bytes "
          f"per push for {4 * N}")


def main():
    core = load_core()
    rank, size = init_from_env(core)
    for spec in SPECS:
        check(core, rank, size, spec, True)
    check(core, rank, size, "onebit", False)
    # Not float32, or asked not to: travels as it is, summed exactly.
    ints = core.push_pull("ints", np.array([rank, 70000], np.int32))
    np.testing.assert_array_equal(ints, [size * (size - 1) // 2, 70000 * size])
    exact = core.push_pull("exact", np.full(5, 1 + 2.0 ** -20 * rank, np.float32),
                           compression="none")  # int8 would lose the 2^-20 steps
    np.testing.assert_array_equal(exact, np.full(5, size + 2.0 ** -20 * size * (size - 1) / 2))
    empty = core.push_pull("empty", np.zeros(0, np.float32), compression="topk:0.1")
    assert empty.shape == (0,)
    # Workers that disagree on the codec fail the step on every worker, saying so.
    try:
        core.push_pull("disagree", np.ones(10, np.float32),
                       compression="int8" if rank == 0 else "fp16")
        sys.exit("no error when workers disagree on the codec")
    except RuntimeError as e:
        assert "InvalidArgument" in str(e) and "disagree on compression" in str(e), e
        print("disagreement error:", e)
    core.shutdown()


if __name__ == "__main__":
    main()
