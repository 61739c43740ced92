"""Prints old vs new kernel times relative to STREAM, from compare_revisions.sh's JSON files."""
import json
import re
import statistics
import sys


def medians(path):
    with open(path) as f:
        data = json.load(f)
    return {b["run_name"]: b["real_time"] for b in data["benchmarks"]
            if b.get("aggregate_name") == "median"}


def main(out, rounds):
    ratios = {}
    for side in ("old", "new"):
        for r in range(1, rounds + 1):
            times = medians(f"{out}/{side}-{r}.json")
            for name, t in times.items():
                if name.startswith("BM_Stream"):
                    continue
                threads = re.search(r"threads:(\d+)", name).group(1)
                limit = "BM_StreamFill" if "Bias" in name else "BM_StreamTriad"
                stream = times[f"{limit}/threads:{threads}/real_time"]
                ratios.setdefault(name, {}).setdefault(side, []).append(t / stream)
    print("| kernel | old time/STREAM | new time/STREAM | new/old |")
    print("|---|---:|---:|---:|")
    changes = []
    for name in sorted(ratios):
        old = statistics.median(ratios[name]["old"])
        new = statistics.median(ratios[name]["new"])
        changes.append(new / old)
        print(f"| {name.replace('/real_time', '')} | {old:.3f} | {new:.3f} | {new / old:.3f} |")
    print(f"\ngeometric mean new/old {statistics.geometric_mean(changes):.3f}, "
          f"max {max(changes):.3f} (below 1: faster)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
