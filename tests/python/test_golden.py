"""Every golden case of tests/golden through the Python client and a real posenc-server.

The same checks and per-dtype tolerances as tests/kernels/golden_test.cc (the C++ golden test),
here end to end over gRPC, against two servers: the default cpu backend and the float64
reference backend. POSENC_GOLDEN_BACKENDS (comma-separated, e.g. "cuda") picks other backends:
tests/bench/run_cuda.sh runs the cases through a cuda server with every call on the GPU.
"""

import os
import unittest

import numpy as np

import posenc
from server import BackendServers, golden_dir, load_golden_case

SHARED = BackendServers("--threads=2")
CLIENTS = SHARED.clients
tearDownModule = SHARED.stop


def setUpModule():
    backends = os.environ.get("POSENC_GOLDEN_BACKENDS", "cpu,reference").split(",")
    # cuda: no call is small enough for the cpu backend to take it.
    SHARED.start(backends, extra={"cuda": ["--cuda_small_call_bytes=0"]})


def list_cases():
    root = golden_dir()
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "case.json")))


def load_case(name):
    return load_golden_case(os.path.join(golden_dir(), name))


def as_f64(a):
    """A result widened to float64 (bfloat16 from its bits or from ml_dtypes)."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return posenc.bf16_to_float32(a).astype(np.float64)
    if posenc.HAVE_ML_DTYPES and a.dtype == posenc.BFLOAT16_DTYPE:
        return a.astype(np.float32).astype(np.float64)
    return a.astype(np.float64)


def in_dtype(x, dtype):
    """float64 golden input x converted to `dtype` the way the C++ test does (rounded from
    double; bfloat16 as bit patterns)."""
    if dtype == "bfloat16":
        bits = posenc.float32_to_bf16(x)
        return bits.view(posenc.BFLOAT16_DTYPE) if posenc.HAVE_ML_DTYPES else bits
    return x.astype(dtype)


def phase_tolerance(p):
    """Float64 tolerance of the golden README for a phase at position p (array-wise)."""
    p = np.asarray(p, dtype=np.float64)
    return np.where(p <= 2**17, 1e-10, np.where(p <= 2**24, 1e-8, 1e-7))


def expect_near(test, got, want, tol, what):
    got = as_f64(got).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    test.assertEqual(got.size, want.size, what)
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64).reshape(-1) if np.ndim(tol) else tol,
                          want.shape)
    inf = np.isinf(want)
    bad_inf = np.nonzero(inf & (got != want))[0]
    test.assertEqual(bad_inf.size, 0, f"{what}: infinities differ at {bad_inf[:5]}")
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf (checked above)
        diff = np.abs(got - want)
    bad = np.nonzero(~inf & ~(diff <= tol))[0]
    if bad.size:
        lines = [f"[{i}]: got {got[i]!r}, want {want[i]!r} (diff {diff[i]:.3g} > {tol[i]:.3g})"
                 for i in bad[:5]]
        test.fail(f"{what}: {bad.size} elements out of tolerance\n" + "\n".join(lines))


def rope_config(head_dim, rotary_dim, base, scaling):
    """A golden (Hugging Face style) scaling dict into a RopeConfig, as MakeRopeConfig in
    tests/kernels/golden_test.cc."""
    config = posenc.RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim, base=base)
    if not scaling:
        return config
    s = posenc.RopeScaling(type=scaling.get("rope_type", scaling.get("type", "default")))
    for key in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "attention_factor", "low_freq_factor", "high_freq_factor"):
        if key in scaling:
            setattr(s, key, float(scaling[key]))
    if "truncate" in scaling:
        s.truncate = bool(scaling["truncate"])
    if "original_max_position_embeddings" in scaling:
        s.original_max_position_embeddings = int(scaling["original_max_position_embeddings"])
    s.long_factor = scaling.get("long_factor", ())
    s.short_factor = scaling.get("short_factor", ())
    config.scaling = s
    if "max_position_embeddings" in scaling:
        config.max_position_embeddings = int(scaling["max_position_embeddings"])
    if "seq_len" in scaling:
        config.seq_len = int(scaling["seq_len"])
    return config


# ---------------------------------------------------------------------------------------------
# One check per golden function (each runs against every server).
# ---------------------------------------------------------------------------------------------
def check_sinusoidal(test, client, c):
    pos = c["inputs"]["positions"]
    p = c["params"]
    dim = int(p["dim"])
    for dtype, f32_tol in (("float64", None), ("float32", 1e-6)):
        table = client.sinusoidal(posenc.Positions.ids(pos), dim, base=p.get("base", 10000.0),
                                  layout=p.get("layout", "interleaved"),
                                  freq_scheme=p.get("freq_scheme") or None, dtype=dtype)
        test.assertEqual(table.dtype, np.dtype(dtype))
        test.assertEqual(table.shape, c["outputs"]["table"].shape)
        tol = (np.repeat(phase_tolerance(pos.reshape(-1)), dim) if dtype == "float64" else f32_tol)
        expect_near(test, table, c["outputs"]["table"], tol, f"{c['name']} table {dtype}")


def check_inv_freq(test, client, c):
    p = c["params"]
    dim = int(p["dim"])
    config = rope_config(dim, None, p.get("base", 10000.0), p.get("scaling"))
    result = client.rope_cache(range(0, 1), config, dtype="float64")
    want = c["outputs"]["inv_freq"]
    expect_near(test, result.derived.inv_freq, want, 1e-14 * np.abs(want),
                f"{c['name']} inv_freq")
    m = float(c["outputs"]["attention_scaling"].reshape(-1)[0])
    test.assertAlmostEqual(result.derived.attention_factor, m, delta=1e-14 * abs(m))


def check_cos_sin(test, client, c):
    pos = c["inputs"]["positions"]
    p = c["params"]
    dim = int(p["dim"])
    config = rope_config(dim, None, p.get("base", 10000.0), p.get("scaling"))
    layout = "gptj" if p.get("layout", "neox") == "gptj" else "neox"
    for dtype in ("float64", "float32"):
        cos, sin, derived = client.rope_cache(posenc.Positions.ids(pos), config, dtype=dtype,
                                              layout=layout)
        m = max(1.0, derived.attention_factor)
        tol = (np.repeat(phase_tolerance(pos.reshape(-1)), dim) * m if dtype == "float64"
               else 1e-6 * m)
        what = f"{c['name']} {dtype}"
        expect_near(test, cos, c["outputs"]["cos"], tol, what + " cos")
        expect_near(test, sin, c["outputs"]["sin"], tol, what + " sin")


def check_apply_rope(test, client, c):
    x = c["inputs"]["x"]
    pos = c["inputs"]["positions"]
    p = c["params"]
    seq_axis = p.get("seq_axis", -3)
    shape = list(x.shape)
    # Bring every golden layout to rank 4, as the C++ test.
    while len(shape) < 4:
        if len(shape) == 2:
            shape.insert(1 if seq_axis == -2 else 0, 1)  # [S, D] -> [S, 1, D]
        else:
            shape.insert(0, 1)
    layout = "bshd" if seq_axis == -3 or x.ndim == 2 else "bhsd"
    config = rope_config(shape[-1], p.get("rotary_dim", shape[-1]), p.get("base", 10000.0),
                         p.get("scaling"))
    config.style = p.get("style", "neox")
    max_abs = float(np.max(np.abs(x)))
    max_pos = float(np.max(pos))
    for dtype, rel_tol in (("float64", None), ("float32", 2e-6), ("float16", 2e-3),
                           ("bfloat16", 1.6e-2)):
        q = in_dtype(x.reshape(shape), dtype)
        y, k, derived = client.apply_rope(q, positions=posenc.Positions.ids(pos), config=config,
                                          layout=layout)
        test.assertIsNone(k)
        test.assertEqual(y.dtype, q.dtype)
        test.assertEqual(y.shape, q.shape)
        scale = max(1.0, derived.attention_factor) * max_abs
        tol = float(phase_tolerance(max_pos)) * scale if dtype == "float64" else rel_tol * scale
        expect_near(test, y, c["outputs"]["y"], tol, f"{c['name']} y {dtype}")


def check_alibi_slopes(test, client, c):
    for n in c["params"]["num_heads_list"]:
        slopes = client.alibi_slopes(n, dtype="float64")
        want = c["outputs"][f"slopes_h{n}"]
        expect_near(test, slopes, want, 1e-14 * want, f"{c['name']} h{n}")


def check_alibi_bias(test, client, c):
    p = c["params"]
    want = c["outputs"]["bias"]
    for dtype, rel in (("float64", 1e-12), ("float32", 1e-6)):
        bias, slopes = client.alibi_bias(p["num_heads"], p["q_len"], p["k_len"],
                                         query_offset=p.get("q_offset"),
                                         mode=p.get("mode", "causal"),
                                         future=p.get("future", "mask"), dtype=dtype)
        test.assertEqual(bias.shape, want.shape)
        test.assertEqual(slopes.shape, (p["num_heads"],))
        tol = rel * np.maximum(1.0, np.where(np.isinf(want), 1.0, np.abs(want)))
        expect_near(test, bias, want, tol, f"{c['name']} {dtype}")


def check_bloom_tensor(test, client, c):
    mask = c["inputs"]["attention_mask"]
    heads = c["params"]["num_heads"]
    bias, _ = client.alibi_bias(heads, 1, mask.shape[1], mode="bloom", form="compact",
                                attention_mask=mask, dtype="float64", expand=False)
    test.assertEqual(bias.shape, (mask.shape[0], heads, mask.shape[1]))
    want = c["outputs"]["alibi"]
    expect_near(test, bias.reshape(want.shape), want, 1e-12 * np.maximum(1.0, np.abs(want)),
                c["name"])


def check_t5_bucket(test, client, c):
    rp = c["inputs"]["relative_position"].astype(np.int64).reshape(-1)
    p = c["params"]
    # The relative positions reach +-2^24: ask for windows of keys around them. One query at
    # 0 and keys at lo .. lo + n - 1: key j has relative position lo + j.
    got = np.full(rp.shape, -1, dtype=np.int64)
    todo = np.unique(rp)
    while todo.size:
        lo = int(todo[0])
        n = int(todo[todo < lo + 4096].max()) - lo + 1
        buckets = client.relative_bias(1, n, query_offset=0, key_offset=lo,
                                       bidirectional=p["bidirectional"],
                                       num_buckets=p["num_buckets"],
                                       max_distance=p["max_distance"], form="buckets")
        test.assertEqual(buckets.dtype, np.int32)
        inside = (rp >= lo) & (rp < lo + n)
        got[inside] = buckets[0, rp[inside] - lo]
        todo = todo[todo >= lo + n]
    np.testing.assert_array_equal(got, c["outputs"]["bucket"].reshape(-1), err_msg=c["name"])


def check_t5_bias(test, client, c):
    p = c["params"]
    table = c["inputs"]["table"]
    want = c["outputs"]["bias"]
    for dtype in ("float64", "float32"):
        bias = client.relative_bias(p["q_len"], p["k_len"], table,
                                    query_offset=p.get("q_offset"),
                                    key_offset=p.get("k_offset", 0),
                                    bidirectional=p.get("bidirectional", True),
                                    num_buckets=p.get("num_buckets", 32),
                                    max_distance=p.get("max_distance", 128), dtype=dtype)
        tol = 0.0 if dtype == "float64" else 1e-7 * np.abs(want)
        expect_near(test, bias, want, tol, f"{c['name']} {dtype}")


CHECKS = {
    "sinusoidal_table": check_sinusoidal,
    "rope_inv_freq": check_inv_freq,
    "rope_cos_sin": check_cos_sin,
    "apply_rope": check_apply_rope,
    "alibi_slopes": check_alibi_slopes,
    "alibi_bias": check_alibi_bias,
    "bloom_alibi_tensor": check_bloom_tensor,
    "t5_relative_position_bucket": check_t5_bucket,
    "t5_bias": check_t5_bias,
}


class GoldenTest(unittest.TestCase):
    """One test per golden case (added below), each against every server."""

    def test_golden_dir_has_every_case(self):
        self.assertGreaterEqual(len(list_cases()), 36, f"golden cases not found in {golden_dir()}")


def _make_test(name):
    def test(self):
        case = load_case(name)
        check = CHECKS.get(case["function"])
        self.assertIsNotNone(check, f"{name}: unknown golden function {case['function']}")
        for backend, client in CLIENTS.items():
            with self.subTest(backend=backend):
                check(self, client, case)

    test.__doc__ = f"golden case {name}"
    return test


for _name in list_cases():
    setattr(GoldenTest, f"test_{_name}", _make_test(_name))

if __name__ == "__main__":
    unittest.main()
