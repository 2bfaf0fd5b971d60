"""The model zoo side by side with the peers: ResNet-50, MobileNetV2, a BERT-base-shaped
encoder and a DLRM-like recommender (benchmarks/zoo_models.py) on 2 and 3 emulated hosts at
1 and 10 Gbit/s, every applicable tf_ps_ops mode against MultiWorkerMirrored,
ParameterServerStrategy and Horovod; then RESULTS.md's zoo section and the plots.

    python3 benchmarks/zoo.py              # the full grid: ~6-7 h idle (--repeats 1: ~2.5 h)
    python3 benchmarks/zoo.py --hosts 2 --rates 1gbit --repeats 1   # one cell column
    python3 benchmarks/zoo.py --pilot      # 2 hosts, 1 Gbit/s, sum vs MWMS (+ PS vs PSS, DLRM)
    python3 benchmarks/zoo.py --render     # RESULTS.md's zoo section from the saved JSON
    python3 benchmarks/zoo.py --smoke --results-dir /tmp/x   # toy sizes, 2 steps, sum only

The full grid is 116 configurations (2 and 3 hosts × 1 and 10 Gbit/s × 4 models × the
7-8 modes that apply to each), 3 interleaved repeats each; a run takes ~30-90 s on an idle
2-core machine (process start, minutes of tracing for ResNet-50 under load, a 512 MB
table broadcast for the DLRM), hence the estimate above.

It runs benchmarks/train_bench.py once per host count (the same harness, runners and
report as the MLP/CNN comparison) and writes results/train_zoo_<n>h[_pilot].{json,md,png};
any further argument goes to train_bench.py (e.g. --steps 4 --repeats 1). The full grid
runs train_bench with --predict (the cost model's predicted step beside each tf_ps_ops
row) and the automatic plan's mode; RESULTS.md gets, per link and model, the automatic
plan's step beside the best hand-picked mode's (plan_summary).
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import zoo_models  # noqa: E402

RESULTS_MD = HERE / "RESULTS.md"
BEGIN, END = "<!-- zoo:begin (python3 benchmarks/zoo.py) -->", "<!-- zoo:end -->"
ALL = "single,sum,ps,sfb,hybrid,int8,auto,auto_int8,mwms,pss,horovod"
# What set a saved run apart, shown in its heading.
NOTES = {
    "train_zoo_2h_pilot": "before sum mode gathered IndexedSlices: it reduced them dense",
    "train_zoo_2h_pilot_dense": "before sum mode gathered IndexedSlices: it reduced them dense",
    "train_zoo_2h_pilot_sparse_dlrm": "IndexedSlices gathered in sum mode",
    "train_zoo_2h_pilot_sparse_bert": "IndexedSlices gathered in sum mode",
}
# The single runs before plan="auto" weighed PS mode per gradient, on a machine whose cores
# were about 1.4× slower (ResNet-50's local step 0.73–0.78 s, against 0.55 s since).
NOTES.update(dict.fromkeys(
    ("train_zoo_2h_10gbit", "train_zoo_2h_10gbit_tuned", "train_zoo_2h_1gbit",
     "train_zoo_2h_1gbit_codecs", "train_zoo_3h_1gbit"),
    "before the plan weighed PS mode; slower machine"))
# Predicted (the table's last column) by the cost model of their day: gradients ready in
# layer order, the next forward overlapping the transfers, a lone push_pull's CPU per
# message.
NOTES.update(dict.fromkeys(
    ("train_zoo_2h_10gbit_psplan", "train_zoo_2h_10gbit_psplan_mobilenet",
     "train_zoo_3h_10gbit_psplan", "train_zoo_2h_1gbit_psplan", "train_zoo_3h_1gbit_psplan"),
    "predicted by the cost model before the gradients' measured order"))
NOTES.update(dict.fromkeys(
    ("train_zoo_2h_10gbit_ready", "train_zoo_2h_1gbit_ready"),
    "gradients' order from a timeline of the real step; a noisier day (local steps 15-25% "
    "slower, drifting within the run)"))
NOTES["train_zoo_2h_1gbit_tie"] = "near-ties to the default; the modes shuffled per repeat"
NOTES["train_zoo_2h_10gbit_tie"] = NOTES["train_zoo_3h_1gbit_tie"] = (
    "near-ties to the default; the modes in one shuffled order, rotated per repeat")
NOTES["train_zoo_2h_10gbit_settle"] = NOTES["train_zoo_3h_1gbit_settle"] = (
    "the cells in doubt, 6 repeats of 20-24 steps, to settle the plan ÷ best")
NOTES["train_zoo_2h_rowlookup"] = NOTES["train_zoo_3h_1gbit_rowlookup"] = (
    "the DLRM's rows looked up with tf_ps_ops.keras.Embedding (no table copy per step)")
NOTES["train_zoo_3h_dlrm200"] = (
    "rows looked up by row, 200 timed steps per run (a few ms each) instead of 20")
NOTES["train_zoo_3h_10gbit_now"] = NOTES["train_zoo_3h_10gbit_now_resnet50"] = \
    NOTES["train_zoo_3h_1gbit_now"] = (
    "the planner of 2026-12-04 (gradients' measured order, SFB's skipped weight gradient)")
NOTES["train_zoo_2h_1gbit_now"] = NOTES["train_zoo_2h_10gbit_now"] = \
    NOTES["train_zoo_2h_10gbit_now_resnet50"] = (
    "the planner of 2026-12-04 afternoon (also PS mode's table partitions priced as CPU)")
NOTES["train_zoo_2h_1gbit_aa"] = (
    "MobileNetV2's plan (the default configuration) against summation alone, 4 repeats: "
    "1.17x in the run before")
NOTES["train_zoo_3h_10gbit_aa"] = (
    "the plan against summation alone, 4 repeats: their 9% gap in the run before")
NOTES["train_zoo_2h_dlrm200"] = NOTES["train_zoo_3h_dlrm200"] + (
    "; predicted again (train_bench.py --report --repredict) once SFB layers' backward "
    "skipped their weights' gradient, and once PS mode's table partitions were priced as "
    "CPU")
NOTES["train_zoo_3h_dlrm200"] += (
    "; predicted again (train_bench.py --report --repredict) once PS mode's table "
    "partitions were priced as CPU")
NOTES["train_zoo_3h_1gbit_profiled"] = NOTES["train_zoo_2h_1gbit_profiled"] = (
    "SFB's rebuild priced by two probes, sfb.convert planning with a profiled local step; "
    "a slower machine (BERT alone 0.76 s)")
NOTES["train_zoo_2h_1gbit_cpu"] = NOTES["train_zoo_3h_1gbit_cpu"] = (
    "the model's own step timed beside the link (its compute lost and its kernels' extra "
    "CPU), predicted with the sweep's pooled probes; predicted again (train_bench.py "
    "--report --repredict) with the layers' variable counts filled in and PS mode's "
    "per-variable server CPU")
NOTES["train_zoo_2h_10gbit_cpu"] = NOTES["train_zoo_2h_1gbit_cpu"].replace(
    "pooled probes;", "pooled probes and the run's own optimizer's update cost;")
for _tag in ("train_zoo_2h_1gbit_cpu", "train_zoo_3h_1gbit_cpu", "train_zoo_2h_10gbit_cpu",
             "train_zoo_2h_dlrm200", "train_zoo_3h_dlrm200"):
    NOTES[_tag] += (", once the servers' replies shared the link with the pushes, and once "
                    "the engine's cut was priced per partition")
PILOT_MODES = ";".join(["%s=single+sum+mwms" % m for m in zoo_models.ZOO if m != "dlrm"]
                       + ["dlrm=single+sum+ps+mwms+pss"])


def run(args, extra):
    tags, failed = [], 0
    hosts = [2] if args.pilot or args.smoke else [int(n) for n in args.hosts.split(",")]
    for n in hosts:
        tag = "zoo_smoke" if args.smoke else "zoo_%dh%s" % (n, "_pilot" if args.pilot else "")
        models = ",".join(("smoke_" + m if args.smoke else m) for m in args.models.split(","))
        argv = [sys.executable, str(HERE / "train_bench.py"), "--models", models,
                "--workers", str(n), "--tag", tag, "--results-dir", args.results_dir]
        if args.smoke:
            argv += ["--quick", "--rates", "1gbit", "--modes", "sum"]
        elif args.pilot:
            argv += ["--rates", "1gbit", "--modes", "single,sum,ps,mwms,pss",
                     "--model-modes", PILOT_MODES, "--repeats", "1", "--retries", "0",
                     "--idle-patience", "0", "--warmup", "2"]
        else:
            argv += ["--rates", "1gbit,10gbit", "--modes", ALL, "--predict"]
        argv += extra
        print("+", " ".join(argv[1:]), flush=True)
        code = subprocess.call(argv)
        tags.append(tag)
        if code != 0:
            failed += 1
            print("zoo: train_bench exited %d for %d hosts (failed rows are in the table)"
                  % (code, n), flush=True)
    return tags, failed


def render(results_dir):
    """RESULTS.md's zoo section: every results/train_zoo_*.md, full grid first."""
    folder = Path(results_dir)
    found = sorted(folder.glob("train_zoo_*h*.json"), key=lambda p: ("pilot" in p.name, p.name))
    parts = [BEGIN, "## Model zoo", "",
             "ResNet-50 (64×64), MobileNetV2 (96×96), a BERT-base-shaped encoder (2 layers, "
             "sequence 32) and a DLRM-like recommender (2 M × 64 table, hot set of 100 k rows) "
             "on emulated hosts (benchmarks/zoo_models.py; regenerate with "
             "`python3 benchmarks/zoo.py`). Each table's header gives its command, the load "
             "average around it and the per-model batch. The DLRM looks its rows up with "
             "tf_ps_ops.keras.Embedding since the runs marked so; before, with Keras's "
             "Embedding, TensorFlow copied its 512 MB table every step (0.45-0.6 s of its "
             "local step), which every mode paid alike. A row's predicted step is the "
             "cost model's of the day the run was made, from the inputs it measured; runs "
             "marked \"predicted again\" were predicted from those inputs with a later "
             "model (`train_bench.py --report JSON --repredict`).", ""]
    if not found:
        parts += ["Not measured yet.", ""]
    for path in found:
        saved = json.loads(path.read_text())
        meta = saved["meta"]
        rates = ", ".join(dict.fromkeys(r["rate"] for r in saved["rows"]))
        label = "pilot, under load" if "pilot" in path.name else "%s, %d run(s) each" % (
            rates, meta["repeats"])
        if path.stem in NOTES:
            label += "; " + NOTES[path.stem]
        models = ", ".join(dict.fromkeys(r["model"] for r in saved["rows"]))
        parts += ["### %s: %s hosts (%s)" % (models, meta["workers"], label), ""]
        if "pilot" in path.name:
            parts += ["**Pilot on a shared, overloaded 2-core machine** (load average %s "
                      "before, %s after; other engineers' processes): the numbers show that "
                      "the harness runs end to end and the order of magnitude, not a "
                      "comparison to rely on. One run per configuration, no idle wait." % (
                          "/".join("%.0f" % v for v in meta["loadavg_before"]),
                          "/".join("%.0f" % v for v in meta["loadavg_after"])), ""]
        md = (folder / (path.stem + ".md")).read_text().splitlines()
        parts += [line for line in md[2:]]  # without its own title
        parts += plan_summary(saved["rows"])
        png = folder / (path.stem + "_throughput.png")
        if png.exists():
            parts += ["", "![%s](%s)" % (path.stem, png.relative_to(HERE))]
        parts.append("")
    parts.append(END)
    text = RESULTS_MD.read_text()
    section = "\n".join(parts)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS_MD.write_text(text)
    print("rewrote the zoo section of", RESULTS_MD)


