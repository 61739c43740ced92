"""Transport: the gRPC channel, its service config, unary calls, a split request's pieces in
flight together, the health check and the server's limits (asked once).

The retry and load-balancing policy is client/service_config.json (shipped in the package as
posenc/service_config.json, the same file the C++ client reads); the client's options override
its maxAttempts, loadBalancingConfig and healthCheckConfig.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc

from ._errors import PosencError, from_rpc_error
from ._protos import health_pb2, health_pb2_grpc, posenc_pb2, posenc_pb2_grpc
from ._split import Limits

__all__ = ["service_config", "channel_options", "Transport"]

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


class Transport:
    """Calls over one channel; thread-safe (the channel multiplexes the calls)."""

    def __init__(self, channel: grpc.Channel, max_message_bytes: int, max_in_flight: int):
        self.channel = channel
        self.stub = posenc_pb2_grpc.PositionEncodingStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)
        self._max_message_bytes = max_message_bytes
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._server: Optional[posenc_pb2.GetServerInfoResponse] = None

    def call(self, method: str, request: Any, timeout: Optional[float]) -> Any:
        """One unary call of the posenc service; a failure raises its PosencError."""
        try:
            return getattr(self.stub, method)(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from None

    def call_all(self, method: str, requests: Sequence[Any], timeout: Optional[float],
                 response_bytes: int = 0) -> List[Any]:
        """Every request sent, at most the in-flight bound at once (fewer when each response
        carries over 4 MiB: no more than the server computes at once); the responses in order,
        or the first failing request's error (the ones still in flight are cancelled)."""
        most = self._max_in_flight
        heavy = self._known_server(timeout).limits.max_heavy_calls if (
            response_bytes > _HEAVY_CALL_BYTES) else 0
        if heavy > 0:
            most = min(most, heavy)
        rpc = getattr(self.stub, method)
        futures: List[Any] = []
        responses: List[Any] = []
        try:
            for done in range(len(requests)):
                while len(futures) < len(requests) and len(futures) - done < most:
                    futures.append(rpc.future(requests[len(futures)], timeout=timeout))
                responses.append(futures[done].result())
        except grpc.RpcError as e:
            for future in futures[len(responses):]:
                future.cancel()
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
