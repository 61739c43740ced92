"""Prints old vs new kernel speeds as fractions of the limit of their kind measured in the same
run (compare_revisions.sh's JSON files): tables and biases of the write-only fill, ApplyRope of the
in-place update where both sides measured it, else of triad (revisions before issue #19)."""
import json
import re
import statistics
import sys


def medians(path):
    with open(path) as f:
        data = json.load(f)
    return {b["run_name"]: b["bytes_per_second"] for b in data["benchmarks"]
            if b.get("aggregate_name") == "median"}


def limit_of(name, has_update):
    if re.search(r"Bias|RopeCache|Sinusoidal", name):
        return "BM_StreamFill"
    return "BM_StreamUpdate" if has_update else "BM_StreamTriad"


def main(out, rounds):
    runs = {side: [medians(f"{out}/{side}-{r}.json") for r in range(1, rounds + 1)]
            for side in ("old", "new")}
    has_update = all("BM_StreamUpdate/threads:1/real_time" in t
                     for side in runs.values() for t in side)
    # The fraction of the limit: the kernel's bytes per second over the limit's (posenc_bench's
    # byte conventions).
    fractions = {}
    for side, rounds_ in runs.items():
        for times in rounds_:
            for name, t in times.items():
                if name.startswith("BM_Stream") or name not in runs["old"][0]:
                    continue
                threads = re.search(r"threads:(\d+)", name).group(1)
                rate = times[f"{limit_of(name, has_update)}/threads:{threads}/real_time"]
                fractions.setdefault(name, {}).setdefault(side, []).append(t / rate)
    print("fraction of the limit (bytes/s over the limit's), medians over the rounds")
    print("| kernel | limit | old | new | new/old |")
    print("|---|---|---:|---:|---:|")
    changes = []
    for name in sorted(fractions):
        if "old" not in fractions[name] or "new" not in fractions[name]:
            continue
        old = statistics.median(fractions[name]["old"])
        new = statistics.median(fractions[name]["new"])
        changes.append(new / old)
        limit = limit_of(name, has_update).replace("BM_Stream", "")
        print(f"| {name.replace('/real_time', '')} | {limit} | {old:.4f} | {new:.4f} | "
              f"{new / old:.3f} |")
    if changes:
        print(f"\ngeometric mean new/old {statistics.geometric_mean(changes):.3f}, "
              f"min {min(changes):.3f} (above 1: faster)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
