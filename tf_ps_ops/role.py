"""`python -m tf_ps_ops.role` (`tfps-role`): a task of a cluster manager's job starts its
role (tf_ps_ops/runner/role.py)."""

import sys

from tf_ps_ops.runner.role import main, parse_args, server_commands  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
