"""What the planner knows of a model: one `Layer` per layer with trainable weights.

Three sources, one shape: a built Keras model (`from_keras`), a layer-list JSON
(`from_json`, format in docs/plan.md), and the built-in lists of ResNet-50, VGG-16,
BERT-large and the benchmark zoo's BERT and DLRM (`builtin`), computed from their
published shapes (unit tests hold them to the Keras models' parameter counts). No
TensorFlow needed except for `from_keras`.

An embedding's gradient is a tf.IndexedSlices: one row per lookup (duplicates included),
so what travels depends on the rows a worker touches per step, not on the table's size.
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
      For an embedding (`table` set): lookups per example (the gradient's rows).
    macs: multiply-adds of the forward pass per example.
    table: (rows, width) of an embedding whose gradient is a tf.IndexedSlices, else None.
    step_rows: the IndexedSlices' rows per worker and step when known (given by the user,
      measured under plan="auto", or fixed, as for a position embedding looked up with
      the same ids every step); None: batch size × `rows`.
    reach: the distinct rows the workers' lookups fall on (a hot set); None: the table.
    row_update: in PS mode the optimizer updates the touched rows only (plain SGD,
      Adagrad); False where it keeps slots every row's update moves (momentum, Adam,
      RMSprop), so PS sends the gradient dense.
    ready: when its gradient is ready, as a fraction of backward (0: where backward
      starts, 1: where it ends), from an engine timeline of real steps
      (ready.from_timeline); None: at its position in backward. TensorFlow does not
      always hand gradients over in layer order: with one inter-op thread it computes
      most convolutions' filter gradients after the input-gradient chain, at the end.
    variables: its trainable variables (a kernel and a bias: 2); PS mode's optimizer
      pushes and pulls each on its own.
    """
    name: str
    kind: str
    params: int
    kernel: object = None
    rows: object = 1
    macs: float = 0.0
    table: object = None
    step_rows: object = None
    reach: object = None
    row_update: bool = True
    ready: object = None
    variables: int = 1

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"layer {self.name!r}: kind {self.kind!r}; use one of {KINDS}")
        if self.params < 0:
            raise ValueError(f"layer {self.name!r}: params {self.params} < 0")
        if self.variables < 1:
            raise ValueError(f"layer {self.name!r}: variables {self.variables} < 1")
        if self.table is not None and (len(self.table) != 2 or min(self.table) < 1
                                       or self.table[0] * self.table[1] > self.params):
            raise ValueError(f"layer {self.name!r}: table {self.table} must be (rows, "
                             f"width) >= 1 within its {self.params} params")
        if self.ready is not None and not 0 <= self.ready <= 1:
            raise ValueError(f"layer {self.name!r}: ready {self.ready} must be a fraction "
                             f"of backward, 0 to 1")

    @property
    def sparse(self):
        """Its gradient is a tf.IndexedSlices (an embedding's)."""
        return self.table is not None

    def rows_per_step(self, batch_size):
        """The IndexedSlices' rows one worker sends per step, or None when unknown."""
        if self.step_rows is not None:
            return self.step_rows
        return None if self.rows is None else batch_size * self.rows

    def distinct_rows(self, lookups):
        """Expected distinct rows among `lookups` drawn uniformly from the reach (at most
        the reach): the rows a PS round moves once duplicates are summed."""
        reach = self.reach or self.table[0]
        return reach * -math.expm1(lookups * math.log1p(-1 / reach)) if reach > 1 else 1.0

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


def embedding(name, rows, width, lookups=1, step_rows=None, reach=None):
    """A table looked up `lookups` times per example (or `step_rows` times per step)."""
    return Layer(name, EMBEDDING, rows * width, None, lookups, 0.0, (rows, width), step_rows,
                 reach)


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
    # Dense embedding gradients, as in the papers' BERT runs (BytePS's PyTorch/MXNet
    # reduce them dense): plan_vs_papers compares with those. zoo_bert has sparse ones.
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


def zoo_bert(vocab=30522, hidden=768, heads=12, ffn=3072, layers=2, seq=32):
    """benchmarks/zoo_models.py's BERT-shaped encoder (38,210,306 trainable parameters;
    its position embedding, applied to a constant, is not among the model's weights):
    the token embedding's gradient has seq rows per example."""
    h = hidden
    out = [embedding("token_embedding", vocab, h, seq),
           other("embedding_norm", 2 * h, 2 * seq * h)]
    for i in range(layers):
        out += [other(f"attention_{i}", 4 * h * h + 4 * h, 4 * seq * h * h + 2 * seq * seq * h),
                other(f"attention_norm_{i}", 2 * h, 2 * seq * h),
                dense(f"ffn_in_{i}", h, ffn, seq), dense(f"ffn_out_{i}", ffn, h, seq),
                other(f"ffn_norm_{i}", 2 * h, 2 * seq * h)]
    return out + [dense("pooler", h, h), dense("classifier", h, 2)]


