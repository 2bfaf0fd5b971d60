"""Installs what a make target needs into the running Python, and only what is missing.

    python tools/requirements.py build run test    # the groups below, in any combination

Groups come from the files pip reads too, so each requirement is written once:
  build     pyproject.toml's [build-system] requires (pybind11, setuptools, TensorFlow)
  run       requirements.txt                 (pyproject's dependencies)
  test      requirements-test.txt            (the `test` extra)
  examples  examples/requirements.txt        (the `examples` extra)
  bench     benchmarks/requirements.txt      (the `bench` extra)
  ray       requirements-ray.txt             (the `ray` extra: tf_ps_ops.ray)

Checking costs milliseconds; asking pip costs seconds on every `make test`.

TensorFlow is a range (requirements.txt). A TensorFlow already installed in that range is
kept: pip is told so (a constraint), so installing another group never moves it. Packages
that come in one version per TensorFlow minor (tf_keras 2.X goes with TensorFlow 2.X) are
pinned to the installed TensorFlow's minor.
"""

import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {"run": "requirements.txt", "test": "requirements-test.txt",
         "examples": "examples/requirements.txt", "bench": "benchmarks/requirements.txt",
         "ray": "requirements-ray.txt"}
# Released once per TensorFlow minor, each requiring that minor: 2.X goes with TensorFlow 2.X.
FOLLOWS_TENSORFLOW = ("tf_keras", "tf-keras")


def build_requires():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        text = f.read().decode()
    try:
        import tomllib
        return tomllib.loads(text)["build-system"]["requires"]
    except ImportError:  # Python < 3.11: the one list we need, read plainly
        match = re.search(r"^\[build-system\][^\[]*?requires\s*=\s*\[([^\]]*)\]", text, re.M | re.S)
        return re.findall(r'"([^"]+)"', match.group(1))


def file_requires(path):
    with open(os.path.join(ROOT, path)) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


def installed_version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def is_installed(requirement):
    # pip's own parser, so that `==2.21.*`, `>=64` and extras mean what they mean to pip.
    from pip._vendor.packaging.requirements import Requirement
    req = Requirement(requirement)
    version = installed_version(req.name)
    return version is not None and req.specifier.contains(version, prereleases=True)


def tensorflow_to_keep():
    """The installed TensorFlow's version if it is in the range requirements.txt declares
    (then nothing may replace it), else None (none installed, or one out of range, which
    installing the `run` or `build` group replaces)."""
    version = installed_version("tensorflow")
    declared = [r for r in file_requires(FILES["run"]) if _name(r) == "tensorflow"]
    if version is None or not all(is_installed(r) for r in declared):
        return None
    return version


def _name(requirement):
    return re.split(r"[\s<>=!~;\[]", requirement, 1)[0].lower()


def follow_tensorflow(requirement, tf_version):
    """`tf_keras...` becomes `tf_keras==X.Y.*` for the TensorFlow X.Y kept; others as they are."""
    if tf_version is None or _name(requirement) not in FOLLOWS_TENSORFLOW:
        return requirement
    return "%s==%s.*" % (_name(requirement), ".".join(tf_version.split(".")[:2]))


def plan(groups):
    """(requirements to install, TensorFlow version to hold pip to or None)."""
    unknown = [g for g in groups if g != "build" and g not in FILES]
    if unknown:
        sys.exit(f"tools/requirements.py: unknown group(s) {unknown}; "
                 f"known: build, {', '.join(FILES)}")
    wanted = []
    for group in groups:
        for req in build_requires() if group == "build" else file_requires(FILES[group]):
            if req not in wanted:
                wanted.append(req)
    keep = tensorflow_to_keep()
    wanted = [follow_tensorflow(req, keep) for req in wanted]
    return [req for req in wanted if not is_installed(req)], keep


def main(groups):
    missing, keep = plan(groups)
    if not missing:
        return
    print("installing missing requirements:", *missing, flush=True)
    command = [sys.executable, "-m", "pip", "install", "-q", *missing]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        if keep is not None:
            print("keeping the installed TensorFlow", keep, flush=True)
            constraints.write("tensorflow==%s\n" % keep)
            constraints.flush()
            command += ["-c", constraints.name]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
