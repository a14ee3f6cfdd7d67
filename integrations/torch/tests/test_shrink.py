"""kizuna_torch.shrink(): survivors of a lost rank get a new process group
on which collectives are exact and DDP trains; a second loss is survived
too (workers/shrink_worker.py)."""

import harness


def test_survivors_shrink_twice_and_keep_training():
    outs = harness.collect(harness.start("shrink_worker.py", 4), timeout=150)
    detail = harness.report(outs)
    assert outs[2][0] == -9 and outs[3][0] == -9, "ranks 2 and 3 should have died by SIGKILL\n" + detail
    for rank in (0, 1):
        rc, res, _, _ = outs[rank]
        assert rc == 0 and res is not None, detail
        print(f"rank {rank}: {res}")
        # The group's timeout is 60 s; a shrink takes well under it.
        assert res["first_shrink_s"] < 10 and res["second_shrink_s"] < 10, detail


def test_shrink_without_the_store_raises_within_the_timeout():
    # Rank 0 holds torch's env:// store: its loss cannot be survived, and
    # the survivors are told so instead of waiting.
    outs = harness.collect(harness.start("shrink_worker.py", 3, args=["store-host"]), timeout=120)
    detail = harness.report(outs)
    assert outs[0][0] == -9, "rank 0 should have died by SIGKILL\n" + detail
    for rank in (1, 2):
        rc, res, _, _ = outs[rank]
        assert rc == 0 and res is not None, detail
        print(f"rank {rank}: {res}")
        assert res["seconds"] < 20, detail
        assert "shrink" in res["message"], detail
