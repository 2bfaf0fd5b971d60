"""`ps_server` on PATH after `pip install`: runs the binary shipped inside the package.

Stays free of TensorFlow imports (it must start in milliseconds on server hosts).
"""

import os
import sys

from tf_ps_ops.common.version import BUILD_HINT

# The binary is package data of tf_ps_ops (tf_ps_ops/bin/), one folder up from here.
BINARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin",
                      "ps_server")


def main():
    if not os.path.exists(BINARY):
        sys.exit(f"ps_server is not built ({BINARY} is missing): {BUILD_HINT}")
    os.execv(BINARY, [BINARY] + sys.argv[1:])


if __name__ == "__main__":
    main()
