"""Server checkpoint files (ps_server/checkpoint.h): round trip, the documented layout read
by an independent parser, rejection of every truncation and every flipped byte, a server's
set of files, and the KeyStore's checkpoint trigger and overwrite (restore) rounds."""

import os
import struct
import zlib

import numpy as np
import pytest

from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
F32 = core.wire_dtype(np.dtype(np.float32))
F64 = core.wire_dtype(np.dtype(np.float64))
GRADIENT_DESCENT, KERAS_MOMENTUM, ADAM = 1, 3, 4
SLOTS = {0: 0, GRADIENT_DESCENT: 0, KERAS_MOMENTUM: 1, ADAM: 3}


def param(key, partition, dtype, count, optimizer, updates, seed):
    rng = np.random.default_rng(seed)
    np_dtype = np.float32 if dtype == F32 else np.float64

    def blob():
        return rng.standard_normal(count).astype(np_dtype).tobytes()

    return dict(key=key, partition=partition, dtype=dtype, count=count, optimizer=optimizer,
                updates=updates, value=blob(), slots=[blob() for _ in range(SLOTS[optimizer])])


def key_for_thread(base, partition, thread, threads):
    """The first key >= base that the server's thread `thread` owns for this partition."""
    key = base
    while ps_testing.thread_of_partition(key, partition, threads) != thread:
        key += 1
    return key


def shard(thread=1, threads=2, server_id=1, num_servers=3):
    params = [param(key_for_thread(2**63 + 5, 0, thread, threads), 0, F32, 7, ADAM, 4, 1),
              param(key_for_thread(2**63 + 5, 1, thread, threads), 1, F64, 3, KERAS_MOMENTUM, 4, 2),
              param(key_for_thread(11, 2, thread, threads), 2, F32, 5, 0, 0, 3),
              param(key_for_thread(40, 0, thread, threads), 0, F64, 1, GRADIENT_DESCENT, 9, 4)]
    params.sort(key=lambda p: (p["key"], p["partition"]))
    return dict(server_id=server_id, num_servers=num_servers, thread=thread, num_threads=threads,
                params=params)


def write(tmp_path, data, name="shard-1-1.ckpt"):
    path = str(tmp_path / name)
    ps_testing.write_checkpoint(path, data)
    return path


def parse(blob):
    """An independent reader of the layout documented in ps_server/checkpoint.h."""
    magic, version, header_bytes, server, servers, thread, threads, records = struct.unpack_from(
        "<8sIIiiiiQ", blob, 0)
    assert (magic, version, header_bytes) == (b"TFPSCKPT", 1, 40)
    offset, params = 40, []
    for _ in range(records):
        key, partition, dtype, optimizer, nslots, _, count, updates = struct.unpack_from(
            "<QIBBBBQQ", blob, offset)
        offset += 32
        size = count * (4 if dtype == F32 else 8)
        value = blob[offset:offset + size]
        slots = [blob[offset + size * (k + 1):offset + size * (k + 2)] for k in range(nslots)]
        offset += size * (1 + nslots)
        params.append(dict(key=key, partition=partition, dtype=dtype, count=count,
                           optimizer=optimizer, updates=updates, value=value, slots=slots))
    body, crc, end = struct.unpack_from("<QI4s", blob, offset)
    assert (body, end, offset + 16) == (offset, b"TFPE", len(blob))
    assert crc == zlib.crc32(blob[:offset])
    return dict(server_id=server, num_servers=servers, thread=thread, num_threads=threads,
                params=params)


def test_round_trip_keeps_every_field(tmp_path):
    data = shard()
    path = write(tmp_path, data)
    assert ps_testing.read_checkpoint(path) == data
    assert parse(open(path, "rb").read()) == data
    assert not os.path.exists(path + ".tmp")


def test_writing_is_deterministic_and_replaces_the_file(tmp_path):
    path = write(tmp_path, shard())
    first = open(path, "rb").read()
    ps_testing.write_checkpoint(path, ps_testing.read_checkpoint(path))
    assert open(path, "rb").read() == first
    empty = dict(shard(), params=[])
    ps_testing.write_checkpoint(path, empty)
    assert ps_testing.read_checkpoint(path) == empty
    assert len(open(path, "rb").read()) == 40 + 16


def test_crc_is_zlibs():
    for blob in (b"", b"a", b"123456789", bytes(range(256)) * 3):
        assert ps_testing.crc32(blob) == zlib.crc32(blob)
    assert ps_testing.crc32(b"6789", ps_testing.crc32(b"12345")) == zlib.crc32(b"123456789")


