"""Starting jobs: tfps-run (run.py) on one host, over ssh (ssh.py, remote.py) or elastic
(elastic.py, elastic_ssh.py), the cluster-manager role helper (role.py), the ps_server
console script (server_main.py) and the Ray executor (ray.py). Public entry points are
tf_ps_ops.run, tf_ps_ops.role and tf_ps_ops.ray.

Imports only the standard library: the launcher starts without TensorFlow.
"""
