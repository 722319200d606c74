#!/usr/bin/python3
"""The peers' table of bench/run.sh: each command a peer module has, its
ratio to INCR beside floodgate's, each measured against its own server's
INCR in the same round (throughput.py's raw files).

Usage: peers.py OURS.raw NAME=PEER.raw [NAME=PEER.raw ...]
"""

import json
import statistics
import sys


def medians(raw, pipeline):
    """{case: (median x INCR by throughput, median x INCR by CPU)} at a pipeline."""
    by_case = {}
    for run in raw["runs"]:
        if run["P"] == pipeline:
            by_case.setdefault(run["case"], []).append((run["x_incr"], run["x_incr_cpu"]))
    return {case: (statistics.median(v[0] for v in runs), statistics.median(v[1] for v in runs))
            for case, runs in by_case.items()}


def main():
    with open(sys.argv[1]) as f:
        ours = medians(json.load(f), 16)
    lines = ["## Against the peers",
             "",
             "P=16; each ratio is to INCR of its own server in the same round (median over "
             "rounds), by throughput and by the server's main-thread CPU per command.",
             "",
             "| command | peer | floodgate x INCR | peer x INCR | floodgate / peer "
             "| floodgate x INCR by CPU | peer x INCR by CPU | floodgate / peer by CPU |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        with open(path) as f:
            theirs = medians(json.load(f), 16)
        for case, (x, xcpu) in theirs.items():
            if case == "INCR" or case not in ours:
                continue
            mine, mine_cpu = ours[case]
            lines.append("| `%s` | %s | %.2f | %.2f | **%.2f** | %.2f | %.2f | %.2f |"
                         % (case, name, mine, x, mine / x, mine_cpu, xcpu, mine_cpu / xcpu))
    print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