def test_every_truncation_is_a_clear_error(tmp_path):
    blob = open(write(tmp_path, shard()), "rb").read()
    bad = str(tmp_path / "bad.ckpt")
    for length in range(len(blob)):
        open(bad, "wb").write(blob[:length])
        with pytest.raises(RuntimeError, match=r"FailedPrecondition: .*bad\.ckpt"):
            ps_testing.read_checkpoint(bad)


def test_every_flipped_byte_is_a_clear_error(tmp_path):
    blob = open(write(tmp_path, shard()), "rb").read()
    bad = str(tmp_path / "bad.ckpt")
    for position in range(len(blob)):
        damaged = bytearray(blob)
        damaged[position] ^= 0x10
        open(bad, "wb").write(damaged)
        with pytest.raises(RuntimeError, match="FailedPrecondition: ") as error:
            ps_testing.read_checkpoint(bad)
        assert any(word in str(error.value) for word in
                   ("corrupt", "not a tf_ps_ops checkpoint", "format version")), str(error.value)


def with_crc(body):
    body = bytes(body)
    return body + struct.pack("<QI4s", len(body), zlib.crc32(body), b"TFPE")


@pytest.mark.parametrize("offset, value, message", [
    (40 + 12, 99, "dtype code 99"),                  # first record's dtype
    (40 + 13, 200, "unknown optimizer code 200"),
    (40 + 14, 1, "has 1 slots, not 0"),        # a never-updated parameter
    (40, 1, "does not belong to thread 1"),           # key's low byte: another thread's key
])
def test_a_well_checksummed_but_invalid_record_is_refused(tmp_path, offset, value, message):
    blob = bytearray(open(write(tmp_path, shard()), "rb").read()[:-16])
    blob[offset] = (blob[offset] + value) % 256 if offset == 40 else value
    bad = str(tmp_path / "bad.ckpt")
    open(bad, "wb").write(with_crc(blob))
    with pytest.raises(RuntimeError, match=message):
        ps_testing.read_checkpoint(bad)


