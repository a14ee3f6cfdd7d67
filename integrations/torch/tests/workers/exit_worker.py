"""Exits with calls still in flight on kizuna's threads.

Each rank starts all_reduce, broadcast and all_gather calls with
async_op=True on tensors it drops at once, waits for none of them, prints
its RESULT and leaves. kizuna's threads then hold the last reference to
those tensors; kizuna_torch's atexit handler must let them go before Python
finalizes (kizuna_work.hpp, "Exit"), or the process aborts with
"terminate called without an active exception".

argv[1] == "unguarded" unregisters that handler, to show what it prevents
(by hand; no test relies on an abort happening).
"""

import atexit
import sys

import torch
import torch.distributed as dist

import kizuna_torch
from common import init, result

rank, world = init()
if len(sys.argv) > 1 and sys.argv[1] == "unguarded":
    atexit.unregister(kizuna_torch._let_threads_release)

for i in range(100):
    dist.all_reduce(torch.full((16384,), float(rank + i)), async_op=True)
    dist.broadcast(torch.full((4096,), float(rank)), src=i % world, async_op=True)
    dist.all_gather([torch.empty(1024) for _ in range(world)], torch.full((1024,), float(rank)), async_op=True)
result(started=300, world=world)
