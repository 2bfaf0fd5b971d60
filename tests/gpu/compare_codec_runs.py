"""Compares the codec worker's runs (tests/gpu/codec_worker.py): every output of the
"gpu" and "mixed" runs must equal the "cpu" run's, bit for bit, on every rank.

  python tests/gpu/compare_codec_runs.py OUT_DIR [RUN ...]      (default runs: gpu mixed)
"""

import glob
import os
import sys

import numpy as np


def main(argv):
    out_dir = argv[1]
    runs = argv[2:] or ["gpu", "mixed"]
    failed = 0
    for cpu_path in sorted(glob.glob(os.path.join(out_dir, "codec_cpu_rank*.npz"))):
        rank = cpu_path.rsplit("rank", 1)[1].split(".")[0]
        cpu = np.load(cpu_path)
        for run in runs:
            path = os.path.join(out_dir, "codec_%s_rank%s.npz" % (run, rank))
            if not os.path.exists(path):
                print("FAIL  %s rank %s: %s missing" % (run, rank, path))
                failed += 1
                continue
            other = np.load(path)
            for key in cpu.files:
                a, b = cpu[key], other[key]
                same = a.shape == b.shape and np.array_equal(a.view(np.uint32),
                                                            b.view(np.uint32))
                if not same:
                    failed += 1
                print("%s  %s rank %s %s equals the cpu run" % ("PASS" if same else "FAIL",
                                                               run, rank, key))
    if not glob.glob(os.path.join(out_dir, "codec_cpu_rank*.npz")):
        print("FAIL  no cpu run in %s" % out_dir)
        failed += 1
    print("compare_codec_runs: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
