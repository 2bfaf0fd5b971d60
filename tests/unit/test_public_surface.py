"""The public surface cannot shrink unnoticed: every name of `import tf_ps_ops as hvd`, of
each public module (Horovod's layout: tf_ps_ops.tensorflow, .keras, .callbacks, .elastic,
.ray; ours: .ps_mode, .optimizers, .algorithms, .compression, sfb), the console scripts
and the `python -m` entry points, against the committed list below.

The list was taken (tests/public_surface.py) from the package before it was split into
subpackages. A name may be added; none may disappear. tf_ps_ops.run and tf_ps_ops.role
list their entry points only: their other names were the launcher's internals, now in
tf_ps_ops/runner/.
"""

import ast
import importlib
import importlib.util
import os
import sys
import tomllib

import pytest

import public_surface as surface

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXPECTED = {
    "tf_ps_ops": [
        "Adasum", "Average", "BroadcastGlobalVariablesHook", "Compression",
        "DistributedGradientTape", "DistributedOptimizer", "Max", "Min",
        "PartialDistributedGradientTape", "PartialDistributedOptimizer", "ProcessSet",
        "Product", "Sum", "SyncBatchNormalization", "add_process_set", "algorithms",
        "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
        "broadcast_", "broadcast_global_variables", "broadcast_object",
        "broadcast_object_fn", "broadcast_variables", "callbacks", "ccl_built",
        "compression", "cross_rank", "cross_size", "cuda_built", "ddl_built",
        "disable_graph_rewrite", "elastic", "enable_graph_rewrite", "global_process_set",
        "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allreduce",
        "grouped_reducescatter", "init", "is_homogeneous", "is_initialized", "join",
        "keras", "load_model", "local_rank", "local_rank_op", "local_size",
        "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported",
        "nccl_built", "num_servers", "optimizers", "ps_mode", "push_pull", "rank",
        "rank_op", "reducescatter", "remove_process_set", "rewrite_graph_def",
        "rocm_built", "shutdown", "size", "size_op", "start_timeline", "stop_timeline"
    ],
    "tf_ps_ops.tensorflow": [
        "Adasum", "Average", "BroadcastGlobalVariablesHook", "Compression",
        "DistributedGradientTape", "DistributedOptimizer", "Max", "Min",
        "PartialDistributedGradientTape", "PartialDistributedOptimizer", "ProcessSet",
        "Product", "Sum", "SyncBatchNormalization", "UNSERVED", "add_process_set",
        "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
        "broadcast_", "broadcast_global_variables", "broadcast_object",
        "broadcast_object_fn", "broadcast_variables", "callbacks", "ccl_built",
        "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic",
        "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather",
        "grouped_allreduce", "grouped_reducescatter", "init", "is_homogeneous",
        "is_initialized", "join", "keras", "local_rank", "local_rank_op", "local_size",
        "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported",
        "nccl_built", "rank", "rank_op", "reducescatter", "remove_process_set",
        "rocm_built", "shutdown", "size", "size_op", "start_timeline", "stop_timeline",
        "unserved", "util"
    ],
    "tf_ps_ops.keras": [
        "Adasum", "Average", "Compression", "DistributedOptimizer", "LocalAggregation",
        "LocalVariables", "Max", "Min", "PartialDistributedOptimizer", "ProcessSet",
        "Product", "Sum", "SyncBatchNormalization", "add_process_set", "allgather",
        "allgather_object", "allreduce", "broadcast", "broadcast_global_variables",
        "broadcast_object", "callbacks", "ccl_built", "check_gradient_options",
        "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic",
        "global_process_set", "gloo_built", "gloo_enabled", "init", "is_homogeneous",
        "is_initialized", "keys_for", "load_model", "local_rank", "local_size",
        "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "ops", "rank",
        "reduce_gradients", "reducescatter", "remove_process_set", "rocm_built",
        "shutdown", "size", "start_timeline", "stop_timeline"
    ],
    "tf_ps_ops.callbacks": [
        "Average", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback",
        "LearningRateScheduleCallback", "LearningRateWarmupCallback",
        "MetricAverageCallback", "allreduce", "broadcast_variables", "size"
    ],
    "tf_ps_ops.elastic": [
        "CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
        "State", "TensorFlowKerasState", "TensorFlowState", "UpdateBatchStateCallback",
        "UpdateEpochStateCallback", "basics", "ops", "run"
    ],
    "tf_ps_ops.ray": [
        "RayExecutor"
    ],
    "tf_ps_ops.ps_mode": [
        "disable_graph_rewrite", "enable_graph_rewrite", "graph_rewrite_enabled",
        "initialize_variables", "key_for", "ps_key", "push_served_variables",
        "push_variables", "rewrite_graph_def", "swaps"
    ],
    "tf_ps_ops.optimizers": [
        "Adagrad", "Adam", "RMSprop", "SGD", "ps_key"
    ],
    "tf_ps_ops.algorithms": [
        "Algorithm", "AsyncModelAverage", "Decentralized", "GradientAllReduce",
        "LowPrecisionDecentralized", "QAdam", "async_average", "base", "decentralized",
        "qadam", "ring_peers", "shift_one_peer"
    ],
    "tf_ps_ops.compression": [
        "Compression", "Compressor", "CoreCodec", "FP16Compressor", "HorovodFP16Codec",
        "NoneCompressor", "SparseCodec", "wire_codec", "wire_compress", "wire_decompress"
    ],
    "tf_ps_ops.run": [
        "main", "parse_args"
    ],
    "tf_ps_ops.role": [
        "main", "parse_args", "server_commands"
    ],
    "sfb": [
        "Dense", "convert", "factor_gradient", "is_sfb_variable", "policy"
    ],
}

