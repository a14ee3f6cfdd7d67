"""DistributedDataParallel over backend "kizuna", checked against the same
training run over a Gloo group of the same ranks.

1. A small MLP, 20 SGD steps: the kizuna model ends with bit-identical
   parameters on every rank, and within tolerance of the Gloo model (same
   initial weights, same per-rank batches). Small buckets, so the gradients
   travel in several all-reduces that overlap the backward pass.
2. no_sync(): gradients accumulate locally for one micro-batch (they differ
   between ranks), and the next synchronised backward averages the sum.
3. find_unused_parameters=True: a model whose forward skips a branch on
   some steps still trains, on both backends alike.
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common import Checker, gloo_reference, init

rank, world = init()
gloo = gloo_reference()
kz = dist.group.WORLD
check = Checker(rank)
torch.manual_seed(0)  # the same initial model on every rank


def mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))


def batch(step, n=16):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 32, generator=g), torch.randn(n, 8, generator=g)


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def identical_across_ranks(name, t):
    """Every rank holds exactly rank 0's tensor (compared through Gloo)."""
    mine = t.clone()
    theirs = mine.clone()
    dist.broadcast(theirs, src=0, group=gloo)
    check.expect(name, torch.equal(mine, theirs),
                 f"rank {rank} differs from rank 0 by {(mine - theirs).abs().max().item()}")


def train(model, steps, group, **ddp_args):
    ddp = DDP(model, process_group=group, **ddp_args)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return ddp


# ---- 1. 20 steps, kizuna vs gloo
base = mlp()
k_model = train(copy.deepcopy(base), 20, kz, bucket_cap_mb=0.01)
g_model = train(copy.deepcopy(base), 20, gloo, bucket_cap_mb=0.01)
identical_across_ranks("ddp parameters identical on every rank", flat_params(k_model.module))
check.close("ddp parameters vs gloo", flat_params(k_model.module), flat_params(g_model.module),
            exact=False, rtol=1e-4, atol=1e-5)
check.expect("ddp moved the parameters", not torch.equal(flat_params(k_model.module), flat_params(base)))


# ---- 2. no_sync
def accumulate(group):
    model = copy.deepcopy(base)
    ddp = DDP(model, process_group=group)
    x0, y0 = batch(100)
    x1, y1 = batch(101)
    with ddp.no_sync():
        nn.functional.mse_loss(ddp(x0), y0).backward()
    local = [p.grad.clone() for p in model.parameters()]
    nn.functional.mse_loss(ddp(x1), y1).backward()
    return local, [p.grad.clone() for p in model.parameters()]


k_local, k_synced = accumulate(kz)
g_local, g_synced = accumulate(gloo)
# What no_sync's backward must leave: this rank's own gradient, unreduced.
plain = copy.deepcopy(base)
x0, y0 = batch(100)
nn.functional.mse_loss(plain(x0), y0).backward()
for i, (k, want) in enumerate(zip(k_local, [p.grad for p in plain.parameters()])):
    check.close(f"no_sync gradient {i} is local", k, want, exact=False, rtol=1e-6, atol=1e-7)
for i, (k, g) in enumerate(zip(k_synced, g_synced)):
    check.close(f"no_sync then sync gradient {i} vs gloo", k, g, exact=False, rtol=1e-4, atol=1e-6)
    identical_across_ranks(f"no_sync then sync gradient {i} identical", k)
if world > 1:
    check.expect("no_sync gradients differ between ranks",
                 not torch.equal(k_local[0], k_synced[0]), "no_sync's backward was reduced")


# ---- 3. find_unused_parameters=True
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(32, 16)
        self.left = nn.Linear(16, 8)
        self.right = nn.Linear(16, 8)  # unused on odd steps

    def forward(self, x, use_right):
        h = torch.relu(self.trunk(x))
        return self.left(h) + (self.right(h) if use_right else 0)


def train_branchy(group):
    torch.manual_seed(1)
    model = Branchy()
    ddp = DDP(model, process_group=group, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(6):
        x, y = batch(200 + step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x, use_right=step % 2 == 0), y).backward()
        opt.step()
    return flat_params(model)


k_branchy = train_branchy(kz)
g_branchy = train_branchy(gloo)
identical_across_ranks("find_unused_parameters parameters identical", k_branchy)
check.close("find_unused_parameters vs gloo", k_branchy, g_branchy, exact=False, rtol=1e-4, atol=1e-6)

dist.barrier()
check.finish(world=world)
