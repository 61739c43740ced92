"""The posenc client's value types: positions, RoPE configurations, results, and enum arguments.

They mirror the C++ client (client/include/posenc/client.h) and the wire messages
(proto/posenc/v1/posenc.proto, the reference for every field): an ``Optional`` field left at
None is a proto3 ``optional`` field left unset (the documented default), and an enum argument
left at None (or ``UNSPECIFIED``) selects the documented default, as on the wire. Enum
arguments also take their names as strings, case-insensitively (``"gptj"``, ``"yarn"``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from typing import (Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
                    Type, TypeVar, Union)

import numpy as np

from ._enums import (DType, FreqScheme, MropeLayout, MultimodalFamily, RopeScalingType,
                     RopeStyle, SharedMemoryKind, SinusoidalLayout, VisionTower)
from ._errors import local_error
from ._naming import enum_prefix
from ._protos import posenc_pb2

__all__ = [
    "Positions", "SinusoidalParams", "LearnedTable", "RopeScaling", "RopeConfig", "RopeDerived",
    "RopeCacheResult", "ApplyRopeResult", "AlibiBiasResult", "BackendInfo", "TableInfo",
    "ServerInfo", "DeviceInfo", "TlsConfig", "RopeValueSource", "AttentionTemperatureTuning",
    "RopeLayerGroup", "RopeSubmodule", "DescribeRopeResult", "SharedMemoryRef",
    "SharedMemoryRegionStatus",
    "AnalysisSummary", "UniquenessAnalysis", "BoundsAnalysis", "RotationFit", "BiasStructure",
    "RelativeAnalysis", "AnalysisCurve", "DecayAnalysis", "ExtrapolationSeries",
    "ExtrapolationAnalysis", "SimilarityAnalysis", "AnalyzeEncodingResult",
]

# Extra spellings of enum arguments (Hugging Face's legacy rope type "su" is LongRoPE).
_ALIASES: Dict[type, Dict[str, enum.IntEnum]] = {
    RopeScalingType: {"SU": RopeScalingType.LONGROPE}}


def parse_enum(cls: Type[enum.IntEnum], value: Any, field: str) -> int:
    """The wire number of an enum argument: None -> 0 (the default), a member, its name as a
    string (case-insensitive, '-' for '_', also the wire's full name "ROPE_STYLE_GPTJ"), or its
    number."""
    if value is None:
        return 0
    if isinstance(value, cls):
        return int(value)
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        descriptor = posenc_pb2.DESCRIPTOR.enum_types_by_name.get(cls.__name__)
        prefix = enum_prefix(descriptor) if descriptor is not None else ""
        if prefix and key.startswith(prefix):
            key = key[len(prefix):]
        alias = _ALIASES.get(cls, {}).get(key)
        if alias is not None:
            return int(alias)
        if key in cls.__members__:
            return int(cls[key])
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) and isinstance(
            enum_or_int(cls, int(value)), cls):
        return int(value)
    names = ", ".join(n.lower() for n in cls.__members__ if n != "UNSPECIFIED")
    raise local_error(field, f"expected one of {names}, got {value!r}")


E = TypeVar("E", bound=enum.IntEnum)


def enum_or_int(cls: Type[E], number: int) -> Union[E, int]:
    """The member of a wire number, or the number itself when this build does not know it
    (proto3 enums are open: a newer server may send a value added since)."""
    try:
        return cls(number)
    except ValueError:
        return number


# ---------------------------------------------------------------------------------------------
# Shared memory.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SharedMemoryRef:
    """A byte range of a registered shared-memory region (``posenc.v1.SharedMemoryRef``):
    ``region`` (the name it was registered under), ``offset`` from its start, ``byte_size``.

    Pass one instead of an array for any tensor argument (its bytes are read there; ApplyRope
    rotates q and k in place there), or as a value of ``output_shared_memory={name: ref}`` to
    have an output written there. An input needs ``dtype`` and ``shape`` (the server checks
    ``byte_size`` against them); :meth:`posenc.SharedMemory.ref` fills them from a view, and
    ``memory`` (the :class:`posenc.SharedMemory` it belongs to) lets a result in the range come
    back as a view of it (a torch tensor when ``torch`` is set) instead of as a reference.
    """

    region: str
    offset: int
    byte_size: int
    dtype: Union[None, DType, int] = None
    shape: Optional[Tuple[int, ...]] = None
    memory: Any = dataclasses.field(default=None, repr=False, compare=False)
    torch: bool = dataclasses.field(default=False, compare=False)


@dataclasses.dataclass
class SharedMemoryRegionStatus:
    """A registered region (``posenc.v1.SharedMemoryRegionStatus``)."""

    name: str = ""
    key: str = ""  # the POSIX shared-memory object ("/name"); "" for a CUDA region
    offset: int = 0
    byte_size: int = 0
    broken: bool = False  # truncated by its owner while in use: unregister it
    kind: Union[SharedMemoryKind, int] = SharedMemoryKind.SYSTEM  # SYSTEM or CUDA
    device_id: int = -1  # a CUDA region's device


# ---------------------------------------------------------------------------------------------
# Positions.
# ---------------------------------------------------------------------------------------------
def _host_ints(value: Any) -> np.ndarray:
    """A numpy array of an id or mask argument: torch tensors and ``__dlpack__`` arrays seen
    through posenc._tensor.host_array (no element-wise conversion), anything else
    ``numpy.asarray``."""
    from ._tensor import host_array  # _tensor imports this module

    host = host_array(value)
    return np.asarray(value) if host is None else host


@dataclasses.dataclass(frozen=True, eq=False)
class Positions:
    """Where each token sits (``posenc.v1.Positions``). Build one with the factories.

    Methods that take ``positions`` also accept shorthands: None (the default: 0 .. seq_len-1
    in ops with a sequence axis), a Python ``range`` with step 1 (a range), or an integer
    array / list (explicit ids).
    """

    kind: str = "default"  # default, range, offsets, ids, cu_seqlens, attention_mask
    start: int = 0  # range
    count: int = 0  # range
    seq_offsets: Tuple[int, ...] = ()  # offsets; cu_seqlens (per-sequence start, may be empty)
    seq_bounds: Tuple[int, ...] = ()  # cu_seqlens
    array: Any = None  # ids or attention mask (numpy integer array, or a SharedMemoryRef)

    @staticmethod
    def default() -> "Positions":
        """Absent on the wire: ops with a sequence axis use 0 .. seq_len-1 in every sequence."""
        return Positions()

    @staticmethod
    def range(start: int, count: int = 0) -> "Positions":
        """start, start+1, ..., start+count-1. In [batch, seq] ops count must be the sequence
        length or 0 (= the sequence length)."""
        return Positions("range", start=int(start), count=int(count))

    @staticmethod
    def offsets(offsets: Sequence[int]) -> "Positions":
        """Token t of sequence b sits at ``offsets[b] + t``."""
        return Positions("offsets", seq_offsets=tuple(int(o) for o in offsets))

    @staticmethod
    def ids(ids: Any) -> "Positions":
        """Explicit int32/int64 ids: ``[S]``, ``[B, S]``, ``[T]`` (THD), any shape for tables
        (the output gets ``ids.shape + [dim]``), ``[3, ...]`` for M-RoPE."""
        return Positions("ids", array=ids if isinstance(ids, SharedMemoryRef) else (
            _host_ints(ids)))

    @staticmethod
    def cu_seqlens(cu_seqlens: Sequence[int], offsets: Sequence[int] = ()) -> "Positions":
        """Packed sequences: sequence i holds tokens ``cu_seqlens[i] .. cu_seqlens[i+1]-1``;
        its positions restart at ``offsets[i]`` (0 when ``offsets`` is empty)."""
        return Positions("cu_seqlens", seq_bounds=tuple(int(c) for c in cu_seqlens),
                         seq_offsets=tuple(int(o) for o in offsets))

    @staticmethod
    def attention_mask(mask: Any) -> "Positions":
        """``[B, S]`` mask, 1 = real token, 0 = padding (a 1-D mask is one row); a real token's
        position is the number of real tokens before it in its row."""
        if isinstance(mask, SharedMemoryRef):
            return Positions("attention_mask", array=mask)
        m = _host_ints(mask)
        if m.ndim == 1:
            m = m[None, :]
        return Positions("attention_mask", array=m)

    @staticmethod
    def coerce(value: Any) -> "Positions":
        """A Positions from an argument: a Positions, None, a step-1 ``range``, or ids."""
        if value is None:
            return Positions()
        if isinstance(value, Positions):
            return value
        if isinstance(value, range):
            if value.step != 1:
                raise local_error("positions", f"a range must have step 1, got {value!r}")
            return Positions.range(value.start, max(0, len(value)))
        if isinstance(value, (int, float, str, bytes)):
            raise local_error("positions", f"expected Positions, a range or an id array, got "
                              f"{value!r}")
        return Positions.ids(value)


# ---------------------------------------------------------------------------------------------
# Absolute encodings.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SinusoidalParams:
    """A sinusoidal table: width ``dim`` (0 in AddPositionEncoding ADD: the width of x), base
    (default 10000), layout and frequency scheme."""

    dim: int = 0
    base: Optional[float] = None
    layout: Union[None, str, SinusoidalLayout] = None
    freq_scheme: Union[None, str, FreqScheme] = None


@dataclasses.dataclass
class LearnedTable:
    """A learned table ``E[max_pos, D]``: inline (a float array) or by name (a table the server
    loaded at start-up); position p reads row ``p + table_offset``."""

    table: Any = None  # numpy array (inline) or str (table name)
    table_offset: int = 0


# ---------------------------------------------------------------------------------------------
# RoPE.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class RopeScaling:
    """Scaling parameters (``posenc.v1.RopeScaling``); each type reads only its own fields and a
    field set for another type is INVALID_ARGUMENT (posenc.proto gives every formula)."""

    type: Union[None, str, RopeScalingType] = None
    factor: Optional[float] = None
    original_max_position_embeddings: Optional[int] = None
    beta_fast: Optional[float] = None
    beta_slow: Optional[float] = None
    truncate: Optional[bool] = None
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    attention_factor: Optional[float] = None
    low_freq_factor: Optional[float] = None
    high_freq_factor: Optional[float] = None
    partial_rotary_factor: Optional[float] = None  # PROPORTIONAL
    alpha: Optional[float] = None  # DYNAMIC (Hunyuan): fixed base b * alpha^(d/(d-2))
    long_factor: Sequence[float] = ()
    short_factor: Sequence[float] = ()

    @classmethod
    def from_dict(cls, scaling: Mapping[str, Any]) -> "RopeScaling":
        """A RopeScaling from a Hugging Face style ``rope_scaling`` dict: ``rope_type`` (or
        ``type``) and this class's field names; any other key is INVALID_ARGUMENT."""
        values = dict(scaling)
        kind = values.pop("rope_type", None)
        kind = values.pop("type", kind)
        names = {f.name for f in dataclasses.fields(cls)} - {"type"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise local_error("config.scaling", f"{unknown[0]!r} is not a RopeScaling field "
                              "(a config.json goes whole into RopeConfig.from_hf)")
        return cls(type=kind, **values)


def config_json_text(config: Union[str, bytes, os.PathLike, Mapping[str, Any]],
                     field: str = "config") -> str:
    """The text of a Hugging Face ``config.json`` given as a dict, JSON text or a path."""
    if isinstance(config, Mapping):
        return json.dumps(config)
    if isinstance(config, bytes):
        return config.decode("utf-8")
    if isinstance(config, os.PathLike) or (
            isinstance(config, str) and not config.lstrip().startswith("{")):
        try:
            with open(config, "r", encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise local_error(field, f"not JSON text (no '{{') and not a readable "
                              f"file: {e}") from None
    if isinstance(config, str):
        return config
    raise local_error(field, f"expected a dict, JSON text or a path, got "
                      f"{type(config).__name__}")


@dataclasses.dataclass
class RopeConfig:
    """A rotary configuration (``posenc.v1.RopeConfig``): the explicit fields, or the text of a
    Hugging Face ``config.json`` in ``hf_config_json`` (then head_dim, rotary_dim, base,
    scaling, max_position_embeddings and mrope_section stay unset; see :meth:`from_hf`).

    ``head_dim`` 0 means the last dimension of q in ApplyRope; RopeCache needs it (or the
    config.json). Methods taking a config also accept a ``dict`` (a parsed config.json), a
    JSON string, or a path to a config.json file.
    """

    head_dim: int = 0
    rotary_dim: Optional[int] = None
    base: Optional[float] = None
    style: Union[None, str, RopeStyle] = None
    scaling: Union[None, RopeScaling, Mapping[str, Any]] = None  # a dict: RopeScaling.from_dict
    max_position_embeddings: Optional[int] = None
    mrope_section: Sequence[int] = ()
    mrope_layout: Union[None, str, MropeLayout] = None
    inverse: bool = False
    apply_attention_factor: Optional[bool] = None
    seq_len: Optional[int] = None
    # d/2 divisors of omega_j after the scaling (GGUF's rope_freqs); also with hf_config_json.
    freq_factors: Sequence[float] = ()
    frequency_axes: Sequence[int] = ()
    hf_config_json: str = ""
    layer_type: str = ""
    # hf_config_json: "indexer" (DeepSeek-V3.2 / GLM-5's DSA indexer) selects that part of the
    # layer layer_type picks; "" the attention itself.
    submodule: str = ""

    @classmethod
    def from_hf(cls, config: Union[str, bytes, os.PathLike, Mapping[str, Any]], **fields: Any
                ) -> "RopeConfig":
        """A config from a Hugging Face ``config.json``: a dict, its JSON text, or a path.

        The server reads the rope keys (rope_theta, rope_scaling / rope_parameters,
        partial_rotary_factor, head_dim, ...; README "Hugging Face config.json") and reports
        what it used in ``derived``. ``fields`` set the other fields (style, inverse,
        seq_len, layer_type, submodule, apply_attention_factor, mrope_layout)."""
        return cls(hf_config_json=config_json_text(config), **fields)

    @classmethod
    def coerce(cls, value: Any) -> "RopeConfig":
        """A RopeConfig from an argument: a RopeConfig, None (all defaults), or a config.json
        (dict, JSON text, path)."""
        if value is None:
            return cls()
        if isinstance(value, RopeConfig):
            return value
        return cls.from_hf(value)


@dataclasses.dataclass
class RopeDerived:
    """The values the server derived from a RopeConfig (``posenc.v1.RopeDerived``)."""

    head_dim: int = 0
    rotary_dim: int = 0
    style: Union[RopeStyle, int] = RopeStyle.UNSPECIFIED
    scaling_type: Union[RopeScalingType, int] = RopeScalingType.UNSPECIFIED
    effective_base: float = 0.0
    attention_factor: float = 1.0
    attention_factor_applied: bool = True
    inv_freq: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    seq_len: int = 0
    yarn_low: float = 0.0
    yarn_high: float = 0.0
    longrope_long_factors: bool = False
    factor: float = 1.0
    warnings: Sequence[str] = ()  # hf_config_json: keys transformers would only warn about
    nope: bool = False  # the layer has no rotary embedding (ApplyRope passes q/k through)
    layer_type: str = ""  # hf_config_json: the layer type used
    model_type: str = ""  # hf_config_json: the model_type whose defaults applied
    submodule: str = ""  # hf_config_json: the sub-module used ("": the attention itself)


#: A result tensor: a numpy array; a torch tensor when the call's tensor inputs were torch
#: tensors; in shared memory, a view of the region (or the SharedMemoryRef, see there). Typed as
#: the numpy array or anything, so that numpy users keep their array type.
Array = Union[np.ndarray, Any]


@dataclasses.dataclass(frozen=True)
class RopeCacheResult:
    """``cos``, ``sin``: positions' shape + ``[d/2]`` (COMPACT) or + ``[d]``; ``derived``.
    The one-table layouts come in their own field, as in the C++ client, and ``cos`` and ``sin``
    are then None: ``cos_sin`` (FUSED_COS_SIN, positions' shape + ``[d]`` = cat(cos, sin), the
    cos_sin_cache of vLLM / FlashInfer / SGLang) and ``freqs_cis`` (COMPLEX, positions' shape +
    ``[d/2, 2]``: (cos, sin) pairs, the real view of freqs_cis in every output dtype;
    ``torch.view_as_complex(torch.from_numpy(r.freqs_cis))`` or, float32,
    ``r.freqs_cis.view(np.complex64)[..., 0]`` is the complex table).

    It unpacks (and indexes) as the tuple ``(cos, sin, derived)``: ``cos, sin, derived =
    client.rope_cache(...)``."""
    cos: Optional[Array]  # None for FUSED_COS_SIN and COMPLEX
    sin: Optional[Array]  # None for FUSED_COS_SIN and COMPLEX
    derived: RopeDerived
    cos_sin: Optional[Array] = None  # FUSED_COS_SIN only
    freqs_cis: Optional[Array] = None  # COMPLEX only

    def _triple(self) -> Tuple[Optional[Array], Optional[Array], RopeDerived]:
        return (self.cos, self.sin, self.derived)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._triple())

    def __getitem__(self, index: Any) -> Any:
        return self._triple()[index]

    def __len__(self) -> int:
        return 3


class ApplyRopeResult(NamedTuple):
    """The rotated ``q`` and ``k`` (None when no k was sent) in the input dtype; ``derived``."""
    q: Array
    k: Optional[Array]
    derived: RopeDerived


class RerotateKeysResult(NamedTuple):
    """The keys moved to positions + delta, in the input dtype; ``derived``."""
    k: Array
    derived: RopeDerived


@dataclasses.dataclass
class MultimodalTokenIds:
    """The special token ids a multimodal rule reads (``posenc.v1.MultimodalTokenIds``); None:
    the config.json's, else the family's published ones."""

    image_token_id: Optional[int] = None
    video_token_id: Optional[int] = None
    vision_start_token_id: Optional[int] = None
    video_start_token_id: Optional[int] = None  # GLM-4V
    video_end_token_id: Optional[int] = None  # GLM-4V


@dataclasses.dataclass
class VisionSpan:
    """An image's or a video's grid in patches before merging (``posenc.v1.VisionSpan``), and
    a Qwen2.5-VL video's seconds per temporal patch."""

    t: int = 0
    h: int = 0
    w: int = 0
    second_per_grid: Optional[float] = None


class MultimodalPositionsResult(NamedTuple):
    """``position_ids`` int64 ``[3, B, S]`` (decode: ``[3, B, K]``), ``mrope_position_deltas``
    ``[B, 1]`` (None for decode steps), the ``family`` whose rule applied and its ``source``."""
    position_ids: np.ndarray
    mrope_position_deltas: Optional[np.ndarray]
    family: Union[MultimodalFamily, int]
    source: str


class VisionPositionsResult(NamedTuple):
    """``position_ids`` int64 ``[2, L]``; Pixtral's ``flat_ids`` ``[L]``; Qwen2.5-VL's
    ``window_index`` and ``cu_window_seqlens`` (None where the tower has none); ``tower``."""
    position_ids: np.ndarray
    flat_ids: Optional[np.ndarray]
    window_index: Optional[np.ndarray]
    cu_window_seqlens: Optional[np.ndarray]
    tower: Union[VisionTower, int]


class AlibiBiasResult(NamedTuple):
    """``bias`` (``[H, q, k]``, ``[B, H, q, k]``, or a compact form when not expanded) and the
    head ``slopes`` (float64 ``[H]``)."""
    bias: Array
    slopes: Array


@dataclasses.dataclass
class RopeValueSource:
    """A value read from a config.json and where it came from (``posenc.v1.RopeValueSource``)."""

    name: str = ""  # "head_dim", "base", "rotary_dim", "pairing", "scaling.factor", ...
    key: str = ""  # the key path read ("text_config.rope_theta"), or the derivation
    origin: str = ""  # "file", "nested config (text_config)", "architecture default (...)"
    value: str = ""  # the value used, as text


@dataclasses.dataclass
class AttentionTemperatureTuning:
    """A per-position q scale besides the rotation: q at position p times
    ``log(floor((p + position_offset) / floor_scale) + 1) * attn_scale + 1``; the caller
    applies it. ``key`` "attn_temperature_tuning": Llama 4's NoPE layers, offset 1;
    "llama_4_scaling_beta": Ministral 3 / Mistral 4, every layer after the rotation, offset 0."""

    floor_scale: float = 0.0
    attn_scale: float = 0.0
    position_offset: float = 0.0
    key: str = ""

    def scale(self, position: Any) -> np.ndarray:
        """The multiplier of q at absolute position(s) ``position`` (an int or integer array)."""
        p = np.asarray(position, dtype=np.float64)
        steps = np.floor((p + self.position_offset) / self.floor_scale)
        return np.log(steps + 1) * self.attn_scale + 1


@dataclasses.dataclass
class RopeLayerGroup:
    """DescribeRope: the layers that share one RoPE (``posenc.v1.RopeLayerGroup``)."""

    layers: Sequence[int] = ()  # layer indices; empty when the file does not give them
    layer_type: str = ""  # "" when the model does not name its layer types
    derived: RopeDerived = dataclasses.field(default_factory=RopeDerived)
    base: float = 0.0  # b as read (rope_theta or the architecture's default)
    max_position_embeddings: int = 0  # 0: not given
    original_max_position_embeddings: int = 0  # the context the scaling extends; 0: unknown
    longrope_switch_seq_len: int = 0  # LongRoPE: long_factor when seq_len > this; else 0
    # The multiplier of the softmax scale the model applies besides the rotation (DeepSeek
    # YaRN: mscale(factor, mscale_all_dim)^2); None where posenc knows of none.
    softmax_scale_multiplier: Optional[float] = None
    mrope_section: Sequence[int] = ()
    warnings: Sequence[str] = ()
    attn_temperature_tuning: Optional[AttentionTemperatureTuning] = None  # where the model
    # scales q by position besides the rotation (Llama 4's NoPE layers, Ministral 3 / Mistral 4)
    sources: Sequence[RopeValueSource] = ()  # hf config: every value used and where it came from


@dataclasses.dataclass
class RopeSubmodule:
    """DescribeRope: a part of a layer with a RoPE of its own (``posenc.v1.RopeSubmodule``; the
    DSA indexer of DeepSeek-V3.2 / GLM-5): the layer's frequencies, its own head width, rotary
    width and pairing."""

    name: str = ""  # "indexer" (RopeConfig.submodule selects it)
    layers: Sequence[int] = ()  # the layers that run it
    derived: RopeDerived = dataclasses.field(default_factory=RopeDerived)
    rotary_offset: int = 0  # its first rotary channel in its head
    warnings: Sequence[str] = ()
    sources: Sequence[RopeValueSource] = ()


@dataclasses.dataclass
class DescribeRopeResult:
    """DescribeRope: every distinct RoPE of a model (``posenc.v1.DescribeRopeResponse``)."""

    model_type: str = ""
    groups: Sequence[RopeLayerGroup] = ()  # in order of first layer, a VL's vision tower last
    warnings: Sequence[str] = ()  # every group's, without duplicates
    num_layers: int = 0  # 0: the file does not give it
    submodules: Sequence[RopeSubmodule] = ()  # parts of the layers with a RoPE of their own


# ---------------------------------------------------------------------------------------------
# AnalyzeEncoding: the properties of an encoding (``posenc.v1.AnalyzeEncodingResponse``).
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class AnalysisSummary:
    min: float = 0.0
    max: float = 0.0
    mean: float = 0.0
    argmin: int = -1  # the position where it is reached
    argmax: int = -1


@dataclasses.dataclass
class UniquenessAnalysis:
    exact: bool = False  # all pairs compared
    method: str = ""
    min_distance: float = 0.0  # the smallest ||PE(p) - PE(q)||, p != q
    min_p: int = -1
    min_q: int = -1
    collision_searched: bool = False
    collision_dtype: Any = None
    collision_found: bool = False
    collision_p: int = -1  # the first position q whose rounded encoding equals p's
    collision_q: int = -1


@dataclasses.dataclass
class BoundsAnalysis:
    values: Optional[AnalysisSummary] = None
    norms: Optional[AnalysisSummary] = None


@dataclasses.dataclass
class RotationFit:
    distance: int = 0
    residual: float = 0.0  # of the best rotation of each frequency pair: ~1e-16 when exact
    worst_pair_residual: float = 0.0
    worst_pair: int = -1
    max_angle_error: float = 0.0


@dataclasses.dataclass
class BiasStructure:
    max_shift_deviation: float = 0.0
    max_shift_deviation_row_centered: float = 0.0
    depends_on_distance_only: bool = False
    window: int = 0
    bucket_edges: Sequence[int] = ()
    note: str = ""


@dataclasses.dataclass
class RelativeAnalysis:
    applicable: bool = False
    note: str = ""
    pairs: int = 0
    rotations: Sequence[RotationFit] = ()
    bias: Optional[BiasStructure] = None


@dataclasses.dataclass
class AnalysisCurve:
    label: str = ""
    x: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    y: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


@dataclasses.dataclass
class DecayAnalysis:
    method: str = ""
    curves: Sequence[AnalysisCurve] = ()
    decay_stops_at: int = -1
    samples: int = 0
    seed: int = 0
    note: str = ""


@dataclasses.dataclass
class ExtrapolationSeries:
    scaling: str = ""
    curves: Sequence[AnalysisCurve] = ()


@dataclasses.dataclass
class ExtrapolationAnalysis:
    original_context: int = 0
    series: Sequence[ExtrapolationSeries] = ()
    note: str = ""


@dataclasses.dataclass
class SimilarityAnalysis:
    window_start: int = 0
    window: int = 0
    rows: int = 0
    cols: int = 0
    cell: int = 1
    matrix: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))  # rows x cols
    add_norm_change: float = 0.0
    add_angle_degrees: float = 0.0
    concat_norm_change: float = 0.0
    concat_angle_degrees: float = 0.0
    random_embeddings: bool = True
    note: str = ""