# The modes a user picks by hand, uncompressed, and the automatic plan that weighs the same
# (auto: no codec); then with int8 among them (auto_int8: TFPS_PLAN_CODECS=none,int8).
HAND_PICKED = {"auto": ("sum", "ps", "sfb", "hybrid"),
               "auto_int8": ("sum", "ps", "sfb", "hybrid", "int8"),
               "tuned": ("sum",)}


def _repeat_ratios(row, other):
    """row's step ÷ other's, repeat by repeat, where both ran (repeat k of the two ran
    minutes apart, so a slow drift of the machine cancels)."""
    return [a / b for a, b in zip(row.get("repeat_step_s") or [],
                                  other.get("repeat_step_s") or []) if a and b]


def paired(row, other):
    """_repeat_ratios' (median, lowest, highest), or None when no repeat has both."""
    ratios = sorted(_repeat_ratios(row, other))
    if not ratios:
        return None
    return statistics.median(ratios), ratios[0], ratios[-1]


# Student's t, one-sided 95% (two-sided 90%), by degrees of freedom; 1.645 beyond.
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
       1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725)
WITHIN = 1.05  # the plan's goal: at most 5% slower than any hand-picked mode


def paired_bounds(row, other):
    """row's step ÷ other's over the repeats both ran: (geometric mean, lower, upper
    95% one-sided confidence bounds, repeats), from a t-interval on the log ratios, or
    None below 2 paired repeats. Repeat k of the two ran minutes apart, so the pair's
    ratio cancels the machine's slow drift and the bounds say how far noise could move
    the mean: an upper bound at most 1.05 shows the plan within 5%."""
    logs = [math.log(r) for r in _repeat_ratios(row, other)]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    t = T95[len(logs) - 2] if len(logs) - 1 <= len(T95) else 1.645
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs)


