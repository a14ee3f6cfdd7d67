"""What torch.distributed asks of a backend beyond results (PyTorch's
distributed tests ask it of Gloo): profiler events, sequence numbers,
monitored_barrier, group and per-call timeouts and their messages, and with
torch 2.x barrier(device_ids), get_future_result and the coalescing
manager. See workers/api_worker.py."""

import harness


def test_profiling_sequence_monitored_barrier_timeouts():
    results = harness.run("api_worker.py", 3, timeout=150)
    assert all(r["checked"] >= 10 for r in results)
