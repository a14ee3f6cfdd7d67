"""Every collective, dtype and op on backend "kizuna", with 2 and 4
processes, equal to the Gloo backend's results on the same inputs."""

import pytest

import harness


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_gloo(world):
    results = harness.run("collectives_worker.py", world, timeout=200)
    assert all(r["world"] == world and r["checked"] > 300 for r in results)
