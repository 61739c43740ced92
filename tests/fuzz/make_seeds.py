#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/.

    tests/fuzz/make_seeds.py [HF_CONFIG_DIR]

rpc_fuzz: one byte naming the RPC (the order of the service in posenc.proto, 16 RPCs) followed by a
request encoded by `protoc --encode` from the text below. inference_fuzz: ModelInferRequests of
proto/inference/grpc_service.proto, encoded the same way. shm_fuzz: records of shared-memory
registrations and requests referencing regions (SHM_SEEDS). hf_config_fuzz: the config objects
of HF_CONFIG_DIR/*.json (the shared copies of published config.json files: {"config": {...}}),
plus a few hand-written ones; "\\0LAYER" after the JSON selects a layer type. table_fuzz: small
.npy and .safetensors files. cli_flags_fuzz: NUL-separated command lines. The output is
deterministic; the corpus is committed, so the script only needs rerunning to change it.
"""
import json
import pathlib
import struct
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"


def tensor_text(dtype, shape, raw):
    data = "".join("\\%03o" % b for b in raw)
    dims = " ".join("shape: %d" % d for d in shape)
    return 'dtype: %s %s data: "%s"' % (dtype, dims, data)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def i32(values):
    return struct.pack("<%di" % len(values), *values)


def i64(values):
    return struct.pack("<%dq" % len(values), *values)


RPCS = ["Sinusoidal", "AddPositionEncoding", "RopeCache", "ApplyRope", "AlibiSlopes",
        "AlibiBias", "RelativeBias", "RelativeEmbedding", "GetServerInfo", "DescribeRope",
        "RegisterSharedMemory", "UnregisterSharedMemory", "SharedMemoryStatus", "RerotateKeys",
        "MultimodalPositions", "VisionPositions"]
QWEN2_VL = json.dumps({"model_type": "qwen2_vl", "vision_start_token_id": 151652,
                       "image_token_id": 151655, "video_token_id": 151656,
                       "vision_config": {"spatial_merge_size": 2},
                       "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                       "head_dim": 16})
LLAMA3 = json.dumps({"rope_theta": 500000, "head_dim": 16, "max_position_embeddings": 1024,
                     "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                      "high_freq_factor": 4,
                                      "original_max_position_embeddings": 64}})

RPC_SEEDS = {
    "sinusoidal_range": ("Sinusoidal",
                         "positions { range { start: 0 count: 8 } } params { dim: 16 }"),
    "sinusoidal_ids_concat_f16": (
        "Sinusoidal",
        "positions { ids { %s } } params { dim: 7 layout: SINUSOIDAL_LAYOUT_CONCAT } "
        "output_dtype: DTYPE_FLOAT16" % tensor_text("DTYPE_INT32", [4], i32([0, 1, 5, 9]))),
    "sinusoidal_mask": (
        "Sinusoidal",
        "positions { attention_mask { %s } } "
        "params { dim: 8 base: 100 freq_scheme: FREQ_SCHEME_T2T }"
        % tensor_text("DTYPE_INT64", [2, 3], i64([0, 1, 1, 1, 1, 1]))),
    "add_sinusoidal": (
        "AddPositionEncoding",
        "x { %s } sinusoidal { dim: 0 } scale: 2 padding_idx: 1"
        % tensor_text("DTYPE_FLOAT32", [1, 4, 4], f32([0.5 * i for i in range(16)]))),
    "add_learned_concat": (
        "AddPositionEncoding",
        'x { %s } learned { table_name: "wpe" table_offset: 2 } combine: COMBINE_CONCAT '
        "positions { offsets { offsets: 1 offsets: 3 } }"
        % tensor_text("DTYPE_FLOAT32", [2, 3, 2], f32(range(12)))),
    "rope_cache_yarn": (
        "RopeCache",
        "positions { range { start: 0 count: 8 } } config { head_dim: 16 scaling { type: "
        "ROPE_SCALING_YARN factor: 4 } max_position_embeddings: 64 } "
        "layout: ROPE_CACHE_LAYOUT_NEOX"),
    "rope_cache_hf_llama3": (
        "RopeCache",
        "positions { range { start: 3 count: 4 } } config { hf_config_json: %s } "
        "output_dtype: DTYPE_BFLOAT16" % json.dumps(LLAMA3)),
    "rope_cache_mrope": (
        "RopeCache",
        "positions { ids { %s } } config { head_dim: 16 mrope_section: 2 mrope_section: 3 "
        "mrope_section: 3 mrope_layout: MROPE_LAYOUT_INTERLEAVED }"
        % tensor_text("DTYPE_INT64", [3, 2], i64([0, 1, 0, 2, 0, 3]))),
    "rope_cache_longrope": (
        "RopeCache",
        "positions { range { count: 4 } } config { head_dim: 8 max_position_embeddings: 64 "
        "scaling { type: ROPE_SCALING_LONGROPE original_max_position_embeddings: 16 "
        "long_factor: 1 long_factor: 2 long_factor: 3 long_factor: 4 short_factor: 1 "
        "short_factor: 1 short_factor: 1 short_factor: 1 } seq_len: 32 }"),
    "apply_rope_bshd_gqa": (
        "ApplyRope",
        "q { %s } k { %s } config { head_dim: 8 style: ROPE_STYLE_GPTJ }"
        % (tensor_text("DTYPE_FLOAT32", [1, 2, 2, 8], f32([0.1 * i for i in range(32)])),
           tensor_text("DTYPE_FLOAT32", [1, 2, 1, 8], f32([0.2 * i for i in range(16)])))),
    "apply_rope_thd_bf16": (
        "ApplyRope",
        "q { %s } positions { cu_seqlens { cu_seqlens: 0 cu_seqlens: 1 cu_seqlens: 4 } } "
        "config { rotary_dim: 4 scaling { type: ROPE_SCALING_LINEAR factor: 2 } inverse: true } "
        "layout: TENSOR_LAYOUT_THD" % tensor_text("DTYPE_BFLOAT16", [4, 1, 8], bytes(64))),
    "apply_rope_bhsd_dynamic": (
        "ApplyRope",
        "q { %s } positions { attention_mask { %s } } layout: TENSOR_LAYOUT_BHSD config { "
        "scaling { type: ROPE_SCALING_DYNAMIC factor: 2 } max_position_embeddings: 2 }"
        % (tensor_text("DTYPE_FLOAT16", [1, 1, 3, 4], bytes(24)),
           tensor_text("DTYPE_INT32", [1, 3], i32([0, 1, 1])))),
    "alibi_slopes": ("AlibiSlopes", "num_heads: 12 max_bias: 8"),
    "alibi_bias_causal": ("AlibiBias", "num_heads: 4 q_len: 3 k_len: 5"),
    "alibi_bias_bloom_mask": (
        "AlibiBias",
        "num_heads: 2 q_len: 2 k_len: 3 mode: ALIBI_MODE_BLOOM attention_mask { %s }"
        % tensor_text("DTYPE_INT32", [2, 3], i32([0, 1, 1, 1, 1, 1]))),
    "alibi_bias_compact": (
        "AlibiBias",
        "num_heads: 3 q_len: 4 k_len: 4 mode: ALIBI_MODE_SYMMETRIC form: BIAS_FORM_COMPACT "
        "query_offset: -1 future: FUTURE_MODE_LINEAR output_dtype: DTYPE_FLOAT64"),
    "relative_bias_named": ("RelativeBias", 'q_len: 4 k_len: 4 table_name: "t5"'),
    "relative_bias_buckets": (
        "RelativeBias",
        "q_len: 3 k_len: 5 bidirectional: false num_buckets: 8 max_distance: 16 "
        "form: BIAS_FORM_BUCKETS"),
    "relative_bias_inline_compact": (
        "RelativeBias",
        "q_len: 2 k_len: 3 num_buckets: 4 max_distance: 8 table_inline { %s } "
        "form: BIAS_FORM_COMPACT key_offset: 2"
        % tensor_text("DTYPE_FLOAT32", [4, 2], f32(range(8)))),
    "relative_embedding_named": (
        "RelativeEmbedding",
        'q_len: 3 k_len: 3 max_relative: 4 table_name: "shaw"'),
    "relative_embedding_inline": (
        "RelativeEmbedding",
        "q_len: 2 k_len: 4 max_relative: 1 table_inline { %s } output_dtype: DTYPE_FLOAT16"
        % tensor_text("DTYPE_FLOAT32", [3, 2], f32(range(6)))),
    "server_info": ("GetServerInfo", ""),
    # #21: the one-table layouts, 2-D vision and explicit axis maps, RerotateKeys,
    # MultimodalPositions (token, span and decode forms) and VisionPositions.
    "rope_cache_complex_vision": (
        "RopeCache",
        "positions { ids { %s } } config { head_dim: 16 mrope_layout: MROPE_LAYOUT_VISION_2D } "
        "layout: ROPE_CACHE_LAYOUT_COMPLEX output_dtype: DTYPE_BFLOAT16"
        % tensor_text("DTYPE_INT64", [2, 3], i64([0, 0, 1, 0, 1, 0]))),
    "rope_cache_fused_axes": (
        "RopeCache",
        "positions { ids { %s } } config { head_dim: 8 frequency_axes: 0 frequency_axes: 1 "
        "frequency_axes: 2 frequency_axes: 3 } layout: ROPE_CACHE_LAYOUT_FUSED_COS_SIN"
        % tensor_text("DTYPE_INT32", [4, 2], i32([0, 1, 0, 2, 0, 3, 5, 4]))),
    "apply_rope_vision_mask": (
        "ApplyRope",
        "q { %s } positions { attention_mask { %s } } "
        "config { head_dim: 8 mrope_layout: MROPE_LAYOUT_VISION_2D_EVEN_ODD }"
        % (tensor_text("DTYPE_FLOAT32", [1, 3, 1, 8], f32([0.1 * i for i in range(24)])),
           tensor_text("DTYPE_INT64", [1, 3], i64([0, 1, 1])))),
    "describe_rope_vl": ("DescribeRope", "config { hf_config_json: %s }" % json.dumps(QWEN2_VL)),
    "rerotate_keys_mrope": (
        "RerotateKeys",
        "k { %s } positions { ids { %s } } delta { %s } "
        "config { head_dim: 8 mrope_section: 1 mrope_section: 1 mrope_section: 2 }"
        % (tensor_text("DTYPE_FLOAT32", [1, 2, 1, 8], f32([0.3 * i for i in range(16)])),
           tensor_text("DTYPE_INT64", [3, 2], i64([4, 5, 1, 2, 1, 3])),
           tensor_text("DTYPE_INT64", [3], i64([-4, 7, 1000000])))),
    "rerotate_keys_thd_gptj": (
        "RerotateKeys",
        "k { %s } positions { cu_seqlens { cu_seqlens: 0 cu_seqlens: 1 cu_seqlens: 3 } } "
        "delta { %s } config { rotary_dim: 4 style: ROPE_STYLE_GPTJ } layout: TENSOR_LAYOUT_THD"
        % (tensor_text("DTYPE_FLOAT16", [3, 1, 8], bytes(48)),
           tensor_text("DTYPE_INT32", [3], i32([1, 2, 2147483000])))),
    "mm_positions_tokens": (
        "MultimodalPositions",
        "hf_config_json: %s input_ids { %s } attention_mask { %s } image_grid_thw { %s }"
        % (json.dumps(QWEN2_VL),
           tensor_text("DTYPE_INT64", [1, 8], i64([0, 7, 151652] + [151655] * 4 + [9])),
           tensor_text("DTYPE_INT32", [1, 8], i32([0] + [1] * 7)),
           tensor_text("DTYPE_INT64", [1, 3], i64([1, 4, 4])))),
    "mm_positions_spans": (
        "MultimodalPositions",
        "family: MULTIMODAL_FAMILY_QWEN2_5_VL tokens_per_second: 2 sequences { spans { "
        "text_tokens: 3 } spans { video { t: 2 h: 4 w: 4 second_per_grid: 0.5 } } spans { "
        "image { t: 1 h: 2 w: 6 } } } sequences { spans { text_tokens: 2 } }"),
    "mm_positions_glm_decode": (
        "MultimodalPositions",
        "family: MULTIMODAL_FAMILY_GLM4V token_ids { video_start_token_id: 5 } "
        "decode { deltas { %s } prompt_length: 9 num_steps: 3 }"
        % tensor_text("DTYPE_INT64", [2, 1], i64([-3, 0]))),
    "mm_positions_ernie_video": (
        "MultimodalPositions",
        "hf_config_json: %s input_ids { %s } video_grid_thw { %s } temporal_merge_size: 2"
        % (json.dumps(json.dumps({"model_type": "ernie4_5_vl_moe", "vision_config": {
            "spatial_merge_size": 2, "temporal_merge_size": 2}})),
           tensor_text("DTYPE_INT64", [1, 8], i64([9, 101306] + [103367] * 4 + [101307, 9])),
           tensor_text("DTYPE_INT64", [1, 3], i64([2, 4, 4])))),
    "vision_positions_qwen_window": (
        "VisionPositions",
        "tower: VISION_TOWER_QWEN grid { %s } spatial_merge_size: 2 window_size: 56 "
        "patch_size: 14" % tensor_text("DTYPE_INT64", [2, 3], i64([1, 4, 8, 2, 4, 4]))),
    "vision_positions_pixtral": (
        "VisionPositions",
        "tower: VISION_TOWER_PIXTRAL grid { %s } patch_size: 16 image_size: 128"
        % tensor_text("DTYPE_INT32", [1, 2], i32([3, 5]))),
    "vision_positions_llama4": (
        "VisionPositions", "tower: VISION_TOWER_LLAMA4 patch_size: 14 image_size: 56"),
}

HF_EXTRA = {
    "llama3_small": LLAMA3,
    "interleave": '{"qk_rope_head_dim": 64, "rope_interleave": true}',
    "rotary_pct": '{"hidden_size": 2560, "num_attention_heads": 32, "rotary_pct": 0.25}',
    "layer_dict": json.dumps({"head_dim": 32, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8, "rope_theta": 1000000},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}}) + "\0full_attention",
    "yarn_dsv3": json.dumps({
        "qk_rope_head_dim": 64, "max_position_embeddings": 163840,
        "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096}}),
    "longrope_su": json.dumps({
        "head_dim": 8, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_scaling": {
            "type": "su", "long_factor": [1.0, 1.5, 2.0, 3.0],
            "short_factor": [1.0, 1.0, 1.0, 1.1]}}),
    "mrope": json.dumps({"hidden_size": 1536, "num_attention_heads": 12, "rope_scaling": {
        "type": "mrope", "mrope_section": [16, 24, 24]}}),
    # The DSA indexer sub-module (config.json \0 layer_type \0 submodule).
    "deepseek_v32_indexer": json.dumps({
        "model_type": "deepseek_v32", "num_hidden_layers": 4, "qk_rope_head_dim": 64,
        "index_head_dim": 128, "index_topk": 2048, "rope_theta": 10000, "rope_scaling": {
            "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}) +
        "\x002\x00indexer",
    "glm_moe_dsa_indexer": json.dumps({
        "model_type": "glm_moe_dsa", "num_hidden_layers": 8, "qk_rope_head_dim": 64,
        "index_head_dim": 128, "index_topk": 2048, "index_topk_freq": 4,
        "index_skip_topk_offset": 3, "indexer_rope_interleave": True, "rope_interleave": True,
        "indexer_types": ["full", "full", "full", "shared", "shared", "shared", "full", "shared"],
        "rope_parameters": {"rope_theta": 8000000, "rope_type": "default"},
    }) + "\x006\x00indexer",
    "glm_moe_dsa_pattern": json.dumps({
        "model_type": "glm_moe_dsa", "num_hidden_layers": 6, "index_topk_pattern": "FFSSFS",
        "indexer_rope_interleave": False}),
}


def npy(descr, shape, raw, version=1):
    shape_text = "(%s)" % ("".join("%d, " % d for d in shape)[:-1] if len(shape) > 1 else
                           ("%d," % shape[0] if shape else ""))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    length_bytes = 2 if version == 1 else 4
    pad = (64 - (6 + 2 + length_bytes + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + raw


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


TABLE_SEEDS = {
    "f4_2x3.npy": npy("<f4", [2, 3], f32(range(6))),
    "f8_big_endian_3x2.npy": npy(">f8", [3, 2], struct.pack(">6d", *range(6))),
    "f2_v2_1x4.npy": npy("<f2", [1, 4], bytes(8), version=2),
    "i8_vector.npy": npy("<i8", [3], i64([1, 2, 3])),
    "b1_scalar.npy": npy("|b1", [], b"\x01"),
    "two_tensors.safetensors": safetensors({
        "relative_attention_bias": ("F32", [4, 2], f32(range(8))),
        "wpe": ("BF16", [2, 2], bytes(8))}, {"format": "pt"}),
    "f16_one.safetensors": safetensors({"t": ("F16", [1, 1], bytes(2))}),
    "f64_empty.safetensors": safetensors({}),
}

CLI_SEEDS = [
    ["--server", "localhost:1", "sinusoidal", "--positions", "0:8", "--dim", "16"],
    ["--format=json", "rope-cache", "--head-dim", "64", "--scaling", "yarn", "--factor", "4",
     "--mrope-section", "8,12,12"],
    ["apply-rope", "--shape", "1,4,2,8", "--style=gptj", "--full", "--timeout", "5s",
     "--seed", "-3"],
    ["alibi-bias", "--heads", "8", "--q-len", "1", "--k-len", "37", "--max-bias=inf", "--help"],
    ["--tls", "rope-cache", "--head-dim=8", "--scaling=longrope", "--long-factor", "1.5,2e0,3",
     "--short-factor", " 1, 1,1,1"],
    ["relative-bias", "--q-len", "4", "--unidirectional", "--form", "buckets"],
    ["-h"],
]


def raw(content):
    return '"%s"' % "".join("\\%03o" % b for b in content)


def infer_input(name, datatype, shape, content=None, contents=None):
    """An InferInputTensor: raw bytes go to raw_input_contents (returned beside it)."""
    dims = " ".join("shape: %d" % d for d in shape)
    text = 'inputs { name: "%s" datatype: "%s" %s %s}' % (
        name, datatype, dims, "contents { %s } " % contents if contents else "")
    return text + (" raw_input_contents: %s" % raw(content) if content is not None else "")


def param(name, kind, value):
    return 'parameters { key: "%s" value { %s: %s } }' % (name, kind, value)


INFERENCE_SEEDS = {
    "apply_rope_raw": " ".join([
        'model_name: "apply_rope"',
        param("base", "double_param", "500000"), param("positions.range.start", "int64_param", 7),
        param("scaling.type", "string_param", '"yarn"'),
        param("scaling.factor", "string_param", '"4"'),
        param("max_position_embeddings", "int64_param", 64),
        infer_input("q", "FP32", [1, 3, 2, 8], f32([0.1 * i for i in range(48)])),
        infer_input("k", "FP32", [1, 3, 1, 8], f32([0.2 * i for i in range(24)])),
        'outputs { name: "k" }']),
    "apply_rope_thd_ids": " ".join([
        'model_name: "apply_rope"', param("layout", "string_param", '"thd"'),
        param("positions.cu_seqlens.cu_seqlens", "string_param", '"[0, 2, 3]"'),
        infer_input("q", "FP16", [3, 1, 4], bytes(24))]),
    "rope_cache_hf": " ".join([
        'model_name: "rope_cache" model_version: "1" id: "seed"',
        param("hf_config_json", "string_param", json.dumps(LLAMA3)),
        param("output_dtype", "string_param", '"BF16"'),
        infer_input("positions.ids", "INT64", [4], contents="int64_contents: [0, 1, 63, 64]")]),
    "sinusoidal_params": " ".join([
        'model_name: "sinusoidal"', param("dim", "int64_param", 9),
        param("positions.range.count", "int64_param", 5),
        param("layout", "int64_param", 2), param("freq_scheme", "string_param", '"T2T"')]),
    "add_position_encoding_mask": " ".join([
        'model_name: "add_position_encoding"', param("sinusoidal.dim", "int64_param", 0),
        infer_input("x", "FP64", [2, 2, 4], bytes(128)),
        infer_input("positions.attention_mask", "INT32", [2, 2],
                    contents="int_contents: [0, 1, 1, 1]")]),
    "alibi_bias_compact": " ".join([
        'model_name: "alibi_bias"', param("num_heads", "int64_param", 6),
        param("q_len", "int64_param", 3), param("k_len", "int64_param", 5),
        param("form", "string_param", '"compact"'), param("mode", "string_param", '"symmetric"')]),
    "relative_bias_table": " ".join([
        'model_name: "relative_bias"', param("q_len", "int64_param", 2),
        param("k_len", "int64_param", 3), param("bidirectional", "bool_param", "false"),
        infer_input("table_inline", "FP32", [32, 2], f32([0.01 * i for i in range(64)]))]),
    "relative_embedding_shm_refused": " ".join([
        'model_name: "relative_embedding"', param("q_len", "int64_param", 2),
        param("k_len", "int64_param", 2), param("max_relative", "int64_param", 1),
        infer_input("table_inline", "FP32", [3, 2], f32(range(6))),
        'outputs { name: "embeddings" parameters { key: "shared_memory_region" value { '
        'string_param: "r" } } parameters { key: "shared_memory_byte_size" value { '
        'int64_param: 32 } } }']),
    "alibi_slopes": " ".join([
        'model_name: "alibi_slopes"', param("num_heads", "int64_param", 12),
        param("max_bias", "double_param", 8)]),
}


# shm_fuzz: records [op][length: 2 bytes LE][body] (tests/fuzz/shm_fuzz.cc); regions "ra" (64 KiB
# of object "a") and "rb" (12 KiB of object "b") exist at the start of every input.
SHM_OPS = {"RegisterSharedMemory": 0, "UnregisterSharedMemory": 1, "SharedMemoryStatus": 2,
           "ApplyRope": 3, "RopeCache": 4, "AlibiBias": 5, "Sinusoidal": 6,
           "RegisterCudaSharedMemory": 128}


def shm_ref(region, offset, size):
    return 'shared_memory { region: "%s" offset: %d byte_size: %d }' % (region, offset, size)


def shm_out(name, region, offset, size):
    return ('output_shared_memory { key: "%s" value { region: "%s" offset: %d byte_size: %d } }'
            % (name, region, offset, size))


SHM_Q = 'dtype: DTYPE_FLOAT32 shape: 1 shape: 4 shape: 2 shape: 8 '
SHM_K = 'dtype: DTYPE_FLOAT32 shape: 1 shape: 4 shape: 1 shape: 8 '
SHM_SEEDS = {
    "apply_rope_in_place": [("ApplyRope", "q { %s %s } k { %s %s } config { head_dim: 8 } %s %s" % (
        SHM_Q, shm_ref("ra", 0, 256), SHM_K, shm_ref("ra", 256, 128),
        shm_out("q", "ra", 0, 256), shm_out("k", "ra", 256, 128)))],
    "apply_rope_out_of_range": [("ApplyRope", "q { %s %s } config { head_dim: 8 }" % (
        SHM_Q, shm_ref("rb", 12 * 1024 - 128, 256)))],
    "apply_rope_overlap": [("ApplyRope", "q { %s %s } k { %s %s } config { head_dim: 8 } %s" % (
        SHM_Q, shm_ref("ra", 0, 256), SHM_K, shm_ref("ra", 512, 128),
        shm_out("k", "ra", 128, 128)))],
    "register_use_unregister": [
        ("RegisterSharedMemory", 'name: "rc" key: "/k1" offset: 0 byte_size: 4096'),
        ("SharedMemoryStatus", 'name: "rc"'),
        ("ApplyRope", "q { %s %s } config { head_dim: 8 } %s" % (
            SHM_Q, shm_ref("rc", 1024, 256), shm_out("q", "rb", 0, 256))),
        ("UnregisterSharedMemory", 'name: "rc"'),
        ("SharedMemoryStatus", "")],
    "register_hostile": [
        ("RegisterSharedMemory", 'name: "big" key: "/k12" offset: 9223372036854775807 '
                                 'byte_size: 9223372036854775807'),
        ("RegisterSharedMemory", 'name: "ra" key: "/k1" offset: 0 byte_size: 1'),
        ("RegisterSharedMemory", 'name: "x" key: "no_slash" offset: 0 byte_size: 8'),
        ("RegisterSharedMemory", 'name: "y" key: "/k" offset: -1 byte_size: 8'),
        ("UnregisterSharedMemory", 'name: "nope"')],
    "register_cuda_refused": [
        ("RegisterCudaSharedMemory", 'name: "g" raw_handle: "%s" device_id: 0 byte_size: 4096'
         % ("\\001" * 64)),
        ("RegisterCudaSharedMemory", 'name: "h" raw_handle: "short" device_id: -1 byte_size: 0'),
        ("SharedMemoryStatus", 'kind: SHARED_MEMORY_KIND_CUDA'),
        ("SharedMemoryStatus", 'name: "ra" kind: SHARED_MEMORY_KIND_CUDA'),
        ("UnregisterSharedMemory", 'kind: SHARED_MEMORY_KIND_CUDA'),
        ("UnregisterSharedMemory", 'name: "rb" kind: SHARED_MEMORY_KIND_SYSTEM')],
    "truncate_under_call": [
        (7, bytes([20])),
        ("ApplyRope", "q { %s %s } config { head_dim: 8 } %s" % (
            SHM_Q, shm_ref("rb", 0, 256), shm_out("q", "rb", 0, 256)))],
    "rope_cache_to_shm": [("RopeCache", "positions { range { count: 4 } } config { head_dim: 8 } "
                                        "%s %s" % (shm_out("cos", "ra", 0, 64),
                                                   shm_out("sin", "ra", 64, 64)))],
    "alibi_bias_to_shm": [("AlibiBias", "num_heads: 2 q_len: 3 k_len: 5 %s"
                           % shm_out("bias", "rb", 0, 120))],
    "sinusoidal_ids_in_shm": [("Sinusoidal", "positions { ids { dtype: DTYPE_INT32 shape: 4 %s } }"
                               " params { dim: 8 }" % shm_ref("ra", 0, 16))],
}


def write(target, name, content):
    path = CORPUS / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def main():
    hf_dir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/hf_configs")
    proto_dir = ROOT / "proto"
    for name, (rpc, text) in RPC_SEEDS.items():
        encoded = subprocess.run(
            ["protoc", "--proto_path=%s" % proto_dir, "--encode=posenc.v1.%sRequest" % rpc,
             str(proto_dir / "posenc/v1/posenc.proto")],
            input=text.encode(), capture_output=True, check=True).stdout
        write("rpc_fuzz", name, bytes([RPCS.index(rpc)]) + encoded)
    for name, text in INFERENCE_SEEDS.items():
        encoded = subprocess.run(
            ["protoc", "--proto_path=%s" % proto_dir,
             "--encode=inference.ModelInferRequest",
             str(proto_dir / "inference/grpc_service.proto")],
            input=text.encode(), capture_output=True, check=True).stdout
        write("inference_fuzz", name, encoded)
    for name, records in SHM_SEEDS.items():
        content = b""
        for op, body in records:
            if isinstance(op, str):
                body = subprocess.run(
                    ["protoc", "--proto_path=%s" % proto_dir,
                     "--encode=posenc.v1.%sRequest" % op,
                     str(proto_dir / "posenc/v1/posenc.proto")],
                    input=body.encode(), capture_output=True, check=True).stdout
                op = SHM_OPS[op]
            content += bytes([op]) + struct.pack("<H", len(body)) + body
        write("shm_fuzz", name, content)
    for path in sorted(hf_dir.glob("*.json")):
        doc = json.loads(path.read_text())
        config = dict(doc["config"])
        config.update(doc.get("config_overlay", {}))
        text = json.dumps(config, indent=1)
        if "full_attention" in text:
            text += "\0full_attention"
        write("hf_config_fuzz", path.stem, text.encode())
    for name, text in HF_EXTRA.items():
        write("hf_config_fuzz", name, text.encode())
    for name, content in TABLE_SEEDS.items():
        write("table_fuzz", name, content)
    for i, args in enumerate(CLI_SEEDS):
        write("cli_flags_fuzz", "args%d" % i, "\0".join(args).encode())


if __name__ == "__main__":
    main()
