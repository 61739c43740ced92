"""posenc.Client: the Python client of the posenc position-encoding service.

One method per RPC of ``posenc.v1.PositionEncoding`` (proto/posenc/v1/posenc.proto is the
reference for every field and formula) plus the standard gRPC health check, with the shape and
defaults of the C++ client (client/include/posenc/client.h). Tensors go in as numpy arrays,
torch tensors (bfloat16 included) or any ``__dlpack__`` array and come out as numpy arrays (torch
tensors when the call's tensor inputs were torch tensors); failures raise
:class:`posenc.PosencError` subclasses carrying the server's gRPC code, message and structured
details unchanged.

Shared memory (a co-located server with ``--allow_shared_memory``): any tensor argument may be a
:class:`posenc.SharedMemoryRef` into a registered region (:class:`posenc.SharedMemory`) and every
method's ``output_shared_memory={output name: ref}`` has outputs written there; such results come
back as views of the region (ApplyRope rotates q and k in place in theirs), and such a request is
never split.

    import posenc
    with posenc.Client("localhost:50051") as client:
        cos, sin, derived = client.rope_cache(range(0, 4096), posenc.RopeConfig(head_dim=128))

A Client is thread-safe: every call goes through one gRPC channel, which multiplexes them.

The package's layers: _wire (values <-> messages) and _split (cutting a request over the message
limit into pieces, joining their responses) are pure; _transport sends; this module binds them.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import _memory, _split, _transport
from ._direct import DIRECT_MIN_BYTES, WireMessage
from ._enums import (AlibiMode, AnalysisProperty, BiasForm, Combine, DType, FutureMode,
                     HealthStatus, MultimodalFamily, RopeCacheLayout, TensorLayout, VisionTower)
from ._errors import local_error
from ._protos import posenc_pb2 as pb
from ._protos import posenc_pb2_grpc as pb_grpc
from ._tensor import (DTypeLike, describe_tensor, expand_compact_alibi, expand_toeplitz,
                      fill_tensor, float_array, float_output_dtype, host_array, is_torch,
                      set_float_tensor, set_int_tensor, to_numpy, to_torch)
from ._transport import NATIVE_TRANSPORT, Transport
from ._types import (AlibiBiasResult, AnalyzeEncodingResult, ApplyRopeResult, Array,
                     DescribeRopeResult, LearnedTable, MultimodalPositionsResult,
                     MultimodalTokenIds, RerotateKeysResult, RopeCacheResult, RopeConfig,
                     RopeDerived, RopeScaling, ServerInfo, SharedMemoryRef,
                     SharedMemoryRegionStatus, SinusoidalParams, TlsConfig, VisionPositionsResult,
                     config_json_text, enum_or_int, parse_enum)
from ._wire import (from_message, server_info, set_enum, set_positions, set_sequences, set_table,
                    to_message, uses_shared_memory)

__all__ = ["Client", "DEFAULT_TIMEOUT", "DEFAULT_MAX_MESSAGE_BYTES", "DEFAULT_MAX_SPLIT_IN_FLIGHT"]

#: Default deadline of every call, seconds (as the C++ client's ClientOptions::timeout).
DEFAULT_TIMEOUT = 30.0
#: Default largest request and response message (gRPC's send/receive limits).
DEFAULT_MAX_MESSAGE_BYTES = 256 << 20
#: Default bound of a split request's pieces in flight at once.
DEFAULT_MAX_SPLIT_IN_FLIGHT = 8

Planner = Callable[[Any, _split.LimitsFn], Optional[_split.Plan]]


def _seconds(value: Optional[float], field: str, allow_zero: bool = False) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isinf(value) or (
            not (value >= 0 if allow_zero else value > 0)):
        raise local_error(field, f"must be a {'non-negative' if allow_zero else 'positive'} "
                          f"number of seconds, got {value!r}")
    return float(value)


def _positive_int(value: Any, field: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise local_error(field, f"must be an integer >= {least}, got {value!r}")
    return int(value)


def _set_output_dtype(request: Any, dtype: DTypeLike) -> None:
    wire = float_output_dtype(dtype)
    if wire is not None:
        request.output_dtype = int(wire)


Placements = Optional[Mapping[str, SharedMemoryRef]]


def _direct_min_bytes(direct_tensors: Union[bool, int]) -> Optional[int]:
    """Client's ``direct_tensors`` as the size from which tensors go direct (None: never)."""
    if isinstance(direct_tensors, bool):
        return DIRECT_MIN_BYTES if direct_tensors else None
    if isinstance(direct_tensors, numbers.Integral) and direct_tensors >= 0:
        return int(direct_tensors)
    raise local_error("direct_tensors", f"expected a bool or a byte count >= 0, got "
                      f"{direct_tensors!r}")


