"""Horovod's start_timeline / stop_timeline: the engine's Chrome-trace timeline (the one
TFPS_TIMELINE starts at init, docs/env.md), started and stopped at run time.

Each worker writes its own file: "%r" in the path becomes the rank (without it, give each
worker its own path, as Horovod's examples do). The file is written when the timeline
stops: at stop_timeline(), at a later start_timeline() (which switches files), or at
shutdown. Per tensor it holds the engine's stages (queued, scheduled, push, server, pull,
written) as complete ("X") events; `mark_cycles=True` adds an instant CYCLE_START event
each time the engine thread takes new requests.
"""

import ctypes

from tf_ps_ops.common import library as _library


def _check(status, error, what):
    if status != 0:
        raise RuntimeError(f"{what} failed: {error.value.decode(errors='replace')}")


def start_timeline(file_path, mark_cycles=False):
    """Starts recording this worker's timeline into `file_path` (see the module doc)."""
    if not isinstance(file_path, str) or not file_path:
        raise ValueError(f"start_timeline needs a file path, got {file_path!r}")
    error = ctypes.create_string_buffer(4096)
    _check(_library.c_api().tfps_start_timeline(file_path.encode(), int(bool(mark_cycles)),
                                                error, len(error)),
           error, f"start_timeline({file_path!r})")


def stop_timeline():
    """Writes the timeline's file and stops recording (nothing to do if none records)."""
    error = ctypes.create_string_buffer(4096)
    _check(_library.c_api().tfps_stop_timeline(error, len(error)), error, "stop_timeline()")