@dataclasses.dataclass
class AnalyzeEncodingResult:
    """AnalyzeEncoding: one section per requested property (None when not requested)."""

    family: str = ""  # "sinusoidal", "learned", "rope", "alibi", "t5"
    width: int = 0  # values per position
    uniqueness: Optional[UniquenessAnalysis] = None
    bounds: Optional[BoundsAnalysis] = None
    relative: Optional[RelativeAnalysis] = None
    decay: Optional[DecayAnalysis] = None
    extrapolation: Optional[ExtrapolationAnalysis] = None
    similarity: Optional[SimilarityAnalysis] = None


# ---------------------------------------------------------------------------------------------
# Server information and connection settings.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class BackendInfo:
    name: str  # "reference", "cpu", "cuda"
    detail: str  # ISA in use, device names
    is_default: bool
    small_call_bytes: int = 0  # cuda: calls with fewer output bytes run on the cpu backend


@dataclasses.dataclass
class DeviceInfo:
    """A CUDA device the server sees."""

    index: int
    name: str
    total_memory_bytes: int
    compute_capability: str  # "9.0"
    driver_version: str
    runtime_version: str
    in_use: bool  # the cuda backend runs on it


@dataclasses.dataclass
class TableInfo:
    name: str
    dtype: Union[DType, int]
    shape: Tuple[int, ...]


