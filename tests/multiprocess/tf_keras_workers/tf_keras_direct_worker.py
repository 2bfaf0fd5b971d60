"""Worker for test_tf_keras.py with tf_keras imported directly (tf.keras is Keras 3): the
checks of tf_keras_worker.py where which Keras is in use matters to the glue (the
optimizer wrapper, the callbacks, load_model, the elastic state)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_keras_worker import (check_callbacks, check_elastic_state,  # noqa: E402
                             check_fit_matches_single_process, check_load_model, main)

CHECKS = [check_fit_matches_single_process, check_callbacks, check_load_model,
          check_elastic_state]

if __name__ == "__main__":
    main(CHECKS)