class _Tensors:
    """One call's tensors: what its results are returned as (torch tensors when a tensor input
    was one) and which are in shared memory (``output_shared_memory``, and the ApplyRope inputs
    rotated in place there), so that those come back as views of their region. With
    ``direct_min_bytes``, the request's top-level float tensors of that many bytes or more are
    held as arrays (``request()`` is then a posenc._direct.WireMessage: their bytes are joined
    into the request once, when sent)."""

    def __init__(self, request: Any, placements: Placements,
                 direct_min_bytes: Optional[int] = None):
        self.torch = False
        self._request = request
        self._direct_min_bytes = direct_min_bytes
        self._arrays: Dict[str, np.ndarray] = {}
        self._refs: Dict[str, SharedMemoryRef] = {}
        for name, ref in (placements or {}).items():
            if not isinstance(name, str) or not isinstance(ref, SharedMemoryRef):
                raise local_error("output_shared_memory", "expected {output name: "
                                  f"SharedMemoryRef}}, got {name!r}: {ref!r}")
            out = request.output_shared_memory[name]
            out.region, out.offset, out.byte_size = ref.region, int(ref.offset), int(ref.byte_size)
            self._refs[name] = ref

    def note(self, value: Any, field: str) -> Any:
        """Takes note of a tensor input ``field`` (torch? in shared memory?); returns it."""
        if isinstance(value, SharedMemoryRef):
            self._refs.setdefault(field, value)
        elif is_torch(value):
            self.torch = True
        return value

    def float(self, msg: Any, value: Any, field: str) -> None:
        """A float input: tensor field ``field`` of the request (``msg``)."""
        value = self.note(value, field)
        if self._direct_min_bytes is not None and not isinstance(value, SharedMemoryRef):
            dtype, a = float_array(value, field)
            if a.nbytes >= self._direct_min_bytes:
                self._arrays[field] = describe_tensor(msg, dtype, a)
            else:
                fill_tensor(msg, dtype, a)
        else:
            set_float_tensor(msg, value, field)

    def request(self) -> Any:
        """The request to send: a WireMessage holding the float inputs' arrays, or the message."""
        if not self._arrays:
            return self._request
        wire = WireMessage(self._request)
        for name, a in self._arrays.items():
            wire.put(name, a)
        return wire

    def result(self, msg: Any, field: str,
               inline: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Array:
        """A response tensor: a view of its region (or the SharedMemoryRef) when it is in
        shared memory, else the array (``inline`` applied first), as torch when asked."""
        if msg.HasField("shared_memory"):
            where = msg.shared_memory
            ref = self._refs.get(field)
            if ref is not None and ref.memory is not None and ref.region == where.region:
                return ref.memory.result(msg.dtype, tuple(msg.shape), where.offset, ref.torch)
            return SharedMemoryRef(where.region, where.offset, where.byte_size,
                                   enum_or_int(DType, msg.dtype), tuple(msg.shape))
        a = to_numpy(msg, field)
        if inline is not None:
            a = inline(a)
        return to_torch(a, msg.dtype) if self.torch else a


class Client:
    """A connection to a posenc server.

    Args (as the C++ client's ClientOptions, times in seconds):
      target: ``"host:port"``, ``"dns:///name:port"``, ``"unix:/path"``, ... (any gRPC target).
        The constructor does not wait for the server: the first call connects (and raises
        :class:`posenc.UnavailableError` if it cannot).
      timeout: deadline of every call (default 30); None for no deadline. Each method's
        ``timeout=`` overrides it for that call.
      tls: None or False for plaintext; True for TLS trusting the system's roots; a
        :class:`posenc.TlsConfig` for a CA bundle and/or a client certificate (mutual TLS).
      max_message_bytes: largest request and response message (gRPC's send and receive
        limits; default 256 MiB, the server's default limit).
      max_attempts: attempts of a call that fails UNAVAILABLE or with a busy server's
        RESOURCE_EXHAUSTED, retried with exponential backoff through the gRPC service config
        (client/service_config.json; every posenc RPC is idempotent); 1 disables retries;
        gRPC caps it at 5.
      load_balancing_policy: gRPC policy over the addresses the target resolves to
        (``"round_robin"`` spreads calls over the replicas behind a DNS name; ``"pick_first"``
        is gRPC's default; ``""`` leaves it to gRPC).
      health_check: client-side health checking with a load-balancing policy: the channel
        watches grpc.health.v1 on every address and sends no new call to one that is not
        SERVING (a replica draining after SIGTERM).
      keepalive_time: HTTP/2 keepalive pings every that many seconds (0: off, the default);
        a connection whose ping is not answered within ``keepalive_timeout`` (default 20) is
        closed.
      channel: an existing ``grpc.Channel`` to use instead of creating one (then only
        ``timeout`` and the split options apply; the caller keeps ownership).
      channel_options: extra ``(key, value)`` gRPC channel arguments.
      split_requests: cut a request whose tensors or outputs would exceed the message limit
        (the smaller of ``max_message_bytes`` and the server's, asked once) into pieces sent
        together and joined, byte-identical to one call (docs/splitting.md): ApplyRope along
        heads, then tokens, then batch rows; AddPositionEncoding along batch rows, then
        tokens; ALiBi and T5 biases and relative embeddings along query rows. Default True.
      compact_biases: with ``form`` left unset, fetch ALiBi and T5 biases in their compact
        form and expand them here (the same array as FULL, a fraction of the bytes on the
        wire; default True, as in the C++ client).
      max_split_in_flight: pieces of a split request in flight at once (default 8; fewer when
        each piece is a heavy call for the server, see ServerInfo.max_heavy_calls).
      direct_tensors: move the tensors' bytes between the arrays and the wire directly
        (default True): the request is serialized with the input arrays' bytes joined in once,
        the response's tensor bytes are read as views of the received buffer; not through
        protobuf's Python messages, which copy them three times each way. True does so for
        tensors and responses from 64 KiB on (``posenc._direct.DIRECT_MIN_BYTES``; smaller
        ones cost less through protobuf than the join and the scan); an int, from that many
        bytes on (0: every one). False: the plain protobuf path (the same messages on the
        wire; for comparison).
      native_transport: send the calls that carry tensors through ``posenc._wirecall``, the
        package's native transport, where it was built (``posenc.NATIVE_TRANSPORT``; needs
        Python's headers at install time, Debian: python3-dev): the input arrays' bytes are
        lent to gRPC, not joined into a request first, the response is copied once, into the
        buffer the result arrays view (gRPC Python copies each way two to four times); 1.3-1.8x
        the throughput of such calls from 2 MiB up (BENCHMARKS.md "The Python client's native
        transport"). A second connection to the same target, with the same options and
        credentials: health and server info go through ``channel``. Default True; with
        ``channel`` given, or ``direct_tensors=False``, it is not used. A call on it cannot be
        interrupted by a signal (Ctrl-C waits for it or for its timeout).
      retain_freed_memory: bytes of freed memory the process's allocator keeps for the next
        calls' buffers (default 1 GiB, as posenc-server's ``--retain_free_memory_bytes``), so
        that large arrays reuse pages already faulted in instead of fresh ones the kernel
        zeroes: 1.7-2.6x the throughput of calls from 8 MiB up (BENCHMARKS.md "The Python
        client's wire"), at the cost of the process's resident memory staying at its peak until
        :func:`posenc.release_freed_memory`. It sets the whole process's allocator (glibc:
        one arena, no separate mappings for large blocks), once: the first client does it
        unless the caller called :func:`posenc.retain_freed_memory` first (whose choice,
        0 included, stands). 0: leave the allocator as it is.

    Raises :class:`posenc.InvalidArgumentError` for an empty target or invalid options.
    """

    def __init__(self, target: str = "", *, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 tls: Union[None, bool, TlsConfig] = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_attempts: int = 3,
                 load_balancing_policy: str = "round_robin", health_check: bool = True,
                 keepalive_time: float = 0.0, keepalive_timeout: float = 20.0,
                 channel: Optional[grpc.Channel] = None,
                 channel_options: Sequence[Tuple[str, Any]] = (), split_requests: bool = True,
                 compact_biases: bool = True,
                 max_split_in_flight: int = DEFAULT_MAX_SPLIT_IN_FLIGHT,
                 direct_tensors: Union[bool, int] = True,
                 retain_freed_memory: int = _memory.DEFAULT_RETAIN_FREED_MEMORY,
                 native_transport: bool = True):
        self._timeout = _seconds(timeout, "timeout")
        retain = _positive_int(retain_freed_memory, "retain_freed_memory", least=0)
        limit = min(_positive_int(max_message_bytes, "max_message_bytes"), 2**31 - 1)
        attempts = _positive_int(max_attempts, "max_attempts")
        keepalive = _seconds(keepalive_time, "keepalive_time", allow_zero=True) or 0.0
        keepalive_wait = _seconds(keepalive_timeout, "keepalive_timeout") or 20.0
        in_flight = _positive_int(max_split_in_flight, "max_split_in_flight")
        self._split_requests = bool(split_requests)
        self._compact_biases = bool(compact_biases)
        self.target = target
        self._owns_channel = channel is None
        if channel is not None or target:
            _memory.retain_by_default(retain)  # before the channel's threads, where it makes one
        direct = _direct_min_bytes(direct_tensors)
        native = None
        if channel is None:
            if not target:
                raise local_error("target", "must not be empty")
            options = _transport.channel_options(limit, attempts, load_balancing_policy,
                                                 health_check, keepalive, keepalive_wait)
            options += list(channel_options)
            config = self._tls_config(tls)
            pem = config.pem() if config is not None else None
            if config is not None and config.server_name:
                options.append(("grpc.ssl_target_name_override", config.server_name))
            if native_transport and direct is not None and NATIVE_TRANSPORT:
                native = self._make_native_channel(target, pem, options)
            channel = self._make_channel(target, pem, options)
        self._transport = Transport(channel, limit, in_flight, direct, native)

    @staticmethod
    def _tls_config(tls: Union[None, bool, TlsConfig]) -> Optional[TlsConfig]:
        if tls is None or tls is False:
            return None
        config = TlsConfig() if tls is True else tls
        if not isinstance(config, TlsConfig):
            raise local_error("tls", f"expected None, a bool or a TlsConfig, got "
                              f"{type(tls).__name__}")
        return config

    @staticmethod
    def _make_channel(target: str, pem: Optional[Tuple[Optional[bytes], ...]], options: list
                      ) -> grpc.Channel:
        """gRPC Python's channel: insecure without ``pem`` (TlsConfig.pem(): root, key, cert)."""
        if pem is None:
            return grpc.insecure_channel(target, options)
        root, key, cert = pem
        credentials = grpc.ssl_channel_credentials(root_certificates=root, private_key=key,
                                                   certificate_chain=cert)
        return grpc.secure_channel(target, credentials, options)

    @staticmethod
    def _make_native_channel(target: str, pem: Optional[Tuple[Optional[bytes], ...]],
                             options: list) -> Any:
        """The native transport's channel, with _make_channel's options and credentials."""
        try:
            if pem is None:
                return _transport.native_module().Channel(target, options)
            return _transport.native_module().Channel(target, options, True, *pem)
        except (TypeError, ValueError) as e:  # an option gRPC Python takes and it does not
            raise local_error("channel_options", str(e)) from None

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel every call uses."""
        return self._transport.channel

    @property
    def stub(self) -> pb_grpc.PositionEncodingStub:
        """The generated stub (posenc.v1 messages in, out) for what the methods do not cover."""
        return self._transport.stub

    def close(self) -> None:
        """Closes the channels (when the client created them). Calls afterwards fail."""
        if self._owns_channel:
            self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"posenc.Client({self.target!r})"

    # -- plumbing -----------------------------------------------------------------------------
    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else _seconds(timeout, "timeout")

    def _send(self, method: str, request: Any, timeout: Optional[float],
              planner: Optional[Planner] = None, tensors: Optional[_Tensors] = None) -> Any:
        """The response of ``request``: one call, or the joined pieces of a split (``tensors``:
        the call's tensors, whose held arrays go with the request)."""
        deadline = self._deadline(timeout)
        shared = uses_shared_memory(request)
        if tensors is not None:
            request = tensors.request()
        if self._split_requests and planner is not None and not shared:
            plan = planner(request, lambda: self._transport.limits(deadline))
            if plan is not None:
                return plan.join(self._transport.call_all(method, plan.pieces, deadline,
                                                          plan.piece_bytes, plan.sinks))
        return self._transport.call(method, request, deadline)

    # -- absolute encodings -------------------------------------------------------------------
    def sinusoidal(self, positions: Any, dim: int, *, base: Optional[float] = None,
                   layout: Any = None, freq_scheme: Any = None, dtype: DTypeLike = None,
                   output_shared_memory: Placements = None,
                   timeout: Optional[float] = None) -> Array:
        """The sinusoidal table ``PE[positions, dim]`` (Sinusoidal).

        Args:
          positions: a range, ids (any shape: the output is ``ids.shape + [dim]``), cu_seqlens
            or an attention mask (``[B, S, dim]``, padding rows zero); see :class:`Positions`.
          dim: the table width D (odd allowed).
          base: default 10000. layout: ``"interleaved"`` (default) or ``"concat"``.
          freq_scheme: ``"vaswani"`` or ``"t2t"`` (default by layout).
          dtype: float32 (default), float16, bfloat16 or float64.
          output_shared_memory: ``{"table": ref}`` writes the table into shared memory.
        """
        request = pb.SinusoidalRequest()
        tensors = _Tensors(request, output_shared_memory)
        set_positions(request, positions)
        to_message(SinusoidalParams(dim, base, layout, freq_scheme), request.params, "params")
        _set_output_dtype(request, dtype)
        return tensors.result(self._send("Sinusoidal", request, timeout).table, "table")

    def add_position_encoding(self, x: Any, positions: Any = None, *,
                              sinusoidal: Optional[SinusoidalParams] = None,
                              learned: Union[None, LearnedTable, str, Any] = None,
                              table_offset: int = 0, combine: Any = None,
                              scale: Optional[float] = None, padding_idx: Optional[int] = None,
                              output_shared_memory: Placements = None,
                              timeout: Optional[float] = None) -> Array:
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
          output_shared_memory: ``{"y": ref}`` writes y into shared memory.

        Over the message limit, it is split along batch rows, then tokens.
        """
        request = pb.AddPositionEncodingRequest()
        tensors = _Tensors(request, output_shared_memory, self._transport.direct_min_bytes)
        tensors.float(request.x, x, "x")
        set_positions(request, positions)
        if sinusoidal is not None and learned is not None:
            raise local_error("source", "set either sinusoidal or learned, not both")
        if learned is not None:
            table = learned if isinstance(learned, LearnedTable) else LearnedTable(
                learned, table_offset)
            set_table(request.learned, tensors.note(table.table, "learned.table_inline"),
                      "learned.")
            request.learned.table_offset = int(table.table_offset)
            request.learned.SetInParent()
        else:
            to_message(sinusoidal or SinusoidalParams(), request.sinusoidal, "sinusoidal")
            request.sinusoidal.SetInParent()
        set_enum(request, "combine", Combine, combine)
        if scale is not None:
            request.scale = float(scale)
        if padding_idx is not None:
            request.padding_idx = int(padding_idx)
        response = self._send("AddPositionEncoding", request, timeout,
                              _split.plan_add_position_encoding, tensors)
        return tensors.result(response.y, "y")

    # -- RoPE ---------------------------------------------------------------------------------
    def rope_cache(self, positions: Any, config: Any, *, dtype: DTypeLike = None,
                   layout: Any = None, output_shared_memory: Placements = None,
                   timeout: Optional[float] = None) -> RopeCacheResult:
        """cos and sin of ``p * omega_j`` times the attention factor (RopeCache).

        Args:
          positions: a range, ids (``[3, ...]`` for M-RoPE), cu_seqlens or an attention mask.
          config: a :class:`RopeConfig` (``head_dim`` required unless a config.json gives it),
            or a Hugging Face config.json as a dict, JSON text or a path.
          dtype: float32 (default), float16, bfloat16 or float64.
          layout: ``"compact"`` (default, ``[..., d/2]``), ``"neox"`` or ``"gptj"``
            (``[..., d]``); ``"fused_cos_sin"`` (``[..., d]`` = cat(cos, sin), the
            cos_sin_cache of vLLM / FlashInfer / SGLang) or ``"complex"`` (``[..., d/2, 2]``,
            ``view_as_complex`` of it is freqs_cis): one table, returned as ``cos_sin`` or
            ``freqs_cis`` with ``cos`` and ``sin`` None.
          output_shared_memory: ``{"cos": ref, "sin": ref}`` (either or both; ``"cos_sin"``
            or ``"freqs_cis"`` for the one-table layouts) writes them into shared memory.

        Returns ``RopeCacheResult(cos, sin, derived, cos_sin, freqs_cis)``: cos and sin, or
        (the one-table layouts) cos_sin or freqs_cis, the others None.
        """
        request = pb.RopeCacheRequest()
        tensors = _Tensors(request, output_shared_memory)
        set_positions(request, positions)
        to_message(RopeConfig.coerce(config), request.config, "config")
        _set_output_dtype(request, dtype)
        set_enum(request, "layout", RopeCacheLayout, layout)
        response = self._send("RopeCache", request, timeout)
        derived = from_message(response.derived, RopeDerived)
        if response.HasField("cos_sin"):
            return RopeCacheResult(None, None, derived,
                                   cos_sin=tensors.result(response.cos_sin, "cos_sin"))
        if response.HasField("freqs_cis"):
            return RopeCacheResult(None, None, derived,
                                   freqs_cis=tensors.result(response.freqs_cis, "freqs_cis"))
        return RopeCacheResult(tensors.result(response.cos, "cos"),
                               tensors.result(response.sin, "sin"), derived)

    def apply_rope(self, q: Any, k: Any = None, positions: Any = None, config: Any = None, *,
                   layout: Any = None, output_shared_memory: Placements = None,
                   timeout: Optional[float] = None) -> ApplyRopeResult:
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
          output_shared_memory: ``{"q": ref, "k": ref}`` writes the results into shared memory.

        q or k given as a :class:`posenc.SharedMemoryRef` is rotated in place in its region and
        comes back as a view of it. Over the message limit, q and k are split along heads, then
        tokens (with ``config.seq_len`` pinned to the whole request's, so that dynamic NTK and
        LongRoPE see what one call would), then batch rows (docs/splitting.md), unless the
        client was made with ``split_requests=False``.

        Returns ``ApplyRopeResult(q, k, derived)`` (k None when none was sent).
        """
        request = pb.ApplyRopeRequest()
        tensors = _Tensors(request, output_shared_memory, self._transport.direct_min_bytes)
        tensors.float(request.q, q, "q")
        if k is not None:
            tensors.float(request.k, k, "k")
        set_positions(request, positions)
        to_message(RopeConfig.coerce(config), request.config, "config")
        set_enum(request, "layout", TensorLayout, layout)
        response = self._send("ApplyRope", request, timeout, _split.plan_apply_rope, tensors)
        k_out = tensors.result(response.k, "k") if response.HasField("k") else None
        return ApplyRopeResult(tensors.result(response.q, "q"), k_out,
                               from_message(response.derived, RopeDerived))

    def rerotate_keys(self, k: Any, delta: Any, positions: Any = None, config: Any = None, *,
                      layout: Any = None, timeout: Optional[float] = None
                      ) -> RerotateKeysResult:
        """Moves keys already rotated at ``positions`` to ``positions + delta`` in one exact
        rotation by ``delta * omega`` (RerotateKeys; the attention factor is not applied again).

        Args:
          k: float keys, rank 4 (``"bshd"`` default, ``"bhsd"``) or 3 (``"thd"``).
          delta: int shifts: a scalar, one per sequence ``[B]``, one per token ``[B, S]`` /
            ``[T]``; with M-RoPE (or 2-D) positions a leading ``[A]`` (one per axis).
          positions: where the keys are now (as apply_rope's; default 0 .. S-1).
          config: the keys' :class:`RopeConfig` or config.json (inverse must be false).
        """
        request = pb.RerotateKeysRequest()
        tensors = _Tensors(request, None, self._transport.direct_min_bytes)
        tensors.float(request.k, k, "k")
        set_int_tensor(request.delta, delta, "delta")
        set_positions(request, positions)
        to_message(RopeConfig.coerce(config), request.config, "config")
        set_enum(request, "layout", TensorLayout, layout)
        response = self._send("RerotateKeys", request, timeout, None, tensors)
        return RerotateKeysResult(tensors.result(response.k, "k"),
                                  from_message(response.derived, RopeDerived))

    @staticmethod
    def _multimodal_request(config: Any, family: Any, token_ids: Any,
                            spatial_merge_size: Optional[int] = None,
                            tokens_per_second: Optional[float] = None,
                            temporal_merge_size: Optional[int] = None) -> Any:
        request = pb.MultimodalPositionsRequest()
        if config is not None:
            request.hf_config_json = config_json_text(config)
        set_enum(request, "family", MultimodalFamily, family)
        if token_ids is not None:
            ids = token_ids if isinstance(token_ids, MultimodalTokenIds) else MultimodalTokenIds(
                **token_ids)
            to_message(ids, request.token_ids, "token_ids")
        if spatial_merge_size is not None:
            request.spatial_merge_size = int(spatial_merge_size)
        if tokens_per_second is not None:
            request.tokens_per_second = float(tokens_per_second)
        if temporal_merge_size is not None:
            request.temporal_merge_size = int(temporal_merge_size)
        return request

    def multimodal_positions(self, input_ids: Any = None, *, config: Any = None,
                             family: Any = None, token_ids: Any = None,
                             spatial_merge_size: Optional[int] = None,
                             tokens_per_second: Optional[float] = None,
                             temporal_merge_size: Optional[int] = None,
                             attention_mask: Any = None, image_grid_thw: Any = None,
                             video_grid_thw: Any = None, second_per_grid_ts: Any = None,
                             sequences: Any = None, timeout: Optional[float] = None
                             ) -> MultimodalPositionsResult:
        """M-RoPE position ids ``[3, B, S]`` (t, h, w) and ``mrope_position_deltas`` ``[B, 1]``
        of a multimodal prompt, as the family's transformers ``get_rope_index``
        (MultimodalPositions).

        Args:
          input_ids: int ``[B, S]`` (with ``attention_mask``, ``image_grid_thw`` ``[N, 3]``,
            ``video_grid_thw`` ``[M, 3]``, Qwen2.5-VL's ``second_per_grid_ts`` ``[M]``), or
          sequences: spans per sequence (left-padded to the longest): ``("text", n)``,
            ``("image", t, h, w)``, ``("video", t, h, w[, second_per_grid])``.
          config: the model's config.json (dict, JSON text, path): model_type picks the family,
            vision_config gives spatial_merge_size, tokens_per_second and (ERNIE-4.5-VL)
            temporal_merge_size, the top level the token ids. ``family`` (``"qwen2_vl"``,
            ``"qwen2_5_vl"``, ``"qwen3_vl"``, ``"glm4v"``, ``"ernie4_5_vl"``), ``token_ids``
            (a :class:`MultimodalTokenIds` or dict), ``spatial_merge_size``,
            ``tokens_per_second`` and ``temporal_merge_size`` override it.
        """
        request = self._multimodal_request(config, family, token_ids, spatial_merge_size,
                                           tokens_per_second, temporal_merge_size)
        for name, value in (("input_ids", input_ids), ("attention_mask", attention_mask),
                            ("image_grid_thw", image_grid_thw),
                            ("video_grid_thw", video_grid_thw)):
            if value is not None:
                set_int_tensor(getattr(request, name), value, name)
        if second_per_grid_ts is not None:
            host = host_array(second_per_grid_ts)
            set_float_tensor(request.second_per_grid_ts, np.asarray(
                second_per_grid_ts if host is None else host, dtype=np.float64),
                "second_per_grid_ts")
        if sequences is not None:
            set_sequences(request, sequences)
        return self._multimodal_result(self._send("MultimodalPositions", request, timeout))

    def multimodal_decode(self, deltas: Any, prompt_length: int, num_steps: int = 1, *,
                          config: Any = None, family: Any = None,
                          timeout: Optional[float] = None) -> MultimodalPositionsResult:
        """The position ids ``[3, B, num_steps]`` of the decode steps after a prompt of padded
        length ``prompt_length`` whose ``mrope_position_deltas`` are ``deltas`` ([B] or
        [B, 1]): ``prompt_length + k + deltas[b]`` on every axis (MultimodalPositions)."""
        request = self._multimodal_request(config, family, None)
        set_int_tensor(request.decode.deltas, deltas, "decode.deltas")
        request.decode.prompt_length = int(prompt_length)
        request.decode.num_steps = int(num_steps)
        return self._multimodal_result(self._send("MultimodalPositions", request, timeout))

    @staticmethod
    def _multimodal_result(response: Any) -> MultimodalPositionsResult:
        deltas = (to_numpy(response.mrope_position_deltas, "mrope_position_deltas")
                  if response.HasField("mrope_position_deltas") else None)
        return MultimodalPositionsResult(to_numpy(response.position_ids, "position_ids"), deltas,
                                         enum_or_int(MultimodalFamily, response.family),
                                         response.source)

    def vision_positions(self, grid: Any = None, *, config: Any = None, tower: Any = None,
                         spatial_merge_size: Optional[int] = None,
                         window_size: Optional[int] = None, patch_size: Optional[int] = None,
                         image_size: Optional[int] = None, timeout: Optional[float] = None
                         ) -> VisionPositionsResult:
        """The 2-D patch positions ``[2, L]`` of a vision tower in its attention's order
        (VisionPositions), for rope_cache / apply_rope with
        ``RopeConfig.from_hf(config, layer_type="vision")``.

        Args:
          grid: int patch grids: Qwen ``[N, 3]`` (t, h, w), Pixtral ``[N, 2]`` (h, w); none
            for Llama 4.
          config: the model's config.json (vision_config gives the tower and its geometry);
            ``tower`` (``"qwen"``, ``"pixtral"``, ``"llama4"``), ``spatial_merge_size``,
            ``window_size`` (Qwen2.5-VL's window order; 0: none), ``patch_size`` and
            ``image_size`` override it.
        """
        request = pb.VisionPositionsRequest()
        if config is not None:
            request.hf_config_json = config_json_text(config)
        set_enum(request, "tower", VisionTower, tower)
        if grid is not None:
            set_int_tensor(request.grid, grid, "grid")
        for name, value in (("spatial_merge_size", spatial_merge_size),
                            ("window_size", window_size), ("patch_size", patch_size),
                            ("image_size", image_size)):
            if value is not None:
                setattr(request, name, int(value))
        r = self._send("VisionPositions", request, timeout)

        def optional(name: str) -> Optional[np.ndarray]:
            return to_numpy(getattr(r, name), name) if r.HasField(name) else None

        return VisionPositionsResult(to_numpy(r.position_ids, "position_ids"),
                                     optional("flat_ids"), optional("window_index"),
                                     optional("cu_window_seqlens"),
                                     enum_or_int(VisionTower, r.tower))

    def describe_rope(self, config: Any, *, timeout: Optional[float] = None
                      ) -> DescribeRopeResult:
        """What a RoPE configuration does at every layer of a model (DescribeRope): types,
        bases, pairing, scaling, NoPE layers, context, the softmax-scale multiplier, the
        normalizer's warnings and where each value came from; a VL config's vision tower as the
        last group (layer_type "vision"), and the layers' sub-modules with a RoPE of their own
        in ``submodules`` (DeepSeek-V3.2 / GLM-5's DSA indexer).

        ``config`` is usually a Hugging Face config.json (dict, JSON text, path, or
        ``RopeConfig.from_hf(...)`` with style, inverse, apply_attention_factor or seq_len
        set; layer_type and submodule must stay empty; style is the attention's, the
        sub-modules keep their own pairing); an explicit :class:`RopeConfig` is described as
        one group without layers.
        """
        request = pb.DescribeRopeRequest()
        to_message(RopeConfig.coerce(config), request.config, "config")
        return from_message(self._send("DescribeRope", request, timeout), DescribeRopeResult)

    # -- analysis -----------------------------------------------------------------------------
    def analyze_encoding(self, *, count: int, start: int = 0,
                         sinusoidal: Optional[SinusoidalParams] = None,
                         learned: Union[None, LearnedTable, str, Any] = None,
                         config: Any = None, alibi: Optional[Mapping[str, Any]] = None,
                         t5: Optional[Mapping[str, Any]] = None,
                         properties: Sequence[Any] = (), collision_dtype: DTypeLike = None,
                         uniqueness_offsets: Optional[int] = None,
                         distances: Sequence[int] = (), samples: Optional[int] = None,
                         seed: int = 0, window: Optional[int] = None,
                         max_cells: Optional[int] = None, embeddings: Any = None,
                         scalings: Sequence[Any] = (), keys: Any = None,
                         timeout: Optional[float] = None
                         ) -> AnalyzeEncodingResult:
        """The properties of an encoding over positions ``start .. start + count - 1``
        (AnalyzeEncoding): uniqueness (and the first FLOAT16/BFLOAT16 collision), bounds and
        norms, relative structure, distance decay, extrapolation, similarity.

        Args:
          sinusoidal / learned / config / alibi / t5: exactly one encoding. ``learned``: a
            :class:`LearnedTable`, a float array (inline) or a table name. ``config``: a
            RoPE config (:class:`RopeConfig`, a dict or a config.json). ``alibi``: a dict of
            ``num_heads``, ``max_bias``, ``mode``, ``future``. ``t5``: a dict of
            ``bidirectional``, ``num_buckets``, ``max_distance`` and ``table`` (array or name).
          properties: names or :class:`AnalysisProperty` members; empty: all six.
          collision_dtype: "float16" or "bfloat16": look for the first collision.
          embeddings: float array [n, D]: DECAY's query rows (and, without ``keys``, its key
            rows) and SIMILARITY's token embeddings; None: random ones from ``seed``.
          keys: float array of the shape of ``embeddings``: DECAY's key rows, paired row by
            row with the query rows.
        """
        request = pb.AnalyzeEncodingRequest(start=int(start), count=int(count), seed=int(seed))
        self._set_analysis_encoding(request, sinusoidal, learned, config, alibi, t5)
        for i, p in enumerate(properties):
            request.properties.append(parse_enum(AnalysisProperty, p, f"properties[{i}]"))
        set_enum(request, "collision_dtype", DType, collision_dtype)
        request.distances.extend(int(k) for k in distances)
        for name, value in (("uniqueness_offsets", uniqueness_offsets), ("samples", samples),
                            ("window", window), ("max_cells", max_cells)):
            if value is not None:
                setattr(request, name, int(value))
        if embeddings is not None:
            set_float_tensor(request.embeddings, embeddings, "embeddings")
        if keys is not None:
            set_float_tensor(request.keys, keys, "keys")
        for i, scaling in enumerate(scalings):
            to_message(RopeScaling.from_dict(scaling) if isinstance(scaling, Mapping) else scaling,
                       request.scalings.add(), f"scalings[{i}]")
        return from_message(self._send("AnalyzeEncoding", request, timeout),
                            AnalyzeEncodingResult)

    @staticmethod
    def _set_analysis_encoding(request: Any, sinusoidal: Any, learned: Any, config: Any,
                               alibi: Optional[Mapping[str, Any]],
                               t5: Optional[Mapping[str, Any]]) -> None:
        given = [v is not None for v in (sinusoidal, learned, config, alibi, t5)]
        if sum(given) > 1:
            raise local_error("encoding", "set one of sinusoidal, learned, config, alibi and t5, "
                              f"got {sum(given)}")
        if sinusoidal is not None:
            to_message(sinusoidal, request.sinusoidal, "sinusoidal")
            request.sinusoidal.SetInParent()
        if learned is not None:
            table = learned if isinstance(learned, LearnedTable) else LearnedTable(learned)
            set_table(request.learned, table.table, "learned.")
            request.learned.table_offset = int(table.table_offset)
        if config is not None:
            to_message(RopeConfig.coerce(config), request.config, "config")
            request.config.SetInParent()
        if alibi is not None:
            a = dict(alibi)
            request.alibi.num_heads = int(a.get("num_heads", 0))
            if a.get("max_bias") is not None:
                request.alibi.max_bias = float(a["max_bias"])
            set_enum(request.alibi, "mode", AlibiMode, a.get("mode"))
            set_enum(request.alibi, "future", FutureMode, a.get("future"))
            request.alibi.SetInParent()
        if t5 is not None:
            t = dict(t5)
            for name in ("bidirectional", "num_buckets", "max_distance"):
                if t.get(name) is not None:
                    setattr(request.t5, name, t[name])
            set_table(request.t5, t.get("table"), "t5.")
            request.t5.SetInParent()

    # -- biases -------------------------------------------------------------------------------
    def alibi_slopes(self, num_heads: int, *, max_bias: Optional[float] = None,
                     dtype: DTypeLike = None, output_shared_memory: Placements = None,
                     timeout: Optional[float] = None) -> Array:
        """ALiBi head slopes ``[num_heads]`` (AlibiSlopes); max_bias default 8;
        ``output_shared_memory={"slopes": ref}`` writes them into shared memory."""
        request = pb.AlibiSlopesRequest(num_heads=int(num_heads))
        tensors = _Tensors(request, output_shared_memory)
        if max_bias is not None:
            request.max_bias = float(max_bias)
        _set_output_dtype(request, dtype)
        return tensors.result(self._send("AlibiSlopes", request, timeout).slopes, "slopes")

    def _compact_by_default(self, request: Any) -> None:
        """COMPACT for an unspecified form (compact_biases, more than one query), unless the
        request uses shared memory (the full bias is placed where the caller said)."""
        if request.form == BiasForm.UNSPECIFIED and self._compact_biases and request.q_len > 1 \
                and not uses_shared_memory(request):
            request.form = BiasForm.COMPACT

    def alibi_bias(self, num_heads: int, q_len: int, k_len: int, *,
                   query_offset: Optional[int] = None, mode: Any = None, future: Any = None,
                   max_bias: Optional[float] = None, form: Any = None,
                   attention_mask: Any = None, dtype: DTypeLike = None, expand: bool = True,
                   output_shared_memory: Placements = None,
                   timeout: Optional[float] = None) -> AlibiBiasResult:
        """The ALiBi bias (AlibiBias): query i at ``query_offset + i``, key j at j.

        Args:
          query_offset: default ``k_len - q_len`` (decode); may be negative.
          mode: ``"causal"`` (default), ``"symmetric"`` or ``"bloom"``.
          future: ``"mask"`` (-inf, default), ``"zero"`` or ``"linear"``.
          form: ``"full"`` or ``"compact"`` (the default with ``compact_biases``, else full):
            the server sends the Toeplitz generator ``[H, q_len + k_len - 1]`` (BLOOM: the rows
            ``[H, k_len]``), a fraction of the bytes, and with ``expand=True`` (the default)
            the client expands it locally to the same ``[H, q_len, k_len]`` as FULL;
            ``expand=False`` returns the compact array (see :func:`posenc.expand_toeplitz`,
            :func:`posenc.expand_bloom_rows`).
          attention_mask: BLOOM only: int ``[B, k_len]``; the bias gains a batch axis.
          dtype: float32 (default), float16, bfloat16 or float64.
          output_shared_memory: ``{"bias": ref, "slopes": ref}`` (either or both) writes them
            into shared memory; the form then defaults to FULL.

        A FULL bias over the message limit is fetched in pieces of query rows.

        Returns ``AlibiBiasResult(bias, slopes)``.
        """
        request = pb.AlibiBiasRequest(num_heads=int(num_heads), q_len=int(q_len),
                                      k_len=int(k_len))
        tensors = _Tensors(request, output_shared_memory)
        if query_offset is not None:
            request.query_offset = int(query_offset)
        set_enum(request, "mode", AlibiMode, mode)
        set_enum(request, "future", FutureMode, future)
        if max_bias is not None:
            request.max_bias = float(max_bias)
        set_enum(request, "form", BiasForm, form)
        if attention_mask is not None:
            set_int_tensor(request.attention_mask, attention_mask, "attention_mask")
        self._compact_by_default(request)
        _set_output_dtype(request, dtype)
        response = self._send("AlibiBias", request, timeout, _split.plan_alibi_bias)
        expansion: Optional[Callable[[np.ndarray], np.ndarray]] = None
        if request.form == BiasForm.COMPACT and expand:
            offset = request.query_offset if request.HasField("query_offset") else None
            expansion = functools.partial(expand_compact_alibi, mode=request.mode,
                                          q_len=request.q_len, k_len=request.k_len,
                                          query_offset=offset, future=request.future)
        return AlibiBiasResult(tensors.result(response.bias, "bias", expansion),
                               tensors.result(response.slopes, "slopes"))

    def relative_bias(self, q_len: int, k_len: int, table: Any = None, *,
                      query_offset: Optional[int] = None, key_offset: Optional[int] = None,
                      bidirectional: Optional[bool] = None, num_buckets: Optional[int] = None,
                      max_distance: Optional[int] = None, form: Any = None,
                      dtype: DTypeLike = None, expand: bool = True,
                      output_shared_memory: Placements = None,
                      timeout: Optional[float] = None) -> Array:
        """The T5 bucketed relative bias (RelativeBias): query i at ``query_offset + i``
        (default ``k_len - q_len``), key j at ``key_offset + j`` (default 0).

        Args:
          table: float ``[num_buckets, H]`` (inline) or the name of a server table; not needed
            for ``form="buckets"``.
          bidirectional: default True (encoder); False for T5 decoders.
          num_buckets: default 32. max_distance: default 128.
          form: ``"full"`` (``[H, q, k]``), ``"compact"`` (the default with
            ``compact_biases``: the Toeplitz generator ``[H, q + k - 1]``, expanded locally to
            ``[H, q, k]`` unless ``expand=False``) or ``"buckets"`` (int32 ``[q, k]``).
          dtype: float32 (default), float16, bfloat16 or float64 (ignored for buckets).
          output_shared_memory: ``{"bias": ref}`` writes it into shared memory (the form then
            defaults to FULL).

        A FULL (or BUCKETS) bias over the message limit is fetched in pieces of query rows.
        """
        request = pb.RelativeBiasRequest(q_len=int(q_len), k_len=int(k_len))
        tensors = _Tensors(request, output_shared_memory)
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
        set_table(request, tensors.note(table, "table_inline"))
        set_enum(request, "form", BiasForm, form)
        self._compact_by_default(request)
        if request.form != BiasForm.BUCKETS:
            _set_output_dtype(request, dtype)
        response = self._send("RelativeBias", request, timeout, _split.plan_relative_bias)
        expansion: Optional[Callable[[np.ndarray], np.ndarray]] = None
        if request.form == BiasForm.COMPACT and expand:
            expansion = functools.partial(expand_toeplitz, q_len=request.q_len,
                                          k_len=request.k_len)
        return tensors.result(response.bias, "bias", expansion)

    def relative_embedding(self, q_len: int, k_len: int, max_relative: int, table: Any, *,
                           query_offset: Optional[int] = None, key_offset: Optional[int] = None,
                           dtype: DTypeLike = None, output_shared_memory: Placements = None,
                           timeout: Optional[float] = None) -> Array:
        """Shaw et al. relative embeddings ``[q_len, k_len, D]`` (RelativeEmbedding): entry
        (i, j) is ``table[clip(kpos - qpos, -K, K) + K]`` with K = ``max_relative``.

        ``table`` is float ``[2K+1, D]`` or the name of a server table; query i sits at
        ``query_offset + i`` (default ``k_len - q_len``), key j at ``key_offset + j`` (default
        0). Over the message limit, it is fetched in pieces of query rows;
        ``output_shared_memory={"embeddings": ref}`` writes them into shared memory."""
        request = pb.RelativeEmbeddingRequest(q_len=int(q_len), k_len=int(k_len),
                                              max_relative=int(max_relative))
        tensors = _Tensors(request, output_shared_memory)
        set_table(request, tensors.note(table, "table_inline"))
        if query_offset is not None:
            request.query_offset = int(query_offset)
        if key_offset is not None:
            request.key_offset = int(key_offset)
        _set_output_dtype(request, dtype)
        response = self._send("RelativeEmbedding", request, timeout,
                              _split.plan_relative_embedding)
        return tensors.result(response.embeddings, "embeddings")

    # -- server -------------------------------------------------------------------------------
    def get_server_info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        """Version, build, backends, limits, CUDA devices and the tables the server loaded
        (GetServerInfo)."""
        return server_info(self._send("GetServerInfo", pb.GetServerInfoRequest(), timeout))

    #: The same as :meth:`get_server_info` (its earlier name).
    server_info = get_server_info

    # -- shared memory ------------------------------------------------------------------------
    def register_shared_memory(self, name: str, key: str, byte_size: int, *, offset: int = 0,
                               timeout: Optional[float] = None) -> None:
        """Registers ``[offset, offset + byte_size)`` of POSIX shared-memory object ``key``
        ("/name") under ``name`` (RegisterSharedMemory; :class:`posenc.SharedMemory` does it for
        you). FailedPreconditionError without ``--allow_shared_memory``, AlreadyExistsError for
        a taken name, NotFoundError for a missing object, InvalidArgumentError for a range
        outside it, ResourceExhaustedError over the server's bounds."""
        request = pb.RegisterSharedMemoryRequest(name=name, key=key, offset=int(offset),
                                                 byte_size=int(byte_size))
        self._send("RegisterSharedMemory", request, timeout)

    def register_cuda_shared_memory(self, name: str, raw_handle: bytes, byte_size: int, *,
                                    device_id: int = 0, timeout: Optional[float] = None) -> None:
        """Registers ``[0, byte_size)`` of device memory another process allocated on CUDA
        device ``device_id`` and exported, ``raw_handle`` being its 64-byte
        ``cudaIpcMemHandle_t`` (``cudaIpcGetMemHandle``; e.g. cupy's
        ``cupy.cuda.runtime.ipcGetMemHandle(ptr)``), under ``name`` (RegisterCudaSharedMemory).
        References (:class:`SharedMemoryRef`) then name it as they name a system region, for the
        tensors the device computes on: q and k rotated in place, x, and the outputs the
        backend writes. The server must run ``--backend=cuda`` on that device with
        ``--allow_shared_memory`` (FailedPreconditionError otherwise); InvalidArgumentError
        naming raw_handle for a handle CUDA refuses. The exporting process keeps the allocation
        alive until the region is unregistered."""
        request = pb.RegisterCudaSharedMemoryRequest(name=name, raw_handle=bytes(raw_handle),
                                                     device_id=int(device_id),
                                                     byte_size=int(byte_size))
        self._send("RegisterCudaSharedMemory", request, timeout)

    def unregister_shared_memory(self, name: str = "", *, timeout: Optional[float] = None
                                 ) -> None:
        """Unregisters region ``name`` ("" = every region of the server); calls using it
        finish first. NotFoundError for an unknown name."""
        self._send("UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name), timeout)

    def shared_memory_status(self, name: str = "", *, timeout: Optional[float] = None
                             ) -> List[SharedMemoryRegionStatus]:
        """The registered regions ("" = all, sorted by name); NotFoundError for an unknown
        name."""
        response = self._send("SharedMemoryStatus", pb.SharedMemoryStatusRequest(name=name),
                              timeout)
        return [from_message(r, SharedMemoryRegionStatus) for r in response.regions]

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> HealthStatus:
        """``grpc.health.v1.Health/Check`` of ``service`` ("" = the server as a whole).

        Returns the serving status, whatever it is (a number this build does not know reads
        as UNKNOWN); the call itself failing raises (e.g. :class:`posenc.UnavailableError`,
        :class:`posenc.NotFoundError` for an unknown service)."""
        status = enum_or_int(HealthStatus, self._transport.health(service, self._deadline(timeout)))
        return status if isinstance(status, HealthStatus) else HealthStatus.UNKNOWN
