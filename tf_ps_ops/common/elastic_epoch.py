"""A worker's side of the elastic driver's epoch file (tf_ps_ops/runner/elastic.py).

init() under TFPS_ELASTIC=1 asks here for this worker's place: it waits for an epoch that
lists this worker (TFPS_ELASTIC_ID) and is newer than the last one it used, and takes its
rank, the size and the scheduler from it. Standard library only.
"""

import json
import os
import time

from tf_ps_ops.common import config as _config

EPOCH_FILE = "epoch.json"  # the driver's name for it (runner/elastic.EPOCH_FILE)
_POLL_S = 0.05

_last_epoch = -1  # the epoch of this process's last successful init()
_first_epoch = -1  # the epoch of its first


def enabled():
    value, source = _config.lookup("TFPS_ELASTIC")
    if value not in (0, 1):
        raise ValueError(f"{source}={value}: expected 0 or 1")
    return bool(value)


def _place():
    directory, _ = _config.lookup("TFPS_ELASTIC_DIR")
    worker_id, _ = _config.lookup("TFPS_ELASTIC_ID")
    if not directory or not worker_id:
        raise RuntimeError(
            "TFPS_ELASTIC=1 (or init(elastic=True)) needs the elastic driver, which sets "
            "TFPS_ELASTIC_DIR and TFPS_ELASTIC_ID: start the job with `tfps-run --elastic` "
            "(docs/elastic.md)")
    return directory, worker_id


def read_epoch(directory=None):
    """The driver's current epoch as a dict, or None before it wrote one."""
    if directory is None:
        directory, _ = _place()
    try:
        with open(os.path.join(directory, EPOCH_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def latest_epoch_number():
    epoch = read_epoch()
    return -1 if epoch is None else int(epoch["epoch"])


def current_epoch_number():
    """The epoch this process last joined (-1: none yet)."""
    return _last_epoch


def superseded(epoch, wait_s):
    """Whether the driver published an epoch newer than `epoch` (waiting up to `wait_s`):
    after a failed rendezvous, it tells an abandoned epoch from another failure."""
    give_up = time.monotonic() + wait_s
    while latest_epoch_number() <= epoch:
        if time.monotonic() > give_up:
            return False
        time.sleep(_POLL_S)
    return True


def wait_for_place(timeout_s, after=None):
    """Announces this worker (join-<id>) and waits up to `timeout_s` for an epoch newer
    than the last it joined (and than `after`) that lists it. Returns (epoch, rank, size,
    scheduler, num_servers)."""
    directory, worker_id = _place()
    newer_than = _last_epoch if after is None else max(_last_epoch, after)
    join = os.path.join(directory, f"join-{worker_id}")
    if not os.path.exists(join):
        with open(join, "w"):
            pass
    give_up = time.monotonic() + timeout_s
    while True:
        epoch = read_epoch(directory)
        if epoch is not None and epoch["epoch"] > newer_than and worker_id in epoch["members"]:
            return (int(epoch["epoch"]), epoch["members"].index(worker_id),
                    len(epoch["members"]), epoch["scheduler"], int(epoch["num_servers"]))
        if time.monotonic() > give_up:
            raise RuntimeError(
                f"elastic worker {worker_id}: no epoch newer than {newer_than} lists it "
                f"after {timeout_s:g} s (TFPS_TIMEOUT); is the elastic driver (tfps-run "
                f"--elastic) still running? Its directory: {directory}")
        time.sleep(_POLL_S)


def joined(epoch):
    """Records that this process completed the rendezvous of `epoch` and tells the driver."""
    global _last_epoch, _first_epoch
    _last_epoch = epoch
    if _first_epoch < 0:
        _first_epoch = epoch
    directory, worker_id = _place()
    with open(os.path.join(directory, f"ack-{epoch}-{worker_id}"), "w"):
        pass


def joined_late():
    """Whether this process's first epoch was not the job's first: a newcomer (or a
    worker whose first rendezvous was abandoned). In PS mode such a worker leaves the
    servers' parameters to elastic.run, whose first call pushes them as the members'
    re-initialisation does at the same point (ps_mode.push_served_variables)."""
    return _first_epoch > 0
