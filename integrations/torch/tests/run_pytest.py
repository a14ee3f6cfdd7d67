"""Runs one pytest file for CTest: exit 77 (skipped) when torch or pytest is
missing, otherwise pytest's own exit status."""

import sys

try:
    import pytest
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError as e:
    print(f"skipped: {e} (install python3-torch and python3-pytest)")
    sys.exit(77)

if not dist.is_available():
    print("skipped: this torch was built without torch.distributed")
    sys.exit(77)

sys.exit(pytest.main([sys.argv[1], "-q", "-rs", "-p", "no:cacheprovider"] + sys.argv[2:]))
