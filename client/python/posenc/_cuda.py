"""CUDA IPC handles of device tensors, for :meth:`posenc.Client.register_cuda_shared_memory`.

A caller whose tensors already live on the GPU registers the allocation holding them with a
posenc-server running ``--backend=cuda`` on the same machine and device; the server then rotates
them in place and writes outputs there (README.md "GPU callers"). :func:`cuda_ipc_handle` gives
what the registration needs, from a torch tensor or any object with ``__cuda_array_interface__``
(cupy, numba, ...), through the CUDA driver (``libcuda.so.1``, present wherever a GPU driver
is), with ctypes: no CUDA toolkit and no extra package needed.
"""

import ctypes
from typing import Any, NamedTuple, Optional

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_driver: Optional[ctypes.CDLL] = None


class CudaIpcHandle(NamedTuple):
    """Where a device tensor lives, as a CUDA IPC registration names it: ``raw_handle`` (the
    64-byte ``CUipcMemHandle`` of the allocation holding the tensor), ``device_id`` (its
    device), ``offset`` (the tensor's first byte in the allocation) and ``allocation_bytes``."""
    raw_handle: bytes
    device_id: int
    offset: int
    allocation_bytes: int


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"posenc.cuda_ipc_handle needs the CUDA driver (libcuda.so.1): {e}")
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"posenc.cuda_ipc_handle: {what} failed with CUresult {result} (the "
                           "tensor's device must be the thread's current one: "
                           "torch.cuda.set_device / cupy.cuda.Device(...).use())")


def _pointer(tensor: Any) -> int:
    if hasattr(tensor, "data_ptr") and getattr(getattr(tensor, "device", None), "type",
                                               None) == "cuda":
        return int(tensor.data_ptr())
    interface = getattr(tensor, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    raise TypeError("posenc.cuda_ipc_handle: expected a CUDA torch tensor or an object with "
                    f"__cuda_array_interface__, got {type(tensor).__name__}")


def cuda_ipc_handle(tensor: Any) -> CudaIpcHandle:
    """The CUDA IPC handle of the device allocation holding ``tensor`` (a CUDA torch tensor or an
    object with ``__cuda_array_interface__``), the device, and the tensor's offset in it.

    Register it and refer to the tensor by offset::

        h = posenc.cuda_ipc_handle(q)
        client.register_cuda_shared_memory("q", h.raw_handle, h.offset + q.nbytes,
                                           device_id=h.device_id)
        ref = posenc.SharedMemoryRef("q", h.offset, q.nbytes, dtype=posenc.DType.FLOAT32,
                                     shape=tuple(q.shape))
        client.apply_rope(ref)   # q rotated in place on the GPU

    Keep the tensor (and so its allocation) alive until the region is unregistered; a caching
    allocator (torch's) may hold several tensors in one allocation, which may be registered
    under several names. Raises RuntimeError without a CUDA driver or when a driver call fails.
    """
    pointer = ctypes.c_uint64(_pointer(tensor))
    driver = _cuda()
    ordinal = ctypes.c_int(-1)
    _check(driver.cuPointerGetAttribute(ctypes.byref(ordinal),
                                        _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer),
           "cuPointerGetAttribute")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(driver.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer),
           "cuMemGetAddressRange")
    handle = (ctypes.c_char * 64)()
    _check(driver.cuIpcGetMemHandle(handle, base), "cuIpcGetMemHandle")
    return CudaIpcHandle(bytes(handle), ordinal.value, pointer.value - base.value, size.value)
