"""A rank that exits with calls still in flight on kizuna's threads exits
cleanly: kizuna_torch's atexit handler lets those threads drop their last
references to its tensors before Python finalizes (kizuna_work.hpp, "Exit").
Without it, about 8 runs in 10 of workers/exit_worker.py abort under torch
2.15 (none did under 1.13)."""

import harness


def test_exit_with_calls_in_flight_is_clean():
    jobs = [(n, harness.start("exit_worker.py", n)) for n in (2, 3, 2)]
    for n, procs in jobs:
        outs = harness.collect(procs, timeout=120)
        for rc, res, _, err in outs:
            assert rc == 0 and res == {"started": 300, "world": n}, harness.report(outs)
            assert "terminate called" not in err and "still in flight" not in err, harness.report(outs)
