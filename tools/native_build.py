"""Builds the native parts of tf_ps_ops in place, in parallel, skipping what is current.

Artifacts (ARTIFACTS, docs/bazel.md): tf_ps_ops/_tf_ps_ops.so (TF op library),
tf_ps_ops/bin/ps_server (no TensorFlow), tf_ps_ops/_core<ext> (pybind11: the worker core, for
tests and tools), ps_server/testing/_ps_server_testing<ext> (pybind11: server internals, for
tests only) and tf_ps_ops/_build_info.json (the TensorFlow version the op library was
compiled against). The UNITS table says which folder may include and link which; the
build refuses a wrong-way include before compiling anything. Objects live in
build/native/; each is rebuilt only when its source or a header it includes (from g++'s
-MMD dependency file) is newer. Compile flags for TF come from tf.sysconfig.
"""

import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import native_cuda  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJ_DIR = os.path.join(ROOT, "build", "native")

# The units of the native build, lowest layer first: the folders whose .cc/.h files each one
# holds, and the units it may depend on, that is include headers from and link with (the
# whole list, not only direct layers). Before compiling, check_layers() holds every
# `#include "..."` of our own headers to it; each artifact links the objects of its unit and
# of that unit's deps, nothing else. Bazel's BUILD has one cc_library per unit with the same
# deps (tests/unit/test_bazel_build.py compares the two).
BASE = ["common", "codec", "wire", "transport", "cluster"]  # what both the worker and the server use
UNITS = {  # name -> (folders, deps)
    "common": (["tf_ps_ops/cc/common"], []),
    "codec": (["tf_ps_ops/cc/codec"], ["common"]),  # gradient codecs (pure computation)
    "wire": (["tf_ps_ops/cc/wire"], ["common", "codec"]),
    "transport": (["tf_ps_ops/cc/transport"], ["common", "codec", "wire"]),
    "cluster": (["tf_ps_ops/cc/cluster"], ["common", "codec", "wire", "transport"]),
    "engine": (["tf_ps_ops/cc/engine", "tf_ps_ops/cc/engine/local"], BASE),  # the worker side
    "server": (["ps_server"], BASE),                          # never the engine
    "gpu": (["tf_ps_ops/cc/gpu"], ["common", "codec"]),       # CUDA builds only (native_cuda.py)
    "kernels": (["tf_ps_ops/kernels", "sfb/kernels"], BASE + ["engine", "gpu"]),
    "pybind": (["tf_ps_ops/cc/pybind"], BASE + ["engine"]),   # _core: the core only
    "server_testing": (["ps_server/testing"], BASE + ["server"]),
}
# Compiled into the ps_server binary only, under the server unit's rules.
SERVER_MAIN = "ps_server/main.cc"

BUILD_INFO = os.path.join(ROOT, "tf_ps_ops", "_build_info.json")
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
# What is linked (path, unit, shared): the objects of the unit and of every unit it may
# depend on. The server's test binding sits next to its sources, outside the package, so
# no wheel carries it.
ARTIFACTS = [
    ("tf_ps_ops/bin/ps_server", "server", False),  # with SERVER_MAIN
    ("tf_ps_ops/_core" + EXT_SUFFIX, "pybind", True),
    ("ps_server/testing/_ps_server_testing" + EXT_SUFFIX, "server_testing", True),
    ("tf_ps_ops/_tf_ps_ops.so", "kernels", True),  # needs TensorFlow
]
# What a wheel carries besides the Python files (setup.py's package_data).
PACKAGE_DATA = ["_tf_ps_ops.so", "_core*.so", "bin/ps_server", "_build_info.json",
                # the C functions' declarations, which common/library.py reads at run time
                "cc/engine/c_api.h", "kernels/c_api.h"]

BASE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter",
              "-D_GLIBCXX_USE_CXX11_ABI=1", "-I" + ROOT]


