"""Counts a pytest `-rA` report of Horovod's test_tensorflow.py per test and subtest
(graph_mode / eager_mode, when pytest-subtests reports them) and lists what failed with
its first error line. Usage: summarize.py worker0.log [worker1.log ...]"""

import collections
import re
import sys

# "PASSED test..." for a whole test, "SUBFAILED[eager_mode] test..." for a subtest
# (pytest >= 9 reports unittest subTests, which TF's run_in_graph_and_eager_modes uses).
_LINE = re.compile(r"^((?:SUB)?(?:PASS|FAIL|SKIP|ERROR|XFAIL|XPASS)[A-Z]*)(\[[^\]]*\])?"
                   r"\s+(\S+)(?:\s+-\s+(.*))?$")


def summarize(path):
    counts = collections.Counter()
    failed = []
    in_summary = False
    totals = ""
    with open(path, errors="replace") as report:
        for line in report:
            if re.search(r"\d+ (passed|failed).* in [\d.]+s", line):
                totals = line.strip().strip("=").strip()
            if "short test summary info" in line:
                in_summary = True
                continue
            if not in_summary:
                continue
            match = _LINE.match(line.strip())
            if match:
                outcome, subtest, test, why = match.groups()
                counts[outcome] += 1
                if "FAIL" in outcome or "ERROR" in outcome:
                    name = test.split("::")[-1] + (subtest or "")
                    failed.append((name, (why or "")[:160]))
    return counts, failed, totals


def main(paths):
    for path in paths:
        counts, failed, totals = summarize(path)
        print(f"== {path}: pytest says: {totals or 'no final line (stopped early?)'}")
        print("   listed: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for test, why in failed:
            print(f"   {test}: {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
