"""The CUDA build compiles where nvcc is (no GPU needed; docs/gpu.md, issue 16).

Builds the CUDA variant of the op library and the GPU checks library into a temporary
folder (ccache makes this cheap after `make build`, which on a machine with nvcc and a CUDA
build of TensorFlow is the CUDA build itself), loads the op library into TensorFlow and
checks that every GPU kernel is registered, and calls the checks library: its CPU codecs
work, and its GPU functions fail cleanly, naming CUDA, when there is no GPU. Skipped, with
the reason, only where nvcc is absent. What needs a GPU is tests/gpu/run_gpu_checks.sh.
"""

import ctypes
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tools", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    spec.loader.exec_module(module)
    return module


native_cuda = load_tool("native_cuda")
NVCC = native_cuda.find_nvcc()
pytestmark = pytest.mark.skipif(
    NVCC is None, reason="nvcc not found ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin): the CUDA "
                         "sources are not compiled on this machine")

GPU_OPS = ["PsPushPull", "PsBroadcast", "PsAllgather", "SfbFactorGradient", "PsInitVariable",
           "PsApplyGradientDescent", "PsApplyMomentum", "PsApplyKerasMomentum", "PsApplyAdam",
           "PsApplyAdamWithAmsgrad", "PsApplyAdagrad", "PsApplyAdagradV2",
           "PsApplyKerasAdagrad", "PsApplyRMSProp", "PsApplyCenteredRMSProp",
           # GPU kernels that refuse when created, saying to keep embeddings on the CPU
           # (ps_apply_ops.cc; tests/gpu/tf_gpu_worker.py checks the message on a GPU)
           "PsSparseApplyGradientDescent", "PsSparseApplyMomentum",
           "PsSparseApplyKerasMomentum", "PsSparseApplyAdagrad", "PsSparseApplyAdagradV2",
           "PsSparseApplyKerasAdagrad", "PsSparseApplyRMSProp", "PsSparseApplyCenteredRMSProp"]


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory):
    """(op library, checks library) of a CUDA build in a temporary folder."""
    out = tmp_path_factory.mktemp("cuda_build")
    native = load_tool("native_build")
    native.OBJ_DIR = str(out / "obj")
    native.GPU_CHECKS = str(out / "_tfps_gpu_checks.so")
    os.environ["TFPS_WITH_CUDA"] = "1"
    try:
        cuda = native_cuda.decide(True, verbose=False)
        tf_compile, tf_link, _, _ = native.tf_flags()
        units = native.closure("kernels")
        tasks = native.compile_tasks(units, tf_compile, [], cuda)
        objects = native.compile_all(tasks, os.cpu_count() or 2, verbose=False)
    finally:
        del os.environ["TFPS_WITH_CUDA"]
    linked = [objects[src] for u in units for src in sum(native.unit_sources(u, cuda), [])]
    library = str(out / "_tf_ps_ops.so")
    native.link(library, linked, tf_link + ["-lzmq", "-pthread"] + cuda.link_flags(), True)
    checks = native.build_gpu_checks(cuda, objects, verbose=False)
    return library, checks, tasks


def test_every_cuda_source_is_compiled_by_nvcc(cuda_build):
    _, _, tasks = cuda_build
    compiled = {os.path.relpath(src, ROOT) for src, _, _, nvcc in tasks if nvcc}
    on_disk = {os.path.relpath(os.path.join(base, name), ROOT)
               for folder in ("tf_ps_ops", "sfb")
               for base, _, names in os.walk(os.path.join(ROOT, folder))
               for name in names if name.endswith(".cu.cc")}
    assert on_disk and compiled == on_disk


def test_the_op_library_registers_every_gpu_kernel(cuda_build):
    library, _, _ = cuda_build
    script = (
        "import sys, json, tensorflow as tf\n"
        "from tensorflow.python.framework import kernels\n"
        "tf.load_op_library(sys.argv[1])\n"
        "ops = json.loads(sys.argv[2])\n"
        "print(json.dumps({op: sorted({k.device_type for k in "
        "kernels.get_registered_kernels_for_op(op).kernel}) for op in ops}))\n")
    import json
    result = subprocess.run([sys.executable, "-c", script, library, json.dumps(GPU_OPS)],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                     CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-3000:]
    devices = json.loads(result.stdout.strip().splitlines()[-1])
    assert {op: d for op, d in devices.items() if d != ["CPU", "GPU"]} == {}


def test_the_checks_library_runs_its_cpu_half_and_fails_cleanly_without_a_gpu(cuda_build):
    _, checks, _ = cuda_build
    lib = ctypes.CDLL(checks)
    err = ctypes.create_string_buffer(512)
    x = np.linspace(-3, 3, 3000, dtype=np.float32)
    n = x.size
    size = lib.tfps_checks_encoded_bytes(ctypes.c_int(3), ctypes.c_uint64(n), ctypes.c_uint64(0))
    assert size == 8 * 3 + n  # int8: a min/max pair per chunk of 1024, a byte per element
    encoded = np.zeros(size, np.uint8)
    assert lib.tfps_cpu_encode(3, x.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(n),
                               ctypes.c_uint64(0), ctypes.c_uint64(0),
                               encoded.ctypes.data_as(ctypes.c_void_p), err, 512) == 0
    decoded = np.zeros(n, np.float32)
    assert lib.tfps_cpu_decode(3, encoded.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(n),
                               ctypes.c_uint64(0), ctypes.c_uint64(0),
                               decoded.ctypes.data_as(ctypes.c_void_p), err, 512) == 0
    assert np.max(np.abs(decoded - x)) <= 6.0 / 255 / 2 + 1e-6
    if lib.tfps_gpu_device_count() > 0:
        pytest.skip("a GPU is present: tests/gpu/run_gpu_checks.sh checks the GPU half")
    rc = lib.tfps_gpu_encode(3, x.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(n),
                             ctypes.c_uint64(0), ctypes.c_uint64(0),
                             encoded.ctypes.data_as(ctypes.c_void_p), err, 512)
    assert rc == -1 and b"CUDA error" in err.value, err.value


def test_a_missing_nvcc_is_a_clear_message_not_a_failure(monkeypatch):
    monkeypatch.setattr(native_cuda, "find_nvcc", lambda: None)
    monkeypatch.delenv("TFPS_WITH_CUDA", raising=False)
    assert native_cuda.decide(True, verbose=False) is None  # auto: a CPU build
    monkeypatch.setenv("TFPS_WITH_CUDA", "1")
    with pytest.raises(native_cuda.CudaUnavailable, match="nvcc was not found"):
        native_cuda.decide(True, verbose=False)
    monkeypatch.setenv("TFPS_WITH_CUDA", "0")
    monkeypatch.setattr(native_cuda, "find_nvcc", lambda: NVCC)
    assert native_cuda.decide(True, verbose=False) is None
    monkeypatch.delenv("TFPS_WITH_CUDA")
    assert native_cuda.decide(False, verbose=False) is None  # a CPU build of TensorFlow
    assert native_cuda.decide(True, verbose=False) is not None
