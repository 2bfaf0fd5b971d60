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
"""

import importlib.metadata as metadata
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {"run": "requirements.txt", "test": "requirements-test.txt",
         "examples": "examples/requirements.txt", "bench": "benchmarks/requirements.txt",
         "ray": "requirements-ray.txt"}


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


def is_installed(requirement):
    # pip's own parser, so that `==2.21.*`, `>=64` and extras mean what they mean to pip.
    from pip._vendor.packaging.requirements import Requirement
    req = Requirement(requirement)
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return False
    return req.specifier.contains(version, prereleases=True)


def main(groups):
    unknown = [g for g in groups if g != "build" and g not in FILES]
    if unknown:
        sys.exit(f"tools/requirements.py: unknown group(s) {unknown}; "
                 f"known: build, {', '.join(FILES)}")
    wanted = []
    for group in groups:
        for req in build_requires() if group == "build" else file_requires(FILES[group]):
            if req not in wanted:
                wanted.append(req)
    missing = [req for req in wanted if not is_installed(req)]
    if not missing:
        return
    print("installing missing requirements:", *missing, flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
