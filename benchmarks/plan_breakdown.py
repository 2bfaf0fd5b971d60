"""What the cost model's predicted step is made of, for each arm of a saved run.

    python3 benchmarks/plan_breakdown.py \
        benchmarks/results/interleaved_2h_1gbit_mobilenetv2_ops.json [more.json ...]

For every arm with plan inputs (interleaved.py --predict) it prints, beside the measured
step: the step on the timeline alone (no CPU floor), the forward and backward compute,
the link's time for every byte the busiest host sends (pushes and replies), and the
host's CPU floor cut into its parts (compute, the optimizer's updates, the collective
ops' TensorFlow CPU, codecs and sums, transport per byte and per message), over the
cores it has. The predicted step is the larger of the timeline and the floor.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="interleaved.py's JSON")
    args = parser.parse_args()
    for path in args.results:
        saved = json.load(open(path))
        for cell in saved["cells"]:
            single = cell.get("single")
            if not single:
                continue
            inputs = cell["workers_results"][0].get("plan_inputs") or {}
            print(f"## {os.path.basename(path)}: {cell['model']} at {cell['rate']}, "
                  f"{cell['workers']} hosts; lone step {single['step_s'] * 1e3:.1f} ms")
            for arm, measured in cell["arms"].items():
                if not (inputs.get(arm) or {}).get("choices"):
                    continue
                parts = breakdown(inputs[arm], single["step_s"], cell["batch"],
                                  single.get("cpu_s"))
                print(f"{arm}: measured {measured['step_s'] * 1e3:.1f} ms, "
                      f"predicted {parts.pop('predicted') * 1e3:.1f} ms")
                print("   " + ", ".join(
                    f"{k} {v * 1e3:.1f}" if k not in ("cores", "compute_loss",
                                                      "compute_cpu_loss",
                                                      "link_busy_in_backward")
                    else f"{k} {v:.2f}" for k, v in parts.items() if v is not None))


if __name__ == "__main__":
    main()
