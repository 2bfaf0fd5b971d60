"""Where a worker or a ps task finds its place under TF_CONFIG, Slurm, Open MPI and PMI
(tf_ps_ops/common/config.py, tf_ps_ops/common/resolvers.py, tf_ps_ops/runner/role.py), from hand-set
variables; no process is started and no network is used. TensorFlow's resolvers parse.
"""

import json

import pytest

from tf_ps_ops.common import config as _config
from tf_ps_ops.runner import role

pytest.importorskip("tensorflow")

PS_SERVER = "ps_server"


def tf_config(task_type, index, **cluster):
    cluster = cluster or {"ps": ["ps0:2222", "ps1:2222"], "chief": ["chief0:2222"],
                          "worker": ["w0:2222", "w1:2222"]}
    return {"TF_CONFIG": json.dumps({"cluster": cluster,
                                     "task": {"type": task_type, "index": index}})}


@pytest.mark.parametrize("task_type,index,rank", [("chief", 0, 0), ("worker", 0, 1),
                                                   ("worker", 1, 2)])
def test_tf_config_workers_are_chief_then_workers(task_type, index, rank):
    cluster = _config.read_cluster(tf_config(task_type, index))
    # Kubernetes: one task per pod, so the scheduler is ps task 0's port + 1.
    assert cluster == _config.ClusterConfig("ps0", 2223, rank, 3, 2)


def test_tf_config_ps_tasks_run_servers_and_ps0_the_scheduler_too():
    layout = _config.read_layout(tf_config("ps", 0))
    assert role.server_commands(layout, PS_SERVER) == [
        ("scheduler", [PS_SERVER, "--role", "scheduler", "--port", "2223",
                       "--num-workers", "3", "--num-servers", "2"]),
        ("server", [PS_SERVER, "--role", "server", "--scheduler", "ps0:2223", "--port", "2222",
                    "--num-workers", "3", "--num-servers", "2"])]
    layout = _config.read_layout(tf_config("ps", 1))
    assert [r for r, _ in role.server_commands(layout, PS_SERVER)] == ["server"]
    layout = _config.read_layout(tf_config("worker", 1))
    assert role.server_commands(layout, PS_SERVER) == []


def test_scheduler_port_skips_ports_of_tasks_on_the_same_host():
    env = tf_config("worker", 0, ps=["h:7000", "h:7001"], worker=["h:7002", "other:7003"])
    assert _config.read_cluster(env).scheduler_port == 7003
    env["TFPS_SCHEDULER_PORT"] = "9000"
    assert _config.read_cluster(env).scheduler_port == 9000


def test_a_scheduler_job_in_tf_config_is_used():
    env = tf_config("scheduler", 0, scheduler=["s:1"], ps=["p:2"], worker=["w:3"])
    layout = _config.read_layout(env)
    assert layout.scheduler == ("s", 1)
    assert [r for r, _ in role.server_commands(layout, PS_SERVER)] == ["scheduler"]
    env = tf_config("ps", 0, scheduler=["s:1"], ps=["p:2"], worker=["w:3"])
    assert [r for r, _ in role.server_commands(_config.read_layout(env), PS_SERVER)] == [
        "server"]


def test_explicit_variables_win_over_tf_config_and_slurm():
    env = {**tf_config("worker", 0), **SLURM, "TFPS_SCHEDULER": "x:1", "TFPS_RANK": "0",
           "TFPS_SIZE": "1"}
    assert _config.cluster_source(env) == "tfps"
    assert _config.read_cluster(env) == _config.ClusterConfig("x", 1, 0, 1, 1)


