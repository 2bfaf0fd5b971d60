"""Raw TCP throughput between two emulated hosts: what one stream of 4 MiB sends gets
through a link, the ceiling push_pull is compared with (TCP/IP headers take ~4.5% of a
1500-byte frame, so tbf 1gbit carries ~0.957 Gbit/s of payload).

    tcp_probe.py serve ADDRESS PORT_FILE     # inside the receiving host; prints JSON
    tcp_probe.py send ADDRESS:PORT SECONDS   # inside the sending host
"""

import json
import os
import resource
import socket
import sys
import time

CHUNK = 4 << 20


def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve(address, port_file):
    listener = socket.create_server((address, 0))
    listener.settimeout(30)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % listener.getsockname()[1])
    os.rename(tmp, port_file)
    conn, _ = listener.accept()
    conn.settimeout(60)
    buffer = bytearray(CHUNK)
    received, first = 0, None
    while True:
        n = conn.recv_into(buffer)
        if n == 0:
            break
        if first is None:
            first = time.perf_counter()
        received += n
    seconds = time.perf_counter() - first
    print(json.dumps({"bytes": received, "seconds": seconds,
                      "gbit_s": received * 8 / seconds / 1e9,
                      "receiver_cpu_s_per_gb": cpu_s() / received * 1e9}))


def send(target, seconds):
    host, port = target.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=30)
    payload = bytes(CHUNK)
    end = time.perf_counter() + float(seconds)
    sent = 0
    while time.perf_counter() < end:
        conn.sendall(payload)
        sent += len(payload)
    conn.close()
    print(json.dumps({"sent": sent, "sender_cpu_s_per_gb": cpu_s() / sent * 1e9}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
