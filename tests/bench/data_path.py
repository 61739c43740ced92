#!/usr/bin/env python3
"""The Python half of the data-path benchmark (issue #20 item 7), and its table.

    data_path.py measure --target ADDRESS [--threads N] [--runs N] [--sizes_mib 2,8,...]
                         [--tiny_calls N] [--parts shm,wire,tiny]
        against a running posenc-server, with the posenc package on PYTHONPATH:
          shm       ApplyRope [1,4096,32,128] FLOAT32 q+k in a posenc.SharedMemory region,
                    rotated in place by the server (references made once, as a caller would)
          wire      ApplyRope with numpy q and k in the message, q+k of each size
          tiny      ApplyRope of q and k [1,1,8,128]: latency p50/p99, inline and in shared
                    memory (tiny_shm; inline only where the server has no shared memory)
        One JSON object per line, as data_path_bench (the C++ half) prints them.

    data_path.py table FILE...
        The markdown tables of BENCHMARKS.md "Data path" from those lines: shared memory
        against the in-process kernel, the wire against one stream socket and a gRPC echo, the
        tiny calls. tests/bench/run_data_path.sh runs everything.

Each figure is the median over --runs rounds of the seconds per call (a round: a batch of calls
sized to ~0.25 s from an untimed warm-up call, at least one).
"""

import argparse
import json
import sys
import time

import numpy as np

ROPE_SHAPE = (1, 4096, 32, 128)
MIB = 1 << 20


def emit(**fields):
    print(json.dumps({"lang": "python", **fields}), flush=True)


def median_per_call(call, runs):
    start = time.perf_counter()
    call()
    batch = max(1, min(200, int(0.25 / max(time.perf_counter() - start, 1e-6))))
    per_call = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(batch):
            call()
        per_call.append((time.perf_counter() - start) / batch)
    return float(np.median(per_call))


def throughput(path, threads, size, counted, seconds, runs):
    emit(path=path, threads=threads, size=size, counted_bytes=counted, median_s=seconds,
         gbps=counted / seconds / 1e9, runs=runs)


def measure_shm(posenc, client, args):
    nbytes = int(np.prod(ROPE_SHAPE)) * 4
    with posenc.SharedMemory(client, 2 * nbytes) as shm:
        q, k = shm.array(ROPE_SHAPE, np.float32), shm.array(ROPE_SHAPE, np.float32)
        rng = np.random.default_rng(1)
        q[...] = rng.uniform(-1, 1, ROPE_SHAPE).astype(np.float32)
        k[...] = rng.uniform(-1, 1, ROPE_SHAPE).astype(np.float32)
        q_ref, k_ref = shm.ref(q), shm.ref(k)
        seconds = median_per_call(lambda: client.apply_rope(q_ref, k_ref), args.runs)
    throughput("shm", args.threads, 2 * nbytes, 4 * nbytes, seconds, args.runs)


