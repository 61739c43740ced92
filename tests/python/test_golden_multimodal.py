"""The multimodal golden cases (tests/golden_multimodal, #21) through the Python client and a
real posenc-server: get_rope_index position ids and decode steps (MultimodalPositions, exact),
the vision towers' patch positions (VisionPositions, exact) and their cos/sin tables and
rotations (RopeCache, ApplyRope), KV re-rotation (RerotateKeys) and M-RoPE application
(ApplyRope) in float64 within the case's atol and in float32 within 1e-6
relative, and the engines' one-table cache layouts (RopeCache FUSED_COS_SIN, COMPLEX) against
COMPACT. The same checks as tests/kernels/golden_multimodal_test.cc, here end to end over gRPC,
on the cpu and the reference backends.
"""

import itertools
import os
import unittest

import numpy as np

import posenc
from server import ROOT, BackendServers, load_golden_case

FLOAT32_RELATIVE = 1e-6
SHARED = BackendServers("--threads=2")
CLIENTS = SHARED.clients
tearDownModule = SHARED.stop


def setUpModule():
    SHARED.start(("cpu", "reference"))


def golden_dir():
    return (os.environ.get("POSENC_GOLDEN_MULTIMODAL_DIR")
            or os.path.join(ROOT, "tests", "golden_multimodal"))


def load_cases(function):
    root = golden_dir()
    out = []
    for name in sorted(os.listdir(root)):
        if not os.path.isfile(os.path.join(root, name, "case.json")):
            continue
        case = load_golden_case(os.path.join(root, name))
        if case["function"] == function:
            out.append(case)
    return out


def token_ids(params):
    keys = ("image_token_id", "video_token_id", "vision_start_token_id",
            "video_start_token_id", "video_end_token_id")
    return {k: params[k] for k in keys if k in params}


