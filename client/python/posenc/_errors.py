"""Typed errors of the posenc client: one exception class per gRPC status code, carrying the
server's structured details (google.rpc.Status in the ``grpc-status-details-bin`` trailer; the
contract is the header comment of proto/posenc/v1/posenc.proto)."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple, Type

import grpc

from ._protos import error_details_pb2, status_pb2

__all__ = [
    "PosencError", "FieldViolation", "CancelledError", "UnknownError", "InvalidArgumentError",
    "DeadlineExceededError", "NotFoundError", "AlreadyExistsError", "PermissionDeniedError",
    "ResourceExhaustedError", "FailedPreconditionError", "AbortedError", "OutOfRangeError",
    "UnimplementedError", "InternalError", "UnavailableError", "DataLossError",
    "UnauthenticatedError", "DOMAIN",
]

#: ``ErrorInfo.domain`` of posenc's errors (the server's, and the client's own checks).
DOMAIN = "posenc.v1"
#: The trailer that carries a serialized google.rpc.Status.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class FieldViolation(NamedTuple):
    """``google.rpc.BadRequest.FieldViolation``: the request field's path as the message starts
    (``"config.scaling.factor"``, ``"q.shape[1]"``) and the rest of the message."""
    field: str
    description: str


class PosencError(Exception):
    """A failed posenc call.

    Attributes:
      code: the ``grpc.StatusCode`` (the server's code unchanged, e.g. INVALID_ARGUMENT,
        RESOURCE_EXHAUSTED; UNAVAILABLE when the server cannot be reached; DEADLINE_EXCEEDED
        when the call's timeout passed).
      message: the server's status message (INVALID_ARGUMENT names the field, the expected
        and the received value), or the client's own for checks made before sending.
      details: gRPC's debug error string for a failed call, ``"client-side check"`` for an
        error raised before anything was sent; else None.
      method: the RPC ("ApplyRope", "Health", ...) when the error came from a call.
      reason, domain, metadata: the ``google.rpc.ErrorInfo`` (reason ``INVALID_FIELD``,
        ``INVALID_REQUEST`` (no one field), ``UNPARSEABLE_REQUEST``, ``POSITION_OUT_OF_RANGE``,
        ``LIMIT_EXCEEDED`` or ``OVERLOADED``; domain ``"posenc.v1"``; metadata e.g.
        ``{"limit": "max_message_bytes"}``); None, None and ``{}`` when the status carries none.
      violations: the ``google.rpc.BadRequest`` field violations (:class:`FieldViolation`).
      field, description: the first violation's; without structured details (an older
        server), the field the message starts with (``"q"`` for ``"q: data has 100 bytes, ..."``)
        and the rest of the message, best effort; None when there is none.
      retry_delay: ``google.rpc.RetryInfo.retry_delay`` in seconds (a busy server: retrying
        after that long may succeed); None when absent.

    Every code has its subclass (``InvalidArgumentError``, ``ResourceExhaustedError``,
    ``UnavailableError``, ``DeadlineExceededError``, ...), so callers may catch either the
    subclass or ``PosencError`` and look at ``.code``. ``InvalidArgumentError`` and
    ``OutOfRangeError`` are also ``ValueError``s.
    """

    #: The status code of the class (the base class: UNKNOWN).
    CODE = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str, details: Optional[str] = None,
                 method: Optional[str] = None, *, reason: Optional[str] = None,
                 domain: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
                 violations: Sequence[FieldViolation] = (),
                 retry_delay: Optional[float] = None):
        super().__init__(code, message, details, method)
        self.code = code
        self.message = message
        self.details = details
        self.method = method
        self.reason = reason
        self.domain = domain
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.violations: Tuple[FieldViolation, ...] = tuple(violations)
        self.retry_delay = retry_delay

    @staticmethod
    def from_rpc_error(error: grpc.RpcError, method: Optional[str] = None) -> "PosencError":
        """The typed error of a failed gRPC call, with its structured details: for calls made
        through ``Client.stub`` or ``Client.channel``."""
        return from_rpc_error(error, method)

    @property
    def field(self) -> Optional[str]:
        if self.violations:
            return self.violations[0].field
        parsed = self._parsed_message()
        return parsed.field if parsed else None

    @property
    def description(self) -> Optional[str]:
        if self.violations:
            return self.violations[0].description
        parsed = self._parsed_message()
        return parsed.description if parsed else None

    def _parsed_message(self) -> Optional[FieldViolation]:
        if self.reason is not None:  # structured details without a violation: no field
            return None
        m = re.match(r"([A-Za-z_][\w.\[\]]*):\s(.*)", self.message or "", re.DOTALL)
        return FieldViolation(m.group(1), m.group(2)) if m else None

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        return f"{name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.details!r})"


# One subclass per status code but OK (tests/python/test_client.py checks that every code has
# one), named after it; INVALID_ARGUMENT and OUT_OF_RANGE errors are also ValueErrors.
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
    """An output over the server's limits (reason LIMIT_EXCEEDED), or the server busy (reason
    OVERLOADED, with a retry_delay: retry later or elsewhere)."""
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
    """A posenc call failed with UNIMPLEMENTED (e.g. a server without the RPC)."""
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


_BY_CODE: Dict[grpc.StatusCode, Type[PosencError]] = {
    cls.CODE: cls for cls in PosencError.__subclasses__()}


def error_for(code: grpc.StatusCode, message: str, details: Optional[str] = None,
              method: Optional[str] = None, **structured: Any) -> PosencError:
    """The exception of ``code``'s class (``PosencError`` itself for a code without one);
    ``structured``: reason, domain, metadata, violations, retry_delay."""
    return _BY_CODE.get(code, PosencError)(code, message, details, method, **structured)


def local_error(field: str, description: str,
                code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
                reason: str = "INVALID_FIELD", **metadata: str) -> PosencError:
    """An error the client raises before sending anything, shaped as the server's: message
    ``"field: description"``, the field violation, ErrorInfo ``reason`` in posenc's domain."""
    violations = [FieldViolation(field, description)] if field else []
    message = f"{field}: {description}" if field else description
    return error_for(code, message, "client-side check", reason=reason, domain=DOMAIN,
                     metadata=metadata, violations=violations)


