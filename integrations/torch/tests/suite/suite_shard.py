"""Runs PyTorch's own distributed test suite for one (backend, world size)
inside the torch under test; run_suite.py starts it once per configuration.

The suite is torch/testing/_internal/distributed/distributed_test.py, class
DistributedTest._DistTestBase, instantiated the way torch's
test/distributed/test_distributed_spawn.py does it: a class deriving from
TestDistBackend and _DistTestBase, configured by the environment variables
BACKEND, WORLD_SIZE and TEMP_DIR (INIT_METHOD keeps the suite's default,
env://; each test's default group is created from a file:// init method by
TestDistBackend._run).

How kizuna is put under test. BACKEND is always "gloo": the suite decides
at import which tests a backend runs (`@sandcastle_skip_if(BACKEND !=
"gloo", ...)` and the like), and its CPU tests are written for Gloo. For
backend "kizuna", every process group the tests create is created with
kizuna, as a user who replaced "gloo" by "kizuna" would: the public entry
points torch.distributed.init_process_group and new_group (the functions the
tests call, and the ones new_subgroups calls inside torch) are wrapped so a
`backend` argument equal to "gloo" becomes "kizuna". A group created with
no backend inherits the default group's, which is then kizuna's. Tests that
build a ProcessGroupGloo object directly keep it: they name Gloo's class.

The only other changes to the suite, both for speed or for importing:
- `expecttest` (a pip-only dependency of torch.testing, not packaged by
  Debian and not in the torch 2 virtual environment) is replaced, when it
  cannot be imported, by a stub module with its two names the suite uses
  (ACCEPT, TestCase); the distributed tests never call its methods.
- Each test's ranks are forked from this process, which imported torch and
  the suite once, instead of spawned (MultiProcessTestCase._start_processes
  with the "fork" context rather than _spawn_processes): spawning re-imports
  torch in every rank of every test, 4 s (1.13) to 13 s (2.x) each on the
  2-core reference machine. Nothing else in this process touches torch
  before the forks.

Which tests: the CPU tests for Gloo, i.e. every test_* method of
_DistTestBase that the suite does not skip at import with BACKEND=gloo and
that carries none of the GPU decorators (skip_if_no_gpu, skip_if_lt_x_gpu,
nccl_skip_if_lt_x_gpu, require_n_gpus_for_nccl_backend, skip_if_rocm).

Each test is bounded by the suite's own watchdog (MultiProcessTestCase
._join_processes, whose limit is DISTRIBUTED_TESTS_DEFAULT_TIMEOUT): on
expiry it kills the ranks and fails the test; that is reported as "hung".

Results are appended, one JSON object per line, to --out as each test ends:
{"test", "status": passed|failed|skipped|hung, "seconds", "message"}.
"""

import argparse
import importlib.abc
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import types
import unittest

GPU_DECORATORS = re.compile(
    r"@(skip_if_no_gpu|skip_if_lt_x_gpu|nccl_skip_if_lt_x_gpu|"
    r"require_n_gpus_for_nccl_backend|skip_if_rocm)\b")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, choices=["gloo", "kizuna"])
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--timeout", type=int, default=30,
                   help="seconds a test may run before it is killed as hung")
    p.add_argument("--out", required=True, help="JSON-lines file the results are appended to")
    p.add_argument("--tests", default="",
                   help="regular expression: run only the selected tests it finds")
    p.add_argument("--skip", default="",
                   help="file of test names (one a line) not to run again")
    p.add_argument("--list", action="store_true", help="print the selected tests and exit")
    return p.parse_args()


def stub_expecttest():
    try:
        import expecttest  # noqa: F401
        return False
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.ACCEPT = False
        stub.TestCase = unittest.TestCase
        sys.modules["expecttest"] = stub
        return True


