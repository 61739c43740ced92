"""Transparent splitting of requests over the message limit (posenc/_split.py).

Two servers: SMALL with a 256 KiB message limit and 32768-element outputs (and a named T5
table), BIG with the defaults. Every split request through SMALL must give exactly what one
call to BIG gives, in several calls.
"""

import os
import tempfile
import unittest

import grpc
import numpy as np

import posenc
from server import ServerProcess

SMALL_BYTES = 256 << 10
SMALL_ELEMENTS = 32768
T5_TABLE = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)

TMP = None
SMALL = BIG = None
small = big = None


def setUpModule():
    global TMP, SMALL, BIG, small, big
    TMP = tempfile.TemporaryDirectory()
    np.save(os.path.join(TMP.name, "t5.npy"), T5_TABLE)
    SMALL = ServerProcess(f"--max_message_bytes={SMALL_BYTES}",
                          f"--max_output_elements={SMALL_ELEMENTS}", f"--tables={TMP.name}",
                          "--threads=1")
    BIG = ServerProcess("--threads=1")
    small = CountingClient(SMALL.address, timeout=60)
    big = posenc.Client(BIG.address, timeout=60)


def tearDownModule():
    for client in (small, big):
        if client is not None:
            client.close()
    for server in (SMALL, BIG):
        if server is not None:
            server.stop()
    if TMP is not None:
        TMP.cleanup()


