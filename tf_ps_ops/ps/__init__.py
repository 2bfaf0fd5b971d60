"""PS mode: the servers run the optimizer. ps_mode.py (the graph rewrite and the pushed
variables) and optimizers.py (Keras optimizers whose update runs on the servers), public
as tf_ps_ops.ps_mode and tf_ps_ops.optimizers.
"""
