"""The automatic plan against the hand-picked modes, interleaved in one job: every arm
(tf_ps_ops mode) of a model trains side by side on the emulated hosts, in alternating
blocks of a few steps (benchmarks/interleaved_worker.py), and the plan's block is paired
with each other arm's block of the same round.

    python3 benchmarks/interleaved.py --hosts 2 --rates 10gbit --models mobilenetv2
    python3 benchmarks/interleaved.py --smoke --results-dir /tmp/il     # toy sizes (~2 min)

Why: separate runs of two modes (train_bench.py, zoo.py) run minutes apart, and on these
shared 2-core machines a run's step drifts 10-25% between runs, so a "within 5%" verdict
takes some 25 repeats of each. Blocks of one round run seconds apart.

Per (link, model): one tf_ps_ops cluster (benchmarks/ps_cluster.py: scheduler on host 0,
a ps_server and a worker on every host), every arm built and warmed up, then --rounds
rounds. A block's step is the slowest worker's mean step over the block. Per arm: the
median block step, its CPU per host (worker and its ps_server), and against the plan
(`auto`): the geometric mean of plan ÷ arm over the rounds with one-sided 95% bounds from
a t-interval on the log ratios (zoo.paired_bounds), and the verdict (zoo.verdict: "yes"
when every upper bound is at most 1.05). Each arm's weights after the run are set beside
summation's (Σ|w| on rank 0): all arms start from one seed and see the same data, so an
exact arm ends where summation does, up to rounding, which a deep model trained on one
fixed batch can amplify over hundreds of steps (the table says how far apart they are).

--predict: the workers measure the cost model's inputs once, as plan="auto" does, and
each arm's choice per layer; every round gets one more block, rank 0's lone local step
(the others wait), and each arm's step is predicted from its median
(train_report.predict_step, the code train_bench.py --predict uses) beside the measured
median: the model checked against steps measured seconds apart, not minutes.

Writes results/interleaved_<tag>.json and .md.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine_load import wait_for_idle  # noqa: E402
from netns import Hosts, available  # noqa: E402
from ps_cluster import ClusterError, NetnsCluster  # noqa: E402
from train_config import CHILD_ENV, parse_results  # noqa: E402
from train_modes import PARAMS_GUESS, t_opt  # noqa: E402
from train_report import predict_step  # noqa: E402
from zoo import paired_bounds, verdict  # noqa: E402
import zoo_models  # noqa: E402

RESULTS = HERE / "results"
WORKER = HERE / "interleaved_worker.py"
PLAN = "auto"
# Timed steps per block: a few seconds of steps, short against the machine's drift.
BLOCK = {"resnet50": 6, "mobilenetv2": 12, "bert": 8, "dlrm": 150}
SINGLE = "single"  # --predict: the lone local step's blocks (rank 0's)
SAME_WEIGHTS = 1e-4  # relative difference of |weights| sums an exact arm stays within


def block_steps(blocks_by_rank, arm):
    """[the slowest worker's step of each round's block of `arm`]."""
    per_rank = [blocks[arm] for blocks in blocks_by_rank]
    return [max(b[i]["step_s"] for b in per_rank) for i in range(len(per_rank[0]))]


def host_cpu(blocks_by_rank, arm):
    """(CPU s per step and host, the worker's, its ps_server's): medians over the rounds
    of the hosts' mean."""
    per_rank = [blocks[arm] for blocks in blocks_by_rank]
    rounds = range(len(per_rank[0]))
    worker = [statistics.fmean(b[i]["cpu_s"] for b in per_rank) for i in rounds]
    server = [statistics.fmean(b[i]["server_cpu_s"] for b in per_rank) for i in rounds]
    total = [w + s for w, s in zip(worker, server)]
    return statistics.median(total), statistics.median(worker), statistics.median(server)


