"""The planner's embeddings (gradients that are tf.IndexedSlices): their bytes against a
NumPy count of the slices a real Keras step produces, the zoo's layer lists against the
Keras models, and the choice between gathering rows, summing dense and PS rows flipping
where the formulas cross."""

import dataclasses
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from tf_ps_ops.plan import cost, layers, planner, steptime  # noqa: E402
from tf_ps_ops.plan import __main__ as cli  # noqa: E402
from tf_ps_ops.plan.cost import FREE, Choice, Cluster  # noqa: E402

MB = 1 << 20


def link(layer, choice, cluster, batch, partition=MB):
    return cost.layer_cost(layer, choice, cluster, FREE, batch, partition).link_bytes


@pytest.fixture(scope="module")
def keras_step():
    """A Keras model with an Embedding (1000 × 16, 6 ids per example), its planner layers
    and the embedding's gradient of one step on a batch of 5."""
    tf = pytest.importorskip("tensorflow")
    # Single-process unit tests share one TensorFlow context: its thread counts are fixed
    # by whichever test initialised it first, so none is set here.
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(1000, 16, name="table")(ids)
    out = keras.layers.Dense(1, name="out")(keras.layers.Flatten()(x))
    model = keras.Model(ids, out)
    batch = np.random.default_rng(1).integers(0, 40, size=(5, 6)).astype(np.int32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(batch))
    grad = tape.gradient(loss, model.get_layer("table").trainable_weights[0])
    assert isinstance(grad, tf.IndexedSlices)
    return layers.from_keras(model), grad, batch


def test_gather_bytes_are_the_slices_every_peer_receives(keras_step):
    found, grad, batch = keras_step
    table = next(layer for layer in found if layer.name == "table")
    assert table.sparse and table.table == (1000, 16) and table.rows == 6
    values, indices = grad.values.numpy(), grad.indices.numpy()
    # One row per lookup, duplicates included: what the allgather sends per worker.
    assert table.rows_per_step(len(batch)) == len(values) == batch.size
    sent = values.nbytes + indices.nbytes
    for n in (2, 8, 64):  # every worker receives every other worker's slices
        assert link(table, Choice("gather"), Cluster(n), len(batch)) == (n - 1) * sent
    # 4 workers per host: each local worker receives the 12 remote workers' slices.
    assert link(table, Choice("gather"), Cluster(16, workers_per_host=4),
                len(batch)) == 4 * 12 * sent
    # Summed dense (sparse_as_dense): the whole table, as any dense tensor.
    assert link(table, Choice("sum"), Cluster(8), len(batch)) == pytest.approx(
        2 * 7 / 8 * np.zeros((1000, 16), np.float32).nbytes)
    with pytest.raises(ValueError, match="SFB needs a Dense kernel"):
        link(table, Choice("sfb"), Cluster(8), len(batch))


def test_ps_rows_are_the_distinct_rows_pushed_and_their_union_pulled(keras_step):
    found, grad, batch = keras_step
    table = next(layer for layer in found if layer.name == "table")
    # The PS kernel sums duplicate ids: a worker pushes its distinct rows (int64 ids).
    rng = np.random.default_rng(2)
    small = layers.embedding("t", 1000, 16, 6, reach=40)
    for lookups in (30, 240):
        draws = [len(np.unique(rng.integers(0, 40, lookups))) for _ in range(4000)]
        assert small.distinct_rows(lookups) == pytest.approx(np.mean(draws), rel=0.01)
    assert layers.embedding("t", 10, 4).distinct_rows(10 ** 6) == pytest.approx(10)
    # 2 workers, 2 colocated servers: half of each direction crosses the link.
    row = 16 * 4 + 8
    pushed = table.distinct_rows(30) * row
    pulled = table.distinct_rows(60) * row
    assert link(table, Choice("ps"), Cluster(2), 5) == pytest.approx((pushed + pulled) / 2)
    # With momentum the optimizer moves every row: PS sends the table dense.
    dense = layers.Layer("t", "embedding", 16000, table=(1000, 16), rows=6, row_update=False)
    assert link(dense, Choice("ps"), Cluster(2), 5) == 16000 * 4


