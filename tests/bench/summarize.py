#!/usr/bin/python3
"""Turns posenc_bench's JSON and torch_peer.py's lines into the tables of BENCHMARKS.md.

Every ratio divides by a limit measured in the same run at the same thread count: ApplyRope (an
in-place op) by BM_StreamUpdate (a[i] = s*a[i]), biases and tables (write-only) by BM_StreamFill.
Medians of the repetitions when there are any, else the single runs.
"""
import json
import re
import sys

posenc = json.load(open(sys.argv[1]))
torch_rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
DTYPES = {"0": "f32", "1": "f16", "2": "bf16", "3": "f64"}
STYLES = {"0": "neox", "1": "gptj", "2": "deepseek"}
LAYOUTS = {"0": "BSHD", "1": "BHSD", "2": "THD"}
# The targets of issue #19: (what, op, dtypes or None, limit, lowest ratio, threads).
TARGETS = [
    ("FLOAT16/BFLOAT16 ApplyRope", "ApplyRope", {"1", "2"}, "update", 0.80, ("1", "2")),
    ("FLOAT32 ApplyRope", "ApplyRope", {"0"}, "update", 0.85, ("1", "2")),
    ("AlibiBias / RelativeBias", "Bias", None, "fill", 0.95, ("1",)),
    ("RopeCache / Sinusoidal FLOAT32", "Table", None, "fill", 0.70, ("1", "2")),
]


def args(name):
    return dict(re.findall(r"(\w+):(-?\d+)", name))


ours = {}
for b in posenc["benchmarks"]:
    if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
        continue
    a = args(b["name"])
    ours[(b["name"].split("/")[0], tuple(sorted(a.items())))] = b

limit = {}
for (op, a), b in ours.items():
    if op.startswith("BM_Stream"):
        limit[(op[len("BM_Stream"):].lower(), dict(a)["threads"])] = b["bytes_per_second"] / 1e9

torch_by = {(r["name"], r["threads"]): r for r in torch_rows if "seconds" in r}

print("Limits, GB/s (1 / 2 threads): " + ", ".join(
    f"{k} {limit.get((k, '1'), 0):.1f} / {limit.get((k, '2'), 0):.1f}"
    for k in ("update", "fill", "copy", "triad")))
