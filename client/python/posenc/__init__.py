"""posenc: the Python client of the posenc position-encoding service.

    import numpy as np
    import posenc

    client = posenc.Client("localhost:50051")
    q = np.random.randn(1, 128, 32, 128).astype(np.float32)
    q_rot, _, derived = client.apply_rope(q, config=posenc.RopeConfig(base=500000.0))

Every RPC of ``posenc.v1.PositionEncoding`` is a method of :class:`Client` taking and returning
numpy arrays; see ``help(posenc.Client)``, client/python/README.md and
proto/posenc/v1/posenc.proto (the reference for every field). Errors are
:class:`PosencError` subclasses with the server's gRPC code and message.

The generated wire code is ``posenc.v1.posenc_pb2`` / ``posenc.v1.posenc_pb2_grpc`` (built from
the .proto by CMake or by ``pip install``; never committed).
"""

from ._errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError,
                      DeadlineExceededError, FailedPreconditionError, InternalError,
                      InvalidArgumentError, NotFoundError, OutOfRangeError,
                      PermissionDeniedError, PosencError, ResourceExhaustedError,
                      UnauthenticatedError, UnavailableError, UnimplementedError, UnknownError)
from ._tensor import (BFLOAT16_DTYPE, HAVE_ML_DTYPES, DType, bf16_to_float32,
                      expand_bloom_rows, expand_toeplitz, float32_to_bf16)
from ._types import (AlibiBiasResult, AlibiMode, ApplyRopeResult, BackendInfo, BiasForm, Combine,
                     DeviceInfo, FreqScheme, FutureMode, HealthStatus, LearnedTable, MropeLayout,
                     Positions, RopeCacheLayout, RopeCacheResult, RopeConfig, RopeDerived,
                     RopeScaling, RopeScalingType, RopeStyle, ServerInfo, SinusoidalLayout,
                     SinusoidalParams, TableInfo, TensorLayout, TlsConfig)
from .client import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT, Client

__version__ = "0.1.0"

__all__ = [
    "Client", "DEFAULT_TIMEOUT", "DEFAULT_MAX_MESSAGE_BYTES",
    # values
    "Positions", "SinusoidalParams", "LearnedTable", "RopeScaling", "RopeConfig", "RopeDerived",
    "RopeCacheResult", "ApplyRopeResult", "AlibiBiasResult", "ServerInfo", "BackendInfo",
    "DeviceInfo", "TableInfo", "TlsConfig",
    # enums
    "DType", "SinusoidalLayout", "FreqScheme", "Combine", "RopeStyle", "RopeScalingType",
    "MropeLayout", "RopeCacheLayout", "TensorLayout", "AlibiMode", "FutureMode", "BiasForm",
    "HealthStatus",
    # tensors
    "bf16_to_float32", "float32_to_bf16", "expand_toeplitz", "expand_bloom_rows",
    "HAVE_ML_DTYPES", "BFLOAT16_DTYPE",
    # errors
    "PosencError", "CancelledError", "UnknownError", "InvalidArgumentError",
    "DeadlineExceededError", "NotFoundError", "AlreadyExistsError", "PermissionDeniedError",
    "ResourceExhaustedError", "FailedPreconditionError", "AbortedError", "OutOfRangeError",
    "UnimplementedError", "InternalError", "UnavailableError", "DataLossError",
    "UnauthenticatedError",
]
