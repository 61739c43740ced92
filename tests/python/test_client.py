"""The Python client end to end against a real posenc-server (cpu backend): every method, the
position kinds, Hugging Face configs, typed errors, deadlines, bfloat16, compact biases,
health, TLS, and the local helpers."""

import dataclasses
import enum
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import grpc
import numpy as np
from google.protobuf import duration_pb2

import posenc
from posenc import _errors, _split, _tensor, _transport, _wire
from posenc._protos import error_details_pb2, health_pb2, status_pb2
from posenc.v1 import posenc_pb2 as pb
from server import ROOT, ServerProcess

SERVER = None
CLIENT = None


def setUpModule():
    global SERVER, CLIENT
    SERVER = ServerProcess("--backend=cpu", "--threads=2")
    CLIENT = posenc.Client(SERVER.address, timeout=60)


def tearDownModule():
    if CLIENT is not None:
        CLIENT.close()
    if SERVER is not None:
        SERVER.stop()


def rng(seed):
    return np.random.default_rng(seed)


def inv_freq(d, base=10000.0):
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def rope_reference(x, positions, base=10000.0):
    """NEOX (rotate_half) rotation in float64 of x [..., S, H, D] by positions [S] or [B, S]."""
    x = x.astype(np.float64)
    d = x.shape[-1]
    theta = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq(d, base)  # [.., S, d/2]
    cos, sin = np.cos(theta)[..., None, :], np.sin(theta)[..., None, :]  # [.., S, 1, d/2]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def bf16_values(a):
    return posenc.bf16_to_float32(a.view(np.uint16) if a.dtype != np.uint16 else a)


class EnumsTest(unittest.TestCase):
    def test_every_enum_of_the_proto_is_exposed_with_the_wires_values(self):
        enums = dict(pb.DESCRIPTOR.enum_types_by_name)
        self.assertGreaterEqual(len(enums), 12)
        for name, descriptor in enums.items():
            zero = descriptor.values_by_number[0].name
            self.assertTrue(zero.endswith("_UNSPECIFIED"), zero)  # posenc.proto's convention
            prefix = zero[:-len("UNSPECIFIED")]
            cls = getattr(posenc, name)
            self.assertTrue(issubclass(cls, enum.IntEnum), name)
            self.assertIn(name, posenc.__all__)
            self.assertEqual({m.name: int(m) for m in cls},
                             {v.name[len(prefix):]: v.number for v in descriptor.values}, name)
        serving = health_pb2.HealthCheckResponse.ServingStatus
        self.assertEqual({m.name: int(m) for m in posenc.HealthStatus},
                         {n: serving.Value(n) for n in serving.keys()})

    def test_every_value_of_an_enum_the_client_interprets_is_handled(self):
        # The tables where the client acts on an enum's value (the other enums it only passes
        # through): a value added to the .proto fails here until its table has it.
        tables = {
            posenc.DType: _tensor.WIRE_NUMPY,
            posenc.FutureMode: _tensor.FUTURE_FILL,
            posenc.AlibiMode: _tensor.ALIBI_COMPACT,
            posenc.TensorLayout: _split.ROPE_AXES,
            posenc.Combine: _split.Y_WIDTH,
            posenc.BiasForm: _split.CUT_FORMS,
        }
        for cls, table in tables.items():
            self.assertEqual(set(table), {m for m in cls if m.name != "UNSPECIFIED"},
                             cls.__name__)

    def test_the_enums_are_pickled_by_name(self):
        self.assertIs(pickle.loads(pickle.dumps(posenc.RopeStyle.GPTJ)), posenc.RopeStyle.GPTJ)

    def test_enum_arguments_take_names_members_and_numbers(self):
        a = CLIENT.rope_cache(range(0, 3), posenc.RopeConfig(head_dim=8, style="GPTJ"),
                              layout=posenc.RopeCacheLayout.GPTJ)
        b = CLIENT.rope_cache(range(0, 3), posenc.RopeConfig(head_dim=8, style=2), layout="gptj")
        np.testing.assert_array_equal(a.cos, b.cos)
        self.assertEqual(a.derived.style, posenc.RopeStyle.GPTJ)
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.rope_cache(range(0, 3), posenc.RopeConfig(head_dim=8, style="sideways"))
        self.assertIn("config.style", str(cm.exception))
        self.assertEqual(cm.exception.details, "client-side check")


class MirrorsTest(unittest.TestCase):
    """The value types that mirror a message field for field (converted by name in _wire)."""

    MIRRORS = {
        posenc.RopeConfig: pb.RopeConfig, posenc.RopeScaling: pb.RopeScaling,
        posenc.SinusoidalParams: pb.SinusoidalParams, posenc.RopeDerived: pb.RopeDerived,
        posenc.RopeLayerGroup: pb.RopeLayerGroup, posenc.RopeValueSource: pb.RopeValueSource,
        posenc.RopeSubmodule: pb.RopeSubmodule,
        posenc.AttentionTemperatureTuning: pb.AttentionTemperatureTuning,
        posenc.DescribeRopeResult: pb.DescribeRopeResponse, posenc.BackendInfo: pb.BackendInfo,
        posenc.DeviceInfo: pb.DeviceInfo, posenc.TableInfo: pb.TableInfo,
        posenc.SharedMemoryRegionStatus: pb.SharedMemoryRegionStatus,
        posenc.MultimodalTokenIds: pb.MultimodalTokenIds, posenc.VisionSpan: pb.VisionSpan,
        posenc.AnalyzeEncodingResult: pb.AnalyzeEncodingResponse,
        posenc.AnalysisCurve: pb.AnalysisCurve,
    }

    def test_every_field_of_the_message_and_no_other(self):
        for cls, message in self.MIRRORS.items():
            self.assertEqual({f.name for f in dataclasses.fields(cls)},
                             {f.name for f in message.DESCRIPTOR.fields}, cls.__name__)
        info = {f.name for f in dataclasses.fields(posenc.ServerInfo)}
        wire = ({f.name for f in pb.GetServerInfoResponse.DESCRIPTOR.fields} - {"limits"}) | {
            f.name for f in pb.ServerLimits.DESCRIPTOR.fields}
        self.assertEqual(info, wire)

    def test_a_rope_config_round_trips_through_its_message(self):
        config = posenc.RopeConfig(
            head_dim=64, rotary_dim=32, base=1e6, style="gptj", max_position_embeddings=4096,
            scaling={"rope_type": "longrope", "original_max_position_embeddings": 1024,
                     "long_factor": [2.0] * 8, "short_factor": [1.0] * 8, "truncate": False},
            mrope_section=[4, 2, 2], inverse=True, apply_attention_factor=False, seq_len=9,
            freq_factors=[1.0] * 16, layer_type="full")
        msg = pb.RopeConfig()
        _wire.to_message(config, msg, "config")
        self.assertTrue(msg.HasField("apply_attention_factor"))
        self.assertFalse(msg.scaling.HasField("factor"))
        back = _wire.from_message(msg, posenc.RopeConfig)
        self.assertEqual(back.scaling.type, posenc.RopeScalingType.LONGROPE)
        self.assertEqual(back.scaling.long_factor, (2.0,) * 8)
        self.assertIsNone(back.scaling.factor)
        self.assertEqual((back.style, back.rotary_dim, back.seq_len, back.mrope_section),
                         (posenc.RopeStyle.GPTJ, 32, 9, (4, 2, 2)))

    def test_wrong_value_types_name_the_field(self):
        for config, field in ((posenc.RopeConfig(head_dim=1.5), "config.head_dim"),
                              (posenc.RopeConfig(base="big"), "config.base"),
                              (posenc.RopeConfig(inverse=1), "config.inverse"),
                              (posenc.RopeConfig(scaling={"factor": "x"}),
                               "config.scaling.factor"),
                              (posenc.RopeConfig(mrope_section="123"), "config.mrope_section")):
            with self.assertRaises(posenc.InvalidArgumentError) as cm:
                CLIENT.rope_cache(range(0, 2), config)
            self.assertEqual(cm.exception.field, field)
            self.assertEqual(cm.exception.details, "client-side check")