print()
print("| op | shape | thr | posenc | of limit | PyTorch | speed-up |")
print("|---|---|---|---|---|---|---|")
rows, decode, prepare, in_cache, worst = [], [], [], [], {}
for (op, a), b in ours.items():
    if op.startswith("BM_Stream"):
        continue
    a = dict(a)
    if op == "BM_PrepareRopeRun":  # host work before the kernel: no bytes, no limit
        sec = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[b["time_unit"]]
        prepare.append((int(a["b"]) * int(a["s"]), f"[{a['b']},{a['s']}]", sec))
        continue
    thr, name = a["threads"], op[3:]
    gbps = b["bytes_per_second"] / 1e9
    if name.startswith("ApplyRope"):
        shape = (f"[{a['b']},{a['s']},{a['h']},{a['d']}] {LAYOUTS[a['layout']]} "
                 f"{STYLES[a['style']]} rot{a['rot']} {DTYPES[a['dtype']]}")
    if name == "ApplyRopeInCache":  # the arithmetic's ceiling: beside the limit, not a target
        in_cache.append((a["dtype"], a["layout"], a["style"], thr, shape, gbps))
        continue
    if name == "ApplyRope":
        group, ref = "ApplyRope", "update"
        tdt = {"0": "torch.float32", "1": "torch.float16", "2": "torch.bfloat16"}[a["dtype"]]
        tkey = (f"ApplyRope/b:{a['b']}/s:{a['s']}/h:{a['h']}/d:{a['d']}/rot:{a['rot']}"
                f"/gptj:{a['style']}/dtype:{tdt}")
        if a["layout"] != "0" or a["style"] == "2" or a["offsets"] == "1":
            tkey = None
        value, unit = gbps, "GB/s"
        if a["offsets"] == "1":  # the decode step: in cache, so no ratio; latency instead
            tokens = int(a["b"]) * int(a["s"])
            sec = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[b["time_unit"]]
            decode.append((thr, f"{shape} offsets", sec, sec / tokens, gbps))
            continue
    elif name in ("AlibiBias", "RelativeBias"):
        group, ref = "Bias", "fill"
        mode = {"0": "causal", "1": "symmetric", "2": "bloom"}[a.get("mode", "0")]
        shape = f"[{a['h']},{a['q']},{a['k']}]" + (f" {mode}" if name == "AlibiBias" else "")
        tkey = f"{name}/h:{a['h']}/q:{a['q']}/k:{a['k']}" if a.get("mode", "0") == "0" else None
        value, unit = gbps, "GB/s"
    else:
        # The whole RopeCache op per layout (issue #21's one-table layouts): not #19's targets.
        group, ref = ("Layout" if "layout" in a else "Table"), "fill"
        shape = f"{a['n']} x {a['d']}"
        if "layout" in a:
            shape += " " + {"0": "compact", "3": "fused_cos_sin", "4": "complex"}.get(
                a["layout"], f"layout {a['layout']}")
        tkey = f"{name}/n:{a['n']}/d:{a['d']}"
        value, unit = b["items_per_second"] / 1e9, "G el/s"
    ratio = gbps / limit[(ref, thr)] if (ref, thr) in limit else float("nan")
    worst.setdefault((group, a.get("dtype", "0"), thr), []).append((ratio, f"{name} {shape}"))
    t = torch_by.get((tkey, int(thr))) if tkey else None
    tval = None if t is None else (t["bytes"] if "bytes" in t else t["items"]) / t["seconds"] / 1e9
    rows.append((name, shape, thr,
                 f"| {name} | {shape} | {thr} | {value:.2f} {unit} | {ratio:.2f} {ref} | "
                 f"{'' if tval is None else f'{tval:.2f} {unit}'} | "
                 f"{'' if tval is None else f'{value / tval:.1f}x'} |"))
for *_, line in sorted(rows):
    print(line)

print()
print("Decode step (in cache: latency, no ratio):")
print()
print("| shape | thr | per call | per token | GB/s |")
print("|---|---|---|---|---|")
for thr, shape, sec, per_token, gbps in sorted(decode, key=lambda d: (d[1], d[0])):
    print(f"| {shape} | {thr} | {sec * 1e6:.1f} us | {per_token * 1e9:.0f} ns | {gbps:.1f} |")

print()
print("ApplyRope in cache ([1,16,32,128] q and k rotated again and again: the arithmetic's own")
print("rate, the ceiling of the large shapes; below a dtype's target, the target is out of this")
print("host's reach):")
print()
print("| shape | thr | posenc | of update |")
print("|---|---|---|---|")
for *_, thr, shape, gbps in sorted(in_cache):
    ratio = gbps / limit[("update", thr)] if ("update", thr) in limit else float("nan")
    print(f"| {shape} | {thr} | {gbps:.2f} GB/s | {ratio:.2f} |")

print()
print("Host work per ApplyRope call before the kernel (PrepareRopeRun: positions resolved):")
print()
print("| tokens [B,S] | per call | per token |")
print("|---|---|---|")
for tokens, shape, sec in sorted(prepare):
    print(f"| {shape} | {sec * 1e6:.1f} us | {sec / tokens * 1e9:.1f} ns |")

print()
print("Targets of issue #19 (lowest ratio of each group, same run):")
print()
for what, group, dtypes, ref, goal, threads in TARGETS:
    for thr in threads:
        cands = [r for (g, dt, t), lst in worst.items() if g == group and t == thr
                 and (dtypes is None or dt in dtypes) for r in lst]
        if not cands:
            continue
        low = min(cands)
        print(f"- {what}, {thr} thread(s): >= {goal:.2f} of {ref}: lowest {low[0]:.2f} "
              f"({low[1]}) -> {'met' if low[0] >= goal else 'NOT met'}")

for r in torch_rows:
    if "errors" in r:
        print()
        print("PyTorch fp32 RoPE table (HF style) max |cos error| vs float64 truth: " +
              ", ".join(f"p={p}: {e:.1e}" for p, e in r["errors"].items()))
