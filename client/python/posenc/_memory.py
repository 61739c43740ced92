"""The process's allocator for callers moving large tensors: the twin of the C++ client's
``posenc::client::RetainFreedMemory`` / ``ReleaseFreedMemory`` (client/include/posenc/client.h).

Most of a large call's client time is the kernel handing fresh, zeroed pages to every new buffer:
glibc returns blocks of over 32 MiB to the system when they are freed. With freed memory kept for
the next calls' buffers, a process moving large tensors in a loop gets about twice the throughput
from 32 MiB up (BENCHMARKS.md "The Python client's wire"), at the cost of keeping its peak heap
until :func:`release_freed_memory`.

:class:`posenc.Client` does it by default (its ``retain_freed_memory=`` argument, 1 GiB, as
posenc-server's ``--retain_free_memory_bytes``), once per process and only where the caller has
not chosen first: a call to :func:`retain_freed_memory` before the first client (0 included:
"leave my allocator alone") is the caller's choice and stands.
"""

import ctypes
import ctypes.util
import sys
from typing import Optional

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_INT_MAX = 2**31 - 1

# The default of posenc.Client's retain_freed_memory (posenc-server's --retain_free_memory_bytes).
DEFAULT_RETAIN_FREED_MEMORY = 1 << 30

# Whether the process's allocator policy has been chosen (by the caller, or by the first Client).
_chosen = False


def _libc() -> Optional[ctypes.CDLL]:
    """glibc's C library, or None on another platform or C library."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None  # musl and others: no glibc tunables
    return libc


def retain_freed_memory(retain_bytes: int) -> bool:
    """Keep up to ``retain_bytes`` of freed memory for reuse instead of returning it to the system
    (on glibc: one arena, no separate mappings for large blocks, the trim threshold at
    ``retain_bytes``). Call once at start-up. Returns False, changing nothing, for
    ``retain_bytes`` <= 0 or where the C library is not glibc (or refuses, as sanitizers'
    allocators do)."""
    global _chosen
    _chosen = True
    if int(retain_bytes) <= 0:
        return False
    libc = _libc()
    if libc is None:
        return False
    return (libc.mallopt(_M_ARENA_MAX, 1) != 0 and libc.mallopt(_M_MMAP_MAX, 0) != 0
            and libc.mallopt(_M_TRIM_THRESHOLD, min(int(retain_bytes), _INT_MAX)) != 0)


def release_freed_memory() -> None:
    """Return the process's free memory to the system now (glibc's malloc_trim; nothing
    elsewhere)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(ctypes.c_size_t(0))


def retain_by_default(retain_bytes: int) -> bool:
    """posenc.Client's default: :func:`retain_freed_memory` with ``retain_bytes`` the first time
    in the process, unless the caller chose first. Returns whether this call changed the
    allocator."""
    if _chosen:
        return False
    return retain_freed_memory(retain_bytes)
