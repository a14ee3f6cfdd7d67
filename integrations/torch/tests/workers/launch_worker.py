"""A torchrun-style DDP training script, as users write them, for
test_launch.py to start under kizuna-run:

    kizuna-run --nproc-per-node 3 -- python3 launch_worker.py gloo|kizuna

init_process_group(backend) with no init_method (env://, so rank 0 starts
torch's TCPStore at MASTER_ADDR:MASTER_PORT), then DistributedDataParallel
trains a Linear model for a few SGD steps on per-rank batches. Checked
without any communication of its own: the launcher's variables torch reads;
and the parameters against this process training a copy on every rank's
batches at once (with equal batch sizes, the mean of the ranks' gradients is
the gradient of the mean loss over all of them). Then the ranks' parameters
are compared exactly, over the group. Prints "START <json>" before
init_process_group and "RESULT <json>" at the end.

Imports no kizuna module unless the backend is "kizuna" (kizuna_torch is
built for torch 1.13; torch 2.x runs this script with gloo). With
FAIL_ONCE=<path>, rank 1 exits 3 when <path> does not exist yet, after
creating it: a failure on the first start only, for the restart test.
"""

import copy
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

backend = sys.argv[1]
if backend == "kizuna":
    import kizuna_torch  # noqa: F401  (registers backend "kizuna")

env = os.environ
print("START " + json.dumps({"rank": int(env["RANK"]), "master_port": int(env["MASTER_PORT"]),
                             "restart": int(env["TORCHELASTIC_RESTART_COUNT"])}), flush=True)
marker = env.get("FAIL_ONCE")
if marker and env["RANK"] == "1" and not os.path.exists(marker):
    open(marker, "w").close()
    print("rank 1 failing on its first start", flush=True)
    sys.exit(3)

dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


# What torchrun gives and torch's scripts read.
local_world = int(env["LOCAL_WORLD_SIZE"])
expect("RANK", rank == int(env["RANK"]), env["RANK"])
expect("WORLD_SIZE", world == int(env["WORLD_SIZE"]), env["WORLD_SIZE"])
expect("LOCAL_RANK", int(env["LOCAL_RANK"]) == rank - int(env["GROUP_RANK"]) * local_world, env["LOCAL_RANK"])
expect("GROUP_WORLD_SIZE", int(env["GROUP_WORLD_SIZE"]) * local_world == world, env["GROUP_WORLD_SIZE"])
expect("ROLE_RANK", env["ROLE_RANK"] == env["RANK"], env["ROLE_RANK"])
expect("ROLE_WORLD_SIZE", env["ROLE_WORLD_SIZE"] == env["WORLD_SIZE"], env["ROLE_WORLD_SIZE"])
expect("TORCHELASTIC_USE_AGENT_STORE", env["TORCHELASTIC_USE_AGENT_STORE"] == "False",
       env["TORCHELASTIC_USE_AGENT_STORE"])
expect("is_torchelastic_launched", dist.is_torchelastic_launched())
expect("MASTER_PORT is not kizuna's store", env["KIZUNA_STORE"].rsplit(":", 1)[1] != env["MASTER_PORT"],
       f"{env['MASTER_PORT']} vs {env['KIZUNA_STORE']}")

# ---- DDP against one process training on every rank's batches
STEPS, BATCH = 5, 8


def batch(step, r):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(BATCH, 20, generator=g), torch.randn(BATCH, 1, generator=g)


torch.manual_seed(0)  # the same initial model on every rank
model = nn.Linear(20, 1)
reference = copy.deepcopy(model)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
for step in range(STEPS):
    x, y = batch(step, rank)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    xs, ys = zip(*(batch(step, r) for r in range(world)))
    ref_opt.zero_grad()
    nn.functional.mse_loss(reference(torch.cat(xs)), torch.cat(ys)).backward()
    ref_opt.step()


def flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


mine, want = flat(model), flat(reference)
expect("DDP parameters against one process on the whole batch", torch.allclose(mine, want, rtol=1e-5, atol=1e-6),
       f"max difference {(mine - want).abs().max().item()}")
gathered = [torch.empty_like(mine) for _ in range(world)]
dist.all_gather(gathered, mine)
expect("the same parameters on every rank", all(torch.equal(g, gathered[0]) for g in gathered),
       f"rank {rank} sees differences up to {max((g - gathered[0]).abs().max().item() for g in gathered)}")
# Gloo's worker thread lets go of a call's tensors a moment after the call
# completes. Where it lets go of the last reference while Python finalizes,
# it must take the GIL, and the thread's exit aborts the process ("terminate
# called without an active exception", seen with torch 2.15 on Python 3.11,
# in ProcessGroupGloo::runLoop destroying an AsyncAllgatherWork). Wait until
# only this script holds them (Tensor._use_count, torch 2.x).
if hasattr(mine, "_use_count"):
    deadline = time.monotonic() + 10
    while any(t._use_count() > 1 for t in [mine, *gathered]) and time.monotonic() < deadline:
        time.sleep(0.001)
dist.destroy_process_group()

if failures:
    print("\n".join(failures), file=sys.stderr, flush=True)
    sys.exit(1)
print("RESULT " + json.dumps({"rank": rank, "world": world, "backend": backend, "torch": torch.__version__,
                              "master_port": int(env["MASTER_PORT"]),
                              "restart": int(env["TORCHELASTIC_RESTART_COUNT"])}), flush=True)
