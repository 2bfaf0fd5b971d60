"""What every other part of tf_ps_ops builds on: joining the cluster (init.py) and this
worker's place in it (basics.py), the environment's one table (config.py), TF's cluster
resolvers, loading the op library (library.py), lazy exports, the elastic epoch file and
the timeline. Nothing here imports TensorFlow until a module that needs it is imported.
"""
