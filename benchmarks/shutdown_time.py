"""How long each worker's shutdown() takes when a job's workers shut down together, with
the peer mesh connected (core workers, one host): a close that waits out the sockets'
linger (2 s) shows up as a shutdown of about 2 s.

    python benchmarks/shutdown_time.py [--workers 8] [--runs 8]

Prints every worker's shutdown time per run and the count of those over 1.9 s. Not
asserted anywhere: the machine is shared."""

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from ps_cluster import PS_SERVER  # noqa: E402
from scale import ENV  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = REPO / "benchmarks" / "shutdown_worker.py"


def one_run(workers):
    with tempfile.TemporaryDirectory() as workdir:
        cluster = LoggedCluster(PS_SERVER, workdir, workers, 1, timeout=300, env=ENV, cwd=REPO)
        try:
            cluster.start([sys.executable, str(WORKER)])
            cluster.wait()
            failed = cluster.failures()
            if failed:
                raise RuntimeError("\n".join(r.describe() for r in failed[:3]))
            return [float(re.search(r"shutdown ([\d.]+)", cluster.result("worker", r).stdout)
                          .group(1)) for r in range(workers)]
        finally:
            cluster.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args()
    slow = 0
    for run in range(args.runs):
        times = one_run(args.workers)
        slow += sum(t > 1.9 for t in times)
        print(f"run {run}: " + " ".join(f"{t:.2f}" for t in times), flush=True)
    print(f"{slow} of {args.runs * args.workers} shutdowns took over 1.9 s")


if __name__ == "__main__":
    main()