def summarize(results, rate, model):
    """One cell (link, model) from the workers' INTERLEAVED_RESULT dicts."""
    results = sorted(results, key=lambda r: r["rank"])
    blocks = [r["blocks"] for r in results]
    arms = results[0]["arms"]
    steps = {arm: block_steps(blocks, arm) for arm in arms}
    base = results[0]["weight_abs_sum"].get("sum")
    cell = dict(rate=rate, model=model, workers=len(results), batch=results[0]["batch"],
                block=results[0]["block"], rounds=results[0]["rounds"], arms={})
    for arm in arms:
        cpu = host_cpu(blocks, arm)
        apart = None if base is None else \
            abs(results[0]["weight_abs_sum"][arm] - base) / max(abs(base), 1e-12)
        cell["arms"][arm] = dict(
            round_step_s=steps[arm], step_s=statistics.median(steps[arm]),
            min_s=min(steps[arm]), max_s=max(steps[arm]),
            cpu_host_s=cpu[0], cpu_worker_s=cpu[1], cpu_server_s=cpu[2],
            layout=results[0].get("layout", {}).get(arm, {}),
            loss_last=results[0]["blocks"][arm][-1]["loss"],
            weights_vs_sum=apart,
            same_weights_as_sum=None if apart is None else apart <= SAME_WEIGHTS)
    single = results[0]["blocks"].get(SINGLE)  # --predict: rank 0's lone local step
    if single:
        lone = [b["step_s"] for b in single]
        cell["single"] = dict(round_step_s=lone, step_s=statistics.median(lone),
                              min_s=min(lone), max_s=max(lone),
                              cpu_s=statistics.median(b["cpu_s"] for b in single))
        predict(cell, results[0].get("plan_inputs") or {})
    for other in results[1:]:  # the plan's inputs are rank 0's on every worker
        other.pop("plan_inputs", None)
    cell["workers_results"] = results  # every block of every worker, to read again
    if PLAN in arms:
        bounds = {arm: paired_bounds({"repeat_step_s": steps[PLAN]},
                                     {"repeat_step_s": steps[arm]})
                  for arm in arms if arm != PLAN}
        cell["plan_vs"] = {arm: b and list(b) for arm, b in bounds.items()}
        cell["verdict"] = verdict(bounds)
    return cell


def predict(cell, plan_inputs):
    """Each arm's predicted step (train_report.predict_step) and its error, from the
    cost model's inputs rank 0 measured (plan_inputs: {arm: inputs}) and the cell's lone
    step."""
    for arm, a in cell["arms"].items():
        inputs = plan_inputs.get(arm)
        if inputs and inputs.get("choices"):
            a["predicted_s"] = predict_step(inputs, cell["single"]["step_s"], cell["batch"],
                                            cell["single"]["cpu_s"])
            a["predicted_error"] = a["predicted_s"] / a["step_s"] - 1


