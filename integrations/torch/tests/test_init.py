"""Initialisation (env:// with torchrun's variables, tcp://, file://, a
store passed in, the real torchrun), process groups, the Work API, argument
errors, and the c10d-store adapter that kizuna rendezvous through."""

import datetime
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import harness
import kizuna_torch
from kizuna_torch import _C


def test_torchrun_env_tcp_file_groups_work_and_errors(tmp_path):
    """torchrun (torch.distributed.run) starts 3 ranks of workers/init_worker.py."""
    env = harness.worker_env({"TCP_PORT": str(harness.free_port()),
                              "FILE_STORE": str(tmp_path / "filestore")})
    env["PYTHONPATH"] = os.pathsep.join([str(harness.WORKERS), env["PYTHONPATH"]])
    # --redirects/--tee 1: torch 1.13's Std.from_str("0") (the default)
    # returns None under Python 3.11, whose IntFlag iteration skips NONE,
    # and torchrun then fails before starting any worker; 1 (stdout) works.
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "3",
         "--master_addr", "127.0.0.1", "--master_port", str(harness.free_port()),
         "--redirects", "1", "--tee", "1", "--log_dir", str(tmp_path / "logs"),
         str(harness.WORKERS / "init_worker.py")],
        env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    results = [line for line in proc.stdout.splitlines() if "RESULT " in line]
    assert len(results) == 3 and all('"world": 3' in line for line in results), proc.stdout


def test_store_passed_in_world_of_one():
    """init_process_group(store=HashStore) with one rank: every call works
    (and the Work API) without any peer."""
    dist.init_process_group("kizuna", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        t = torch.arange(5.0)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert torch.equal(t, torch.arange(5.0))
        outs = [torch.empty(5)]
        dist.all_gather(outs, t)
        assert torch.equal(outs[0], t)
        out = torch.empty(5)
        dist.all_to_all_single(out, t)
        assert torch.equal(out, t)
        dist.barrier()
        assert dist.get_backend() == "kizuna"
    finally:
        dist.destroy_process_group()


@pytest.fixture(params=["hash", "tcp", "file", "prefix"])
def c10d_store(request, tmp_path):
    if request.param == "hash":
        return dist.HashStore()
    if request.param == "tcp":
        return dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    if request.param == "file":
        return dist.FileStore(str(tmp_path / "store"), 1)
    return dist.PrefixStore("group7", dist.HashStore())


def test_store_adapter(c10d_store):
    """Every kizuna::Store method through the adapter, on each c10d store."""
    s = _C._StoreAdapter(c10d_store)
    s.set("a", b"alpha")
    assert s.get("a", 1000) == b"alpha"
    assert c10d_store.get("a") == b"alpha"  # the same key, no extra prefix
    assert s.add("n", 5) == 5 and s.add("n", -2) == 3
    assert s.get("n", 1000) == b"3"  # counters are decimal text, as in c10d
    assert s.compare_set("a", b"alpha", b"beta") == b"beta"
    assert s.compare_set("a", b"wrong", b"gamma") == b"beta"
    assert s.compare_set("fresh", b"", b"new") == b"new"
    assert s.check(["a", "n"]) and not s.check(["a", "missing"])
    s.multi_set(["k1", "k2"], [b"1", b"2"])
    assert s.multi_get(["k2", "k1"], 1000) == [b"2", b"1"]
    s.append("log", b"x")
    s.append("log", b"yz")
    assert s.get("log", 1000) == b"xyz"
    s.wait(["a", "k1"], 1000)
    if not isinstance(c10d_store, dist.FileStore):  # FileStore counts keys its own way
        assert s.num_keys() >= 6
    assert s.delete_key("k1") and not s.check(["k1"])
    # Deadlines: a missing key is kizuna's Timeout after about the timeout.
    for call in (lambda: s.get("never", 300), lambda: s.wait(["a", "never"], 300),
                 lambda: s.multi_get(["never"], 300)):
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"timed out after 300 ms waiting for store key.*never"):
            call()
        assert time.monotonic() - start < 20


def test_store_adapter_stays_in_step_after_a_wait_times_out(c10d_store):
    """A wait that times out leaves every later request with its own answer.
    torch's TCPStore client gives a wait up by a receive timeout on its
    connection, and the server's answer, sent once the key comes, stays in
    the stream for the next request to read as its own: torch 1.13's check()
    then says a missing key is there. kizuna rendezvous in 100 ms waits while
    it watches for a published failure, so this wedged a 3-rank start-up
    (one rank waited its whole timeout for a failure nobody published)."""
    s = _C._StoreAdapter(c10d_store)
    s.set("ready", b"1")  # a FileStore's check() waits until its file exists
    with pytest.raises(RuntimeError, match=r"timed out after 100 ms waiting for store key.*late"):
        s.wait(["late"], 100)
    other = c10d_store
    if isinstance(c10d_store, dist.TCPStore):  # another client of the same server
        other = dist.TCPStore("127.0.0.1", c10d_store.port, 1, False, timeout=datetime.timedelta(seconds=30))
    other.set("late", b"1")
    time.sleep(0.2)  # an abandoned wait's answer would be in the stream by now
    assert not s.check(["missing"])
    assert s.check(["late"])
    assert s.get("late", 1000) == b"1"
    assert s.add("counter", 2) == 2
    assert not s.check(["missing"])
