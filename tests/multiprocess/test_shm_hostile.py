"""A hostile worker on the server's host (TFPS_SHM_SERVER): it sets up its shared-memory
segment as a worker does, lets the server map it, then shrinks it (ftruncate) and pushes.
The server must not die of SIGBUS: the push fails with an error naming the worker, and
the server goes on answering correct sums. The test plays the workers over raw sockets
against a real scheduler and ps_server (tests/multiprocess/hostile.py)."""

import os
import struct

import numpy as np

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


def make_segment(token, data):
    """The segment a worker creates for partition 0 of "g", filled with `data`."""
    fd = os.open(segment_name(token), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, DATA + data.nbytes)
    header = struct.pack("<QQIii", MAGIC, data.nbytes, F32, os.getpid(), -1)
    os.pwrite(fd, header, 0)
    os.pwrite(fd, data.tobytes(), DATA)
    return fd


def hello_shm(job, address, rank):
    sock = job.socket(__import__("zmq").DEALER, b"w%d" % rank)
    sock.connect("tcp://" + address)
    sock.send_multipart([core.encode_head(dict(type=T["HELLO"], sender=rank)), b"shm"])
    fields, offer = reply(sock)
    assert fields["type"] == T["HELLO_REPLY"] and offer.startswith(b"shm="), offer
    return sock, offer[4:].decode().split(" probe=")[0]


def test_a_worker_that_shrinks_its_segment_fails_its_push_not_the_server(tmp_path):
    job = Job(tmp_path, num_workers=2, env={"TFPS_TIMEOUT": "20", "TFPS_SHM_SERVER": "1"})
    fd = None
    try:
        address = job.register_workers(2)
        plain = job.connect_worker(address, 0)
        hostile, token = hello_shm(job, address, 1)
        a = np.arange(1024, dtype=np.float32)
        b = np.full(1024, 0.5, np.float32)
        fd = make_segment(token, b)
        # Step 1 as a worker does it: the server maps the segment and sums out of it.
        hostile.send_multipart(push(1, b, 1, shm=True))
        plain.send_multipart(push(0, a, 1))
        fields, payload = reply(plain, job.server)
        assert fields["type"] == T["PUSH_PULL_REPLY"], payload
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), a + b)
        fields, _ = reply(hostile, job.server)
        assert fields["type"] == T["PUSH_PULL_REPLY_SHM"], fields
        np.testing.assert_array_equal(
            np.frombuffer(os.pread(fd, a.nbytes, DATA), np.float32), a + b)
        # Step 2: it shrinks the segment under the server's mapping, then pushes.
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass  # sealed: the kernel refuses, which is the point
        plain.send_multipart(push(0, a, 2))  # first: the hostile push completes the round
        hostile.send_multipart(push(1, b, 2, shm=True))
        fields, payload = reply(hostile, job.server)
        assert job.server.poll() is None, job.server_log_text()  # alive
        if fields["type"] != T["ERROR"]:  # the shrink was refused: an ordinary answer
            assert fields["type"] == T["PUSH_PULL_REPLY_SHM"], fields
        else:
            assert b"worker 1" in payload or b"rank 1" in payload, payload
            # The push failed alone: its round goes on with a push over the socket.
            hostile.send_multipart(push(1, b, 2))
        fields, payload = reply(plain, job.server)
        assert fields["type"] == T["PUSH_PULL_REPLY"], payload
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), a + b)
        assert job.server.poll() is None, job.server_log_text()
    finally:
        if fd is not None:
            os.close(fd)
        if os.path.exists(segment_name(token)):
            os.unlink(segment_name(token))
        job.close()