def decode_status_details(code: grpc.StatusCode, trailing_metadata: Optional[Iterable[Any]]
                          ) -> Dict[str, Any]:
    """The structured fields (error_for's ``structured``) of a call's trailing metadata: the
    google.rpc.Status in grpc-status-details-bin, when it carries the call's own code. Unknown
    detail types are skipped; an unreadable trailer gives nothing."""
    blob = next((value for key, value in trailing_metadata or ()
                 if key == STATUS_DETAILS_KEY), None)
    if not isinstance(blob, bytes):
        return {}
    try:
        status = status_pb2.Status.FromString(blob)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, or a bad type in the trailer
        return {}
    if status.code != code.value[0]:
        return {}
    out: Dict[str, Any] = {}
    info = error_details_pb2.ErrorInfo()
    bad_request = error_details_pb2.BadRequest()
    retry = error_details_pb2.RetryInfo()
    for detail in status.details:
        if detail.Unpack(info):
            out.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
        elif detail.Unpack(bad_request):
            out["violations"] = [FieldViolation(v.field, v.description)
                                 for v in bad_request.field_violations]
        elif detail.Unpack(retry):
            out["retry_delay"] = retry.retry_delay.seconds + retry.retry_delay.nanos * 1e-9
    return out


def from_rpc_error(error: grpc.RpcError, method: Optional[str] = None) -> PosencError:
    """The typed exception of a failed gRPC call, with its structured details."""
    code = error.code() if hasattr(error, "code") else None
    code = code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    debug = None
    if hasattr(error, "debug_error_string"):
        try:
            debug = error.debug_error_string()
        except Exception:  # noqa: BLE001 - only context for the message
            debug = None
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return error_for(code, message or "", debug, method,
                     **decode_status_details(code, trailers))