def test_ps_rows_pay_every_partition_of_the_table_in_cpu_not_on_the_link():
    # The same rows (a reach of 4096) in a table of one 1 MiB partition and of 512: only
    # the CPU of the 511 more partitions' pushes and replies differs.
    machine = dataclasses.replace(FREE, partition_cpu=2e-6, server_partition_cpu=3e-6)
    small = layers.embedding("t", 4096, 64, lookups=8)
    big = layers.embedding("t", 4096 * 512, 64, lookups=8, reach=4096)
    cluster = Cluster(3)
    a, b = (cost.layer_cost(t, Choice("ps"), cluster, machine, 16, MB) for t in (small, big))
    assert (a.link_bytes, a.messages, a.host_bytes) == (b.link_bytes, 1, b.host_bytes)
    assert b.messages == 1
    assert b.cpu_before - a.cpu_before == pytest.approx(511 * 2e-6)
    # Each of the 3 servers takes a third of the partitions from each of the 3 workers.
    assert b.cpu_after - a.cpu_after == pytest.approx(511 * 3e-6)
    assert b.host_cpu - a.host_cpu == pytest.approx(511 * (2e-6 + 3e-6))
    # Two workers on each of the 2 hosts: both workers' pushes, and the host's server's.
    shared = Cluster(4, workers_per_host=2)
    a, b = (cost.layer_cost(t, Choice("ps"), shared, machine, 16, MB) for t in (small, big))
    assert b.host_cpu - a.host_cpu == pytest.approx(511 * (2 * 2e-6 + 2 * 3e-6))


def test_ps_mode_says_once_what_a_table_of_many_partitions_costs(caplog, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    from tf_ps_ops.ps import sparse_tables

    class Table:  # shape and dtype are all note_sparse_table reads: no 512 MB allocated
        def __init__(self, rows, width):
            self.shape, self.dtype = tf.TensorShape([rows, width]), tf.float32

    monkeypatch.delenv("TFPS_PARTITION_BYTES", raising=False)
    monkeypatch.setattr(sparse_tables, "_noted_tables", set())
    with caplog.at_level("INFO", logger="tf_ps_ops"):
        sparse_tables.note_sparse_table(Table(2_000_000, 64), "dlrm/table")
        sparse_tables.note_sparse_table(Table(2_000_000, 64), "dlrm/table")
        sparse_tables.note_sparse_table(Table(1000, 64), "small")
        keras_variable = Table(2_000_000, 64)  # a keras.Variable: a tuple and a dtype name
        keras_variable.shape, keras_variable.dtype = (2_000_000, 64), "float32"
        sparse_tables.note_sparse_table(keras_variable, "keras/table")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert "'dlrm/table' (488 MiB) is 489 partitions of TFPS_PARTITION_BYTES=1048576" in said[0]
    assert "'keras/table' (488 MiB) is 489 partitions" in said[1]
    assert f"about {489 * cost.PARTITION_CPU * 1e3:.1f} ms" in said[0]
    # Fewer, larger partitions: below the threshold, nothing to say.
    caplog.clear()
    monkeypatch.setenv("TFPS_PARTITION_BYTES", str(16 << 20))
    with caplog.at_level("INFO", logger="tf_ps_ops"):
        sparse_tables.note_sparse_table(Table(2_000_000, 64), "other/table")
    assert not caplog.records


def test_cli_weighs_the_tables_partitions_when_it_picks_the_partition_size(capsys):
    # The DLRM at 1024 workers puts its 512 MB table in PS mode; priced per partition, the
    # plan takes 16 MiB partitions (32 of them); free, the default 1 MiB stays.
    def plan_line(*extra):
        assert cli.main(["--zoo", "dlrm", "--modes", "sum,ps", "--workers", "1024",
                         *extra]) == 0
        out = capsys.readouterr().out
        return next(line for line in out.splitlines() if "predicted step" in line)

    assert plan_line().startswith("partition 16777216 B")
    assert plan_line("--partition-us", "0,0").startswith("partition 1048576 B")
    for bad in ("5", "a,b", "-1,2"):
        with pytest.raises(SystemExit, match="--partition-us"):
            cli.main(["--zoo", "dlrm", f"--partition-us={bad}"])


def test_zoo_layer_lists_match_the_keras_models():
    pytest.importorskip("keras")
    import zoo_models

    for name, builder, sizes in (
            ("smoke_bert", layers.zoo_bert, dict(vocab=1000, hidden=64, heads=4, ffn=128,
                                                 layers=1, seq=8)),
            ("smoke_dlrm", layers.zoo_dlrm, dict(rows=10_000, hot=1_000, dim=16,
                                                 dense_features=13, sparse=8))):
        model = zoo_models.build(name)
        assert [(x.name, x.kind, x.params, x.table, x.rows) for x in layers.from_keras(model)
                if x.kind != "other"] == [(x.name, x.kind, x.params, x.table, x.rows)
                                          for x in builder(**sizes) if x.kind != "other"]
        assert sum(x.params for x in builder(**sizes)) == model.count_params()
    assert sum(x.params for x in layers.zoo_dlrm()) == 128_338_498
    assert sum(x.params for x in layers.zoo_bert()) == 38_210_306


def test_a_keras_layers_variables_are_counted():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="d"),
                              keras.layers.BatchNormalization(name="bn"),
                              keras.layers.Dense(2, use_bias=False, name="nobias")])
    assert [(x.name, x.variables) for x in layers.from_keras(model)] == [
        ("d", 2), ("bn", 2), ("nobias", 1)]


