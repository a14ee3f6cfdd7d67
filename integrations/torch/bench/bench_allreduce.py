"""all_reduce bus bandwidth from Python, backend="kizuna" vs backend="gloo".

    /usr/bin/python3 bench_allreduce.py [--worlds 2 4] [--runs 3]

For each world size, --runs times: start the ranks afresh; in those same
processes (default group "kizuna", a second group "gloo") time
dist.all_reduce(float32 tensor, SUM) for sizes 1 KiB .. 64 MiB, the two
backends alternating per size. Per size and backend: after warm-up, the
median over 5 repetitions of (time of `iters` back-to-back calls / iters).
busbw = algbw x 2(n-1)/n (nccl-tests' all-reduce factor), algbw = bytes /
time; GB/s = 1e9 bytes/s. The table gives the median over runs.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB, x4


def worker(args):
    import datetime
    import json

    import torch
    import torch.distributed as dist

    import kizuna_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("kizuna", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"kizuna": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    out = []
    for size in SIZES:
        t = torch.ones(size // 4)
        iters = max(2, min(200, (8 << 20) // size))
        row = {"bytes": size}
        for name in ("gloo", "kizuna"):
            group = groups[name]
            for _ in range(2):
                dist.all_reduce(t, group=group)
            reps = []
            for _ in range(5):
                dist.barrier(group=groups["gloo"])
                start = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, group=group)
                reps.append((time.perf_counter() - start) / iters)
            sec = sorted(reps)[len(reps) // 2]
            row[name] = size / sec * 2 * (world - 1) / world / 1e9
            row[name + "_us"] = sec * 1e6
        out.append(row)
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    dist.barrier(group=groups["gloo"])
    dist.destroy_process_group()


def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    sys.path.insert(0, HERE)
    from launch import median, run_ranks

    for world in args.worlds:
        runs = [run_ranks(os.path.abspath(__file__), world, ["--worker"]) for _ in range(args.runs)]
        print(f"\nall_reduce float32 SUM, {world} processes, busbw GB/s (time per call), "
              f"median of {args.runs} runs")
        print("| size | gloo busbw | kizuna busbw | kizuna / gloo | gloo us | kizuna us |")
        print("|---|---|---|---|---|---|")
        for i, size in enumerate(SIZES):
            g = median([r[i]["gloo"] for r in runs])
            k = median([r[i]["kizuna"] for r in runs])
            gu = median([r[i]["gloo_us"] for r in runs])
            ku = median([r[i]["kizuna_us"] for r in runs])
            print(f"| {human(size)} | {g:.3f} | {k:.3f} | {k / g:.2f}x | {gu:.0f} | {ku:.0f} |", flush=True)


if __name__ == "__main__":
    main()
