"""Decentralized SGD (D-PSGD, Lian et al. 2017) and its low-precision variant (Bagua's,
after Tang et al. 2018 / Koloskova et al. 2019): workers average their models with a few
neighbours over the peer mesh, no server in the path (docs/algorithms.md).

Both average before the optimizer step, with the gradient already computed at the
weights x_k: x_{k+1} = sum_j W_ij x_k,j - lr * g_i(x_k). The exchange op reads only the
weights, so in a tf.function (`fit`) it runs while backward still computes.
"""

import tensorflow as tf

from tf_ps_ops.algorithms.base import Algorithm
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import rank, size
from tf_ps_ops.training.tape import _handle_owner


def ring_peers(rank_, size_):
    """The ring's neighbours of `rank_`: left and right (one peer when size is 2)."""
    return sorted({(rank_ - 1) % size_, (rank_ + 1) % size_} - {rank_})


def shift_one_peer(rank_, size_, step):
    """Bagua's shift_one schedule: the one peer of `rank_` at `step` (size must be even).
    Ranks of the lower half pair with the upper half, shifted by one each step, so after
    size/2 steps every lower rank has met every upper one. Works on ints and on tensors."""
    half = size_ // 2
    if rank_ < half:
        return (step + rank_) % ((size_ + 1) // 2) + half
    return (rank_ - half - step) % half


def _exchange(value, variables, peers, key, compression="none"):
    owners = [_handle_owner(v) for v in variables]  # orders the op only against these
    return _library.ops().ps_neighbour_exchange(
        value, peers, peers, [o.handle for o in owners if o is not None],
        tensor_name=key, compression=compression)


def fusion_buckets(variables, fusion_bytes):
    """Indices of `variables` in groups that travel as one flat message: consecutive
    variables of one dtype, up to `fusion_bytes` together (a larger variable travels
    alone). fusion_bytes None or 0: one group per variable."""
    if not fusion_bytes:
        return [[i] for i in range(len(variables))]
    buckets, current, total, dtype = [], [], 0, None
    for i, variable in enumerate(variables):
        this = tf.as_dtype(variable.dtype)
        nbytes = tf.TensorShape(variable.shape).num_elements() * this.size
        if current and (this != dtype or total + nbytes > fusion_bytes):
            buckets.append(current)
            current, total = [], 0
        current.append(i)
        total += nbytes
        dtype = this
    if current:
        buckets.append(current)
    return buckets


def _flatten(values):
    if len(values) == 1:
        return values[0]
    return tf.concat([tf.reshape(v, [-1]) for v in values], axis=0)


def _unflatten(flat, like, axis=0):
    """Splits `flat` along `axis` into tensors shaped like `like` (leading dims kept)."""
    if len(like) == 1:
        return [flat]
    sizes = [tf.TensorShape(v.shape).num_elements() for v in like]
    lead = flat.shape[:axis]
    lead = lead.as_list() if lead.is_fully_defined() else tf.shape(flat)[:axis]
    out = []
    for part, v in zip(tf.split(flat, sizes, axis=axis), like):
        shape = tf.TensorShape(v.shape).as_list()
        out.append(tf.reshape(part, lead + shape if isinstance(lead, list)
                              else tf.concat([lead, tf.constant(shape, tf.int32)], 0)))
    return out


class _Neighbours(Algorithm):
    """Shared by both: who the neighbours are at a step, and communication every
    `interval` steps."""

    def __init__(self, peer_selection, interval, fusion_bytes=None):
        super().__init__()
        if fusion_bytes is not None and (not isinstance(fusion_bytes, int) or fusion_bytes < 0):
            raise ValueError(f"fusion_bytes={fusion_bytes!r}: a byte count >= 0, or None")
        self.fusion_bytes = fusion_bytes
        if peer_selection not in ("ring", "shift_one"):
            raise ValueError(f"peer_selection={peer_selection!r}: use 'ring' or 'shift_one'")
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval={interval!r}: a positive number of steps")
        self.peer_selection = peer_selection
        self.interval = interval

    def build(self, variables):
        self._buckets = fusion_buckets(variables, self.fusion_bytes)
        n = size()
        if n < 2:
            return
        if self.peer_selection == "shift_one" and n % 2:
            raise ValueError(f"{type(self).__name__}(peer_selection='shift_one') pairs ranks "
                             f"and needs an even number of workers, got {n}; use 'ring'")

    def peers(self, step):
        """This worker's neighbours at `step` (an int32 vector tensor)."""
        if self.peer_selection == "ring":
            return tf.constant(ring_peers(rank(), size()), tf.int32)
        return tf.reshape(tf.cast(shift_one_peer(rank(), size(), step), tf.int32), [1])

    def before_step(self, grads, variables):
        if size() < 2:
            return grads
        step = self._step_var.read_value()
        if self.interval == 1:
            self.average(variables, self.peers(step))  # no tf.cond: lets it overlap backward
        else:
            def communicate():
                self.average(variables, self.peers(step))
                return tf.constant(True)

            tf.cond(step % self.interval == 0, communicate, lambda: tf.constant(False))
        return grads

    def average(self, variables, peers):
        raise NotImplementedError

    def _bucket_key(self, bucket):
        """The exchange's name: the variable's key, or the first one's + how many follow."""
        key = self._keys[bucket[0]]
        return key if len(bucket) == 1 else f"{key}+{len(bucket) - 1}"


class Decentralized(_Neighbours):
    """D-PSGD: every `interval` steps, each worker replaces its weights by the mean of its
    own and its neighbours' (ring: 1/3 each of left, self, right; shift_one: 1/2 each of
    self and this step's peer), then takes its local optimizer step on its own gradient.
    Only the neighbours' copies travel: 2 models per worker per step on a ring, 1 with
    shift_one, whatever the number of workers."""

    def __init__(self, peer_selection="ring", interval=1, fusion_bytes=None):
        super().__init__(peer_selection, interval, fusion_bytes)

    def average(self, variables, peers):
        for bucket in self._buckets:
            group = [variables[i] for i in bucket]
            value = _flatten([tf.convert_to_tensor(v) for v in group])
            received, _ = _exchange(value, group, peers, self._bucket_key(bucket))
            count = tf.cast(tf.shape(received)[0] + 1, value.dtype)
            mean = (value + tf.reduce_sum(received, axis=0)) / count
            for variable, part in zip(group, _unflatten(mean, group)):
                variable.assign(part)


class LowPrecisionDecentralized(_Neighbours):
    """Ring D-PSGD that sends int8-compressed model *differences* (Bagua's low-precision
    decentralized algorithm; Choco-SGD's public copies). Every worker keeps x_hat_i, the
    copy of its model its neighbours know, and x_hat_j of each neighbour j, all starting
    at zero, so every worker's copies agree without a first exchange. Each round:

        d    = x_i - x_hat_i + (x_hat_i + sum_j x_hat_j) / (1 + #neighbours) - x_hat_i
        send C(d) to the neighbours; x_hat_j += D(C(d_j)); x_hat_i += D(C(d))
        x_i  = x_hat_i

    With an exact codec this is D-PSGD on the public copies; int8's error is carried by
    the copies (the next difference includes it), which keeps it convergent.
    `compression`: int8 (default), fp16, bf16 or none.
    """

    def __init__(self, interval=1, compression="int8", fusion_bytes=None):
        super().__init__("ring", interval, fusion_bytes)
        if compression not in ("int8", "fp16", "bf16", "none"):
            raise ValueError(f"compression={compression!r}: use int8, fp16, bf16 or none")
        self.compression = compression

    def build(self, variables):
        super().build(variables)
        n = len(ring_peers(rank(), size())) if size() > 1 else 0
        self.own_copies, self.peer_copies = [], []
        for variable, key in zip(variables, self._keys):
            shape = tf.TensorShape(variable.shape)
            self.own_copies.append(tf.Variable(tf.zeros(shape, variable.dtype),
                                               trainable=False, name="x_hat_self"))
            self.peer_copies.append(tf.Variable(tf.zeros([n] + shape.as_list(), variable.dtype),
                                                trainable=False, name="x_hat_peers"))
        self._state.own_copies = self.own_copies
        self._state.peer_copies = self.peer_copies

    def average(self, variables, peers):
        for bucket in self._buckets:
            group = [variables[i] for i in bucket]
            diffs = []
            for i in bucket:
                x = tf.convert_to_tensor(variables[i])
                x_hat = self.own_copies[i].read_value()
                theirs = self.peer_copies[i].read_value()
                count = tf.cast(tf.shape(theirs)[0] + 1, x.dtype)
                mix = (x_hat + tf.reduce_sum(theirs, axis=0)) / count
                diffs.append(x - x_hat + mix - x_hat)
            received, sent = _exchange(_flatten(diffs), group, peers,
                                       self._bucket_key(bucket), self.compression)
            for i, got, mine in zip(bucket, _unflatten(received, group, axis=1),
                                    _unflatten(sent, group)):
                self.peer_copies[i].assign_add(got)
                self.own_copies[i].assign_add(mine)
                variables[i].assign(self.own_copies[i].read_value())
