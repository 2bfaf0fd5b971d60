"""What the cost model's predicted step is made of, for each arm of a saved run.

    python3 benchmarks/plan_breakdown.py \
        benchmarks/results/interleaved_2h_1gbit_mobilenetv2_ops.json [more.json ...]

For every arm with plan inputs (interleaved.py --predict) it prints, beside the measured
step: the step on the timeline alone (no CPU floor), the forward and backward compute,
the link's time for every byte the busiest host sends (pushes and replies), and the
host's CPU floor cut into its parts (compute, the optimizer's updates, the collective
ops' TensorFlow CPU, codecs and sums, transport per byte and per message), over the
cores it has. The predicted step runs that CPU on those cores beside the link, on one
timeline (tf_ps_ops/plan/hoststep.py), and is at least the floor.

    python3 benchmarks/plan_breakdown.py --bounds benchmarks/results/interleaved_*_ops.json

predicts every arm again with the current cost model from its saved inputs (nothing is
rewritten): one line per cell with each arm's error, the worst and mean error, and the
arms by which bound binds (the timeline T at least 1.5 times the floor F, F at least 1.3
times T, the two within 17% of each other, between those), with the measured step over
the larger bound and over the prediction, and F's CPU over the CPU the hosts measured: a
test bed for a change to the cost model.
"""

import argparse
import dataclasses
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]


def breakdown(inputs, single_step_s, batch, single_cpu_s=None):
    """{part: seconds} of one arm's prediction (train_report.prediction_inputs)."""
    from tf_ps_ops.plan import steptime
    from train_report import prediction_inputs

    lay, choices, cluster, machine, settings = prediction_inputs(inputs, single_step_s, batch,
                                                                 single_cpu_s)
    step, per_layer = steptime.step_time(lay, choices, cluster, machine, batch, settings)
    costs, forward, backward, apply, busy = steptime.cpu_inputs(lay, choices, cluster,
                                                                machine, batch, settings)
    L = min(cluster.workers_per_host, cluster.workers)
    compute = machine.compute_cpu * (sum(forward) + sum(backward)
                                     * (1 + machine.compute_cpu_loss * busy))
    cores = machine.cores_per_host or 0
    floor = steptime.host_cpu(costs, forward, backward, apply, cluster, machine, busy)
    timeline = steptime.step_time(lay, choices, cluster,
                                  dataclasses.replace(machine, cores_per_host=0), batch,
                                  settings)[0]
    return {
        "predicted": step,
        "timeline": timeline,
        "forward": sum(forward),
        "backward": sum(backward),
        "link": sum(c.link_bytes for c in costs) / cluster.bandwidth,
        "link_messages": sum(c.messages for c in costs) * machine.message_overhead,
        "link_busy_in_backward": busy,
        "cpu_floor": floor / cores + cluster.latency if cores else None,
        "cpu_floor_cpu": floor,
        "cpu.compute": L * compute,
        "cpu.apply": L * sum(apply),
        "cpu.tf_ops": L * sum(c.worker_ops for c in costs) * machine.tf_per_op,
        "cpu.codecs_sums": sum(c.host_cpu for c in costs),
        "cpu.per_byte": sum(c.host_bytes for c in costs) * machine.transport_per_byte,
        "cpu.per_message": sum(c.host_messages for c in costs)
        * machine.transport_per_message,
        "cores": cores,
        "compute_loss": machine.compute_loss,
        "compute_cpu_loss": machine.compute_cpu_loss,
        "slowest_layer_sync": max((d for _, d in per_layer), default=0.0),
    }


# The classes of --bounds: where the timeline T or the CPU floor F clearly binds, and
# where the two are close.
LINK_BOUND = 1.5   # T >= 1.5 F
CPU_BOUND = 1.3    # F >= 1.3 T
CLOSE = 1.17       # within 17% of each other