class GoldenMultimodalTest(unittest.TestCase):

    def assert_near(self, got, want, dtype, atol, scale, what):
        tol = FLOAT32_RELATIVE * max(1.0, scale) if dtype == "float32" else atol
        diff = np.abs(np.asarray(got, dtype=np.float64) - want)
        self.assertEqual(np.asarray(got).shape, want.shape, what)
        self.assertLessEqual(float(diff.max()), tol, what)

    def test_rope_index_every_case_exact(self):
        cases = load_cases("mrope_rope_index")
        self.assertGreaterEqual(len(cases), 8)
        for backend, client in CLIENTS.items():
            for c in cases:
                p, i = c["params"], c["inputs"]
                with self.subTest(case=c["name"], backend=backend):
                    r = client.multimodal_positions(
                        i["input_ids"], family=p["model"], token_ids=token_ids(p),
                        spatial_merge_size=p["spatial_merge_size"],
                        tokens_per_second=p.get("tokens_per_second"),
                        attention_mask=i.get("attention_mask"),
                        image_grid_thw=i.get("image_grid_thw"),
                        video_grid_thw=i.get("video_grid_thw"),
                        second_per_grid_ts=i.get("second_per_grid_ts"))
                    np.testing.assert_array_equal(r.position_ids, c["outputs"]["position_ids"])
                    np.testing.assert_array_equal(r.mrope_position_deltas,
                                                  c["outputs"]["mrope_position_deltas"])
                    self.assertEqual(r.family, posenc.MultimodalFamily[p["model"].upper()])
                    self.assertIn("get_rope_index", r.source)

    def test_family_from_config_json(self):
        c = load_cases("mrope_rope_index")[0]
        p, i = c["params"], c["inputs"]
        config = dict(token_ids(p), model_type=p["model"],
                      vision_config={"spatial_merge_size": p["spatial_merge_size"]})
        r = CLIENTS["cpu"].multimodal_positions(
            i["input_ids"], config=config, attention_mask=i.get("attention_mask"),
            image_grid_thw=i.get("image_grid_thw"), video_grid_thw=i.get("video_grid_thw"),
            second_per_grid_ts=i.get("second_per_grid_ts"),
            tokens_per_second=p.get("tokens_per_second"))
        np.testing.assert_array_equal(r.position_ids, c["outputs"]["position_ids"])

    def test_ernie_family_and_temporal_merge_from_config_json(self):
        # hand_ernie45vl_one_video: a video [4, 4, 6], 2 frames after merging t by 2. The
        # config.json's model_type picks ERNIE-4.5-VL, its vision_config the merge sizes, its top
        # level the token ids; temporal_merge_size 1 reads the same grid as 4 frames.
        c = next(c for c in load_cases("mrope_rope_index")
                 if c["name"] == "hand_ernie45vl_one_video")
        p, i = c["params"], c["inputs"]
        config = dict(token_ids(p), model_type="ernie4_5_vl_moe",
                      vision_config={"spatial_merge_size": 2, "temporal_merge_size": 2})
        r = CLIENTS["cpu"].multimodal_positions(i["input_ids"], config=config,
                                                video_grid_thw=i["video_grid_thw"])
        self.assertEqual(r.family, posenc.MultimodalFamily.ERNIE4_5_VL)
        np.testing.assert_array_equal(r.position_ids, c["outputs"]["position_ids"])
        with self.assertRaises(posenc.InvalidArgumentError) as e:
            CLIENTS["cpu"].multimodal_positions(i["input_ids"], config=config,
                                                video_grid_thw=i["video_grid_thw"],
                                                temporal_merge_size=1)
        self.assertIn("expected 24 video tokens (6), got 12", str(e.exception))

    def test_decode_every_case_exact(self):
        cases = load_cases("mrope_decode_position_ids")
        self.assertGreaterEqual(len(cases), 2)
        for (backend, client), c in itertools.product(CLIENTS.items(), cases):
            with self.subTest(case=c["name"], backend=backend):
                r = client.multimodal_decode(
                    c["inputs"]["mrope_position_deltas"], c["params"]["prompt_length"],
                    c["params"]["num_steps"], family=c["params"]["model"])
                np.testing.assert_array_equal(r.position_ids, c["outputs"]["position_ids"])
                self.assertIsNone(r.mrope_position_deltas)

    def test_grid_disagreeing_with_tokens_names_the_span(self):
        c = load_cases("mrope_rope_index")[0]
        grids = np.array(c["inputs"]["image_grid_thw"])
        grids[0, 1] += 2 * c["params"]["spatial_merge_size"]
        with self.assertRaises(posenc.InvalidArgumentError) as e:
            CLIENTS["cpu"].multimodal_positions(
                c["inputs"]["input_ids"], family=c["params"]["model"],
                token_ids=token_ids(c["params"]), image_grid_thw=grids,
                video_grid_thw=c["inputs"].get("video_grid_thw"),
                attention_mask=c["inputs"].get("attention_mask"))
        self.assertIn("input_ids[", str(e.exception))
        self.assertIn("expected", str(e.exception))

    def test_qwen_vision_positions_and_windows_exact(self):
        cases = load_cases("qwen_vision_rope") + load_cases("qwen25vl_vision_window_rope")
        self.assertGreaterEqual(len(cases), 3)
        for c in cases:
            p = c["params"]
            with self.subTest(case=c["name"]):
                r = CLIENTS["cpu"].vision_positions(
                    c["inputs"]["grid_thw"], tower="qwen",
                    spatial_merge_size=p["spatial_merge_size"],
                    window_size=p.get("window_size", 0), patch_size=p.get("patch_size"))
                # transformers' pos_ids are [L, 2] (row, col) pairs.
                np.testing.assert_array_equal(r.position_ids.T, c["outputs"]["pos_ids"])
                if "window_index" in c["outputs"]:
                    np.testing.assert_array_equal(r.window_index, c["outputs"]["window_index"])
                    np.testing.assert_array_equal(r.cu_window_seqlens,
                                                  c["outputs"]["cu_window_seqlens"])
                else:
                    self.assertIsNone(r.window_index)

    def test_pixtral_flat_ids_exact(self):
        for c in load_cases("pixtral_rope_2d"):
            p = c["params"]
            r = CLIENTS["cpu"].vision_positions(c["inputs"]["patch_grid_hw"], tower="pixtral",
                                                patch_size=p["patch_size"],
                                                image_size=p["image_size"])
            np.testing.assert_array_equal(r.flat_ids, c["outputs"]["position_ids"])
            self.assertEqual(r.position_ids.shape, (2, r.flat_ids.size))

    def test_rerotate_keys_every_case(self):
        cases = load_cases("kv_rerotate")
        self.assertGreaterEqual(len(cases), 3)
        for backend, client in CLIENTS.items():
            for c in cases:
                p, i = c["params"], c["inputs"]
                config = posenc.RopeConfig(head_dim=p["head_dim"], rotary_dim=p["rotary_dim"],
                                           base=p["rope_theta"])
                for dtype in ("float64", "float32"):
                    with self.subTest(case=c["name"], backend=backend, dtype=dtype):
                        r = client.rerotate_keys(i["k"].astype(dtype), i["delta"],
                                                 positions=i["positions"], config=config,
                                                 layout="thd")
                        self.assertEqual(r.k.dtype, np.dtype(dtype))
                        self.assert_near(r.k, c["outputs"]["k_rerotated"], dtype,
                                         c["tolerance"]["atol"], float(np.abs(i["k"]).max()),
                                         c["name"])

    def test_mrope_apply_every_case(self):
        cases = load_cases("mrope_apply")
        self.assertGreaterEqual(len(cases), 4)
        for c in cases:
            p, i = c["params"], c["inputs"]
            glm = p["model"] == "glm4v"
            config = posenc.RopeConfig(
                head_dim=p["head_dim"], base=p["rope_theta"], mrope_section=p["mrope_section"],
                mrope_layout="interleaved" if p["model"] == "qwen3_vl" else None,
                style="gptj" if glm else None, rotary_dim=p["rotary_dim"] if glm else None)
            scale = float(max(np.abs(i["q"]).max(), np.abs(i["k"]).max()))
            runs = itertools.product(CLIENTS.items(), ("float64", "float32"))
            for (backend, client), dtype in runs:
                with self.subTest(case=c["name"], dtype=dtype, backend=backend):
                    r = client.apply_rope(i["q"].astype(dtype), i["k"].astype(dtype),
                                          positions=i["position_ids"], config=config,
                                          layout="bhsd")
                    self.assert_near(r.q, c["outputs"]["q_embed"], dtype,
                                     c["tolerance"]["atol"], scale, c["name"] + " q")
                    self.assert_near(r.k, c["outputs"]["k_embed"], dtype,
                                     c["tolerance"]["atol"], scale, c["name"] + " k")

    def rope_at_ids(self, client, c, ids, config, layout, qk_layout):
        """RopeCache (cos, sin in ``layout``) and ApplyRope (the case's q and k, if any) at
        ``ids`` against the case, in float64 and float32 (as the C++ client's
        ExpectRopeAtIds)."""
        i, out, atol = c["inputs"], c["outputs"], c["tolerance"]["atol"]
        for dtype in ("float64", "float32"):
            cos, sin, _ = client.rope_cache(ids, config, dtype=dtype, layout=layout)
            self.assert_near(cos, out["cos"], dtype, atol, 1.0, c["name"] + " cos")
            self.assert_near(sin, out["sin"], dtype, atol, 1.0, c["name"] + " sin")
            if "q" not in i:
                continue
            q, k = i["q"], i["k"]
            if q.ndim == 3:  # [L, H, D]: one sequence
                q, k = q[None], k[None]
            r = client.apply_rope(q.astype(dtype), k.astype(dtype), positions=ids,
                                  config=config, layout=qk_layout)
            scale = float(max(np.abs(q).max(), np.abs(k).max()))
            self.assert_near(r.q.reshape(out["q_embed"].shape), out["q_embed"], dtype, atol,
                             scale, c["name"] + " q")
            self.assert_near(r.k.reshape(out["k_embed"].shape), out["k_embed"], dtype, atol,
                             scale, c["name"] + " k")

    def test_vision_cos_sin_every_case(self):
        # The towers' tables: the patch ids from vision_positions, then rope_cache and
        # apply_rope with the tower's 2-D layout (Qwen, Qwen2.5-VL window order, Pixtral,
        # Llama 4), on both backends.
        qwen = load_cases("qwen_vision_rope") + load_cases("qwen25vl_vision_window_rope")
        pixtral, llama4 = load_cases("pixtral_rope_2d"), load_cases("llama4_vision_rope")
        self.assertGreaterEqual(len(qwen), 3)
        self.assertTrue(pixtral and llama4)
        for backend, client in CLIENTS.items():
            for c in qwen:
                p = c["params"]
                with self.subTest(case=c["name"], backend=backend):
                    ids = client.vision_positions(
                        c["inputs"]["grid_thw"], tower="qwen",
                        spatial_merge_size=p["spatial_merge_size"],
                        window_size=p.get("window_size", 0),
                        patch_size=p.get("patch_size")).position_ids
                    config = posenc.RopeConfig(head_dim=p["vision_head_dim"], base=p["theta"],
                                               mrope_layout="vision_2d")
                    self.rope_at_ids(client, c, ids, config, "neox", "bshd")
            for c, pix in [(c, True) for c in pixtral] + [(c, False) for c in llama4]:
                p = c["params"]
                with self.subTest(case=c["name"], backend=backend):
                    ids = client.vision_positions(
                        c["inputs"]["patch_grid_hw"] if pix else None,
                        tower="pixtral" if pix else "llama4", patch_size=p["patch_size"],
                        image_size=p["image_size"]).position_ids
                    config = posenc.RopeConfig(
                        head_dim=p["head_dim"], base=p["rope_theta"],
                        mrope_layout="vision_2d_even_odd" if pix else "vision_2d",
                        style=None if pix else "gptj")
                    self.rope_at_ids(client, c, ids, config, "neox" if pix else "compact",
                                     "bhsd" if pix else "bshd")

    def test_fused_cache_layouts_are_compact_rearranged(self):
        config = posenc.RopeConfig(head_dim=64, base=10000.0)
        client = CLIENTS["cpu"]
        compact = client.rope_cache(np.arange(7), config, layout="compact")
        fused = client.rope_cache(np.arange(7), config, layout="fused_cos_sin")
        cis = client.rope_cache(np.arange(7), config, layout="complex")
        # The one table in its own field, cos and sin None (as the C++ client's RopeCacheResult).
        self.assertEqual((fused.cos, fused.sin, fused.freqs_cis), (None, None, None))
        self.assertEqual((cis.cos, cis.sin, cis.cos_sin), (None, None, None))
        self.assertIsNone(compact.cos_sin)
        self.assertEqual(fused.cos_sin.dtype, np.float32)
        self.assertEqual(fused.cos_sin.shape, (7, 64))
        self.assertEqual(cis.freqs_cis.shape, (7, 32, 2))
        np.testing.assert_array_equal(fused.cos_sin,
                                      np.concatenate([compact.cos, compact.sin], axis=-1))
        np.testing.assert_array_equal(cis.freqs_cis,
                                      np.stack([compact.cos, compact.sin], axis=-1))
        complex_table = cis.freqs_cis.view(np.complex64)[..., 0]  # the documented complex view
        np.testing.assert_array_equal(complex_table, compact.cos + 1j * compact.sin)


if __name__ == "__main__":
    unittest.main()
