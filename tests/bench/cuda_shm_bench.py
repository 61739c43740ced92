#!/usr/bin/env python3
"""GPU callers end to end: ApplyRope through posenc-server --backend=cuda on q and k that live in
the caller's GPU memory (torch tensors registered as CUDA shared memory with
posenc.cuda_ipc_handle, rotated in place: no copy crosses PCIe), beside the kernel on device data
in process (cuda_bench's BM_KernelApplyRope at the same shape, from the JSON of the same run)
and a bare round trip (Health). One JSON line per shape, with the ratio to the kernel.

  tests/bench/cuda_shm_bench.py [--cuda-bench-json PATH] [--calls N]

POSENC_SERVER_PATH names the server and PYTHONPATH the posenc package (tests/bench/run_cuda.sh
sets both). Needs torch with CUDA; prints a line and exits 0 without it.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import posenc  # noqa: E402
from server import ServerProcess  # noqa: E402

# (batch, seq, heads, head_dim, dtype name, cuda_bench's dtype number): cuda_bench's shapes.
SHAPES = [(1, 4096, 32, 128, "float32", 0), (8, 2048, 32, 128, "float32", 0),
          (16, 4096, 32, 128, "float32", 0), (1, 4096, 32, 128, "bfloat16", 2),
          (16, 4096, 32, 128, "bfloat16", 2), (64, 1, 32, 128, "float32", 0)]


def kernel_gbps(path):
    """{(b, s, h, d, dtype number): kernel GB/s} of cuda_bench's NEOX ApplyRope rows."""
    if not path or not os.path.exists(path):
        return {}
    out = {}
    for row in json.load(open(path))["benchmarks"]:
        name = row["name"]
        if not name.startswith("BM_KernelApplyRope/") or "gptj:0" not in name:
            continue
        args = dict(part.split(":") for part in name.split("/")[1:] if ":" in part)
        key = tuple(int(args[k]) for k in ("b", "s", "h", "d", "dtype"))
        out[key] = row["kernel_GBps"]
    return out


def median_seconds(call, calls):
    for _ in range(3):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda-bench-json", default="")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("cuda_shm_bench: skipped (needs torch with a CUDA device)")
        return 0
    kernels = kernel_gbps(args.cuda_bench_json)
    server = ServerProcess("--backend=cuda", "--allow_shared_memory", "--threads=2",
                           "--max_output_elements=1073741824", "--max_inflight_bytes=0")
    client = posenc.Client(server.address)
    try:
        rtt = median_seconds(lambda: client.health(), args.calls)
        print(json.dumps({"name": "round trip (Health)", "us": round(rtt * 1e6, 1)}))
        config = posenc.RopeConfig(base=10000.0)
        for b, s, h, d, dtype_name, dtype_number in SHAPES:
            dtype = getattr(torch, dtype_name)
            q = torch.randn(b, s, h, d, device="cuda").to(dtype)
            k = torch.randn(b, s, h, d, device="cuda").to(dtype)
            torch.cuda.synchronize()
            refs = []
            for name, t in (("q", q), ("k", k)):
                handle = posenc.cuda_ipc_handle(t)
                client.register_cuda_shared_memory(name, handle.raw_handle,
                                                   handle.offset + t.nbytes,
                                                   device_id=handle.device_id)
                wire = posenc.DType.FLOAT32 if dtype_name == "float32" else posenc.DType.BFLOAT16
                refs.append(posenc.SharedMemoryRef(name, handle.offset, t.nbytes, dtype=wire,
                                                   shape=tuple(t.shape)))
            seconds = median_seconds(lambda: client.apply_rope(refs[0], refs[1], config=config),
                                     args.calls)
            client.unregister_shared_memory("")
            moved = 2 * 2 * q.nbytes  # q and k, each read and written
            gbps = moved / seconds / 1e9
            kernel = kernels.get((b, s, h, d, dtype_number))
            print(json.dumps({
                "name": "ApplyRope NEOX, q+k in CUDA shared memory", "shape": [b, s, h, d],
                "dtype": dtype_name, "ms": round(seconds * 1e3, 3), "GBps": round(gbps, 1),
                "kernel_GBps": round(kernel, 1) if kernel else None,
                "of_kernel": round(gbps / kernel, 3) if kernel else None}))
            del q, k
            torch.cuda.empty_cache()
    finally:
        client.close()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
