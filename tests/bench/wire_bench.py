#!/usr/bin/python3
"""wire_bench.py: the Python client's wire (ApplyRope end to end) against one stream socket
moving the same bytes, side by side in one run (issue #20; the C++ twin is wire_bench.cc).

Usage: PYTHONPATH=build/release/python tests/bench/wire_bench.py --target ADDR
           [--sizes 2,8,32,128,256] [--rounds 5]
For each size S (MiB of q + k, float32 numpy arrays [1, T, 32, 128] each), alternating rounds:
  stream: one socket of the target's kind (TCP on 127.0.0.1, or a Unix socket pair) carrying
          2 S MiB one way between two buffers (sendall / recv_into, both touched before timing);
  wire:   Client.apply_rope(q, k) on arrays the caller keeps, the numpy results received.
Prints per size the medians: stream GB/s, wire GB/s (2 S MiB over the call's time), the ratio.
"""

import argparse
import socket
import statistics
import threading
import time

import numpy as np

import posenc


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


def run_size(client: posenc.Client, unix_socket: bool, mib: int, rounds: int) -> None:
    tokens = (mib << 20) // 2 // (32 * 128 * 4)
    rng = np.random.default_rng(mib)
    q = rng.standard_normal((1, tokens, 32, 128), dtype=np.float32)
    k = rng.standard_normal((1, tokens, 32, 128), dtype=np.float32)
    nbytes = 2 * (q.nbytes + k.nbytes)
    src = memoryview(bytearray(b"x" * nbytes))
    dst = memoryview(bytearray(nbytes))
    client.apply_rope(q, k)  # warm-up
    stream, wire = [], []
    for _ in range(rounds):
        stream.append(stream_seconds(unix_socket, src, dst))
        start = time.perf_counter()
        client.apply_rope(q, k)
        wire.append(time.perf_counter() - start)
    s = nbytes / statistics.median(stream) / 1e9
    w = nbytes / statistics.median(wire) / 1e9
    print(f"| {mib} MiB | {'unix' if unix_socket else 'tcp'} | {s:.2f} GB/s | {w:.2f} GB/s | "
          f"{statistics.median(wire) * 1e3:.1f} ms | {w / s:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--sizes", default="2,8,32,128,256")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    unix_socket = args.target.startswith("unix:")
    print("| q+k | socket | one stream | Python client apply_rope | call p50 | wire / stream |")
    print("|---|---|---|---|---|---|")
    with posenc.Client(args.target, timeout=300) as client:
        for mib in (int(s) for s in args.sizes.split(",")):
            run_size(client, unix_socket, mib, args.rounds)


if __name__ == "__main__":
    main()
