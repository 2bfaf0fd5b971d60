"""Registering Horovod's process sets on every worker: `init(process_sets=...)`,
`add_process_set` and `remove_process_set`.

Each is collective over every worker: the workers gather each other's proposal
(allgather_object) and refuse, on every worker, a registration they do not all name the
same way; then process_sets.py assigns the ids. It sits above ops.py, which itself reads
the sets from process_sets.py.
"""

from tf_ps_ops.collectives import process_sets as _sets
from tf_ps_ops.collectives.objects import allgather_object
from tf_ps_ops.common.basics import size


def _validate_ranks(ranks):
    bad = [r for r in ranks if r >= size()]
    if bad:
        raise ValueError(f"process set {ranks} names rank(s) {bad}, but there are only "
                         f"{size()} workers")
    if not ranks:
        raise ValueError("a process set needs at least one rank")


def _agree(proposals, what):
    """Every worker's proposal (gathered in rank order) must be the same."""
    first = proposals[0]
    for worker, proposal in enumerate(proposals):
        if proposal != first:
            raise ValueError(f"{what}: workers disagree: worker 0 named {first}, worker "
                             f"{worker} named {proposal}; every worker must register the "
                             "same process sets in the same order")


def _gathered(obj, name):
    return allgather_object(obj, name=name)


def register_at_init(process_sets):
    """init(process_sets=[...]): registers them in order on every worker, after checking
    (collectively) that every worker named the same ones."""
    sets = [ps if isinstance(ps, _sets.ProcessSet) else _sets.ProcessSet(ps)
            for ps in process_sets]
    for ps in sets:
        _validate_ranks(ps.ranks)
    _agree(_gathered([ps.ranks for ps in sets], "tfps.process_sets.init"),
           "init(process_sets=...)")
    return _sets.register(sets)


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on every worker and
    returns it. Collective: every worker must call it, with the same ranks, in the same
    order relative to other add/remove calls (ValueError on every worker otherwise)."""
    if not isinstance(process_set, _sets.ProcessSet):
        process_set = _sets.ProcessSet(process_set)
    _validate_ranks(process_set.ranks)
    _agree(_gathered(("add", process_set.ranks), "tfps.process_sets.change"),
           "add_process_set")
    return _sets.register([process_set])[0]


def remove_process_set(process_set):
    """Unregisters a process set on every worker (collective, like add_process_set) and
    invalidates the object. Returns False for the global set, which cannot be removed."""
    if process_set is _sets.global_process_set or \
            getattr(process_set, "process_set_id", None) == 0:
        return False
    if not isinstance(process_set, _sets.ProcessSet) or process_set.process_set_id is None:
        raise ValueError(f"{process_set!r} is not a registered process set")
    _agree(_gathered(("remove", process_set.ranks), "tfps.process_sets.change"),
           "remove_process_set")
    _sets.unregister(process_set)
    return True