class AbsoluteTest(unittest.TestCase):
    def test_sinusoidal_matches_the_formula(self):
        table = CLIENT.sinusoidal(range(5, 12), 10, base=500.0, dtype=np.float64)
        self.assertEqual(table.shape, (7, 10))
        p = np.arange(5, 12, dtype=np.float64)[:, None]
        omega = 500.0 ** (-np.arange(0, 10, 2) / 10)
        want = np.empty((7, 10))
        want[:, 0::2], want[:, 1::2] = np.sin(p * omega), np.cos(p * omega)
        np.testing.assert_allclose(table, want, atol=1e-12)

    def test_sinusoidal_ids_keep_their_shape_and_mask_zeroes_padding(self):
        ids = np.array([[0, 3, 1000], [65535, 7, 123456]], dtype=np.int32)
        table = CLIENT.sinusoidal(ids, 16, dtype="fp16")
        self.assertEqual((table.shape, table.dtype), ((2, 3, 16), np.float16))
        masked = CLIENT.sinusoidal(posenc.Positions.attention_mask([[0, 0, 1, 1], [1, 1, 1, 1]]),
                                   8)
        self.assertEqual(masked.shape, (2, 4, 8))
        np.testing.assert_array_equal(masked[0, :2], 0)
        np.testing.assert_array_equal(masked[0, 2], masked[1, 0])  # first real token: position 0

    def test_add_position_encoding_sinusoidal_and_learned(self):
        x = rng(1).standard_normal((2, 4, 6)).astype(np.float32)
        y = CLIENT.add_position_encoding(x, posenc.Positions.offsets([3, 10]), scale=2.0)
        self.assertEqual((y.shape, y.dtype), (x.shape, np.float32))
        pe = CLIENT.sinusoidal(np.array([[3, 4, 5, 6], [10, 11, 12, 13]]), 6, dtype="float64")
        np.testing.assert_allclose(y, 2.0 * x + pe, atol=2e-6)

        table = rng(2).standard_normal((20, 5))
        z = CLIENT.add_position_encoding(x[:, :, :3].astype(np.float64), learned=table,
                                         table_offset=2, combine="concat")
        self.assertEqual(z.shape, (2, 4, 8))
        np.testing.assert_array_equal(z[..., :3], x[:, :, :3].astype(np.float64))
        np.testing.assert_array_equal(z[0, :, 3:], table[2:6])

    def test_learned_position_past_the_table_is_out_of_range(self):
        with self.assertRaises(posenc.OutOfRangeError) as cm:
            CLIENT.add_position_encoding(np.zeros((1, 4, 5), np.float32), range(7, 11),
                                         learned=posenc.LearnedTable(np.zeros((10, 5)), 2))
        self.assertEqual(cm.exception.code, grpc.StatusCode.OUT_OF_RANGE)
        self.assertIsInstance(cm.exception, ValueError)


