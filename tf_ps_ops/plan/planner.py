"""The plan: a mode and codec per layer, and the engine's partition size, fusion and
credit, chosen with the cost model (cost.py), with the user's pins kept.

Per layer the planner takes the allowed choice that keeps the link and the CPUs busy
least (SFB only for Dense kernels with known rows; codecs only where allowed, since a
lossy codec changes the training result; for an embedding, gathering its rows or
summing it dense, and PS where allowed); then it searches partition size × fusion ×
credit for the least predicted step time. The result is never predicted slower than the
default configuration (every layer summed uncompressed, embeddings' rows gathered, the
default knobs): if it would be, the default is the plan.

Near-ties go to the default. Every mechanism a plan mixes in (a layer's factors
broadcast, its update on the servers) has fixed costs the model does not count, and
a mixed plan of the DLRM-like model that the model put within 1% of summing everything
ran 4-19% slower than summation in each of 3 repeats (docs/plan.md). So a departure from
a layer's default is kept only while the plan without it stays more than KEEP_GAIN
slower, and a plan other than the default must be predicted at least MIN_GAIN faster
than it.
"""

import dataclasses
import itertools

from tf_ps_ops.plan import cost, steptime
from tf_ps_ops.plan.cost import GATHER, PS_DENSE, SFB, SUM, Choice
from tf_ps_ops.plan.steptime import Settings

MODES_AUTO = (SUM, SFB)
MIN_GAIN = 0.02    # a plan must be predicted this much faster than the default
KEEP_GAIN = 0.005  # reverting the plan's small departures may cost this much in all
PARTITIONS = (1 << 18, 1 << 20, 4 << 20, 16 << 20)
FUSIONS = (0, 1 << 16, 1 << 18, 1 << 20)
CREDITS = (0, 1 << 20, 4 << 20, 16 << 20)
PAIR_LAYERS = 4  # the largest layers whose choices _refine also changes two at a time


@dataclasses.dataclass(frozen=True)
class Plan:
    layers: tuple
    choices: tuple          # one cost.Choice per layer
    settings: Settings
    cluster: cost.Cluster
    batch_size: int
    step_time: float        # predicted seconds per step
    layer_times: tuple      # seconds from a layer's gradient to its parameters back
    default_step_time: float
    pinned: frozenset = frozenset()

    def choice(self, name):
        return {layer.name: c for layer, c in zip(self.layers, self.choices)}[name]

    def environment(self):
        """The engine settings as the environment variables that set them."""
        return {"TFPS_PARTITION_BYTES": str(self.settings.partition_bytes),
                "TFPS_FUSION_BYTES": str(self.settings.fusion_bytes),
                "TFPS_SCHEDULING_CREDIT": str(self.settings.credit)}


def _candidates(layer, allowed_codecs, modes, ps_codecs=None):
    """The choices the planner weighs for `layer`. ps_codecs: the codecs PS mode may use
    (default: the allowed ones)."""
    out = [Choice(GATHER)] if layer.sparse and SUM in modes else []
    if SUM in modes:
        out += [Choice(SUM, codec) for codec in allowed_codecs]
    if SFB in modes and layer.kind == "dense" and layer.kernel is not None and \
            layer.rows is not None:
        out.append(Choice(SFB))
    if PS_DENSE in modes:  # an embedding's rows travel uncompressed
        out += [Choice(PS_DENSE, codec) for codec in allowed_codecs
                if ps_codecs is None or codec in ps_codecs
                if codec == "none" or not (layer.sparse and layer.row_update)]
    return out or [cost.default_choice(layer)]


def _busy(layer, choice, cluster, machine, batch_size, settings):
    c = cost.layer_cost(layer, choice, cluster, machine, batch_size, settings.partition_bytes)
    return (c.link_bytes / cluster.bandwidth + c.messages * machine.message_overhead
            + c.cpu_before + c.cpu_after)


def choose_layer(layer, cluster, machine, batch_size, settings, allowed_codecs=("none",),
                 modes=(SUM, SFB), ps_codecs=None):
    """The candidate with the least busy time (link + CPU); ties keep the first (sum)."""
    return min(_candidates(layer, allowed_codecs, modes, ps_codecs),
               key=lambda c: _busy(layer, c, cluster, machine, batch_size, settings))


