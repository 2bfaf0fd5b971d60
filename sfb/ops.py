"""The factor exchange as a TF op, and a matmul whose weight gradient goes through it."""

import tensorflow as tf

from tf_ps_ops.collectives.ops import _check_not_xla
from tf_ps_ops.common import library as _library

# Dtypes the op computes in; others (float16, bfloat16) exchange and rebuild in float32.
_OP_DTYPES = (tf.float32, tf.float64)


def factor_gradient(u, v, handle, name, average=True):
    """Σ over workers p, in rank order, of v_pᵀ·u_p (N×M), identical on every worker.

    u: this worker's ∂L/∂y (K×M); v: its layer input (K×N); K may differ between workers.
    handle: the kernel variable's resource handle; it orders the op against that variable
    only, so the exchange overlaps the rest of the backward pass.
    name: the same on every worker; the n-th call of a name meets the others' n-th call.
    average: divide the sum by the number of workers, as push_pull(average=True) does.
    """
    _check_not_xla()
    u = tf.convert_to_tensor(u)
    v = tf.convert_to_tensor(v, dtype=u.dtype)
    dtype = u.dtype
    if dtype not in _OP_DTYPES:
        u, v = tf.cast(u, tf.float32), tf.cast(v, tf.float32)
    gradient = _library.ops().sfb_factor_gradient(u, v, handle, tensor_name=name,
                                                 average=average)
    return tf.cast(gradient, dtype) if gradient.dtype != dtype else gradient


def sfb_matmul(x, kernel, handle, name):
    """x·kernel (x: [..., N], kernel: N×M) whose kernel gradient is the factor exchange.

    The gradient with respect to `kernel` is already summed over workers and averaged:
    the optimizer must not reduce it again (sfb.is_sfb_variable tells it so). The gradient
    with respect to x is the local one, as in any layer.
    """
    x = tf.convert_to_tensor(x)
    kernel = tf.convert_to_tensor(kernel)
    static_out = x.shape[:-1].concatenate(kernel.shape[-1:])

    @tf.custom_gradient
    def matmul(x, kernel):
        # Rank > 2 inputs ([batch, ..., N]) contribute every position as a factor row.
        x2 = x if x.shape.rank == 2 else tf.reshape(x, [-1, tf.shape(x)[-1]])
        y = tf.matmul(x2, kernel)
        if x.shape.rank != 2:
            y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))
            y.set_shape(static_out)

        def grad(dy):
            dy2 = dy if dy.shape.rank == 2 else tf.reshape(dy, [-1, tf.shape(dy)[-1]])
            dx = tf.matmul(dy2, kernel, transpose_b=True)
            if x.shape.rank != 2:
                dx = tf.reshape(dx, tf.shape(x))
            return dx, factor_gradient(dy2, x2, handle, name)

        return y, grad

    return matmul(x, kernel)
