"""Every collective x dtype x op on backend "kizuna", checked against the same
call on a Gloo group of the same ranks (or, where Gloo 1.13 lacks the call, a
reference built from Gloo's all_reduce or computed in closed form).

Inputs are computed from (rank, index), identical for both backends; integers
compare exactly, floats within a per-dtype tolerance (the backends sum in
different orders). Gloo has no AVG: its reference is SUM / world size.
"""

import torch
import torch.distributed as dist

from common import Checker, gloo_reference, init

rank, world = init()
gloo = gloo_reference()
check = Checker(rank)

R = dist.ReduceOp
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
# 3 is fewer elements than 4 ranks; 1031 is prime; 262147 spans several
# pipelining slices.
SIZES = [1, 3, 1031]
LARGE = 262147
TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 6e-2),
       torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12)}


def make(dtype, n, r=rank, salt=0):
    """Rank r's input: small values, so that PRODUCT over 4 ranks fits int8."""
    i = torch.arange(n, dtype=torch.int64)
    v = i * 7 + r * 3 + salt * 11
    if dtype.is_floating_point:
        return (((i * 37 + r * 101 + salt * 13) % 200).double() / 100.0 - 1.0).to(dtype)
    if dtype == torch.uint8:
        return (v % 3 + 1).to(dtype)
    return (v % 5 - 2).to(dtype)


def same(name, got, want):
    exact = not got.dtype.is_floating_point
    rtol, atol = TOL.get(got.dtype, (0, 0))
    check.close(name, got, want, exact, rtol, atol)


def gloo_reduced(x, op, fn):
    """fn(tensor, op) run on Gloo; AVG as SUM / world."""
    if op == R.AVG:
        y = x.double() if x.dtype in (torch.float16, torch.bfloat16) else x.clone()
        fn(y, R.SUM)
        return (y / world).to(x.dtype)
    y = x.clone()
    fn(y, op)
    return y


def gloo_has(fn):
    """Whether Gloo 1.13 runs `fn` (bfloat16 and some calls it lacks)."""
    try:
        fn()
        return True
    except RuntimeError:
        return False


def expect_error(name, fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        check.expect(name, all(n in msg for n in needles), f"message {msg!r} lacks {needles}")
        return
    check.expect(name, False, "no error raised")


# bfloat16 through Gloo: if Gloo lacks it, the reference runs in float32.
GLOO_BF16 = gloo_has(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bfloat16), group=gloo))


def via_gloo(x, fn):
    """Runs fn on a copy of x through Gloo, in float32 when Gloo lacks x's dtype."""
    if x.dtype == torch.bfloat16 and not GLOO_BF16:
        y = x.float()
        fn(y)
        return y.to(torch.bfloat16)
    y = x.clone()
    fn(y)
    return y


def reference_all_reduce(x, op):
    if op == R.AVG:
        y = via_gloo(x.double(), lambda t: dist.all_reduce(t, op=R.SUM, group=gloo))
        return (y / world).to(x.dtype)
    return via_gloo(x, lambda t: dist.all_reduce(t, op=op, group=gloo))


# ---- all_reduce: every dtype x op x size, and non-contiguous tensors
for dtype in DTYPES:
    sizes = SIZES + ([LARGE] if dtype == torch.float32 else [])
    for op in OPS:
        for n in sizes:
            name = f"all_reduce {dtype} {op} n={n}"
            x = make(dtype, n)
            k = x.clone()
            if op == R.AVG and not dtype.is_floating_point:
                expect_error(name, lambda: dist.all_reduce(k, op=op), "AVG", "floating")
                continue
            dist.all_reduce(k, op=op)
            same(name, k, reference_all_reduce(x, op))
    # A transposed (non-contiguous) view: reduced in place through a copy.
    base = make(dtype, 64).view(8, 8)
    k = base.clone().t()
    dist.all_reduce(k, op=R.MAX)
    same(f"all_reduce non-contiguous {dtype}", k,
         reference_all_reduce(base.t().contiguous(), R.MAX))

# bool: SUM is logical or, PRODUCT logical and (as torch's NCCL backend).
flags = torch.tensor([rank == 0, True, False, rank % 2 == 1])
for op, want in [(R.SUM, [True, True, False, world > 1]), (R.MAX, [True, True, False, world > 1]),
                 (R.PRODUCT, [world == 1, True, False, False]), (R.MIN, [world == 1, True, False, False])]:
    k = flags.clone()
    dist.all_reduce(k, op=op)
    check.expect(f"all_reduce bool {op}", k.tolist() == want, f"got {k.tolist()} want {want}")

# ---- all_reduce of sparse (COO) tensors, SUM, vs Gloo: rank r holds r
# entries (none on rank 0), some at the same places as other ranks'; one
# tensor with a dense dimension
for dense in [(), (3,)]:
    n = rank
    idx = torch.stack([torch.arange(n) % (world + 1), (torch.arange(n) * 2 + rank) % (world + 2)])
    val = (torch.arange(n * max(1, int(torch.tensor(dense).prod()))).float() + rank).view(n, *dense)
    k = torch.sparse_coo_tensor(idx, val, (world + 1, world + 2, *dense))
    g = k.clone()
    dist.all_reduce(k)
    dist.all_reduce(g, group=gloo)
    check.expect(f"sparse all_reduce {dense} stays sparse", k.is_sparse, str(k.layout))
    same(f"sparse all_reduce {dense}", k.to_dense(), g.to_dense())