class ShardMetadataFix(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads torch 1.13's torch/distributed/_shard/sharded_tensor/metadata.py
    with `field(default=TensorProperties())` read as
    `field(default_factory=TensorProperties)`, the form later torches have:
    Python 3.11's dataclasses refuse an unhashable default, so the module
    cannot be imported as shipped, and the suite's DDP tests import it
    (TestDistBackend._run turns on DDP with ReplicatedTensor, which imports
    torch.distributed._shard)."""

    MODULE = "torch.distributed._shard.sharded_tensor.metadata"
    OLD = "field(default=TensorProperties())"
    NEW = "field(default_factory=TensorProperties)"

    def find_spec(self, name, path, target=None):
        if name != self.MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        self.origin = spec.origin
        return importlib.util.spec_from_file_location(name, spec.origin, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        with open(self.origin) as f:
            src = f.read()
        if self.OLD not in src:
            raise ImportError(f"{self.origin}: '{self.OLD}' not found; the fix no longer applies")
        exec(compile(src.replace(self.OLD, self.NEW), self.origin, "exec"), module.__dict__)


def fix_shard_import():
    """Imports torch.distributed._shard, with ShardMetadataFix when it fails
    as shipped; returns whether the fix was needed."""
    try:
        import torch.distributed._shard  # noqa: F401
        return False
    except ValueError as e:
        if "mutable default" not in str(e):
            raise
    for name in [m for m in sys.modules if m.startswith("torch.distributed._shard")]:
        del sys.modules[name]
    sys.meta_path.insert(0, ShardMetadataFix())
    import torch.distributed._shard  # noqa: F401,F811
    return True


def redirect_backend(dist, c10d):
    """Makes init_process_group and new_group create kizuna groups where the
    tests ask for gloo (see the module's comment)."""

    def gloo_to_kizuna(fn):
        sig = inspect.signature(fn)

        def wrapper(*args, **kwargs):
            bound = sig.bind_partial(*args, **kwargs)
            backend = bound.arguments.get("backend")
            if backend is not None and str(backend).lower() == "gloo":
                bound.arguments["backend"] = "kizuna"
            return fn(*bound.args, **bound.kwargs)

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        wrapper.__wrapped__ = fn
        return wrapper

    for name in ("init_process_group", "new_group"):
        wrapped = gloo_to_kizuna(getattr(c10d, name))
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)


def cpu_tests(base):
    """The _DistTestBase tests that BACKEND=gloo selects and that need no GPU."""
    selected = []
    for name in sorted(n for n in dir(base) if n.startswith("test_")):
        fn = getattr(base, name)
        if getattr(fn, "__unittest_skip__", False):
            continue
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            src = ""
        decorators = src[:src.find("def ")] if "def " in src else ""
        if GPU_DECORATORS.search(decorators):
            continue
        selected.append(name)
    return selected


def first_error_line(text):
    """The exception line of the last traceback in `text`, else its first line."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt|Timeout)\b.*", line.strip()):
            return line.strip()[:400]
    return (lines[0] if lines else "").strip()[:400]


class Recorder(unittest.TestResult):
    """Writes one JSON line per test to `out` as soon as the test ends."""

    def __init__(self, out, timeout):
        super().__init__()
        self.out = out
        self.timeout = timeout
        self.started = 0.0

    def startTest(self, test):
        super().startTest(test)
        self.started = time.monotonic()

    def write(self, test, status, message=""):
        seconds = time.monotonic() - self.started
        name = test.id().split(".")[-1]
        rec = {"test": name, "status": status, "seconds": round(seconds, 2), "message": message}
        with open(self.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{status:7s} {seconds:6.1f}s {name}" + (f": {message}" if message else ""),
              flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.write(test, "passed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.write(test, "skipped", str(reason).strip().splitlines()[0] if reason else "")

    def _fail(self, test, err):
        text = "".join(traceback.format_exception(*err))
        # The suite's watchdog fails a test it killed at the limit.
        hung = time.monotonic() - self.started >= self.timeout
        self.write(test, "hung" if hung else "failed",
                   f"killed after {self.timeout} s" if hung else first_error_line(text))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)


def main():
    args = parse_args()
    temp_dir = tempfile.mkdtemp(prefix="kizuna-suite-")
    os.environ.update({
        "BACKEND": "gloo",
        "WORLD_SIZE": str(args.world_size),
        "TEMP_DIR": temp_dir,
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
    })
    stubbed = stub_expecttest()

    import torch
    import torch.distributed as dist
    patched = ["expecttest stub"] if stubbed else []
    if fix_shard_import():
        patched.append("_shard metadata default_factory")
    import torch.distributed.distributed_c10d as c10d
    from torch.testing._internal.distributed.distributed_test import (
        DistributedTest, TestDistBackend)

    if args.backend == "kizuna":
        import kizuna_torch  # noqa: F401  registers backend "kizuna"
        redirect_backend(dist, c10d)

    class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._start_processes(torch.multiprocessing.get_context("fork").Process)

        def tearDown(self):
            super().tearDown()
            # MultiProcessTestCase.setUp's file:// rendezvous file is never removed.
            if os.path.exists(self.file_name):
                os.remove(self.file_name)

    names = cpu_tests(DistributedTest._DistTestBase)
    if args.tests:
        names = [n for n in names if re.search(args.tests, n)]
    if args.list:
        print("\n".join(names))
        return 0
    done = set()
    if args.skip and os.path.exists(args.skip):
        done = set(open(args.skip).read().split())
    todo = [n for n in names if n not in done]
    if not done:
        meta = {"torch": torch.__version__, "python": sys.executable, "backend": args.backend,
                "world_size": args.world_size, "selected": len(names), "patched": patched}
        with open(args.out, "a") as f:
            f.write(json.dumps({"meta": meta}) + "\n")

    TestDistBackendWithFork.setUpClass()
    result = Recorder(args.out, args.timeout)
    try:
        for name in todo:
            test = TestDistBackendWithFork(name)
            with open(args.out + ".current", "w") as f:
                f.write(name)
            test.run(result)
    finally:
        TestDistBackendWithFork.tearDownClass()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
