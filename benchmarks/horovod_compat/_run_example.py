"""Runs one (import-substituted) Horovod example as __main__ and then prints a digest of the
weights of every Keras model it built, so that run_examples.sh can compare the ranks:
    python _run_example.py SCRIPT [script args]"""

import hashlib
import os
import runpy
import sys

import numpy as np
import tensorflow as tf

_models = []
_init = tf.keras.Model.__init__


def _recording_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _models.append(self)


tf.keras.Model.__init__ = _recording_init

script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
for index, model in enumerate(_models):
    weights = [np.asarray(w) for w in model.get_weights()]
    digest = hashlib.sha256(b"".join(w.astype(np.float32).tobytes() for w in weights))
    print(f"WEIGHTS rank {os.environ.get('TFPS_RANK')} model {index}: {len(weights)} arrays, "
          f"sum {sum(float(w.sum()) for w in weights):.6f}, sha256 {digest.hexdigest()[:16]}",
          flush=True)