# ---- all_reduce_coalesced
for dtype in [torch.float32, torch.int32, torch.float16]:
    for op in [R.SUM, R.MAX]:
        xs = [make(dtype, n, salt=j) for j, n in enumerate([5, 1, 300])]
        ks = [x.clone() for x in xs]
        gs = [x.clone() for x in xs]
        dist.all_reduce_coalesced(ks, op=op)
        dist.all_reduce_coalesced(gs, op=op, group=gloo)
        for j, (k, g) in enumerate(zip(ks, gs)):
            same(f"all_reduce_coalesced {dtype} {op} [{j}]", k, g)

# tensors that require grad (a model's parameters): the copies in and out of
# the packed buffer run with autograd off, as an optimizer's update does
params = [make(torch.float32, 6).requires_grad_(), make(torch.float32, 4).requires_grad_()]
dist.all_reduce_coalesced(params)
for j, (p, n) in enumerate(zip(params, [6, 4])):
    same(f"all_reduce_coalesced requires_grad [{j}]", p.detach(),
         reference_all_reduce(make(torch.float32, n), R.SUM))

# ---- broadcast from every root
for dtype in DTYPES:
    for root in range(world):
        for n in [1, 1031]:
            x = make(dtype, n, salt=root)
            k = x.clone()
            dist.broadcast(k, src=root)
            same(f"broadcast {dtype} root={root} n={n}", k,
                 via_gloo(x, lambda t: dist.broadcast(t, src=root, group=gloo)))
k = make(torch.float32, 36).view(6, 6).t().clone().t()  # non-contiguous
want = make(torch.float32, 36, r=world - 1).view(6, 6).t()
if rank == world - 1:
    k.copy_(want)
dist.broadcast(k, src=world - 1)
same("broadcast non-contiguous", k, want)

# ---- reduce to the last rank: every dtype x op
root = world - 1
for dtype in DTYPES:
    for op in OPS:
        name = f"reduce {dtype} {op}"
        x = make(dtype, 1031)
        k = x.clone()
        if op == R.AVG and not dtype.is_floating_point:
            expect_error(name, lambda: dist.reduce(k, dst=root, op=op), "AVG")
            continue
        dist.reduce(k, dst=root, op=op)
        want = reference_all_reduce(x, op)  # collective: every rank takes part
        if rank == root:
            same(name, k, want)
        else:
            same(name + " (non-root input untouched)", k, x)

