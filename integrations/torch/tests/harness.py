"""Launches test workers as separate processes, the way torchrun does.

Each worker is a Python script run by this interpreter with the launcher's
variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT) and prints one line ``RESULT <json>`` on success.
A worker that fails prints its traceback; run() then fails the test with
every rank's output.
"""

import importlib.util
import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
SOURCE = HERE.parent


def _ephemeral_low():
    """The lowest port the kernel hands out by itself (bind to port 0,
    connect's source ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A free port below the kernel's ephemeral range, for a worker to bind.

    A port from binding port 0 is one the kernel may hand to any process
    again the moment it is released (a listener or a connection's source
    port of another test running alongside), before rank 0 binds it. Below
    the ephemeral range only another caller of free_port() picking the
    same port at random can take it."""
    rng = random.SystemRandom()
    high = min(_ephemeral_low(), 65536) - 1
    low = max(1024, min(20000, high - 1000))
    for _ in range(200 if high > low else 0):
        port = rng.randint(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below it: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kizuna_run():
    """kizuna-run: KIZUNA_RUN, else the build tree's (<build>/bin/kizuna-run,
    found from the kizuna_torch package on PYTHONPATH,
    <build>/integrations/torch/python), else the one on PATH."""
    if os.environ.get("KIZUNA_RUN"):
        return os.environ["KIZUNA_RUN"]
    spec = importlib.util.find_spec("kizuna_torch")
    if spec is not None and spec.origin:
        built = Path(spec.origin).resolve().parents[4] / "bin" / "kizuna-run"
        if built.exists():
            return str(built)
    found = shutil.which("kizuna-run")
    assert found, "kizuna-run not found: set KIZUNA_RUN, or build it next to kizuna_torch, or put it on PATH"
    return found


def worker_env(extra=None):
    env = dict(os.environ)
    # One intra-op thread per rank: the ranks already outnumber the cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(HERE), env.get("PYTHONPATH", "")] if p)
    env.update(extra or {})
    return env


def start(script, world_size, args=(), env=None, port=None):
    """Starts `world_size` ranks of workers/<script>; returns the Popens."""
    port = port or free_port()
    procs = []
    for rank in range(world_size):
        e = worker_env(env)
        e.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                 LOCAL_WORLD_SIZE=str(world_size), GROUP_RANK="0",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKERS / script), *map(str, args)], env=e,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def collect(procs, timeout, expect_rc=None):
    """Waits for every rank; returns [(returncode, result dict or None, stdout, stderr)]."""
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            out += "\n[harness: killed after timeout]"
        result = None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        outs.append((p.returncode, result, out, err))
    return outs


def report(outs):
    return "\n".join(
        f"--- rank {r}: rc {rc}\nstdout:\n{out[-4000:]}\nstderr:\n{err[-6000:]}"
        for r, (rc, _, out, err) in enumerate(outs))


def run(script, world_size, args=(), env=None, timeout=150):
    """Runs a worker on every rank; fails unless all exit 0 with a RESULT."""
    return run_together([(script, world_size)], args, env, timeout)[0]


def run_together(jobs, args=(), env=None, timeout=150):
    """Runs several (script, world size) jobs at the same time, each its own
    process group; returns each job's RESULTs. Starting them together
    overlaps their seconds of `import torch`."""
    started = [(script, n, start(script, n, args, env)) for script, n in jobs]
    results = []
    for script, n, procs in started:
        outs = collect(procs, timeout)
        ok = all(rc == 0 and res is not None for rc, res, _, _ in outs)
        assert ok, f"{script} x{n} failed\n" + report(outs)
        results.append([res for _, res, _, _ in outs])
    return results