class CountingClient(posenc.Client):
    """Counts the RPCs (by method) that the client sends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = {}

    def _call(self, method, request, timeout):
        self.calls[method] = self.calls.get(method, 0) + 1
        return super()._call(method, request, timeout)

    def count(self, method):
        return self.calls.get(method, 0)


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class ApplyRopeSplitTest(unittest.TestCase):
    def expect_split_equals_whole(self, q, k=None, positions=None, config=None, layout=None,
                                  min_parts=2):
        before = small.count("ApplyRope")
        got = small.apply_rope(q, k, positions, config, layout=layout)
        parts = small.count("ApplyRope") - before
        self.assertGreaterEqual(parts, min_parts, "the request was not split")
        want = big.apply_rope(q, k, positions, config, layout=layout)
        self.assertEqual(got.q.dtype, want.q.dtype)
        self.assertEqual(got.q.shape, want.q.shape)
        self.assertEqual(got.q.tobytes(), want.q.tobytes())
        if k is None:
            self.assertIsNone(got.k)
        else:
            self.assertEqual(got.k.tobytes(), want.k.tobytes())
        self.assertEqual(got.derived.seq_len, want.derived.seq_len)
        np.testing.assert_array_equal(got.derived.inv_freq, want.derived.inv_freq)
        return got, parts

    def test_default_positions_with_gqa_k(self):
        q = rand((1, 512, 8, 64))  # 1 MiB, 262144 elements
        k = rand((1, 512, 2, 64), seed=1)
        _, parts = self.expect_split_equals_whole(q, k)
        self.assertGreaterEqual(parts, 8)  # 32768 elements of q per part at most

    def test_range_offsets_and_ids(self):
        q = rand((2, 256, 4, 64), np.float64, seed=2)  # 1 MiB: the byte limit binds
        self.expect_split_equals_whole(q, positions=posenc.Positions.range(1000, 256))
        self.expect_split_equals_whole(q, positions=posenc.Positions.offsets([5, 70000]))
        ids = np.random.default_rng(3).integers(0, 1 << 30, size=(2, 256))
        self.expect_split_equals_whole(q, positions=ids)
        self.expect_split_equals_whole(q, positions=ids[0].astype(np.int32))

    def test_bhsd_float16_and_bfloat16(self):
        q = rand((1, 4, 1024, 64), np.float16, seed=4)
        self.expect_split_equals_whole(q, layout="bhsd", positions=range(7, 1031))
        bits = posenc.float32_to_bf16(rand((1, 1024, 4, 64), seed=5))
        self.expect_split_equals_whole(bits, config=posenc.RopeConfig(style="gptj"))

    def test_thd_cu_seqlens(self):
        q = rand((1000, 4, 64), seed=6)
        positions = posenc.Positions.cu_seqlens([0, 100, 100, 700, 1000], [3, 0, 50, 9])
        self.expect_split_equals_whole(q, positions=positions, layout="thd")
        self.expect_split_equals_whole(q, positions=posenc.Positions.cu_seqlens([0, 400, 1000]),
                                       layout="thd")

    def test_attention_mask_splits_along_the_batch(self):
        q = rand((16, 64, 4, 64), seed=7)
        lengths = np.random.default_rng(8).integers(0, 65, size=16)
        mask = (np.arange(64)[None, :] >= 64 - lengths[:, None]).astype(np.int64)  # left pad
        self.expect_split_equals_whole(q, positions=posenc.Positions.attention_mask(mask))

    def test_dynamic_scaling_sees_the_whole_request(self):
        # Dynamic NTK depends on seq_len (largest position + 1): every part must use 1024.
        config = posenc.RopeConfig(max_position_embeddings=128,
                                   scaling=posenc.RopeScaling(type="dynamic", factor=2.0))
        got, _ = self.expect_split_equals_whole(rand((1, 1024, 2, 64), seed=9), config=config)
        self.assertEqual(got.derived.seq_len, 1024)
        longrope = posenc.RopeConfig(
            max_position_embeddings=8192,
            scaling=posenc.RopeScaling(type="longrope", original_max_position_embeddings=512,
                                       long_factor=[2.0] * 32, short_factor=[1.0] * 32))
        got, _ = self.expect_split_equals_whole(rand((1, 1024, 2, 64), seed=10),
                                                config=longrope)
        self.assertTrue(got.derived.longrope_long_factors)

    def test_hf_config(self):
        config = {"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 500000.0,
                  "max_position_embeddings": 4096,
                  "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 1024}}
        self.expect_split_equals_whole(rand((1, 1024, 2, 64), seed=11), config=config)

    def test_without_splitting_the_server_refuses(self):
        q = rand((1, 512, 8, 64))
        with posenc.Client(SMALL.address, split_requests=False) as client:
            with self.assertRaises(posenc.ResourceExhaustedError):
                client.apply_rope(q)

    def test_a_token_alone_over_the_limit_is_sent_whole(self):
        q = rand((1, 2, 1, 65536 + 2))  # 256 KiB per token
        before = small.count("ApplyRope")
        with self.assertRaises(posenc.PosencError) as cm:
            small.apply_rope(q, config=posenc.RopeConfig(rotary_dim=64))
        self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(small.count("ApplyRope") - before, 1)

    def test_small_requests_are_not_split(self):
        before = small.count("ApplyRope")
        small.apply_rope(rand((1, 16, 2, 64)))
        self.assertEqual(small.count("ApplyRope") - before, 1)


class BiasSplitTest(unittest.TestCase):
    def test_t5_full_with_an_inline_table_splits_along_heads(self):
        before = small.count("RelativeBias")
        got = small.relative_bias(128, 128, T5_TABLE, bidirectional=False, form="full")
        self.assertGreaterEqual(small.count("RelativeBias") - before, 4)
        want = big.relative_bias(128, 128, T5_TABLE, bidirectional=False, form="full")
        self.assertEqual(got.shape, (8, 128, 128))
        self.assertEqual(got.tobytes(), want.tobytes())
        got64 = small.relative_bias(100, 300, T5_TABLE, query_offset=17, dtype="float64",
                                    form="full")
        want64 = big.relative_bias(100, 300, T5_TABLE, query_offset=17, dtype="float64",
                                   form="full")
        self.assertEqual(got64.tobytes(), want64.tobytes())

    def test_t5_full_with_a_named_table_comes_compact(self):
        before = small.count("RelativeBias")
        got = small.relative_bias(128, 128, "t5")
        self.assertEqual(small.count("RelativeBias") - before, 1)
        want = big.relative_bias(128, 128, T5_TABLE)
        self.assertEqual(got.tobytes(), want.tobytes())

    def test_alibi_full_comes_compact(self):
        for kw in (dict(mode="causal"), dict(mode="symmetric", query_offset=-3),
                   dict(mode="causal", future="linear", dtype="float64"),
                   dict(mode="bloom", attention_mask=np.array([[1] * 100, [0] * 10 + [1] * 90]))):
            got = small.alibi_bias(16, 100, 100, form="full", **kw)
            want = big.alibi_bias(16, 100, 100, form="full", **kw)
            self.assertEqual(got.bias.shape, want.bias.shape)
            self.assertEqual(got.bias.tobytes(), want.bias.tobytes(), kw)
            np.testing.assert_array_equal(got.slopes, want.slopes)


if __name__ == "__main__":
    unittest.main()
