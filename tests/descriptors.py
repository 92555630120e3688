"""Descriptors past ``select``'s 1024, as a busy supervisor has them (many sessions, each
with its pipes and connections): for tests of code that waits on a descriptor."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def past_1024() -> Iterator[None]:
    """Within it, every new descriptor of this process is numbered past 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        # deliberate: a process whose hard limit is under 1,200 descriptors can never
        # have one past 1024, so the case such a test covers cannot arise there (Debian's
        # default hard limit, as on CI, is far above it)
        pytest.skip("the hard limit on descriptors is under 1,200: none can pass 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
