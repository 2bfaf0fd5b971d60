"""Convergence on scikit-learn's digits with each gradient codec (issue 14), 3 workers and 2
servers on this host: held-out accuracy per epoch for uncompressed, fp16, bf16, int8,
onebit and topk:0.01 with and without error feedback, and PS mode (tf_ps_ops.optimizers.SGD)
with int8 gradient pushes, all in one job, from the same start and data order
(benchmarks/compression_convergence_worker.py).

    python benchmarks/compression_convergence.py                 # 40 epochs
    python benchmarks/compression_convergence.py --epochs 10     # what the test runs

Writes results/compression/convergence.json (every curve), convergence.png (accuracy
curves; onebit and topk with and without error feedback next to the others) and
convergence.md (the table). The test with the bounds is
tests/multiprocess/test_compression_convergence.py.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "compression_convergence_worker.py"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--results-dir", default=str(HERE / "results" / "compression"))
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--ps-compression", default="int8",
                        help="TFPS_COMPRESSION of the job: only the PS-mode run "
                             "(ps:job-default) takes it, the others name their codec")
    return parser.parse_args()


def run(args):
    command = [sys.executable, "-m", "tf_ps_ops.run", "-np", str(args.workers),
               "-ns", str(args.servers), sys.executable, str(WORKER),
               "--epochs", str(args.epochs), "--lr", str(args.lr),
               "--momentum", str(args.momentum)]
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
               TFPS_COMPRESSION=args.ps_compression)
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=args.timeout)
    if done.returncode != 0:
        sys.exit(f"the run failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                 f"{done.stderr[-4000:]}")
    results = []
    for line in done.stdout.splitlines():
        if "RESULT " in line:
            results.append(json.loads(line.split("RESULT ", 1)[1]))
    return f"TFPS_COMPRESSION={args.ps_compression} " + " ".join(command[2:]), results


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"none": ("black", "-"), "fp16": ("tab:blue", ":"), "bf16": ("tab:cyan", ":"),
              "int8": ("tab:green", "--"), "onebit": ("tab:red", "-"),
              "onebit-noef": ("tab:red", "--"), "topk:0.01": ("tab:purple", "-"),
              "topk:0.01-noef": ("tab:purple", "--"), "ps:job-default": ("tab:orange", "-.")}
    for r in results:
        color, style = styles.get(r["setting"], ("grey", "-"))
        label = r["setting"].replace("-noef", " without error feedback").replace(
            "ps:job-default", f"PS mode, {r.get('compression')} pushes")
        epochs = range(1, len(r["accuracy"]) + 1)
        ax.plot(epochs, r["accuracy"], color=color, linestyle=style, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0.5, 1.0)
    ax.grid(alpha=0.3)
    ax.set_title("digits MLP (64-256-128-10), 3 workers, SGD: accuracy per codec")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(results):
    base = next(r for r in results if r["setting"] == "none")
    lines = ["| setting | final accuracy | vs none (points) | best | mean over epochs | "
             "bytes sent per worker | vs none |", "|---|---|---|---|---|---|---|"]
    for r in results:
        acc = r["accuracy"]
        lines.append(f"| {r['setting']} | {acc[-1]:.4f} | {100 * (acc[-1] - base['accuracy'][-1]):+.1f} "
                     f"| {max(acc):.4f} | {sum(acc) / len(acc):.4f} | {r['bytes_sent']:,} | "
                     f"{r['bytes_sent'] / base['bytes_sent']:.3f} |")
    return "\n".join(lines)


def main():
    args = parse_args()
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    command, results = run(args)
    (out / "convergence.json").write_text(json.dumps(
        dict(command=command, epochs=args.epochs, results=results), indent=1))
    plot(results, out / "convergence.png")
    text = table(results)
    (out / "convergence.md").write_text(
        f"`python benchmarks/compression_convergence.py --epochs {args.epochs}`\n\n"
        f"({command})\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
