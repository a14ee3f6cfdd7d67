"""DDP step time, backend="kizuna" vs backend="gloo", in the same run.

    /usr/bin/python3 bench_ddp.py [--worlds 2 4] [--runs 3] [--steps 10] [--batch 8]

For each world size, --runs times: start the ranks afresh; in those same
processes create the default group with "kizuna" and a second group with
"gloo"; train two DDP copies of one ~25M-parameter MLP (1024-4096-4096-1024,
float32, CPU, SGD) on the same batches, plus a third copy without DDP (the
compute floor: a step whose communication costs nothing), taking steps of
the three in turn so that all see the same machine load;
report each one's median step time. overhead = DDP step - no-DDP step, the
part of a step that communication adds. A fourth copy runs DDP with a comm
hook that returns each bucket untouched: DDP's own work per step (copying
gradients into buckets and back, its hooks and futures) with communication
that costs nothing, the floor under either backend's overhead. The table
gives the median over runs (and every run's values). One intra-op thread
per rank (OMP_NUM_THREADS=1), the same for both backends.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(args):
    import copy
    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import kizuna_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("kizuna", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024))
    params = sum(p.numel() for p in base.parameters())
    models = {}
    for name, group in (("kizuna", dist.group.WORLD), ("gloo", gloo)):
        ddp = DDP(copy.deepcopy(base), process_group=group)
        models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3))
    # DDP with a hook that communicates nothing: what DDP itself adds.
    floor = DDP(copy.deepcopy(base), process_group=dist.group.WORLD)

    def keep_bucket(state, bucket):
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    floor.register_comm_hook(None, keep_bucket)
    models["floor"] = (floor, torch.optim.SGD(floor.parameters(), lr=1e-3))
    # The same step without DDP: what is left of a step when communication
    # costs nothing (the compute floor of both backends).
    local = copy.deepcopy(base)
    models["local"] = (local, torch.optim.SGD(local.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 1024, generator=g)
    y = torch.randn(args.batch, 1024, generator=g)

    def step(name):
        ddp, opt = models[name]
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    times = {"kizuna": [], "gloo": [], "floor": [], "local": []}
    for name in times:  # warm-up: buckets rebuilt after the first step, buffers faulted in
        for _ in range(2):
            step(name)
    for _ in range(args.steps):
        for name in times:  # round robin: slow drifts of the machine's load hit all three alike
            dist.barrier(group=gloo)
            start = time.perf_counter()
            step(name)
            times[name].append(time.perf_counter() - start)
    # Rank 0's view; each rank's step ends with the same all-reduce.
    med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    if rank == 0:
        import json
        print("RESULT " + json.dumps(dict(params=params, **med)), flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps per backend per run")
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    sys.path.insert(0, HERE)
    from launch import median, run_ranks

    print(f"DDP step time, ~25M-parameter MLP, batch {args.batch} per rank, float32 CPU, "
          f"median of {args.steps} steps per run, median of {args.runs} runs")
    print("| processes | gloo ms/step | kizuna ms/step | no-DDP ms/step | gloo overhead ms | kizuna overhead ms "
          "| kizuna / gloo overhead | DDP-only overhead ms (floor / gloo) | runs (gloo / kizuna / DDP-only / no-DDP ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world in args.worlds:
        runs = [run_ranks(os.path.abspath(__file__), world,
                          ["--worker", "--steps", str(args.steps), "--batch", str(args.batch)])
                for _ in range(args.runs)]
        g = median([r["gloo"] for r in runs]) * 1e3
        k = median([r["kizuna"] for r in runs]) * 1e3
        f = median([r["floor"] for r in runs]) * 1e3
        n = median([r["local"] for r in runs]) * 1e3
        each = ", ".join(f"{r['gloo'] * 1e3:.0f}/{r['kizuna'] * 1e3:.0f}/{r['floor'] * 1e3:.0f}/{r['local'] * 1e3:.0f}"
                         for r in runs)
        print(f"| {world} | {g:.0f} | {k:.0f} | {n:.0f} | {g - n:.0f} | {k - n:.0f} | {(k - n) / (g - n):.2f}x "
              f"| {f - n:.0f} ({(f - n) / (g - n):.2f}x) | {each} |", flush=True)
    print(f"(model: {runs[0]['params'] / 1e6:.1f}M parameters)")


if __name__ == "__main__":
    main()
