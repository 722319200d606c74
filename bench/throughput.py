#!/usr/bin/python3
"""Throughput of floodgate commands vs INCR, SET and Lua baselines.

Called by bench/run.sh, which starts the server (pinned to CPU 0). This script
runs redis-benchmark pinned to CPU 1, 50 clients, 100000 random keys, at
pipeline 1 and pipeline 16, in interleaved rounds (round 1 runs every case,
then round 2 every case, ...). Each case is compared with INCR of the same
round and the same pipeline depth; the report gives the median over rounds
of ops/s and of that ratio.

Usage: throughput.py --port PORT --lua-dir DIR --out-md FILE --out-raw FILE [--title T]
(--title names the section: run.sh runs the cases a peer module has on a
server of its own, redis-cell's CL.THROTTLE, RedisBloom's BF.*).
Environment: QUICK=1 (1 round, -n 20000 / 100000), BENCH_ROUNDS=N,
BENCH_CASES=name,name,... (INCR is always added), BENCH_N1, BENCH_N16,
BENCH_CLIENTS, BENCH_KEYSPACE, REDIS_BENCHMARK, BENCH_CPU (default 1).
"""

import argparse
import csv
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import redis

# name, command (list of args; __rand_int__ is expanded by redis-benchmark),
# optional prefill (see prefill_peek).
CASES = [
    ("INCR", ["INCR", "incr:__rand_int__"]),
    ("SET", ["SET", "set:__rand_int__", "xxx"]),
    ("CL.THROTTLE", ["CL.THROTTLE", "cl:__rand_int__", "15", "30", "60"]),
    ("FG.FIXED", ["FG.FIXED", "fx:__rand_int__", "100", "60000"]),
    ("FG.SLIDING", ["FG.SLIDING", "sw:__rand_int__", "100", "60000"]),
    ("FG.SLIDELOG", ["FG.SLIDELOG", "sl:__rand_int__", "100", "60000"]),
    ("FG.TOKEN", ["FG.TOKEN", "tb:__rand_int__", "100", "10"]),
    ("FG.LEAKY", ["FG.LEAKY", "lb:__rand_int__", "100", "10"]),
    ("FG.GCRA", ["FG.GCRA", "gc:__rand_int__", "100", "10", "1000"]),
    # Redis 8.8's GCRA as floodgate provides it, with the same limit
    # (capacity 100, 10 per second); the server's own where it has one
    ("GCRA", ["GCRA", "gn:__rand_int__", "99", "10", "1"]),
    ("FG.PEEK TOKEN", ["FG.PEEK", "TOKEN", "pk:__rand_int__", "100", "10"]),
    # One filter of 10M items at 1%, random integer items (prefilled: reserved)
    ("BF.ADD", ["BF.ADD", "bf", "__rand_int__"]),
    ("BF.EXISTS", ["BF.EXISTS", "bf", "__rand_int__"]),
    # Lua baselines: "@name" is replaced by the SHA1 of bench/lua/name.lua
    ("Lua token bucket (2 keys)",
     ["EVALSHA", "@token_bucket", "2", "{u:__rand_int__}.tokens",
      "{u:__rand_int__}.timestamp", "10", "100", "1"]),
    ("Lua fixed window", ["EVALSHA", "@fixed_window", "1", "lfx:__rand_int__", "100", "60000"]),
    ("Lua sliding log (ZSET)",
     ["EVALSHA", "@sliding_log", "1", "lsl:__rand_int__", "100", "60000"]),
]
LUA_SCRIPTS = ["token_bucket", "fixed_window", "sliding_log"]


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


