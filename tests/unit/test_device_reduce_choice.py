"""Which LocalReduce sums GPU tensors (tf_ps_ops/cc/engine/local/device_reduce.h, docs/gpu.md):
NCCL only in a CUDA build, with other workers on the host, when every local worker can
use it; otherwise shared memory, with a reason that names the local worker and its
cause. The C++ function itself, through the core module (no TensorFlow, no GPU)."""

from native import load_core

_core = load_core()  # the one copy every unit test shares (tests/native.py)


def choose(cuda_build=True, alone=False, ranks=(4, 5, 6), votes=("", "", ""),
           gpus=("gpu-a", "gpu-b", "gpu-c")):
    return _core.choose_device_reduce(cuda_build, alone, list(ranks), list(votes), list(gpus))


def test_nccl_when_every_local_worker_can_use_it():
    nccl, reason = choose()
    assert nccl
    assert reason == "GPU tensors of this host's 3 workers are summed with NCCL"


def test_a_cpu_build_never_picks_nccl():
    nccl, reason = choose(cuda_build=False)
    assert not nccl
    assert "CPU build" in reason and "shared memory" in reason


def test_a_worker_alone_on_its_host_has_nothing_to_sum_locally():
    nccl, reason = choose(alone=True, ranks=(3,), votes=("",), gpus=("gpu-a",))
    assert not nccl
    assert "no other worker on this host" in reason


def test_one_local_worker_without_nccl_sends_the_whole_host_to_shared_memory():
    nccl, reason = choose(votes=("", "NCCL cannot be opened (libnccl.so.2): not found", ""))
    assert not nccl
    assert reason == ("GPU tensors are summed through shared memory, not NCCL: local rank 1 "
                      "(rank 5) cannot use NCCL: NCCL cannot be opened (libnccl.so.2): "
                      "not found")


def test_the_first_local_worker_that_cannot_is_named():
    nccl, reason = choose(votes=("", "no GPU is visible", "NCCL cannot be opened"))
    assert not nccl
    assert "local rank 1 (rank 5) cannot use NCCL: no GPU is visible" in reason


def test_local_workers_sharing_a_gpu_sum_through_shared_memory():
    # NCCL refuses two ranks on one device; several workers per GPU are legal in TF.
    nccl, reason = choose(gpus=("gpu-a", "gpu-b", "gpu-a"))
    assert not nccl
    assert ("local rank 0 (rank 4) and local rank 2 (rank 6) use the same GPU (gpu-a), and "
            "NCCL takes one GPU per worker") in reason
