"""Horovod's Gloo rendezvous for benchmarks/train_bench.py, started inside host 0.

    python3 benchmarks/train_worker_horovod.py --rendezvous --port P --hosts A0,A1

`horovodrun` would start this HTTP key-value store in the launching process, which the
emulated hosts cannot reach (they reach only each other). So it runs as a process of its
own on host 0, at a port the driver chose, with one slot per host; the workers get what
horovodrun would set (HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, HOROVOD_RANK, ... see
train_config.py) and run train_worker.py --mode horovod. It serves until the driver ends it.
"""

import argparse
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rendezvous", action="store_true", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", required=True, help="comma-separated addresses, 1 slot each")
    args = parser.parse_args()
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    hosts = args.hosts.split(",")
    plan = get_host_assignments(parse_hosts(",".join(h + ":1" for h in hosts)), len(hosts))
    server = RendezvousHTTPServer(("0.0.0.0", args.port), RendezvousHandler, 0)
    server.init(plan)
    print("RENDEZVOUS_READY %d" % args.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