def unit_files(unit, pattern="*.cc"):
    """The unit's files matching `pattern`, absolute; SERVER_MAIN belongs to no unit's list.
    "*.cc" leaves out the CUDA sources (`*.cu.cc`, native_cuda.py): ask for those by name."""
    out = []
    for folder in UNITS[unit][0]:
        for path in sorted(glob.glob(os.path.join(ROOT, folder, pattern))):
            if pattern == "*.cc" and path.endswith(native_cuda.CU_SUFFIX):
                continue
            if os.path.relpath(path, ROOT) != SERVER_MAIN:
                out.append(path)
    return out


def unit_sources(unit, cuda):
    """What the build compiles for `unit`: (g++ sources, nvcc sources). A CPU build
    (`cuda` None) compiles no CUDA source and nothing of a CUDA-only unit."""
    if cuda is None:
        return ([] if unit in native_cuda.CUDA_ONLY_UNITS else unit_files(unit)), []
    return unit_files(unit), unit_files(unit, "*" + native_cuda.CU_SUFFIX)


def unit_of_folder(folder):
    for name, (folders, _) in UNITS.items():
        if folder in folders:
            return name
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def resolve_include(path, include, root):
    """The header's path relative to `root` if it is one of ours (-I root, or next to the
    file including it), else None."""
    for base in (root, os.path.dirname(path)):
        candidate = os.path.normpath(os.path.join(base, include))
        if os.path.isfile(candidate) and not os.path.relpath(candidate, root).startswith(".."):
            return os.path.relpath(candidate, root)
    return None


def layer_violations(files_by_unit, root=ROOT):
    """Every `#include "..."` of one of our headers (a file under `root`) that the UNITS table
    does not allow: [(file, include, message)]. `files_by_unit`: {unit: [paths]}."""
    problems = []
    for unit, files in files_by_unit.items():
        allowed = [unit] + UNITS[unit][1]
        for path in files:
            with open(path, encoding="utf-8") as f:
                includes = INCLUDE.findall(f.read())
            rel = os.path.relpath(path, root)
            for include in includes:
                header = resolve_include(path, include, root)
                if header is None:
                    continue  # a system or TensorFlow header (those come in as -isystem)
                owner = unit_of_folder(os.path.dirname(header))
                if owner in allowed:
                    continue
                where = ("a folder of no unit" if owner is None else "unit " + owner)
                problems.append((rel, include, "%s includes %s (%s), but %s may depend only on %s"
                                 % (rel, include, where, unit,
                                    ", ".join(UNITS[unit][1]) or "nothing")))
    return problems


def check_layers():
    """Fails the build when a file includes a header its unit may not depend on."""
    files = {unit: unit_files(unit) + unit_files(unit, "*.h") +
             unit_files(unit, "*" + native_cuda.CU_SUFFIX) for unit in UNITS}
    files["server"].append(os.path.join(ROOT, SERVER_MAIN))
    problems = layer_violations(files)
    if problems:
        raise RuntimeError("layering (the UNITS table in tools/native_build.py, docs/bazel.md):\n"
                           + "\n".join("  " + p[2] for p in problems))


def closure(unit):
    """The unit and every unit it may depend on, lowest layer first (link order aside)."""
    return [u for u in UNITS if u == unit or u in UNITS[unit][1]]


