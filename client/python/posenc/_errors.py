"""Typed errors of the posenc client: one exception class per gRPC status code."""

from __future__ import annotations

import re
from typing import Dict, Optional

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


# One subclass per status code but OK, named after it (INVALID_ARGUMENT: InvalidArgumentError),
# each a module attribute like a class statement's; docstrings beyond "A posenc call failed
# with CODE." and the codes whose errors are also ValueErrors.
_DOCS = {
    grpc.StatusCode.CANCELLED: "The call was cancelled.",
    grpc.StatusCode.INVALID_ARGUMENT:
        "A malformed request: the message names the field, the expected and the received value.",
    grpc.StatusCode.DEADLINE_EXCEEDED: "The call's timeout passed before the server answered.",
    grpc.StatusCode.NOT_FOUND: "E.g. a health check of a service the server does not know.",
    grpc.StatusCode.RESOURCE_EXHAUSTED:
        "An output over the server's limits, or the server busy (retry later or elsewhere).",
    grpc.StatusCode.OUT_OF_RANGE: "A position past a learned table.",
    grpc.StatusCode.INTERNAL: "The server failed, or it sent a response the client cannot read.",
    grpc.StatusCode.UNAVAILABLE: "The server could not be reached, or it is draining.",
}
_VALUE_ERRORS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)

_BY_CODE: Dict[grpc.StatusCode, type] = {}
for _code in grpc.StatusCode:
    if _code is grpc.StatusCode.OK:
        continue
    _name = "".join(word.capitalize() for word in _code.name.split("_")) + "Error"
    _bases = (PosencError, ValueError) if _code in _VALUE_ERRORS else (PosencError,)
    _BY_CODE[_code] = globals()[_name] = type(_name, _bases, {
        "__doc__": _DOCS.get(_code, f"A posenc call failed with {_code.name}."),
        "__module__": __name__,
        "CODE": _code,
    })
del _code, _name, _bases


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
