"""Transport: the gRPC channel, its service config, unary calls, a split request's pieces in
flight together, the health check and the server's limits (asked once).

The retry and load-balancing policy is client/service_config.json (shipped in the package as
posenc/service_config.json, the same file the C++ client reads); the client's options override
its maxAttempts, loadBalancingConfig and healthCheckConfig.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import grpc

from ._direct import DIRECT_MIN_BYTES, Malformed, decode, encode, encode_parts, tensor_fields
from ._errors import InternalError, PosencError, from_rpc_error
from ._protos import health_pb2, health_pb2_grpc, posenc_pb2, posenc_pb2_grpc
from ._split import Limits

__all__ = ["service_config", "channel_options", "Transport", "NativeError", "native_module",
           "NATIVE_TRANSPORT"]

_SERVICE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "service_config.json")
# Outputs over this many bytes make a heavy call on the server (ServerLimits.max_heavy_calls).
_HEAVY_CALL_BYTES = 4 << 20


def service_config(max_attempts: int, load_balancing_policy: str, health_check: bool) -> str:
    """posenc/service_config.json with the client's options: ``max_attempts`` (gRPC caps it at
    5; 1: no retry policy), the load-balancing policy ("": gRPC's default, pick_first) and
    client-side health checking (with a load-balancing policy only, as gRPC does)."""
    with open(_SERVICE_CONFIG, encoding="utf-8") as f:
        config: Dict[str, Any] = json.load(f)
    if load_balancing_policy:
        config["loadBalancingConfig"] = [{load_balancing_policy: {}}]
    else:
        config.pop("loadBalancingConfig", None)
    if not (health_check and load_balancing_policy):
        config.pop("healthCheckConfig", None)
    for method in config.get("methodConfig", []):
        if max_attempts > 1:
            method["retryPolicy"]["maxAttempts"] = min(max_attempts, 5)
        else:
            method.pop("retryPolicy", None)
    return json.dumps(config)


def channel_options(max_message_bytes: int, max_attempts: int, load_balancing_policy: str,
                    health_check: bool, keepalive_time: float, keepalive_timeout: float
                    ) -> List[Tuple[str, Any]]:
    """The channel arguments of the client's options (as the C++ client sets them)."""
    options: List[Tuple[str, Any]] = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.service_config",
         service_config(max_attempts, load_balancing_policy, health_check)),
        ("grpc.enable_retries", 1 if max_attempts > 1 else 0),
        # Reconnect quickly after a replica restarts (gRPC's first backoff is 1 s; retries of
        # UNAVAILABLE span ~1.5 s).
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 5000),
    ]
    if keepalive_time > 0:
        options += [
            ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    return options


def tensor_methods() -> Dict[str, Tuple[str, Any]]:
    """Every posenc method with a Tensor field in its request or response: its path and its
    response's class, by name."""
    service = posenc_pb2.DESCRIPTOR.services_by_name["PositionEncoding"]
    return {method.name: (f"/{service.full_name}/{method.name}",
                          getattr(posenc_pb2, method.output_type.name))
            for method in service.methods
            if tensor_fields(method.input_type) or tensor_fields(method.output_type)}


def direct_calls(channel: grpc.Channel, scan_from: int) -> Dict[str, Any]:
    """Unary calls of the tensor_methods through posenc._direct's serializer (a WireMessage's
    arrays joined into the request once) and deserializer (the tensor bytes of a response of
    ``scan_from`` bytes or more as views of the received buffer)."""
    return {name: channel.unary_unary(
        path, request_serializer=encode,
        response_deserializer=functools.partial(decode, cls=response, scan_from=scan_from))
        for name, (path, response) in tensor_methods().items()}


def native_module() -> Any:
    """posenc._wirecall (client/python/native/wirecall.cc), or None where it was not built."""
    try:
        from . import _wirecall  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _wirecall


# Whether this installation has posenc._wirecall (Client's native_transport).
NATIVE_TRANSPORT = native_module() is not None


class NativeError(grpc.RpcError):
    """A failed call of the native transport, shaped as gRPC Python's (code, details,
    trailing_metadata) for posenc._errors.from_rpc_error."""

    _CODES = {code.value[0]: code for code in grpc.StatusCode}

    def __init__(self, code: int, details: str, trailing_metadata: Sequence[Tuple[str, Any]]):
        super().__init__(details)
        self._code = self._CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._details = details
        self._trailing_metadata = tuple(trailing_metadata)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Tuple[Tuple[str, Any], ...]:
        return self._trailing_metadata


class NativeCalls:
    """The methods that carry tensors, called through posenc._wirecall: the request's parts
    (posenc._direct.encode_parts) lent to gRPC without a join, the calling thread waiting
    without the GIL, the response copied once into a bytearray whose views are the results."""

    def __init__(self, channel: Any, scan_from: int):
        self.channel = channel
        self._methods = tensor_methods()
        self._scan_from = scan_from
        self._error = native_module().CallError

    def __contains__(self, method: str) -> bool:
        return method in self._methods

    def call(self, method: str, request: Any, timeout: Optional[float]) -> Any:
        """The response (a WireMessage or Malformed); a failure raises NativeError."""
        return self.call_into(method, request, timeout, None)[0]

    def call_into(self, method: str, request: Any, timeout: Optional[float],
                  sinks: Optional[Mapping[int, Sequence[Any]]]) -> Tuple[Any, FrozenSet[int]]:
        """call, the data of the response's tensor fields named in ``sinks`` (field number ->
        writable parts, posenc._direct.runs; None: no sinks) written there where their sizes
        agree: the response without that data, and the field numbers written
        (posenc._wirecall)."""
        path, response = self._methods[method]
        parts = encode_parts(request, strided=True)
        try:
            if sinks is None:
                received, written = self.channel.unary(path, parts, timeout), ()
            else:
                received, written = self.channel.unary(path, parts, timeout, dict(sinks))
        except self._error as e:
            raise NativeError(*e.args) from None
        return decode(received, response, self._scan_from, owned=True), frozenset(written)


def _parsed(method: str, response: Any) -> Any:
    """The response, or INTERNAL for one whose bytes did not parse (posenc._direct.Malformed)."""
    if isinstance(response, Malformed):
        raise InternalError(grpc.StatusCode.INTERNAL,
                            f"{method}: the server's response does not parse: {response.reason}",
                            method=method)
    return response


class Transport:
    """Calls over one channel; thread-safe (the channel multiplexes the calls). With
    ``direct_min_bytes`` (None: off), the methods that carry tensors go through posenc._direct
    (requests may be WireMessages; responses are, their tensors views from that size on)."""

    def __init__(self, channel: grpc.Channel, max_message_bytes: int, max_in_flight: int,
                 direct_min_bytes: Optional[int] = DIRECT_MIN_BYTES, native: Any = None):
        self.channel = channel
        # posenc._wirecall.Channel to the same target (direct tensors only): the methods that
        # carry tensors go through it, the rest (health, server info) through `channel`.
        self._native = NativeCalls(native, direct_min_bytes) if (
            native is not None and direct_min_bytes is not None) else None
        self._pool: Optional[ThreadPoolExecutor] = None
        self.stub = posenc_pb2_grpc.PositionEncodingStub(channel)
        self.direct_min_bytes = direct_min_bytes
        self._calls = {} if direct_min_bytes is None else direct_calls(channel, direct_min_bytes)
        self._health = health_pb2_grpc.HealthStub(channel)
        self._max_message_bytes = max_message_bytes
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._server: Optional[posenc_pb2.GetServerInfoResponse] = None

    def _rpc(self, method: str) -> Any:
        return self._calls.get(method) or getattr(self.stub, method)

    @property
    def native(self) -> bool:
        """Whether the calls carrying tensors go through the native transport."""
        return self._native is not None

    def close(self) -> None:
        """Closes the channels (the pool's calls finish first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._native is not None:
            self._native.channel.close()
        self.channel.close()

    def _future(self, method: str, request: Any, timeout: Optional[float],
                sinks: Optional[Mapping[int, Sequence[Any]]] = None) -> Any:
        """A call in flight: gRPC's future, or the native call on the transport's threads (with
        ``sinks``, NativeCalls.call_into)."""
        if self._native is not None and method in self._native:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._max_in_flight,
                                                    thread_name_prefix="posenc-call")
            if sinks is not None:
                return self._pool.submit(self._native.call_into, method, request, timeout, sinks)
            return self._pool.submit(self._native.call, method, request, timeout)
        return self._rpc(method).future(request, timeout=timeout)

    def call(self, method: str, request: Any, timeout: Optional[float]) -> Any:
        """One unary call of the posenc service; a failure raises its PosencError."""
        try:
            if self._native is not None and method in self._native:
                response = self._native.call(method, request, timeout)
            else:
                response = self._rpc(method)(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from None
        return _parsed(method, response)

    def call_all(self, method: str, requests: Sequence[Any], timeout: Optional[float],
                 response_bytes: int = 0,
                 sinks: Optional[Callable[[int], Optional[Mapping[int, Sequence[Any]]]]] = None
                 ) -> List[Any]:
        """Every request sent, at most the in-flight bound at once (fewer when each response
        carries over 4 MiB: no more than the server computes at once); the responses in order,
        or the first failing request's error (the ones still in flight are cancelled; the native
        transport's run to their end, their answers dropped). With ``sinks`` (request i -> its
        sinks, or None), each answer is a pair (response, the tensor fields written into the
        sinks: NativeCalls.call_into; none through gRPC Python)."""
        most = self._max_in_flight
        heavy = self._known_server(timeout).limits.max_heavy_calls if (
            response_bytes > _HEAVY_CALL_BYTES) else 0
        if heavy > 0:
            most = min(most, heavy)
        futures: List[Any] = []
        responses: List[Any] = []
        try:
            for done in range(len(requests)):
                while len(futures) < len(requests) and len(futures) - done < most:
                    i = len(futures)
                    into = sinks(i) if sinks is not None and self.native else None
                    futures.append(self._future(method, requests[i], timeout, into))
                answer = futures[done].result()
                if sinks is None:
                    responses.append(_parsed(method, answer))
                elif isinstance(answer, tuple):
                    responses.append((_parsed(method, answer[0]), answer[1]))
                else:
                    responses.append((_parsed(method, answer), frozenset()))
        except (grpc.RpcError, PosencError) as e:
            for future in futures[len(responses):]:
                future.cancel()
            if isinstance(e, PosencError):
                raise
            raise from_rpc_error(e, method) from None
        return responses

    def health(self, service: str, timeout: Optional[float]) -> int:
        """grpc.health.v1.Health/Check: the serving status number."""
        try:
            response = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                          timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Health") from None
        return int(response.status)

    def server_info(self, timeout: Optional[float]) -> posenc_pb2.GetServerInfoResponse:
        """GetServerInfo, asked once and kept (a failed call is asked again next time)."""
        with self._lock:
            known = self._server
        if known is None:
            known = self.call("GetServerInfo", posenc_pb2.GetServerInfoRequest(), timeout)
            with self._lock:
                self._server = known
        return known

    def _known_server(self, timeout: Optional[float]) -> posenc_pb2.GetServerInfoResponse:
        """server_info, or an empty answer when the server cannot say (the call that follows
        reports what is wrong)."""
        try:
            return self.server_info(timeout)
        except PosencError:
            return posenc_pb2.GetServerInfoResponse()

    def limits(self, timeout: Optional[float]) -> Limits:
        """What a split must respect: the smaller message limit of the client and the server
        (the client's alone when the server reports none) and the server's tables."""
        info = self._known_server(timeout)
        server = info.limits.max_message_bytes
        return Limits(min(self._max_message_bytes, server) if server > 0 else
                      self._max_message_bytes,
                      {t.name: tuple(t.shape) for t in info.tables})