def die(msg):
    print("throughput.py: ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def prefill_peek(r, keyspace):
    """FG.PEEK on absent keys would only measure a miss. Give every key of the
    peek keyspace a real bucket state first: FG.TOKEN ... 100 10 COST 90 leaves
    10 tokens (the peek is allowed) and a TTL of 9 s, longer than one run."""
    pipe = r.pipeline(transaction=False)
    for i in range(keyspace):
        pipe.execute_command("FG.TOKEN", "pk:%012d" % i, "100", "10", "COST", "90")
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def prefill_filter(r, keyspace):
    """The filter the Bloom cases use, reserved as RedisBloom's benchmarks
    do, so that no add pays for growing it."""
    r.execute_command("BF.RESERVE", "bf", "0.01", "10000000")


PREFILL = {"FG.PEEK TOKEN": prefill_peek, "BF.ADD": prefill_filter, "BF.EXISTS": prefill_filter}


def main_thread_cpu(r):
    """The server's main-thread CPU seconds (INFO cpu): what a command costs
    the server, whatever else runs on the machine."""
    info = r.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def run_benchmark(port, clients, keyspace, n, pipeline, cmd, cpu, bench_bin):
    argv = ["taskset", "-c", str(cpu), bench_bin, "-h", "127.0.0.1", "-p", str(port),
            "-c", str(clients), "-r", str(keyspace), "-n", str(n), "-P", str(pipeline),
            "-q", "--csv"] + cmd
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout
    rps = None
    for row in csv.reader(io.StringIO(out)):
        if len(row) >= 2 and row[0] != "test":
            try:
                rps = float(row[1])
            except ValueError:
                pass
    if p.returncode != 0 or rps is None or "Error" in out or "Error" in p.stderr:
        die("redis-benchmark failed (rc=%d) for: %s\nstdout:\n%s\nstderr:\n%s"
            % (p.returncode, " ".join(shlex.quote(a) for a in argv), out, p.stderr))
    return rps, " ".join(shlex.quote(a) for a in argv), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--lua-dir", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-raw", required=True)
    ap.add_argument("--title", default="Throughput")
    a = ap.parse_args()

    quick = os.environ.get("QUICK", "") not in ("", "0")
    rounds = env_int("BENCH_ROUNDS", 1 if quick else 3)
    n1 = env_int("BENCH_N1", 20000 if quick else 200000)
    n16 = env_int("BENCH_N16", 100000 if quick else 1000000)
    clients = env_int("BENCH_CLIENTS", 50)
    keyspace = env_int("BENCH_KEYSPACE", 100000)
    cpu = env_int("BENCH_CPU", 1)
    bench_bin = os.environ.get("REDIS_BENCHMARK", "redis-benchmark")

    cases = CASES
    sel = os.environ.get("BENCH_CASES", "").strip()
    if sel:
        wanted = [s.strip() for s in sel.split(",") if s.strip()]
        known = {c[0].upper(): c for c in CASES}
        for w in wanted:
            if w.upper() not in known:
                die("unknown case %r in BENCH_CASES; known: %s"
                    % (w, ", ".join(c[0] for c in CASES)))
        wanted = [w.upper() for w in wanted]
        names = ["INCR"] + [known[w][0] for w in wanted if w != "INCR"]
        cases = [c for c in CASES if c[0] in names]

    r = redis.Redis(host="127.0.0.1", port=a.port)

    # Load the Lua baselines (those the cases use) and expand "@name" to their SHA1.
    shas = {}
    used = {x[1:] for _, cmd in cases for x in cmd if x.startswith("@")}
    for name in [n for n in LUA_SCRIPTS if n in used]:
        with open(os.path.join(a.lua_dir, name + ".lua")) as f:
            shas[name] = r.script_load(f.read())
    resolved = []
    for name, cmd in cases:
        cmd = [shas[x[1:]] if x.startswith("@") else x for x in cmd]
        resolved.append((name, cmd))

    # Every command must work before it is timed (redis-benchmark 7.0 stops at
    # the first error reply, and we also refuse rows without a result).
    for name, cmd in resolved:
        probe = [x.replace("__rand_int__", "probe") for x in cmd]
        try:
            reply = r.execute_command(*probe)
        except redis.ResponseError as e:
            die("case %s: %s -> %s" % (name, " ".join(probe), e))
        print("  check %-26s %s -> %r" % (name, " ".join(probe), reply), file=sys.stderr)
    r.flushall()

    raw = {"rounds": rounds, "n": {"1": n1, "16": n16}, "clients": clients,
           "keyspace": keyspace, "runs": []}
    results = {}  # (name, P) -> list of (rps, ratio)
    # Warm-up, not recorded: the first run after start-up is slower (page faults,
    # allocator, CPU frequency), and INCR, the reference, runs first in a round.
    for pipeline, n in ((1, min(n1, 50000)), (16, min(n16, 200000))):
        run_benchmark(a.port, clients, keyspace, n, pipeline, resolved[0][1], cpu, bench_bin)
    r.flushall()

    t0 = time.time()
    for rnd in range(1, rounds + 1):
        for pipeline, n in ((1, n1), (16, n16)):
            incr_rps = None
            for name, cmd in resolved:
                r.flushall()
                if name in PREFILL:
                    PREFILL[name](r, keyspace)
                keys_before = r.dbsize()
                cpu_before = main_thread_cpu(r)
                rps, argv, out = run_benchmark(a.port, clients, keyspace, n, pipeline,
                                               cmd, cpu, bench_bin)
                cpu_us = (main_thread_cpu(r) - cpu_before) * 1e6 / n
                keys_after = r.dbsize()
                if name == "INCR":
                    incr_rps, incr_cpu_us = rps, cpu_us
                ratio, cpu_ratio = rps / incr_rps, incr_cpu_us / cpu_us
                results.setdefault((name, pipeline), []).append((rps, ratio, cpu_us, cpu_ratio))
                raw["runs"].append({"round": rnd, "P": pipeline, "case": name,
                                    "rps": rps, "x_incr": ratio, "server_cpu_us": cpu_us,
                                    "x_incr_cpu": cpu_ratio, "argv": argv,
                                    "keys_before": keys_before, "keys_after": keys_after,
                                    "csv": out})
                print("  round %d P=%-2d %-26s %12.0f ops/s  x%.3f  cpu %.3f us x%.3f  (keys %d)"
                      % (rnd, pipeline, name, rps, ratio, cpu_us, cpu_ratio, keys_after),
                      file=sys.stderr)
    r.flushall()
    raw["seconds"] = round(time.time() - t0, 1)

    def med(name, p, fields=(0, 1)):
        v = results[(name, p)]
        return tuple(statistics.median(x[i] for x in v) for i in fields)

    lines = []
    lines.append("## " + a.title)
    lines.append("")
    lines.append("redis-server pinned to CPU 0, redis-benchmark pinned to CPU %d; "
                 "`-c %d -r %d`, P=1 `-n %d`, P=16 `-n %d`; %d interleaved round%s; "
                 "median ops/s and median ratio to INCR of the same round. \"CPU us\": the "
                 "server's main-thread CPU time per command at P=16 (INFO cpu), which other "
                 "work on the machine does not change, and its ratio to INCR's."
                 % (cpu, clients, keyspace, n1, n16, rounds, "" if rounds == 1 else "s"))
    lines.append("")
    lines.append("| case | command | P=1 ops/s | P=1 x INCR | P=16 ops/s | P=16 x INCR "
                 "| P=16 CPU us | x INCR by CPU |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, cmd in cases:
        shown = " ".join(cmd)
        if cmd[0] == "EVALSHA":
            shown = "EVALSHA <%s.lua> %s" % (cmd[1][1:], " ".join(cmd[2:]))
        r1, x1 = med(name, 1)
        r16, x16, cpu16, xcpu16 = med(name, 16, (0, 1, 2, 3))
        lines.append("| %s | `%s` | %.0f | %.2f | %.0f | %.2f | %.3f | %.2f |"
                     % (name, shown, r1, x1, r16, x16, cpu16, xcpu16))
    lines.append("")
    names = [c[0] for c in cases]
    notes = ["The server is FLUSHALLed before every run; one unrecorded INCR warm-up precedes round 1."]
    if "Lua token bucket (2 keys)" in names:
        notes.append("The Lua token bucket: redis-benchmark expands every `__rand_int__` independently, so the two "
                     "keys of one Lua token-bucket call carry different numbers; the work per "
                     "call (2 GET + 2 SET PX) is the same as with one user's pair.")
    if "FG.PEEK TOKEN" in names:
        notes.append("The FG.PEEK keyspace is prefilled (`FG.TOKEN pk:<n> 100 10 COST 90`, "
                     "TTL 9 s) so peeks read a real state, not a missing key.")
    lines.append("Notes: " + " ".join(notes))
    lines.append("")
    if rounds > 1:
        lines.append("Spread over rounds (min-max of the ratio to INCR; first row: INCR itself in ops/s, a wide range means the machine was busy):")
        lines.append("")
        lines.append("| case | P=1 x INCR | P=16 x INCR |")
        lines.append("|---|---:|---:|")
        v1 = [x[0] for x in results[("INCR", 1)]]
        v16 = [x[0] for x in results[("INCR", 16)]]
        lines.append("| INCR ops/s (noise check) | %.0f-%.0f | %.0f-%.0f |"
                     % (min(v1), max(v1), min(v16), max(v16)))
        for name, _ in cases:
            if name == "INCR":
                continue
            v1 = [x[1] for x in results[(name, 1)]]
            v16 = [x[1] for x in results[(name, 16)]]
            lines.append("| %s | %.2f-%.2f | %.2f-%.2f |"
                         % (name, min(v1), max(v1), min(v16), max(v16)))
        lines.append("")
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out_raw, "w") as f:
        json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