class RopeTest(unittest.TestCase):
    def test_rope_cache_matches_the_formula(self):
        cos, sin, derived = CLIENT.rope_cache(posenc.Positions.range(100, 6),
                                              posenc.RopeConfig(head_dim=16, base=1e6),
                                              dtype="float64")
        theta = np.arange(100, 106, dtype=np.float64)[:, None] * inv_freq(16, 1e6)
        np.testing.assert_allclose(cos, np.cos(theta), atol=1e-12)
        np.testing.assert_allclose(sin, np.sin(theta), atol=1e-12)
        np.testing.assert_allclose(derived.inv_freq, inv_freq(16, 1e6), rtol=1e-15)
        self.assertEqual(derived.scaling_type, posenc.RopeScalingType.DEFAULT)
        self.assertEqual(derived.rotary_dim, 16)

    def test_apply_rope_with_k_offsets_and_ids(self):
        q = rng(3).standard_normal((2, 5, 4, 8)).astype(np.float32)
        k = rng(4).standard_normal((2, 5, 2, 8)).astype(np.float32)  # GQA: fewer heads
        result = CLIENT.apply_rope(q, k, posenc.Positions.offsets([0, 7]))
        pos = np.array([np.arange(5), 7 + np.arange(5)])
        np.testing.assert_allclose(result.q, rope_reference(q, pos), atol=2e-6)
        np.testing.assert_allclose(result.k, rope_reference(k, pos), atol=2e-6)
        by_ids = CLIENT.apply_rope(q, k, pos)
        np.testing.assert_array_equal(by_ids.q, result.q)
        np.testing.assert_array_equal(by_ids.k, result.k)
        self.assertIsNone(CLIENT.apply_rope(q).k)

    def test_apply_rope_bhsd_and_inverse(self):
        q = rng(5).standard_normal((1, 3, 6, 8))  # BHSD float64
        rotated = CLIENT.apply_rope(q, positions=range(10, 16), layout="bhsd").q
        want = rope_reference(q.transpose(0, 2, 1, 3), np.arange(10, 16)).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(rotated, want, atol=1e-12)
        back = CLIENT.apply_rope(rotated, positions=range(10, 16), layout="bhsd",
                                 config=posenc.RopeConfig(inverse=True)).q
        np.testing.assert_allclose(back, q, atol=1e-12)

    def test_thd_with_cu_seqlens_equals_per_sequence_calls(self):
        q = rng(6).standard_normal((7, 2, 8)).astype(np.float32)  # two sequences: 3 + 4 tokens
        packed = CLIENT.apply_rope(q, positions=posenc.Positions.cu_seqlens([0, 3, 7], [0, 5]),
                                   layout="thd").q
        first = CLIENT.apply_rope(q[None, :3], positions=range(0, 3)).q[0]
        second = CLIENT.apply_rope(q[None, 3:], positions=range(5, 9)).q[0]
        np.testing.assert_array_equal(packed, np.concatenate([first, second]))

    def test_attention_mask_left_padding(self):
        q = rng(7).standard_normal((2, 4, 1, 8)).astype(np.float32)
        mask = np.array([[0, 0, 1, 1], [1, 1, 1, 1]])
        out = CLIENT.apply_rope(q, positions=posenc.Positions.attention_mask(mask)).q
        np.testing.assert_array_equal(out[0, :2], q[0, :2])  # padding passes through
        np.testing.assert_allclose(out[0, 2:], rope_reference(q[0, 2:], np.arange(2)),
                                   atol=2e-6)
        np.testing.assert_allclose(out[1], rope_reference(q[1], np.arange(4)), atol=2e-6)

    def test_mrope_ids(self):
        ids = np.array([[0, 1, 2, 3], [0, 5, 5, 6], [0, 7, 9, 6]])
        cos, sin, derived = CLIENT.rope_cache(
            ids, posenc.RopeConfig(head_dim=8, mrope_section=[2, 1, 1]), dtype="float64")
        self.assertEqual(cos.shape, (4, 4))
        omega = inv_freq(8)
        # CONTIGUOUS: frequencies 0, 1 use t, 2 uses h, 3 uses w.
        theta = np.stack([ids[0] * omega[0], ids[0] * omega[1], ids[1] * omega[2],
                          ids[2] * omega[3]], axis=1)
        np.testing.assert_allclose(cos, np.cos(theta), atol=1e-12)

    LLAMA31 = {
        "hidden_size": 2048, "num_attention_heads": 32, "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "vocab_size": 128256,
    }

    def test_hf_config_as_dict_text_and_path_equals_explicit_config(self):
        explicit = posenc.RopeConfig(
            head_dim=64, base=500000.0, max_position_embeddings=131072,
            scaling=posenc.RopeScaling(type="llama3", factor=8.0, low_freq_factor=1.0,
                                       high_freq_factor=4.0,
                                       original_max_position_embeddings=8192))
        want = CLIENT.rope_cache(range(8000, 8033), explicit, dtype="float64")
        self.assertEqual(want.derived.scaling_type, posenc.RopeScalingType.LLAMA3)
        text = json.dumps(self.LLAMA31)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "config.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            for config in (self.LLAMA31, text, path, posenc.RopeConfig.from_hf(self.LLAMA31)):
                got = CLIENT.rope_cache(range(8000, 8033), config, dtype="float64")
                np.testing.assert_array_equal(got.cos, want.cos)
                np.testing.assert_array_equal(got.sin, want.sin)
                self.assertEqual(got.derived.head_dim, 64)
                self.assertEqual(got.derived.effective_base, 500000.0)
                np.testing.assert_array_equal(got.derived.inv_freq, want.derived.inv_freq)
        q = rng(8).standard_normal((1, 4, 2, 64)).astype(np.float32)
        np.testing.assert_array_equal(CLIENT.apply_rope(q, config=self.LLAMA31).q,
                                      CLIENT.apply_rope(q, config=explicit).q)

    def test_scaling_as_a_rope_scaling_dict(self):
        scaling = dict(self.LLAMA31["rope_scaling"])
        as_dict = posenc.RopeConfig(head_dim=64, base=500000.0, max_position_embeddings=131072,
                                    scaling=scaling)
        from_hf = CLIENT.rope_cache(range(0, 9), self.LLAMA31).cos
        np.testing.assert_array_equal(CLIENT.rope_cache(range(0, 9), as_dict).cos, from_hf)
        scaling["rope_theta"] = 1.0
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.rope_cache(range(0, 9), as_dict)
        self.assertIn("rope_theta", cm.exception.message)

    def test_hf_config_with_an_explicit_field_is_invalid_argument(self):
        config = posenc.RopeConfig.from_hf(self.LLAMA31, style="gptj")  # style is allowed
        CLIENT.rope_cache(range(0, 2), config)
        config.base = 10000.0  # the JSON sets rope_theta
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.rope_cache(range(0, 2), config)
        self.assertTrue(cm.exception.field.startswith("config"), str(cm.exception))

    def test_dynamic_scaling_reports_the_seq_len_it_used(self):
        config = posenc.RopeConfig(head_dim=16, max_position_embeddings=64,
                                   scaling=posenc.RopeScaling(type="dynamic", factor=2.0))
        derived = CLIENT.rope_cache(range(0, 200), config).derived
        self.assertEqual(derived.seq_len, 200)
        self.assertGreater(derived.effective_base, 10000.0)

    def test_describe_rope_of_a_config_json_and_of_an_explicit_config(self):
        config = dict(self.LLAMA31, num_hidden_layers=4)
        result = CLIENT.describe_rope(config)
        self.assertIsInstance(result, posenc.DescribeRopeResult)
        self.assertEqual((result.num_layers, len(result.groups)), (4, 1))
        group = result.groups[0]
        self.assertEqual(group.layers, (0, 1, 2, 3))
        self.assertEqual(group.derived.scaling_type, posenc.RopeScalingType.LLAMA3)
        self.assertEqual((group.base, group.max_position_embeddings), (500000.0, 131072))
        self.assertIsNone(group.softmax_scale_multiplier)
        self.assertIsNone(group.attn_temperature_tuning)
        # Ministral 3: llama_4_scaling_beta, reported with offset 0 (Llama 4's: offset 1).
        ministral = CLIENT.describe_rope({"model_type": "ministral3"}).groups[0]
        tuning = ministral.attn_temperature_tuning
        self.assertEqual(
            (tuning.floor_scale, tuning.attn_scale, tuning.position_offset, tuning.key),
            (16384.0, 0.1, 0.0, "llama_4_scaling_beta"))
        self.assertIsNone(ministral.softmax_scale_multiplier)
        np.testing.assert_allclose(tuning.scale([0, 16383, 16384, 262143]),
                                   [1.0, 1.0, 1.0693147180559945, 1.2772588722239782], rtol=1e-15)
        np.testing.assert_array_equal(group.derived.inv_freq, CLIENT.rope_cache(
            range(0, 1), self.LLAMA31).derived.inv_freq)
        self.assertIn("base", {source.name for source in group.sources})
        self.assertTrue(all(isinstance(s, posenc.RopeValueSource) for s in group.sources))
        explicit = CLIENT.describe_rope(posenc.RopeConfig(head_dim=64, base=1e6))
        self.assertEqual((len(explicit.groups), explicit.groups[0].layers), (1, ()))
        self.assertEqual(explicit.groups[0].derived.effective_base, 1e6)
        with self.assertRaises(posenc.InvalidArgumentError):
            CLIENT.describe_rope(posenc.RopeConfig.from_hf(config, layer_type="full"))

    # DeepSeek-V3.2 (its published YaRN block; tests/hf_configs/config_only has the whole file).
    DEEPSEEK_V32 = {
        "model_type": "deepseek_v32", "num_hidden_layers": 3, "qk_rope_head_dim": 64,
        "index_head_dim": 128, "index_topk": 2048, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}

    def test_describe_rope_of_the_dsa_indexer_submodule(self):
        result = CLIENT.describe_rope(self.DEEPSEEK_V32)
        self.assertEqual(result.groups[0].derived.style, posenc.RopeStyle.DEEPSEEK)
        self.assertEqual(len(result.submodules), 1)
        indexer = result.submodules[0]
        self.assertIsInstance(indexer, posenc.RopeSubmodule)
        self.assertEqual((indexer.name, indexer.layers, indexer.rotary_offset),
                         ("indexer", (0, 1, 2), 0))
        self.assertEqual((indexer.derived.head_dim, indexer.derived.rotary_dim,
                          indexer.derived.style), (128, 64, posenc.RopeStyle.NEOX))
        np.testing.assert_array_equal(indexer.derived.inv_freq, result.groups[0].derived.inv_freq)
        self.assertIn("pairing", {source.name for source in indexer.sources})
        # RopeCache with the selector: the indexer's config, the attention's table.
        cache = CLIENT.rope_cache(range(0, 4), posenc.RopeConfig.from_hf(
            self.DEEPSEEK_V32, submodule="indexer", layer_type="2"))
        self.assertEqual((cache.derived.submodule, cache.derived.head_dim, cache.derived.style),
                         ("indexer", 128, posenc.RopeStyle.NEOX))
        np.testing.assert_array_equal(cache.cos, CLIENT.rope_cache(range(0, 4),
                                                                   self.DEEPSEEK_V32).cos)
        with self.assertRaises(posenc.InvalidArgumentError) as raised:
            CLIENT.rope_cache(range(0, 4), posenc.RopeConfig.from_hf(self.LLAMA31,
                                                                     submodule="indexer"))
        self.assertIn("config.submodule", str(raised.exception))
        self.assertEqual(CLIENT.describe_rope(self.LLAMA31).submodules, ())

    def test_describe_rope_of_a_vision_language_config_is_both_towers(self):
        # Qwen2-VL-2B-Instruct's published RoPE keys and vision_config (tests/hf_configs).
        qwen2vl = {
            "model_type": "qwen2_vl", "hidden_size": 1536, "num_attention_heads": 12,
            "num_hidden_layers": 28, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "patch_size": 14,
                              "spatial_merge_size": 2, "temporal_patch_size": 2}}
        result = CLIENT.describe_rope(qwen2vl)
        self.assertEqual((result.model_type, result.num_layers), ("qwen2_vl", 28))
        self.assertEqual([g.layer_type for g in result.groups], ["", "vision"])
        text, vision = result.groups
        self.assertEqual((len(text.layers), text.mrope_section), (28, (16, 24, 24)))
        self.assertEqual((vision.layers, vision.derived.head_dim), ((), 80))
        cache = CLIENT.rope_cache(posenc.Positions.ids(np.array([[0, 3], [0, 5]])),
                                  posenc.RopeConfig.from_hf(qwen2vl, layer_type="vision"))
        self.assertEqual((cache.derived.layer_type, cache.derived.head_dim), ("vision", 80))
        np.testing.assert_array_equal(cache.derived.inv_freq, vision.derived.inv_freq)


