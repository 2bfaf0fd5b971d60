"""`tf_ps_ops.tensorflow` and `tf_ps_ops.keras` carry Horovod 0.28's names
(horovod/tensorflow/__init__.py, horovod/tensorflow/keras/__init__.py): served ones work,
the others raise NotImplementedError saying why. No cluster needed: nothing here talks."""

import inspect
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import tf_ps_ops  # noqa: E402
import tf_ps_ops.keras as hvd_keras  # noqa: E402
import tf_ps_ops.tensorflow as hvd_tf  # noqa: E402

HOROVOD_TENSORFLOW = """init shutdown is_initialized start_timeline stop_timeline size
    local_size cross_size rank local_rank cross_rank is_homogeneous mpi_threads_supported
    mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built
    rocm_built ProcessSet global_process_set add_process_set remove_process_set Average Sum Adasum Min Max
    Product allgather broadcast broadcast_ alltoall reducescatter grouped_reducescatter
    grouped_allgather join barrier size_op local_size_op rank_op local_rank_op allreduce
    grouped_allreduce broadcast_variables broadcast_object broadcast_object_fn
    allgather_object broadcast_global_variables BroadcastGlobalVariablesHook
    DistributedOptimizer DistributedGradientTape PartialDistributedGradientTape
    Compression SyncBatchNormalization elastic keras util _executing_eagerly""".split()
HOROVOD_KERAS = """init shutdown is_initialized size local_size cross_size rank local_rank
    cross_rank global_process_set mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built
    nccl_built ddl_built ccl_built cuda_built rocm_built Compression Average Sum Adasum Min
    Max Product DistributedOptimizer PartialDistributedOptimizer broadcast_global_variables
    allreduce allgather broadcast reducescatter load_model callbacks elastic ProcessSet
    add_process_set remove_process_set SyncBatchNormalization""".split()
UNSERVED = []  # every Horovod TensorFlow name is served now


@pytest.mark.parametrize("module,names", [(hvd_tf, HOROVOD_TENSORFLOW),
                                          (hvd_keras, HOROVOD_KERAS)])
def test_every_horovod_name_is_there(module, names):
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{module.__name__} lacks {missing}"


def test_every_horovod_name_is_served_and_the_stand_in_still_says_why():
    from tf_ps_ops.collectives import compat as _compat
    assert _compat.UNSERVED == {} and UNSERVED == []
    # The stand-in stays for names a later Horovod adds: it raises with the reason, and is
    # falsy so that feature checks fail soft.
    stand_in = _compat._Unserved("future_api", "not served yet, for a test")
    assert not stand_in
    with pytest.raises(NotImplementedError, match="Horovod's future_api: not served yet"):
        stand_in(None)
    with pytest.raises(NotImplementedError, match="Horovod's future_api.attr: not served"):
        stand_in.attr()


def test_elastic_is_served():
    """hvd.elastic is the real module in every namespace (docs/elastic.md)."""
    import tf_ps_ops.elastic as elastic
    for namespace in (hvd_tf, hvd_keras, tf_ps_ops):
        assert namespace.elastic is elastic
    for name in ("State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
                 "KerasState", "run",
                 "HorovodInternalError", "HostsUpdatedInterrupt", "CommitStateCallback",
                 "UpdateEpochStateCallback", "UpdateBatchStateCallback"):
        assert hasattr(elastic, name), name
    state = elastic.ObjectState(epoch=3, batch=1)
    state.epoch, state.batch = 4, 2
    state.restore()  # nothing committed since: back to the values given
    assert (state.epoch, state.batch) == (3, 1)
    state.epoch = 5
    state.save()
    state.epoch = 6
    state.restore()
    assert state.epoch == 5
    state.epoch = 7
    state.commit()  # a job without elastic membership commits too (Horovod's commit works)
    state.epoch = 8
    state.restore()
    assert state.epoch == 7
    assert elastic.KerasState is elastic.TensorFlowKerasState
    with pytest.raises(RuntimeError, match="tfps-run --elastic"):
        elastic.run(lambda s: None)(state)  # not initialised under elastic membership


