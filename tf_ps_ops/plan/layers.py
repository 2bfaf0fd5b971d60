"""What the planner knows of a model: one `Layer` per layer with trainable weights.

Three sources, one shape: a built Keras model (`from_keras`), a layer-list JSON
(`from_json`, format in docs/plan.md), and the built-in lists of ResNet-50, VGG-16 and
BERT-large (`builtin`), computed from their published shapes (a unit test holds the
first two to keras.applications' parameter counts). No TensorFlow needed except for
`from_keras`.
"""

import dataclasses
import json
import math

DENSE, CONV, EMBEDDING, OTHER = "dense", "conv", "embedding", "other"
KINDS = (DENSE, CONV, EMBEDDING, OTHER)


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer, in forward order.

    params: trainable float32 elements (kernel, bias, scales, ...).
    kernel: (N, M) of a Dense kernel (its inputs × units), else None: only a Dense
      kernel can travel as sufficient factors.
    rows: factor rows per example (positions of a rank > 2 input; 1 for [batch, N]);
      None when unknown (a variable sequence length).
    macs: multiply-adds of the forward pass per example.
    """
    name: str
    kind: str
    params: int
    kernel: object = None
    rows: object = 1
    macs: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"layer {self.name!r}: kind {self.kind!r}; use one of {KINDS}")
        if self.params < 0:
            raise ValueError(f"layer {self.name!r}: params {self.params} < 0")

    @property
    def bytes(self):
        return 4 * self.params

    @property
    def kernel_params(self):
        return 0 if self.kernel is None else self.kernel[0] * self.kernel[1]


def dense(name, n, m, rows=1, bias=True):
    return Layer(name, DENSE, n * m + (m if bias else 0), (n, m), rows, rows * n * m)


def conv(name, kh, kw, cin, cout, out_h, out_w, bias=True):
    return Layer(name, CONV, kh * kw * cin * cout + (cout if bias else 0), None, 1,
                 out_h * out_w * kh * kw * cin * cout)


def other(name, params, macs=0.0, kind=OTHER):
    return Layer(name, kind, params, None, 1, macs)


# ---------------------------------------------------------------------------------------
# Built-in layer lists


def vgg16():
    """keras.applications.VGG16 (include_top): 138,357,544 parameters."""
    return _vgg((2, 2, 3, 3, 3), 1000)


def vgg19():
    """keras.applications.VGG19 (include_top): 143,667,240 parameters."""
    return _vgg((2, 2, 4, 4, 4), 1000)


def vgg19_22k():
    """VGG19 with a 21,841-class output (ImageNet-22K), Poseidon's VGG19-22K."""
    return _vgg((2, 2, 4, 4, 4), 21841)


def _vgg(counts, classes):
    layers, cin, size = [], 3, 224
    blocks = list(zip(counts, (64, 128, 256, 512, 512)))
    for b, (count, cout) in enumerate(blocks, start=1):
        for c in range(1, count + 1):
            layers.append(conv(f"block{b}_conv{c}", 3, 3, cin, cout, size, size))
            cin = cout
        size //= 2
    return layers + [dense("fc1", 7 * 7 * 512, 4096), dense("fc2", 4096, 4096),
                     dense("predictions", 4096, classes)]


def _bn(name, channels):
    return other(name, 2 * channels, 2 * channels)  # gamma, beta trainable