class AnalysisTest(unittest.TestCase):
    """AnalyzeEncoding: the same closed forms as the C++ tests (kernels/analysis)."""

    def test_sinusoidal_norms_and_exact_rotation(self):
        r = CLIENT.analyze_encoding(
            sinusoidal=posenc.SinusoidalParams(dim=32), start=5, count=1500, distances=[1, 700],
            properties=["bounds", "relative"])
        self.assertIsInstance(r, posenc.AnalyzeEncodingResult)
        self.assertEqual((r.family, r.width), ("sinusoidal", 32))
        self.assertIsNone(r.uniqueness)
        self.assertAlmostEqual(r.bounds.norms.min, 4.0, places=12)
        self.assertAlmostEqual(r.bounds.norms.max, 4.0, places=12)
        self.assertEqual([f.distance for f in r.relative.rotations], [1, 700])
        self.assertLess(max(f.residual for f in r.relative.rotations), 1e-13)

    def test_alibi_bfloat16_collision_and_bias_structure(self):
        r = CLIENT.analyze_encoding(alibi={"num_heads": 1}, count=1000, collision_dtype="bfloat16",
                                    properties=[posenc.AnalysisProperty.UNIQUENESS, "relative"])
        self.assertTrue(r.uniqueness.collision_found)
        self.assertEqual((r.uniqueness.collision_p, r.uniqueness.collision_q), (256, 257))
        self.assertEqual(r.uniqueness.collision_dtype, posenc.DType.BFLOAT16)
        self.assertTrue(r.relative.bias.depends_on_distance_only)
        bloom = CLIENT.analyze_encoding(alibi={"num_heads": 2, "mode": "bloom"}, count=64,
                                        properties=["relative"])
        self.assertFalse(bloom.relative.bias.depends_on_distance_only)
        self.assertEqual(bloom.relative.bias.max_shift_deviation_row_centered, 0.0)

    def test_bad_inputs_name_the_field(self):
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.analyze_encoding(sinusoidal=posenc.SinusoidalParams(dim=8), count=10,
                                    distances=[10])
        self.assertEqual(cm.exception.field, "distances[0]")
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.analyze_encoding(count=10)
        self.assertEqual(cm.exception.field, "encoding")
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.analyze_encoding(sinusoidal=posenc.SinusoidalParams(dim=8),
                                    alibi={"num_heads": 2}, count=10)
        self.assertEqual(cm.exception.field, "encoding")
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.analyze_encoding(config=posenc.RopeConfig(head_dim=8), count=10,
                                    properties=["decay"], embeddings=np.ones((2, 8)),
                                    keys=np.ones((3, 8)))
        self.assertEqual(cm.exception.field, "keys")

    def test_decay_with_separate_query_and_key_rows(self):
        # q = e_0, k = e_0 of NEOX pair 0: q.k(r) = cos(r * theta_0) = cos(r); with k = -q the
        # same |q.k|; k on the pair's other half: |sin(r)|.
        q = np.zeros((1, 8))
        q[0, 0] = 1.0
        k = np.zeros((1, 8))
        k[0, 4] = 1.0
        r = CLIENT.analyze_encoding(config=posenc.RopeConfig(head_dim=8), count=20,
                                    properties=["decay"], embeddings=q, keys=k)
        curve = r.decay.curves[0]
        self.assertEqual(curve.label, "mean |q.k|")
        np.testing.assert_allclose(curve.y, np.abs(np.sin(np.arange(20))), atol=1e-12)
        same = CLIENT.analyze_encoding(config=posenc.RopeConfig(head_dim=8), count=20,
                                       properties=["decay"], embeddings=q)
        np.testing.assert_allclose(same.decay.curves[0].y, np.abs(np.cos(np.arange(20))),
                                   atol=1e-12)


