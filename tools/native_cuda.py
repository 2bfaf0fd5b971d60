"""The CUDA part of the native build (docs/gpu.md): whether to build it, and how.

native_build.py asks `decide()` once per build. The answer is None (a CPU build, exactly as
before: no CUDA file is compiled, no flag changes) or a `Cuda` that says how to compile
`*.cu.cc` files with nvcc, which flags host files that include CUDA headers get, and what
the op library links. Whether:
  TFPS_WITH_CUDA=1   CUDA build; a missing nvcc is an error that says what to install
  TFPS_WITH_CUDA=0   CPU build
  unset              CUDA build when nvcc is found (CUDA_HOME, PATH, /usr/local/cuda) and the
                     installed TensorFlow is a CUDA build; otherwise a CPU build, with one
                     line saying why
Also read: TFPS_CUDA_ARCHS (default "80,90": A100 and H100/H200 machine code, plus PTX of the
last for newer GPUs), CUDA_HOME.

Which files are CUDA-only: every `*.cu.cc` (compiled by nvcc, whatever its unit), and every
file of a unit in CUDA_ONLY_UNITS (host code that includes cuda_runtime.h). The kernels'
files are compiled in every build; their GPU parts and DEVICE_GPU registrations only under
TFPS_WITH_CUDA, which the CUDA build defines for the kernels unit.

nvcc runs under ccache like g++ (ccache knows nvcc), so an unchanged CUDA file costs nothing
on the next build. Objects of nvcc go to build/native/<unit>/ like the others.
"""

import os
import shutil

CUDA_ONLY_UNITS = ["gpu"]
CU_SUFFIX = ".cu.cc"
DEFAULT_ARCHS = "80,90"


class CudaUnavailable(RuntimeError):
    pass


def cuda_home(nvcc):
    """The toolkit folder holding include/cuda_runtime.h: CUDA_HOME, nvcc's own folder's
    parent (also through a symbolic link), or /usr/local/cuda (nvcc on PATH may be a
    wrapper script elsewhere)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  os.path.dirname(os.path.dirname(nvcc)),
                  os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    for home in candidates:
        if home and os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")):
            return home
    raise CudaUnavailable("nvcc is %s but no CUDA toolkit folder with include/cuda_runtime.h "
                          "was found: set CUDA_HOME" % nvcc)


class Cuda:
    def __init__(self, nvcc, archs):
        self.nvcc = nvcc
        self.home = cuda_home(nvcc)
        self.include = os.path.join(self.home, "include")
        self.lib_dir = os.path.join(self.home, "lib64")
        if not os.path.isdir(self.lib_dir):
            self.lib_dir = os.path.join(self.home, "lib")
        self.archs = archs

    def arch_flags(self):
        flags = []
        for arch in self.archs:
            flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (arch, arch)]
        last = self.archs[-1]
        flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (last, last)]  # PTX: newer GPUs
        return flags

    def nvcc_flags(self, root):
        # -fmad=false, -ftz=false, -prec-div=true: the GPU codecs and the SFB rebuild must
        # round exactly as the CPU code does (docs/gpu.md, bit-identical results); the code
        # also spells its roundings with __fadd_rn & co, these flags catch what it does not.
        return ["-std=c++17", "-O2", "-x", "cu", "-Xcompiler", "-fPIC",
                "-fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true",
                "-D_GLIBCXX_USE_CXX11_ABI=1", "-DTFPS_WITH_CUDA=1", "-I" + root] + \
            self.arch_flags()

    def host_flags(self):
        """For g++ compiling host files that include CUDA's runtime headers."""
        return ["-isystem" + self.include, "-DTFPS_WITH_CUDA=1"]

    def link_flags(self):
        # The static runtime: the op library then needs no libcudart.so.13 at load time
        # (TensorFlow's wheel brings CUDA 12 libraries of its own), only the driver, which
        # the runtime opens itself. NCCL is opened with dlopen (tf_ps_ops/cc/gpu/nccl_local.cc).
        return [os.path.join(self.lib_dir, "libcudart_static.a"), "-ldl", "-lrt", "-pthread"]


def find_nvcc():
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(on_path)
    candidates.append("/usr/local/cuda/bin/nvcc")
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def parse_archs(text):
    archs = [a.strip() for a in text.replace(";", ",").split(",") if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise CudaUnavailable("TFPS_CUDA_ARCHS=%r: give compute capabilities such as 80,90"
                              % text)
    return archs


def decide(tf_is_cuda_build, verbose=True):
    """The CUDA build to make, or None for a CPU build. `tf_is_cuda_build`: what
    tf.sysconfig.get_build_info() says (None when the build has no TensorFlow part)."""
    wanted = os.environ.get("TFPS_WITH_CUDA", "").strip()
    if wanted not in ("", "0", "1"):
        raise CudaUnavailable("TFPS_WITH_CUDA=%r: use 1 (CUDA build), 0 (CPU build) or leave "
                              "it unset (CUDA when nvcc and a CUDA build of TensorFlow are "
                              "there)" % wanted)
    if wanted == "0":
        return None
    nvcc = find_nvcc()
    archs = parse_archs(os.environ.get("TFPS_CUDA_ARCHS", DEFAULT_ARCHS))
    if wanted == "1":
        if nvcc is None:
            raise CudaUnavailable(
                "TFPS_WITH_CUDA=1 but nvcc was not found (looked in $CUDA_HOME/bin, PATH and "
                "/usr/local/cuda/bin): install the CUDA toolkit (12.x or 13.x) or set "
                "CUDA_HOME; TFPS_WITH_CUDA=0 builds for the CPU only")
        return Cuda(nvcc, archs)
    if nvcc is None:
        if verbose:
            print("CPU build: no nvcc found (set CUDA_HOME or TFPS_WITH_CUDA=1 for the GPU "
                  "kernels; docs/gpu.md)", flush=True)
        return None
    if tf_is_cuda_build is not True:  # False, or None: a build without the op library
        if verbose and tf_is_cuda_build is False:
            print("CPU build: the installed TensorFlow is not a CUDA build (TFPS_WITH_CUDA=1 "
                  "compiles the CUDA code anyway)", flush=True)
        return None
    return Cuda(nvcc, archs)