def test_a_newer_version_and_a_foreign_file_are_named(tmp_path):
    blob = bytearray(open(write(tmp_path, shard()), "rb").read()[:-16])
    blob[8] = 2
    bad = str(tmp_path / "bad.ckpt")
    open(bad, "wb").write(with_crc(blob))
    with pytest.raises(RuntimeError, match="format version 2; this ps_server reads version 1"):
        ps_testing.read_checkpoint(bad)
    open(bad, "wb").write(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(RuntimeError, match="not a tf_ps_ops checkpoint"):
        ps_testing.read_checkpoint(bad)
    with pytest.raises(RuntimeError, match="cannot open"):
        ps_testing.read_checkpoint(str(tmp_path / "missing.ckpt"))
    with pytest.raises(RuntimeError, match="cannot create"):
        ps_testing.write_checkpoint(str(tmp_path / "no" / "such" / "dir.ckpt"), shard())


def write_server(directory, server_id, num_servers, threads):
    shards = []
    for thread in range(threads):
        data = shard(thread, threads, server_id, num_servers)
        ps_testing.write_checkpoint(str(directory / ps_testing.checkpoint_file_name(server_id, thread)), data)
        shards.append(data["params"])
    return shards


def test_load_shard_reads_every_thread_or_refuses(tmp_path):
    assert ps_testing.checkpoint_file_name(3, 1) == "shard-3-1.ckpt"
    assert ps_testing.load_shard(str(tmp_path / "absent"), 0, 2, 2) == []
    assert ps_testing.load_shard(str(tmp_path), 0, 2, 2) == []
    shards = write_server(tmp_path, 0, 2, 2)
    write_server(tmp_path, 1, 2, 2)
    (tmp_path / "shard-0-1.ckpt.tmp").write_bytes(b"left over by a crash")
    assert ps_testing.load_shard(str(tmp_path), 0, 2, 2) == shards
    with pytest.raises(RuntimeError, match=r"written by server 0 of 2.*servers \(3 now\)"):
        ps_testing.load_shard(str(tmp_path), 0, 3, 2)
    with pytest.raises(RuntimeError, match=r"thread\(s\) 0, 1.*TFPS_SERVER_THREADS \(3 now\)"):
        ps_testing.load_shard(str(tmp_path), 0, 2, 3)
    with pytest.raises(RuntimeError, match=r"server\(s\) 0, 1 but none of server 2"):
        ps_testing.load_shard(str(tmp_path), 2, 3, 2)
    blob = (tmp_path / "shard-0-1.ckpt").read_bytes()
    (tmp_path / "shard-0-1.ckpt").write_bytes(blob[:-1])
    with pytest.raises(RuntimeError, match="shard-0-1.ckpt is corrupt"):
        ps_testing.load_shard(str(tmp_path), 0, 2, 2)
    (tmp_path / "shard-0-1.ckpt").unlink()
    with pytest.raises(RuntimeError, match=r"for thread\(s\) 0;"):
        ps_testing.load_shard(str(tmp_path), 0, 2, 2)


# --- the KeyStore: what is checkpointed, when, and what a restore push does -------------

def f32(*values):
    return np.array(values, dtype=np.float32)


def as_f32(blob):
    return np.frombuffer(blob, dtype=np.float32)


def sgd(store, key, grad, lr=0.5):
    return as_f32(store.apply(key, 0, f32(*grad), GRADIENT_DESCENT, [lr]))


def test_checkpoint_is_due_when_every_updated_parameter_reaches_a_multiple():
    store = ps_testing.KeyStore()
    store.init(1, 0, f32(1, 2))
    store.init(2, 0, f32(3))
    assert not store.checkpoint_due(1)
    sgd(store, 1, [2, 2])                       # A=1 (B never updated: not counted)
    assert store.checkpoint_due(1) and not store.checkpoint_due(2)
    store.mark_checkpointed()
    assert not store.checkpoint_due(1)
    sgd(store, 2, [2])                          # A=1, B=1: one more parameter at 1
    assert store.checkpoint_due(1)
    store.mark_checkpointed()
    sgd(store, 1, [2, 2])                       # A=2, B=1: mid-step
    assert not store.checkpoint_due(1)
    assert as_f32(store.init(2, 0, f32(9))).tolist() == [2.0]  # first init wins
    sgd(store, 2, [2])                          # A=2, B=2
    assert store.checkpoint_due(1) and store.checkpoint_due(2) and not store.checkpoint_due(3)
    assert not store.checkpoint_due(0)
    held = store.params()
    assert [(p["key"], p["updates"], as_f32(p["value"]).tolist()) for p in held] == [
        (1, 2, [-1.0, 0.0]), (2, 2, [1.0])]


def test_overwrite_replaces_the_value_resets_the_slots_and_keeps_the_count():
    store = ps_testing.KeyStore()
    store.init(5, 0, f32(1, 1))
    for _ in range(3):  # KerasMomentum: lr, momentum, nesterov, then the slot's initial value
        store.apply(5, 0, f32(1, 1), KERAS_MOMENTUM, [0.1, 0.9, 0.0, 0.0])
    (before,) = store.params()
    assert before["optimizer"] == KERAS_MOMENTUM and len(before["slots"]) == 1
    store.mark_checkpointed()
    assert as_f32(store.init(5, 0, f32(7, 8), overwrite=True)).tolist() == [7.0, 8.0]
    (after,) = store.params()
    assert as_f32(after["value"]).tolist() == [7.0, 8.0]
    assert (after["optimizer"], after["slots"], after["updates"]) == (0, [], 3)
    # The next update starts the slots afresh: plain SGD-with-momentum from zero velocity.
    reply = as_f32(store.apply(5, 0, f32(1, 1), KERAS_MOMENTUM, [0.1, 0.9, 0.0, 0.0]))
    np.testing.assert_allclose(reply, [6.9, 7.9], rtol=1e-6)
    with pytest.raises(RuntimeError, match="server holds 2 float32 elements"):
        store.init(5, 0, f32(1, 2, 3), overwrite=True)


def test_restore_installs_params_as_already_checkpointed():
    source = ps_testing.KeyStore()
    source.init(1, 0, f32(1, 2))
    source.init(2, 0, f32(3))
    for key in (1, 2, 1, 2):
        source.apply(key, 0, f32(*([1] * (3 - key))), ADAM,
                     [0.01, 0.9, 0.999, 1e-7, 0.9, 0.999, 0, 0, 0, 0, 0])
    store = ps_testing.KeyStore()
    store.restore(source.params())
    assert store.params() == source.params()
    assert not store.checkpoint_due(1)
    held = as_f32(source.params()[0]["value"]).tolist()
    assert as_f32(store.init(1, 0, f32(0, 0))).tolist() == held  # the restored value wins
    store.apply(1, 0, f32(1, 1), ADAM, [0.01, 0.9, 0.999, 1e-7, 0.729, 0.997, 0, 0, 0, 0, 0])
    store.apply(2, 0, f32(1), ADAM, [0.01, 0.9, 0.999, 1e-7, 0.729, 0.997, 0, 0, 0, 0, 0])
    assert store.checkpoint_due(3)


def test_the_overwrite_flag_is_only_valid_on_an_init_push():
    fields = dict(type=core.MSG_TYPES["PUSH_PULL"], key=1, partition=0, num_partitions=1, step=1,
                  dtype=F32, sender=0, count=2, total_count=2)
    ok = core.encode_head(dict(fields, flags=core.FLAG_PS_INIT | core.FLAG_PS_OVERWRITE), [2])
    assert core.decode_head(ok, 8)[0] is None
    bad = core.encode_head(dict(fields, flags=core.FLAG_PS_OVERWRITE), [2])
    assert "overwrite flag is only valid on a PS init push" in core.decode_head(bad, 8)[0]


# --- slot pushes (kFlagPsSlot): how elastic PS mode carries the slots to new servers -----

MOMENTUM_PARAMS = [0.1, 0.9, 0.0, 0.0]  # KerasMomentum: lr, momentum, nesterov, slot init


def test_slot_reads_and_writes_carry_the_optimizer_state_to_a_fresh_store():
    """A store trained 3 momentum steps; its slots are read (the optimizer's code, then
    each slot), and written into a fresh store after its value: both continue alike, and
    as NumPy's momentum from the read velocity."""
    source = ps_testing.KeyStore()
    source.init(5, 0, f32(1, 2))
    for _ in range(3):
        source.apply(5, 0, f32(1, 3), KERAS_MOMENTUM, MOMENTUM_PARAMS)
    (held,) = source.params()
    codes = as_f32(source.slot(5, 0, f32(0, 0), -1))
    velocity = as_f32(source.slot(5, 0, f32(0, 0), 0))
    assert codes.tolist() == [KERAS_MOMENTUM] * 2
    assert velocity.tobytes() == held["slots"][0]
    assert as_f32(source.slot(5, 0, f32(0, 0), 1)).tolist() == [0, 0]  # no such slot
    assert source.params() == [held]  # reads change nothing

    fresh = ps_testing.KeyStore()
    value = as_f32(held["value"])
    fresh.init(5, 0, value.copy())
    assert as_f32(fresh.slot(5, 0, f32(0, 0), -1)).tolist() == [0, 0]  # never updated
    fresh.slot(5, 0, codes, -1, write=True)
    (made,) = fresh.params()
    assert (made["optimizer"], made["slots"]) == (KERAS_MOMENTUM, [bytes(8)])
    fresh.slot(5, 0, velocity, 0, write=True)
    fresh.slot(5, 0, f32(9, 9), 1, write=True)  # a slot it lacks: ignored
    (made,) = fresh.params()
    assert made["slots"] == held["slots"] and made["value"] == held["value"]
    grad = f32(2, -1)
    a = as_f32(source.apply(5, 0, grad, KERAS_MOMENTUM, MOMENTUM_PARAMS))
    b = as_f32(fresh.apply(5, 0, grad, KERAS_MOMENTUM, MOMENTUM_PARAMS))
    assert a.tobytes() == b.tobytes()
    # Keras momentum: v = m*v - lr*g; w += v
    expected = value + (np.float32(0.9) * velocity - np.float32(0.1) * grad)
    np.testing.assert_allclose(b, expected, rtol=1e-6)


def test_slot_pushes_name_what_is_wrong():
    store = ps_testing.KeyStore()
    with pytest.raises(RuntimeError, match="never initialised on this server"):
        store.slot(7, 0, f32(0), 0)
    store.init(7, 0, f32(1))
    with pytest.raises(RuntimeError, match="slot index 99"):
        store.slot(7, 0, f32(0), 99)
    with pytest.raises(RuntimeError, match="optimizer code 42"):
        store.slot(7, 0, f32(42), -1, write=True)
    store.slot(7, 0, f32(0), -1, write=True)  # code 0: no optimizer yet, no slots
    assert store.params()[0]["optimizer"] == 0 and store.params()[0]["slots"] == []


def test_the_slot_flag_is_only_valid_on_an_init_push_with_its_index():
    fields = dict(type=core.MSG_TYPES["PUSH_PULL"], key=1, partition=0, num_partitions=1, step=1,
                  dtype=F32, sender=0, count=2, total_count=2)
    slot = core.FLAG_PS_INIT | core.FLAG_PS_SLOT
    assert core.decode_head(core.encode_head(dict(fields, flags=slot), [2], [0.0]), 8)[0] is None
    bad = core.encode_head(dict(fields, flags=core.FLAG_PS_SLOT), [2], [0.0])
    assert "slot flag is only valid on a PS init push" in core.decode_head(bad, 8)[0]
    bare = core.encode_head(dict(fields, flags=slot), [2])
    assert "parameters only as a slot push" in core.decode_head(bare, 8)[0]
