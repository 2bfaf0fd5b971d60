"""Counts a pytest `-rA` report of Horovod's test_tensorflow.py per test and subtest
(graph_mode / eager_mode, when pytest-subtests reports them) and lists what failed with
its first error line. Usage: summarize.py worker0.log [worker1.log ...]"""

import collections
import re
import sys

_LINE = re.compile(r"^((?:SUB)?(?:PASS|FAIL|SKIP|ERROR|XFAIL|XPASS)[A-Z]*)"
                   r"\s+(.+?)(?:\s+-\s+(.*))?$")


def summarize(path):
    counts = collections.Counter()
    failed = []
    in_summary = False
    with open(path, errors="replace") as report:
        for line in report:
            if "short test summary info" in line:
                in_summary = True
                continue
            if not in_summary:
                continue
            match = _LINE.match(line.strip())
            if match:
                outcome, test, why = match.groups()
                counts[outcome] += 1
                if "FAIL" in outcome or "ERROR" in outcome:
                    failed.append((test, (why or "")[:160]))
    return counts, failed


def main(paths):
    for path in paths:
        counts, failed = summarize(path)
        print(f"== {path}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for test, why in failed:
            print(f"   {test}: {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
