#!/usr/bin/python3
"""Turns posenc_bench's JSON and torch_peer.py's lines into the table of BENCHMARKS.md."""
import json
import re
import sys

posenc = json.load(open(sys.argv[1]))
torch_rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
DTYPES = {"0": "f32", "1": "f16", "2": "bf16", "3": "f64"}


def args(name):
    return dict(re.findall(r"(\w+):(-?\d+)", name))


ours = {}
for b in posenc["benchmarks"]:
    # Medians of the repetitions when there are any, else the single runs.
    if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
        continue
    a = args(b["name"])
    ours[(b["name"].split("/")[0], tuple(sorted((k, v) for k, v in a.items())))] = b

stream = {}
for (op, a), b in ours.items():
    if op.startswith("BM_Stream"):
        stream[(op[len("BM_Stream"):].lower(), dict(a)["threads"])] = b["bytes_per_second"] / 1e9

torch_by = {}
for r in torch_rows:
    if "seconds" in r:
        torch_by[(r["name"], r["threads"])] = r

print("STREAM (GB/s): " + ", ".join(
    f"{k} {v:.1f} ({t} thr)" for (k, t), v in sorted(stream.items())))
print()
print("| op | shape | thr | posenc | of STREAM | PyTorch | speed-up |")
print("|---|---|---|---|---|---|---|")
for (op, a), b in sorted(ours.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    if op.startswith("BM_Stream"):
        continue
    a = dict(a)
    thr = a["threads"]
    name = op[3:]
    if name == "ApplyRope":
        pairing = "gptj" if a["gptj"] == "1" else "neox"
        shape = (f"[{a['b']},{a['s']},{a['h']},{a['d']}] {pairing} rot{a['rot']} "
                 f"{DTYPES[a['dtype']]}" + (" offsets" if a["offsets"] == "1" else ""))
        value = b["bytes_per_second"] / 1e9
        ref = stream.get(("triad", thr))
        tdt = {"0": "torch.float32", "1": "torch.float16", "2": "torch.bfloat16"}[a["dtype"]]
        tkey = (f"ApplyRope/b:{a['b']}/s:{a['s']}/h:{a['h']}/d:{a['d']}/rot:{a['rot']}"
                f"/gptj:{a['gptj']}/dtype:{tdt}")
        unit = "GB/s"
    elif name in ("AlibiBias", "RelativeBias"):
        shape = f"[{a['h']},{a['q']},{a['k']}]"
        value = b["bytes_per_second"] / 1e9
        ref = stream.get(("fill", thr))
        tkey = f"{name}/h:{a['h']}/q:{a['q']}/k:{a['k']}"
        unit = "GB/s"
    else:
        shape = f"{a['n']} x {a['d']}"
        value = b["items_per_second"] / 1e9
        ref = None
        tkey = f"{name}/n:{a['n']}/d:{a['d']}"
        unit = "G el/s"
    t = torch_by.get((tkey, int(thr)))
    tval = None
    if t is not None:
        tval = (t["bytes"] if "bytes" in t else t["items"]) / t["seconds"] / 1e9
    frac = ""
    if ref:
        frac = f"{value / ref:.2f} " + ("triad" if name == "ApplyRope" else "fill")
    peer = "" if tval is None else f"{tval:.2f} {unit}"
    speedup = "" if tval is None else f"{value / tval:.1f}x"
    print(f"| {name} | {shape} | {thr} | {value:.2f} {unit} | {frac} | {peer} | {speedup} |")

for r in torch_rows:
    if "errors" in r:
        print()
        print("PyTorch fp32 RoPE table (HF style) max |cos error| vs float64 truth: " +
              ", ".join(f"p={p}: {e:.1e}" for p, e in r["errors"].items()))
