"""The supported TensorFlow range is declared once per file pip reads, and the same in each;
tools/requirements.py keeps an installed TensorFlow in that range and picks the tf_keras of
its minor (tf_keras 2.X requires TensorFlow 2.X)."""

import importlib.metadata
import re
import sys

import pytest

from cluster import REPO

sys.path.insert(0, str(REPO / "tools"))
import requirements  # noqa: E402

RANGE = ">=2.16,<2.22"


def _declared(path, name):
    lines = [line.split("#")[0].strip() for line in (REPO / path).read_text().splitlines()]
    return [line for line in lines if requirements._name(line) == name]


def test_every_file_declares_the_same_tensorflow_range():
    assert _declared("requirements.txt", "tensorflow") == ["tensorflow" + RANGE]
    assert _declared("requirements-test.txt", "tf_keras") == ["tf_keras" + RANGE]
    assert "tensorflow" + RANGE in requirements.build_requires()


def test_the_load_error_names_the_declared_range():
    from tf_ps_ops.common import library
    low, high = re.fullmatch(r">=2\.(\d+),<2\.(\d+)", RANGE).groups()
    assert f"any of 2.{low} to 2.{int(high) - 1}" in library.REBUILD_HINT


@pytest.mark.parametrize("tf_version, expected", [
    ("2.16.2", "tf_keras==2.16.*"), ("2.19.0", "tf_keras==2.19.*"), ("2.21.0", "tf_keras==2.21.*"),
    (None, "tf_keras" + RANGE)])
def test_tf_keras_follows_the_installed_tensorflow(tf_version, expected):
    assert requirements.follow_tensorflow("tf_keras" + RANGE, tf_version) == expected
    assert requirements.follow_tensorflow("pyyaml", tf_version) == "pyyaml"


def test_the_installed_tensorflow_is_kept_and_tf_keras_matches_it():
    # The test environment has both; whatever minor it runs, the plan moves neither.
    installed = importlib.metadata.version("tensorflow")
    missing, keep = requirements.plan(["build", "run", "test"])
    assert keep == installed
    assert not [r for r in missing if requirements._name(r) in ("tensorflow", "tf_keras")], missing
    keras_minor = importlib.metadata.version("tf_keras").split(".")[:2]
    assert keras_minor == installed.split(".")[:2]
