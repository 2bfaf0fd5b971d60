"""The two helpers Horovod's test_tensorflow.py imports from its test/utils/common.py,
written for tfps-run: the rank and size it launched this worker with."""

import os


def mpi_env_rank_and_size():
    return int(os.environ.get("TFPS_RANK", 0)), int(os.environ.get("TFPS_SIZE", 1))


def skip_or_fail_gpu_test(test, message):
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    else:
        test.skipTest(message)
