"""tfps-run: start a scheduler, parameter servers and workers (tf_ps_ops/runner/run.py).

The entry point of the `tfps-run` console script, of `python -m tf_ps_ops.run` and of
`bin/tfps-run`, which runs this file by path. Imports only the standard library.
"""

import os
import sys

if not __package__:
    # Run by path (bin/tfps-run): the launch library is the one beside this file, not
    # whatever tf_ps_ops may be installed.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_ps_ops.runner.run import main, parse_args  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
