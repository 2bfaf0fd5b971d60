"""When a model's gradients are ready in its real training step (cost model Layer.ready).

The cost model places a layer's gradient at the layer's position in backward unless told
otherwise. TensorFlow does not always hand gradients over in that order: with one inter-op
thread its executor follows the input-gradient chain down to the first layer and only then
computes most convolutions' filter gradients, so most of a CNN's bytes are ready at the
end of backward, where the link's time cannot hide behind it (ResNet-50 at 1 Gbit/s: 44
of its 94 MB of gradients handed over in the last 6% of the time from its first gradient
to its last). A stand-in step does not reproduce the order either (a plain loss on the
same model ran the classifier's gradient last; training ran it first), so the order
comes from the engine's timeline of a few real steps (tf_ps_ops.start_timeline).
"""


def apply(layers, ready):
    """`layers` with Layer.ready set from `ready` (from_timeline's list; a layer it could
    not place, None, takes the ready time of the layer after it, which backward reaches
    first); unchanged when there is no list or it does not match the layers."""
    import dataclasses

    if not ready or len(ready) != len(layers) or all(r is None for r in ready):
        return layers
    filled, later = [], 1.0
    for value in reversed(ready):
        later = later if value is None else float(value)
        filled.append(later)
    filled.reverse()
    return [dataclasses.replace(layer, ready=value) for layer, value in zip(layers, filled)]


def from_timeline(path, layers, layer_of, skip=1):
    """Per layer, when its gradient was ready in the steps an engine timeline recorded
    (tf_ps_ops.start_timeline): the real step's order, which a stand-in step does not
    always reproduce (TensorFlow ran ResNet-50's classifier gradient first in training
    and last in a plain step), as fractions of backward. The timeline knows the
    handovers, not where backward starts: the first is placed where the cost model
    places its layer (backward down to it), the last at the end of backward, the rest in
    proportion. layer_of(tensor name) -> the layer's name or None; a layer with several
    tensors (a kernel and its bias) is ready when its largest is. None when the timeline
    holds no full step."""
    import json
    import statistics

    from tf_ps_ops.plan import cost, steptime

    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"]
                  if e.get("ph") == "X" and e.get("name") == "queued"]
    calls, sizes = {}, {}
    for event in sorted(events, key=lambda e: e["ts"]):
        calls.setdefault(event["args"]["tensor"], []).append(event["ts"])
        sizes[event["args"]["tensor"]] = event["args"].get("bytes", 0)
    steps = max((len(times) for times in calls.values()), default=0)
    every = {t: times for t, times in calls.items() if len(times) == steps}
    if steps <= skip or len(every) < 2:
        return None
    index = {layer.name: i for i, layer in enumerate(layers)}
    # Shares of backward, which the batch size does not change.
    _, backward = steptime.compute_times(layers, cost.Machine(macs_per_s=1.0), 1)
    total = sum(backward)
    fractions = {}
    for step in range(skip, steps):
        times = {t: every[t][step] for t in every}
        first_tensor = min(times, key=times.get)
        first, last = times[first_tensor], max(times.values())
        if last <= first or total <= 0:
            continue
        j = index.get(layer_of(first_tensor))
        start = sum(backward[j:]) / total if j is not None else 0.0
        for tensor, t in times.items():
            fractions.setdefault(tensor, []).append(
                start + (1 - start) * (t - first) / (last - first))
    ready, largest = [None] * len(layers), [-1] * len(layers)
    for tensor, values in fractions.items():
        i = index.get(layer_of(tensor))
        if i is not None and sizes[tensor] > largest[i]:
            ready[i], largest[i] = statistics.median(values), sizes[tensor]
    return ready if any(r is not None for r in ready) else None
