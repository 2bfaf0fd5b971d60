"""A worker without TensorFlow that checks compressed PS-mode pushes against the NumPy
model of the whole path (docs/compression.md, "PS mode"): every worker encodes its gradient
partition (with its error feedback, or without), the server decodes each push, sums in
float32, averages and applies the optimizer; the parameter comes back as float32. Each
worker models all workers and the server, from the seeds every worker's gradient comes from.
Exits 0 when every check passed.

Run with TFPS_PARTITION_BYTES=16384 and TFPS_COMPRESSION=int8 (the job default)."""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import codec_reference as ref  # noqa: E402
from native import init_from_env, load_core  # noqa: E402

STEPS = 4
N = 3 * 4096 + 1001  # partitions of 4096 floats: whole chunks, then a partial one
SGD, MOMENTUM = 1, 2  # Optimizer ids (tf_ps_ops/cc/wire/optimizer_spec.h)
LR, MU = 0.1, 0.9


def gradient(rank, name, step):
    rng = np.random.default_rng([rank, step, sum(map(ord, name))])
    return (rng.standard_normal(N) * (1 + rank)).astype(np.float32)


def initial(name):
    return np.random.default_rng(sum(map(ord, name))).standard_normal(N).astype(np.float32)


class Model:
    """The parameter every worker gets back, step by step."""

    def __init__(self, core, name, spec, size, feedback, momentum):
        self.name, self.size, self.feedback, self.momentum = name, size, feedback, momentum
        self.codec = spec.split(":")[0]
        self.ratio = float(spec.split(":")[1]) if ":" in spec else 1.0
        self.key = core.key_of_name(name)
        part_bytes = int(os.environ["TFPS_PARTITION_BYTES"])
        servers = int(os.environ["TFPS_NUM_SERVERS"])
        self.parts = core.partition_tensor(self.key, N, 4, part_bytes, servers, 1)
        self.workers = [ref.ErrorFeedbackModel() for _ in range(size)]
        self.value = initial(name)
        self.accum = np.zeros(N, np.float32)

    def step(self, step):
        """The parameter after call `step` and the bytes one worker's push encodes to."""
        grads = [gradient(r, self.name, step) for r in range(self.size)]
        total, encoded = np.zeros(N, np.float32), 0
        for part in self.parts:
            index, offset, count = part[0], part[1], part[2]
            k = ref.sparse_k(self.ratio, count) if self.codec in ("topk", "randomk") else 0
            seed = ref.randomk_seed(self.key, index, step + 1)  # the init was call 1
            for r in range(self.size):
                g = grads[r][offset:offset + count]
                data = (self.workers[r].encode(index, self.codec, g, k, seed) if self.feedback
                        else ref.encode(self.codec, g, k, seed))
                total[offset:offset + count] += ref.decode(self.codec, data, count, k, seed)
            encoded += data.size
        g = total * np.float32(1.0 / self.size)
        if self.momentum:  # TF's ResourceApplyMomentum (ps_server/optimizers.cc)
            self.accum = self.accum * np.float32(MU) + g
            self.value = self.value - self.accum * np.float32(LR)
        else:
            self.value = self.value - np.float32(LR) * g
        return self.value, encoded


def check(core, rank, size, spec, feedback, momentum=False):
    name = f"ps.{spec or 'default'}.{int(feedback)}.{int(momentum)}"
    model = Model(core, name, spec or "int8", size, feedback, momentum)
    start = initial(name) if rank == 0 else np.zeros(N, np.float32)
    # The init push (the parameter itself) never travels compressed, whatever is asked.
    before = core.stats()
    got = core.ps_push_pull(name, start, 0, compression=spec or "int8")
    np.testing.assert_array_equal(got, initial(name))
    assert core.stats()["codec_encoded_bytes"] == before["codec_encoded_bytes"]
    params = [LR, MU, 0.0, 0.0] if momentum else [LR]  # lr, momentum, nesterov, accum init
    for step in range(1, STEPS + 1):
        before = core.stats()
        got = core.ps_push_pull(name, gradient(rank, name, step), MOMENTUM if momentum else SGD,
                                params, compression=spec, error_feedback=int(feedback))
        after = core.stats()
        want, encoded = model.step(step)
        # The server sums in arrival order: float rounding only.
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5,
                                   err_msg=f"{name} step {step}")
        assert after["codec_encoded_bytes"] - before["codec_encoded_bytes"] == encoded
        assert after["bytes_sent"] - before["bytes_sent"] == encoded, (name, encoded)
        # The parameter comes back as float32 (docs/compression.md).
        assert after["bytes_received"] - before["bytes_received"] == 4 * N
        assert after["codec_raw_bytes"] - before["codec_raw_bytes"] == 4 * N
    print(f"ps {spec or 'default'} feedback={feedback} momentum={momentum}: {STEPS} steps "
          f"match, {encoded} bytes per push for {4 * N}", flush=True)


def main():
    core = load_core()
    rank, size = init_from_env(core)
    for spec in ["fp16", "bf16", "int8", "onebit", "topk:0.05", "randomk:0.1", ""]:
        check(core, rank, size, spec, True)
    check(core, rank, size, "onebit", False)
    check(core, rank, size, "onebit", True, momentum=True)
    check(core, rank, size, "topk:0.01", True, momentum=True)
    # Workers that disagree on the codec fail the update on every worker, saying so.
    core.ps_push_pull("ps.disagree", np.ones(10, np.float32), 0)
    try:
        core.ps_push_pull("ps.disagree", np.ones(10, np.float32), SGD, [LR],
                          compression="int8" if rank == 0 else "onebit")
        sys.exit("no error when workers disagree on the codec")
    except RuntimeError as e:
        assert "InvalidArgument" in str(e) and "disagree on compression" in str(e), e
        print("disagreement error:", e, flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()