class BiasTest(unittest.TestCase):
    def test_alibi_slopes(self):
        np.testing.assert_allclose(CLIENT.alibi_slopes(8, dtype="float64"),
                                   2.0 ** (-np.arange(1, 9)), rtol=1e-15)
        self.assertEqual(CLIENT.alibi_slopes(4, max_bias=16.0).dtype, np.float32)

    def test_compact_alibi_expanded_equals_the_full_form(self):
        for mode in ("causal", "symmetric"):
            for query_offset in (None, 1, -2):
                for dtype in ("float32", "bfloat16"):
                    kw = dict(mode=mode, query_offset=query_offset, dtype=dtype)
                    full = CLIENT.alibi_bias(4, 5, 9, **kw)
                    compact = CLIENT.alibi_bias(4, 5, 9, form="compact", expand=False, **kw)
                    self.assertEqual(compact.bias.shape, (4, 5 + 9 - 1))
                    expanded = CLIENT.alibi_bias(4, 5, 9, form="compact", **kw)
                    self.assertEqual(expanded.bias.shape, full.bias.shape)
                    self.assertEqual(expanded.bias.dtype, full.bias.dtype)
                    self.assertEqual(expanded.bias.tobytes(), full.bias.tobytes(), kw)
                    self.assertEqual(posenc.expand_toeplitz(compact.bias, 5, 9).tobytes(),
                                     full.bias.tobytes())
                    np.testing.assert_array_equal(expanded.slopes, full.slopes)

    def test_compact_bloom_expanded_equals_the_full_form(self):
        mask = np.array([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]])
        for future in ("mask", "zero", "linear"):
            for dtype in ("float32", "bfloat16"):
                kw = dict(mode="bloom", future=future, attention_mask=mask, dtype=dtype)
                full = CLIENT.alibi_bias(3, 4, 7, **kw).bias
                self.assertEqual(full.shape, (2, 3, 4, 7))
                rows = CLIENT.alibi_bias(3, 4, 7, form="compact", expand=False, **kw).bias
                self.assertEqual(rows.shape, (2, 3, 7))
                expanded = CLIENT.alibi_bias(3, 4, 7, form="compact", **kw).bias
                self.assertEqual(expanded.tobytes(), full.tobytes(), kw)
        # Without a mask, with a query offset.
        kw = dict(mode="bloom", query_offset=1)
        self.assertEqual(CLIENT.alibi_bias(2, 3, 6, form="compact", **kw).bias.tobytes(),
                         CLIENT.alibi_bias(2, 3, 6, **kw).bias.tobytes())

    def test_compact_t5_expanded_equals_the_full_form(self):
        table = rng(9).standard_normal((32, 5)).astype(np.float32)
        kw = dict(query_offset=250, bidirectional=False)
        full = CLIENT.relative_bias(7, 300, table, **kw)
        self.assertEqual(full.shape, (5, 7, 300))
        compact = CLIENT.relative_bias(7, 300, table, form="compact", expand=False, **kw)
        self.assertEqual(compact.shape, (5, 7 + 300 - 1))
        expanded = CLIENT.relative_bias(7, 300, table, form="compact", **kw)
        self.assertEqual(expanded.tobytes(), full.tobytes())

    def test_relative_bias_buckets_and_missing_table(self):
        buckets = CLIENT.relative_bias(3, 5, form="buckets")
        self.assertEqual((buckets.shape, buckets.dtype), ((3, 5), np.int32))
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.relative_bias(2, 2)
        self.assertIn("table", cm.exception.message)

    def test_relative_embedding_matches_the_formula(self):
        table = rng(10).standard_normal((5, 3))
        emb = CLIENT.relative_embedding(4, 6, 2, table, query_offset=1, key_offset=-1,
                                        dtype="float64")
        qpos = 1 + np.arange(4)[:, None]
        kpos = -1 + np.arange(6)[None, :]
        np.testing.assert_array_equal(emb, table[np.clip(kpos - qpos, -2, 2) + 2])


class Bfloat16Test(unittest.TestCase):
    def test_helpers_round_to_nearest_even(self):
        bits = posenc.float32_to_bf16(np.array(
            [1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, np.inf, -np.inf,
             0.0, -0.0, 3.4e38, np.nan], dtype=np.float32))
        self.assertEqual(bits.dtype, np.uint16)
        self.assertEqual(list(bits[:10]), [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x3F81, 0x7F80,
                                           0xFF80, 0x0000, 0x8000, 0x7F80])
        self.assertTrue(np.isnan(posenc.bf16_to_float32(bits[10:])).all())
        values = rng(11).standard_normal(1000).astype(np.float32)
        once = posenc.bf16_to_float32(posenc.float32_to_bf16(values))
        np.testing.assert_array_equal(posenc.float32_to_bf16(once),
                                      posenc.float32_to_bf16(values))
        np.testing.assert_allclose(once, values, rtol=2**-8)

    def test_float64_rounds_correctly_not_through_float32(self):
        # 1 + 2^-8 + 2^-30: float32 rounds it to the tie 1 + 2^-8 (then even: 1.0); correct
        # rounding from double goes up.
        x = np.array([1.0 + 2**-8 + 2**-30, -(1.0 + 2**-8 + 2**-30), 1.0 + 2**-8, 1e-50])
        self.assertEqual(list(posenc.float32_to_bf16(x)), [0x3F81, 0xBF81, 0x3F80, 0x0000])

    def test_server_bfloat16_outputs_are_the_rounded_float64_results(self):
        f64 = CLIENT.sinusoidal(range(0, 300), 32, dtype="float64")
        bf16 = CLIENT.sinusoidal(range(0, 300), 32, dtype="bfloat16")
        bits = bf16.view(np.uint16) if bf16.dtype != np.uint16 else bf16
        want = posenc.float32_to_bf16(f64)
        # Within one bfloat16 ulp of the correctly rounded value everywhere (the cpu backend
        # computes in float32 for narrow outputs), equal almost everywhere.
        ulps = np.abs(bits.astype(np.int32) - want.astype(np.int32))
        self.assertLessEqual(int(ulps.max()), 1)
        self.assertGreater(np.mean(ulps == 0), 0.99)

    def test_apply_rope_bfloat16_round_trip(self):
        x = rng(12).standard_normal((1, 16, 4, 64))
        q = posenc.float32_to_bf16(x)
        if posenc.HAVE_ML_DTYPES:
            q = q.view(posenc.BFLOAT16_DTYPE)
        rotated = CLIENT.apply_rope(q, positions=range(1000, 1016)).q
        self.assertEqual((rotated.dtype, rotated.shape), (q.dtype, q.shape))
        exact = rope_reference(bf16_values(q).astype(np.float64), np.arange(1000, 1016))
        np.testing.assert_allclose(bf16_values(rotated), exact, atol=1.6e-2 * np.abs(x).max())
        back = CLIENT.apply_rope(rotated, positions=range(1000, 1016),
                                 config=posenc.RopeConfig(inverse=True)).q
        np.testing.assert_allclose(bf16_values(back), bf16_values(q), atol=3.2e-2 * np.abs(
            x).max())

    @unittest.skipUnless(posenc.HAVE_ML_DTYPES, "ml_dtypes is not installed")
    def test_ml_dtypes_bfloat16_in_and_out(self):
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        slopes = CLIENT.alibi_slopes(4, dtype=ml_dtypes.bfloat16)
        self.assertEqual(slopes.dtype, np.dtype(ml_dtypes.bfloat16))
        q = np.ones((1, 2, 1, 8), dtype=ml_dtypes.bfloat16)
        self.assertEqual(CLIENT.apply_rope(q).q.dtype, np.dtype(ml_dtypes.bfloat16))

    @unittest.skipIf(posenc.HAVE_ML_DTYPES, "ml_dtypes is installed")
    def test_ml_dtypes_plumbing_with_a_stand_in(self):
        # Debian 12 has no ml_dtypes: a stand-in module whose bfloat16 is a 2-byte numpy dtype
        # checks that arrays of that dtype go out as BFLOAT16 and come back in it.
        script = (
            "import sys, numpy as np, posenc\n"
            "assert posenc.HAVE_ML_DTYPES\n"
            "import ml_dtypes\n"
            "c = posenc.Client(sys.argv[1], timeout=30)\n"
            "s = c.alibi_slopes(4, dtype=ml_dtypes.bfloat16)\n"
            "assert s.dtype == ml_dtypes.bfloat16, s.dtype\n"
            "assert s.view(np.uint16).tolist() == [0x3E80, 0x3D80, 0x3C80, 0x3B80], s\n"
            "q = posenc.float32_to_bf16(np.ones((1, 2, 1, 8))).view(ml_dtypes.bfloat16)\n"
            "r = c.apply_rope(q).q\n"
            "assert r.dtype == ml_dtypes.bfloat16 and r.shape == q.shape\n"
            "assert (r.view(np.uint16)[0, 0] == 0x3F80).all()  # position 0: unchanged\n")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "ml_dtypes.py"), "w", encoding="utf-8") as f:
                f.write("import numpy as np\nbfloat16 = np.dtype([('bf16', '<u2')])\n")
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([tmp, env.get("PYTHONPATH", "")])
            run = subprocess.run([sys.executable, "-c", script, SERVER.address],
                                 capture_output=True, text=True, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    @unittest.skipIf(posenc.HAVE_ML_DTYPES, "ml_dtypes is installed")
    def test_without_ml_dtypes_bfloat16_is_uint16_bits(self):
        slopes = CLIENT.alibi_slopes(4, dtype="bf16")
        self.assertEqual(slopes.dtype, np.uint16)
        np.testing.assert_array_equal(posenc.bf16_to_float32(slopes),
                                      [0.25, 0.0625, 0.015625, 0.00390625])


class ErrorsTest(unittest.TestCase):
    def test_malformed_request_is_invalid_argument_naming_the_field(self):
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.alibi_slopes(0)
        e = cm.exception
        self.assertIsInstance(e, posenc.PosencError)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.field, "num_heads")
        self.assertEqual(e.method, "AlibiSlopes")
        self.assertIn("got 0", e.message)
        self.assertTrue(str(e).startswith("INVALID_ARGUMENT: num_heads"))

        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.apply_rope(np.zeros((1, 4, 2, 8), np.float32),
                              config=posenc.RopeConfig(rotary_dim=5))
        self.assertIn("rotary_dim", cm.exception.message)

        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.apply_rope(np.zeros((4, 8), np.float32))  # rank 2
        self.assertEqual(cm.exception.field, "q")

    def test_local_checks_raise_before_sending(self):
        for call in (lambda: CLIENT.apply_rope(np.zeros((1, 2, 1, 4), np.int64)),
                     lambda: CLIENT.sinusoidal(range(0, 2, 2), 4),
                     lambda: CLIENT.alibi_slopes(4, dtype="int7"),
                     lambda: CLIENT.alibi_slopes(4, timeout=-1),
                     lambda: CLIENT.rope_cache(range(0, 2), "/no/such/config.json"),
                     lambda: CLIENT.relative_bias(2, 2, np.zeros((32, 1), np.complex64))):
            with self.assertRaises(posenc.InvalidArgumentError) as cm:
                call()
            self.assertEqual(cm.exception.details, "client-side check")

    def test_output_over_the_limit_is_resource_exhausted(self):
        with self.assertRaises(posenc.ResourceExhaustedError) as cm:
            CLIENT.sinusoidal(posenc.Positions.range(0, 1 << 20), 128)
        self.assertIn("max_output_elements", cm.exception.message)
        self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_deadline_exceeded(self):
        q = np.zeros((1, 4096, 8, 128), np.float32)  # 16 MiB each way
        with self.assertRaises(posenc.DeadlineExceededError) as cm:
            CLIENT.apply_rope(q, timeout=1e-4)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        impatient = posenc.Client(SERVER.address, timeout=1e-4)
        with self.assertRaises(posenc.DeadlineExceededError):
            impatient.apply_rope(q)
        self.assertEqual(impatient.apply_rope(q[:, :4], timeout=30).q.shape, (1, 4, 8, 128))
        impatient.close()

    def test_unreachable_server_is_unavailable(self):
        with posenc.Client("127.0.0.1:1", timeout=5, max_attempts=1) as client:
            with self.assertRaises(posenc.UnavailableError) as cm:
                client.alibi_slopes(4)
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_invalid_client_options(self):
        for kwargs in ({"timeout": 0}, {"max_message_bytes": 0}, {"max_attempts": 0},
                       {"tls": "yes"}):
            with self.assertRaises(posenc.InvalidArgumentError):
                posenc.Client("localhost:1", **kwargs)
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.Client("")

    def test_errors_pickle_and_map_every_code(self):
        e = posenc.InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, "q: bad", "d", "X")
        again = pickle.loads(pickle.dumps(e))
        self.assertIs(type(again), posenc.InvalidArgumentError)
        self.assertEqual((again.code, again.message, again.details, again.method),
                         (e.code, e.message, e.details, e.method))
        from posenc._errors import error_for  # pylint: disable=import-outside-toplevel

        for code in grpc.StatusCode:
            if code == grpc.StatusCode.OK:
                continue
            err = error_for(code, "m")
            self.assertEqual(err.code, code)
            self.assertIsInstance(err, posenc.PosencError)
            self.assertEqual(type(err).CODE, code)


