"""posenc.SharedMemory: a POSIX shared-memory region registered with a posenc server, with numpy
(and torch) views of its bytes and references to pass instead of arrays.

    with posenc.Client("unix:///run/posenc.sock") as client, \\
            posenc.SharedMemory(client, 256 << 20) as shm:
        q = shm.array((1, 4096, 32, 128), np.float32)  # a numpy view into the region
        k = shm.array((1, 4096, 32, 128), np.float32)
        q[...], k[...] = ..., ...
        client.apply_rope(shm.ref(q), shm.ref(k))  # rotated in place: q and k hold the result
        cos = shm.array((4096, 64), np.float32)
        sin = shm.array((4096, 64), np.float32)
        client.rope_cache(range(4096), posenc.RopeConfig(head_dim=128),
                          output_shared_memory={"cos": shm.ref(cos), "sin": shm.ref(sin)})

The object is made and opened with ``multiprocessing.shared_memory`` (shm_open names; the
region's ``key`` is the name with its leading "/"). Its resource tracker unlinks at interpreter
exit the objects a process created and did not unlink (a crash leaves none behind); an object
this process only attaches to is taken off the tracker, so that exiting does not unlink another
process's object. The server must run on this machine with ``--allow_shared_memory``, as a user
that may open the object read-write; registrations are per server process (use a co-located
server's own address, not one that spreads calls over replicas).

Thread-safety: views, references and allocation may be used from any thread; close() once.
The bytes are shared with the server: do not touch a range while a call that uses it runs.
"""

from __future__ import annotations

import itertools
import os
import secrets
import sys
import threading
from multiprocessing import resource_tracker
from multiprocessing import shared_memory as mp_shared_memory
from typing import Any, Optional, Sequence, Tuple

import grpc
import numpy as np

from ._enums import DType
from ._errors import PosencError, local_error
from ._tensor import BFLOAT16_DTYPE, WIRE_NUMPY, host_array, is_torch, parse_dtype
from ._types import SharedMemoryRef

__all__ = ["SharedMemory"]

#: Allocations start at multiples of this many bytes.
ALIGNMENT = 64
_COUNTER = itertools.count()
# Keys of the objects this process created and has not unlinked: the resource tracker knows them
# once (a set per process), so attaching to one of them here must not take it off the tracker.
_CREATED: set = set()

# numpy dtypes of the wire dtypes as views return them (BFLOAT16: ml_dtypes when installed).
_VIEW_NUMPY = dict(WIRE_NUMPY)
if BFLOAT16_DTYPE is not None:
    _VIEW_NUMPY[DType.BFLOAT16] = BFLOAT16_DTYPE


def _torch_dtypes() -> dict:
    import torch

    return {DType.FLOAT32: torch.float32, DType.FLOAT16: torch.float16,
            DType.BFLOAT16: torch.bfloat16, DType.FLOAT64: torch.float64,
            DType.INT32: torch.int32, DType.INT64: torch.int64}


def _wire_dtype_of(dtype: np.dtype) -> Optional[DType]:
    """The wire dtype of a view's numpy dtype (uint16: bfloat16 bit patterns, as inputs)."""
    if BFLOAT16_DTYPE is not None and dtype == BFLOAT16_DTYPE:
        return DType.BFLOAT16
    for wire, code in WIRE_NUMPY.items():
        if dtype == code.newbyteorder("="):
            return wire
    return None