@pytest.mark.parametrize("env,named", [
    (tf_config("ps", 0), "not a training worker"),
    (tf_config("evaluator", 0, ps=["p:1"], worker=["w:1"], evaluator=["e:1"]),
     "not a training worker"),
    (tf_config("worker", 2), "task index 2"),
    (tf_config("worker", 0, worker=["w:1"]), "no 'ps' task"),
    (tf_config("ps", 0, ps=["p:1"]), "no 'chief' or 'worker'"),
    (tf_config("worker", 0, ps=["p:1"], worker=["w:1"], master=["m:1"]), "unknown job"),
    (tf_config("worker", 0, ps=["p"], worker=["w:1"]), "not host:port"),
    ({**tf_config("worker", 1), "TFPS_RANK": "1"}, "TFPS_RANK=1 disagrees with TF_CONFIG"),
    ({**tf_config("worker", 1), "TFPS_NUM_SERVERS": "3"}, "TFPS_NUM_SERVERS=3 disagrees"),
    ({**tf_config("worker", 1), "TFPS_SCHEDULER_PORT": "2222"}, "TFPS_SCHEDULER_PORT"),
    ({**tf_config("worker", 1), "TFPS_SCHEDULER_PORT": "http"}, "TFPS_SCHEDULER_PORT"),
    ({"TF_CONFIG": "{not json"}, "TF_CONFIG"),
])
def test_inconsistent_tf_config_names_the_problem(env, named):
    with pytest.raises(ValueError, match=named):
        _config.read_cluster(env)


SLURM = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "n[1-2]",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("procid,rank", [(1, 0), (2, 1), (3, 2)])
def test_slurm_first_task_is_the_server_the_rest_workers(procid, rank):
    env = {**SLURM, "SLURM_PROCID": str(procid)}
    # Tasks n1:8888 (ps), n1:8889, n2:8888, n2:8889: the scheduler takes n1's next port.
    assert _config.read_cluster(env) == _config.ClusterConfig("n1", 8890, rank, 3, 1)


def test_slurm_servers_bind_any_port_and_follow_tfps_num_servers():
    env = {**SLURM, "SLURM_PROCID": "1", "TFPS_NUM_SERVERS": "2"}
    layout = _config.read_layout(env)
    assert (layout.role, layout.index, len(layout.workers)) == ("server", 1, 2)
    (name, argv), = role.server_commands(layout, PS_SERVER)
    assert argv[argv.index("--port") + 1] == "0" and "n1:8890" in argv


@pytest.mark.parametrize("changes,named", [
    ({"SLURM_PROCID": "0"}, "not a training worker"),
    ({"SLURM_PROCID": "1", "OMPI_COMM_WORLD_RANK": "3"}, "OMPI_COMM_WORLD_RANK=3 disagrees"),
    ({"SLURM_PROCID": "1", "PMI_RANK": "0"}, "PMI_RANK=0 disagrees"),
    ({"SLURM_PROCID": "1", "TFPS_NUM_SERVERS": "4"}, "leaves no worker"),
    ({"SLURM_PROCID": "1", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, "Slurm variables"),
    ({"SLURM_PROCID": "1", "SLURM_STEP_NODELIST": ""}, "SLURM_STEP_NODELIST"),
])
def test_inconsistent_slurm_names_the_variable(changes, named):
    with pytest.raises(ValueError, match=named):
        _config.read_cluster({**SLURM, **changes})


def test_open_mpi_and_pmi_ranks_with_an_explicit_scheduler():
    base = {"TFPS_SCHEDULER": "h:1"}
    ompi = {**base, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert _config.read_cluster(ompi) == _config.ClusterConfig("h", 1, 1, 2, 1, 1, 2)
    pmi = {**base, "PMI_RANK": "2", "PMI_SIZE": "3"}
    assert _config.read_cluster(pmi) == _config.ClusterConfig("h", 1, 2, 3, 1)
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_RANK=1 and PMI_RANK=0 disagree"):
        _config.read_cluster({**ompi, "PMI_RANK": "0"})
    # A launcher's own variables win and are not compared with MPI's.
    assert _config.read_cluster({**ompi, "TFPS_RANK": "0", "PMI_RANK": "5"}).rank == 0


def test_no_cluster_at_all_says_what_to_set():
    with pytest.raises(ValueError, match="TF_CONFIG"):
        _config.read_cluster({})
