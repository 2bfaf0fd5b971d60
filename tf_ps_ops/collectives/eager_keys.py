"""Keys of unnamed eager collectives, one family per thread (issue 11, defect 4).

Workers' tensors meet by key and by the call count of that key. Eager tensors have no
names, so every unnamed eager call of one kind used to share one key: two threads calling
at once met each other's tensors on the other workers, silently. Now a thread other than
the main thread adds its name to the key, so its n-th call meets the n-th call of the
thread *of the same name* on every other worker. Threads created in the same order get
the same default names on every worker; a pool whose tasks land on its threads in a
different order per worker needs explicit `name=`s, as any concurrent caller may use.

Two live threads of one name calling unnamed collectives would share a key again: the
second gets a RuntimeError before anything is sent (as Horovod refuses duplicate names).
"""

import threading
import weakref

_lock = threading.Lock()
_users = {}  # thread name -> weakref to the thread that last made an unnamed eager call


def eager_key(base, kind):
    """The key of an unnamed eager call of `kind` whose shared key was `base`."""
    thread = threading.current_thread()
    if thread is threading.main_thread():
        return base  # unchanged: single-threaded programs keep their keys
    name = thread.name
    with _lock:
        ref = _users.get(name)
        other = None if ref is None else ref()
        if other is not None and other is not thread and other.is_alive():
            raise RuntimeError(
                f"tf_ps_ops.{kind} without a name in thread {name!r}, while another live "
                f"thread named {name!r} also makes unnamed {kind}s: unnamed eager calls are "
                "keyed by their thread's name, so these two would meet each other's tensors "
                f"on the other workers. Pass name=... (the same on every worker) to {kind}, "
                "or give the threads distinct names (threading.Thread(name=...))")
        _users[name] = weakref.ref(thread)
    return f"{base}@{name}"
