"""What torch.distributed asks of a backend beyond the collectives' results,
as PyTorch's own distributed tests ask it of Gloo. World of 3.

1. Profiler events: each call records "kizuna:<call>" (Gloo's names with
   its prefix), asynchronous, with the input shapes.
2. Sequence numbers: the same on every rank, one more per call.
3. monitored_barrier, with Gloo's messages: passing; rank 2 missing (rank 0
   names it, rank 1 hears of it); ranks 1 and 2 missing with wait_all_ranks
   (rank 0 names both); a zero timeout; the group usable afterwards. Torch
   1.13's Python refuses it for any backend but Gloo, so there it is called
   on the group object.
4. Timeouts: the group's own (kizuna's deadline) and a per-call one shorter
   than the group's; both raise after the timeout with a message holding
   " timeout " (PyTorch's tests match " (Timed out|closed|timeout) ") and
   torch 2.x's DistBackendError; a per-call timeout aborts the communicator.
5. torch 2.x only: barrier(device_ids=...), Work.get_future_result(), and
   the coalescing manager's all_gather_into_tensor / reduce_scatter_tensor.
6. Point to point: receives posted before the sends (batch_isend_irecv),
   tags received out of order, receives from any source (recv() returns
   the sender; an irecv's Work says it), and a pending receive that holds
   back neither collectives nor an all-to-all.
Each scenario that leaves a group out of step uses a group of its own.
"""

import datetime
import re
import time

import torch
import torch.distributed as dist

from common import Checker, init

rank, world = init(timeout_s=60)
assert world == 3
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
check = Checker(rank)
store = dist.distributed_c10d._get_default_store()
seconds = datetime.timedelta