def zoo_dlrm(rows=2_000_000, hot=100_000, dim=64, dense_features=13, sparse=8):
    """benchmarks/zoo_models.py's DLRM (128,338,498 parameters): `sparse` lookups per
    example in one rows × dim table, drawn from a hot set of `hot` rows."""
    pairs = (sparse + 1) * sparse // 2
    return [dense("bottom_0", dense_features, 512), dense("bottom_1", 512, 256),
            dense("bottom_2", 256, dim), embedding("table", rows, dim, sparse, reach=hot),
            dense("top_0", dim + pairs, 512), dense("top_1", 512, 256),
            dense("logits", 256, 2)]


BUILTIN = {"resnet50": resnet50, "vgg16": vgg16, "vgg19": vgg19, "vgg19-22k": vgg19_22k,
           "bert-large": bert_large, "zoo-bert": zoo_bert, "zoo-dlrm": zoo_dlrm}
# The zoo's per-worker batch and whether its optimizer keeps momentum (benchmarks/zoo.py).
ZOO = {"bert": dict(batch_size=4, momentum=True), "dlrm": dict(batch_size=64, momentum=False)}


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
    kernel plus bias. An embedding with a sparse gradient: {"table": [ROWS, WIDTH],
    "rows": lookups per example, "step_rows"?, "reach"?, "row_update"?: true}. Any layer:
    "ready"?: when its gradient is ready, a fraction of backward (Layer.ready);
    "variables"?: its trainable variables (default 1)."""
    data = json.loads(source) if isinstance(source, str) else source
    items = data["layers"] if isinstance(data, dict) else data
    layers = []
    for index, item in enumerate(items):
        where = f"layer {index} ({item.get('name', '?')!r})"
        try:
            table = tuple(int(d) for d in item["table"]) if item.get("table") else None
            kind = item.get("kind", DENSE if "kernel" in item else
                            EMBEDDING if table else OTHER)
            kernel = tuple(int(d) for d in item["kernel"]) if item.get("kernel") else None
            if kind == DENSE and kernel is None:
                raise ValueError("a dense layer needs \"kernel\": [N, M]")
            params = item.get("params")
            if params is None:
                if table is not None:
                    kernel = table  # rows × width, no bias
                elif kernel is None:
                    raise ValueError("needs \"params\"")
                params = kernel[0] * kernel[1] + (
                    kernel[1] if item.get("bias", table is None) else 0)
            rows = item.get("rows", 1)
            macs = item.get("macs")
            if macs is None:
                macs = (rows or 1) * kernel[0] * kernel[1] if kind == DENSE else 0.0
            layers.append(Layer(str(item["name"]), kind, int(params),
                                kernel if kind == DENSE else None,
                                None if rows is None else int(rows), float(macs), table,
                                _optional_int(item.get("step_rows")),
                                _optional_int(item.get("reach")),
                                bool(item.get("row_update", True)),
                                _optional_float(item.get("ready")),
                                int(item.get("variables", 1))))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"layer list, {where}: {error}") from None
    return layers


def _optional_int(value):
    return None if value is None else int(value)


def _optional_float(value):
    return None if value is None else float(value)


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


def _embedding(layer, params):
    """A Keras Embedding: its gradient has one row per id looked up. Ids with a batch
    dimension give lookups per example; ids without one (a position embedding looked up
    with arange(seq)) the same rows every step."""
    table = (int(layer.input_dim), int(layer.output_dim))
    shape = _shape(layer, "input")
    lookups, step_rows = 1, None
    if shape is not None and shape and shape[0] is not None:
        step_rows = math.prod(shape) if None not in shape else None
    elif shape is not None:
        lookups = None if None in shape[1:] else math.prod(shape[1:])
    return Layer(layer.name, EMBEDDING, params, None, lookups, 0.0, table, step_rows)


def keras_layer(layer, keras_module):
    """The Layer of one Keras layer, or None when it trains nothing."""
    weights = list(layer.trainable_weights)
    if not weights:
        return None
    return dataclasses.replace(_keras_layer(layer, keras_module, weights),
                               variables=len(weights))


def _keras_layer(layer, keras_module, weights):
    params = sum(math.prod(int(d) for d in w.shape) for w in weights)
    if isinstance(layer, keras_module.layers.Dense) and len(layer.kernel.shape) == 2:
        n, m = (int(d) for d in layer.kernel.shape)
        rows = _rows(layer)
        return Layer(layer.name, DENSE, params, (n, m), rows, (rows or 1) * n * m)
    if isinstance(layer, keras_module.layers.Embedding):
        return _embedding(layer, params)
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
