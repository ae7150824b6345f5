"""Freed memory given back to the operating system (glibc's ``malloc_trim``).

torch's CPU tensors come from the C heap. A ragged sweep allocates tensors of ever-changing shapes
(a segment's buffer for each piece of a request, a step's logits for each batch size), and glibc
keeps what they free for reuse rather than returning it: the heap fragments and the resident set
grows while the live tensors stay flat. The 100-question sweep of the default model was killed
for memory at 24 GiB resident, 60 % through, on a 24 GiB machine (docs/results.md, "The full
sweep"). Trimming the heap when a request finishes keeps the resident set at what is live.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc: its allocator is left to itself
        return None


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system; False where the C library has no
    ``malloc_trim`` (not glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
