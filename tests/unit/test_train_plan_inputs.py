"""The training benchmark's names of engine tensors (benchmarks/train_plan_inputs.py):
every way a gradient reaches the engine maps back to its Keras variable's path and layer,
so the predicted step of each mode gets the gradients' measured ready order."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import train_plan_inputs  # noqa: E402
from tf_ps_ops.ps.ps_mode import ps_key  # noqa: E402


def test_every_engine_name_of_a_gradient_maps_to_its_layer():
    # A keras.applications layer's variable ("conv1_conv/kernel"), and one in a nested model.
    for path in ("conv1_conv/kernel", "functional/conv1_conv/kernel"):
        names = ["DistributedSGD." + path,            # DistributedOptimizer's summation
                 ps_key(path),                        # PS mode's optimizers
                 ps_key("DistributedSGD." + path)]    # what plan="auto" gave the servers
        for name in names:
            assert train_plan_inputs.variable_path(name) == path, name
            assert train_plan_inputs._layer_of(train_plan_inputs.variable_path(name)) == \
                "conv1_conv", name
