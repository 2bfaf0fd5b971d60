"""train_bench.py's numbers and report: one run's row from its workers' TRAIN_RESULT
dicts (summarize), one row per configuration from its repeats (combine), the columns
against the same sweep's single process (derive: speedup, scaling, t_opt, link use, and
the cost model's predicted step, predict_step), and the .json, .md and _throughput.png
that hold them (write_report; train_bench.py --report redraws them from the .json).
"""

import json
import statistics
from pathlib import Path

from train_modes import (ALL_MODES, DENSE_MODES, MODE_LABELS, PLOT_LABELS, TUNE_ENV,
                         rate_bits, t_opt, tune_warmup)


def _mean_cpu(by_process, prefixes):
    """Mean CPU seconds of the processes whose label starts with one of `prefixes`
    (worker0, server1, ps0, ...); 0 when there is none."""
    values = [v for label, v in by_process.items()
              if label.rstrip("0123456789") in prefixes]
    return sum(values) / len(values) if values else 0.0


def summarize(results):
    """One row from the workers' TRAIN_RESULT dicts (rank 0's window)."""
    first = min(results, key=lambda r: r["rank"])
    steps = max((r["step_s"] for r in results), key=statistics.median)
    slowest = statistics.median(steps)
    window = first["window"]
    elapsed = window["elapsed_s"] or 1e-9
    return dict(step_s=slowest, window_s=elapsed, step_min_s=min(steps), step_max_s=max(steps),
                steps=len(steps), samples_s=first["samples_per_step"] / slowest,
                warmup_s=first["warmup_s"], params=first["params"],
                other_cores=max(0.0, window["other_cpu_s"]) / elapsed,
                cpu_per_step=window["ours_total_s"] / len(steps),
                worker_cpu_per_step=_mean_cpu(window["ours_cpu_s"], ("worker",)) / len(steps),
                server_cpu_per_step=_mean_cpu(window["ours_cpu_s"], ("server", "ps")) / len(
                    steps),
                cpu_by_process=window["ours_cpu_s"],
                softirq_cores=window["softirq_s"] / elapsed,
                tx_mb_per_step=window["tx_bytes"] / len(steps) / 1e6,
                batch=first.get("batch"), loss_first=first["loss_first"],
                loss_last=first["loss_last"],
                sfb_kernels=first.get("sfb_kernels"), plan_inputs=first.get("plan_inputs"),
                autotune=first.get("autotune"))


