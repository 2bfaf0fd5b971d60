"""The collective operations: allreduce/push_pull, allgather and broadcast (ops.py),
alltoall and reducescatter (alltoall.py), process sets, join and barrier, Adasum,
compression, the raw op wrappers below them (raw.py) and the abort of a call that failed
locally (abort.py). Public names are re-exported by tf_ps_ops/__init__.py.
"""
