"""tfps-plan / python -m tf_ps_ops.plan: the plan and its predicted scaling, without a
cluster.

    tfps-plan vgg16 --workers 8 --batch-size 32 --gbps 25 --latency-us 50
    tfps-plan layers.json --workers 16 --batch-size 64 --workers-per-host 8 --scaling
    tfps-plan --zoo dlrm --modes sum,ps --scaling

MODEL is a built-in layer list (resnet50, vgg16, bert-large, zoo-bert, zoo-dlrm), a
layer-list JSON file, or a saved Keras model (.keras / .h5; needs TensorFlow); --zoo NAME
is the benchmark zoo's model with its batch size and optimizer. The cost model is the
one `DistributedOptimizer(plan="auto")` and `sfb.convert(mode="auto")` use.
"""

import argparse
import dataclasses
import os
import sys

from tf_ps_ops.plan import cost, layers as layer_lists, planner, steptime

SCALING_WORKERS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def load_layers(source):
    if source.lower() in layer_lists.BUILTIN:
        return layer_lists.builtin(source)
    if not os.path.exists(source):
        raise SystemExit(f"tfps-plan: {source!r} is neither a built-in layer list "
                         f"({', '.join(layer_lists.BUILTIN)}) nor a file")
    if source.endswith(".json"):
        with open(source) as f:
            return layer_lists.from_json(f.read())
    import keras  # a saved model: needs TensorFlow

    return layer_lists.from_keras(keras.models.load_model(source, compile=False))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tfps-plan", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?",
                   help="resnet50 | vgg16 | bert-large | zoo-bert | zoo-dlrm | FILE.json | "
                        "saved model")
    p.add_argument("--zoo", choices=sorted(layer_lists.ZOO),
                   help="the benchmark zoo's model, batch size and optimizer")
    p.add_argument("--workers", type=int, default=8, help="workers (P1)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="examples per worker and step (default 32, or the zoo's)")
    p.add_argument("--modes", default="sum,sfb",
                   help="modes the plan may pick, comma-separated: sum (embeddings: gather "
                        "or sum dense), sfb, ps")
    p.add_argument("--momentum", action="store_true", default=None,
                   help="the optimizer keeps slots every row's update moves (momentum, "
                        "Adam): PS sends embeddings dense")
    p.add_argument("--step-rows", action="append", default=[], metavar="LAYER=ROWS",
                   help="an embedding's gradient rows per worker and step (measured)")
    p.add_argument("--gbps", type=float, default=10.0, help="link rate per direction, Gbit/s")
    p.add_argument("--latency-us", type=float, default=50.0, help="round trip, microseconds")
    p.add_argument("--workers-per-host", type=int, default=1)
    p.add_argument("--servers-per-host", type=int, default=1)
    p.add_argument("--dedicated-servers", type=int, default=0,
                   help="server machines apart from the workers (0: on the worker hosts)")
    p.add_argument("--no-hierarchical", action="store_true")
    p.add_argument("--tmacs", type=float, default=5.0,
                   help="forward multiply-adds per second of one worker, in 10^12")
    p.add_argument("--rebuild-gmacs", type=float, default=15.0,
                   help="SFB rebuild rate, 10^9 multiply-adds per second")
    p.add_argument("--rebuild-fixed-ns", type=float, default=0.0,
                   help="SFB rebuild's cost per element of the result and worker, "
                        "whatever the factor rows, ns (this plugin's CPU rebuild: ~1-2)")
    p.add_argument("--local-gbytes", type=float, default=5.0,
                   help="hierarchical local sum, GB/s per local peer (5: shared memory and "
                        "a CPU add; NVLink GPUs: ~150)")
    p.add_argument("--partition-us", default=None, metavar="WORKER,SERVER",
                   help="PS mode's sparse tables: CPU per partition of a table and worker "
                        "each step, on the worker and on its server, microseconds (default "
                        f"{cost.PARTITION_CPU * 1e6:g},{cost.SERVER_PARTITION_CPU * 1e6:g}: "
                        "benchmarks/ps_sparse_partitions.py here)")
    p.add_argument("--codecs", default="none",
                   help="codecs the plan may pick, comma-separated (none,fp16,bf16,int8,onebit)")
    p.add_argument("--pin", action="append", default=[], metavar="LAYER=CHOICE",
                   help="keep a choice: fc6=sfb, conv1=sum+int8, partition_bytes=4194304")
    p.add_argument("--scaling", action="store_true",
                   help="predicted step time and scaling efficiency for 2..1024 workers")
    p.add_argument("--rows", type=int, default=40, help="largest layers shown (0: all)")
    args = p.parse_args(argv)
    if (args.model is None) == (args.zoo is None):
        p.error("give a MODEL or --zoo NAME (one of them)")
    zoo = layer_lists.ZOO.get(args.zoo, {})
    if args.batch_size is None:
        args.batch_size = zoo.get("batch_size", 32)
    if args.momentum is None:  # else the layer list's own (JSON "row_update")
        args.momentum = zoo.get("momentum")
    args.model = args.model or "zoo-" + args.zoo
    return args


def sparse_settings(layers, momentum, step_rows_items):
    """The layers with the user's rows per step and, unless `momentum` is None (keep each
    layer's own), whether the optimizer updates embeddings by rows (no momentum)."""
    given = {}
    for name, value in _pairs(step_rows_items, "--step-rows", "LAYER=ROWS"):
        if not value.isdigit():
            raise SystemExit(f"tfps-plan: --step-rows {name}={value}: ROWS is a row count")
        given[name] = int(value)
    embeddings = {layer.name for layer in layers if layer.sparse}
    for name in given:
        if name not in embeddings:
            raise SystemExit(f"tfps-plan: --step-rows {name}: not an embedding with a sparse "
                             f"gradient; those: {', '.join(sorted(embeddings)) or 'none'}")
    out = []
    for layer in layers:
        if layer.sparse:
            layer = dataclasses.replace(
                layer, step_rows=given.get(layer.name, layer.step_rows),
                row_update=layer.row_update if momentum is None else not momentum)
        out.append(layer)
    return out


def _pairs(items, flag, form):
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"tfps-plan: {flag} {item!r}: use {form}")
        yield name, value


def _pins(items):
    return {name: int(value) if name in ("partition_bytes", "fusion_bytes", "credit")
            else value for name, value in _pairs(items, "--pin", "LAYER=CHOICE")}


def scaling_table(layers, batch_size, machine, cluster_args, codecs, pins,
                  workers_list=SCALING_WORKERS, modes=planner.MODES_AUTO):
    """Rows (workers, hierarchical, step ms, scaling efficiency, default step ms,
    "name=mode" of each embedding)."""
    single = cost.Cluster(1, **{k: v for k, v in cluster_args.items()
                                if k in ("bandwidth", "latency")})
    one, _ = steptime.step_time(layers, [cost.default_choice(layer) for layer in layers], single,
                                machine, batch_size)
    rows = []
    for workers in workers_list:
        for hierarchical in (True, False):
            cluster = cost.Cluster(workers, hierarchical=hierarchical, **cluster_args)
            plan = planner.make_plan(layers, cluster, batch_size, machine, codecs,
                                     modes=modes, pins=pins)
            sparse = " ".join(f"{layer.name}={choice}" for layer, choice
                              in zip(plan.layers, plan.choices) if layer.sparse)
            rows.append((workers, hierarchical, plan.step_time, one / plan.step_time,
                         plan.default_step_time, sparse))
    return rows


def _partition_cpu(text):
    """--partition-us WORKER,SERVER -> the Machine fields, seconds."""
    if text is None:
        return {}
    try:
        worker, server = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"tfps-plan: --partition-us {text!r}: give two numbers, "
                         f"WORKER,SERVER, e.g. 4.9,5.3")
    if worker < 0 or server < 0:
        raise SystemExit(f"tfps-plan: --partition-us {text!r}: microseconds must be >= 0")
    return dict(partition_cpu=worker * 1e-6, server_partition_cpu=server * 1e-6)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    layers = sparse_settings(load_layers(args.model), args.momentum, args.step_rows)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    for mode in modes:
        if mode not in (cost.SUM, cost.SFB, cost.PS_DENSE):
            raise SystemExit(f"tfps-plan: --modes {mode!r}: use some of sum, sfb, ps")
    machine = cost.Machine(macs_per_s=args.tmacs * 1e12, rebuild_rate=args.rebuild_gmacs * 1e9,
                           rebuild_per_element=args.rebuild_fixed_ns * 1e-9,
                           local_per_byte=1 / (args.local_gbytes * 1e9),
                           **_partition_cpu(args.partition_us))
    cluster_args = dict(workers_per_host=args.workers_per_host,
                        servers_per_host=args.servers_per_host,
                        dedicated_servers=args.dedicated_servers,
                        bandwidth=args.gbps * 1e9 / 8, latency=args.latency_us * 1e-6)
    codecs = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    for codec in codecs:
        if codec not in cost.CODECS:
            raise SystemExit(f"tfps-plan: codec {codec!r}: use {', '.join(cost.CODECS)}")
    pins = _pins(args.pin)
    try:
        cluster = cost.Cluster(args.workers, hierarchical=not args.no_hierarchical,
                               **cluster_args)
        plan = planner.make_plan(layers, cluster, args.batch_size, machine, codecs,
                                 modes=modes, pins=pins)
    except ValueError as error:
        raise SystemExit(f"tfps-plan: {error}")
    print(planner.format_table(plan, max_rows=args.rows or None))
    print("engine settings: " + " ".join(f"{k}={v}" for k, v in plan.environment().items()))
    if args.scaling:
        print(f"\nscaling ({args.workers_per_host} workers per host; efficiency = "
              f"1-worker step / n-worker step)")
        print("workers  hierarchical  step ms  efficiency  default step ms  embeddings")
        for workers, hier, step, eff, default, sparse in scaling_table(
                layers, args.batch_size, machine, cluster_args, codecs, pins, modes=modes):
            print(f"{workers:<7}  {'on' if hier else 'off':<12}  {step * 1e3:<7.2f}  "
                  f"{eff:<10.3f}  {default * 1e3:<15.2f}  {sparse}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