class SharedMemory:
    """A POSIX shared-memory region registered with a posenc server.

    Args:
      client: the :class:`posenc.Client` that registers (and unregisters) it.
      size: bytes; required when creating, else the object's size.
      name: the name references use (default: the key without its "/").
      key: the POSIX object ("/name"); default (creating) a fresh ``/posenc_<pid>_<n>_<hex>``.
      create: True (default) makes a new object (an existing one of that key is an error);
        False opens an existing one, which close() then leaves in place.
      timeout: deadline of the registration and unregistration calls (default: the client's).

    Raises the server's :class:`posenc.PosencError` (FAILED_PRECONDITION without
    ``--allow_shared_memory``, ALREADY_EXISTS for a taken name, ...) after removing what it
    made; ``FileExistsError`` / ``FileNotFoundError`` from shm_open.
    """

    def __init__(self, client: Any, size: Optional[int] = None, *, name: Optional[str] = None,
                 key: Optional[str] = None, create: bool = True,
                 timeout: Optional[float] = None):
        self._closed = True
        self._lock = threading.Lock()
        self._next = 0
        self._client = client
        self._timeout = timeout
        self._created = bool(create)
        if key is None:
            if not create:
                raise local_error("key", "attaching (create=False) needs the object's key")
            key = f"/posenc_{os.getpid()}_{next(_COUNTER)}_{secrets.token_hex(4)}"
        if not isinstance(key, str) or len(key) < 2 or key[0] != "/" or "/" in key[1:]:
            raise local_error("key", f"expected a POSIX shared-memory name (\"/name\", no other "
                              f"'/'), got {key!r}")
        if create and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise local_error("size", f"expected a positive number of bytes, got {size!r}")
        self.key = key
        self.name = key[1:] if name is None else name
        self._shm = self._open(key[1:], create, size)
        self.size = self._shm.size if size is None else int(size)
        if self.size > self._shm.size:
            self._release()
            raise local_error("size", f"{self.size} bytes, but {key} has {self._shm.size}")
        self._buf: Optional[memoryview] = self._shm.buf
        probe = np.frombuffer(self._buf, np.uint8, count=1)
        self._base = probe.__array_interface__["data"][0]
        del probe
        self._closed = False
        self._registered = False
        try:
            client.register_shared_memory(self.name, self.key, self.size, timeout=timeout)
        except BaseException:
            self._closed = True
            self._release()
            raise
        self._registered = True

    @staticmethod
    def _open(name: str, create: bool, size: Optional[int]) -> mp_shared_memory.SharedMemory:
        if create:
            shm = mp_shared_memory.SharedMemory(name, create=True, size=size or 0)
            _CREATED.add("/" + name)
            return shm
        if sys.version_info >= (3, 13):
            return mp_shared_memory.SharedMemory(name, track=False)
        shm = mp_shared_memory.SharedMemory(name)
        # Before 3.13 attaching registers the object with the resource tracker too, which would
        # unlink it at exit: it is not this process's to remove.
        if "/" + name not in _CREATED:
            resource_tracker.unregister("/" + name, "shared_memory")
        return shm

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Unregisters the region, unlinks the object (when this instance created it) and
        unmaps it. Views still alive keep the mapping until the last of them goes (their bytes
        stay readable; the server no longer uses them). Raises the unregistration's error
        (e.g. UNAVAILABLE when the server is gone) after the local clean-up; idempotent."""
        if self._closed:
            return
        self._closed = True
        error: Optional[PosencError] = None
        if self._registered:
            self._registered = False
            try:
                self._client.unregister_shared_memory(self.name, timeout=self._timeout)
            except PosencError as e:
                error = e
        self._release()
        if error is not None:
            raise error

    def _release(self) -> None:
        """Unlinks (when created here) and unmaps; with views alive, leaves the mapping to them."""
        shm = self._shm
        if self._created:
            _CREATED.discard(self.key)
            try:
                shm.unlink()  # shm_unlink, and off the resource tracker
            except FileNotFoundError:
                pass
        self._buf = None
        try:
            shm.close()
        except BufferError:
            # numpy/torch views export the buffer: the memoryview they hold keeps the mmap,
            # which unmaps when the last view goes. SharedMemory keeps no reference (its own
            # close() would fail again at garbage collection) and its descriptor is closed.
            # (multiprocessing's private attributes, as of Python 3.8 .. 3.13.)
            fd = getattr(shm, "_fd", -1)
            for attribute, value in (("_buf", None), ("_mmap", None), ("_fd", -1)):
                setattr(shm, attribute, value)
            if fd >= 0:
                os.close(fd)

    def __enter__(self) -> "SharedMemory":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            self.close()
        except PosencError:
            if exc_type is None:
                raise

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at garbage collection nobody can take it
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.size} bytes"
        return f"posenc.SharedMemory({self.name!r}, key={self.key!r}, {state})"

    # -- memory -------------------------------------------------------------------------------
    @property
    def buf(self) -> memoryview:
        """The region's bytes."""
        self._check_open()
        assert self._buf is not None
        return self._buf

    def _check_open(self) -> None:
        if self._closed:
            raise local_error("shared_memory", f"region {self.name!r} is closed",
                              code=grpc.StatusCode.FAILED_PRECONDITION)

    def allocate(self, nbytes: int) -> int:
        """The offset of ``nbytes`` free bytes (a multiple of 64); RESOURCE_EXHAUSTED when the
        rest of the region is too small. A bump allocator: :meth:`reset` frees everything."""
        self._check_open()
        padded = -(-int(nbytes) // ALIGNMENT) * ALIGNMENT
        with self._lock:
            offset = self._next
            if nbytes < 0 or padded > self.size - offset:
                raise local_error("size", f"{nbytes} bytes do not fit the {self.size - offset} "
                                  f"bytes left of region {self.name!r} ({self.size} bytes; "
                                  "reset() frees them all)",
                                  code=grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  reason="LIMIT_EXCEEDED")
            self._next = offset + padded
        return offset

    def reset(self) -> None:
        """Makes the whole region free for :meth:`allocate` again (views stay valid)."""
        with self._lock:
            self._next = 0

    def _span(self, shape: Sequence[int], dtype: Any, offset: Optional[int]
              ) -> Tuple[DType, Tuple[int, ...], int, int]:
        wire = parse_dtype(dtype)
        if wire is None:
            raise local_error("dtype", "expected a tensor dtype, got None")
        dims = tuple(int(d) for d in ((shape,) if isinstance(shape, int) else shape))
        if any(d < 0 for d in dims):
            raise local_error("shape", f"dimensions must be >= 0, got {list(dims)}")
        count = int(np.prod(dims, dtype=np.int64))
        nbytes = count * WIRE_NUMPY[wire].itemsize
        if offset is None:
            offset = self.allocate(nbytes)
        self._check_range(int(offset), nbytes)
        return wire, dims, int(offset), count

    def _check_range(self, offset: int, nbytes: int) -> None:
        self._check_open()
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise local_error("offset", f"bytes [{offset}, {offset} + {nbytes}) are outside "
                              f"region {self.name!r} of {self.size} bytes")

    def array(self, shape: Sequence[int], dtype: Any = np.float32,
              offset: Optional[int] = None) -> np.ndarray:
        """A writable numpy view of ``shape`` and ``dtype`` at ``offset`` (default: newly
        allocated). bfloat16 views are ``ml_dtypes.bfloat16`` when installed, else ``uint16``
        bit patterns."""
        wire, dims, offset, count = self._span(shape, dtype, offset)
        return np.frombuffer(self.buf, _VIEW_NUMPY[wire], count, offset).reshape(dims)

    def tensor(self, shape: Sequence[int], dtype: Any = "float32",
               offset: Optional[int] = None) -> Any:
        """A torch view of ``shape`` and ``dtype`` (a posenc dtype, a name, or a torch dtype
        such as ``torch.bfloat16``) at ``offset`` (default: newly allocated). Needs torch.

        Made with ``torch.from_numpy`` of a numpy view (not ``torch.frombuffer``, which keeps no
        hold on the buffer): like the numpy views, it keeps the mapping alive after close()."""
        import torch

        if isinstance(dtype, torch.dtype):
            dtype = {v: k for k, v in _torch_dtypes().items()}.get(dtype, dtype)
        wire, dims, offset, count = self._span(shape, dtype, offset)
        code = np.dtype(np.int16) if wire == DType.BFLOAT16 else WIRE_NUMPY[wire]
        view = torch.from_numpy(np.frombuffer(self.buf, code, count, offset).reshape(dims))
        return view.view(torch.bfloat16) if wire == DType.BFLOAT16 else view

    def put(self, value: Any) -> Any:
        """A newly allocated view holding a copy of ``value`` (a numpy array, torch tensor or
        ``__dlpack__`` array): a torch view for a torch tensor, else a numpy view."""
        if is_torch(value):
            view = self.tensor(tuple(value.shape), value.dtype)
            view.copy_(value)
            return view
        host = host_array(value)
        a = host if host is not None else np.asarray(value)
        wire = _wire_dtype_of(a.dtype)
        if wire is None:
            raise local_error("value", f"dtype {a.dtype} is not a posenc tensor dtype")
        view = self.array(a.shape, wire)
        np.copyto(view, a.view(view.dtype))
        return view

    # -- references ---------------------------------------------------------------------------
    def ref(self, view: Any, nbytes: Optional[int] = None) -> SharedMemoryRef:
        """The reference to pass instead of ``view``, a C-contiguous numpy array or torch tensor
        into this region (its dtype and shape go with it: an input, or an output placement
        whose result comes back as the same kind of view); or, for an integer offset, the raw
        range ``[view, view + nbytes)`` (an output placement: the result then comes back as a
        numpy view)."""
        self._check_open()
        if isinstance(view, (int, np.integer)) and not isinstance(view, bool):
            if nbytes is None:
                raise local_error("nbytes", "a reference by offset needs its byte size")
            self._check_range(int(view), int(nbytes))
            return SharedMemoryRef(self.name, int(view), int(nbytes), memory=self)
        obj: Any = view
        torch = is_torch(obj)
        if torch:
            if not obj.is_contiguous():
                raise local_error("view", "must be contiguous")
            address, count = obj.data_ptr(), obj.numel() * obj.element_size()
            wire = {v: k for k, v in _torch_dtypes().items()}.get(obj.dtype)
        elif isinstance(view, np.ndarray):
            if not view.flags.c_contiguous:
                raise local_error("view", "must be C-contiguous")
            address, count = view.__array_interface__["data"][0], view.nbytes
            wire = _wire_dtype_of(view.dtype)
        else:
            raise local_error("view", f"expected a numpy array or torch tensor into region "
                              f"{self.name!r}, got {type(view).__name__}")
        if wire is None:
            raise local_error("view", f"dtype {view.dtype} is not a posenc tensor dtype")
        offset = address - self._base
        if offset < 0 or offset + count > self.size:
            raise local_error("view", f"does not lie inside region {self.name!r} (copy it in "
                              "with put(), or make it with array() / tensor())")
        return SharedMemoryRef(self.name, offset, count, wire, tuple(int(d) for d in view.shape),
                               memory=self, torch=torch)

    def result(self, dtype: int, shape: Sequence[int], offset: int, torch: bool) -> Any:
        """A call's result at ``offset`` of this region: a numpy (torch) view; the reference
        when the region is closed."""
        if self._closed:
            nbytes = int(np.prod(shape, dtype=np.int64)) * WIRE_NUMPY[DType(dtype)].itemsize
            return SharedMemoryRef(self.name, offset, nbytes, DType(dtype), tuple(shape))
        if torch:
            return self.tensor(shape, DType(dtype), offset)
        return self.array(shape, DType(dtype), offset)
