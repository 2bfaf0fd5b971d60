"""tfps-plan / python -m tf_ps_ops.plan: the plan and its predicted scaling, without a
cluster.

    tfps-plan vgg16 --workers 8 --batch-size 32 --gbps 25 --latency-us 50
    tfps-plan layers.json --workers 16 --batch-size 64 --workers-per-host 8 --scaling

MODEL is a built-in layer list (resnet50, vgg16, bert-large), a layer-list JSON file, or a
saved Keras model (.keras / .h5; needs TensorFlow). The cost model is the one
`DistributedOptimizer(plan="auto")` and `sfb.convert(mode="auto")` use.
"""

import argparse
import os
import sys

from tf_ps_ops.plan import cost, layers as layer_lists, planner

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
    p.add_argument("model", help="resnet50 | vgg16 | bert-large | FILE.json | saved model")
    p.add_argument("--workers", type=int, default=8, help="workers (P1)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per worker and step")
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
    p.add_argument("--local-gbytes", type=float, default=5.0,
                   help="hierarchical local sum, GB/s per local peer (5: shared memory and "
                        "a CPU add; NVLink GPUs: ~150)")
    p.add_argument("--codecs", default="none",
                   help="codecs the plan may pick, comma-separated (none,fp16,bf16,int8,onebit)")
    p.add_argument("--pin", action="append", default=[], metavar="LAYER=CHOICE",
                   help="keep a choice: fc6=sfb, conv1=sum+int8, partition_bytes=4194304")
    p.add_argument("--scaling", action="store_true",
                   help="predicted step time and scaling efficiency for 2..1024 workers")
    p.add_argument("--rows", type=int, default=40, help="largest layers shown (0: all)")
    return p.parse_args(argv)


def _pins(items):
    pins = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"tfps-plan: --pin {item!r}: use LAYER=CHOICE")
        pins[name] = int(value) if name in ("partition_bytes", "fusion_bytes", "credit") \
            else value
    return pins


def scaling_table(layers, batch_size, machine, cluster_args, codecs, pins,
                  workers_list=SCALING_WORKERS):
    """Rows (workers, hierarchical, step ms, scaling efficiency, default step ms)."""
    single = cost.Cluster(1, **{k: v for k, v in cluster_args.items()
                                if k in ("bandwidth", "latency")})
    one, _ = cost.step_time(layers, [cost.Choice()] * len(layers), single, machine,
                            batch_size)
    rows = []
    for workers in workers_list:
        for hierarchical in (True, False):
            cluster = cost.Cluster(workers, hierarchical=hierarchical, **cluster_args)
            plan = planner.make_plan(layers, cluster, batch_size, machine, codecs, pins=pins)
            rows.append((workers, hierarchical, plan.step_time, one / plan.step_time,
                         plan.default_step_time))
    return rows


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    layers = load_layers(args.model)
    machine = cost.Machine(macs_per_s=args.tmacs * 1e12, rebuild_rate=args.rebuild_gmacs * 1e9,
                           local_per_byte=1 / (args.local_gbytes * 1e9))
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
        plan = planner.make_plan(layers, cluster, args.batch_size, machine, codecs, pins=pins)
    except ValueError as error:
        raise SystemExit(f"tfps-plan: {error}")
    print(planner.format_table(plan, max_rows=args.rows or None))
    print("engine settings: " + " ".join(f"{k}={v}" for k, v in plan.environment().items()))
    if args.scaling:
        print(f"\nscaling ({args.workers_per_host} workers per host; efficiency = "
              f"1-worker step / n-worker step)")
        print("workers  hierarchical  step ms  efficiency  default step ms")
        for workers, hier, step, eff, default in scaling_table(
                layers, args.batch_size, machine, cluster_args, codecs, pins):
            print(f"{workers:<7}  {'on' if hier else 'off':<12}  {step * 1e3:<7.2f}  "
                  f"{eff:<10.3f}  {default * 1e3:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
