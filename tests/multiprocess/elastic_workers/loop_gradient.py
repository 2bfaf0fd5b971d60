"""The gradient and learning rate of loop_worker.py, NumPy only: the test replays the run
with them without importing TensorFlow."""

import numpy as np

LR = 0.05


def gradient(worker_id, step):
    k = int(worker_id[1:]) + 1
    return np.arange(1.0, 5.0) * k + np.sin(step * 0.7 + k)