# The console scripts pip installs (pyproject.toml [project.scripts]): name -> target, or
# None where only the name is promised (ps_server's target moved with server_main.py).
SCRIPTS = {"tfps-run": "tf_ps_ops.run:main", "tfps-role": "tf_ps_ops.role:main",
           "ps_server": None}
# `python -m ...` commands that the Makefile, docs, examples and launchers run.
MAIN_MODULES = ("tf_ps_ops.run", "tf_ps_ops.role")

OPTIONAL = {"tf_ps_ops.ray": "ray"}  # the `ray` extra


def _module(name):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    return importlib.import_module(name)


def script_problems(scripts, declared):
    """What is wrong with the console scripts `scripts` given the `declared` table."""
    problems = []
    for name, target in scripts.items():
        if name not in declared:
            problems.append(f"console script {name} is gone")
            continue
        if target is not None and declared[name] != target:
            problems.append(f"console script {name} runs {declared[name]}, not {target}")
        module, _, attribute = declared[name].partition(":")
        try:
            callable_ = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as e:
            problems.append(f"console script {name}: {declared[name]} does not resolve ({e})")
            continue
        if not callable(callable_):
            problems.append(f"console script {name}: {declared[name]} is not callable")
    return problems


def runs_as_main(module_name):
    """Whether `python -m module_name` does something: the file has a __main__ block."""
    spec = importlib.util.find_spec(module_name)
    tree = ast.parse(open(spec.origin).read())
    return any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
               for node in tree.body)


def _declared_scripts():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("module_name", sorted(EXPECTED))
def test_no_public_name_disappeared(module_name):
    module = _module(module_name)
    gone = surface.missing(module, EXPECTED[module_name])
    assert not gone, f"public names that disappeared: {gone}"


def test_the_star_import_still_gives_the_api():
    import tf_ps_ops
    assert set(EXPECTED["tf_ps_ops"]) <= set(tf_ps_ops.__all__)


def test_console_scripts_and_main_modules():
    assert not script_problems(SCRIPTS, _declared_scripts())
    for name in MAIN_MODULES:
        assert runs_as_main(name), f"python -m {name} no longer runs anything"


def test_the_checker_sees_a_name_that_disappears(monkeypatch):
    """The checks above cannot pass vacuously: take names away and they are reported."""
    import tf_ps_ops
    import tf_ps_ops.ps_mode
    assert surface.missing(tf_ps_ops.ps_mode, EXPECTED["tf_ps_ops.ps_mode"]) == []
    monkeypatch.delattr(tf_ps_ops.ps_mode, "swaps")
    assert surface.missing(tf_ps_ops.ps_mode, EXPECTED["tf_ps_ops.ps_mode"]) == \
        ["tf_ps_ops.ps_mode.swaps"]
    # A lazily exported name of the package: gone from its export table.
    tf_ps_ops.allreduce  # noqa: B018  (resolved once, then cached in the namespace)
    monkeypatch.delitem(vars(tf_ps_ops), "allreduce")
    monkeypatch.delitem(tf_ps_ops._EXPORTS, "allreduce")
    assert surface.missing(tf_ps_ops, EXPECTED["tf_ps_ops"]) == ["tf_ps_ops.allreduce"]
    # A name imported from elsewhere is not the module's own.
    monkeypatch.setattr(tf_ps_ops.ps_mode, "push_variables", tf.identity)
    assert "tf_ps_ops.ps_mode.push_variables" in \
        surface.missing(tf_ps_ops.ps_mode, EXPECTED["tf_ps_ops.ps_mode"])


def test_the_checker_sees_a_console_script_that_disappears(tmp_path):
    declared = dict(_declared_scripts())
    assert script_problems(SCRIPTS, declared) == []
    del declared["tfps-role"]
    declared["tfps-run"] = "tf_ps_ops.runner.run:main"
    assert script_problems(SCRIPTS, declared) == [
        "console script tfps-run runs tf_ps_ops.runner.run:main, not tf_ps_ops.run:main",
        "console script tfps-role is gone"]
    declared["tfps-run"] = "tf_ps_ops.run:no_such_function"
    assert "does not resolve" in script_problems({"tfps-run": None}, declared)[0]
    module = tmp_path / "tfps_no_main.py"
    module.write_text("def main():\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert not runs_as_main("tfps_no_main")
    finally:
        sys.path.remove(str(tmp_path))
