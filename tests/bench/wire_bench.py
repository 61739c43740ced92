#!/usr/bin/python3
"""wire_bench.py: the Python client's wire (ApplyRope end to end) against one stream socket
moving the same bytes, side by side in one run (issue #20; the C++ twin is wire_bench.cc).

Usage: PYTHONPATH=build/release/python tests/bench/wire_bench.py --target ADDR
           [--sizes 2,8,32,128,256] [--rounds 5] [--paths direct,plain]
For each size S (MiB of q + k, float32 numpy arrays [1, T, 32, 128] each), alternating rounds:
  stream: one socket of the target's kind (TCP on 127.0.0.1, or a Unix socket pair) carrying
          2 S MiB one way between two buffers (sendall / recv_into, both touched before timing);
  direct: Client.apply_rope(q, k) on arrays the caller keeps, the numpy results received
          (the client's default: the tensors' bytes joined into the request and viewed in the
          response, posenc._direct);
  plain:  the same through protobuf's Python messages (Client(direct_tensors=False)).
Prints per size the medians: stream GB/s, each path's GB/s (2 S MiB over the call's time), the
call's p50 and the ratio to the stream.
"""

import argparse
import socket
import statistics
import threading
import time
from typing import Dict, List

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


def run_size(clients: Dict[str, posenc.Client], unix_socket: bool, mib: int, rounds: int
             ) -> None:
    tokens = (mib << 20) // 2 // (32 * 128 * 4)
    rng = np.random.default_rng(mib)
    q = rng.standard_normal((1, tokens, 32, 128), dtype=np.float32)
    k = rng.standard_normal((1, tokens, 32, 128), dtype=np.float32)
    nbytes = 2 * (q.nbytes + k.nbytes)
    src = memoryview(bytearray(b"x" * nbytes))
    dst = memoryview(bytearray(nbytes))
    for client in clients.values():
        client.apply_rope(q, k)  # warm-up
    stream: List[float] = []
    wire: Dict[str, List[float]] = {name: [] for name in clients}
    for r in range(rounds):
        stream.append(stream_seconds(unix_socket, src, dst))
        names = list(clients)
        for name in names[r % len(names):] + names[:r % len(names)]:  # each first in turn
            start = time.perf_counter()
            clients[name].apply_rope(q, k)
            wire[name].append(time.perf_counter() - start)
    s = nbytes / statistics.median(stream) / 1e9
    cells = []
    for name in clients:
        p50 = statistics.median(wire[name])
        cells.append(f"{nbytes / p50 / 1e9:.2f} GB/s | {p50 * 1e3:.1f} ms | "
                     f"{nbytes / p50 / 1e9 / s:.2f}")
    print(f"| {mib} MiB | {'unix' if unix_socket else 'tcp'} | {s:.2f} GB/s | "
          f"{' | '.join(cells)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--sizes", default="2,8,32,128,256")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", default="direct,plain",
                        help="client paths, alternating within each round: direct, plain")
    args = parser.parse_args()
    unix_socket = args.target.startswith("unix:")
    paths = args.paths.split(",")
    clients = {name: posenc.Client(args.target, timeout=300, direct_tensors=name == "direct")
               for name in paths}
    head = "".join(f" {name}: apply_rope | p50 | of stream |" for name in paths)
    print(f"| q+k | socket | one stream |{head}")
    print("|---|---|---|" + "---|---|---|" * len(paths))
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            run_size(clients, unix_socket, mib, args.rounds)
    finally:
        for client in clients.values():
            client.close()


if __name__ == "__main__":
    main()
