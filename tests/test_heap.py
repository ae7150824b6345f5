"""The C heap's freed pages go back to the operating system where the C library can do it."""

from __future__ import annotations

import platform

import pytest

from sleight.backends.heap import release_freed_memory


def test_freed_memory_goes_back_on_glibc():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    assert release_freed_memory() is True
    assert release_freed_memory() is True  # the handle is looked up once and stays usable