def tf_flags():
    """(compile flags, link flags, version, is_cuda_build) of the installed TensorFlow."""
    # Asked in a child process: importing TensorFlow here would spill its start-up log into
    # the build output and cost memory during the parallel compile.
    code = ("import json, tensorflow as tf; print(json.dumps([tf.sysconfig.get_compile_flags(), "
            "tf.sysconfig.get_link_flags(), tf.__version__, "
            "bool(tf.sysconfig.get_build_info().get('is_cuda_build'))]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if result.returncode != 0:
        raise RuntimeError("cannot ask TensorFlow for its build flags (is tensorflow installed? "
                           "`make deps` installs it):\n" + result.stderr[-2000:])
    compile_flags, link_flags, version, is_cuda = json.loads(result.stdout.strip().splitlines()[-1])
    # -isystem silences warnings from TF's headers but not from ours.
    compile_flags = ["-isystem" + f[2:] if f.startswith("-I") else f
                     for f in compile_flags if not f.startswith("--std")]
    return compile_flags + ["-DEIGEN_USE_THREADS"], link_flags, version, is_cuda


def compiler(nvcc=None):
    cxx = nvcc or os.environ.get("CXX", "g++")
    return ["ccache", cxx] if shutil.which("ccache") else [cxx]


def compiler_env():
    # Paths under ROOT hash as relative ones, so a fresh clone elsewhere (tests/packaging,
    # pip's in-tree builds) reuses what ccache compiled for this one.
    return dict(os.environ, CCACHE_BASEDIR=ROOT)


def object_path(src, tag):
    rel = os.path.relpath(src, ROOT).replace(os.sep, "__")
    return os.path.join(OBJ_DIR, tag, rel[:-3] + ".o")  # x.cu.cc -> x.cu.o


def is_current(obj, src):
    dep = obj[:-2] + ".d"
    if not (os.path.exists(obj) and os.path.exists(dep)):
        return False
    with open(dep) as f:
        text = f.read().replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else [src]
    obj_time = os.path.getmtime(obj)
    return all(os.path.exists(d) and os.path.getmtime(d) <= obj_time for d in deps)


def compile_one(src, obj, flags, nvcc=None):
    # The command is part of what makes an object current: a CUDA build after a CPU one
    # (TFPS_WITH_CUDA, native_cuda.py) recompiles the kernels with their GPU code.
    cmd = compiler(nvcc) + flags + ["-MMD", "-MF", obj[:-2] + ".d", "-c", src, "-o", obj]
    cmd_file = obj[:-2] + ".cmd"
    if is_current(obj, src) and os.path.exists(cmd_file):
        with open(cmd_file) as f:
            if f.read() == "\n".join(cmd):
                return obj, False
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    result = subprocess.run(cmd, capture_output=True, text=True, env=compiler_env())
    if result.returncode != 0:
        raise RuntimeError("compiling %s failed:\n%s%s" % (os.path.relpath(src, ROOT),
                                                         result.stdout, result.stderr))
    with open(cmd_file, "w") as f:
        f.write("\n".join(cmd))
    if result.stderr.strip():
        sys.stderr.write(result.stderr)
    return obj, True


def link(output, objects, flags, shared):
    if os.path.exists(output) and all(os.path.getmtime(o) <= os.path.getmtime(output)
                                      for o in objects):
        return False
    os.makedirs(os.path.dirname(output), exist_ok=True)
    cmd = [os.environ.get("CXX", "g++")] + (["-shared"] if shared else []) + ["-o", output]
    cmd += objects + flags
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("linking %s failed:\n%s" % (output, result.stderr))
    return True


def check_zmq():
    if not os.path.exists("/usr/include/zmq.hpp") and not os.path.exists("/usr/include/zmq.h"):
        raise RuntimeError("libzmq is missing: install the Debian packages libzmq3-dev and "
                           "cppzmq-dev (apt-get install -y libzmq3-dev cppzmq-dev)")


def write_build_info(tf_version):
    """Records what the op library was compiled against; tf_ps_ops/common/library.py checks it
    before loading. Rewritten only when it changes, so an unchanged build stays current."""
    text = json.dumps({"tensorflow": tf_version}, indent=1) + "\n"
    if os.path.exists(BUILD_INFO):
        with open(BUILD_INFO) as f:
            if f.read() == text:
                return
    with open(BUILD_INFO, "w") as f:
        f.write(text)


def import_pybind11():
    try:
        import pybind11
    except ImportError:
        raise RuntimeError("pybind11 is missing: `pip install pybind11` (pip install . "
                           "installs it into its build environment by itself)") from None
    return pybind11


def unit_flags(unit, tf_compile, py_include, cuda=None):
    cuda_flags = cuda.host_flags() if cuda is not None and unit in ("gpu", "kernels") else []
    if unit == "kernels":
        return BASE_FLAGS + tf_compile + cuda_flags
    if unit in ("pybind", "server_testing"):
        return BASE_FLAGS + py_include + ["-fvisibility=hidden"]
    return BASE_FLAGS + cuda_flags


def compile_tasks(units, tf_compile, py_include, cuda):
    """(source, object, flags, nvcc or None) of every file the build compiles."""
    tasks = []
    for unit in units:
        host, device = unit_sources(unit, cuda)
        flags = unit_flags(unit, tf_compile, py_include, cuda)
        tasks += [(src, object_path(src, unit), flags, None) for src in host]
        tasks += [(src, object_path(src, unit), cuda.nvcc_flags(ROOT), cuda.nvcc) for src in device]
    return tasks


def compile_all(tasks, jobs, verbose):
    """Compiles in parallel; {source: object}."""
    objects = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_one, *t): t[0] for t in tasks}
        for fut in concurrent.futures.as_completed(futures):
            obj, rebuilt = fut.result()
            objects[futures[fut]] = obj
            if rebuilt and verbose:
                print("compiled", os.path.relpath(futures[fut], ROOT), flush=True)
    return objects


