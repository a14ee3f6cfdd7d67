"""Faults on backend "kizuna" become Python exceptions within the timeout.

World of 3; rank 2 is the faulty one.
1. Hung rank: on a group created with a 4 s timeout, ranks 0 and 1 call
   all_reduce while rank 2 does not (it sits in Python); they must raise
   (kizuna Timeout naming the rank waited for) after about 4 s.
2. Dead rank: on the default group (init_process_group's timeout: 60 s),
   rank 2 SIGKILLs itself after three all_reduces; ranks 0 and 1, still
   calling all_reduce, must raise (kizuna PeerLost naming rank 2) well
   within those 60 s.
Ranks 0 and 1 report what they caught and how long it took.
"""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist

from common import init, result

INIT_TIMEOUT_S = 60
HUNG_TIMEOUT_S = 4

rank, world = init(timeout_s=INIT_TIMEOUT_S)
assert world == 3
store = dist.distributed_c10d._get_default_store()
hung = dist.new_group(backend="kizuna", timeout=datetime.timedelta(seconds=HUNG_TIMEOUT_S))


def caught(fn):
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        return {"raised": True, "seconds": time.monotonic() - start, "message": str(e)}
    return {"raised": False, "seconds": time.monotonic() - start, "message": ""}


# ---- 1. a hung rank
if rank < 2:
    hung_report = caught(lambda: dist.all_reduce(torch.ones(1000), group=hung))
    store.set(f"phase1/{rank}", "done")
else:
    store.wait(["phase1/0", "phase1/1"])

# ---- 2. a dead rank
x = torch.ones(1 << 16)
for _ in range(3):
    dist.all_reduce(x)
dist.barrier()
if rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)


failed = []


def keep_reducing():
    for _ in range(1000):
        work = dist.all_reduce(x, async_op=True)
        failed[:] = [work]
        work.wait()


dead_report = caught(keep_reducing)
# The failed Work: completed, not successful; its future fails the same way.
work = failed[0]
dead_report["completed"] = work.is_completed()
dead_report["success"] = work.is_success()
dead_report["future"] = caught(lambda: work.get_future().wait())["message"]
result(hung=hung_report, dead=dead_report, hung_timeout=HUNG_TIMEOUT_S, init_timeout=INIT_TIMEOUT_S)