class FakeRpcError(grpc.RpcError):
    """A failed call as gRPC reports it, with the trailers a test chooses."""

    def __init__(self, code, message, trailers=()):
        super().__init__()
        self._code, self._message, self._trailers = code, message, tuple(trailers)

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return self._trailers

    def debug_error_string(self):
        return "debug"


def status_trailer(code, message, *details):
    """grpc-status-details-bin holding a google.rpc.Status with `details` packed."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return [("grpc-status-details-bin", status.SerializeToString())]


class StructuredDetailsTest(unittest.TestCase):
    """Decoding the contract of posenc.proto's header from trailers built here."""

    def test_error_info_and_field_violations(self):
        message = "config.scaling.factor: expected > 0, got 0"
        code = grpc.StatusCode.INVALID_ARGUMENT
        info = error_details_pb2.ErrorInfo(reason="INVALID_FIELD", domain="posenc.v1",
                                           metadata={"rpc": "RopeCache"})
        bad = error_details_pb2.BadRequest()
        bad.field_violations.add(field="config.scaling.factor", description="expected > 0, got 0")
        bad.field_violations.add(field="config.base", description="second")
        e = _errors.from_rpc_error(FakeRpcError(code, message, [("other", "x")] + status_trailer(
            code, message, info, bad)), "RopeCache")
        self.assertIsInstance(e, posenc.InvalidArgumentError)
        self.assertEqual((e.code, e.message, e.method, e.details),
                         (code, message, "RopeCache", "debug"))
        self.assertEqual((e.reason, e.domain, e.metadata), ("INVALID_FIELD", "posenc.v1",
                                                            {"rpc": "RopeCache"}))
        self.assertEqual((e.field, e.description), ("config.scaling.factor",
                                                    "expected > 0, got 0"))
        self.assertEqual(e.violations[1], posenc.FieldViolation("config.base", "second"))
        self.assertIsNone(e.retry_delay)
        again = pickle.loads(pickle.dumps(e))
        self.assertEqual((again.reason, again.violations, again.metadata),
                         (e.reason, e.violations, e.metadata))

    def test_retry_info_of_a_busy_server(self):
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(1500)
        info = error_details_pb2.ErrorInfo(reason="OVERLOADED", domain="posenc.v1",
                                           metadata={"limit": "max_heavy_calls"})
        e = _errors.from_rpc_error(FakeRpcError(code, "busy", status_trailer(
            code, "busy", info, retry)))
        self.assertIsInstance(e, posenc.ResourceExhaustedError)
        self.assertEqual((e.reason, e.metadata, e.retry_delay),
                         ("OVERLOADED", {"limit": "max_heavy_calls"}, 1.5))
        self.assertIsNone(e.field)  # structured, no violation: no field from the message

    def test_a_status_of_another_code_or_unreadable_is_ignored(self):
        code = grpc.StatusCode.INVALID_ARGUMENT
        info = error_details_pb2.ErrorInfo(reason="INVALID_FIELD", domain="posenc.v1")
        for trailers in (status_trailer(grpc.StatusCode.INTERNAL, "m", info),
                         [("grpc-status-details-bin", b"\xff\xff not a status")],
                         [("grpc-status-details-bin", "text")], []):
            e = _errors.from_rpc_error(FakeRpcError(code, "q.shape[1]: expected >= 1, got 0",
                                                    trailers))
            self.assertIsNone(e.reason)
            self.assertEqual((e.field, e.description), ("q.shape[1]", "expected >= 1, got 0"))

    def test_unknown_detail_types_are_skipped(self):
        code = grpc.StatusCode.OUT_OF_RANGE
        info = error_details_pb2.ErrorInfo(reason="POSITION_OUT_OF_RANGE", domain="posenc.v1")
        debug = duration_pb2.Duration(seconds=3)
        e = _errors.from_rpc_error(FakeRpcError(code, "positions: past", status_trailer(
            code, "positions: past", debug, info)))
        self.assertIsInstance(e, posenc.OutOfRangeError)
        self.assertEqual(e.reason, "POSITION_OUT_OF_RANGE")

    def test_the_clients_own_checks_are_shaped_as_the_servers(self):
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.rope_cache(range(0, 2), posenc.RopeConfig(head_dim=8, style="sideways"))
        e = cm.exception
        self.assertEqual((e.field, e.reason, e.domain, e.details),
                         ("config.style", "INVALID_FIELD", "posenc.v1", "client-side check"))
        self.assertEqual(e.message, f"{e.field}: {e.description}")


