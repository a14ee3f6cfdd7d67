"""Every collective, dtype and op on backend "kizuna", with 2 and 4
processes, equal to the Gloo backend's results on the same inputs."""

import harness


def test_collectives_match_gloo_2_and_4_processes():
    worlds = [2, 4]
    runs = harness.run_together([("collectives_worker.py", n) for n in worlds], timeout=200)
    for world, results in zip(worlds, runs):
        assert all(r["world"] == world and r["checked"] > 300 for r in results)
