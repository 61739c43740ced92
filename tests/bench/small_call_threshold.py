#!/usr/bin/env python3
"""Reads cuda_bench's JSON (--benchmark_out) and prints BM_SmallCallApplyRope side by side: the
same ApplyRope call end to end on the cpu and on the cuda backend, by the bytes the server
compares with --cuda_small_call_bytes, and the smallest size from which cuda is faster at every
larger size: the value to pass. Run by tests/bench/run_cuda.sh; standard library only.

Usage: small_call_threshold.py CUDA_BENCH_JSON
"""
import json
import re
import sys

UNIT_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def main():
    with open(sys.argv[1]) as f:
        runs = json.load(f)["benchmarks"]
    times = {}  # call_bytes -> {backend: microseconds}
    for r in runs:
        m = re.match(r"BM_SmallCallApplyRope/cuda:(\d)/s:(\d+)", r["name"])
        if not m or r.get("error_occurred") or "call_bytes" not in r:
            continue
        backend = "cuda" if m.group(1) == "1" else "cpu"
        us = r["real_time"] * UNIT_US[r["time_unit"]]
        times.setdefault(int(r["call_bytes"]), {})[backend] = us
    rows = sorted((b, t) for b, t in times.items() if "cpu" in t and "cuda" in t)
    if not rows:
        print("no cpu + cuda pairs of BM_SmallCallApplyRope (no device?)")
        return
    print(f"{'call bytes':>12} {'cpu us':>10} {'cuda us':>10} {'cuda/cpu':>9}")
    for b, t in rows:
        print(f"{b:>12} {t['cpu']:>10.1f} {t['cuda']:>10.1f} {t['cuda'] / t['cpu']:>9.2f}")
    threshold = None
    for i, (b, _) in enumerate(rows):
        if all(t["cuda"] < t["cpu"] for _, t in rows[i:]):
            threshold = b
            break
    if threshold is None:
        print("cuda is not faster at the largest size measured: keep calls on the cpu backend "
              "(--backend=cpu), or measure larger calls")
    else:
        print(f"cuda is faster from {threshold} bytes on: --cuda_small_call_bytes={threshold}")


if __name__ == "__main__":
    main()
