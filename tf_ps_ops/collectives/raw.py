"""The collective ops with nothing around them: no argument checks, no abort of the call
on a local error, the key given by the caller.

The API's wrappers (ops.py) and the algorithms built from collectives (adasum.py) both
call these, so that neither imports the other.
"""

from tf_ps_ops.collectives.set_collectives import set_allgather
from tf_ps_ops.common import library as _library


def allgather(tensor, key, members=None):
    """Every worker's `tensor` concatenated along the first dimension, in rank order, under
    `key`: peer to peer (PsAllgather) among every worker (`members` None), through the
    servers within a process set (`members`: its sorted global ranks; set_collectives.py)."""
    if members is not None:
        return set_allgather(tensor, key, members)
    return _library.ops().ps_allgather(tensor, tensor_name=key)


def alltoall(tensor, splits, key):
    """PsAlltoall among every worker: `splits[r]` rows of `tensor` go to rank r. Returns
    (received, received_splits)."""
    return _library.ops().ps_alltoall(tensor, splits, tensor_name=key)