def measure_wire(posenc, client, args):
    rng = np.random.default_rng(2)
    for mib in args.sizes_mib:
        tokens = max(1, mib * MIB // 2 // (32 * 128 * 4))
        q = rng.uniform(-1, 1, (1, tokens, 32, 128)).astype(np.float32)
        k = rng.uniform(-1, 1, (1, tokens, 32, 128)).astype(np.float32)
        seconds = median_per_call(lambda: client.apply_rope(q, k), args.runs)
        throughput("wire", args.threads, q.nbytes + k.nbytes, q.nbytes + k.nbytes, seconds,
                   args.runs)


def measure_tiny(posenc, client, args):
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (1, 1, 8, 128)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, 1, 8, 128)).astype(np.float32)
    positions = posenc.Positions.offsets([4242])
    calls = {"tiny": lambda: client.apply_rope(q, k, positions)}
    shm = None
    if client.get_server_info().shared_memory_allowed:
        shm = posenc.SharedMemory(client, 1 << 20)
        q_ref, k_ref = shm.ref(shm.put(q)), shm.ref(shm.put(k))
        calls["tiny_shm"] = lambda: client.apply_rope(q_ref, k_ref, positions)
    latencies = {name: [] for name in calls}
    names = list(calls)
    for r in range(args.runs):
        for j in range(len(names)):
            name = names[(j + r) % len(names)]
            for i in range(args.tiny_calls // args.runs + 1):
                start = time.perf_counter()
                calls[name]()
                if r > 0 or i >= 10:
                    latencies[name].append((time.perf_counter() - start) * 1e6)
    if shm is not None:
        shm.close()
    for name, values in latencies.items():
        emit(path=name, threads=args.threads, calls=len(values),
             p50_us=float(np.percentile(values, 50)), p99_us=float(np.percentile(values, 99)))


def measure(args):
    import posenc

    posenc.retain_freed_memory(args.retain_free_bytes)
    with posenc.Client(args.target, timeout=600) as client:
        parts = args.parts.split(",")
        if "shm" in parts:
            measure_shm(posenc, client, args)
        if "wire" in parts:
            measure_wire(posenc, client, args)
        if "tiny" in parts:
            measure_tiny(posenc, client, args)


# ---------------------------------------------------------------------------------------------
# The table.
# ---------------------------------------------------------------------------------------------
def read(files):
    rows = []
    for name in files:
        with open(name, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    row = json.loads(line)
                    row.setdefault("server", name)
                    rows.append(row)
    return rows


def find(rows, **match):
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def kernel_table(rows):
    out = ["| path | threads | ms per call | GB/s | of the kernel |", "|---|---|---|---|---|"]
    labels = [("kernel", "c++", "kernel in process (C++)"),
              ("kernel_shm", "c++", "kernel in process on the shared-memory mapping"),
              ("shm", "c++", "**shared memory end to end, C++ client**"),
              ("shm", "python", "**shared memory end to end, Python client**")]
    for threads in sorted({r["threads"] for r in rows if r.get("path") == "kernel"}):
        kernel = find(rows, path="kernel", threads=threads)
        for path, lang, label in labels:
            row = find(rows, path=path, lang=lang, threads=threads)
            if row is None:
                continue
            ratio = row["gbps"] / kernel["gbps"]
            ratio_text = f"**{ratio:.2f}**" if path == "shm" else f"{ratio:.2f}"
            out.append(f"| {label} | {threads} | {row['median_s'] * 1e3:.2f} | "
                       f"{row['gbps']:.2f} | {ratio_text} |")
    return out


def wire_table(rows):
    out = ["| q+k each way | C++ wire | Python wire | one stream socket | bare gRPC echo | "
           "C++ of stream | Python of stream | C++ of echo |", "|---|---|---|---|---|---|---|---|"]
    for size in sorted({r["size"] for r in rows if r.get("path") == "stream"}):
        cpp = find(rows, path="wire", lang="c++", size=size)
        py = find(rows, path="wire", lang="python", size=size)
        stream = find(rows, path="stream", size=size)
        echo = find(rows, path="echo", size=size)

        def gbps(row):
            return f"{row['gbps']:.3f} GB/s" if row else ""

        def of(row, base):
            return f"{row['gbps'] / base['gbps']:.3f}" if row and base else ""

        out.append(f"| {size // MIB} MiB | {gbps(cpp)} | {gbps(py)} | {gbps(stream)} | "
                   f"{gbps(echo)} | {of(cpp, stream)} | {of(py, stream)} | {of(cpp, echo)} |")
    return out


def tiny_table(rows):
    out = ["| tiny ApplyRope [1,1,8,128] q+k | server | C++ p50 / p99 µs | "
           "Python p50 / p99 µs |", "|---|---|---|---|"]
    for path, label in (("tiny", "inline"), ("tiny_shm", "in shared memory")):
        for server in sorted({r["server"] for r in rows if r.get("path") == path}):
            cells = []
            for lang in ("c++", "python"):
                row = find(rows, path=path, lang=lang, server=server)
                cells.append(f"{row['p50_us']:.0f} / {row['p99_us']:.0f}" if row else "")
            out.append(f"| {label} | {server_label(server)} | {cells[0]} | {cells[1]} |")
    return out


# The server configurations of run_data_path.sh's result files.
SERVERS = {"threads_1": "--allow_shared_memory --threads=1",
           "threads_2": "--allow_shared_memory --threads=2",
           "without_shm": "--threads=1 (no shared memory)"}


def server_label(name):
    """The server configuration of a result file."""
    base = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return SERVERS.get(base, base)


def table(args):
    rows = read(args.files)
    for title, lines in (("Shared memory against the kernel: ApplyRope [1,4096,32,128] FLOAT32 "
                          "q+k (256 MiB read and written per call)", kernel_table(rows)),
                         ("The wire: ApplyRope with q and k in the message (GB/s of q+k each "
                          "way)", wire_table(rows)),
                         ("Tiny calls", tiny_table(rows))):
        print(f"\n{title}\n")
        print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--target", required=True)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--runs", type=int, default=5)
    m.add_argument("--sizes_mib", type=lambda s: [int(x) for x in s.split(",")],
                   default=[2, 8, 32, 128, 256])
    m.add_argument("--tiny_calls", type=int, default=400)
    m.add_argument("--parts", default="shm,wire,tiny")
    m.add_argument("--retain_free_bytes", type=int, default=1 << 30,
                   help="posenc.retain_freed_memory in this process (0: the allocator's defaults)")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args)
    else:
        table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
