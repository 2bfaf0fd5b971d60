"""How a worker reads its place in the cluster from the environment (tf_ps_ops/common/config.py).

The multi-process tests start workers with TFPS_* and with DMLC_* variables end to end;
this covers every fallback and every rejected value without starting a process.
"""

import importlib.util

import pytest

from cluster import REPO

_spec = importlib.util.spec_from_file_location("tfps_config",
                                               REPO / "tf_ps_ops" / "common" / "config.py")
config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(config)

TFPS = {"TFPS_SCHEDULER": "10.0.0.1:7000", "TFPS_RANK": "2", "TFPS_SIZE": "4",
        "TFPS_NUM_SERVERS": "3"}
DMLC = {"DMLC_PS_ROOT_URI": "10.0.0.1", "DMLC_PS_ROOT_PORT": "7000", "DMLC_WORKER_ID": "2",
        "DMLC_NUM_WORKER": "4", "DMLC_NUM_SERVER": "3"}
EXPECTED = config.ClusterConfig("10.0.0.1", 7000, 2, 4, 3)


def test_tfps_variables():
    assert config.read_cluster(TFPS) == EXPECTED


def test_byteps_variables():
    assert config.read_cluster(DMLC) == EXPECTED


def test_horovod_rank_and_size_with_a_tfps_scheduler():
    env = {"TFPS_SCHEDULER": "10.0.0.1:7000", "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2",
           "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"}
    assert config.read_cluster(env) == config.ClusterConfig("10.0.0.1", 7000, 1, 2, 1, 1, 2)


def test_tfps_wins_over_fallbacks_and_empty_counts_as_unset():
    env = {**DMLC, **TFPS, "DMLC_WORKER_ID": "0", "TFPS_LOCAL_RANK": "", "HOROVOD_RANK": "3"}
    assert config.read_cluster(env) == EXPECTED


def test_ipv6_scheduler():
    env = {**TFPS, "TFPS_SCHEDULER": "[::1]:7001"}
    cluster = config.read_cluster(env)
    assert (cluster.scheduler_host, cluster.scheduler_port) == ("::1", 7001)


@pytest.mark.parametrize("changes,named", [
    ({"TFPS_RANK": "two"}, "TFPS_RANK"),
    ({"TFPS_RANK": "4"}, "TFPS_RANK"),
    ({"TFPS_RANK": "-1"}, "TFPS_RANK"),
    ({"TFPS_SIZE": "0"}, "TFPS_SIZE"),
    ({"TFPS_NUM_SERVERS": "0"}, "TFPS_NUM_SERVERS"),
    ({"TFPS_SCHEDULER": "10.0.0.1"}, "TFPS_SCHEDULER"),
    ({"TFPS_SCHEDULER": "10.0.0.1:http"}, "TFPS_SCHEDULER"),
    ({"TFPS_SCHEDULER": "10.0.0.1:70000"}, "TFPS_SCHEDULER"),
    ({"TFPS_LOCAL_SIZE": "5"}, "TFPS_LOCAL_SIZE"),
    ({"TFPS_LOCAL_RANK": "2", "TFPS_LOCAL_SIZE": "2"}, "TFPS_LOCAL_RANK"),
    ({"TFPS_RANK": None, "DMLC_WORKER_ID": "9"}, "DMLC_WORKER_ID"),
    ({"TFPS_SIZE": None}, "TFPS_SIZE"),
    ({"TFPS_SCHEDULER": None}, "TFPS_SCHEDULER"),
    ({"TFPS_SCHEDULER": None, "DMLC_PS_ROOT_URI": "h"}, "DMLC_PS_ROOT_PORT"),
    ({"TFPS_SCHEDULER": None, "DMLC_PS_ROOT_URI": "h", "DMLC_PS_ROOT_PORT": "0"},
     "DMLC_PS_ROOT_PORT"),
])
def test_bad_values_raise_value_error_naming_the_variable(changes, named):
    env = {**TFPS, **changes}
    env = {name: value for name, value in env.items() if value is not None}
    with pytest.raises(ValueError, match=named):
        config.read_cluster(env)


def test_doc_table_lists_every_variable_and_fallback():
    table = config.markdown_table()
    for var in config.VARIABLES:
        assert f"`{var.name}`" in table
        for fallback in var.fallbacks:
            assert f"`{fallback}`" in table
