"""Builds the native parts of tf_ps_ops in place, in parallel, skipping what is current.

Artifacts (docs/internals.md): tf_ps_ops/_tf_ps_ops.so (TF op library), tf_ps_ops/bin/ps_server
(no TensorFlow), tf_ps_ops/_core<ext> (pybind11, for tests) and tf_ps_ops/_build_info.json
(the TensorFlow version the op library was compiled against). Objects live in
build/native/; each is rebuilt only when its source or a header it includes (from g++'s
-MMD dependency file) is newer. Compile flags for TF come from tf.sysconfig.
"""

import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJ_DIR = os.path.join(ROOT, "build", "native")

# The source lists; Bazel's BUILD names the same folders.
CORE = ["tf_ps_ops/cc/common", "tf_ps_ops/cc/wire", "tf_ps_ops/cc/transport",
        "tf_ps_ops/cc/engine"]
SERVER_LIB = ["ps_server"]          # minus main.cc, which only the binary links
KERNELS = ["tf_ps_ops/kernels", "sfb/kernels"]
PYBIND = ["tf_ps_ops/cc/pybind"]

BUILD_INFO = os.path.join(ROOT, "tf_ps_ops", "_build_info.json")
# What a wheel carries besides the Python files (setup.py's package_data).
PACKAGE_DATA = ["_tf_ps_ops.so", "_core*.so", "bin/ps_server", "_build_info.json",
                # the C functions' declarations, which _library.py reads at run time
                "cc/engine/c_api.h", "kernels/c_api.h"]

BASE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter",
              "-D_GLIBCXX_USE_CXX11_ABI=1", "-I" + ROOT]


def sources(folders, exclude=()):
    out = []
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "*.cc"))):
            if os.path.basename(path) not in exclude:
                out.append(path)
    return out


def tf_flags():
    # Asked in a child process: importing TensorFlow here would spill its start-up log into
    # the build output and cost memory during the parallel compile.
    code = ("import json, tensorflow as tf; print(json.dumps([tf.sysconfig.get_compile_flags(), "
            "tf.sysconfig.get_link_flags(), tf.__version__]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if result.returncode != 0:
        raise RuntimeError("cannot ask TensorFlow for its build flags (is tensorflow installed? "
                           "`make deps` installs it):\n" + result.stderr[-2000:])
    compile_flags, link_flags, version = json.loads(result.stdout.strip().splitlines()[-1])
    # -isystem silences warnings from TF's headers but not from ours.
    compile_flags = ["-isystem" + f[2:] if f.startswith("-I") else f
                     for f in compile_flags if not f.startswith("--std")]
    return compile_flags + ["-DEIGEN_USE_THREADS"], link_flags, version


def compiler():
    cxx = os.environ.get("CXX", "g++")
    return ["ccache", cxx] if shutil.which("ccache") else [cxx]


def compiler_env():
    # Paths under ROOT hash as relative ones, so a fresh clone elsewhere (tests/packaging,
    # pip's in-tree builds) reuses what ccache compiled for this one.
    return dict(os.environ, CCACHE_BASEDIR=ROOT)


def object_path(src, tag):
    rel = os.path.relpath(src, ROOT).replace(os.sep, "__")
    return os.path.join(OBJ_DIR, tag, rel[:-3] + ".o")


def is_current(obj, src):
    dep = obj[:-2] + ".d"
    if not (os.path.exists(obj) and os.path.exists(dep)):
        return False
    with open(dep) as f:
        text = f.read().replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else [src]
    obj_time = os.path.getmtime(obj)
    return all(os.path.exists(d) and os.path.getmtime(d) <= obj_time for d in deps)


def compile_one(src, obj, flags):
    if is_current(obj, src):
        return obj, False
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    cmd = compiler() + flags + ["-MMD", "-MF", obj[:-2] + ".d", "-c", src, "-o", obj]
    result = subprocess.run(cmd, capture_output=True, text=True, env=compiler_env())
    if result.returncode != 0:
        raise RuntimeError("compiling %s failed:\n%s%s" % (os.path.relpath(src, ROOT),
                                                         result.stdout, result.stderr))
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
    """Records what the op library was compiled against; tf_ps_ops/_library.py checks it
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


def build(jobs=None, with_tf=True, verbose=True):
    check_zmq()
    pybind11 = import_pybind11()
    py_include = ["-isystem" + pybind11.get_include(), "-isystem" + sysconfig.get_paths()["include"]]
    tf_compile, tf_link, tf_version = tf_flags() if with_tf else ([], [], None)
    units = {  # tag -> (sources, flags)
        "core": (sources(CORE), BASE_FLAGS),
        "server": (sources(SERVER_LIB), BASE_FLAGS),
        "kernels": (sources(KERNELS) if with_tf else [], BASE_FLAGS + tf_compile),
        "pybind": (sources(PYBIND), BASE_FLAGS + py_include + ["-fvisibility=hidden"]),
    }
    tasks = [(src, object_path(src, tag), flags)
             for tag, (srcs, flags) in units.items() for src in srcs]
    jobs = jobs or os.cpu_count() or 2
    objects = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_one, *t): t[0] for t in tasks}
        for fut in concurrent.futures.as_completed(futures):
            obj, rebuilt = fut.result()
            objects[futures[fut]] = obj
            if rebuilt and verbose:
                print("compiled", os.path.relpath(futures[fut], ROOT), flush=True)

    def objs(tag, exclude=()):
        return [objects[s] for s in units[tag][0] if os.path.basename(s) not in exclude]

    zmq = ["-lzmq", "-pthread"]
    server_objs = objs("server", exclude=("main.cc",))
    outputs = [
        (os.path.join(ROOT, "tf_ps_ops", "bin", "ps_server"),
         objs("core") + objs("server"), zmq, False),
        (os.path.join(ROOT, "tf_ps_ops", "_core" + sysconfig.get_config_var("EXT_SUFFIX")),
         objs("core") + server_objs + objs("pybind"), zmq, True),
    ]
    if with_tf:
        outputs.append((os.path.join(ROOT, "tf_ps_ops", "_tf_ps_ops.so"),
                        objs("core") + objs("kernels"), tf_link + zmq, True))
    for output, objects_, flags, shared in outputs:
        if link(output, objects_, flags, shared) and verbose:
            print("linked", os.path.relpath(output, ROOT), flush=True)
    if with_tf:
        write_build_info(tf_version)
    return [o[0] for o in outputs]


if __name__ == "__main__":
    build(with_tf="--no-tf" not in sys.argv)
