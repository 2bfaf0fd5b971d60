"""common/rate_limit.h and EscapeForLog: what a misbehaving peer can make us log or send."""

from native import load_core

core = load_core()


def test_a_peer_gets_its_burst_per_interval_then_counts():
    events = [("a", 0.01 * i) for i in range(12)] + [("a", 10.5), ("b", 10.6)]
    trace = core.rate_limit_trace(10.0, 3, 100, events)
    assert [allowed for allowed, _ in trace[:12]] == [True] * 3 + [False] * 9
    assert trace[12] == (True, 9)   # the next interval says how many were held back
    assert trace[13] == (True, 0)   # another peer has its own budget


def test_the_peer_table_is_bounded():
    # 1000 peers with a table of 10: newcomers share one budget instead of growing it.
    events = [(f"p{i}", 0.0) for i in range(1000)]
    trace = core.rate_limit_trace(10.0, 2, 10, events)
    assert sum(allowed for allowed, _ in trace) == 10 + 2  # one each for 10, 2 shared


def test_escape_for_log():
    assert core.escape_for_log(b"w0") == "w0"
    assert core.escape_for_log(b"x\n[tfps] ERROR") == "x\\n[tfps] ERROR"
    assert core.escape_for_log(b"\x00\x1b[31m\\\xff") == "\\x00\\x1b[31m\\x5c\\xff"
    assert core.escape_for_log(b"a" * 100, 8) == "a" * 8 + "..."
