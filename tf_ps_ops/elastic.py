"""Horovod's elastic API (`hvd.elastic`) over elastic membership (docs/elastic.md).

    import tf_ps_ops.keras as hvd
    hvd.init()                                    # under tfps-run --elastic
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(..., initial_epoch=state.epoch, callbacks=[
            hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state)])
    train(state)

Semantics, as Horovod's:
- `commit()` saves the state in memory and then checks for new workers
  (`check_host_updates`): every worker agrees (an allreduce of the newest epoch each has
  seen) and, if the driver published one, raises HostsUpdatedInterrupt at the same commit.
- A worker lost mid-step fails what is in flight on every survivor (a TF error naming the
  dead worker); `run` catches it (HorovodInternalError and TF's communication errors),
  restores the last commit, re-initialises into the driver's next epoch, syncs the state
  from the new rank 0 and calls the function again. No partial sum is used: the step that
  failed is redone by the survivors.
- After HostsUpdatedInterrupt nothing is restored (the state was just committed): the
  workers re-initialise with the newcomers, who receive the state from rank 0.
- A lost server (or scheduler) is handled as a lost worker: the driver starts new servers
  for the same workers. In PS mode every re-initialisation is followed by a push of the
  parameters the servers were given (ps_mode.push_served_variables): the new servers
  start from the last commit. Their optimizer slots too: in PS mode each commit also
  reads the servers' slots (ps_mode.read_served_slots), and rank 0's go to the new
  servers (ps_mode.push_served_slots).
"""

import functools
import sys
import time

import numpy as np
import tensorflow as tf

from tf_ps_ops.collectives import objects, ops
from tf_ps_ops.common import basics
from tf_ps_ops.common import elastic_epoch as _elastic_epoch
from tf_ps_ops.common.init import init
from tf_ps_ops.training.keras_flavor import optimizer_built, optimizer_variables

class HorovodInternalError(RuntimeError):
    """A collective failed because a worker was lost; `run` restores the last commit."""


class HostsUpdatedInterrupt(RuntimeError):
    """New workers wait to join; raised by `commit()`/`check_host_updates()` on every
    worker at the same commit. `skip_sync`: whether the state needs no sync (never here:
    a newcomer always needs it)."""

    def __init__(self, skip_sync=False):
        super().__init__("the elastic driver published new members; re-initialising")
        self.skip_sync = skip_sync


def _say(text):
    # One line per membership event on stderr (tfps-run prefixes it with the worker).
    print(f"tf_ps_ops.elastic: {text}", file=sys.stderr, flush=True)


class State:
    """The state `run` keeps across membership changes. Subclasses define save(),
    restore() and sync()."""

    def __init__(self):
        self._reset_callbacks = []
        self._known_epoch = _elastic_epoch.current_epoch_number()

    def register_reset_callbacks(self, callbacks):
        """Functions called (without arguments) after every re-initialisation, before
        the training function runs again (e.g. to scale the learning rate by size())."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._known_epoch = _elastic_epoch.current_epoch_number()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (restored after a lost worker), then checks for new workers.
        In PS mode under elastic membership, also the servers' optimizer slots, read
        before the save so that a failure leaves the last commit whole."""
        global _server_slots
        slots = _read_server_slots()
        self.save()
        if slots is not None:
            _server_slots = slots
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every worker at once when the driver published
        an epoch newer than the one they run in. In a job without elastic membership no
        worker can join, so there is nothing to check (as in Horovod: commit() works in
        any job)."""
        if _elastic_epoch.current_epoch_number() < 0:
            return
        seen = max(_elastic_epoch.latest_epoch_number(), self._known_epoch)
        newest = ops.allreduce(tf.constant(seen, tf.int64), op=ops.Max,
                               name="tfps.elastic.check_host_updates")
        if int(newest) > _elastic_epoch.current_epoch_number():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()


class ObjectState(State):
    """Picklable attributes given as keyword arguments (epoch=0, batch=0, ...), synced
    from rank 0 with broadcast_object."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        # bcast_object/get_rank: Horovod's signature; ours are tf_ps_ops' own.
        self._bcast_object = bcast_object or objects.broadcast_object
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0,
                                                   name="tfps.elastic.object_state")
            self._set_attrs()


class TensorFlowState(ObjectState):
    """tf.Variables (kept in memory at each commit, broadcast from rank 0 at sync) plus
    keyword attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None or variables is None:
            raise ValueError("TensorFlowState needs `variables` (TF 2, eager): v1 sessions and "
                             "global collections are not supported")
        self.variables = list(variables)
        self._values = [v.numpy() for v in self.variables]
        super().__init__(**kwargs)

    def save(self):
        self._values = [v.numpy() for v in self.variables]
        super().save()

    def restore(self):
        for variable, value in zip(self.variables, self._values):
            variable.assign(value)
        super().restore()

    def sync(self):
        if self.variables:
            objects.broadcast_variables(self.variables, root_rank=0)
            self._values = [v.numpy() for v in self.variables]
        super().sync()


class TensorFlowKerasState(ObjectState):
    """A Keras model and its optimizer (weights and optimizer variables), plus keyword
    attributes (epoch=0, batch=0, ...). Keras 3 and tf_keras (Keras 2) alike."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        # backend: Horovod's signature (its Keras backend module); not needed here.
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self._values = self._read()
        super().__init__(**kwargs)

    def _variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None and optimizer_built(self.optimizer):
            variables += optimizer_variables(self.optimizer)
        return variables

    @staticmethod
    def _key(variable):
        # Keras 3 variables have a unique path, tf_keras ones (tf.Variables) a unique name
        # in a model; an optimizer built after the last commit adds variables that have no
        # saved value (they keep theirs).
        path = getattr(variable, "path", None)
        return path if isinstance(path, str) else variable.name

    def _read(self):
        return {self._key(v): np.array(v.numpy()) for v in self._variables()}

    def save(self):
        self._values = self._read()
        super().save()

    def restore(self):
        for variable in self._variables():
            value = self._values.get(self._key(variable))
            if value is not None:
                variable.assign(value)
        super().restore()

    def sync(self):
        variables = self._variables()
        if variables:
            objects.broadcast_variables(variables, root_rank=0)
        self._values = self._read()
        super().sync()


