"""Typed errors of the posenc client: one exception class per gRPC status code."""

from __future__ import annotations

import re
from typing import Optional

import grpc

__all__ = [
    "PosencError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "AbortedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "UnauthenticatedError",
    "error_for",
]


class PosencError(Exception):
    """A failed posenc call.

    Attributes:
      code: the ``grpc.StatusCode`` (the server's code unchanged, e.g. INVALID_ARGUMENT,
        RESOURCE_EXHAUSTED; UNAVAILABLE when the server cannot be reached; DEADLINE_EXCEEDED
        when the call's timeout passed).
      message: the server's status message (INVALID_ARGUMENT names the field, the expected
        and the received value), or the client's own for checks made before sending.
      details: more context where there is some: gRPC's debug error string for a failed call,
        ``"client-side check"`` for an error raised before anything was sent; else None.
      method: the RPC ("ApplyRope", "Health", ...) when the error came from a call.

    Every code has its subclass (``InvalidArgumentError``, ``ResourceExhaustedError``,
    ``UnavailableError``, ``DeadlineExceededError``, ...), so callers may catch either the
    subclass or ``PosencError`` and look at ``.code``. ``InvalidArgumentError`` and
    ``OutOfRangeError`` are also ``ValueError``s.
    """

    #: The status code of the class (the base class: UNKNOWN).
    CODE = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str, details: Optional[str] = None,
                 method: Optional[str] = None):
        super().__init__(code, message, details, method)
        self.code = code
        self.message = message
        self.details = details
        self.method = method

    @property
    def field(self) -> Optional[str]:
        """The request field the message names first (best effort), e.g. ``"q"`` for
        ``"q: data has 100 bytes, expected 256 (FLOAT32 [1, 4, 2, 8])"``; None when the
        message does not start with a field name."""
        m = re.match(r"([A-Za-z_][\w.\[\]]*):\s", self.message or "")
        return m.group(1) if m else None

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        return f"{name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.details!r})"


class CancelledError(PosencError):
    """The call was cancelled."""

    CODE = grpc.StatusCode.CANCELLED


class UnknownError(PosencError):
    """A posenc call failed with UNKNOWN."""

    CODE = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(PosencError, ValueError):
    """A malformed request: the message names the field, the expected and the received value."""

    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(PosencError):
    """The call's timeout passed before the server answered."""

    CODE = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(PosencError):
    """E.g. a health check of a service the server does not know."""

    CODE = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(PosencError):
    """A posenc call failed with ALREADY_EXISTS."""

    CODE = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(PosencError):
    """A posenc call failed with PERMISSION_DENIED."""

    CODE = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(PosencError):
    """An output over the server's limits, or the server busy (retry later or elsewhere)."""

    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(PosencError):
    """A posenc call failed with FAILED_PRECONDITION."""

    CODE = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(PosencError):
    """A posenc call failed with ABORTED."""

    CODE = grpc.StatusCode.ABORTED


class OutOfRangeError(PosencError, ValueError):
    """A position past a learned table."""

    CODE = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(PosencError):
    """A posenc call failed with UNIMPLEMENTED."""

    CODE = grpc.StatusCode.UNIMPLEMENTED


class InternalError(PosencError):
    """The server failed, or it sent a response the client cannot read."""

    CODE = grpc.StatusCode.INTERNAL


class UnavailableError(PosencError):
    """The server could not be reached, or it is draining."""

    CODE = grpc.StatusCode.UNAVAILABLE


class DataLossError(PosencError):
    """A posenc call failed with DATA_LOSS."""

    CODE = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(PosencError):
    """A posenc call failed with UNAUTHENTICATED."""

    CODE = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {
    cls.CODE: cls
    for cls in (CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
                NotFoundError, AlreadyExistsError, PermissionDeniedError,
                ResourceExhaustedError, FailedPreconditionError, AbortedError, OutOfRangeError,
                UnimplementedError, InternalError, UnavailableError, DataLossError,
                UnauthenticatedError)
}


def error_for(code: grpc.StatusCode, message: str, details: Optional[str] = None,
              method: Optional[str] = None) -> PosencError:
    """The exception of ``code``'s class (``PosencError`` itself for a code without one)."""
    return _BY_CODE.get(code, PosencError)(code, message, details, method)


def local_error(message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
                ) -> PosencError:
    """An error the client raises before sending anything (INVALID_ARGUMENT by default)."""
    return error_for(code, message, "client-side check")


def from_rpc_error(error: grpc.RpcError, method: Optional[str] = None) -> PosencError:
    """The typed exception of a failed gRPC call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    debug = None
    if hasattr(error, "debug_error_string"):
        try:
            debug = error.debug_error_string()
        except Exception:  # pylint: disable=broad-except
            debug = None
    return error_for(code if code is not None else grpc.StatusCode.UNKNOWN, message or "",
                     debug, method)