def _pins(layers, pins):
    names = {layer.name for layer in layers}
    parsed = {}
    for name, value in (pins or {}).items():
        if name in ("partition_bytes", "fusion_bytes", "credit"):
            continue
        if name not in names:
            raise ValueError(f"pin for layer {name!r}: the model has no such layer with "
                             f"trainable weights; its layers: {', '.join(sorted(names))}")
        choice = value if isinstance(value, Choice) else cost.parse_choice(value)
        layer = next(layer for layer in layers if layer.name == name)
        if choice.mode == SFB and (layer.kernel is None or layer.rows is None):
            raise ValueError(f"pin {name!r}: 'sfb' needs a Dense layer with known rows per "
                             f"example; {name!r} is a {layer.kind} layer")
        if choice.mode == PS_DENSE and choice.codec != "none" and layer.sparse and \
                layer.row_update:
            raise ValueError(f"pin {name!r}: PS mode sends an embedding updated by rows "
                             f"uncompressed; pin 'ps' (or 'sum+{choice.codec}', dense)")
        if choice.mode == GATHER and not layer.sparse:
            raise ValueError(f"pin {name!r}: 'gather' applies to an embedding whose "
                             f"gradient is a tf.IndexedSlices; {name!r} is a {layer.kind} "
                             f"layer: use sum or ps")
        parsed[name] = choice
    return parsed


def make_plan(layers, cluster, batch_size, machine=cost.Machine(), allowed_codecs=("none",),
              modes=MODES_AUTO, pins=None, ps_codecs=None):
    """The Plan for `layers` on `cluster`. pins: {layer name: 'sum' | 'sfb' | 'ps' |
    'sum+int8' ..., and optionally 'partition_bytes' / 'fusion_bytes' / 'credit': int}.
    ps_codecs: the codecs PS mode may use (default: allowed_codecs)."""
    layers = tuple(layers)
    pins = dict(pins or {})
    fixed = _pins(layers, pins)
    default = Settings()
    default_choices = tuple(fixed.get(layer.name, cost.default_choice(layer))
                            for layer in layers)
    default_time, default_layers = steptime.step_time(layers, default_choices, cluster, machine,
                                                      batch_size, default)
    best = None
    grid = itertools.product(
        [pins["partition_bytes"]] if "partition_bytes" in pins else PARTITIONS,
        [pins["fusion_bytes"]] if "fusion_bytes" in pins else FUSIONS,
        [pins["credit"]] if "credit" in pins else CREDITS)
    # The default settings first: on a tie (strict < below) the plan keeps them.
    grid = sorted(grid, key=lambda g: g != (default.partition_bytes, default.fusion_bytes,
                                            default.credit))
    by_partition = {}  # a layer's choice depends on the partition size only
    for partition, fusion, credit in grid:
        settings = Settings(int(partition), int(fusion), int(credit))
        if settings.partition_bytes not in by_partition:
            by_partition[settings.partition_bytes] = tuple(
                fixed.get(layer.name) or choose_layer(
                    layer, cluster, machine, batch_size, settings, allowed_codecs, modes,
                    ps_codecs)
                for layer in layers)
        choices = by_partition[settings.partition_bytes]
        time, per_layer = steptime.step_time(layers, choices, cluster, machine, batch_size,
                                             settings)
        if best is None or time < best[0] - 1e-12:
            best = (time, choices, settings, per_layer)
    best = _refine(layers, cluster, machine, batch_size, best, fixed, allowed_codecs, modes,
                   ps_codecs)
    best = _simplify(layers, cluster, machine, batch_size, best, fixed)
    if best[0] > default_time * (1 - MIN_GAIN):
        best = (default_time, default_choices, default, default_layers)
    time, choices, settings, per_layer = best
    return Plan(layers, choices, settings, cluster, batch_size, time,
                tuple(t for _, t in per_layer), default_time, frozenset(pins))


