"""benchmarks/tensor_cpu.py's arithmetic: the cost model's partition count is the engine's
cut, and its split of a worker's CPU into per tensor, per byte and per partition recovers
the costs that made a hand-built result."""

import os
import sys

import pytest

from native import load_core

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import tensor_cpu  # noqa: E402
from tf_ps_ops.plan import cost  # noqa: E402

core = load_core()


@pytest.mark.parametrize("servers", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("partition_bytes", [256 << 10, 1 << 20, 4 << 20])
def test_partitions_are_the_engines(servers, partition_bytes):
    for nbytes in (4, 4096, 64 << 10, (64 << 10) + 4, 128 << 10, 206848, 525312, 1 << 20,
                   (1 << 20) + 4, 4 << 20, 16 << 20, 37 << 20):
        engine = core.partition_tensor(core.key_of_name("w"), nbytes // 4, 4,
                                       partition_bytes, servers)
        assert cost.partition_count(nbytes, partition_bytes, servers) == len(engine), \
            (nbytes, servers, partition_bytes)


def shapes(call, tensor, byte, partition, tensors, kb, servers, threads=("engine",)):
    """A TENSOR_CPU_RESULT's shapes whose CPU is `call` per tf.function call, `tensor` per
    tensor, `byte` per byte sent or received and `partition` per partition beyond one
    tensor's first (all in the first thread name; the others idle)."""
    nbytes = kb * 1024

    def cpu(count, each, parts):
        return call + count * tensor + 2 * count * each * byte + parts * partition

    def parts(nbytes, servers):
        return cost.partition_count(nbytes, tensor_cpu.PARTITION_BYTES, servers)

    values = {"lone": cpu(1, 4, 0), "tiny": cpu(tensors, 4, 0),
              "many": cpu(tensors, nbytes, tensors * (parts(nbytes, servers) - 1)),
              "one": cpu(1, tensors * nbytes, parts(tensors * nbytes, servers) - 1)}
    idle = {t: 0.0 for t in threads[1:]}
    return dict(tensors=tensors, kb=kb, servers=servers, shapes={
        k: dict(cpu_s=v, wall_s=2 * v, threads={threads[0]: v, **idle})
        for k, v in values.items()})


def test_derive_recovers_the_costs_per_tensor_byte_and_partition():
    result = shapes(call=300e-6, tensor=130e-6, byte=0.3e-9, partition=60e-6, tensors=32,
                    kb=128, servers=2, threads=("engine", "zmq"))
    derived = tensor_cpu.derive(result)
    # 32 tensors cut in 2 against one tensor of 4 MiB cut in 4: 32 - 3 more beyond a first
    assert derived["extra_partitions"] == 29
    # a tiny tensor: its cost and its float's 4 bytes each way
    assert derived["tensor"]["cpu"] == pytest.approx(130e-6 + 8 * 0.3e-9, rel=1e-9)
    assert derived["partition"]["cpu"] == pytest.approx(60e-6, rel=1e-4)  # tiny bytes off
    # `one`'s three partitions beyond its first are in its bytes' price
    assert derived["byte"]["cpu"] == pytest.approx(0.3e-9 + 3 * 60e-6 / (2 * (4 << 20)),
                                                   rel=1e-5)
    assert derived["tensor"]["threads"] == pytest.approx({"engine": 130e-6 + 8 * 0.3e-9,
                                                          "zmq": 0.0})
    assert derived["partition"]["threads"] == pytest.approx({"engine": 60e-6, "zmq": 0.0},
                                                            rel=1e-4)


@pytest.mark.parametrize("kb, servers", [(128, 1), (64, 2)])
def test_nothing_cut_prices_no_partition(kb, servers):
    derived = tensor_cpu.derive(shapes(call=1e-4, tensor=1e-4, byte=1e-9, partition=5e-5,
                                       tensors=8, kb=kb, servers=servers))
    assert derived["extra_partitions"] <= 0 and derived["partition"] is None
    assert derived["tensor"]["cpu"] == pytest.approx(1e-4 + 8e-9, rel=1e-9)
    saved = dict(result=dict(derived=None, **shapes(1e-4, 1e-4, 1e-9, 0.0, 8, kb, servers)),
                 derived=derived)
    assert "| partition | — |" in tensor_cpu.table(saved)


def test_the_plans_probe_solves_per_byte_and_per_partition():
    from tf_ps_ops.plan import tensor_probe

    b, c = 0.3e-9, 55e-6
    big_bytes, cut_bytes = 16 << 20, 32 * (128 << 10)
    big_cut = cost.partition_count(big_bytes, 1 << 20, 2) - 1  # 16 partitions of 1 MiB
    probe_cut = 32 * (cost.partition_count(128 << 10, 1 << 20, 2) - 1)  # each cut in two
    assert (big_cut, probe_cut) == (15, 32)
    per_byte, per_partition = tensor_probe.solve_transport(
        (2 * big_bytes * b + big_cut * c, big_bytes, big_cut),
        (2 * cut_bytes * b + probe_cut * c, cut_bytes, probe_cut), 1e-3)
    assert per_byte == pytest.approx(b, rel=1e-9)
    assert per_partition == pytest.approx(c, rel=1e-9)
    # One server cuts nothing of 128 KiB: the default stays, and the big probe's own cut
    # (none either, 16 MiB in 1 MiB partitions is 16 on one server too) is priced at it.
    on_one = cost.partition_count(big_bytes, 1 << 20, 1) - 1
    per_byte, per_partition = tensor_probe.solve_transport(
        (2 * big_bytes * b + on_one * c, big_bytes, on_one), (0.0, cut_bytes, 0), c)
    assert per_partition == c and per_byte == pytest.approx(b, rel=1e-9)


def test_table_partitions_are_priced_by_the_jobs_transport(monkeypatch):
    # An untouched partition of a PS table costs 2-3 times as much under CURVE
    # (benchmarks/results/ps_sparse_partitions*.md, measured the same day).
    from tf_ps_ops.plan import measure

    monkeypatch.setenv("TFPS_AUTH_KEY_FILE", "/some/job.key")
    assert measure._table_partition_costs() == dict(
        partition_cpu=cost.PARTITION_CPU, server_partition_cpu=cost.SERVER_PARTITION_CPU)
    monkeypatch.delenv("TFPS_AUTH_KEY_FILE")
    plain = measure._table_partition_costs()
    assert plain == dict(partition_cpu=cost.PLAIN_PARTITION_CPU,
                         server_partition_cpu=cost.PLAIN_SERVER_PARTITION_CPU)
    assert plain["partition_cpu"] < cost.PARTITION_CPU
    assert plain["server_partition_cpu"] < cost.SERVER_PARTITION_CPU
