"""TFPS_SHM_SERVER=0 against =1 (worker <-> colocated server through shared memory),
interleaved: push_pull_bench.py on 2 hosts at 10 Gbit/s (one server and one worker per
host, BytePS's colocated layout), once per setting per repeat, then the medians.

    python3 benchmarks/shm_server_ab.py [--repeats 3] [--sizes 16777216,67108864]

Writes results/shm_server_ab.md and keeps each run's results/shm_server_<v>_<repeat>.*.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="16777216,67108864")
    parser.add_argument("--rate", default="10gbit")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    rows = []
    for repeat in range(args.repeats):
        for value in (0, 1):
            out = f"shm_server_{value}_{repeat}"
            subprocess.run([sys.executable, HERE / "push_pull_bench.py", "--hosts", "2",
                            "--rates", args.rate, "--sizes", args.sizes, "--repeats", "1",
                            "--target-seconds", "1", "--max-other", "0",
                            "--env", f"TFPS_SHM_SERVER={value}", "--out", out],
                           check=True, stdout=subprocess.DEVNULL)
            data = json.loads((HERE / "results" / f"{out}.json").read_text())
            rows.append((value, data))
    lines = ["# Worker <-> colocated server: loopback TCP against shared memory\n",
             f"Command: `python3 benchmarks/shm_server_ab.py {' '.join(sys.argv[1:])}` "
             f"({started} UTC, {args.repeats} repeat(s), TFPS_SHM_SERVER=0 and =1 interleaved; "
             f"each run is `push_pull_bench.py --hosts 2 --rates {args.rate} --repeats 1 "
             f"--max-other 0 --env TFPS_SHM_SERVER=<v>`, kept as `shm_server_<v>_<repeat>.*`). "
             "2 hosts, one ps_server and one worker each. Medians over repeats. CPU: worker + "
             "server CPU-s per push_pull on rank 0's host (server CPU from /proc ticks: coarse).\n",
             "| size | TCP ms | shm ms | TCP busbw/link | shm busbw/link | TCP CPU-s/host | "
             "shm CPU-s/host | CPU ratio |", "|---|---|---|---|---|---|---|---|"]
    for nbytes in map(int, args.sizes.split(",")):
        med = {}
        for value in (0, 1):
            got = [r for v, data in rows if v == value for r in data["rows"]
                   if r["bytes"] == nbytes]
            med[value] = {
                "ms": 1000 * statistics.median(r["time_s"] for r in got),
                "link": statistics.median(r["busbw_over_link"] for r in got),
                "cpu": statistics.median(r["worker_cpu_s_per_iter"] + r["server_cpu_s_per_iter"]
                                         for r in got)}
        lines.append(f"| {nbytes >> 20} MB | {med[0]['ms']:.1f} | {med[1]['ms']:.1f} | "
                     f"{100 * med[0]['link']:.1f}% | {100 * med[1]['link']:.1f}% | "
                     f"{med[0]['cpu']:.4f} | {med[1]['cpu']:.4f} | "
                     f"{med[1]['cpu'] / med[0]['cpu']:.2f} |")
    (HERE / "results" / "shm_server_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
