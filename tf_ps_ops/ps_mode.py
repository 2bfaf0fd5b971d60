"""PS mode: the servers run the optimizer (tf_ps_ops/ps/ps_mode.py; docs/ps_mode.md)."""

from tf_ps_ops.ps.ps_mode import (  # noqa: F401
    disable_graph_rewrite, enable_graph_rewrite, graph_rewrite_enabled, initialize_variables,
    key_for, ps_key, push_served_variables, push_variables, rewrite_graph_def, swaps)

__all__ = ["disable_graph_rewrite", "enable_graph_rewrite", "graph_rewrite_enabled",
           "initialize_variables", "key_for", "ps_key", "push_served_variables",
           "push_variables", "rewrite_graph_def", "swaps"]
