"""The one helper of `horovod.common.util` that Horovod's Keras tests import."""

from packaging import version


def is_version_greater_equal_than(ver, target):
    """True when version string `ver` (e.g. TF's "2.21.0") is at least `target`."""
    return version.parse(ver.replace("-tf", "+tf")) >= version.parse(target)
