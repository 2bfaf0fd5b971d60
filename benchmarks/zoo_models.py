"""The model zoo of the training benchmark: Keras 3 models with the real layer structure
of the models teams train, sized so that one step takes well under a few seconds on one
CPU thread, and synthetic data of their real input shapes.

| name | model | input, per worker batch |
|---|---|---|
| resnet50 | keras.applications.ResNet50, 1000 classes (25.6 M params) | 64×64×3 images, 4 |
| mobilenetv2 | keras.applications.MobileNetV2, 1000 classes (3.5 M params) | 96×96×3 images, 8 |
| bert | BERT-base layer shapes (vocab 30522, hidden 768, 12 heads, FFN 3072), 2 of the 12 encoder layers, sequence 32 (38 M params, 23 M of them the token embedding) | token ids, 4 |
| dlrm | DLRM-like: 8 categorical features looked up in one 2 M × 64 table (128 M params), bottom MLP 13→512→256→64, pairwise dot interaction, top MLP 512→256→2 | 13 dense features + 8 ids from a hot set of 100 k rows, 64 |

`smoke_<name>`: the same code at toy sizes (the smoke test: build + 2 steps in seconds).

The DLRM looks its rows up with tf_ps_ops.keras.Embedding: Keras 3's Embedding reads the
whole table each step, and once the table has had a row update TensorFlow copies all of it
for that read (0.43–0.51 s of a 0.43–0.51 s local step on this machine, against 6 ms with
the rows read alone; benchmarks/RESULTS.md). Every mode and peer runs the same model.
The DLRM trains with plain SGD (momentum 0), as DLRM does: Keras 3's momentum would
decay the momentum of every one of the table's rows each step (a dense 512 MB update),
and tf_ps_ops' PS mode sends only the touched rows for plain SGD (docs/ps_mode.md). The
other models use the benchmark's SGD with momentum 0.9.
"""

import numpy as np

ZOO = ("resnet50", "mobilenetv2", "bert", "dlrm")
MODELS = ZOO + tuple("smoke_" + name for name in ZOO)

# Per-worker batch, timed steps, parameter count (for the driver's timeouts) and momentum.
# The DLRM's local step is a few ms since its rows are looked up by row: 200 timed steps
# (a few seconds) so that one run's median is not a handful of noisy ms-scale steps.
BATCH = {"resnet50": 4, "mobilenetv2": 8, "bert": 4, "dlrm": 64}
STEPS = {"resnet50": 6, "mobilenetv2": 8, "bert": 6, "dlrm": 200}
PARAMS = {"resnet50": 25.6e6, "mobilenetv2": 3.5e6, "bert": 38.1e6, "dlrm": 128.5e6}
MOMENTUM = {"dlrm": 0.0}
# Seconds to allow, on top of train_bench's --startup-timeout, for building and tracing the
# model (a deep Keras application traces for minutes on a loaded 2-core machine).
BUILD_S = {"resnet50": 400, "mobilenetv2": 400, "bert": 200, "dlrm": 200}
# tf_ps_ops modes that apply besides sum and ps: SFB / HybComm where the layers are Dense
# on 2-D inputs, a codec where the gradients are dense.
EXTRA_TFPS_MODES = {"resnet50": ("int8",), "mobilenetv2": ("int8",), "bert": ("int8",),
                    "dlrm": ("sfb", "hybrid")}

for _name in ZOO:
    BATCH["smoke_" + _name] = 2
    STEPS["smoke_" + _name] = 2
    PARAMS["smoke_" + _name] = 1e6
    BUILD_S["smoke_" + _name] = BUILD_S[_name]
    EXTRA_TFPS_MODES["smoke_" + _name] = EXTRA_TFPS_MODES[_name]
MOMENTUM["smoke_dlrm"] = 0.0

_SIZES = {
    "resnet50": dict(image=64), "smoke_resnet50": dict(image=32),
    "mobilenetv2": dict(image=96), "smoke_mobilenetv2": dict(image=32),
    "bert": dict(vocab=30522, hidden=768, heads=12, ffn=3072, layers=2, seq=32),
    "smoke_bert": dict(vocab=1000, hidden=64, heads=4, ffn=128, layers=1, seq=8),
    "dlrm": dict(rows=2_000_000, hot=100_000, dim=64, dense=13, sparse=8),
    "smoke_dlrm": dict(rows=10_000, hot=1_000, dim=16, dense=13, sparse=8),
}


def base(name):
    return name[len("smoke_"):] if name.startswith("smoke_") else name


