#!/usr/bin/python3
"""wire_bench.py: the Python client's wire (ApplyRope end to end) against one stream socket
moving the same bytes, side by side in one run (issue #20; the C++ twin is wire_bench.cc).

Usage: PYTHONPATH=build/release/python tests/bench/wire_bench.py --target ADDR
           [--sizes 2,8,32,128,256] [--rounds 5] [--paths direct,grpcio,plain,direct+noretain]
For each size S (MiB of q + k, float32 numpy arrays [1, T, 32, 128] each), alternating rounds:
  stream: one socket of the target's kind (TCP on 127.0.0.1, or a Unix socket pair) carrying
          2 S MiB one way between two buffers (sendall / recv_into, both touched before timing);
  then each client path, in turn first in a round, each in a process of its own (same
  interpreter) that times Client.apply_rope(q, k) on arrays it keeps, the numpy results
  received:
  direct: the client's default (the tensors' bytes sent from the arrays and the results
          views of the received buffer, posenc._direct, through the native transport
          posenc._wirecall where it is built; freed memory kept for reuse, Client's
          retain_freed_memory default of 1 GiB);
  grpcio: direct through gRPC Python (Client(native_transport=False): the tensors' bytes joined
          into the request, the results copied out of the views of the received bytes; the
          default before 2026-11-28);
  plain:  the same through protobuf's Python messages (Client(direct_tensors=False));
  PATH+malloc: PATH in a process whose glibc malloc keeps freed memory for reuse
          (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_=16 GiB: no fresh, page-faulting buffers
          per call; the process keeps its peak heap).
  PATH+retain: PATH in a process that called posenc.retain_freed_memory(1 GiB) first (the
          library's call for the same policy: one arena, no mappings, trim threshold 1 GiB).
  PATH+noretain: PATH with Client(retain_freed_memory=0): glibc's defaults (the client's
          default before 2026-11-27).
Prints per size the medians: stream GB/s, each path's GB/s (2 S MiB over the call's time), the
call's p50 and the ratio to the stream.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Tuple

import numpy as np

import posenc

# The environment of a "+malloc" path: glibc's malloc serves every size from its heap and
# keeps freed memory (up to 16 GiB) instead of returning it to the kernel.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(16 << 30)}


def stream_seconds(unix_socket: bool, src: memoryview, dst: memoryview) -> float:
    if unix_socket:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
        listener.close()
    start = time.perf_counter()
    writer = threading.Thread(target=a.sendall, args=(src,))
    writer.start()
    done = 0
    while done < len(dst):
        n = b.recv_into(dst[done:], min(1 << 20, len(dst) - done))
        if n <= 0:
            break
        done += n
    seconds = time.perf_counter() - start
    writer.join()
    a.close()
    b.close()
    return seconds


def tensors(mib: int) -> Tuple[np.ndarray, np.ndarray]:
    tokens = (mib << 20) // 2 // (32 * 128 * 4)
    rng = np.random.default_rng(mib)
    return (rng.standard_normal((1, tokens, 32, 128), dtype=np.float32),
            rng.standard_normal((1, tokens, 32, 128), dtype=np.float32))


def worker(target: str, base: str, variant: str) -> None:
    """A client path's process: reads a size (MiB) per line, answers the call's seconds."""
    if variant == "retain" and not posenc.retain_freed_memory(1 << 30):
        raise SystemExit("posenc.retain_freed_memory refused (not glibc?)")
    arrays: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    retain = 0 if variant in ("noretain", "malloc") else posenc.DEFAULT_RETAIN_FREED_MEMORY
    with posenc.Client(target, timeout=300, direct_tensors=base != "plain",
                       native_transport=base == "direct",
                       retain_freed_memory=retain) as client:
        for line in sys.stdin:
            mib = int(line)
            if mib not in arrays:
                arrays = {mib: tensors(mib)}
            q, k = arrays[mib]
            start = time.perf_counter()
            client.apply_rope(q, k)
            print(time.perf_counter() - start, flush=True)


class Path:
    """A client path in its own process."""

    def __init__(self, name: str, target: str):
        base, _, variant = name.partition("+")
        variants = ("", "malloc", "retain", "noretain")
        if base not in ("direct", "grpcio", "plain") or variant not in variants:
            raise SystemExit(f"unknown path {name!r} (direct, grpcio, plain, direct+malloc, "
                             "direct+retain, direct+noretain, ...)")
        env = dict(os.environ, **(KEEP_FREED_MEMORY if variant == "malloc" else {}))
        retain = ["--variant", variant] if variant else []
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", base, "--target", target] + retain, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, mib: int) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{mib}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} path's process failed")
        return float(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def run_size(paths: List[Path], unix_socket: bool, mib: int, rounds: int) -> None:
    nbytes = 2 * (mib << 20)
    src = memoryview(bytearray(b"x" * nbytes))
    dst = memoryview(bytearray(nbytes))
    for path in paths:
        path.call(mib)  # warm-up
    stream: List[float] = []
    wire: Dict[str, List[float]] = {path.name: [] for path in paths}
    for r in range(rounds):
        stream.append(stream_seconds(unix_socket, src, dst))
        for path in paths[r % len(paths):] + paths[:r % len(paths)]:  # each first in turn
            wire[path.name].append(path.call(mib))
    s = nbytes / statistics.median(stream) / 1e9
    cells = []
    for path in paths:
        p50 = statistics.median(wire[path.name])
        cells.append(f"{nbytes / p50 / 1e9:.2f} GB/s | {p50 * 1e3:.1f} ms | "
                     f"{nbytes / p50 / 1e9 / s:.2f}")
    print(f"| {mib} MiB | {'unix' if unix_socket else 'tcp'} | {s:.2f} GB/s | "
          f"{' | '.join(cells)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--sizes", default="2,8,32,128,256")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", default="direct,grpcio",
                        help="client paths: direct, plain, PATH+malloc, PATH+retain, "
                        "PATH+noretain")
    parser.add_argument("--worker", choices=("direct", "grpcio", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.target, args.worker, args.variant)
        return
    unix_socket = args.target.startswith("unix:")
    paths = [Path(name, args.target) for name in args.paths.split(",")]
    head = "".join(f" {path.name}: apply_rope | p50 | of stream |" for path in paths)
    print(f"| q+k | socket | one stream |{head}")
    print("|---|---|---|" + "---|---|---|" * len(paths))
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            run_size(paths, unix_socket, mib, args.rounds)
    finally:
        for path in paths:
            path.close()


if __name__ == "__main__":
    main()
