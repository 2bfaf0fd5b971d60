"""A worker whose collective call raises before its op (a check on its own input or
arguments) still uses up that call, so the other workers do not wait for it (with stall
warnings, until TFPS_STALL_SHUTDOWN).

Workers' tensors meet by key and by the call count of that key. A worker that raises in
Python before the op exists would leave the others waiting in that call, and its own
next call under the key would meet their previous one. `guarded` wraps a collective: on
such an error it runs PsAbortCollective under the call's key (the reason travels to the
others, whose call fails at once with FailedPreconditionError naming this worker) and
re-raises the error. Every worker then counts the call, so the next one meets.

Errors of the op itself (tf.errors.OpError) are already every worker's and pass through.
In a tf.function the abort runs when tracing fails, eagerly: it meets the others' first
run of the traced op. In a v1 graph (no eager context to run it in) nothing is sent.
Under hierarchical aggregation (TFPS_HIERARCHICAL, several workers on a host) the abort of
a name this worker has aggregated locally before goes to its local leader, which fails the
step on every local worker and the servers' rounds for the other hosts; the abort of a name
never called here before still goes to the servers only, and the local leader waits for
this worker's tensor, with stall warnings (docs/hierarchical.md).
Every worker must call the collective (as Horovod requires): a call made on one worker
only would, on error, use up a call number the others never use.
"""

import functools
import inspect
import logging

import tensorflow as tf

from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import is_initialized, size

# Rank-local errors raised by the Python checks of a collective wrapper.
LOCAL_ERRORS = (ValueError, TypeError, NotImplementedError, RuntimeError, KeyError,
                IndexError, AttributeError)

_log = logging.getLogger("tf_ps_ops")


def _initialised_and_shared():
    return is_initialized() and size() > 1


def tell_peers(key, path, error):
    """Uses up this worker's call under `key` ("server": allreduce/broadcast rounds,
    "peer": allgather/alltoall), telling the other workers `error`."""
    reason = f"{type(error).__name__}: {error}"
    try:
        with tf.init_scope():
            if tf.executing_eagerly():
                _library.ops().ps_abort_collective(reason, tensor_name=key, path=path)
                return
        # A tf.compat.v1 graph: the others run the call in their Session, so the abort
        # runs now, in a graph and Session of its own (the engine is per process).
        with tf.Graph().as_default():
            abort = _library.ops().ps_abort_collective(reason, tensor_name=key, path=path)
            with tf.compat.v1.Session() as session:
                session.run(abort)
    except Exception as failure:  # noqa: BLE001  (the caller's error is what matters)
        _log.warning("tf_ps_ops: could not tell the other workers that the call under %r "
                     "failed here (%s); they will wait for it (stall warnings; TFPS_STALL_SHUTDOWN "
                     "ends the wait)", key, failure)


def guarded(path, key_of):
    """Decorator for a collective: `key_of(arguments)` gives the call's key from its bound
    arguments (None: unknown, nothing is sent)."""

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except LOCAL_ERRORS as error:
                if getattr(error, "_tfps_told", False) or not _initialised_and_shared():
                    raise
                error._tfps_told = True  # nested wrappers (grouped_*) tell once
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    key = key_of(bound.arguments)
                except Exception:  # noqa: BLE001  (no key: the input itself is unusable)
                    key = None
                if key is not None:
                    tell_peers(key, path, error)
                raise

        return wrapper

    return decorate