def resnet50():
    """keras.applications.ResNet50 (include_top): 25,583,592 trainable parameters
    (BatchNorm's moving statistics, not trainable, do not travel)."""
    layers = [conv("conv1_conv", 7, 7, 3, 64, 112, 112), _bn("conv1_bn", 64)]
    cin, size = 64, 56
    for stage, (blocks, width, stride) in enumerate(
            [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=2):
        size //= stride
        for b in range(1, blocks + 1):
            p = f"conv{stage}_block{b}"
            layers += [conv(f"{p}_1_conv", 1, 1, cin, width, size, size),
                       _bn(f"{p}_1_bn", width),
                       conv(f"{p}_2_conv", 3, 3, width, width, size, size),
                       _bn(f"{p}_2_bn", width)]
            last = [conv(f"{p}_3_conv", 1, 1, width, 4 * width, size, size),
                    _bn(f"{p}_3_bn", 4 * width)]
            if b == 1:  # the projection shortcut, in Keras's order
                last = [conv(f"{p}_0_conv", 1, 1, cin, 4 * width, size, size), last[0],
                        _bn(f"{p}_0_bn", 4 * width), last[1]]
            layers += last
            cin = 4 * width
    return layers + [dense("predictions", 2048, 1000)]


def bert_large(seq_len=128):
    """BERT-large (24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30522) with its
    pooler: 335,141,888 parameters. Every Dense layer sees seq_len rows per example."""
    h, ffn, s = 1024, 4096, seq_len
    layers = [other("word_embeddings", 30522 * h, 0, EMBEDDING),
              other("position_embeddings", 512 * h, 0, EMBEDDING),
              other("token_type_embeddings", 2 * h, 0, EMBEDDING),
              other("embeddings_layernorm", 2 * h, 2 * s * h)]
    for i in range(24):
        p = f"layer{i}"
        layers += [dense(f"{p}_query", h, h, s), dense(f"{p}_key", h, h, s),
                   dense(f"{p}_value", h, h, s),
                   # scores q·kᵀ and the weighted sum of values: 2·s²·h per example
                   other(f"{p}_attention", 0, 2 * s * s * h),
                   dense(f"{p}_attention_output", h, h, s),
                   other(f"{p}_attention_layernorm", 2 * h, 2 * s * h),
                   dense(f"{p}_intermediate", h, ffn, s), dense(f"{p}_output", ffn, h, s),
                   other(f"{p}_output_layernorm", 2 * h, 2 * s * h)]
    return [layer for layer in layers if layer.params or layer.macs] + [
        dense("pooler", h, h, 1)]


BUILTIN = {"resnet50": resnet50, "vgg16": vgg16, "vgg19": vgg19, "vgg19-22k": vgg19_22k,
           "bert-large": bert_large}


def builtin(name):
    try:
        return BUILTIN[name.lower()]()
    except KeyError:
        raise ValueError(f"no built-in layer list {name!r}; use one of "
                         f"{', '.join(BUILTIN)} or a layer-list JSON file") from None


# ---------------------------------------------------------------------------------------
# Layer-list JSON


def from_json(source):
    """Layers from a JSON text or a parsed object: a list of layers, or {"layers": [...]}.
    Each layer: {"name", "kind", "params"?, "kernel"?: [N, M], "bias"?: true,
    "rows"?: 1 | null, "macs"?: per example}; a Dense layer's params default to its
    kernel plus bias."""
    data = json.loads(source) if isinstance(source, str) else source
    items = data["layers"] if isinstance(data, dict) else data
    layers = []
    for index, item in enumerate(items):
        where = f"layer {index} ({item.get('name', '?')!r})"
        try:
            kind = item.get("kind", DENSE if "kernel" in item else OTHER)
            kernel = tuple(int(d) for d in item["kernel"]) if item.get("kernel") else None
            if kind == DENSE and kernel is None:
                raise ValueError("a dense layer needs \"kernel\": [N, M]")
            params = item.get("params")
            if params is None:
                if kernel is None:
                    raise ValueError("needs \"params\"")
                params = kernel[0] * kernel[1] + (kernel[1] if item.get("bias", True) else 0)
            rows = item.get("rows", 1)
            macs = item.get("macs")
            if macs is None:
                macs = (rows or 1) * kernel[0] * kernel[1] if kernel else 0.0
            layers.append(Layer(str(item["name"]), kind, int(params),
                                kernel if kind == DENSE else None,
                                None if rows is None else int(rows), float(macs)))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"layer list, {where}: {error}") from None
    return layers


def to_json(layers):
    return json.dumps({"layers": [
        {k: v for k, v in dataclasses.asdict(layer).items() if v is not None or k == "rows"}
        for layer in layers]}, indent=1)


# ---------------------------------------------------------------------------------------
# Keras models


def _flatten(model, keras_module):
    for layer in model.layers:
        if isinstance(layer, keras_module.Model):
            yield from _flatten(layer, keras_module)
        else:
            yield layer


def _shape(tensor_owner, attribute):
    try:
        return list(getattr(tensor_owner, attribute).shape)
    except (AttributeError, ValueError, RuntimeError):
        return None


def _rows(layer):
    shape = _shape(layer, "input")
    if shape is None:
        return 1  # not called symbolically: assume [batch, N]
    middle = shape[1:-1]
    return None if any(d is None for d in middle) else math.prod(middle)


def keras_layer(layer, keras_module):
    """The Layer of one Keras layer, or None when it trains nothing."""
    weights = list(layer.trainable_weights)
    if not weights:
        return None
    params = sum(math.prod(int(d) for d in w.shape) for w in weights)
    if isinstance(layer, keras_module.layers.Dense) and len(layer.kernel.shape) == 2:
        n, m = (int(d) for d in layer.kernel.shape)
        rows = _rows(layer)
        return Layer(layer.name, DENSE, params, (n, m), rows, (rows or 1) * n * m)
    if isinstance(layer, keras_module.layers.Embedding):
        return Layer(layer.name, EMBEDDING, params, None, 1, 0.0)
    kernel = getattr(layer, "kernel", None)
    out = _shape(layer, "output")
    if isinstance(layer, keras_module.layers.Conv2D) or (kernel is not None and out):
        positions = math.prod(d for d in (out or [1])[1:-1] if d) or 1
        return Layer(layer.name, CONV, params, None, 1,
                     float(positions * math.prod(int(d) for d in kernel.shape)))
    return Layer(layer.name, OTHER, params, None, 1, float(params))


def from_keras(model):
    """The layers of a built Keras 3 or tf_keras model (nested models flattened), in
    model order."""
    from tf_ps_ops.training.keras_flavor import is_tf_keras

    if is_tf_keras(model):
        import tf_keras as keras_module  # the model is a tf_keras one: the package is there
    else:
        import keras as keras_module
    if not model.built:
        raise ValueError("the model is not built: give it an Input or call it once")
    found = (keras_layer(layer, keras_module) for layer in _flatten(model, keras_module))
    return [layer for layer in found if layer is not None]