def build(jobs=None, with_tf=True, verbose=True):
    check_zmq()
    check_layers()
    pybind11 = import_pybind11()
    py_include = ["-isystem" + pybind11.get_include(), "-isystem" + sysconfig.get_paths()["include"]]
    tf_compile, tf_link, tf_version, tf_cuda = tf_flags() if with_tf else ([], [], None, None)
    cuda = native_cuda.decide(tf_cuda, verbose=verbose)
    units = [u for u in UNITS if with_tf or u != "kernels"]
    tasks = compile_tasks(units, tf_compile, py_include, cuda)
    main = os.path.join(ROOT, SERVER_MAIN)
    tasks.append((main, object_path(main, "server"), BASE_FLAGS, None))
    objects = compile_all(tasks, jobs or os.cpu_count() or 2, verbose)

    outputs = []
    for path, unit, shared in ARTIFACTS:
        if unit not in units:
            continue
        # CUDA objects go into the op library only: ps_server and _core stay free of CUDA.
        with_cuda = cuda if unit == "kernels" else None
        linked = [objects[src] for u in closure(unit)
                  for src in sum(unit_sources(u, with_cuda), [])]
        if not shared:  # the ps_server binary
            linked.append(objects[main])
        flags = (tf_link if unit == "kernels" else []) + ["-lzmq", "-pthread"]
        if unit == "kernels" and cuda is not None:
            flags += cuda.link_flags()
        output = os.path.join(ROOT, path)
        if link(output, linked, flags, shared) and verbose:
            print("linked", path, flush=True)
        outputs.append(output)
    if cuda is not None:
        outputs.append(build_gpu_checks(cuda, objects, verbose))
    if with_tf:
        write_build_info(tf_version)
    return outputs


# The CUDA code's own test library (tests/gpu/): the GPU codecs, the GPU SFB rebuild and
# NCCL next to the CPU codecs, through a C API, with no TensorFlow, ZeroMQ or pybind11, so
# that a GPU machine without those can still check the CUDA code. Never packaged.
GPU_CHECKS = os.path.join(OBJ_DIR, "_tfps_gpu_checks.so")
GPU_CHECKS_UNITS = ["common", "codec", "gpu"]


def build_gpu_checks(cuda=None, objects=None, verbose=True, jobs=None):
    """Links GPU_CHECKS (compiling what `objects` lacks); returns its path. Alone (no
    `objects`) it needs only g++ and nvcc: `python3 tools/native_build.py --gpu-checks`."""
    if cuda is None:
        cuda = native_cuda.decide(True, verbose=verbose)
        if cuda is None:
            raise native_cuda.CudaUnavailable("the GPU checks need nvcc (TFPS_WITH_CUDA=1)")
    if objects is None:
        objects = compile_all(compile_tasks(GPU_CHECKS_UNITS, [], [], cuda),
                              jobs or os.cpu_count() or 2, verbose)
    linked = [objects[src] for u in GPU_CHECKS_UNITS for src in sum(unit_sources(u, cuda), [])]
    if link(GPU_CHECKS, linked, cuda.link_flags(), True) and verbose:
        print("linked", os.path.relpath(GPU_CHECKS, ROOT), flush=True)
    return GPU_CHECKS


if __name__ == "__main__":
    if "--gpu-checks" in sys.argv:
        build_gpu_checks()
    else:
        build(with_tf="--no-tf" not in sys.argv)