def test_gather_flips_to_dense_sum_where_the_formulas_cross():
    # gather: (N−1)·R·(4C+4); dense: 2·T·(N−1)/N. They cross at N = 2T / (R·(4C+4)).
    table = layers.embedding("t", 10_000, 64, lookups=10)
    batch = 10  # R = 100 rows of 260 bytes
    crossover = 2 * table.bytes / (100 * (4 * 64 + 4))
    below, above = math.floor(crossover), math.ceil(crossover)
    settings = steptime.Settings()
    choose = [planner.choose_layer(table, Cluster(n), FREE, batch, settings).mode
              for n in (2, below, above, 1024)]
    assert choose == ["gather", "gather", "sum", "sum"]


def test_ps_rows_win_at_scale_only_without_momentum():
    dlrm = layers.zoo_dlrm()
    args = dict(bandwidth=10e9 / 8, latency=50e-6)
    machine = cost.Machine()
    rows = cli.scaling_table(dlrm, 64, machine, args, ("none",), {},
                             workers_list=(2, 1024), modes=("sum", "ps"))
    assert [r[5] for r in rows if r[1]] == ["table=gather", "table=ps"]
    momentum = cli.sparse_settings(dlrm, True, [])
    rows = cli.scaling_table(momentum, 64, machine, args, ("none",), {},
                             workers_list=(2, 1024), modes=("sum", "ps"))
    assert [r[5] for r in rows if r[1]] == ["table=gather", "table=gather"]


def test_cli_prints_rows_and_the_crossover(capsys):
    assert cli.main(["--zoo", "bert", "--workers", "16", "--scaling"]) == 0
    out = capsys.readouterr().out
    assert "rows/step" in out and "128/30522" in out
    modes = [line.split()[-1] for line in out.splitlines()
             if line.split() and line.split()[0].isdigit() and "token_embedding=" in line]
    assert modes[0] == "token_embedding=gather" and modes[-1] == "token_embedding=sum"
    assert modes == sorted(modes)  # one flip, gather before sum
    with pytest.raises(SystemExit, match="--step-rows pooler"):
        cli.main(["--zoo", "bert", "--step-rows", "pooler=4"])
    assert cli.main(["--zoo", "bert", "--step-rows", "token_embedding=64"]) == 0
    assert "64/30522" in capsys.readouterr().out


def test_auto_plan_sums_dense_where_gathering_costs_more(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    from tf_ps_ops.plan import auto, measure
    from tf_ps_ops.training import keras_optimizer

    table = tf.Variable(tf.zeros((5000, 64)))

    seen = []

    @tf.function
    def step(ids):  # the rows of a traced step's slices: known where the batch is
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, ids))
        seen.append(keras_optimizer._slices_table(tape.gradient(loss, table), table))
        return loss

    step(tf.zeros(128, tf.int32))
    step.get_concrete_function(tf.TensorSpec((None,), tf.int32))
    assert seen == [(5000, 64, 128), (5000, 64, None)]
    keys = ["e", "w"]
    for workers, expected in ((4, frozenset()), (256, frozenset({"e"}))):
        measured = measure.Measurements(Cluster(workers), cost.Machine(), False)
        compressors, plan = auto.compressions(keys, [5000 * 64, 1000], measured,
                                              sparse={"e": (5000, 64, 128)})
        assert set(compressors) == set(keys)
        assert auto.densified(plan) == expected


def test_gathered_rows_cost_the_measured_update_per_row():
    """After a gather each worker's optimizer updates every worker's rows: at the
    measured price per row (scaled by the row's width against the width measured), or,
    unmeasured, a float add per element."""
    table = layers.embedding("t", 100000, 64, 8)
    rows = table.rows_per_step(32)
    plain = cost.Machine(sum_per_byte=1e-11)
    measured = dataclasses.replace(plain, apply_per_row=2e-7, apply_row_width=32)
    assert measured.row_add(64) == pytest.approx(4e-7)
    assert plain.row_add(64) == pytest.approx(256e-11)
    for workers, per_host in ((3, 1), (8, 2)):
        cluster = Cluster(workers, workers_per_host=per_host)
        c = cost.layer_cost(table, Choice("gather"), cluster, measured, 32, MB)
        # every worker on the host updates all `workers` workers' rows
        assert c.host_cpu == pytest.approx(per_host * workers * rows * 4e-7)
        assert c.cpu_after == pytest.approx(workers * rows * 4e-7)
        unmeasured = cost.layer_cost(table, Choice("gather"), cluster, plain, 32, MB)
        assert unmeasured.host_cpu == pytest.approx(per_host * workers * rows * 256e-11)
        # PS mode's rows are the servers' update: the price per row does not apply
        assert cost.layer_cost(table, Choice("ps"), cluster, measured, 32, MB) == \
            cost.layer_cost(table, Choice("ps"), cluster, plain, 32, MB)


