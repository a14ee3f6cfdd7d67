"""Elastic DDP with backend="kizuna": training goes on when a rank dies.

    kizuna-run --nproc-per-node 4 --elastic 2:4 -- python3 elastic_ddp.py --epochs 3

Kill any worker but rank 0 meanwhile (kill -9), or pass `--kill-rank 2
--kill-step 40` to have one die by itself. The survivors shrink the group
and go on; kizuna-run, told --elastic, lets them. (Rank 0's process holds
torch's env:// store, which the survivors need: its loss ends the job.)

What this adds to a plain DDP loop:
- A step that raises RuntimeError (DDP's all-reduce failing because a rank
  was lost) is not fatal: the survivors call kizuna_torch.shrink(group),
  take the new group's rank 0's state (model, optimizer, position in the
  epoch) by broadcast, rebuild DDP on the new group and redo the step.
- The epoch is dealt out by position in the epoch's permutation, as
  DistributedSampler deals it (position i to rank i mod world), so the
  survivors share what remains of it: every sample of every epoch is used
  once, whatever the world size did. Each epoch's line says how many.
- The loss of a step is scaled so that DDP's average over the world is the
  mean over the step's samples, also for a last, uneven step.

The data are synthetic (a fixed random teacher labels Gaussian points), so
the program needs no download; it prints the final test accuracy.
"""

import argparse
import gc
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import kizuna_torch

FEATURES, CLASSES = 32, 8


def make_data(n, seed):
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, FEATURES, generator=gen)
    y = (x @ teacher + 0.5 * torch.randn(n, CLASSES, generator=gen)).argmax(dim=1)
    return x, y


def log(group, text):
    if dist.get_rank(group) == 0:
        print(f"[elastic_ddp] {text}", flush=True)


def take_state(group, model, optimizer, counters):
    """Every member of `group` takes its rank 0's parameters, momentum and
    counters (a failed step may have completed on some survivors only)."""
    src = dist.get_global_rank(group, 0)
    for p in model.parameters():
        dist.broadcast(p.data, src=src, group=group)
        dist.broadcast(optimizer.state[p]["momentum_buffer"], src=src, group=group)
    dist.broadcast(counters, src=src, group=group)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-rank", type=int, default=-1, help="this global rank SIGKILLs itself...")
    parser.add_argument("--kill-step", type=int, default=-1, help="...at the start of this step")
    args = parser.parse_args()

    dist.init_process_group("kizuna", init_method="env://")
    me = dist.get_rank()
    group = dist.group.WORLD
    x, y = make_data(args.samples, args.seed)
    test_x, test_y = make_data(2048, args.seed + 1)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for p in model.parameters():  # present from the start, so it can be broadcast
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    ddp = DDP(model, process_group=group)
    # epoch, position in the epoch's permutation, steps, samples this epoch
    counters = torch.zeros(4, dtype=torch.int64)
    log(group, f"{group.size()} ranks, {args.samples} samples, batch {args.batch_size} per rank")

    while counters[0] < args.epochs:
        epoch, pos, step, _ = counters.tolist()
        perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        world, rank = group.size(), dist.get_rank(group)
        take = min(world * args.batch_size, args.samples - pos)
        mine = perm[pos + rank:pos + take:world]
        failure = None
        try:
            if me == args.kill_rank and step == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(x[mine]), y[mine], reduction="sum") * world / take
            loss.backward()
            optimizer.step()
        except RuntimeError as e:
            failure = str(e).splitlines()[0]
        if failure is not None:
            # The old DDP's hooks on the parameters must go with it before
            # a new one is built.
            ddp = None
            gc.collect()
            start = time.monotonic()
            old_world = world
            group = kizuna_torch.shrink(group)
            take_state(group, model, optimizer, counters)
            ddp = DDP(model, process_group=group)
            log(group, f"lost a rank at step {step} ({failure}); shrank from {old_world} to "
                       f"{group.size()} ranks in {time.monotonic() - start:.3f} s; redoing the step")
            continue
        counters[1] += take
        counters[2] += 1
        counters[3] += take
        if counters[1] == args.samples:
            log(group, f"epoch {epoch + 1}: {int(counters[3])} samples, world {world}, "
                       f"last loss {loss.item():.4f}")
            counters[0] += 1
            counters[1] = 0
            counters[3] = 0

    with torch.no_grad():
        accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
    log(group, f"done: {int(counters[2])} steps, world {group.size()}, final test accuracy {accuracy:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
