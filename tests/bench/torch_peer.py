#!/usr/bin/python3
"""The PyTorch peer: the same operations written the way users write them today (PyTorch eager,
in the style of Hugging Face transformers), timed at the shapes of posenc_bench.cc.

Prints one JSON object per line: {"name", "threads", "seconds", "bytes" or "items", ...}.
Run by tests/bench/run_bench.sh with Debian's python3 (python3-torch, python3-numpy).
"""
import json
import math
import sys
import time

import torch


def timeit(fn, min_time=1.0, min_iters=3):
    fn()  # warm up (allocations, first touch)
    iters, start = 0, time.perf_counter()
    while True:
        fn()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and iters >= min_iters:
            return elapsed / iters


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):  # GPT-J
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope_tables(n, d, base=10000.0, dtype=torch.float32, device="cpu"):
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
    t = torch.arange(n, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope_step(b, s, h, d, gptj, dtype, device="cpu"):
    """Random q and k of shape [b, s, h, d] and a function rotating both as transformers does
    (q * cos + rotate(q) * sin); torch_cuda_peer.py times the same step on the GPU."""
    q = torch.randn(b, s, h, d, device=device).to(dtype)
    k = torch.randn(b, s, h, d, device=device).to(dtype)
    cos, sin = rope_tables(s, d, dtype=dtype, device=device)
    if gptj:
        cos = cos[:, : d // 2].repeat_interleave(2, dim=-1)
        sin = sin[:, : d // 2].repeat_interleave(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    rot = rotate_every_two if gptj else rotate_half

    def run():
        qe = q * cos + rot(q) * sin
        ke = k * cos + rot(k) * sin
        return qe, ke

    return run


def bench_apply(b, s, h, d, gptj, dtype, threads):
    sec = timeit(apply_rope_step(b, s, h, d, gptj, dtype))
    elem = 2 * b * s * h * d
    size = torch.finfo(dtype).bits // 8
    return {"name": f"ApplyRope/b:{b}/s:{s}/h:{h}/d:{d}/rot:{d}/gptj:{int(gptj)}/dtype:{dtype}",
            "threads": threads, "seconds": sec, "bytes": elem * 2 * size}


def bench_rope_cache(n, d, threads):
    sec = timeit(lambda: rope_tables(n, d))
    return {"name": f"RopeCache/n:{n}/d:{d}", "threads": threads, "seconds": sec,
            "items": 2 * n * d}


def bench_sinusoidal(n, d, threads):
    def run():
        pos = torch.arange(n, dtype=torch.float32)[:, None]
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
        pe = torch.zeros(n, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        return pe
    sec = timeit(run)
    return {"name": f"Sinusoidal/n:{n}/d:{d}", "threads": threads, "seconds": sec, "items": n * d}


def alibi_slopes(n):
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + pow2(2 * c)[0::2][: n - c]


def bench_alibi(h, q, k, threads):
    slopes = torch.tensor(alibi_slopes(h))

    def run():
        qpos = torch.arange(k - q, k)[:, None]
        kpos = torch.arange(k)[None, :]
        rel = (kpos - qpos).float()
        bias = slopes[:, None, None] * rel[None]
        return bias.masked_fill(rel[None] > 0, float("-inf"))
    sec = timeit(run)
    return {"name": f"AlibiBias/h:{h}/q:{q}/k:{k}", "threads": threads, "seconds": sec,
            "bytes": h * q * k * 4}


def t5_bucket(rp, bidirectional=True, num_buckets=32, max_distance=128):
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += (rp > 0).to(torch.long) * num_buckets
        n = torch.abs(rp)
    else:
        n = -torch.min(rp, torch.zeros_like(rp))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, n, large)


def bench_t5(h, q, k, threads):
    table = torch.randn(32, h)

    def run():
        rp = torch.arange(k)[None, :] - torch.arange(k - q, k)[:, None]
        buckets = t5_bucket(rp)
        return table[buckets].permute(2, 0, 1).contiguous()
    sec = timeit(run)
    return {"name": f"RelativeBias/h:{h}/q:{q}/k:{k}", "threads": threads, "seconds": sec,
            "bytes": h * q * k * 4}


def accuracy():
    """PyTorch's fp32 tables against float64 truth at large positions (README "Accuracy")."""
    out = {}
    for p in (4096, 65536, 1000000, 2 ** 31 - 1):
        d = 128
        cos32, _ = rope_tables(1, d)  # shape only
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        t = torch.tensor([float(p)], dtype=torch.float32)
        c32 = torch.outer(t, inv_freq).cos()
        inv64 = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        c64 = torch.outer(torch.tensor([float(p)], dtype=torch.float64), inv64).cos()
        out[str(p)] = float((c32.double() - c64).abs().max())
    return out


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    results = []
    for shape in ((1, 4096, 32, 128), (8, 2048, 32, 128)):
        for gptj in (False, True):
            results.append(bench_apply(*shape, gptj, torch.float32, threads))
    for dtype in (torch.float16, torch.bfloat16):
        results.append(bench_apply(1, 4096, 32, 128, False, dtype, threads))
    for n in (4096, 32768, 131072):
        results.append(bench_rope_cache(n, 128, threads))
    results.append(bench_sinusoidal(8192, 1024, threads))
    results.append(bench_alibi(32, 2048, 2048, threads))
    results.append(bench_t5(32, 2048, 2048, threads))
    for r in results:
        print(json.dumps(r), flush=True)
    if threads == 1:
        print(json.dumps({"name": "accuracy_fp32_cos_max_abs_error", "errors": accuracy()}))


if __name__ == "__main__":
    main()