def verdict(bounds):
    """{mode: paired_bounds} of the plan against each hand-picked mode → a sentence:
    within 5% of every one (every upper bound ≤ 1.05), more than 5% slower than one
    (its lower bound > 1.05), or not settled by these repeats."""
    known = {m: b for m, b in bounds.items() if b}
    if not known:
        return "—"
    slower = [m for m, b in known.items() if b[1] > WITHIN]
    if slower:
        return "no: over 5%% slower than %s" % ", ".join(slower)
    worst = max(known, key=lambda m: known[m][2])
    if known[worst][2] <= WITHIN:
        return "yes (at most %.2f× %s)" % (known[worst][2], worst)
    return "not settled (up to %.2f× %s)" % (known[worst][2], worst)


def _bounds(value):
    if value is None:
        return "—"
    mean, low, high, n = value
    return "%.2f [%.2f, %.2f] n=%d" % (mean, low, high, n)


def _ratio(value):
    if value is None:
        return "—"
    mid, low, high = value
    return "%.2f (%.2f–%.2f)" % (mid, low, high)


def plan_summary(rows):
    """Per link and model: the automatic plan's measured step beside the best hand-picked
    tf_ps_ops mode's and the default's (sum), and the cost model's error for each mode
    that has a prediction (train_bench --predict)."""
    ok = [r for r in rows if r.get("status") in ("ok", "contaminated") and "step_s" in r]
    cells = list(dict.fromkeys((r["rate"], r["model"]) for r in ok))
    lines = []
    for rate, model in cells:
        mine = {r["mode"]: r for r in ok if (r["rate"], r["model"]) == (rate, model)}
        default = mine.get("sum", {}).get("step_s")
        errors = ", ".join("%s %+.0f%%" % (m, 100 * r["predicted_error"])
                           for m, r in mine.items() if r.get("predicted_error") is not None)
        for auto, modes in HAND_PICKED.items():
            picked = {m: r for m, r in mine.items() if m in modes}
            if auto not in mine or not picked:
                continue
            best = min(picked, key=lambda m: picked[m]["step_s"])
            step = mine[auto]["step_s"]
            bounds = {m: paired_bounds(mine[auto], r) for m, r in picked.items()}
            lines.append("| %s | %s | %s | %s %.3f | %.3f | %s | %.2f | %s | %s | %s | %s | %s |"
                         % (model, rate, auto, best, picked[best]["step_s"], step,
                            "—" if default is None else "%.3f" % default,
                            step / picked[best]["step_s"],
                            _ratio(paired(mine[auto], picked[best])),
                            _ratio(paired(mine[auto], mine["sum"])) if "sum" in mine else "—",
                            "; ".join("%s %s" % (m, _bounds(b)) for m, b in bounds.items()),
                            verdict(bounds), errors or "—"))
            errors = "″"
    if not lines:
        return []
    return ["", "The automatic plan against the hand-picked modes it could have chosen "
            "(measured steps, s): `auto` weighs sum, PS, SFB and HybComm's choice, "
            "uncompressed (a codec changes what training computes, so the plan takes one only "
            "where TFPS_PLAN_CODECS allows it); `auto_int8` also int8. auto ÷ best: 1.00 = as "
            "fast as the best; of the medians, then repeat by repeat (the median ratio and "
            "its range: repeat k of every mode ran within minutes, so the machine's slow "
            "drift cancels; the runs labelled 'near-ties to the default' also shuffle the "
            "modes' order), and the plan ÷ the default the same way. "
            "Paired against each hand-picked mode: the geometric mean of the per-repeat "
            "ratios, in brackets its 95% one-sided lower and upper confidence bounds (a "
            "t-interval on the log ratios of n repeats); within 5%: yes when every upper "
            "bound is at most 1.05, no when a lower bound is above it, else not settled by "
            "these repeats (the best of several noisy medians is biased low, so the "
            "medians' ratio alone cannot settle it). "
            "The cost model's error per mode: predicted ÷ measured − 1.", "",
            "| model | link | plan | best hand-picked | plan's step | default (sum) | "
            "plan ÷ best | per repeat | plan ÷ default, per repeat | "
            "plan ÷ each hand-picked, paired | within 5%? | prediction error |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"] + lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--pilot", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    mode.add_argument("--render", action="store_true")
    parser.add_argument("--models", default=",".join(zoo_models.ZOO))
    parser.add_argument("--hosts", default="2,3", help="the full grid's host counts")
    parser.add_argument("--results-dir", default=str(HERE / "results"))
    args, extra = parser.parse_known_args()
    failed = 0
    if not args.render:
        _, failed = run(args, extra)
    if not args.smoke and Path(args.results_dir).resolve() == (HERE / "results").resolve():
        render(args.results_dir)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
