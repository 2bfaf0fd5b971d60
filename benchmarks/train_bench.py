"""Training throughput on emulated hosts: tf_ps_ops' modes against TensorFlow's own
strategies and Horovod, side by side in one run (see benchmarks/TRAINING.md).

    python3 benchmarks/train_bench.py            # full: mlp + cnn, 1 and 10 Gbit/s (~20 min)
    python3 benchmarks/train_bench.py --quick    # smoke: tiny mlp, 1 Gbit/s, 2 steps (~2 min)
    python3 benchmarks/train_bench.py --quick --modes single,sum --models tiny_mlp

Two hosts (network namespaces on a bridge, tbf on each link; benchmarks/netns.py), one
worker per host, batch 32 per worker, 1 TF thread per process. For each link rate, model
and mode: start the processes (a tf_ps_ops cluster puts the scheduler on host 0 and a
ps_server on every host; benchmarks/ps_cluster.py), warm up, time --steps steps, report
the median. The single-process baseline runs on host 0 in the same sweep, per rate.

Every process has a deadline and its exit code is checked; a failed configuration prints
the stderr of its processes and the run goes on (the row says "failed"). CPU used by
other processes during each timed window is recorded; a window where they used more than
--other-limit cores is run again (--retries), keeping the cleanest.

Writes benchmarks/results/train_<tag>.json, .md and _throughput.png (tag: quick or full,
or --tag).

This file is the command line and the sweep; the modes and models are in train_modes.py,
one configuration's processes in train_config.py, the CPU accounting in machine_load.py,
the rows and the report in train_report.py, and each process is train_worker.py.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine_load import (MIN_WINDOW_S, clean, machine_busy_s, own_cpu_s,  # noqa: E402
                          wait_for_idle)
from netns import Hosts, available  # noqa: E402
from train_config import HOROVOD_PATH, Config, child_env, horovod_env  # noqa: E402
from train_modes import ALL_MODES, STEPS, applies, tune_env  # noqa: E402
from train_report import (combine, derive, ordered, summarize, table,  # noqa: E402
                          write_report)
import zoo_models  # noqa: E402

RESULTS = HERE / "results"


def horovod_status():
    """(True, version) if horovod.tensorflow imports with its TF ops, else (False, why)."""
    code = ("import horovod, horovod.tensorflow as h; h.init; "
            "from horovod.tensorflow import mpi_ops; print(horovod.__version__)")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=120, env=horovod_env())
    except subprocess.TimeoutExpired:
        return False, "importing horovod.tensorflow timed out"
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return False, lines[-1] if lines else "exit code %d" % result.returncode
    return True, result.stdout.strip()


def run_one(args, hosts, rate, model, mode, workdir, port):
    """Runs a configuration, again while others load the machine; the cleanest row."""
    best = None
    for attempt in range(1 + args.retries):
        idle = wait_for_idle(args.other_limit, args.idle_patience) if args.idle_patience \
            else None
        config = Config(args, hosts, rate, model, mode,
                        Path(workdir) / ("%s-%s-%s-%d" % (rate, model, mode, attempt)),
                        port + 10 * attempt)
        busy0, ours0, t0 = machine_busy_s(), own_cpu_s(), time.monotonic()
        try:
            row = summarize(config.run())
            row["status"] = "ok"
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            print("  FAILED %s %s %s:\n%s" % (rate, model, mode, e), flush=True)
            return dict(status="failed", error=str(e)[-3000:], attempt=attempt)
        wall = time.monotonic() - t0
        row.update(attempt=attempt, wall_s=round(wall, 1), idle_before=idle,
                   other_cores_run=max(0.0, machine_busy_s() - busy0 - (own_cpu_s() - ours0))
                   / wall)
        row["judged"] = row["window_s"] >= MIN_WINDOW_S
        if not row["judged"]:
            row["other_cores"] = 0.0 if row["other_cores"] is None else row["other_cores"]
        if best is None or row["other_cores"] < best["other_cores"]:
            best = row
        print("  %-8s %-6s %-8s step %.3f s  %7.1f samples/s  cpu %.2f s/step  "
              "others %.2f cores%s" % (rate, model, mode, row["step_s"], row["samples_s"],
                                       row["cpu_per_step"], row["other_cores"],
                                       "" if clean(row, args) else "  (contaminated)"),
              flush=True)
        if clean(row, args):
            break
    if not clean(best, args):
        best["status"] = "contaminated"
    return best


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: tiny mlp, 1gbit, 1 warm-up + 2 timed steps")
    parser.add_argument("--rates", default=None, help="default 1gbit,10gbit (quick: 1gbit)")
    parser.add_argument("--models", default=None, help="default mlp,cnn (quick: tiny_mlp)")
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=None,
                        help="per worker; default 32, zoo models their own (zoo_models.py)")
    parser.add_argument("--warmup", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps; default mlp 12, cnn 40 (quick: 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs of every configuration, interleaved; the median is "
                             "reported (default 3, quick 1)")
    parser.add_argument("--order", choices=("shuffled", "fixed"), default="shuffled",
                        help="the modes' order within each repeat: one shuffled order "
                             "rotated by a place per repeat (default), or as --modes lists "
                             "them")
    parser.add_argument("--seed", default="0", help="the shuffle's seed")
    parser.add_argument("--retries", type=int, default=None,
                        help="reruns of a configuration others disturbed (default 2, quick 0)")
    parser.add_argument("--other-limit", type=float, default=0.15,
                        help="cores other processes may use during a timed window")
    parser.add_argument("--idle-patience", type=float, default=None,
                        help="seconds to wait for an idle machine before each "
                             "configuration (default 120, quick 0: no wait)")
    parser.add_argument("--startup-timeout", type=float, default=120,
                        help="seconds allowed for starting the processes of a configuration")
    parser.add_argument("--timeline", default=None,
                        help="folder for TFPS_TIMELINE Chrome traces of the tf_ps_ops modes")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment of the tf_ps_ops processes (repeatable), e.g. "
                             "--env TFPS_SCHEDULING_CREDIT=4194304")
    parser.add_argument("--predict", action="store_true",
                        help="tf_ps_ops modes: the workers measure the cost model's inputs "
                             "before training; the table gains the predicted step "
                             "(predict_step) and its error against the measured one")
    parser.add_argument("--tag", default=None, help="results file tag (default quick/full)")
    parser.add_argument("--worker-arg", action="append", default=[],
                        help="extra argument for train_worker.py (repeatable), e.g. "
                             "--worker-arg=--pss-placement=roundrobin")
    parser.add_argument("--results-dir", default=str(RESULTS),
                        help="where train_<tag>.json/.md/_throughput.png go")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--report", metavar="JSON", default=None,
                        help="only rewrite the .md and .png of an earlier run's JSON")
    parser.add_argument("--repredict", action="store_true",
                        help="with --report: predict every row again with the current cost "
                             "model, from the inputs the run measured (and rewrite the JSON)")
    parser.add_argument("--horovod-path", default=os.environ.get("TRAIN_BENCH_HOROVOD_PATH"),
                        help="folder with a Horovod built for this TensorFlow (prepended to "
                             "PYTHONPATH of the Horovod processes; default "
                             "$TRAIN_BENCH_HOROVOD_PATH, else the installed one)")
    parser.add_argument("--model-modes", default=None, metavar="MODEL=MODE+MODE;...",
                        help="restrict some models to these modes, e.g. "
                             "'bert=single+sum+mwms;dlrm=single+sum+ps+mwms+pss'")
    return parser


def main():
    parser = make_parser()
    args = parser.parse_args()
    args.model_modes = {name: modes.split("+") for name, modes in (
        item.split("=", 1) for item in args.model_modes.split(";"))} \
        if args.model_modes else None
    try:
        args.tfps_env = dict(item.split("=", 1) for item in args.env)
    except ValueError:
        parser.error("--env takes NAME=VALUE")
    q = args.quick
    args.rates = (args.rates or ("1gbit" if q else "1gbit,10gbit")).split(",")
    args.models = (args.models or ("tiny_mlp" if q else "mlp,cnn")).split(",")
    args.modes = args.modes.split(",")
    if q and args.steps is None:
        args.steps = 2
    for name, quick, full in (("warmup", 1, 3), ("retries", 0, 2), ("repeats", 1, 3),
                              ("idle_patience", 0, 120)):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        if args.repredict:
            derive(saved["rows"], saved["meta"]["workers"])
        paths = write_report(Path(args.report).parent, saved["meta"]["tag"], saved["meta"],
                             saved["rows"])
        print("rewrote", ", ".join(str(p) for p in paths[1:]))
        return 0
    args.tag = args.tag or ("quick" if q else "full")
    unknown = set(args.modes) - set(ALL_MODES)
    if unknown:
        parser.error("unknown modes %s (choose from %s)" % (sorted(unknown), ALL_MODES))
    if args.horovod_path:
        HOROVOD_PATH.append(str(Path(args.horovod_path).resolve()))
    ok, why = available()
    if not ok:
        sys.exit("train_bench needs network namespaces: " + why)
    return sweep(args)


def mode_order(args, model, repeat):
    """The modes that apply to `model`, in the order repeat `repeat` runs them: --modes'
    order with --order fixed; else one order shuffled with --seed, rotated by one place
    per repeat, so that each mode runs at another point of every repeat (the same again
    when the sweep is rerun)."""
    modes = [mode for mode in args.modes if applies(model, mode, args.model_modes)]
    if args.order == "shuffled" and modes:
        random.Random("%s/%s" % (args.seed, model)).shuffle(modes)
        shift = repeat % len(modes)
        modes = modes[shift:] + modes[:shift]
    return modes


def sweep(args):
    started, t_start = datetime.datetime.now().astimezone(), time.monotonic()
    load_before = os.getloadavg()
    hvd_ok, hvd_info = horovod_status() if "horovod" in args.modes else (False, "not run")
    steps = args.steps or {m: STEPS[m] for m in args.models}
    batch = {m: args.batch or zoo_models.BATCH.get(m, 32) for m in args.models}
    batch = batch[args.models[0]] if len(set(batch.values())) == 1 else batch
    print("train_bench %s: rates %s, models %s, modes %s, %d workers, batch %s, %d warm-up "
          "steps, timed steps %s" % (args.tag, args.rates, args.models, args.modes,
                                     args.workers, batch, args.warmup, steps), flush=True)
    if "horovod" in args.modes:
        print("horovod: %s" % (hvd_info if hvd_ok else "unavailable (%s)" % hvd_info))
    workdir = Path(tempfile.mkdtemp(prefix="train_bench-"))
    runs, port = {}, 21000  # (rate, model, mode) -> [row of each repeat]
    try:
        for rate in args.rates:
            with Hosts(args.workers, rate=rate) as hosts:
                # Repeats interleave (every mode once, then again), so that a slow drift of
                # the machine hits every mode alike; the order rotates between repeats
                # (mode_order), so that no mode always runs first or last.
                for repeat in range(args.repeats):
                    for model in args.models:
                        for mode in mode_order(args, model, repeat):
                            key = (rate, model, mode)
                            if mode == "horovod" and not hvd_ok:
                                runs[key] = [dict(status="unavailable", error=hvd_info)]
                                continue
                            started_s = time.monotonic() - t_start
                            runs.setdefault(key, []).append(run_one(
                                args, hosts, rate, model, mode,
                                workdir / ("r%d" % repeat), port))
                            runs[key][-1]["started_s"] = round(started_s, 1)
                            port += 100
    finally:
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("logs kept in", workdir)
    rows = ordered([combine(key, found, args.workers) for key, found in runs.items()])
    derive(rows, args.workers)
    meta = dict(repeats=args.repeats, order=args.order, seed=args.seed, tag=args.tag,
                tune_env=tune_env(args.tfps_env),
                started=started.isoformat(timespec="seconds"),
                duration_s=round(time.monotonic() - t_start, 1),
                command="python3 benchmarks/train_bench.py " + " ".join(sys.argv[1:]),
                machine=dict(cpus=os.cpu_count(), platform=platform.platform(),
                             python=platform.python_version()),
                loadavg_before=load_before, loadavg_after=os.getloadavg(),
                workers=args.workers, batch=batch, warmup=args.warmup, steps=steps,
                other_limit=args.other_limit, horovod=hvd_info if hvd_ok else
                "unavailable: " + hvd_info, versions=versions())
    paths = write_report(Path(args.results_dir), args.tag, meta, rows)
    print(table(rows))
    print("wrote %s; the run took %.0f s" % (", ".join(str(p) for p in paths),
                                             meta["duration_s"]))
    failed = [r for r in rows if r["status"] == "failed"]
    return 1 if failed else 0


def versions():
    code = "import tensorflow as tf, keras; print(tf.__version__, keras.__version__)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, env=child_env()).stdout.split()
        return dict(tensorflow=out[0], keras=out[1])
    except (subprocess.SubprocessError, IndexError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
