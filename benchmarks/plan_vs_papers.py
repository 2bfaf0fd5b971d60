"""The planner's predictions beside the numbers BytePS and Poseidon report (no cluster:
the cost model only, the same code as tfps-plan and plan="auto").

    python3 benchmarks/plan_vs_papers.py          # prints the markdown tables of plan_vs_papers.md

Each setting states the papers' hardware as the cost model's inputs; what the papers do
not state (the GPUs' effective compute rate) is an assumption written next to the row.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tf_ps_ops.plan import cost, layers, planner, steptime  # noqa: E402


def efficiency(model, workers, batch, gbps, tmacs, per_host=1, dedicated=0,
               hierarchical=True, rebuild=1.5e10, modes=(cost.SUM, cost.SFB)):
    """(step s with `workers`, scaling efficiency = 1-worker step / step, plan). The GPUs
    of a machine sum locally over NVLink (assumed 150 GB/s: local_per_byte)."""
    machine = cost.Machine(macs_per_s=tmacs * 1e12, rebuild_rate=rebuild,
                           local_per_byte=1 / 150e9)
    lay = layers.builtin(model)
    one, _ = steptime.step_time(lay, [cost.Choice()] * len(lay), cost.Cluster(1), machine, batch)
    cluster = cost.Cluster(workers, per_host, 1, dedicated * max(1, workers // per_host)
                           if dedicated else 0, gbps * 1e9 / 8, 50e-6, hierarchical)
    plan = planner.make_plan(lay, cluster, batch, machine, modes=modes)
    return plan.step_time, one / plan.step_time, plan


def bert_rows():
    # BytePS README: BERT-large, V100 32GB, batch 64 per GPU, 8 GPUs per machine (NVLink),
    # 100 Gbps RDMA, mixed precision: "~90% scaling efficiency with 256 GPUs".
    # Assumed: 25e12 multiply-adds/s effective per V100 in fp16; fp16 gradients (half the
    # bytes) modelled as twice the link rate.
    out = []
    for gpus in (8, 16, 32, 64, 128, 256):
        row = [gpus]
        for dedicated in (0, 1):
            _, eff, _ = efficiency("bert-large", gpus, 64, 200, 25, per_host=8,
                                   dedicated=dedicated)
            row.append(eff)
        out.append(row)
    return out


def tcp_rows():
    # BytePS docs/performance.md: V100 16GB, batch 64 per GPU, 8 GPUs per machine (NVLink),
    # 20 Gbps TCP, fp32: "BytePS outperforms Horovod (NCCL) by 44% for Resnet50, and 100%
    # for VGG16". Horovod-NCCL's traffic per host = all-reduce's = colocated summation with
    # hierarchical aggregation (k = 0); BytePS with as many CPU server machines (k = n):
    # M per host. Assumed: 4.5e12 multiply-adds/s effective per V100 in fp32.
    out = []
    for model in ("resnet50", "vgg16"):
        for gpus in (16, 32, 64):
            t_k0, _, _ = efficiency(model, gpus, 64, 20, 4.5, per_host=8)
            t_kn, _, _ = efficiency(model, gpus, 64, 20, 4.5, per_host=8, dedicated=1)
            out.append([model, gpus, t_k0 / t_kn - 1])
    return out


def poseidon_rows():
    # Poseidon (ATC'17) abstract: "15.5x speed-up on 16 single-GPU machines, even with
    # limited bandwidth (10GbE) and the challenging VGG19-22K network"; its release notes:
    # "near-linear speedup (30x on 32 nodes)" for VGG19-22K (link rate not stated there).
    # Batch 32 per node. Assumed: 2e12 multiply-adds/s effective per Titan X; SFB's rebuild
    # on the GPU (1e12 multiply-adds/s) as in Poseidon, or on our CPU rebuild (1.5e10/s).
    out = []
    for nodes, gbps in ((16, 10), (32, 10), (32, 40)):
        row = [nodes, gbps]
        for rebuild, modes in ((1e12, (cost.SUM, cost.SFB)), (1.5e10, (cost.SUM, cost.SFB)),
                               (1.5e10, (cost.SUM,))):
            _, eff, plan = efficiency("vgg19-22k", nodes, 32, gbps, 2, rebuild=rebuild,
                                      modes=modes)
            row.append((nodes * eff, sum(c.mode == cost.SFB for c in plan.choices)))
        out.append(row)
    return out


def main():
    print("BERT-large, 8 GPUs per machine, 100 Gbps, batch 64, fp16 gradients")
    print("| GPUs | predicted efficiency, servers on the GPU machines | with as many CPU "
          "server machines |")
    print("|---|---|---|")
    for gpus, colocated, dedicated in bert_rows():
        print(f"| {gpus} | {colocated:.1%} | {dedicated:.1%} |")
    print("\nResNet-50 / VGG-16, 8 GPUs per machine, 20 Gbps TCP, batch 64, fp32")
    print("| model | GPUs | predicted gain of k = n CPU servers over all-reduce traffic |")
    print("|---|---|---|")
    for model, gpus, gain in tcp_rows():
        print(f"| {model} | {gpus} | {gain:+.0%} |")
    print("\nVGG19-22K, one GPU per machine, batch 32")
    print("| machines | Gbit/s | speedup, SFB rebuilt on GPU | SFB rebuilt on CPU | "
          "summation only |")
    print("|---|---|---|---|---|")
    for nodes, gbps, *cells in poseidon_rows():
        text = " | ".join(f"{s:.1f}× ({n} SFB layers)" for s, n in cells)
        print(f"| {nodes} | {gbps} | {text} |")


if __name__ == "__main__":
    main()