def repredict(path):
    """Predicts every arm of a saved --predict run again with the current cost model, from
    the inputs the run measured, and rewrites its JSON and table."""
    saved = json.loads(Path(path).read_text())
    for cell in saved["cells"]:
        if cell.get("single"):
            predict(cell, cell["workers_results"][0].get("plan_inputs") or {})
    meta = saved["meta"]
    meta["repredicted"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return write_report(Path(path).parent, meta["tag"], meta, saved["cells"])


def _layout(layout):
    if not layout:
        return "—"
    parts = ["%d variables" % layout["variables"]]
    if layout.get("ps"):
        parts.append("%d on PS" % layout["ps"])
    if layout.get("sfb"):
        parts.append("%d by SFB" % layout["sfb"])
    return ", ".join(parts)


def _weights(arm):
    """The arm's Σ|w| against summation's: the same to SAME_WEIGHTS, or how far apart."""
    if arm["same_weights_as_sum"] is None:
        return "—"
    if arm["same_weights_as_sum"]:
        return "same"
    return "**%.1e apart**" % arm["weights_vs_sum"]


def table(cells):
    lines = ["| link | model | arm | step s (median of rounds) | min–max | CPU s/step per host "
             "(worker, server) | layout | plan ÷ arm [95% bounds] | predicted s (error) | "
             "last loss (rank 0) | weights' Σ|w| vs sum's |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        lone = cell.get("single")
        if lone:
            lines.append("| %s | %s | single process (rank 0 alone) | %.3f | %.3f–%.3f | "
                         "%.3f (%.3f, 0) | — | — | — | — | — |" % (
                             cell["rate"], cell["model"], lone["step_s"], lone["min_s"],
                             lone["max_s"], lone["cpu_s"], lone["cpu_s"]))
        for arm, a in cell["arms"].items():
            b = cell.get("plan_vs", {}).get(arm)
            row = "| %s | %s | %s | %.3f | %.3f–%.3f | %.3f (%.3f, %.3f) | %s | %s | %s | " \
                "%.4g | %s |"
            lines.append(row % (
                cell["rate"], cell["model"], arm, a["step_s"], a["min_s"], a["max_s"],
                a["cpu_host_s"], a["cpu_worker_s"], a["cpu_server_s"], _layout(a["layout"]),
                "%.3f [%.3f, %.3f] n=%d" % tuple(b) if b else "—",
                "%.3f (%+.0f%%)" % (a["predicted_s"], 100 * a["predicted_error"])
                if "predicted_s" in a else "—", a["loss_last"], _weights(a)))
    lines += ["", "| link | model | within 5% of every arm? |", "|---|---|---|"]
    lines += ["| %s | %s | %s |" % (c["rate"], c["model"], c.get("verdict", "—"))
              for c in cells]
    return "\n".join(lines)


def summary(paths):
    """One line per cell of saved runs: the plan's layout, plan ÷ each arm with its
    bounds, the verdict, and the cost model's error per arm where the run predicted."""
    lines = ["| run | link | hosts | model | the plan | plan ÷ arm, mean [95% bounds] | "
             "within 5% of every arm? | predicted error per arm |",
             "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        saved = json.loads(Path(path).read_text())
        for cell in saved["cells"]:
            plan = cell["arms"].get(PLAN)
            errors = ", ".join("%s %+.0f%%" % (arm, 100 * a["predicted_error"])
                               for arm, a in cell["arms"].items() if "predicted_error" in a)
            lines.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
                saved["meta"]["tag"], cell["rate"], cell["workers"], cell["model"],
                _layout(plan["layout"]) if plan else "—",
                "; ".join("%s %.2f [%.2f, %.2f]" % (arm, *b[:3])
                          for arm, b in cell.get("plan_vs", {}).items() if b) or "—",
                cell.get("verdict", "—"), errors or "—"))
    return "\n".join(lines)


def write_report(folder, tag, meta, cells):
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / ("interleaved_%s" % tag)
    Path(str(stem) + ".json").write_text(json.dumps(dict(meta=meta, cells=cells), indent=1))
    text = ["# The plan against the hand-picked modes, interleaved in one job (%s)" % tag, "",
            "`%s`" % meta["command"], "",
            "%d workers (one per emulated host, a ps_server beside each), batch %s per worker, "
            "%d warm-up steps per arm, then %d rounds: each arm once per round (the order "
            "rotated by a place per round), one untimed step and a block of timed steps "
            "(%s). Step: the slowest worker's mean over a block; plan ÷ arm: geometric mean "
            "over the rounds of the plan's block ÷ the arm's block of the same round, "
            "one-sided 95%% bounds from a t-interval on the log ratios. Started %s, took %.0f "
            "s." % (meta["workers"], meta["batch"], meta["warmup"], meta["rounds"],
                    meta["block"], meta["started"], meta["duration_s"])
            + (" Predicted again with the cost model of %s (`interleaved.py --repredict`)."
               % meta["repredicted"] if meta.get("repredicted") else ""), "",
            table(cells), ""]
    Path(str(stem) + ".md").write_text("\n".join(text))
    return [Path(str(stem) + ".json"), Path(str(stem) + ".md")]


def run_cell(args, hosts, rate, model, workdir):
    block = args.block or BLOCK.get(model, 10)
    steps = args.warmup + args.rounds * (block + 1)
    est = max(0.3, 3 * t_opt(PARAMS_GUESS.get(model, 1e6), hosts.n, rate))
    arms = len(args.arms) + (1 if args.predict else 0)  # --predict: the lone step's too
    timeout = (args.startup_timeout + arms * zoo_models.BUILD_S.get(model, 60)
               + arms * steps * est * 4 + (300 if args.predict else 0))  # the probes
    env = dict(CHILD_ENV)
    env.update(args.tfps_env)
    argv = [sys.executable, WORKER, "--model", model, "--arms", ",".join(args.arms),
            "--rounds", args.rounds, "--block", block, "--warmup", args.warmup] \
        + (["--predict"] if args.predict else [])
    cluster = NetnsCluster(hosts, workdir, timeout=timeout, env=env)
    try:
        cluster.start(lambda rank: argv)
        cluster.wait()
        cluster.check()
        results = [r for rank in range(hosts.n) for r in parse_results(
            cluster.result("worker", rank).stdout, "INTERLEAVED_RESULT ")]
        if len(results) != hosts.n:
            raise ClusterError("a worker printed no INTERLEAVED_RESULT line (logs in %s)"
                               % workdir)
        return summarize(results, rate, model)
    finally:
        cluster.close()


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="toy sizes: the smoke_ BERT, 1gbit, 2 rounds of 2 steps")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--rates", default="10gbit")
    parser.add_argument("--models", default="resnet50,mobilenetv2,bert")
    parser.add_argument("--arms", default="sum,ps,auto",
                        help="tf_ps_ops modes, each with an optional cycle time of its "
                             "own (TFPS_CYCLE_US, set before each of its blocks): sum:c300")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block", type=int, default=None,
                        help="timed steps per block (default per model: %s)" % BLOCK)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--predict", action="store_true",
                        help="the workers measure the cost model's inputs, and rank 0 times "
                             "its lone local step in every round: each arm's step predicted "
                             "by the cost model, and its error")
    parser.add_argument("--startup-timeout", type=float, default=180)
    parser.add_argument("--idle-patience", type=float, default=30,
                        help="seconds to wait for an idle machine before each cell")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment of the tf_ps_ops processes (repeatable)")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--results-dir", default=str(RESULTS))
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--summary", nargs="+", metavar="JSON", default=None,
                        help="only print one line per cell of saved interleaved_<tag>.json")
    parser.add_argument("--repredict", nargs="+", metavar="JSON", default=None,
                        help="only predict the arms of saved --predict runs again with the "
                             "current cost model, from the inputs they measured (rewrites "
                             "their JSON and .md)")
    return parser


