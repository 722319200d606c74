#!/usr/bin/python3
"""Instructions per command on the hot paths (issue 16): callgrind splits of
INCR, FG.TOKEN, CL.THROTTLE, FG.FIXED, a two-limit FG.CHECK and an
uncontended FG.LOCK + FG.UNLOCK pair, next to their floors: the same
arguments, reply and replication through an empty module command, and "with
its key" the same again plus the key's write as the command does it (a value
of a module type, the command's own expiry, signal, keyspace event): what
any module command with the same obligations costs (bench/floor_module.c,
built by this script into build/bench/, never loaded in production).

    /usr/bin/python3 bench/hot_paths.py [--module PATH] [--output FILE]

Method as bench/policy_bench.py's callgrind part (which this reuses): the
server under valgrind --tool=callgrind pinned to CPU 0; per case, one pass over
1,000 keys (every key has its state), callgrind_control -z, 16,000 commands
pipelined 16 at a time on one connection, callgrind_control -d; serverCron
left out. Limits are chosen so that no key expires under valgrind's slow
clock and every measured command is admitted (the cost of a write and its
replication is what is measured); the floors with their key are given the
same arguments, so their keys live as long. A lock pair is FG.LOCK then
FG.UNLOCK on the same key: its figure is per pair, against two INCRs.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import policy_bench as pb  # noqa: E402

ROOT = pb.ROOT
FLOOR_SRC = os.path.join(ROOT, "bench", "floor_module.c")
FLOOR_SO = os.path.join(ROOT, "build", "bench", "floor_module.so")

# name, and the commands of one unit (a list of argv)
CASES = [
    ("INCR", [["INCR", "incr:__rand_int__"]]),
    ("FG.TOKEN", [["FG.TOKEN", "tb:__rand_int__", "1000000", "1"]]),
    ("CL.THROTTLE", [["CL.THROTTLE", "cl:__rand_int__", "100", "1", "3600"]]),
    ("FG.FIXED", [["FG.FIXED", "fx:__rand_int__", "100000", "86400000"]]),
    ("FG.CHECK p2", [["FG.CHECK", "p2", "c2:__rand_int__"]]),
    ("FG.LOCK + FG.UNLOCK", [["FG.LOCK", "lk:__rand_int__", "owner", "30000"],
                             ["FG.UNLOCK", "lk:__rand_int__", "owner"]]),
    # the floor: an empty command with the same arguments, reply shape and
    # replicated effect (FLOOR.* in bench/floor_module.c)
    ("floor FG.TOKEN", [["FLOOR.BUCKET", "fb:__rand_int__", "1000000", "1"]]),
    ("floor CL.THROTTLE", [["FLOOR.THROTTLE", "ft:__rand_int__", "100", "1", "3600"]]),
    ("floor FG.FIXED", [["FLOOR.FIXED", "ff:__rand_int__", "100000", "86400000"]]),
    ("floor FG.CHECK p2", [["FLOOR.CHECK", "p2", "fc:__rand_int__"]]),
    ("floor FG.LOCK + FG.UNLOCK", [["FLOOR.LOCK", "fl:__rand_int__", "owner", "30000"],
                                   ["FLOOR.UNLOCK", "fl:__rand_int__", "owner"]]),
    # the floor with its key: the same plus the key's write (FLOOR.*.KEYED)
    ("floor FG.TOKEN with its key", [["FLOOR.KEYED", "fk:__rand_int__", "1000000", "1"]]),
    ("floor CL.THROTTLE with its key",
     [["FLOOR.THROTTLE.KEYED", "ftk:__rand_int__", "100", "1", "3600"]]),
    ("floor FG.FIXED with its key",
     [["FLOOR.FIXED.KEYED", "ffk:__rand_int__", "100000", "86400000"]]),
    ("floor FG.CHECK p2 with its key", [["FLOOR.CHECK.KEYED", "p2", "fck:__rand_int__"]]),
    ("floor FG.LOCK + FG.UNLOCK with its key",
     [["FLOOR.LOCK.KEYED", "flk:__rand_int__", "owner", "30000"],
      ["FLOOR.UNLOCK.KEYED", "flk:__rand_int__", "owner"]]),
]
POLICY = ["LIMIT", "TOKEN", "100000", "1", "LIMIT", "FIXED", "1000000", "86400000"]


def build_floor():
    os.makedirs(os.path.dirname(FLOOR_SO), exist_ok=True)
    subprocess.run(["cc", "-O2", "-g", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC",
                    "-shared", "-I", os.path.join(ROOT, "src", "module"),
                    "-fvisibility=hidden", "-o", FLOOR_SO, FLOOR_SRC,
                    os.path.join(ROOT, "src", "module", "redismodule_api.c")],
                   check=True)


class Case:
    def __init__(self, cmd):
        self.cmd = cmd


def measure(srv, module_path, name, unit):
    srv.r.flushall()
    per_unit = len(unit)
    cmds = lambda i: [[pb.key_arg(a, i) for a in c] for c in unit]  # noqa: E731
    if len(unit) == 1:
        pb.send(srv.r, [c for i in range(pb.CG_KEYS) for c in cmds(i)])
    else:  # a pair leaves no state: a first pass would measure nothing more
        pb.send(srv.r, [c for i in range(pb.CG_KEYS) for c in cmds(i)])
    denied = []

    refused = 1 if unit[0][0] in ("CL.THROTTLE", "FLOOR.THROTTLE", "FLOOR.THROTTLE.KEYED") else 0

    def check(reply):
        # every measured command must do the write: an admission, a grant
        if isinstance(reply, list) and reply and reply[0] == refused:
            denied.append(reply)

    before = set(os.listdir(srv.workdir))
    pb.callgrind_control("-z", srv.pid)
    units = pb.CG_CALLS // per_unit
    pb.send(srv.r, [c for i in range(units) for c in cmds(i % pb.CG_KEYS)], check)
    pb.callgrind_control("-d", srv.pid)
    dump = pb.wait_for_dump(srv.workdir, before)
    # the module split for every module command (analyse keys it on "FG.")
    label = unit[0] if unit[0][0] == "INCR" else ["FG." + unit[0][0]] + unit[0][1:]
    res = pb.analyse(pb.CallGraph(dump), module_path, units, Case(label))
    os.unlink(dump)
    res["denied"] = len(denied)
    return res


# --throughput: redis-benchmark at pipeline 16 as bench/throughput.py runs
# it (-c 50 -r 100000 -n 1000000, FLUSHALL before each run, 3 interleaved
# rounds, server on CPU 0, client on CPU 1), each command beside its floor
# and its floor with its key, given the same arguments: the keys live as
# long as the command's (FG.TOKEN's, 100 ms after each request, expire and
# are made again all the time; CL.THROTTLE's, FG.FIXED's and FG.CHECK's
# outlive the run). A floor lock pair is FLOOR.LOCK and FLOOR.UNLOCK timed
# apart, as they touch no key; the real pair needs one key for both commands
# and is bench/lock_bench.sh's. There is no keyed floor pair here: on
# redis-benchmark's random keys FLOOR.UNLOCK.KEYED would mostly find no key
# to delete and the pair would be cheaper than any real one; callgrind has it.
TP_CASES = [
    ("INCR", ["INCR", "incr:__rand_int__"]),
    ("FG.TOKEN", ["FG.TOKEN", "tb:__rand_int__", "100", "10"]),
    ("floor FG.TOKEN", ["FLOOR.BUCKET", "fb:__rand_int__", "100", "10"]),
    ("floor FG.TOKEN with its key", ["FLOOR.KEYED", "fk:__rand_int__", "100", "10"]),
    ("CL.THROTTLE", ["CL.THROTTLE", "cl:__rand_int__", "15", "30", "60"]),
    ("floor CL.THROTTLE", ["FLOOR.THROTTLE", "ft:__rand_int__", "15", "30", "60"]),
    ("floor CL.THROTTLE with its key",
     ["FLOOR.THROTTLE.KEYED", "ftk:__rand_int__", "15", "30", "60"]),
    ("FG.FIXED", ["FG.FIXED", "fx:__rand_int__", "100", "60000"]),
    ("floor FG.FIXED", ["FLOOR.FIXED", "ff:__rand_int__", "100", "60000"]),
    ("floor FG.FIXED with its key", ["FLOOR.FIXED.KEYED", "ffk:__rand_int__", "100", "60000"]),
    ("FG.CHECK p2", ["FG.CHECK", "p2", "c2:__rand_int__"]),
    ("floor FG.CHECK p2", ["FLOOR.CHECK", "p2", "fc:__rand_int__"]),
    ("floor FG.CHECK p2 with its key", ["FLOOR.CHECK.KEYED", "p2", "fck:__rand_int__"]),
    ("floor FG.LOCK", ["FLOOR.LOCK", "fl:__rand_int__", "owner", "30000"]),
    ("floor FG.UNLOCK", ["FLOOR.UNLOCK", "fl:__rand_int__", "owner"]),
]
TP_POLICY = ["LIMIT", "TOKEN", "100", "10", "LIMIT", "FIXED", "1000", "86400000"]


def throughput(module, rounds, n):
    import statistics
    workdir = tempfile.mkdtemp(prefix="floodgate-hot-tp.")
    srv = pb.Server(workdir, module, more_modules=[FLOOR_SO])
    srv.r.execute_command("FG.POLICY", "SET", "p2", *TP_POLICY)
    for name, cmd in TP_CASES:  # every command works before it is timed
        srv.r.execute_command(*[pb.key_arg(a, 0) for a in cmd])
    srv.r.flushall()
    pb.run_benchmark(srv.port, 200000, 16, TP_CASES[0][1])  # warm-up
    runs = {name: [] for name, _ in TP_CASES}
    for rnd in range(rounds):
        for name, cmd in TP_CASES:
            srv.r.flushall()
            pb.Quiet.wait()
            cpu0 = pb.main_thread_cpu(srv.r)
            rps, _ = pb.run_benchmark(srv.port, n, 16, cmd)
            us = (pb.main_thread_cpu(srv.r) - cpu0) * 1e6 / n
            runs[name].append((rps, us))
            pb.log("round %d %-32s %10.0f ops/s  %.3f us/command" % (rnd + 1, name, rps, us))
    srv.stop()
    shutil.rmtree(workdir, True)
    incr = runs["INCR"]
    lines = ["| case | P=16 ops/s | P=16 x INCR | server us/command | x INCR by server CPU |",
             "|---|---:|---:|---:|---:|"]
    out = {}
    for name, _ in TP_CASES:
        ratio = statistics.median(r[0] / i[0] for r, i in zip(runs[name], incr))
        cpu_ratio = statistics.median(i[1] / r[1] for r, i in zip(runs[name], incr))
        rps = statistics.median(r[0] for r in runs[name])
        us = statistics.median(r[1] for r in runs[name])
        out[name] = {"rps": rps, "ratio": ratio, "us": us, "cpu_ratio": cpu_ratio,
                     "runs": runs[name]}
        lines.append("| %s | %s | %.2f | %.3f | %.2f |" % (name, pb.fmt(rps), ratio, us, cpu_ratio))
    # a floor pair: one FLOOR.LOCK and one FLOOR.UNLOCK, per command
    pair = [2 / (1 / lk[0] + 1 / ul[0]) / i[0] for lk, ul, i in
            zip(runs["floor FG.LOCK"], runs["floor FG.UNLOCK"], incr)]
    out["floor FG.LOCK + FG.UNLOCK"] = {"ratio": statistics.median(pair)}
    lines.append("| floor FG.LOCK + FG.UNLOCK (from the two) | | %.2f | | |"
                 % statistics.median(pair))
    lines.append("")
    lines.append("INCR over the rounds: %s ops/s." % ", ".join(pb.fmt(i[0]) for i in incr))
    return "\n".join(lines) + "\n", out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default=os.path.join(ROOT, "build", "floodgate.so"))
    ap.add_argument("--output")
    ap.add_argument("--cases", default="")
    ap.add_argument("--throughput", action="store_true",
                    help="redis-benchmark at P=16 instead of callgrind")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=1000000)
    args = ap.parse_args()
    if args.throughput:
        build_floor()
        text, out = throughput(args.module, args.rounds, args.n)
        print(text)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text)
            with open(os.path.splitext(args.output)[0] + ".raw", "w") as f:
                json.dump(out, f, indent=1)
        return
    wanted = [c for c in args.cases.split(",") if c]
    floors = any(n.startswith("floor") and (not wanted or n in wanted) for n, _ in CASES)
    if floors:
        build_floor()
    workdir = tempfile.mkdtemp(prefix="floodgate-hot.")
    import atexit
    atexit.register(shutil.rmtree, workdir, True)
    atexit.register(pb.stop_all)
    module = os.path.join(workdir, "floodgate.so")
    shutil.copy(args.module, module)
    out = os.path.join(workdir, "callgrind.out")
    srv = pb.Server(workdir, module, callgrind_out=out, more_modules=[FLOOR_SO] if floors else [])
    srv.workdir = workdir
    srv.r.execute_command("FG.POLICY", "SET", "p2", *POLICY)
    results = {}
    for name, unit in CASES:
        if wanted and name not in wanted and name != "INCR":
            continue
        mod = os.path.realpath(FLOOR_SO if name.startswith("floor") else module)
        results[name] = measure(srv, mod, name, unit)
        r = results[name]
        pb.log("%-38s %7.0f instr/unit  command %7.0f  outside %6.0f  denied %d  %s" % (
            name, r["total"], r["command"], r["outside"], r["denied"],
            {k: round(v) for k, v in r.get("parts", {}).items()}))
    srv.stop()
    incr = results["INCR"]["total"]
    lines = ["| case | instructions | x INCR (per command) | floor | x floor "
             "| floor with its key | x floor with its key |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def beside(t, floor):  # a floor's instructions and the command's ratio to it
        if not floor:
            return ["", ""]
        return [pb.fmt(floor["total"]), "%.2f" % (t / floor["total"])]

    for name, unit in CASES:
        if name not in results or name.startswith("floor"):
            continue
        t = results[name]["total"]
        cells = [name, pb.fmt(t), "%.2f" % (incr * len(unit) / t)]
        cells += beside(t, results.get("floor " + name))
        cells += beside(t, results.get("floor " + name + " with its key"))
        lines.append("| %s |" % " | ".join(cells))
    for name, unit in CASES:
        if name.startswith("floor") and name in results:
            t = results[name]["total"]
            lines.append("| %s | %s | %.2f | | | | |" % (name, pb.fmt(t), incr * len(unit) / t))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.output)[0] + ".raw", "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
