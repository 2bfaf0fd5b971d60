"""The communication planner: a cost model of every synchronisation mode (summation with
or without a codec, SFB, PS), the per-layer plan it picks, and `tfps-plan`.

    from tf_ps_ops import plan
    p = plan.make_plan(plan.builtin("vgg16"), plan.Cluster(8, bandwidth=25e9 / 8), 32)
    print(plan.format_table(p))

Pure Python: no TensorFlow unless a Keras model is read (`from_keras`) or the cluster is
measured (`measure`). See docs/plan.md.
"""

from tf_ps_ops.common import lazy as _lazy

_EXPORTS = {"Cluster": "cost", "Machine": "cost", "Choice": "cost", "Settings": "steptime",
            "step_time": "steptime", "Layer": "layers", "builtin": "layers",
            "from_json": "layers", "from_keras": "layers", "make_plan": "planner",
            "format_table": "planner", "Plan": "planner"}
_SUBMODULES = ("cost", "layers", "planner", "steptime")

__all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)
