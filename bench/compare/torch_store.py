#!/usr/bin/python3
"""PyTorch's TCPStore timed on the operations bench/bench_store times.

    /usr/bin/python3 bench/compare/torch_store.py [--seconds 2] [--repetitions 3]

Debian's python3-torch (1.13) provides torch.distributed.TCPStore; run it
with /usr/bin/python3 (the system interpreter that has it).

  set/get/add    round trips per second from 1 and 16 clients, each client a
                 TCPStore of its own on one server (is_master=True, in this
                 process; its daemon thread runs without the GIL). Clients run
                 as threads (as bench_store's do) and, because Python's GIL
                 serialises the binding's Python side, also as processes; the
                 better of the two is what kizuna is compared with.
  rendezvous/64  64 ranks (threads) each connect a client, set their address,
                 then get everyone's (64 gets; TCPStore has no multi_get in
                 Python); seconds per rendezvous.
  binding        HashStore.set from Python: the cost of the Python call itself,
                 to read the round-trip numbers against.

Prints one line per measurement, medians of the repetitions, in the units
bench_store uses (items/s; ms per rendezvous).
"""
import argparse
import datetime
import multiprocessing as mp
import statistics
import threading
import time

import torch
import torch.distributed as dist

VALUE = b"10.1.2.3:29500"
TIMEOUT = datetime.timedelta(seconds=60)


def make_server():
    return dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False)


def make_client(port):
    return dist.TCPStore("127.0.0.1", port, None, False, TIMEOUT, wait_for_workers=False)


def one_op(store, op, key):
    if op == "set":
        store.set(key, VALUE)
    elif op == "get":
        store.get(key)
    elif op == "add":
        store.add("bench/add", 1)


def client_loop(port, op, index, seconds, start_barrier, results):
    """Runs `op` for `seconds` after the barrier; appends its count."""
    store = make_client(port)
    key = "bench/%s/%d" % (op, index)
    store.set(key, VALUE)
    start_barrier.wait()
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(16):
            one_op(store, op, key)
        n += 16
    results.append(n)


def ops_per_second_threads(port, op, clients, seconds):
    barrier = threading.Barrier(clients + 1)
    results = []
    threads = [threading.Thread(target=client_loop, args=(port, op, i, seconds, barrier, results))
               for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return sum(results) / (time.perf_counter() - start)


def process_main(port, op, index, seconds, barrier, queue):
    results = []
    client_loop(port, op, index, seconds, barrier, results)
    queue.put(results[0])


def ops_per_second_processes(port, op, clients, seconds):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients + 1)
    queue = ctx.Queue()
    procs = [ctx.Process(target=process_main, args=(port, op, i, seconds, barrier, queue))
             for i in range(clients)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    total = sum(queue.get() for _ in procs)
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    # Each process ran `seconds` after the barrier; the wall time includes
    # reporting, so count over the window each one measured.
    return total / min(elapsed, seconds * 1.02)


def rendezvous_seconds(port, ranks, round_id):
    prefix = "rdv/%d/" % round_id
    errors = []

    def rank_main(rank):
        try:
            store = make_client(port)
            store.set(prefix + str(rank), VALUE + b"/" + str(rank).encode())
            for r in range(ranks):
                store.get(prefix + str(r))
        except Exception as e:  # reported below; a failed round is not a measurement
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def binding_ops_per_second(seconds):
    store = dist.HashStore()
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(64):
            store.set("k", VALUE)
        n += 64
    return n / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per repetition")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--rendezvous-rounds", type=int, default=10)
    args = parser.parse_args()

    server = make_server()
    port = server.port
    print("torch %s TCPStore on 127.0.0.1:%d" % (torch.__version__, port))

    for op in ("set", "get", "add"):
        for clients in (1, 16):
            modes = [("threads", ops_per_second_threads)]
            if clients > 1:
                modes.append(("processes", ops_per_second_processes))
            for mode, fn in modes:
                runs = [fn(port, op, clients, args.seconds) for _ in range(args.repetitions)]
                print("torch %-4s clients:%-2d %-9s items_per_second=%.0f  (runs: %s)" % (
                    op, clients, mode, statistics.median(runs), ", ".join("%.0f" % r for r in runs)))

    runs = []
    for rep in range(args.repetitions):
        times = [rendezvous_seconds(port, 64, rep * 1000 + i) for i in range(args.rendezvous_rounds)]
        runs.append(statistics.median(times))
    print("torch rendezvous/64/get  ms=%.1f  (medians of %d rounds: %s)" % (
        1e3 * statistics.median(runs), args.rendezvous_rounds, ", ".join("%.1f" % (1e3 * r) for r in runs)))

    runs = [binding_ops_per_second(args.seconds) for _ in range(args.repetitions)]
    print("torch HashStore.set (Python call cost) items_per_second=%.0f" % statistics.median(runs))


if __name__ == "__main__":
    main()
