"""Runs one pytest file for CTest: exit 77 (skipped) when torch or pytest is
missing, otherwise pytest's own exit status. torch is only looked for, not
imported: the tests' worker processes import it, and importing it here too
would cost seconds per file."""

import importlib.util
import sys

for module in ("pytest", "torch", "torch.distributed"):
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    if not found:
        print(f"skipped: Python module {module} not found by {sys.executable} (install python3-torch and "
              "python3-pytest, or run `make deps` for the torch 2.x virtual environment)")
        sys.exit(77)

import pytest  # noqa: E402

sys.exit(pytest.main([sys.argv[1], "-q", "-rs", "-p", "no:cacheprovider"] + sys.argv[2:]))