def main():
    return main_args(sys.argv[1:])


def main_args(argv):
    parser = make_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    if args.repredict:
        for path in args.repredict:
            print("rewrote", ", ".join(str(p) for p in repredict(path)))
        return 0
    if args.smoke:
        args.rates, args.models, args.rounds = "1gbit", "smoke_bert", 2
        args.block, args.warmup = args.block or 2, 1
    try:
        args.tfps_env = dict(item.split("=", 1) for item in args.env)
    except ValueError:
        parser.error("--env takes NAME=VALUE")
    args.arms = args.arms.split(",")
    if len(set(args.arms)) != len(args.arms) or len(args.arms) < 2:
        parser.error("--arms takes two or more distinct modes")
    args.tag = args.tag or ("smoke" if args.smoke else "%dh" % args.hosts)
    ok, why = available()
    if not ok:
        sys.exit("interleaved.py needs network namespaces: " + why)
    return sweep(args)


def sweep(args):
    """Every (link, model) cell of args, one job each; writes the report. 1 if a cell
    failed."""
    started, t_start = datetime.datetime.now().astimezone(), time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="interleaved-"))
    cells, failed = [], []
    try:
        for rate in args.rates.split(","):
            with Hosts(args.hosts, rate=rate) as hosts:
                for model in args.models.split(","):
                    if args.idle_patience:
                        wait_for_idle(0.15, args.idle_patience)
                    print("interleaved: %s, %s, arms %s" % (rate, model, ",".join(args.arms)),
                          flush=True)
                    try:
                        cell = run_cell(args, hosts, rate, model,
                                        workdir / ("%s-%s" % (rate, model)))
                    except ClusterError as e:
                        print("  FAILED %s %s:\n%s" % (rate, model, e), flush=True)
                        failed.append((rate, model))
                        continue
                    cells.append(cell)
                    print("  " + "; ".join("%s %.3f s" % (arm, a["step_s"])
                                           for arm, a in cell["arms"].items())
                          + ("; plan: " + cell["verdict"] if "verdict" in cell else ""),
                          flush=True)
    finally:
        if args.keep_logs:
            print("logs kept in", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    models = args.models.split(",")
    meta = dict(tag=args.tag, command="python3 benchmarks/interleaved.py " + " ".join(
        args.argv), started=started.isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - t_start, 1), workers=args.hosts,
        batch={m: zoo_models.BATCH.get(m, 32) for m in models}, warmup=args.warmup,
        rounds=args.rounds, block={m: args.block or BLOCK.get(m, 10) for m in models},
        arms=args.arms, machine=dict(cpus=os.cpu_count(), platform=platform.platform()),
        failed=failed)
    paths = write_report(Path(args.results_dir), args.tag, meta, cells)
    print(table(cells))
    print("wrote %s" % ", ".join(str(p) for p in paths))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
