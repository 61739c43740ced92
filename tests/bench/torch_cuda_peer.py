#!/usr/bin/env python3
"""The PyTorch peer on the GPU: the operations of cuda_bench.cc written the way users write them
(PyTorch eager, Hugging Face transformers style), on CUDA tensors, timed with CUDA events.

Prints one JSON object per line: {"name", "shape", "dtype", "ms", "GBps"} with the same byte
conventions as cuda_bench.cc (ApplyRope: q and k read + written; tables and biases: written).
Exits 0 with a note on stderr when torch with CUDA is not importable.
Run by tests/bench/run_cuda.sh.
"""
import json
import sys

try:
    import torch
except ImportError:
    print("torch_cuda_peer: torch is not installed; skipped", file=sys.stderr)
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch_cuda_peer: torch has no CUDA device; skipped", file=sys.stderr)
    sys.exit(0)

from torch_peer import apply_rope_step, rope_tables  # noqa: E402 (after the torch check)

DTYPES = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}


def time_ms(fn, iters=20):
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def report(name, shape, dtype, ms, nbytes):
    print(json.dumps({"name": name, "shape": shape, "dtype": str(dtype).replace("torch.", ""),
                      "ms": ms, "GBps": nbytes / (ms / 1e3) / 1e9}), flush=True)


def apply_rope(b, s, h, d, gptj, dt):
    dtype = DTYPES[dt]
    run = apply_rope_step(b, s, h, d, gptj, dtype, device="cuda")
    report("ApplyRope" + (" gptj" if gptj else " neox"), [b, s, h, d], dtype, time_ms(run),
           2 * 2 * b * s * h * d * torch.tensor([], dtype=dtype).element_size())


def rope_cache(n, d, dt):
    dtype = DTYPES[dt]
    ms = time_ms(lambda: rope_tables(n, d, dtype=dtype, device="cuda"))
    report("RopeCache", [n, d], dtype, ms, 2 * n * d * torch.tensor([], dtype=dtype).element_size())


def alibi_slopes(h):
    import math
    c = 2 ** math.floor(math.log2(h))
    s = [2 ** (-8.0 * i / c) for i in range(1, c + 1)]
    s += [2 ** (-4.0 * (2 * i - 1) / c) for i in range(1, h - c + 1)]
    return torch.tensor(s, device="cuda")


def alibi(h, q, k, dt):
    dtype = DTYPES[dt]
    slopes = alibi_slopes(h)

    def run():
        qpos = torch.arange(k - q, k, device="cuda")[:, None]
        kpos = torch.arange(k, device="cuda")[None, :]
        rel = (kpos - qpos).float()
        bias = slopes[:, None, None] * rel[None]
        return bias.masked_fill(rel[None] > 0, float("-inf")).to(dtype)

    report("AlibiBias", [h, q, k], dtype, time_ms(run),
           h * q * k * torch.tensor([], dtype=dtype).element_size())


def t5(h, q, k, dt, num_buckets=32, max_distance=128):
    import math
    dtype = DTYPES[dt]
    table = torch.randn(num_buckets, h, device="cuda")

    def run():
        rel = torch.arange(k, device="cuda")[None, :] - torch.arange(q, device="cuda")[:, None]
        nb = num_buckets // 2
        bucket = (rel > 0).long() * nb
        n = rel.abs()
        exact = nb // 2
        large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                         * (nb - exact)).long()
        large = torch.minimum(large, torch.full_like(large, nb - 1))
        bucket = bucket + torch.where(n < exact, n, large)
        return table[bucket].permute(2, 0, 1).to(dtype)

    report("RelativeBias", [h, q, k], dtype, time_ms(run),
           h * q * k * torch.tensor([], dtype=dtype).element_size())


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", file=sys.stderr)
    for args in [(1, 4096, 32, 128, 0, 0), (1, 4096, 32, 128, 1, 0), (8, 2048, 32, 128, 0, 0),
                 (1, 4096, 32, 128, 0, 1), (1, 4096, 32, 128, 0, 2), (64, 1, 32, 128, 0, 0),
                 (16, 4096, 32, 128, 0, 2), (16, 4096, 32, 128, 0, 0)]:
        apply_rope(*args)
    for n in (4096, 32768, 131072, 1048576):
        for dt in (0, 2):
            rope_cache(n, 128, dt)
    for args in [(32, 2048, 2048, 0), (32, 2048, 2048, 2), (32, 8192, 8192, 0),
                 (32, 8192, 8192, 2)]:
        alibi(*args)
    for args in [(32, 2048, 2048, 0), (32, 2048, 2048, 2), (32, 8192, 8192, 0)]:
        t5(*args)


if __name__ == "__main__":
    main()
