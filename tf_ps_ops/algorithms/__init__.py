"""Communication algorithms from Bagua, for TensorFlow and Keras 3 (docs/algorithms.md).

    import tf_ps_ops as hvd
    from tf_ps_ops import algorithms

    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                   algorithm=algorithms.Decentralized("ring"))
    model.compile(optimizer=opt, loss=..., jit_compile=False)
    model.fit(ds, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                             *opt.algorithm_callbacks()])

`DistributedGradientTape(tape, algorithm=...)` takes the same objects in custom loops
(all but QAdam, which runs its own update and so needs the optimizer wrapper).
One algorithm object serves one model: it keeps per-variable state.
"""

from tf_ps_ops.algorithms.async_average import AsyncModelAverage
from tf_ps_ops.algorithms.base import Algorithm, GradientAllReduce
from tf_ps_ops.algorithms.decentralized import (Decentralized, LowPrecisionDecentralized,
                                                ring_peers, shift_one_peer)
from tf_ps_ops.algorithms.qadam import QAdam

__all__ = ["Algorithm", "GradientAllReduce", "Decentralized", "LowPrecisionDecentralized",
           "AsyncModelAverage", "QAdam", "ring_peers", "shift_one_peer"]