@unittest.skipUnless(shutil.which("protoc"), "protoc is not installed")
class UpstreamProtosTest(unittest.TestCase):
    def test_installed_google_rpc_and_grpc_health_are_preferred(self):
        # googleapis-common-protos and grpcio-health-checking stand-ins, generated from the same
        # protos: posenc must use them rather than register its copies beside them.
        with tempfile.TemporaryDirectory() as tmp:
            proto = os.path.join(ROOT, "proto")
            subprocess.run(["protoc", f"--proto_path={proto}", f"--python_out={tmp}",
                            "google/rpc/status.proto", "google/rpc/error_details.proto",
                            "grpc/health/v1/health.proto"], check=True)
            os.makedirs(os.path.join(tmp, "grpc_health"))
            os.rename(os.path.join(tmp, "grpc", "health", "v1"),
                      os.path.join(tmp, "grpc_health", "v1"))
            with open(os.path.join(tmp, "grpc_health", "v1", "health_pb2_grpc.py"), "w",
                      encoding="utf-8") as f:
                f.write("from grpc_health.v1 import health_pb2 as m\n"
                        "class HealthStub:\n"
                        "    def __init__(self, channel):\n"
                        "        self.Check = channel.unary_unary(\n"
                        "            '/grpc.health.v1.Health/Check',\n"
                        "            request_serializer=m.HealthCheckRequest.SerializeToString,\n"
                        "            response_deserializer=m.HealthCheckResponse.FromString)\n")
            script = (
                "import sys, posenc, google.rpc.status_pb2 as upstream\n"
                "from posenc import _protos\n"
                "assert _protos.status_pb2 is upstream, _protos.status_pb2\n"
                "assert _protos.health_pb2.__name__ == 'grpc_health.v1.health_pb2'\n"
                "c = posenc.Client(sys.argv[1], timeout=30)\n"
                "assert c.health() == posenc.HealthStatus.SERVING\n"
                "try:\n"
                "    c.alibi_slopes(0)\n"
                "except posenc.InvalidArgumentError as e:\n"
                "    assert (e.field, e.reason) == ('num_heads', 'INVALID_FIELD'), e\n")
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([tmp, env.get("PYTHONPATH", "")])
            run = subprocess.run([sys.executable, "-c", script, SERVER.address],
                                 capture_output=True, text=True, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


class ServerDetailsTest(unittest.TestCase):
    """The server's structured details, as posenc.proto's header says, through the client (the
    server's own test, tests/server/malformed_requests_test.cc, checks every row)."""

    def error_of(self, call):
        with self.assertRaises(posenc.PosencError) as cm:
            call()
        e = cm.exception
        self.assertIsNotNone(e.reason, f"no google.rpc.Status details with {e}")
        self.assertEqual(e.domain, posenc.DOMAIN)
        return e

    def test_invalid_fields_are_field_violations(self):
        q = np.zeros((1, 4, 2, 8), np.float32)
        rows = [
            ("num_heads", lambda: CLIENT.alibi_slopes(0)),
            ("config.rotary_dim", lambda: CLIENT.apply_rope(
                q, config=posenc.RopeConfig(rotary_dim=5))),
            ("q", lambda: CLIENT.apply_rope(np.zeros((4, 8), np.float32))),
            ("config.scaling.factor", lambda: CLIENT.rope_cache(range(0, 8), posenc.RopeConfig(
                head_dim=64, scaling=posenc.RopeScaling(type="linear", factor=0.0)))),
            ("positions.range.count", lambda: CLIENT.apply_rope(
                q, positions=posenc.Positions.range(0, 3))),
            ("scale", lambda: CLIENT.add_position_encoding(q[0], scale=float("nan"))),
            ("config.hf_config_json", lambda: CLIENT.rope_cache(range(0, 2), "{\"rope_theta\":")),
        ]
        for field, call in rows:
            with self.subTest(field):
                e = self.error_of(call)
                self.assertEqual((e.code, e.reason), (grpc.StatusCode.INVALID_ARGUMENT,
                                                      "INVALID_FIELD"))
                self.assertEqual(e.field, field)
                self.assertEqual(e.message, f"{e.field}: {e.description}")
                self.assertIsNone(e.retry_delay)

    def test_position_out_of_range(self):
        e = self.error_of(lambda: CLIENT.add_position_encoding(
            np.zeros((1, 4, 8), np.float32), range(1, 5),
            learned=posenc.LearnedTable(np.zeros((6, 8)), 2)))
        self.assertEqual((e.code, e.reason), (grpc.StatusCode.OUT_OF_RANGE,
                                              "POSITION_OUT_OF_RANGE"))

    def test_limits_name_the_flag_and_promise_no_retry(self):
        for limit, call in (
                ("max_output_elements",
                 lambda: CLIENT.sinusoidal(posenc.Positions.range(0, 1 << 30), 64)),
                ("max_message_bytes", lambda: CLIENT.rope_cache(
                    posenc.Positions.range(0, 1 << 20), posenc.RopeConfig(head_dim=128),
                    dtype="float64"))):
            with self.subTest(limit):
                e = self.error_of(call)
                self.assertEqual((e.code, e.reason, e.metadata.get("limit")),
                                 (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED", limit))
                self.assertIsNone(e.retry_delay)

    def test_a_busy_server_says_when_to_retry(self):
        # One call over --max_inflight_bytes is refused by admission: OVERLOADED, retryable.
        with ServerProcess("--max_inflight_bytes=100000", "--threads=1") as server, \
                posenc.Client(server.address, max_attempts=1) as client:
            e = self.error_of(lambda: client.apply_rope(np.zeros((1, 256, 1, 128), np.float32)))
        self.assertEqual((e.code, e.reason, e.metadata.get("limit")),
                         (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED", "max_inflight_bytes"))
        self.assertGreater(e.retry_delay, 0)
        self.assertIsNone(e.field)

    def test_unparseable_request(self):
        raw = CLIENT.channel.unary_unary("/posenc.v1.PositionEncoding/ApplyRope")
        e = self.error_of(lambda: _call_raw(raw, b"\xff\xff\xff"))
        self.assertEqual((e.code, e.reason), (grpc.StatusCode.INVALID_ARGUMENT,
                                              "UNPARSEABLE_REQUEST"))


def _call_raw(rpc, data):
    try:
        return rpc(data, timeout=30)
    except grpc.RpcError as e:
        raise _errors.from_rpc_error(e, "ApplyRope") from None


class ServerTest(unittest.TestCase):
    def test_health(self):
        self.assertEqual(CLIENT.health(), posenc.HealthStatus.SERVING)
        self.assertEqual(CLIENT.health("posenc.v1.PositionEncoding"),
                         posenc.HealthStatus.SERVING)
        with self.assertRaises(posenc.NotFoundError):
            CLIENT.health("no.such.Service")

    def test_service_config_is_the_shared_file_with_the_options(self):
        with open(os.path.join(ROOT, "client", "service_config.json"), encoding="utf-8") as f:
            shared = json.load(f)
        self.assertEqual(json.loads(_transport.service_config(
            shared["methodConfig"][0]["retryPolicy"]["maxAttempts"], "round_robin", True)),
            shared)
        config = json.loads(_transport.service_config(9, "pick_first", False))
        self.assertEqual(config["loadBalancingConfig"], [{"pick_first": {}}])
        self.assertNotIn("healthCheckConfig", config)
        self.assertEqual(config["methodConfig"][0]["retryPolicy"]["maxAttempts"], 5)
        bare = json.loads(_transport.service_config(1, "", True))
        self.assertNotIn("loadBalancingConfig", bare)
        self.assertNotIn("healthCheckConfig", bare)
        self.assertNotIn("retryPolicy", bare["methodConfig"][0])

    def test_options_of_the_cpp_client(self):
        with posenc.Client(SERVER.address, keepalive_time=10, keepalive_timeout=5,
                           health_check=False, load_balancing_policy="",
                           max_split_in_flight=1) as client:
            self.assertEqual(client.alibi_slopes(2).shape, (2,))
        for kwargs in ({"keepalive_time": -1}, {"keepalive_timeout": 0},
                       {"max_split_in_flight": 0}, {"max_message_bytes": 1.5}):
            with self.assertRaises(posenc.InvalidArgumentError) as cm:
                posenc.Client("localhost:1", **kwargs)
            self.assertEqual(cm.exception.field, next(iter(kwargs)))

    def test_server_info(self):
        self.assertEqual(CLIENT.get_server_info(), CLIENT.server_info())
        info = CLIENT.get_server_info()
        self.assertEqual(info.version, posenc.__version__)
        self.assertTrue(any(b.name == "cpu" and b.is_default for b in info.backends))
        self.assertEqual(info.max_message_bytes, 256 << 20)
        self.assertEqual(info.max_output_elements, 1 << 26)
        self.assertEqual(info.tables, [])

    def test_existing_channel_and_the_raw_stub(self):
        channel = grpc.insecure_channel(SERVER.address)
        client = posenc.Client(channel=channel)
        self.assertEqual(client.health(), posenc.HealthStatus.SERVING)
        response = client.stub.AlibiSlopes(pb.AlibiSlopesRequest(num_heads=2))
        self.assertEqual(list(response.slopes.shape), [2])
        client.close()  # the caller's channel stays open
        self.assertEqual(posenc.Client(channel=channel).alibi_slopes(2).shape, (2,))
        channel.close()

    def test_one_client_serves_many_threads(self):
        failures = []

        def work(t):
            for i in range(20):
                n = 1 + (t + i) % 16
                try:
                    if CLIENT.alibi_slopes(n).shape != (n,):
                        failures.append(n)
                except posenc.PosencError as e:
                    failures.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class TlsTest(unittest.TestCase):
    """Mutual TLS with a throw-away CA (the README's recipe)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name

        def ssl(*args):
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        ssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=posenc-test-ca")
        ssl("req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
        with open(os.path.join(d, "server.ext"), "w", encoding="utf-8") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", "1", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")
        ssl("req", *key, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=client")
        ssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", "2", "-days", "2", "-out", "client.pem")
        cls.files = {n: os.path.join(d, n) for n in ("ca.pem", "client.pem", "client.key")}
        cls.server = ServerProcess(f"--tls_cert={d}/server.pem", f"--tls_key={d}/server.key",
                                   f"--tls_client_ca={d}/ca.pem")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def test_mutual_tls(self):
        tls = posenc.TlsConfig.from_files(self.files["ca.pem"], self.files["client.pem"],
                                          self.files["client.key"])
        with posenc.Client(self.server.address, tls=tls, timeout=20) as client:
            self.assertEqual(client.health(), posenc.HealthStatus.SERVING)
            self.assertEqual(client.alibi_slopes(3).shape, (3,))

    def test_without_a_client_certificate_the_call_fails(self):
        tls = posenc.TlsConfig.from_files(self.files["ca.pem"])
        with posenc.Client(self.server.address, tls=tls, timeout=20, max_attempts=1) as client:
            with self.assertRaises(posenc.PosencError) as cm:
                client.health()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_half_a_client_key_pair_is_rejected(self):
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.Client(self.server.address,
                          tls=posenc.TlsConfig(client_cert=b"x"))


class TensorHelpersTest(unittest.TestCase):
    def test_expand_toeplitz(self):
        compact = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)  # H=2, q=3, k=4
        full = posenc.expand_toeplitz(compact, 3, 4)
        self.assertEqual(full.shape, (2, 3, 4))
        for h in range(2):
            for i in range(3):
                for j in range(4):
                    self.assertEqual(full[h, i, j], compact[h, j - i + 2])
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.expand_toeplitz(compact, 3, 5)

    def test_expand_bloom_rows(self):
        rows = np.array([[0.0, 1.0, 2.0, 3.0]])
        np.testing.assert_array_equal(
            posenc.expand_bloom_rows(rows, 2, future="zero"),
            [[[0, 1, 2, 0], [0, 1, 2, 3]]])
        masked = posenc.expand_bloom_rows(rows, 2, query_offset=0)
        np.testing.assert_array_equal(masked[0, 0], [0, -np.inf, -np.inf, -np.inf])
        np.testing.assert_array_equal(posenc.expand_bloom_rows(rows, 2, future="linear"),
                                      [[[0, 1, 2, 3], [0, 1, 2, 3]]])

    def test_positions_shorthands(self):
        self.assertEqual(posenc.Positions.coerce(range(3, 9)).kind, "range")
        self.assertEqual((posenc.Positions.coerce(range(3, 9)).start,
                          posenc.Positions.coerce(range(3, 9)).count), (3, 6))
        self.assertEqual(posenc.Positions.coerce([1, 2]).kind, "ids")
        self.assertEqual(posenc.Positions.coerce(None).kind, "default")
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.Positions.coerce(5)


if __name__ == "__main__":
    unittest.main()
