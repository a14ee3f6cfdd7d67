"""DistributedDataParallel with backend="kizuna": training, no_sync and
find_unused_parameters, against the same runs over Gloo."""

import harness


def test_ddp_matches_gloo():
    results = harness.run("ddp_worker.py", 2, timeout=150)
    assert all(r["checked"] > 10 for r in results)