def test_sparse_apply_probe_times_an_optimizers_rows(monkeypatch):
    """update_probe.sparse_apply_cost: the job's optimizer's update of random rows of a
    table, per row: the difference of the two row counts' CPU over the rows between them
    (here each update runs for real, and the clock is a counter); an optimizer it cannot
    copy is logged and priced 0 (the planner then falls back to the adds)."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from tf_ps_ops.plan import measure, tensor_probe, update_probe

    monkeypatch.setattr(measure, "rank0_value", lambda value, name: value)
    monkeypatch.setattr(update_probe, "SPARSE_PROBE_TABLE_BYTES", 1 << 20)
    calls = []

    def counted(function, steps):
        assert int(function()) == 0
        calls.append(steps)
        return 0.25 * len(calls)  # the second, larger update: 0.25 s more

    monkeypatch.setattr(tensor_probe, "median_cpu_seconds", counted)
    few, many = update_probe.SPARSE_PROBE_ROWS
    assert update_probe.sparse_apply_cost(keras.optimizers.SGD(0.1), 16, steps=3) == \
        pytest.approx(0.25 / (many - few))
    assert calls == [3, 3]

    class Uncopyable(keras.optimizers.SGD):
        def get_config(self):
            raise NotImplementedError("no config")

    warnings = []
    monkeypatch.setattr(update_probe._logger, "warning", lambda *a: warnings.append(a[0] % a[1:]))
    assert update_probe.sparse_apply_cost(Uncopyable(0.1), 16, steps=1) == 0.0
    assert "could not time Uncopyable's update of an embedding's rows" in warnings[0], warnings


def test_embedding_json_round_trip_and_unknown_rows(tmp_path):
    dlrm = layers.zoo_dlrm()
    assert layers.from_json(layers.to_json(dlrm)) == dlrm
    text = ('{"layers": [{"name": "e", "table": [1000, 8], "rows": null, "row_update": false},'
            ' {"name": "fc", "kernel": [8, 2]}]}')
    found = layers.from_json(text)
    assert found[0].sparse and found[0].params == 8000 and not found[0].row_update
    path = tmp_path / "model.json"
    path.write_text(text)
    with pytest.raises(SystemExit, match="rows its gradient has per step are unknown"):
        cli.main([str(path)])
    with pytest.raises(SystemExit, match="ROWS is a row count"):
        cli.main([str(path), "--step-rows", "e=many"])
    # Given rows, and the JSON's row_update kept (no --momentum): PS sends it dense.
    given = cli.sparse_settings(found, None, ["e=64"])
    assert given[0].step_rows == 64 and not given[0].row_update
    assert cli.main([str(path), "--step-rows", "e=64", "--modes", "sum,ps"]) == 0
    with pytest.raises(ValueError, match="'gather' applies to an embedding"):
        planner.make_plan(dlrm, Cluster(4), 64, pins={"top_0": "gather"})
    with pytest.raises(ValueError, match="sends an embedding updated by rows uncompressed"):
        planner.make_plan(dlrm, Cluster(4), 64, pins={"table": "ps+int8"})
    assert str(planner.make_plan(dlrm, Cluster(4), 64, pins={"table": "sum+int8"})
               .choice("table")) == "sum+int8"


def test_the_profiled_step_takes_any_keras_inputs_and_moves_no_statistics():
    """profile.model_rate on a DLRM-like model: a float input and integer ids, two
    inputs; the profile runs forward and backward on made-up inputs in inference mode,
    so a BatchNormalization's moving statistics stay as they were."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from tf_ps_ops.plan import profile

    keras.utils.set_random_seed(0)
    dense_in, ids = keras.Input((13,)), keras.Input((4,), dtype="int32")
    bottom = keras.layers.BatchNormalization(name="norm")(
        keras.layers.Dense(32, name="bottom")(dense_in))
    pooled = keras.layers.Flatten()(keras.layers.Embedding(100, 8, name="table")(ids))
    out = keras.layers.Dense(1, name="top")(keras.layers.Concatenate()([bottom, pooled]))
    model = keras.Model([dense_in, ids], out)
    before = [v.numpy() for v in model.get_layer("norm").non_trainable_weights]
    rate = profile.model_rate(model, 16, steps=2)
    assert rate is not None and rate > 0
    for was, now in zip(before, model.get_layer("norm").non_trainable_weights):
        np.testing.assert_array_equal(was, now.numpy())