KerasState = TensorFlowKerasState  # Horovod's horovod.tensorflow.keras.elastic name


# What a lost worker looks like to the survivors: their collectives fail with one of
# these (the scheduler's notice, a server or peer gone, a stall past TFPS_STALL_SHUTDOWN).
_LOST_WORKER_ERRORS = (HorovodInternalError, tf.errors.UnavailableError,
                       tf.errors.AbortedError, tf.errors.DeadlineExceededError,
                       tf.errors.FailedPreconditionError, tf.errors.InternalError,
                       tf.errors.UnknownError)


def _wait_for_new_epoch(error):
    """After a failure: the driver publishes the next epoch as soon as it sees the worker
    exit. Waits up to 30 s; no new epoch by then means the failure was no membership
    change (or a worker hangs without exiting), and `error` is raised again."""
    give_up = time.monotonic() + 30.0
    while _elastic_epoch.latest_epoch_number() <= _elastic_epoch.current_epoch_number():
        if time.monotonic() > give_up:
            raise error
        time.sleep(0.05)


def _reset():
    before = (basics.rank(), basics.size()) if basics.is_initialized() else None
    basics.shutdown()
    init()
    _say(f"epoch {_elastic_epoch.current_epoch_number()}: rank {basics.rank()} of "
         f"{basics.size()}" + (f" (was rank {before[0]} of {before[1]})" if before else "")
         + f"; averages now divide by {basics.size()}")


_late_push_done = False
_server_slots = None  # PS mode: the servers' optimizer slots at the last commit


def _read_server_slots():
    """PS mode under elastic membership: the servers' slots now; else None."""
    ps_mode = sys.modules.get("tf_ps_ops.ps.ps_mode")
    if ps_mode is None or _elastic_epoch.current_epoch_number() < 0:
        return None
    return ps_mode.read_served_slots()


def _refill_servers():
    """PS mode: the new epoch's servers hold no parameters; every worker pushes those it
    gave the old servers (after the restore and the sync: rank 0's committed values),
    then rank 0's optimizer slots of the same commit (docs/elastic.md)."""
    ps_mode = sys.modules.get("tf_ps_ops.ps.ps_mode")
    if ps_mode is None:
        return
    count = ps_mode.push_served_variables()
    if not count:
        return
    with_slots = ps_mode.push_served_slots(_server_slots)
    slots = (f"and the optimizer slots of {with_slots}" if with_slots else
             "no optimizer slots were committed: they start afresh")
    _say(f"rank {basics.rank()}: PS mode: pushed {count} parameter(s) of the last "
         f"commit to the new servers ({slots})")


def run(func):
    """Decorator: runs `func(state, *args, **kwargs)` until it returns, across lost and
    new workers (the module doc). The state is synced from rank 0 before each call."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if _elastic_epoch.current_epoch_number() < 0:
            raise RuntimeError("tf_ps_ops.elastic.run needs elastic membership: init() under "
                               "`tfps-run --elastic` (TFPS_ELASTIC=1); docs/elastic.md")
        global _late_push_done
        skip_sync = False
        # A newcomer pushes its PS parameters in its first call, where the members push
        # theirs after re-initialising (ps_mode._deferred_to_elastic_run).
        reset = _elastic_epoch.joined_late() and not _late_push_done
        _late_push_done = True
        while True:
            if not skip_sync:
                state.sync()
            if reset:
                _refill_servers()
            try:
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                _say(f"rank {basics.rank()}: new workers join; re-initialising")
            except _LOST_WORKER_ERRORS as e:
                _say(f"rank {basics.rank()}: a collective failed ({type(e).__name__}: "
                     f"{str(e).splitlines()[0][:300]}); restoring the last commit")
                _wait_for_new_epoch(e)
                state.restore()
                skip_sync = False
            _reset()
            reset = True
            state.on_reset()

    return wrapper


# --- Keras callbacks (horovod.tensorflow.keras.elastic) ---------------------------------
# Built on first use (training/elastic_callbacks.py), so that importing tf_ps_ops.elastic
# (and tf_ps_ops.tensorflow) does not import Keras.

_CALLBACK_NAMES = ("CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback")


def __getattr__(name):
    if name in _CALLBACK_NAMES:
        from tf_ps_ops.training import elastic_callbacks
        globals().update(elastic_callbacks.make())
        return globals()[name]
    raise AttributeError(f"module 'tf_ps_ops.elastic' has no attribute {name!r}")
