"""SIGINT for the processes a test starts, as at a terminal.

A shell starts a background job with SIGINT ignored, and children inherit that: a suite run
that way would start launchers that Ctrl-C (a test's SIGINT) cannot reach. Tests that send
SIGINT start their child with `preexec_fn=default_sigint`.
"""

import signal


def default_sigint():
    """In the child, before exec: SIGINT's default action (terminate), ignored or not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
