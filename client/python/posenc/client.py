"""posenc.Client: the Python client of the posenc position-encoding service.

One method per RPC of ``posenc.v1.PositionEncoding`` (proto/posenc/v1/posenc.proto is the
reference for every field; SPEC §2 for every formula) plus the standard gRPC health check,
mirroring the C++ client (client/include/posenc/client.h). Tensors go in and come out as numpy
arrays; failures raise :class:`posenc.PosencError` subclasses carrying the server's gRPC code
and message unchanged.

    import posenc
    with posenc.Client("localhost:50051") as client:
        cos, sin, derived = client.rope_cache(range(0, 4096), posenc.RopeConfig(head_dim=128))

A Client is thread-safe: every call goes through one gRPC channel, which multiplexes them.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

import grpc
import numpy as np

from . import _tensor
from ._errors import PosencError, from_rpc_error, local_error
from ._tensor import DType, DTypeLike
from ._types import (AlibiBiasResult, AlibiMode, ApplyRopeResult, BackendInfo, BiasForm, Combine,
                     DeviceInfo, FreqScheme, FutureMode, HealthStatus, LearnedTable, MropeLayout,
                     Positions, RopeCacheLayout, RopeCacheResult, RopeConfig, RopeDerived,
                     RopeScaling, RopeScalingType, RopeStyle, ServerInfo, SinusoidalLayout,
                     SinusoidalParams, TableInfo, TensorLayout, TlsConfig, parse_enum)
from .v1 import posenc_pb2 as pb
from .v1 import posenc_pb2_grpc as pb_grpc

__all__ = ["Client", "DEFAULT_TIMEOUT", "DEFAULT_MAX_MESSAGE_BYTES"]

#: Default deadline of every call, seconds (as the C++ client's ClientOptions::timeout).
DEFAULT_TIMEOUT = 30.0
#: Default largest request and response message (gRPC's send/receive limits).
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20

_SERVICE = "posenc.v1.PositionEncoding"
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def _service_config(max_attempts: int, load_balancing_policy: str) -> str:
    """The gRPC service config: load balancing and retries of UNAVAILABLE and of a busy server's
    RESOURCE_EXHAUSTED (every posenc RPC is idempotent, so a retry is always safe; over a hard
    limit the server sends grpc-retry-pushback-ms -1, which stops the retries). gRPC caps
    maxAttempts at 5."""
    config: dict = {}
    if load_balancing_policy:
        config["loadBalancingConfig"] = [{load_balancing_policy: {}}]
    if max_attempts > 1:
        config["methodConfig"] = [{
            "name": [{"service": _SERVICE}, {"service": "grpc.health.v1.Health"}],
            "retryPolicy": {
                "maxAttempts": min(max_attempts, 5),
                "initialBackoff": "0.1s",
                "maxBackoff": "2s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
            },
        }]
    return json.dumps(config)


# grpc.health.v1 by hand (Debian ships no grpcio-health-checking): one field each way.
def _encode_health_request(service: str) -> bytes:
    if not service:
        return b""
    raw = service.encode("utf-8")
    out = bytearray(b"\x0a")  # field 1, length-delimited
    n = len(raw)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + raw


def _decode_health_response(data: bytes) -> HealthStatus:
    def varint(pos: int):
        value = shift = 0
        while pos < len(data) and shift < 64:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
        raise PosencError(grpc.StatusCode.INTERNAL, "malformed health response")

    status, pos = 0, 0
    while pos < len(data):
        tag, pos = varint(pos)
        wire = tag & 7
        if wire == 0:
            value, pos = varint(pos)
            if tag >> 3 == 1:
                status = value
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = varint(pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise PosencError(grpc.StatusCode.INTERNAL, "malformed health response")
        if pos > len(data):
            raise PosencError(grpc.StatusCode.INTERNAL, "malformed health response")
    return HealthStatus(status) if status in HealthStatus._value2member_map_ else (
        HealthStatus.UNKNOWN)


# ---------------------------------------------------------------------------------------------
# Request building.
# ---------------------------------------------------------------------------------------------
def _set_positions(msg: pb.Positions, value: Any) -> None:
    p = Positions.coerce(value)
    if p.kind == "default":
        return
    if p.kind == "range":
        msg.range.start = p.start
        msg.range.count = p.count
    elif p.kind == "offsets":
        msg.offsets.offsets.extend(p.seq_offsets)
        msg.offsets.SetInParent()
    elif p.kind == "ids":
        _tensor.set_int_tensor(msg.ids, p.array, "positions.ids")
    elif p.kind == "cu_seqlens":
        msg.cu_seqlens.cu_seqlens.extend(p.seq_bounds)
        msg.cu_seqlens.offsets.extend(p.seq_offsets)
        msg.cu_seqlens.SetInParent()
    elif p.kind == "attention_mask":
        _tensor.set_int_tensor(msg.attention_mask, p.array, "positions.attention_mask")
    else:
        raise local_error(f"positions: unknown kind {p.kind!r}")


def _set_positions_field(request: Any, value: Any) -> None:
    p = Positions.coerce(value)
    if p.kind == "default":
        return  # absent on the wire: the op's default
    _set_positions(request.positions, p)
    request.positions.SetInParent()


def _set_output_dtype(request: Any, dtype: DTypeLike) -> None:
    wire = _tensor._float_output_dtype(dtype, "output_dtype")
    if wire is not None:
        request.output_dtype = int(wire)


def _set_sinusoidal(msg: pb.SinusoidalParams, params: SinusoidalParams) -> None:
    msg.dim = int(params.dim)
    if params.base is not None:
        msg.base = float(params.base)
    msg.layout = parse_enum(SinusoidalLayout, params.layout, "params.layout")
    msg.freq_scheme = parse_enum(FreqScheme, params.freq_scheme, "params.freq_scheme")


def _set_rope_config(msg: pb.RopeConfig, config: RopeConfig) -> None:
    msg.head_dim = int(config.head_dim)
    if config.rotary_dim is not None:
        msg.rotary_dim = int(config.rotary_dim)
    if config.base is not None:
        msg.base = float(config.base)
    msg.style = parse_enum(RopeStyle, config.style, "config.style")
    s = config.scaling
    if isinstance(s, Mapping):
        s = RopeScaling.from_dict(s)
    if s is not None:
        out = msg.scaling
        out.type = parse_enum(RopeScalingType, s.type, "config.scaling.type")
        for name in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                     "attention_factor", "low_freq_factor", "high_freq_factor",
                     "partial_rotary_factor", "alpha"):
            value = getattr(s, name)
            if value is not None:
                setattr(out, name, float(value))
        if s.original_max_position_embeddings is not None:
            out.original_max_position_embeddings = int(s.original_max_position_embeddings)
        if s.truncate is not None:
            out.truncate = bool(s.truncate)
        out.long_factor.extend(float(v) for v in s.long_factor)
        out.short_factor.extend(float(v) for v in s.short_factor)
        # An all-default scaling is the same as an absent one on the wire.
        if out.ByteSize() == 0:
            msg.ClearField("scaling")
    if config.max_position_embeddings is not None:
        msg.max_position_embeddings = int(config.max_position_embeddings)
    msg.mrope_section.extend(int(v) for v in config.mrope_section)
    msg.mrope_layout = parse_enum(MropeLayout, config.mrope_layout, "config.mrope_layout")
    msg.inverse = bool(config.inverse)
    if config.apply_attention_factor is not None:
        msg.apply_attention_factor = bool(config.apply_attention_factor)
    if config.seq_len is not None:
        msg.seq_len = int(config.seq_len)
    msg.freq_factors.extend(float(v) for v in config.freq_factors)
    msg.hf_config_json = config.hf_config_json or ""
    msg.layer_type = config.layer_type or ""


def _derived(msg: pb.RopeDerived) -> RopeDerived:
    def enum_or_int(cls, v):
        return cls(v) if v in cls._value2member_map_ else v

    return RopeDerived(
        head_dim=msg.head_dim,
        rotary_dim=msg.rotary_dim,
        style=enum_or_int(RopeStyle, msg.style),
        scaling_type=enum_or_int(RopeScalingType, msg.scaling_type),
        effective_base=msg.effective_base,
        attention_factor=msg.attention_factor,
        attention_factor_applied=msg.attention_factor_applied,
        inv_freq=np.array(msg.inv_freq, dtype=np.float64),
        seq_len=msg.seq_len,
        yarn_low=msg.yarn_low,
        yarn_high=msg.yarn_high,
        longrope_long_factors=msg.longrope_long_factors,
        factor=msg.factor,
        warnings=tuple(msg.warnings),
        nope=msg.nope,
        layer_type=msg.layer_type,
        model_type=msg.model_type,
    )


def _set_table(request: Any, table: Any) -> None:
    """The table oneof of RelativeBias / RelativeEmbedding: a name (str) or inline (array)."""
    if table is None:
        return
    if isinstance(table, str):
        request.table_name = table
    else:
        _tensor.set_float_tensor(request.table_inline, table, "table_inline")


def _timeout_arg(value: Optional[float], field: str = "timeout") -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 or (
            math.isinf(value)):
        raise local_error(f"{field}: must be a positive number of seconds, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------
# The client.
# ---------------------------------------------------------------------------------------------
class Client:
    """A connection to a posenc server.

    Args:
      target: ``"host:port"``, ``"dns:///name:port"``, ``"unix:/path"``, ... (any gRPC target).
        The constructor does not wait for the server: the first call connects (and raises
        :class:`posenc.UnavailableError` if it cannot).
      timeout: deadline of every call in seconds (default 30, as the C++ client); None for no
        deadline. Each method's ``timeout=`` overrides it for that call.
      tls: None or False for plaintext; True for TLS trusting the system's roots; a
        :class:`posenc.TlsConfig` for a CA bundle and/or a client certificate (mutual TLS).
      max_message_bytes: largest request and response message (gRPC's send and receive
        limits; default 256 MiB, the server's default limit).
      max_attempts: attempts of a call that fails UNAVAILABLE, retried with exponential backoff
        through the gRPC service config (every posenc RPC is idempotent); 1 disables retries;
        gRPC caps it at 5.
      load_balancing_policy: gRPC policy over the addresses the target resolves to
        (``"round_robin"`` spreads calls over the replicas behind a DNS name; ``"pick_first"``
        is gRPC's default; ``""`` leaves it to gRPC).
      channel: an existing ``grpc.Channel`` to use instead of creating one (then only
        ``timeout`` of the options above applies; the caller keeps ownership).
      channel_options: extra ``(key, value)`` gRPC channel arguments.
      split_requests: when a request or its response would exceed the message limit (or the
        server's max_output_elements), send ApplyRope in parts along the tokens and a FULL T5
        bias in parts along the heads, and fetch a FULL ALiBi bias compact and expand it;
        the results are what one call would give (default True; see :meth:`apply_rope`).
      compact_biases: with ``form`` left unset, fetch ALiBi and T5 biases in their compact
        form and expand them here (the same array as FULL, a fraction of the bytes on the
        wire; default True, as in the C++ client).

    Raises :class:`posenc.InvalidArgumentError` for an empty target or invalid options.
    """

    def __init__(self, target: str = "", *, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 tls: Union[None, bool, TlsConfig] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_attempts: int = 3,
                 load_balancing_policy: str = "round_robin",
                 channel: Optional[grpc.Channel] = None,
                 channel_options: Sequence[tuple] = (), split_requests: bool = True,
                 compact_biases: bool = True):
        self._timeout = _timeout_arg(timeout)
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or (
                max_message_bytes <= 0):
            raise local_error(f"max_message_bytes: must be a positive integer, got "
                              f"{max_message_bytes!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or (
                max_attempts < 1):
            raise local_error(f"max_attempts: must be an integer >= 1, got {max_attempts!r}")
        self._max_message_bytes = min(max_message_bytes, 2**31 - 1)
        self._split_requests = bool(split_requests)
        self._compact_biases = bool(compact_biases)
        self._split_limits = None  # _split.Limits, asked once when a request is large
        self.target = target
        if channel is not None:
            self._channel = channel
            self._owns_channel = False
        else:
            if not target:
                raise local_error("target: must not be empty")
            options = [
                ("grpc.max_send_message_length", self._max_message_bytes),
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.service_config", _service_config(max_attempts, load_balancing_policy)),
                ("grpc.enable_retries", 1 if max_attempts > 1 else 0),
            ]
            if tls is None or tls is False:
                self._channel = grpc.insecure_channel(target, options + list(channel_options))
            else:
                config = TlsConfig() if tls is True else tls
                if not isinstance(config, TlsConfig):
                    raise local_error(f"tls: expected None, a bool or a TlsConfig, got "
                                      f"{type(tls).__name__}")
                root, key, cert = config.pem()
                credentials = grpc.ssl_channel_credentials(root_certificates=root,
                                                           private_key=key,
                                                           certificate_chain=cert)
                if config.server_name:
                    options.append(("grpc.ssl_target_name_override", config.server_name))
                self._channel = grpc.secure_channel(target, credentials,
                                                    options + list(channel_options))
            self._owns_channel = True
        self._stub = pb_grpc.PositionEncodingStub(self._channel)
        self._health = self._channel.unary_unary(_HEALTH_CHECK)

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel every call uses."""
        return self._channel

    @property
    def stub(self) -> pb_grpc.PositionEncodingStub:
        """The generated stub (posenc.v1 messages in, out) for what the methods do not cover."""
        return self._stub

    def close(self) -> None:
        """Closes the channel (when the client created it). Calls afterwards fail."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"posenc.Client({self.target!r})"

    # -- plumbing -----------------------------------------------------------------------------
    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else _timeout_arg(timeout)

    def _call(self, method: str, request: Any, timeout: Optional[float]) -> Any:
        rpc: Callable = getattr(self._stub, method)
        try:
            return rpc(request, timeout=self._deadline(timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from None

    # -- absolute encodings -------------------------------------------------------------------
    def sinusoidal(self, positions: Any, dim: int, *, base: Optional[float] = None,
                   layout: Any = None, freq_scheme: Any = None, dtype: DTypeLike = None,
                   timeout: Optional[float] = None) -> np.ndarray:
        """The sinusoidal table ``PE[positions, dim]`` (Sinusoidal).

        Args:
          positions: a range, ids (any shape: the output is ``ids.shape + [dim]``), cu_seqlens
            or an attention mask (``[B, S, dim]``, padding rows zero); see :class:`Positions`.
          dim: the table width D (odd allowed).
          base: default 10000. layout: ``"interleaved"`` (default) or ``"concat"``.
          freq_scheme: ``"vaswani"`` or ``"t2t"`` (default by layout).
          dtype: float32 (default), float16, bfloat16 or float64.
        """
        request = pb.SinusoidalRequest()
        _set_positions_field(request, positions)
        _set_sinusoidal(request.params, SinusoidalParams(dim, base, layout, freq_scheme))
        _set_output_dtype(request, dtype)
        return _tensor.to_numpy(self._call("Sinusoidal", request, timeout).table, "table")

    def add_position_encoding(self, x: Any, positions: Any = None, *,
                              sinusoidal: Optional[SinusoidalParams] = None,
                              learned: Union[None, LearnedTable, str, Any] = None,
                              table_offset: int = 0, combine: Any = None,
                              scale: Optional[float] = None, padding_idx: Optional[int] = None,
                              timeout: Optional[float] = None) -> np.ndarray:
        """``y = x*scale + PE`` (combine ``"add"``, default) or ``[x*scale ; PE]``
        (``"concat"``), in x's dtype (AddPositionEncoding).

        Args:
          x: float ``[B, T, D]`` or ``[T, D]``.
          positions: default 0 .. T-1 in every row; offsets, ids, a mask, ...
          sinusoidal: the sinusoidal source's parameters (default, when ``learned`` is not
            given: ``SinusoidalParams()``, the width of x).
          learned: a learned table: a :class:`LearnedTable`, a float array ``[max_pos, D]``
            (inline) or a table name; ``table_offset`` applies to the latter two.
          scale: default 1. padding_idx: fairseq's padding_idx (sinusoidal sources).
        """
        request = pb.AddPositionEncodingRequest()
        _tensor.set_float_tensor(request.x, x, "x")
        _set_positions_field(request, positions)
        if sinusoidal is not None and learned is not None:
            raise local_error("source: set either sinusoidal or learned, not both")
        if learned is not None:
            table = learned if isinstance(learned, LearnedTable) else LearnedTable(
                learned, table_offset)
            if isinstance(table.table, str):
                request.learned.table_name = table.table
            elif table.table is not None:
                _tensor.set_float_tensor(request.learned.table_inline, table.table,
                                         "learned.table_inline")
            request.learned.table_offset = int(table.table_offset)
            request.learned.SetInParent()
        else:
            _set_sinusoidal(request.sinusoidal, sinusoidal or SinusoidalParams())
            request.sinusoidal.SetInParent()
        request.combine = parse_enum(Combine, combine, "combine")
        if scale is not None:
            request.scale = float(scale)
        if padding_idx is not None:
            request.padding_idx = int(padding_idx)
        return _tensor.to_numpy(self._call("AddPositionEncoding", request, timeout).y, "y")

    # -- RoPE ---------------------------------------------------------------------------------
    def rope_cache(self, positions: Any, config: Any, *, dtype: DTypeLike = None,
                   layout: Any = None, timeout: Optional[float] = None) -> RopeCacheResult:
        """cos and sin of ``p * omega_j`` times the attention factor (RopeCache).

        Args:
          positions: a range, ids (``[3, ...]`` for M-RoPE), cu_seqlens or an attention mask.
          config: a :class:`RopeConfig` (``head_dim`` required unless a config.json gives it),
            or a Hugging Face config.json as a dict, JSON text or a path.
          dtype: float32 (default), float16, bfloat16 or float64.
          layout: ``"compact"`` (default, ``[..., d/2]``), ``"neox"`` or ``"gptj"``
            (``[..., d]``).

        Returns ``RopeCacheResult(cos, sin, derived)``.
        """
        request = pb.RopeCacheRequest()
        _set_positions_field(request, positions)
        _set_rope_config(request.config, RopeConfig.coerce(config))
        _set_output_dtype(request, dtype)
        request.layout = parse_enum(RopeCacheLayout, layout, "layout")
        response = self._call("RopeCache", request, timeout)
        return RopeCacheResult(_tensor.to_numpy(response.cos, "cos"),
                               _tensor.to_numpy(response.sin, "sin"), _derived(response.derived))

    def apply_rope(self, q: Any, k: Any = None, positions: Any = None, config: Any = None, *,
                   layout: Any = None, timeout: Optional[float] = None) -> ApplyRopeResult:
        """Rotates q (and k) by their positions; results in the input dtype (ApplyRope).

        Args:
          q: float, rank 4 (``"bshd"`` default, ``"bhsd"``) or rank 3 (``"thd"``, positions
            by cu_seqlens). float16/float32/float64, ``ml_dtypes.bfloat16``, or uint16
            bfloat16 bit patterns.
          k: optional; same layout, batch, sequence, head_dim and dtype as q (heads may differ).
          positions: default 0 .. S-1 in every sequence; a range, offsets, ids ``[S]`` /
            ``[B, S]`` / ``[3, ...]``, cu_seqlens or an attention mask.
          config: a :class:`RopeConfig` (default: ``RopeConfig()``, head_dim from q) or a
            Hugging Face config.json (dict, JSON text, path).

        A request whose q and k are larger than the message limit is split along the token
        axis into several calls (with ``seq_len`` pinned so that dynamic/LongRoPE scaling sees
        the whole request), unless the client was made with ``split_requests=False``.

        Returns ``ApplyRopeResult(q, k, derived)`` (k None when none was sent).
        """
        config = RopeConfig.coerce(config)
        q_dtype, q_arr = _tensor.float_array(q, "q")
        k_dtype, k_arr = q_dtype, None
        if k is not None:
            k_dtype, k_arr = _tensor.float_array(k, "k")
        layout_value = parse_enum(TensorLayout, layout, "layout")
        if self._split_requests:
            from . import _split  # pylint: disable=import-outside-toplevel

            plan = _split.plan_apply_rope(self, q_arr, k_arr, positions, config, layout_value,
                                          timeout)
            if plan is not None:
                return _split.run_apply_rope(self, plan, q_dtype, k_dtype, timeout)
        request = pb.ApplyRopeRequest()
        _tensor.fill_tensor(request.q, q_dtype, q_arr)
        if k_arr is not None:
            _tensor.fill_tensor(request.k, k_dtype, k_arr)
        _set_positions_field(request, positions)
        _set_rope_config(request.config, config)
        request.layout = layout_value
        response = self._call("ApplyRope", request, timeout)
        k_out = _tensor.to_numpy(response.k, "k") if response.HasField("k") else None
        return ApplyRopeResult(_tensor.to_numpy(response.q, "q"), k_out,
                               _derived(response.derived))

    # -- biases -------------------------------------------------------------------------------
    def alibi_slopes(self, num_heads: int, *, max_bias: Optional[float] = None,
                     dtype: DTypeLike = None, timeout: Optional[float] = None) -> np.ndarray:
        """ALiBi head slopes ``[num_heads]`` (AlibiSlopes); max_bias default 8."""
        request = pb.AlibiSlopesRequest(num_heads=int(num_heads))
        if max_bias is not None:
            request.max_bias = float(max_bias)
        _set_output_dtype(request, dtype)
        return _tensor.to_numpy(self._call("AlibiSlopes", request, timeout).slopes, "slopes")

    def alibi_bias(self, num_heads: int, q_len: int, k_len: int, *,
                   query_offset: Optional[int] = None, mode: Any = None, future: Any = None,
                   max_bias: Optional[float] = None, form: Any = None,
                   attention_mask: Any = None, dtype: DTypeLike = None, expand: bool = True,
                   timeout: Optional[float] = None) -> AlibiBiasResult:
        """The ALiBi bias (AlibiBias): query i at ``query_offset + i``, key j at j.

        Args:
          query_offset: default ``k_len - q_len`` (decode); may be negative.
          mode: ``"causal"`` (default), ``"symmetric"`` or ``"bloom"``.
          future: ``"mask"`` (-inf, default), ``"zero"`` or ``"linear"``.
          form: ``"full"`` or ``"compact"`` (default with ``compact_biases``, else full): the server sends the Toeplitz
            generator ``[H, q_len + k_len - 1]`` (BLOOM: the rows ``[H, k_len]``), a fraction
            of the bytes, and with ``expand=True`` (the default) the client expands it locally
            to the same ``[H, q_len, k_len]`` as FULL; ``expand=False`` returns the compact
            array (see :func:`posenc.expand_toeplitz`, :func:`posenc.expand_bloom_rows`).
          attention_mask: BLOOM only: int ``[B, k_len]``; the bias gains a batch axis.
          dtype: float32 (default), float16, bfloat16 or float64.

        A FULL bias over the message limit is fetched in several calls split along the heads
        (unless ``split_requests=False``).

        Returns ``AlibiBiasResult(bias, slopes)``.
        """
        request = pb.AlibiBiasRequest(num_heads=int(num_heads), q_len=int(q_len),
                                      k_len=int(k_len))
        if query_offset is not None:
            request.query_offset = int(query_offset)
        request.mode = parse_enum(AlibiMode, mode, "mode")
        request.future = parse_enum(FutureMode, future, "future")
        if max_bias is not None:
            request.max_bias = float(max_bias)
        request.form = parse_enum(BiasForm, form, "form")
        if request.form == BiasForm.UNSPECIFIED and self._compact_biases and request.q_len > 1:
            request.form = BiasForm.COMPACT
        if attention_mask is not None:
            _tensor.set_int_tensor(request.attention_mask, attention_mask, "attention_mask")
        _set_output_dtype(request, dtype)
        if self._split_requests and request.form != BiasForm.COMPACT:
            from . import _split  # pylint: disable=import-outside-toplevel

            result = _split.maybe_split_alibi(self, request, timeout)
            if result is not None:
                return result
        response = self._call("AlibiBias", request, timeout)
        bias = _tensor.to_numpy(response.bias, "bias")
        slopes = _tensor.to_numpy(response.slopes, "slopes")
        if request.form == BiasForm.COMPACT and expand:
            bias = self._expand_alibi(bias, request)
        return AlibiBiasResult(bias, slopes)

    @staticmethod
    def _expand_alibi(bias: np.ndarray, request: pb.AlibiBiasRequest) -> np.ndarray:
        if request.mode == AlibiMode.BLOOM:
            offset = request.query_offset if request.HasField("query_offset") else None
            return _tensor.expand_bloom_rows(bias, request.q_len, offset, FutureMode(
                request.future))
        return _tensor.expand_toeplitz(bias, request.q_len, request.k_len)

    def relative_bias(self, q_len: int, k_len: int, table: Any = None, *,
                      query_offset: Optional[int] = None, key_offset: Optional[int] = None,
                      bidirectional: Optional[bool] = None, num_buckets: Optional[int] = None,
                      max_distance: Optional[int] = None, form: Any = None,
                      dtype: DTypeLike = None, expand: bool = True,
                      timeout: Optional[float] = None) -> np.ndarray:
        """The T5 bucketed relative bias (RelativeBias): query i at ``query_offset + i``
        (default ``k_len - q_len``), key j at ``key_offset + j`` (default 0).

        Args:
          table: float ``[num_buckets, H]`` (inline) or the name of a server table; not needed
            for ``form="buckets"``.
          bidirectional: default True (encoder); False for T5 decoders.
          num_buckets: default 32. max_distance: default 128.
          form: ``"full"`` (``[H, q, k]``), ``"compact"`` (the default with ``compact_biases``: the Toeplitz generator
            ``[H, q + k - 1]``, expanded locally to ``[H, q, k]`` unless ``expand=False``) or
            ``"buckets"`` (int32 ``[q, k]``).
          dtype: float32 (default), float16, bfloat16 or float64 (ignored for buckets).
        """
        request = pb.RelativeBiasRequest(q_len=int(q_len), k_len=int(k_len))
        if query_offset is not None:
            request.query_offset = int(query_offset)
        if key_offset is not None:
            request.key_offset = int(key_offset)
        if bidirectional is not None:
            request.bidirectional = bool(bidirectional)
        if num_buckets is not None:
            request.num_buckets = int(num_buckets)
        if max_distance is not None:
            request.max_distance = int(max_distance)
        _set_table(request, table)
        request.form = parse_enum(BiasForm, form, "form")
        if request.form == BiasForm.UNSPECIFIED and self._compact_biases and request.q_len > 1:
            request.form = BiasForm.COMPACT
        if request.form != BiasForm.BUCKETS:
            _set_output_dtype(request, dtype)
        if self._split_requests and request.form in (BiasForm.UNSPECIFIED, BiasForm.FULL):
            from . import _split  # pylint: disable=import-outside-toplevel

            result = _split.maybe_split_relative(self, request, timeout)
            if result is not None:
                return result
        bias = _tensor.to_numpy(self._call("RelativeBias", request, timeout).bias, "bias")
        if request.form == BiasForm.COMPACT and expand:
            bias = _tensor.expand_toeplitz(bias, request.q_len, request.k_len)
        return bias

    def relative_embedding(self, q_len: int, k_len: int, max_relative: int, table: Any, *,
                           query_offset: Optional[int] = None, key_offset: Optional[int] = None,
                           dtype: DTypeLike = None,
                           timeout: Optional[float] = None) -> np.ndarray:
        """Shaw et al. relative embeddings ``[q_len, k_len, D]`` (RelativeEmbedding): entry
        (i, j) is ``table[clip(kpos - qpos, -K, K) + K]`` with K = ``max_relative``.

        ``table`` is float ``[2K+1, D]`` or the name of a server table; query i sits at
        ``query_offset + i`` (default ``k_len - q_len``), key j at ``key_offset + j`` (default
        0)."""
        request = pb.RelativeEmbeddingRequest(q_len=int(q_len), k_len=int(k_len),
                                              max_relative=int(max_relative))
        _set_table(request, table)
        if query_offset is not None:
            request.query_offset = int(query_offset)
        if key_offset is not None:
            request.key_offset = int(key_offset)
        _set_output_dtype(request, dtype)
        return _tensor.to_numpy(
            self._call("RelativeEmbedding", request, timeout).embeddings, "embeddings")

    # -- server -------------------------------------------------------------------------------
    def server_info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """Version, build, backends, limits and the tables the server loaded (GetServerInfo)."""
        r = self._call("GetServerInfo", pb.GetServerInfoRequest(), timeout)
        tables: List[TableInfo] = []
        for t in r.tables:
            dtype = DType(t.dtype) if t.dtype in DType._value2member_map_ else t.dtype
            tables.append(TableInfo(t.name, dtype, tuple(t.shape)))
        info = ServerInfo(
            version=r.version, build=r.build,
            backends=[BackendInfo(b.name, b.detail, b.is_default, b.small_call_bytes)
                      for b in r.backends],
            max_message_bytes=r.limits.max_message_bytes,
            max_output_elements=r.limits.max_output_elements, tables=tables,
            max_inflight_bytes=r.limits.max_inflight_bytes,
            max_heavy_calls=r.limits.max_heavy_calls, cuda_built_in=r.cuda_built_in,
            devices=[DeviceInfo(d.index, d.name, d.total_memory_bytes, d.compute_capability,
                                d.driver_version, d.runtime_version, d.in_use)
                     for d in r.devices])
        return info

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> HealthStatus:
        """``grpc.health.v1.Health/Check`` of ``service`` ("" = the server as a whole).

        Returns the serving status, whatever it is; the call itself failing raises (e.g.
        :class:`posenc.UnavailableError`, :class:`posenc.NotFoundError` for an unknown
        service)."""
        try:
            data = self._health(_encode_health_request(service), timeout=self._deadline(timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Health") from None
        return _decode_health_response(data)
