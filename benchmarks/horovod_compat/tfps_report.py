"""A pytest plugin for run_test_tensorflow.sh: writes one JSON line per test and per subtest
(TF's run_all_in_graph_and_eager_modes runs each test as `graph_mode` and `eager_mode`
unittest subTests, whose passes pytest's own report does not list) to $TFPS_REPORT:
{"test", "subtest", "outcome", "reason"}. summarize.py reads these files."""

import json
import os
import re


def _reason(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    lines = [line.strip() for line in
             (crash.message if crash is not None else str(report.longrepr or "")).splitlines()
             if line.strip()]
    if lines and lines[0].endswith("in user code:"):  # a tf.function's: the error is last
        errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception): ", line)]
        return errors[-1] if errors else lines[-1]
    return lines[0] if lines else ""


def pytest_runtest_logreport(report):
    path = os.environ.get("TFPS_REPORT")
    if not path or (report.when != "call" and report.passed):
        return
    context = getattr(report, "context", None)  # a subtest's (pytest >= 9)
    subtest = getattr(context, "msg", None) if context is not None else None
    if subtest is None and context is not None:
        subtest = ",".join(f"{k}={v}" for k, v in sorted(context.kwargs.items())) or None
    record = {"test": report.nodeid.split("::")[-1], "subtest": subtest,
              "outcome": report.outcome, "when": report.when,
              "reason": "" if report.passed else _reason(report)}
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")
