"""A rank that hangs or dies: the other ranks raise RuntimeError, carrying
kizuna's message, within the timeout given to the process group."""

import harness


def test_hung_and_dead_rank_raise_within_timeout():
    outs = harness.collect(harness.start("failure_worker.py", 3), timeout=120)
    detail = harness.report(outs)
    assert outs[2][0] == -9, "rank 2 should have died by SIGKILL\n" + detail
    for rank in (0, 1):
        rc, res, _, _ = outs[rank]
        assert rc == 0 and res is not None, detail
        print(f"rank {rank}: {res}")
        hung, dead = res["hung"], res["dead"]
        # Hung rank: a timeout after about the group's 4 s, naming rank 2.
        assert hung["raised"], detail
        assert hung["seconds"] < res["hung_timeout"] + 10, detail
        assert "timed out" in hung["message"] and "rank 2" in hung["message"], detail
        assert "all_reduce" in hung["message"], detail
        # Dead rank: raised well within init_process_group's timeout, naming it.
        assert dead["raised"], detail
        assert dead["seconds"] < res["init_timeout"], detail
        assert "rank 2" in dead["message"] and "all_reduce" in dead["message"], detail
        assert dead["completed"] and not dead["success"], detail
        assert dead["future"] == dead["message"], detail