def arms(paths):
    """(path, run's tag, cell, arm, the arm's measurements, its breakdown) for every arm
    with plan inputs in the saved runs, predicted by the current cost model."""
    for path in paths:
        saved = json.load(open(path))
        for cell in saved["cells"]:
            single = cell.get("single")
            if not single:
                continue
            inputs = cell["workers_results"][0].get("plan_inputs") or {}
            for arm, measured in cell["arms"].items():
                if (inputs.get(arm) or {}).get("choices"):
                    yield (path, saved["meta"]["tag"], cell, arm, measured,
                           breakdown(inputs[arm], single["step_s"], cell["batch"],
                                     single.get("cpu_s")))


def _bound(parts):
    if not parts["cpu_floor"]:
        return "no CPU floor"
    ratio = parts["timeline"] / parts["cpu_floor"]
    if ratio >= LINK_BOUND:
        return "link-bound"
    if ratio <= 1 / CPU_BOUND:
        return "CPU-bound"
    return "close" if 1 / CLOSE <= ratio <= CLOSE else "between"


def bounds(paths):
    """Lines: each cell's error per arm with the current cost model, the worst and mean,
    then per class of arm (link-bound, CPU-bound, close, between) the measured step over
    the larger bound and the floor's CPU over the hosts' measured CPU."""
    lines, classes, errors, cells = [], {}, [], {}
    for _, tag, cell, arm, measured, parts in arms(paths):
        error = parts["predicted"] / measured["step_s"] - 1
        errors.append(abs(error))
        key = (tag, cell["model"], cell["rate"], cell["workers"])
        cells.setdefault(key, []).append(f"{arm} {100 * error:+.0f}%")
        spent = measured.get("cpu_host_s")
        classes.setdefault(_bound(parts), []).append(
            (measured["step_s"] / max(parts["timeline"], parts["cpu_floor"] or 0.0),
             parts["cpu_floor_cpu"] / spent if spent else None,
             measured["step_s"] / parts["predicted"]))
    for (tag, model, rate, hosts), found in cells.items():
        lines.append(f"{tag}: {model} at {rate}, {hosts} hosts: {', '.join(found)}")
    if errors:
        lines.append(f"{len(errors)} arms: worst |error| {100 * max(errors):.0f}%, "
                     f"mean {100 * sum(errors) / len(errors):.1f}%")
    for name, values in classes.items():
        steps = [v[0] for v in values]
        cpu = [v[1] for v in values if v[1]]
        predicted = [v[2] for v in values]
        lines.append(f"{name}: {len(values)} arms, measured step / max(T, F) "
                     f"{min(steps):.2f}-{max(steps):.2f}, / predicted "
                     f"{min(predicted):.2f}-{max(predicted):.2f}"
                     + (f", F's CPU / the hosts' {min(cpu):.2f}-{max(cpu):.2f}" if cpu else ""))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="interleaved.py's JSON")
    parser.add_argument("--bounds", action="store_true",
                        help="one line per cell (each arm's error with the current cost "
                             "model), then the arms by which bound binds")
    args = parser.parse_args()
    if args.bounds:
        print("\n".join(bounds(args.results)))
        return
    shown = None
    for path, _, cell, arm, measured, parts in arms(args.results):
        if shown is not cell:  # the cell's heading before its first arm
            shown = cell
            print(f"## {os.path.basename(path)}: {cell['model']} at {cell['rate']}, "
                  f"{cell['workers']} hosts; lone step {cell['single']['step_s'] * 1e3:.1f} ms")
        print(f"{arm}: measured {measured['step_s'] * 1e3:.1f} ms, "
              f"predicted {parts.pop('predicted') * 1e3:.1f} ms")
        print("   " + ", ".join(
            f"{k} {v * 1e3:.1f}" if k not in ("cores", "compute_loss", "compute_cpu_loss",
                                              "link_busy_in_backward")
            else f"{k} {v:.2f}" for k, v in parts.items() if v is not None))


if __name__ == "__main__":
    main()
