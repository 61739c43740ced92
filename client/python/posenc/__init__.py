"""posenc: the Python client of the posenc position-encoding service.

    import numpy as np
    import posenc

    client = posenc.Client("localhost:50051")
    q = np.random.randn(1, 128, 32, 128).astype(np.float32)
    q_rot, _, derived = client.apply_rope(q, config=posenc.RopeConfig(base=500000.0))

Every RPC of ``posenc.v1.PositionEncoding`` is a method of :class:`Client` taking numpy arrays,
torch tensors or any ``__dlpack__`` array and returning numpy arrays (torch tensors for torch
inputs); :class:`SharedMemory` puts tensors in shared memory for a co-located server. See
``help(posenc.Client)``, client/python/README.md and proto/posenc/v1/posenc.proto (the
reference for every field). Errors are :class:`PosencError` subclasses with the server's gRPC
code, message and structured details (``error.field``, ``error.reason``, ...).

The generated wire code is ``posenc.v1.posenc_pb2`` / ``posenc.v1.posenc_pb2_grpc`` (built from
the .proto by CMake or by ``pip``; never committed). The enums (``posenc.RopeStyle``, ...) are
built from its descriptors.
"""

from ._enums import (AlibiMode, AnalysisProperty, BiasForm, Combine, DType, FreqScheme, FutureMode,
                     HealthStatus, MropeLayout, MultimodalFamily, RopeCacheLayout, RopeScalingType,
                     RopeStyle, SharedMemoryKind, SinusoidalLayout, TensorLayout, VisionTower)
from ._errors import (DOMAIN, AbortedError, AlreadyExistsError, CancelledError, DataLossError,
                      DeadlineExceededError, FailedPreconditionError, FieldViolation,
                      InternalError, InvalidArgumentError, NotFoundError, OutOfRangeError,
                      PermissionDeniedError, PosencError, ResourceExhaustedError,
                      UnauthenticatedError, UnavailableError, UnimplementedError, UnknownError)
from ._tensor import (BFLOAT16_DTYPE, HAVE_ML_DTYPES, bf16_to_float32, expand_bloom_rows,
                      expand_toeplitz, float32_to_bf16)
from ._cuda import CudaIpcHandle, cuda_ipc_handle
from ._memory import DEFAULT_RETAIN_FREED_MEMORY, release_freed_memory, retain_freed_memory
from ._shared_memory import SharedMemory
from ._types import (AlibiBiasResult, AnalysisCurve, AnalyzeEncodingResult, ApplyRopeResult,
                     AttentionTemperatureTuning, BackendInfo, DescribeRopeResult, DeviceInfo,
                     LearnedTable, MultimodalPositionsResult, MultimodalTokenIds, Positions,
                     RerotateKeysResult, RopeCacheResult, RopeConfig, RopeDerived, RopeLayerGroup,
                     RopeScaling, RopeSubmodule, RopeValueSource, ServerInfo, SharedMemoryRef,
                     SharedMemoryRegionStatus, SinusoidalParams, TableInfo, TlsConfig,
                     VisionPositionsResult, VisionSpan)
from ._transport import NATIVE_TRANSPORT
from .client import (DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_SPLIT_IN_FLIGHT, DEFAULT_TIMEOUT,
                     Client)

__version__ = "0.1.0"

__all__ = [
    "Client", "DEFAULT_TIMEOUT", "DEFAULT_MAX_MESSAGE_BYTES", "DEFAULT_MAX_SPLIT_IN_FLIGHT",
    "NATIVE_TRANSPORT",
    # values
    "Positions", "SinusoidalParams", "LearnedTable", "RopeScaling", "RopeConfig", "RopeDerived",
    "RopeCacheResult", "ApplyRopeResult", "AlibiBiasResult", "ServerInfo", "BackendInfo",
    "DeviceInfo", "TableInfo", "TlsConfig", "RopeValueSource", "AttentionTemperatureTuning",
    "RopeLayerGroup", "RopeSubmodule", "DescribeRopeResult", "RerotateKeysResult",
    "MultimodalTokenIds",
    "VisionSpan", "MultimodalPositionsResult", "VisionPositionsResult", "AnalyzeEncodingResult",
    "AnalysisCurve",
    # shared memory
    "SharedMemory", "SharedMemoryRef", "SharedMemoryRegionStatus", "cuda_ipc_handle",
    "CudaIpcHandle",
    # enums (from posenc.proto's descriptors)
    "DType", "SinusoidalLayout", "FreqScheme", "Combine", "RopeStyle", "RopeScalingType",
    "MropeLayout", "RopeCacheLayout", "TensorLayout", "AlibiMode", "FutureMode", "BiasForm",
    "MultimodalFamily", "VisionTower", "HealthStatus", "AnalysisProperty", "SharedMemoryKind",
    # the process's allocator for large tensors
    "retain_freed_memory", "release_freed_memory", "DEFAULT_RETAIN_FREED_MEMORY",
    # tensors
    "bf16_to_float32", "float32_to_bf16", "expand_toeplitz", "expand_bloom_rows",
    "HAVE_ML_DTYPES", "BFLOAT16_DTYPE",
    # errors
    "PosencError", "FieldViolation", "DOMAIN", "CancelledError", "UnknownError",
    "InvalidArgumentError", "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
    "PermissionDeniedError", "ResourceExhaustedError", "FailedPreconditionError",
    "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
    "UnavailableError", "DataLossError", "UnauthenticatedError",
]
