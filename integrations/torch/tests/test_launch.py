"""kizuna-run launches torch scripts as torchrun does (issue 37): a DDP
script (workers/launch_worker.py) with init_process_group(backend) and
env://, whose rank 0 starts torch's TCPStore at MASTER_PORT, runs to the end
with backend "gloo" and "kizuna" under this interpreter's torch 1.13; with
"gloo" on two kizuna-run "nodes" over loopback; after a restart; and with
"gloo" under torch 2.x, the interpreter KIZUNA_TORCH2_PYTHON (default: the
project's virtual environment, <source>/.venv-torch/bin/python), skipped
with the reason when there is none.

kizuna-run is found by harness.kizuna_run().
"""

import json
import os
import re
import subprocess
import sys

import pytest

import harness

WORKER = harness.WORKERS / "launch_worker.py"
TIMEOUT = 150  # per kizuna-run job: 2 to 4 ranks importing torch on 2 cores take 10-20 s


def launch(python, backend, *flags, env=None):
    """Starts one kizuna-run of the worker; returns the Popen."""
    return subprocess.Popen(
        [harness.kizuna_run(), *flags, "--", python, "-u", str(WORKER), backend],
        env=harness.worker_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc):
    """Waits for a kizuna-run; returns its output and the workers' START and
    RESULT lines as {rank: [values, ...]}, in the order printed."""
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()  # its workers die with it (PR_SET_PDEATHSIG)
        out, _ = proc.communicate()
        out += "\n[test: killed kizuna-run after the timeout]"
    lines = {"START": {}, "RESULT": {}}
    for m in re.finditer(r"^\[(\d+)\] (START|RESULT) (.*)$", out, re.M):
        lines[m[2]].setdefault(int(m[1]), []).append(json.loads(m[3]))
    assert proc.returncode == 0, f"kizuna-run exited {proc.returncode}\n{out[-8000:]}"
    return out, lines


def check_results(results, world, backend, torch_major, out):
    assert sorted(results) == list(range(world)), out[-8000:]
    ports = {r[-1]["master_port"] for r in results.values()}
    assert len(ports) == 1, f"ranks saw different MASTER_PORTs {ports}\n{out[-8000:]}"
    for rank, r in results.items():
        assert r[-1]["rank"] == rank and r[-1]["world"] == world and r[-1]["backend"] == backend, r
        assert r[-1]["torch"].startswith(f"{torch_major}."), r


@pytest.mark.parametrize("backend", ["gloo", "kizuna"])
def test_one_node_torch1(backend):
    """The issue's command: kizuna-run --nproc-per-node 3 -- python3 train.py."""
    out, lines = finish(launch(sys.executable, backend, "--nproc-per-node", "3"))
    check_results(lines["RESULT"], 3, backend, 1, out)


def test_two_nodes_torch1_gloo():
    """Two kizuna-run, one per "node", on loopback: both nodes' workers get
    the MASTER_PORT node 0 reserved, and rank 0 (on node 0) binds it."""
    port = str(harness.free_port())
    nodes = [launch(sys.executable, "gloo", "--nnodes", "2", "--node-rank", str(k), "--nproc-per-node", "2",
                    "--master-addr", "127.0.0.1", "--master-port", port) for k in range(2)]
    outs = [finish(p) for p in nodes]
    results = {**outs[0][1]["RESULT"], **outs[1][1]["RESULT"]}
    check_results(results, 4, "gloo", 1, outs[0][0] + outs[1][0])
    assert str(next(iter(results.values()))[-1]["master_port"]) != port


def test_restart_torch1_gloo(tmp_path):
    """Rank 1 fails on its first start; round 1 gets a fresh MASTER_PORT
    (a worker of round 0 still trying to reach its store never finds round
    1's), rank 0 starts a new TCPStore there, and the job succeeds."""
    out, lines = finish(launch(sys.executable, "gloo", "--nproc-per-node", "3", "--max-restarts", "1",
                               env={"FAIL_ONCE": str(tmp_path / "failed-once")}))
    assert "restarting the workers (restart 1 of 1" in out, out[-8000:]
    check_results(lines["RESULT"], 3, "gloo", 1, out)
    assert all(r[-1]["restart"] == 1 for r in lines["RESULT"].values()), lines["RESULT"]
    round0 = {s["master_port"] for s in lines["START"][1] if s["restart"] == 0}
    round1 = {s["master_port"] for s in lines["START"][1] if s["restart"] == 1}
    assert len(round0) == 1 and len(round1) == 1 and round0 != round1, lines["START"]


def torch2_python():
    """The torch 2.x interpreter, or pytest.skip with the reason."""
    python = os.environ.get("KIZUNA_TORCH2_PYTHON") or str(harness.SOURCE.parents[1] / ".venv-torch" / "bin" / "python")
    if not os.access(python, os.X_OK):
        pytest.skip(f"no torch 2.x interpreter: {python} does not exist (set KIZUNA_TORCH2_PYTHON)")
    probe = subprocess.run([python, "-c", "import torch.distributed; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import torch.distributed: {probe.stderr.strip()[-500:]}")
    version = probe.stdout.strip()
    if not version.startswith("2."):
        pytest.skip(f"{python} has torch {version}, not 2.x")
    return python


def test_one_node_torch2_gloo():
    """torch 2.x's env:// (TORCHELASTIC_USE_AGENT_STORE=False: rank 0
    hosts the TCPStore, libuv's this time) under kizuna-run."""
    python = torch2_python()
    out, lines = finish(launch(python, "gloo", "--nproc-per-node", "3"))
    check_results(lines["RESULT"], 3, "gloo", 2, out)
