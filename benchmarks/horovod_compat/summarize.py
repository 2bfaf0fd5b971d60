"""Lists every test of a run of one of Horovod's test files, per rank: passed, failed or
skipped, with a one-line reason (a failure's error line, a skip's message). A test that TF's
run_all_in_graph_and_eager_modes splits into `graph_mode` / `eager_mode` subtests counts
per subtest; a test skipped as a whole counts once. Reads the JSON lines tfps_report.py
wrote for each worker:

    summarize.py [--markdown] worker0.jsonl [worker1.jsonl ...]
"""

import collections
import json
import sys


def parse(path):
    """{unit: (outcome, reason)} for one worker; a unit is `test` or `test[subtest]`."""
    units, with_subtests = {}, set()
    with open(path) as report:
        for line in report:
            record = json.loads(line)
            unit = record["test"]
            if record["subtest"]:
                unit += f"[{record['subtest']}]"
                with_subtests.add(record["test"])
            if unit in units and units[unit][0] != "passed":
                continue  # a setup/call failure stays; teardown adds nothing new
            units[unit] = (record["outcome"], record["reason"])
    # A test with subtests: its own "passed" only says that its subtests ran.
    return {unit: result for unit, result in units.items()
            if unit not in with_subtests or result[0] != "passed"}


def main(argv):
    markdown = "--markdown" in argv
    paths = [a for a in argv if a != "--markdown"]
    runs = [parse(path) for path in paths]
    for rank, units in enumerate(runs):
        counts = collections.Counter(outcome for outcome, _ in units.values())
        cpu = collections.Counter(outcome for name, (outcome, _) in units.items()
                                  if "gpu" not in name)
        print(f"rank {rank}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
              f" of {len(units)} tests/subtests; without the GPU tests: " +
              ", ".join(f"{k} {v}" for k, v in sorted(cpu.items())) +
              f" of {sum(cpu.values())} ({paths[rank]})")
    names = sorted(set().union(*runs))
    if markdown:
        print("\n| test | " + " | ".join(f"rank {r}" for r in range(len(runs))) +
              " | reason (first rank that did not pass) |")
        print("|---|" + "---|" * len(runs) + "---|")
    for name in names:
        results = [units.get(name, ("missing", "")) for units in runs]
        why = next((r for o, r in results if o != "passed" and r), "")
        why = why.replace("|", "\\|")[:200] if markdown else why[:160]
        outcomes = [outcome for outcome, _ in results]
        if markdown:
            print(f"| {name} | " + " | ".join(outcomes) + f" | {why} |")
        else:
            print(f"{name:66s} {'/'.join(outcomes):16s} {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
