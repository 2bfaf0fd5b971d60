"""Horovod's process sets: collectives over a subset of the workers.

A process set is a sorted list of global ranks with an id that is the same on every
worker. Its collectives go through the servers like the global set's, under keys of their
own (`process_set.<id>.` + the usual key), and every push carries the set's ranks
(wire flag kFlagProcessSet, ps_server/process_sets.h): a round completes when the set's
members have pushed, and the servers refuse a push from a worker outside the set it names.
Only the members call a set's collectives; a non-member gets a ValueError before anything
is sent, as in Horovod.

Sets are registered in the same order on every worker (`init(process_sets=...)`, then
`add_process_set` / `remove_process_set`, which are collective over every worker, as
Horovod's dynamic process sets are), so ids agree. Registering checks that every worker
named the same ranks (ValueError on every worker otherwise). That check gathers every
worker's proposal with a collective, so it lives above the collectives, in register.py;
this module, below them, holds the sets and the registry.
"""

import threading

from tf_ps_ops.common.basics import rank as _global_rank, size as _global_size

_lock = threading.Lock()
_by_id = {}        # id -> ProcessSet (the registered object; the global set is id 0)
_next_id = [1]


class ProcessSet:
    """A set of workers (global ranks) that run collectives together.

    Pass it to `init(process_sets=[...])` or `add_process_set`, then as `process_set=` to
    any collective. `rank()` is this worker's rank within the set (-1 if it is not a
    member), `size()` the set's size, `included()` whether this worker is a member.
    """

    def __init__(self, ranks):
        ranks = list(ranks)
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet takes a list of integer ranks (an MPI communicator "
                             "is not supported: there is no MPI here)")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"ProcessSet ranks {ranks} contain a duplicate")
        if any(r < 0 for r in ranks):
            raise ValueError(f"ProcessSet ranks {ranks} contain a negative rank")
        self.ranks = sorted(ranks)
        self.process_set_id = None

    def _require_registered(self):
        if self.process_set_id is None:
            raise ValueError(f"{self} is not registered: pass it to init(process_sets=...) "
                             "or add_process_set() on every worker first")

    def size(self):
        self._require_registered()
        return len(self.ranks) if self.process_set_id else _global_size()

    def rank(self):
        self._require_registered()
        if self.process_set_id == 0:
            return _global_rank()
        me = _global_rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        self._require_registered()
        return self.process_set_id == 0 or _global_rank() in self.ranks

    def invalidate(self):
        self.process_set_id = None

    def __repr__(self):
        if self.process_set_id == 0:
            return "global_process_set"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_by_id[0] = global_process_set


def members(process_set, what):
    """The ranks a collective `what` runs over: None for the global set (every worker),
    else the set's sorted ranks. Raises ValueError if the set is not registered or this
    worker is not in it."""
    if process_set is None or process_set is global_process_set or \
            getattr(process_set, "process_set_id", None) == 0:
        return None
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set={process_set!r} is not a tf_ps_ops.ProcessSet")
    process_set._require_registered()
    if _global_rank() not in process_set.ranks:
        raise ValueError(f"{what}: this worker (rank {_global_rank()}) is not a member of "
                         f"{process_set}; only its members may call its collectives")
    return list(process_set.ranks)


def key_prefix(process_set):
    """What a set's keys start with, so its rounds never meet another set's."""
    if process_set is None or getattr(process_set, "process_set_id", 0) == 0:
        return ""
    return f"process_set.{process_set.process_set_id}."


def set_size(process_set):
    ranks = members_or_none(process_set)
    return _global_size() if ranks is None else len(ranks)


def members_or_none(process_set):
    if process_set is None or getattr(process_set, "process_set_id", 0) == 0:
        return None
    return list(process_set.ranks)


def _register_locked(process_set):
    for existing in _by_id.values():
        if existing.process_set_id and existing.ranks == process_set.ranks:
            raise ValueError(f"a process set with ranks {process_set.ranks} is already "
                             f"registered ({existing})")
    process_set.process_set_id = _next_id[0]
    _next_id[0] += 1
    _by_id[process_set.process_set_id] = process_set
    return process_set


def register(process_sets):
    """Registers `process_sets` (ProcessSet objects, in order) under the next ids; every
    worker has agreed on them first (register.py). Returns them."""
    with _lock:
        for process_set in process_sets:
            _register_locked(process_set)
    return process_sets


def unregister(process_set):
    """Forgets a registered set (every worker has agreed first, register.py) and
    invalidates the object."""
    with _lock:
        _by_id.pop(process_set.process_set_id, None)
        process_set.invalidate()


def process_set_by_id(process_set_id):
    if process_set_id not in _by_id:
        raise ValueError(f"no process set with id {process_set_id}")
    return _by_id[process_set_id]


def process_sets():
    """Every registered process set, by id (the global set first)."""
    return [_by_id[i] for i in sorted(_by_id)]
