"""The job key handed to a process that reads it from a file (TFPS_AUTH_KEY_FILE)."""

import os


def keep_key(folder, key):
    """Writes the job key into `folder` (mode 600); the environment that points to it
    ({} without a key)."""
    if key is None:
        return {}
    path = os.path.join(folder, "job.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return {"TFPS_AUTH_KEY_FILE": path}
