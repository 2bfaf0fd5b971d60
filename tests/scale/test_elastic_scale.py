"""An elastic change at N = 16 with core workers (no TensorFlow): `tfps-run` with a host
discovery script, a worker SIGKILLed and later a slot added (elastic_job.py). The
survivors restore their last commit and go on as 15; the newcomer joins at a commit and
takes rank 0's state; every worker ends with the same weights as a NumPy replay of the
members of each step, bit for bit. What an elastic change costs at N = 16..64 is measured
by benchmarks/scale_elastic.py (docs/scale.md).

Run time on a 2-core machine under a load of 6 to 31: 14-16 s.
"""

import pytest

from elastic_job import ElasticScaleJob


@pytest.mark.timeout(200)
def test_sixteen_workers_lose_one_and_gain_one_bit_exact(tmp_path):
    job = ElasticScaleJob(tmp_path, 16, timeout=150)
    code = job.run()
    assert code == 0, job.log()
    assert job.added_at is not None, "rank 0 never ran 3 steps in epoch 1\n" + job.log()
    log = job.log(10_000)
    assert "worker w15 (rank 15) was killed by signal 9 (SIGKILL); the job goes on with " \
           "15 worker(s)" in log, job.log()
    assert "started worker(s) w16 on new slot(s)" in log, job.log()
    assert "elastic epoch 2: 16 worker(s)" in log, job.log()
    runs = job.check_replay()
    assert runs[1][1] >= 3, runs  # rank 0 ran 3 steps of 15 before the slot came
    # every member of epochs 1 and 2 ran a step there
    assert sorted(job.first_steps(1)) == sorted(f"w{k}" for k in range(15))
    assert sorted(job.first_steps(2)) == sorted([f"w{k}" for k in range(15)] + ["w16"])
