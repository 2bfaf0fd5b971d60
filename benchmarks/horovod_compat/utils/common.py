"""The helpers Horovod's test_tensorflow*.py files import from its test/utils/common.py,
written for tfps-run (Horovod's own module needs horovod.runner, cloudpickle and mock):
the rank and size it launched this worker with, the GPU skip, a temporary file path."""

import contextlib
import os
import tempfile


def mpi_env_rank_and_size():
    return int(os.environ.get("TFPS_RANK", 0)), int(os.environ.get("TFPS_SIZE", 1))


def skip_or_fail_gpu_test(test, message):
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    else:
        test.skipTest(message)


@contextlib.contextmanager
def temppath():
    """A path to a not-yet-existing file in a fresh directory, removed afterwards."""
    with tempfile.TemporaryDirectory() as directory:
        yield os.path.join(directory, "temp_test_file")