# ---- all_gather, _all_gather_base
for dtype in DTYPES:
    for n in [1, 1031]:
        x = make(dtype, n)
        ks = [torch.empty(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(ks, x)
        for r in range(world):
            same(f"all_gather {dtype} n={n} block {r}", ks[r], make(dtype, n, r=r))
        flat = torch.empty(world * n, dtype=dtype)
        dist._all_gather_base(flat, x)
        same(f"_all_gather_base {dtype} n={n}", flat,
             torch.cat([make(dtype, n, r=r) for r in range(world)]))
# ... and against Gloo's own all_gather
x = make(torch.float32, 77)
ks = [torch.empty(77) for _ in range(world)]
gs = [torch.empty(77) for _ in range(world)]
dist.all_gather(ks, x)
dist.all_gather(gs, x, group=gloo)
for r in range(world):
    same(f"all_gather vs gloo block {r}", ks[r], gs[r])
# non-contiguous outputs
outs = [torch.zeros(4, 3).t() for _ in range(world)]
dist.all_gather(outs, make(torch.float32, 12).view(3, 4))
for r in range(world):
    same(f"all_gather non-contiguous output {r}", outs[r], make(torch.float32, 12, r=r).view(3, 4))

# ---- all_gather_coalesced (three tensors of one dtype per rank), vs Gloo
for dtype in [torch.float32, torch.int64]:
    ins = [make(dtype, n, salt=j) for j, n in enumerate([5, 1, 300])]
    ks = [[torch.empty(n, dtype=dtype) for n in [5, 1, 300]] for _ in range(world)]
    gs = [[torch.empty(n, dtype=dtype) for n in [5, 1, 300]] for _ in range(world)]
    dist.all_gather_coalesced(ks, ins)
    dist.all_gather_coalesced(gs, ins, group=gloo)
    for r in range(world):
        for j in range(3):
            same(f"all_gather_coalesced {dtype} rank {r} [{j}]", ks[r][j], gs[r][j])

# ---- reduce_scatter, _reduce_scatter_base (Gloo 1.13 has neither: the
# reference is Gloo's all_reduce of the whole input, this rank's block of it)
for dtype in DTYPES:
    for op in OPS:
        n = 13
        name = f"reduce_scatter {dtype} {op}"
        blocks = [make(dtype, n, salt=b) for b in range(world)]
        out = torch.empty(n, dtype=dtype)
        if op == R.AVG and not dtype.is_floating_point:
            expect_error(name, lambda: dist.reduce_scatter(out, blocks, op=op), "AVG")
            continue
        dist.reduce_scatter(out, blocks, op=op)
        full = reference_all_reduce(torch.cat(blocks), op)
        same(name, out, full[rank * n:(rank + 1) * n])
        out2 = torch.empty(n, dtype=dtype)
        dist._reduce_scatter_base(out2, torch.cat(blocks), op=op)
        same("_reduce_scatter_base" + name[len("reduce_scatter"):], out2, full[rank * n:(rank + 1) * n])

# ---- all_to_all_single (alltoall_base): equal and unequal splits, vs Gloo
for dtype in DTYPES:
    x = make(dtype, world * 3 * 5).view(world * 3, 5)
    k = torch.empty_like(x)
    g = torch.empty_like(x)
    dist.all_to_all_single(k, x)
    dist.all_to_all_single(g, x, group=gloo) if dtype != torch.bfloat16 or GLOO_BF16 else None
    want = g if dtype != torch.bfloat16 or GLOO_BF16 else torch.cat(
        [make(dtype, world * 15, r=p).view(world * 3, 5)[rank * 3:(rank + 1) * 3] for p in range(world)])
    same(f"all_to_all_single equal {dtype}", k, want)
    # rank r sends (r + p) % 3 + 1 rows to rank p (so receives (p + r) % 3 + 1 from p)
    in_splits = [(rank + p) % 3 + 1 for p in range(world)]
    out_splits = [(p + rank) % 3 + 1 for p in range(world)]
    x = make(dtype, sum(in_splits) * 5).view(-1, 5)
    k = torch.empty(sum(out_splits), 5, dtype=dtype)
    dist.all_to_all_single(k, x, out_splits, in_splits)
    if dtype != torch.bfloat16 or GLOO_BF16:
        g = torch.empty_like(k)
        dist.all_to_all_single(g, x, out_splits, in_splits, group=gloo)
        same(f"all_to_all_single unequal {dtype}", k, g)
    else:
        parts = []
        for p in range(world):
            their = make(dtype, sum((p + q) % 3 + 1 for q in range(world)) * 5, r=p).view(-1, 5)
            start = sum((p + q) % 3 + 1 for q in range(rank))
            parts.append(their[start:start + (p + rank) % 3 + 1])
        same(f"all_to_all_single unequal {dtype}", k, torch.cat(parts))

# ---- all_to_all (lists): block p of rank r is make(r, salt=p)
for dtype in [torch.float32, torch.int64, torch.bfloat16]:
    ins = [make(dtype, 9, salt=p) for p in range(world)]
    outs = [torch.empty(9, dtype=dtype) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for p in range(world):
        same(f"all_to_all {dtype} from {p}", outs[p], make(dtype, 9, r=p, salt=rank))

# ---- gather, scatter, vs Gloo
for dtype in [torch.float32, torch.int8, torch.float64]:
    root = world // 2
    x = make(dtype, 31)
    ks = [torch.empty(31, dtype=dtype) for _ in range(world)] if rank == root else None
    gs = [torch.empty(31, dtype=dtype) for _ in range(world)] if rank == root else None
    dist.gather(x, ks, dst=root)
    dist.gather(x, gs, dst=root, group=gloo)
    if rank == root:
        for r in range(world):
            same(f"gather {dtype} block {r}", ks[r], gs[r])
    ins = [make(dtype, 31, r=root, salt=p) for p in range(world)] if rank == root else None
    k = torch.empty(31, dtype=dtype)
    g = torch.empty(31, dtype=dtype)
    dist.scatter(k, ins, src=root)
    dist.scatter(g, ins, src=root, group=gloo)
    same(f"scatter {dtype}", k, g)

# ---- barrier
dist.barrier()

# ---- send/recv around the ring (even ranks send first), one of them large
# enough to exceed the transport's buffering; isend/irecv; non-contiguous
nxt, prv = (rank + 1) % world, (rank - 1) % world
for dtype, n in [(torch.float32, 1031), (torch.float32, 1 << 20), (torch.int64, 5), (torch.bfloat16, 77)]:
    x = make(dtype, n, salt=nxt)
    got = torch.empty(n, dtype=dtype)
    if rank % 2 == 0:
        dist.send(x, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(x, nxt)
    same(f"send/recv {dtype} n={n}", got, make(dtype, n, r=prv, salt=rank))
if world > 1:
    x = make(torch.float32, 64, salt=nxt).view(8, 8)
    got = torch.zeros(8, 8).t()
    reqs = ([dist.isend(x.t(), nxt), dist.irecv(got, prv)] if rank % 2 == 0
            else [dist.irecv(got, prv), dist.isend(x.t(), nxt)])
    for req in reqs:
        req.wait()
    same("isend/irecv non-contiguous", got, make(torch.float32, 64, r=prv, salt=rank).view(8, 8).t())

dist.barrier()
check.finish(world=world, gloo_bf16=GLOO_BF16)