def combine(key, found, workers):
    """One row per configuration: the repeat with the median step time, and every
    repeat's step time."""
    rate, model, mode = key
    row = dict(rate=rate, model=model, mode=mode, workers=1 if mode == "single" else workers)
    done = sorted((r for r in found if r["status"] != "failed" and "step_s" in r),
                  key=lambda r: r["step_s"])
    if not done:
        row.update(found[-1])
        return row
    row.update(done[(len(done) - 1) // 2])
    # Every repeat in order, None where it failed, so that repeat k of two configurations
    # ran close in time (paired comparisons: benchmarks/zoo.py's plan ÷ best).
    row["repeat_step_s"] = [round(r["step_s"], 4) if "step_s" in r else None for r in found]
    row["repeat_started_s"] = [r.get("started_s") for r in found]
    row["repeats_failed"] = sum(r["status"] == "failed" for r in found)
    return row


def derive(rows, workers):
    """Scaling efficiency and the t_opt columns, against the same sweep's single run."""
    single = {(r["rate"], r["model"]): r for r in rows
              if r["mode"] == "single" and r["status"] != "failed"}
    probes = pooled_probes(rows)
    for r in rows:
        if r["status"] in ("failed", "unavailable") or r["mode"] == "single":
            continue
        base = single.get((r["rate"], r["model"]))
        r["t_opt_s"] = t_opt(r["params"], workers, r["rate"])
        r["link_util"] = r["tx_mb_per_step"] * 8e6 / (rate_bits(r["rate"]) * r["step_s"])
        if base and r.get("plan_inputs") and r["plan_inputs"].get("choices"):
            r["predicted_s"] = predict_step(pooled(r, probes), base["step_s"], r["batch"],
                                            base.get("cpu_per_step"))
            r["predicted_error"] = r["predicted_s"] / r["step_s"] - 1
            r["predicted_own_probes_s"] = predict_step(r["plan_inputs"], base["step_s"],
                                                       r["batch"], base.get("cpu_per_step"))
        if base:
            r["scaling"] = r["samples_s"] / (workers * base["samples_s"])
            r["speedup"] = r["samples_s"] / base["samples_s"]
            r["comm_s"] = r["step_s"] - base["step_s"]
            if r["mode"] in DENSE_MODES and r["comm_s"] > 0:
                r["t_opt_over_comm"] = r["t_opt_s"] / r["comm_s"]
    return rows


# What every row of a sweep measures of the same emulated link before it trains, and of
# the same model's step beside it: the rows' probes are samples of one thing, and one
# row's alone varied a lot (at 10 Gbit/s on 2 shared cores, 437 to 704 MB/s within one
# run, which moved a prediction by 25%). The link's per rate, the model's per rate and
# model; the median of the rows'.
LINK_PROBES = (("cluster", "bandwidth"), ("cluster", "latency"),
               ("machine", "transport_per_byte"), ("machine", "transport_per_message"))
MODEL_PROBES = (("machine", "compute_loss"), ("machine", "compute_cpu_loss"))


def pooled_probes(rows):
    """{(rate, model): {(part, field): the median of the rows' values}} of LINK_PROBES
    (over every model's rows at that rate) and MODEL_PROBES (that model's rows)."""
    import statistics

    found = [r for r in rows if r["status"] not in ("failed", "unavailable")
             and (r.get("plan_inputs") or {}).get("machine")]
    out = {}
    for r in found:
        key = (r["rate"], r["model"])
        if key in out:
            continue
        pools = {probe: [o for o in found if o["rate"] == r["rate"]] for probe in LINK_PROBES}
        pools.update({probe: [o for o in found if (o["rate"], o["model"]) == key]
                      for probe in MODEL_PROBES})
        out[key] = {(part, field): statistics.median(values)
                    for (part, field), pool in pools.items()
                    if (values := [o["plan_inputs"][part][field] for o in pool
                                   if field in o["plan_inputs"][part]])}
    return out


def pooled(row, probes):
    """The row's plan_inputs with the sweep's pooled probes (pooled_probes) in place of
    its own."""
    inputs = {part: dict(value) if isinstance(value, dict) else value
              for part, value in row["plan_inputs"].items()}
    for (part, field), value in probes.get((row["rate"], row["model"]), {}).items():
        inputs[part][field] = value
    return inputs


def predict_step(inputs, single_step_s, batch, single_cpu_s=None):
    """The cost model's step time for a row (train_worker --predict): its measured cluster,
    machine and engine settings, its mode's choice per layer, and the compute rate at which
    the model's multiply-adds, plus the optimizer update, take the same sweep's
    single-process step (and the cores that step kept busy: its CPU-seconds over its
    seconds, for the host's CPU floor). The same code as plan="auto" and tfps-plan
    (tf_ps_ops.plan.cost and steptime)."""
    from tf_ps_ops.plan import steptime

    lay, choices, cluster, machine, settings = prediction_inputs(inputs, single_step_s, batch,
                                                                 single_cpu_s)
    return steptime.step_time(lay, choices, cluster, machine, batch, settings)[0]


def prediction_inputs(inputs, single_step_s, batch, single_cpu_s=None):
    """(layers, choices, Cluster, Machine, Settings) that predict_step gives the cost
    model for a row: its saved plan_inputs, with the compute rate (and cores busy) of the
    same sweep's single-process step."""
    import dataclasses

    from tf_ps_ops.plan import cost, layers, measure, steptime

    lay = layers.from_json(inputs["layers"])
    choices = [cost.parse_choice(c) for c in inputs["choices"]]
    machine = dict(inputs["machine"])
    if "transport_per_partition" not in machine:
        # Measured before the partition probe: the price per byte carried the big probe's
        # cut; the default per partition takes it out (measure.measure_cluster does).
        cut = cost.partition_count(measure.PROBE_BYTES, inputs["settings"]["partition_bytes"],
                                   cost.Cluster(**inputs["cluster"]).servers) - 1
        taken = cut * cost.TRANSPORT_PER_PARTITION / (2 * measure.PROBE_BYTES)
        machine["transport_per_byte"] = max(0.0, machine["transport_per_byte"] - taken)
    machine["codec_per_byte"] = tuple((name, tuple(v)) for name, v in machine["codec_per_byte"])
    machine = cost.Machine(**machine)
    forward, backward = steptime.compute_times(
        lay, dataclasses.replace(machine, macs_per_s=1.0), batch)
    apply_s = machine.apply_per_byte * sum(
        steptime.apply_bytes(layer, cost.default_choice(layer)) for layer in lay)
    # The lone step's update of its own embedding rows, which the gather's cost counts.
    apply_s += sum(machine.row_add(layer.table[1]) * (layer.rows_per_step(batch) or 0)
                   for layer in lay if layer.sparse and machine.apply_per_row)
    rate = (sum(forward) + sum(backward)) / max(single_step_s - apply_s, 1e-3 * single_step_s)
    if single_cpu_s:
        machine = dataclasses.replace(machine, compute_cpu=single_cpu_s / single_step_s)
    return (lay, choices, cost.Cluster(**inputs["cluster"]),
            dataclasses.replace(machine, macs_per_s=rate), steptime.Settings(**inputs["settings"]))


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def table(rows):
    head = ("| model | link | mode | workers | samples/s | step s (median) | min–max | repeats | "
            "speedup | scaling eff | comm s | t_opt s | t_opt/comm | tx MB/step | link util | "
            "CPU s/step: all (worker, server) | others (cores) | predicted s (error) | status |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        if r["status"] in ("failed", "unavailable"):
            lines.append("| %s | %s | %s | %d | | | | | | | | | | | | | | | %s |" % (
                r["model"], r["rate"], MODE_LABELS[r["mode"]], r["workers"], r["status"]))
            continue
        lines.append("| " + " | ".join([
            r["model"], r["rate"], MODE_LABELS[r["mode"]], str(r["workers"]),
            _fmt(r["samples_s"], ".1f"), _fmt(r["step_s"], ".3f"),
            "%.3f–%.3f" % (r["step_min_s"], r["step_max_s"]),
            " ".join("—" if v is None else "%.3f" % v for v in r.get("repeat_step_s", [])),
            _fmt(r.get("speedup"), ".2f") + ("×" if r.get("speedup") else ""),
            _fmt(r.get("scaling"), ".2f"), _fmt(r.get("comm_s"), ".3f"),
            _fmt(r.get("t_opt_s"), ".3f"), _fmt(r.get("t_opt_over_comm"), ".2f"),
            _fmt(r["tx_mb_per_step"], ".1f"), _fmt(r.get("link_util"), ".2f"),
            "%.2f (%.2f, %.2f)" % (r["cpu_per_step"], r["worker_cpu_per_step"],
                                   r["server_cpu_per_step"]),
            _fmt(r["other_cores"], ".2f"),
            "—" if r.get("predicted_s") is None else "%.3f (%+.0f%%)" % (
                r["predicted_s"], 100 * r["predicted_error"]),
            r["status"]]) + " |")
    return "\n".join(lines)


def plot(path, rows, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    width = 0.8 / len(rates)
    for ax, model in zip(axes[0], models):
        modes = sorted({r["mode"] for r in rows if r["model"] == model}, key=ALL_MODES.index)
        for j, rate in enumerate(rates):
            values = []
            for mode in modes:
                match = [r for r in rows if (r["model"], r["rate"], r["mode"]) == (
                    model, rate, mode) and r["status"] not in ("failed", "unavailable")]
                values.append(match[0]["samples_s"] if match else 0.0)
            xs = [i + (j - (len(rates) - 1) / 2) * width for i in range(len(modes))]
            bars = ax.bar(xs, values, width, label=rate)
            for bar, value, mode in zip(bars, values, modes):
                text = "%.0f" % value if value else (
                    "n/a" if mode == "horovod" else "fail")
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, value), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
            single = [r for r in rows if (r["model"], r["rate"], r["mode"]) == (
                model, rate, "single") and r["status"] not in ("failed", "unavailable")]
            if single:
                ax.axhline(meta["workers"] * single[0]["samples_s"], color="C%d" % j,
                           linestyle="--", linewidth=0.8,
                           label="%d × single (%s sweep)" % (meta["workers"], rate))
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels([PLOT_LABELS[m] for m in modes], fontsize=8)
        ax.set_ylabel("samples/s (all workers)")
        batch = meta["batch"].get(model) if isinstance(meta["batch"], dict) else meta["batch"]
        ax.set_title("%s, %d workers, batch %s/worker" % (model, meta["workers"], batch))
        ax.legend(fontsize=7)
    fig.suptitle("Training throughput by mode and peer (%s)" % meta["started"][:10],
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ordered(rows):
    """Rows by link and model as they first ran, then by mode as ALL_MODES lists them
    (the sweep runs the modes in a shuffled order)."""
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    return sorted(rows, key=lambda r: (rates.index(r["rate"]), models.index(r["model"]),
                                       ALL_MODES.index(r["mode"])))


def write_report(folder, tag, meta, rows):
    rows = ordered(rows)
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / ("train_%s" % tag)
    json_path, md_path = Path(str(base) + ".json"), Path(str(base) + ".md")
    png_path = Path(str(base) + "_throughput.png")
    json_path.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    lines = [
        "# Training throughput (%s)" % tag, "",
        "`%s` — started %s, took %.0f s; %d CPUs; load average before %s, after %s; "
        "TensorFlow %s, Keras %s; Horovod: %s." % (
            meta["command"], meta["started"], meta["duration_s"], meta["machine"]["cpus"],
            "/".join("%.2f" % v for v in meta["loadavg_before"]),
            "/".join("%.2f" % v for v in meta["loadavg_after"]),
            meta["versions"].get("tensorflow", "?"), meta["versions"].get("keras", "?"),
            meta["horovod"]), "",
        "%d workers (one per emulated host, tbf-limited link), batch %s per worker, "
        "%d warm-up + %s timed steps, median step of the slowest worker; each configuration "
        "ran %d times, interleaved (%s), and the run with the median step is shown (repeats: "
        "every run's step, in the order they ran). speedup and scaling "
        "eff against the single-process row of the same link sweep; comm s = step − single "
        "step; t_opt = 2(n−1)M/(nB) for the dense modes (M = fp32 gradient bytes); "
        "tx MB/step: host 0's eth0; CPU s/step: every process of the configuration, and "
        "in brackets one worker (for TF's ParameterServerStrategy a worker task; its chief "
        "counts in the total) and one server (ps_server or ps task); "
        "others: cores used by processes not ours during the timed window "
        "(limit %.2f); predicted s (--predict): the planner's cost model, from the "
        "cluster each tf_ps_ops row measured before training%s and the compute rate of the "
        "single-process row, and its error against the measured step." % (
            meta["workers"], meta["batch"], meta["warmup"], meta["steps"], meta["repeats"],
            "modes in one shuffled order (seed %s), rotated by a place per repeat" % meta["seed"]
            if meta.get("order") == "shuffled" else "modes in a fixed order",
            meta["other_limit"],
            " (the link's probes the median over the sweep's rows at that rate, the model's "
            "step beside the link over that model's rows)"
            if any("predicted_own_probes_s" in r for r in rows) else ""), "",
        table(rows), ""]
    tuned = [r for r in rows if r.get("autotune")]
    tuning = meta.get("tune_env", TUNE_ENV)
    if tuned:
        lines += ["Autotuned rows (`tuned`: sum with TFPS_AUTOTUNE=1, %s steps a sample, "
                  "during %d extra warm-up steps; the timed steps run under what rank 0 kept; "
                  "fusion/credit in KiB (/cycle in µs, where the autotuner also tried "
                  "cycle times): its median step in ms):" % (
                      tuning["TFPS_AUTOTUNE_STEPS_PER_SAMPLE"], tune_warmup(tuning)), ""]
        for r in tuned:
            t = r["autotune"]
            kept_cycle = ", cycle %d µs" % t["kept"][2] if len(t["kept"]) > 2 else ""
            lines.append("- %s %s: kept fusion %d KiB, credit %d KiB%s; samples %s" % (
                r["model"], r["rate"], t["kept"][0] >> 10, t["kept"][1] >> 10, kept_cycle,
                ", ".join("/".join(["%d" % (f >> 10), "%d" % (c >> 10)]
                                   + ["%d" % y for y in cycle]) + ": %.0f" % (s * 1e3)
                          for f, c, *cycle, s in t["history"])))
        lines.append("")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines += ["## Not measured", ""]
        for r in errors:
            lines.append("- %s %s %s (%s): %s" % (r["model"], r["rate"], r["mode"], r["status"],
                                                  r["error"].strip().splitlines()[-1][:300]))
        lines.append("")
    md_path.write_text("\n".join(lines))
    paths = [json_path, md_path]
    try:
        plot(png_path, rows, meta)
        paths.append(png_path)
    except ImportError as e:
        print("no plot (%s): pip install -r benchmarks/requirements.txt" % e)
    return paths