def test_elastic_init_without_the_driver_says_what_to_do(monkeypatch):
    """TFPS_ELASTIC=1 (init(elastic=True)) outside `tfps-run --elastic`: a clear error at
    once, before anything is sent, instead of a hang."""
    monkeypatch.setenv("TFPS_ELASTIC", "0")  # restored after the test
    monkeypatch.delenv("TFPS_ELASTIC_DIR", raising=False)
    with pytest.raises(RuntimeError, match="needs the elastic driver.*tfps-run --elastic"):
        tf_ps_ops.init(elastic=True)
    assert not tf_ps_ops.is_initialized()


@pytest.mark.parametrize("op", ["Min", "Max", "Product"])
def test_server_reductions_keep_horovods_values(op):
    assert getattr(hvd_tf, op) == {"Min": 3, "Max": 4, "Product": 5}[op]  # Horovod's values


def test_served_collectives_are_the_real_ones():
    import tf_ps_ops.collectives.alltoall as collectives
    for name in ("alltoall", "reducescatter", "grouped_allgather", "grouped_reducescatter"):
        assert getattr(hvd_tf, name) is getattr(collectives, name)
        assert getattr(tf_ps_ops, name) is getattr(collectives, name)
    assert hvd_keras.reducescatter is collectives.reducescatter


def test_build_queries_say_no_mpi_gloo_nccl():
    for name in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "ddl_built",
                 "ccl_built", "rocm_built", "mpi_threads_supported"):
        assert getattr(tf_ps_ops, name)() is False, name
    assert tf_ps_ops.nccl_built() == 0
    assert tf_ps_ops.cuda_built() in (True, False)


def test_layout_and_helpers():
    assert hvd_tf.keras is hvd_keras and hvd_keras.callbacks is tf_ps_ops.callbacks
    assert hvd_tf.util._executing_eagerly() and hvd_tf._executing_eagerly()
    with pytest.raises(RuntimeError, match="eager"):
        hvd_tf.broadcast_global_variables(0)
    namespace = {}
    exec("import tensorflow\nfrom tf_ps_ops import *", namespace)
    assert namespace["tensorflow"] is tf  # a star import does not shadow TensorFlow


def test_byteps_push_pull_signature():
    parameters = list(inspect.signature(tf_ps_ops.push_pull).parameters)
    assert parameters[:8] == ["tensor", "scope", "average", "device_dense", "device_sparse",
                              "compression", "op", "enable_async"]
    with pytest.raises(NotImplementedError, match="TFPS_CONSISTENCY=asp"):
        tf_ps_ops.push_pull(tf.ones(2), enable_async=True)


def test_load_model_restores_a_distributed_optimizer(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1, 0.9)),
                  loss="mse")
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = hvd_keras.load_model(path, compression=tf_ps_ops.Compression.fp16)
    optimizer = loaded.optimizer
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert type(optimizer).apply is hvd_keras._DistributedOptimizerMixin.apply
    assert int(optimizer.iterations) == 7 and optimizer._tfps_compression is \
        tf_ps_ops.Compression.fp16
    np.testing.assert_array_equal(loaded.layers[0].kernel.numpy(),
                                  model.layers[0].kernel.numpy())


def test_objects_that_are_not_process_sets_are_refused():
    other = type("ProcessSet", (), {"process_set_id": 1})()
    calls = [lambda ps: hvd_tf.allreduce(tf.ones(2), process_set=ps),
             lambda ps: hvd_tf.grouped_allreduce([tf.ones(2)], process_set=ps),
             lambda ps: hvd_tf.allgather(tf.ones(2), process_set=ps),
             lambda ps: hvd_tf.broadcast(tf.ones(2), 0, process_set=ps),
             lambda ps: hvd_tf.broadcast_variables([], 0, process_set=ps),
             lambda ps: hvd_tf.broadcast_object(1, process_set=ps),
             lambda ps: hvd_tf.allgather_object(1, process_set=ps),
             lambda ps: hvd_keras.allreduce(1.0, process_set=ps)]
    for call in calls:
        with pytest.raises(ValueError, match="is not a tf_ps_ops.ProcessSet"):
            call(other)
    assert hvd_tf.global_process_set.process_set_id == 0
    assert hvd_tf.ProcessSet is tf_ps_ops.ProcessSet is hvd_keras.ProcessSet
    assert hvd_tf.join is tf_ps_ops.join and hvd_tf.barrier is tf_ps_ops.barrier
