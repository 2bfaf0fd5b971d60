"""Loopback push_pull throughput with and without the job key (CURVE), one worker and one
server: python3 benchmarks/auth_loopback.py (after `make build`). Rough on a shared machine."""
import os, pathlib, subprocess, sys, tempfile
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "multiprocess")]
from hostile import Job
from test_auth import make_key, keyed_env
BENCH = r'''
import sys, time, numpy as np
sys.path.insert(0, sys.argv[1])
from native import init_from_env, load_core
core = load_core(); init_from_env(core)
x = np.ones(4 << 20, np.float32)  # 16 MiB
core.push_pull("b", x)
t = time.perf_counter(); n = 20
for _ in range(n): core.push_pull("b", x)
dt = time.perf_counter() - t
print(f"{n * x.nbytes * 2 / dt / 1e9 * 8:.2f} Gbit/s (push+pull) {dt / n * 1e3:.1f} ms per 16 MiB push_pull")
core.shutdown()
'''
for keyed in (False, True):
    tmp = pathlib.Path(tempfile.mkdtemp())
    env = keyed_env(make_key(tmp)) if keyed else {"TFPS_BIND": "127.0.0.1"}
    job = Job(tmp, env=env)
    try:
        wenv = dict(os.environ, TFPS_SCHEDULER=f"127.0.0.1:{job.scheduler_port}", TFPS_RANK="0",
                    TFPS_SIZE="1", TFPS_NUM_SERVERS="1", **env)
        out = subprocess.run([sys.executable, "-c", BENCH, str(REPO / "tests")], env=wenv, capture_output=True, text=True, timeout=300)
        print("keyed" if keyed else "plain", out.stdout.strip(), out.stderr.strip()[-300:])
    finally:
        job.close()
