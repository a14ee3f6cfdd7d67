"""Shared by the test workers: set-up and the RESULT line."""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import kizuna_torch  # noqa: F401  (registers backend "kizuna")


def init(backend="kizuna", timeout_s=120, **kwargs):
    """init_process_group from the launcher's env:// variables."""
    dist.init_process_group(backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return dist.get_rank(), dist.get_world_size()


_gloo_references = []


def gloo_reference():
    """A Gloo group of every rank: the reference kizuna's results are
    checked against. A worker that made one leaves without finalizing
    Python (see Checker.finish)."""
    group = dist.new_group(backend="gloo")
    _gloo_references.append(group)
    return group


def result(**values):
    print("RESULT " + json.dumps(values), flush=True)


class Checker:
    """Collects mismatches instead of stopping at the first one."""

    def __init__(self, rank):
        self.rank = rank
        self.failures = []
        self.checked = 0

    def close(self, name, got, want, exact, rtol=0.0, atol=0.0):
        self.checked += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            self.failures.append(f"{name}: got {got.dtype}{tuple(got.shape)}, "
                                 f"want {want.dtype}{tuple(want.shape)}")
            return
        g, w = got.double(), want.double()
        bad = (g != w) if exact else ~torch.isclose(g, w, rtol=rtol, atol=atol)
        if bad.any():
            i = int(bad.flatten().nonzero()[0])
            self.failures.append(
                f"{name}: rank {self.rank}, {int(bad.sum())} of {bad.numel()} wrong; first at "
                f"{i}: got {g.flatten()[i].item()} want {w.flatten()[i].item()}")

    def expect(self, name, cond, detail=""):
        self.checked += 1
        if not cond:
            self.failures.append(f"{name}: {detail}")

    def finish(self, **extra):
        if self.failures:
            print("\n".join(self.failures[:60]), file=sys.stderr)
            print(f"{len(self.failures)} failures of {self.checked} checks", file=sys.stderr)
            sys.exit(1)
        result(checked=self.checked, **extra)
        if _gloo_references:
            # Gloo's worker threads drop a finished call's tensors a moment
            # after the call returns; one that does so while Python
            # finalizes aborts the process (pytorch/pytorch#190489; kizuna's
            # own threads are covered by kizuna_torch's atexit handler and
            # test_exit.py). Close every group while Python is whole, then
            # leave without finalizing.
            dist.destroy_process_group()
            sys.stderr.flush()
            os._exit(0)
