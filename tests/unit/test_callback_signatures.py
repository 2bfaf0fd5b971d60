"""The Keras callbacks accept every argument Horovod 0.28's callbacks accept
(horovod/tensorflow/keras/callbacks.py), so a Horovod script constructs them unchanged."""

import inspect

import pytest

callbacks = pytest.importorskip("tf_ps_ops.callbacks")

# Horovod 0.28's parameters, in order.
HOROVOD = {
    "BroadcastGlobalVariablesCallback": ["root_rank", "device", "local_variables"],
    "MetricAverageCallback": ["device"],
    "LearningRateScheduleCallback": ["initial_lr", "multiplier", "start_epoch", "end_epoch",
                                     "staircase", "momentum_correction", "steps_per_epoch"],
    "LearningRateWarmupCallback": ["initial_lr", "warmup_epochs", "momentum_correction",
                                   "steps_per_epoch", "verbose"],
    "BestModelCheckpoint": ["monitor", "verbose", "save_weights_only", "mode", "save_freq"],
}


@pytest.mark.parametrize("name", sorted(HOROVOD))
def test_parameters_match_horovod(name):
    parameters = list(inspect.signature(getattr(callbacks, name)).parameters)
    assert parameters[:len(HOROVOD[name])] == HOROVOD[name]


def test_horovod_positional_calls_construct():
    callbacks.MetricAverageCallback(device="")
    callbacks.MetricAverageCallback("")
    callbacks.BroadcastGlobalVariablesCallback(0, "", None)
    callbacks.LearningRateScheduleCallback(0.1, 0.5, 0, None, True, True, 10)
    callbacks.LearningRateWarmupCallback(0.1, 5, True, 10, 0)
    callbacks.BestModelCheckpoint(monitor="loss", verbose=0, save_weights_only=False,
                                  mode="auto", save_freq="epoch")


def test_byteps_learning_rate_schedule_takes_the_multiplier_first():
    # BytePS: LearningRateScheduleCallback(multiplier, start_epoch=0, ..., initial_lr=None).
    byteps = callbacks.LearningRateScheduleCallback(0.5, start_epoch=1)
    assert byteps.initial_lr is None and byteps.multiplier(3) == 0.5
    byteps = callbacks.LearningRateScheduleCallback(lambda epoch: 0.1 * epoch, initial_lr=2.0)
    assert byteps.initial_lr == 2.0 and byteps.multiplier(3) == 0.1 * 3
    horovod = callbacks.LearningRateScheduleCallback(0.1, 0.5)
    assert horovod.initial_lr == 0.1 and horovod.multiplier(3) == 0.5