@dataclasses.dataclass
class ServerInfo:
    """``GetServerInfo``: version, build, backends, limits and the tables loaded by name."""

    version: str
    build: str
    backends: List[BackendInfo]
    max_message_bytes: int
    max_output_elements: int
    tables: List[TableInfo]
    max_inflight_bytes: int = 0  # admission bounds; 0: unbounded
    max_heavy_calls: int = 0
    # shared memory: registrations accepted (--allow_shared_memory) and their bounds
    shared_memory_allowed: bool = False
    max_shared_memory_regions: int = 0
    max_shared_memory_bytes: int = 0
    cuda_built_in: bool = False
    devices: List[DeviceInfo] = dataclasses.field(default_factory=list)


def _pem(value: Union[None, str, bytes]) -> Optional[bytes]:
    if value is None:
        return None
    return value.encode("ascii") if isinstance(value, str) else bytes(value)


@dataclasses.dataclass
class TlsConfig:
    """TLS settings of a Client: PEM contents (str or bytes), not file names
    (:meth:`from_files` reads files).

    ``root_certs`` None trusts the system's roots; ``client_cert`` + ``client_key`` enable
    mutual TLS; ``server_name`` overrides the name the server's certificate is checked against
    (gRPC's ssl_target_name_override), for targets given by IP address."""

    root_certs: Union[None, str, bytes] = None
    client_cert: Union[None, str, bytes] = None
    client_key: Union[None, str, bytes] = None
    server_name: Optional[str] = None

    @classmethod
    def from_files(cls, root_certs: Optional[str] = None, client_cert: Optional[str] = None,
                   client_key: Optional[str] = None, server_name: Optional[str] = None
                   ) -> "TlsConfig":
        """Reads the PEM files that are given (paths)."""

        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return cls(read(root_certs), read(client_cert), read(client_key), server_name)

    def pem(self) -> Tuple[Optional[bytes], Optional[bytes], Optional[bytes]]:
        """(root_certs, client_key, client_cert) as bytes, for grpc.ssl_channel_credentials."""
        if (self.client_cert is None) != (self.client_key is None):
            raise local_error("tls", "give both client_cert and client_key (mutual TLS) or "
                              "neither")
        return _pem(self.root_certs), _pem(self.client_key), _pem(self.client_cert)
