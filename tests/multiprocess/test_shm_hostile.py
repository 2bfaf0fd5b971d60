"""A hostile worker on the server's host (TFPS_SHM_SERVER): it sets up its shared-memory
segment as a worker does, lets the server map it, then shrinks it (ftruncate) and pushes.
The server must not die of SIGBUS: the push fails with an error naming the worker, and
the server goes on answering correct sums. The test plays the workers over raw sockets
against a real scheduler and ps_server (tests/multiprocess/hostile.py)."""

import fcntl
import os
import struct

import numpy as np
import pytest

from hostile import Job, T, core

F32 = core.wire_dtype(np.dtype(np.float32))
MAGIC = 0x31424D4853535046  # kShmMagic
DATA = 512                  # kShmDataOffset


def push(sender, data, step, shm=False):
    fields = dict(type=T["PUSH_PULL_SHM" if shm else "PUSH_PULL"], key=core.key_of_name("g"),
                  partition=0, num_partitions=1, step=step, dtype=F32, sender=sender,
                  count=data.size, total_count=data.size)
    return [core.encode_head(fields, [data.size]), b"" if shm else data.tobytes()]


def reply(sock, server=None, timeout_ms=20000):
    for _ in range(timeout_ms // 100):
        if sock.poll(100):
            break
        assert server is None or server.poll() is None, f"the server died: {server.returncode}"
    else:
        raise AssertionError("no answer")
    head, payload = sock.recv_multipart()
    err, fields = core.decode_head(head, len(payload))
    assert err is None, err
    return fields, payload


def segment_name(token):
    return "/dev/shm/tfps-p%s-%016x-0" % (token, core.key_of_name("g"))


def make_segment(token, data, kind):
    """Partition 0 of "g" in shared memory, filled with `data`: "sealed" as a worker makes
    it (a memfd sealed against shrinking and growing, its name pointing at it), "unsealed"
    the same without the seals, "plain" the data in /dev/shm itself (the format before
    sealing), "pipe" a pointer at a pipe this process holds (the server must not open it
    for real). Returns the fd of the bytes."""
    header = struct.pack("<QQIii", MAGIC, data.nbytes, F32, os.getpid(), -1)
    name = os.open(segment_name(token), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    if kind == "pipe":
        fd, w = os.pipe()
        os.close(w)
        os.write(name, b"tfps-memfd %d %d %d\n" % (os.getpid(), fd, os.fstat(fd).st_ino))
        os.close(name)
        return fd
    fd = name if kind == "plain" else os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, DATA + data.nbytes)
    os.pwrite(fd, header, 0)
    os.pwrite(fd, data.tobytes(), DATA)
    if kind != "plain":
        if kind == "sealed":
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        os.write(name, b"tfps-memfd %d %d %d\n" % (os.getpid(), fd, os.fstat(fd).st_ino))
        os.close(name)
    return fd


def hello_shm(job, address, rank):
    sock = job.socket(__import__("zmq").DEALER, b"w%d" % rank)
    sock.connect("tcp://" + address)
    sock.send_multipart([core.encode_head(dict(type=T["HELLO"], sender=rank)), b"shm"])
    fields, offer = reply(sock)
    assert fields["type"] == T["HELLO_REPLY"] and offer.startswith(b"shm="), offer
    return sock, offer[4:].decode().split(" probe=")[0]


@pytest.mark.parametrize("kind", ["sealed", "unsealed", "plain", "pipe"])
def test_a_worker_that_shrinks_its_segment_fails_its_push_not_the_server(tmp_path, kind):
    job = Job(tmp_path, num_workers=2, env={"TFPS_TIMEOUT": "20", "TFPS_SHM_SERVER": "1"})
    fd = None
    token = "0" * 32
    try:
        address = job.register_workers(2)
        plain = job.connect_worker(address, 0)
        hostile, token = hello_shm(job, address, 1)
        a = np.arange(1024, dtype=np.float32)
        b = np.full(1024, 0.5, np.float32)
        fd = make_segment(token, b, kind)
        for step in (1, 2):
            if step == 2 and kind != "pipe":  # it shrinks the segment, then pushes
                if kind == "sealed":
                    with pytest.raises(PermissionError):
                        os.ftruncate(fd, 0)
                else:
                    os.ftruncate(fd, 0)
            if kind == "sealed":
                os.pwrite(fd, b.tobytes(), DATA)  # as a worker writes each step's input
            plain.send_multipart(push(0, a, step))  # first: the shm push completes the round
            hostile.send_multipart(push(1, b, step, shm=True))
            fields, payload = reply(hostile, job.server)
            if kind == "sealed":  # mapped, summed in place, answered in the segment
                assert fields["type"] == T["PUSH_PULL_REPLY_SHM"], payload
                np.testing.assert_array_equal(
                    np.frombuffer(os.pread(fd, a.nbytes, DATA), np.float32), a + b)
            else:  # never mapped: refused at once, naming the worker; nothing counted
                assert fields["type"] == T["ERROR"], fields
                assert fields["flags"] & core.FLAG_SHM_REFUSED, fields
                assert b"refused the shared memory of worker 1" in payload, payload
                if step == 1 or kind == "unsealed":  # a plain file shrunk to 0 is no segment
                    assert b"refusing it" in payload, payload
                    assert {"unsealed": b"not sealed", "plain": b"holds",
                            "pipe": b"not a regular file"}[kind] in payload, payload
                hostile.send_multipart(push(1, b, step))  # the round goes on over the socket
                fields, payload = reply(hostile, job.server)
                assert fields["type"] == T["PUSH_PULL_REPLY"], payload
                np.testing.assert_array_equal(np.frombuffer(payload, np.float32), a + b)
            fields, payload = reply(plain, job.server)
            assert fields["type"] == T["PUSH_PULL_REPLY"], payload
            np.testing.assert_array_equal(np.frombuffer(payload, np.float32), a + b)
        assert job.server.poll() is None, job.server_log_text()  # alive
    finally:
        if fd is not None:
            os.close(fd)
        if os.path.exists(segment_name(token)):
            os.unlink(segment_name(token))
        job.close()