def _refine(layers, cluster, machine, batch_size, best, fixed, allowed_codecs, modes,
            ps_codecs=None, passes=2):
    """Coordinate descent on the timeline: the per-layer choice above adds link and CPU
    time, but on the timeline they overlap; try each layer's other candidates under the
    best settings and keep what shortens the predicted step. Then the PAIR_LAYERS largest
    layers two at a time, where one change alone does not pay but two do (two layers'
    SFB rebuilds queue on the CPU one after another: trading one for a codec frees it)."""
    time, choices, settings, per_layer = best
    choices = list(choices)
    free = [i for i, layer in enumerate(layers) if layer.name not in fixed]
    options = {i: _candidates(layers[i], allowed_codecs, modes, ps_codecs) for i in free}
    largest = sorted(free, key=lambda i: -layers[i].bytes)[:PAIR_LAYERS]
    moves = [[(i, c)] for i in free for c in options[i]]
    pairs = [[(i, a), (j, b)] for i, j in itertools.combinations(largest, 2)
             for a in options[i] for b in options[j]]
    for group in (moves, pairs):
        for _ in range(passes):
            improved = False
            for move in group:
                if all(choices[i] == c for i, c in move):
                    continue
                trial = list(choices)
                for i, c in move:
                    trial[i] = c
                t, trial_layers = steptime.step_time(layers, trial, cluster, machine, batch_size,
                                                     settings)
                if t < time * (1 - 1e-9):
                    time, choices, per_layer, improved = t, trial, trial_layers, True
            if not improved:
                break
    return time, tuple(choices), settings, per_layer


def _simplify(layers, cluster, machine, batch_size, best, fixed):
    """Back to each layer's default choice, smallest layers first, while the predicted
    step stays within KEEP_GAIN of `best`'s: what remains of the plan's departures is
    what earns its keep."""
    time, choices, settings, per_layer = best
    limit = time * (1 + KEEP_GAIN)
    choices = list(choices)
    order = sorted(range(len(layers)), key=lambda i: layers[i].bytes)
    for index in order:
        layer = layers[index]
        plain = cost.default_choice(layer)
        if layer.name in fixed or choices[index] == plain:
            continue
        trial = choices[:index] + [plain] + choices[index + 1:]
        t, trial_layers = steptime.step_time(layers, trial, cluster, machine, batch_size,
                                             settings)
        if t <= limit:
            time, choices, per_layer = t, trial, trial_layers
    return time, tuple(choices), settings, per_layer


def format_table(plan, max_rows=None):
    """The plan as text: layer, bytes, chosen mode, predicted synchronisation time."""
    c = plan.cluster
    servers = (f"{c.dedicated_servers} dedicated servers" if c.dedicated_servers
               else f"{c.servers_per_host} server(s) per host")
    head = [f"plan: {c.workers} workers ({c.workers_per_host} per host, {servers}, "
            f"hierarchical {'on' if c.hierarchical else 'off'}), link "
            f"{c.bandwidth * 8 / 1e9:.3g} Gbit/s, latency {c.latency * 1e6:.3g} us, "
            f"batch {plan.batch_size} per worker",
            f"partition {plan.settings.partition_bytes} B, fusion "
            f"{plan.settings.fusion_bytes} B, credit {plan.settings.credit} B; predicted "
            f"step {plan.step_time * 1e3:.2f} ms (default configuration "
            f"{plan.default_step_time * 1e3:.2f} ms)"]
    rows = [("layer", "bytes", "rows/step", "mode", "sync ms", "")]
    order = list(range(len(plan.layers)))
    if max_rows and len(order) > max_rows:
        order = sorted(order, key=lambda i: -plan.layers[i].bytes)[:max_rows]
        order.sort()
    for i in order:
        layer = plan.layers[i]
        rows.append((layer.name, str(layer.bytes), _rows_text(layer, plan.batch_size),
                     str(plan.choices[i]),
                     f"{plan.layer_times[i] * 1e3:.3f}",
                     "pinned" if layer.name in plan.pinned else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = head + ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if len(order) < len(plan.layers):
        lines.append(f"({len(plan.layers) - len(order)} smaller layers not shown)")
    return "\n".join(lines)


def _rows_text(layer, batch_size):
    """An embedding's gradient rows per worker and step, of its table's."""
    if not layer.sparse:
        return ""
    rows = layer.rows_per_step(batch_size)
    return f"{'?' if rows is None else rows}/{layer.table[0]}"