def raised(fn):
    """(message, exception type name, seconds taken); message None if nothing raised."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type is part of what is checked)
        return str(e), type(e).__name__, time.monotonic() - start
    return None, None, time.monotonic() - start


def expect_raise(name, fn, pattern):
    msg, kind, took = raised(fn)
    check.expect(name, msg is not None and re.search(pattern, msg) is not None,
                 f"{kind}: {msg!r} does not match {pattern!r}")
    return msg, kind, took


# ---- 1. profiler events
nxt, prv = (rank + 1) % world, (rank - 1) % world
with torch.autograd.profiler.profile(record_shapes=True) as prof:
    dist.all_reduce(torch.ones(3, 4))
    dist.all_gather([torch.empty(5) for _ in range(world)], torch.ones(5))
    dist.broadcast(torch.ones(7), src=0)
    dist.barrier()
    if rank % 2 == 0:
        dist.send(torch.ones(6), nxt)
        dist.recv(torch.empty(6), prv)
    else:
        dist.recv(torch.empty(6), prv)
        dist.send(torch.ones(6), nxt)
events = prof.function_events
for name, shapes in [("kizuna:all_reduce", [[3, 4]]), ("kizuna:all_gather", [[5]]),
                     ("kizuna:broadcast", [[7]]), ("kizuna:barrier", []),
                     ("kizuna:send", [[6]]), ("kizuna:recv", [[6]])]:
    found = [e for e in events if e.name == name]
    check.expect(f"profiler event {name}", len(found) == 1 and found[0].is_async
                 and found[0].input_shapes == shapes,
                 str([(e.name, e.is_async, e.input_shapes) for e in found]))

# ---- 2. sequence numbers
pg = dist.group.WORLD
before = pg._get_sequence_number_for_group()
dist.all_reduce(torch.ones(1))
after = pg._get_sequence_number_for_group()
check.expect("sequence number counts calls", after == before + 1, f"{before} -> {after}")
seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
dist.all_gather(seqs, torch.tensor([after]))
check.expect("sequence number agrees across ranks", len({int(s) for s in seqs}) == 1, str(seqs))


# ---- 3. monitored_barrier
def monitored(group, timeout, wait_all_ranks=False):
    if TORCH2:
        dist.monitored_barrier(group, timeout=timeout, wait_all_ranks=wait_all_ranks)
    else:
        group.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


everyone = dist.new_group(backend="kizuna")
for wait_all in (False, True):
    monitored(everyone, seconds(seconds=30), wait_all)  # every rank: passes
check.expect("monitored_barrier passes", True)

missing_two = dist.new_group(backend="kizuna")
if rank == 0:
    expect_raise("monitored_barrier names the missing rank", lambda: monitored(missing_two, seconds(seconds=2)),
                 r"\[Rank 0\]: Rank 2 failed to pass monitoredBarrier in 2000 ms")
elif rank == 1:
    expect_raise("monitored_barrier tells the other ranks", lambda: monitored(missing_two, seconds(seconds=2)),
                 r"Rank 1 successfully reached monitoredBarrier, but received errors while waiting "
                 r"for send/recv from rank 0(.|\n)*Rank 2 failed")
# The group's communicator is unharmed: rank 2 joins its next call.
t = torch.ones(2)
dist.all_reduce(t, group=missing_two)
check.expect("usable after a failed monitored_barrier", torch.equal(t, torch.full((2,), 3.0)), str(t))

missing_all = dist.new_group(backend="kizuna")
if rank == 0:
    expect_raise("monitored_barrier wait_all_ranks names every missing rank",
                 lambda: monitored(missing_all, seconds(seconds=1), wait_all_ranks=True),
                 r"\[Rank 0\]: Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms")
    expect_raise("monitored_barrier with no time left", lambda: monitored(missing_all, seconds(seconds=0)),
                 r"Rank 0 timed out in monitoredBarrier after 0 ms")
dist.barrier()

# ---- 4. timeouts
TIMEOUT_RE = r" (Timed out|closed|timeout) "  # PyTorch's test_barrier_timeout_*
short = dist.new_group(backend="kizuna", timeout=seconds(seconds=2))
if rank == 0:  # alone in the barrier: kizuna's own deadline
    msg, kind, took = expect_raise("group timeout", lambda: dist.barrier(group=short), TIMEOUT_RE)
    check.expect("group timeout names the call and the wait", msg is not None and "timed out" in msg
                 and "barrier" in msg and "rank 0" in msg, repr(msg))
    check.expect("group timeout not before the timeout", took >= 1.9, f"{took:.2f} s")
    if TORCH2:
        check.expect("group timeout is a DistBackendError", kind == "DistBackendError", str(kind))

per_call = dist.new_group(backend="kizuna", timeout=seconds(seconds=60))
if rank == 0:  # alone again, with a 1 s timeout of the call's own
    if TORCH2:
        call = lambda: dist.barrier(group=per_call, timeout=seconds(seconds=1))  # noqa: E731
    else:
        opts = dist.BarrierOptions()
        opts.timeout = seconds(seconds=1)
        call = lambda: per_call.barrier(opts).wait()  # noqa: E731
    msg, kind, took = expect_raise("per-call timeout", call, TIMEOUT_RE)
    check.expect("per-call timeout names the call and the timeout", msg is not None and "barrier" in msg
                 and "1000 ms" in msg, repr(msg))
    check.expect("per-call timeout not before the timeout", took >= 0.9, f"{took:.2f} s")
    expect_raise("after a per-call timeout the group is aborted",
                 lambda: dist.all_reduce(torch.ones(1), group=per_call), "abort")
dist.barrier()

# ---- 5. torch 2.x only
if TORCH2:
    dist.barrier(device_ids=[0])
    check.expect("barrier with device_ids", True)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    work.wait()
    check.expect("get_future_result", work.get_future_result().wait() == 0)  # WorkResult.SUCCESS

    ins = [torch.arange(3.0) + rank, torch.arange(5, dtype=torch.int64) * (rank + 1)]
    outs = [torch.empty(world * 3), torch.empty(world * 5, dtype=torch.int64)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    check.close("coalesced all_gather_into_tensor float", outs[0],
                torch.cat([torch.arange(3.0) + r for r in range(world)]), exact=True)
    check.close("coalesced all_gather_into_tensor int64", outs[1],
                torch.cat([torch.arange(5, dtype=torch.int64) * (r + 1) for r in range(world)]), exact=True)

    ins = [torch.arange(world * 2.0) + rank, torch.ones(world * 4, dtype=torch.int32)]
    outs = [torch.empty(2), torch.empty(4, dtype=torch.int32)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    total = sum(torch.arange(world * 2.0) + r for r in range(world))
    check.close("coalesced reduce_scatter_tensor float", outs[0], total[rank * 2:(rank + 1) * 2], exact=True)
    check.close("coalesced reduce_scatter_tensor int32", outs[1], torch.full((4,), world, dtype=torch.int32),
                exact=True)

# ---- 6. point to point
x = torch.full((5,), float(rank))
got = torch.empty(5)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, x, nxt)])
for req in reqs:
    req.wait()
check.expect("batch_isend_irecv, receives first", torch.equal(got, torch.full((5,), float(prv))), str(got))

first, second = torch.empty(3), torch.empty(3)
sends = [dist.isend(torch.full((3,), 10.0 + rank), nxt, tag=1), dist.isend(torch.full((3,), 20.0 + rank), nxt, tag=2)]
dist.recv(second, prv, tag=2)  # the later message first
dist.recv(first, prv, tag=1)
for req in sends:
    req.wait()
check.expect("tags out of order", first[0].item() == 10.0 + prv and second[0].item() == 20.0 + prv,
             f"{first} {second}")

# Every other rank sends rank 0 two messages; rank 0 receives them from any
# source, with recv() and with irecv().
if rank == 0:
    senders = []
    for _ in range(world - 1):
        t = torch.empty(2)
        senders.append(dist.recv(t, tag=5))
        check.expect("recv from any source: data from the sender", torch.equal(t, torch.full((2,), float(senders[-1]))))
    for _ in range(world - 1):
        t = torch.empty(2)
        work = dist.irecv(t, tag=6)
        work.wait()
        senders.append(work._source_rank())
        check.expect("irecv from any source: data from the sender", torch.equal(t, torch.full((2,), float(senders[-1]))))
    check.expect("every sender once per kind", sorted(senders) == sorted(list(range(1, world)) * 2), str(senders))
else:
    dist.send(torch.full((2,), float(rank)), 0, tag=5)
    dist.send(torch.full((2,), float(rank)), 0, tag=6)

# A receive posted first holds back neither an all_reduce nor an all-to-all.
late = torch.empty(4)
pending = dist.irecv(late, prv, tag=9)
t = torch.ones(3)
dist.all_reduce(t)
out = torch.empty(world * 2)
dist.all_to_all_single(out, torch.full((world * 2,), float(rank)))
dist.send(torch.full((4,), float(rank)), nxt, tag=9)
pending.wait()
check.expect("a pending receive holds back nothing", torch.equal(t, torch.full((3,), float(world)))
             and torch.equal(out, torch.arange(world).repeat_interleave(2).float())
             and torch.equal(late, torch.full((4,), float(prv))), f"{t} {out} {late}")

dist.barrier()
check.finish(world=world, torch=torch.__version__)