def num_classes(name):
    return {"resnet50": 1000, "mobilenetv2": 1000, "bert": 2, "dlrm": 2}[base(name)]


def build(name):
    import keras

    keras.utils.set_random_seed(0)  # every rank builds the same initial weights
    size = _SIZES[name]
    kind = base(name)
    if kind == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(size["image"],) * 2 + (3,),
                                           classes=1000, classifier_activation=None)
    if kind == "mobilenetv2":
        return keras.applications.MobileNetV2(weights=None,
                                              input_shape=(size["image"],) * 2 + (3,),
                                              classes=1000, classifier_activation=None)
    if kind == "bert":
        return _bert(name, **size)
    return _dlrm(name, **size)


def _bert(name, vocab, hidden, heads, ffn, layers, seq):
    import keras
    from keras import layers as L

    ids = keras.Input((seq,), dtype="int32", name="token_ids")
    x = L.Embedding(vocab, hidden, name="token_embedding")(ids)
    positions = L.Embedding(512, hidden, name="position_embedding")(
        keras.ops.arange(seq, dtype="int32"))
    x = L.LayerNormalization(epsilon=1e-12, name="embedding_norm")(x + positions)
    for i in range(layers):
        attention = L.MultiHeadAttention(heads, hidden // heads, name="attention_%d" % i)(x, x)
        x = L.LayerNormalization(epsilon=1e-12, name="attention_norm_%d" % i)(x + attention)
        h = L.Dense(ffn, activation="gelu", name="ffn_in_%d" % i)(x)
        h = L.Dense(hidden, name="ffn_out_%d" % i)(h)
        x = L.LayerNormalization(epsilon=1e-12, name="ffn_norm_%d" % i)(x + h)
    pooled = L.Dense(hidden, activation="tanh", name="pooler")(x[:, 0, :])
    return keras.Model(ids, L.Dense(2, name="classifier")(pooled), name=name)


def _dlrm(name, rows, hot, dim, dense, sparse):
    import keras
    from keras import layers as L

    from tf_ps_ops.training.embedding import Embedding

    dense_in = keras.Input((dense,), name="dense_features")
    ids = keras.Input((sparse,), dtype="int32", name="sparse_ids")
    bottom = dense_in
    for i, width in enumerate((512, 256, dim)):
        bottom = L.Dense(width, activation="relu", name="bottom_%d" % i)(bottom)
    # tf_ps_ops.keras.Embedding: Keras's own reads the whole table each step, which TF
    # copies (512 MB, ~0.5 s) once the table has had a row update.
    embedded = Embedding(rows, dim, name="table")(ids)  # (batch, sparse, dim)
    vectors = keras.ops.concatenate([bottom[:, None, :], embedded], axis=1)
    dots = keras.ops.matmul(vectors, keras.ops.transpose(vectors, (0, 2, 1)))
    n = sparse + 1
    upper = np.array([i * n + j for i in range(n) for j in range(i + 1, n)], dtype="int32")
    pairs = keras.ops.take(keras.ops.reshape(dots, (-1, n * n)), upper, axis=1)
    top = keras.ops.concatenate([bottom, pairs], axis=1)
    for i, width in enumerate((512, 256)):
        top = L.Dense(width, activation="relu", name="top_%d" % i)(top)
    return keras.Model([dense_in, ids], L.Dense(2, name="logits")(top), name=name)


def make_batch(name, batch, seed):
    """(x, y) of the model's real input shapes: x an array, or a tuple for the DLRM."""
    rng = np.random.default_rng(seed)
    size = _SIZES[name]
    kind = base(name)
    y = rng.integers(0, num_classes(name), size=(batch,)).astype(np.int32)
    if kind in ("resnet50", "mobilenetv2"):
        x = rng.standard_normal((batch, size["image"], size["image"], 3)).astype(np.float32)
    elif kind == "bert":
        x = rng.integers(0, size["vocab"], size=(batch, size["seq"])).astype(np.int32)
    else:
        # A hot subset: every batch draws its ids from the same `hot` rows, spread over
        # the table (a fixed random choice), as recommendation traffic concentrates.
        hot_rows = np.random.default_rng(12345).choice(size["rows"], size["hot"],
                                                       replace=False).astype(np.int32)
        ids = hot_rows[rng.integers(0, size["hot"], size=(batch, size["sparse"]))]
        x = (rng.standard_normal((batch, size["dense"])).astype(np.float32), ids)
    return x, y
