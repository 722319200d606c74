#!/usr/bin/python3
"""Memory per rate-limit key: floodgate families vs plain-Redis layouts.

Called by bench/run.sh with a running server that has the module loaded.
For each case: FLUSHALL SYNC, wait until used_memory is stable, read it, fill
N keys named user:%08d (i = 1..N) with pipelined redis-py (batches of 1000
commands), wait until used_memory is stable again, and report
(used_memory after - before) / N. That figure includes everything a key costs
the server: the key name, the value, the TTL entry and the share of both hash
tables (main dict and expires dict).

Every case gives its keys a TTL far longer than the fill, so nothing expires
while measuring; DBSIZE is checked after the fill.

Usage: memory.py --port PORT --lua-dir DIR --out-md FILE --out-raw FILE
Environment: BENCH_MEM_KEYS (default 200000; QUICK=1: 20000),
BENCH_MEM_CASES=name,name,... (substring match on the case name).
"""

import argparse
import json
import os
import sys
import time

import redis

HOUR_MS = 3600000


def key(i):
    return "user:%08d" % i


def now_ms():
    return int(time.time() * 1000)


# Each case: (name, description, keys per user, function(i, shas) -> list of commands)
def cases():
    ms = now_ms()
    ns19 = (ms + HOUR_MS) * 1000000 + 123456  # a 19-digit ns TAT like redis-cell keeps
    return [
        # floodgate. Rates are slow so the TTL (time until the state is empty) is long.
        ("FG.TOKEN", "`FG.TOKEN k 100 0.001` once", 1,
         lambda i, s: [("FG.TOKEN", key(i), "100", "0.001")]),
        ("FG.LEAKY", "`FG.LEAKY k 100 0.001` once", 1,
         lambda i, s: [("FG.LEAKY", key(i), "100", "0.001")]),
        ("FG.GCRA", "`FG.GCRA k 100 1 1000000` once", 1,
         lambda i, s: [("FG.GCRA", key(i), "100", "1", "1000000")]),
        ("GCRA (Redis 8.8's)", "`GCRA k 99 1 1000` once (a decimal us TAT, PXAT)", 1,
         lambda i, s: [("GCRA", key(i), "99", "1", "1000")]),
        ("CL.THROTTLE", "`CL.THROTTLE k 15 1 3600` once", 1,
         lambda i, s: [("CL.THROTTLE", key(i), "15", "1", "3600")]),
        ("FG.FIXED", "`FG.FIXED k 100 3600000` once", 1,
         lambda i, s: [("FG.FIXED", key(i), "100", "3600000")]),
        ("FG.SLIDING", "`FG.SLIDING k 100 3600000` once", 1,
         lambda i, s: [("FG.SLIDING", key(i), "100", "3600000")]),
        ("FG.SLIDELOG, 1 entry", "`FG.SLIDELOG k 100 3600000` once", 1,
         lambda i, s: [("FG.SLIDELOG", key(i), "100", "3600000")]),
        ("FG.SLIDELOG, 10 entries", "`FG.SLIDELOG k 100 3600000` 10 times", 1,
         lambda i, s: [("FG.SLIDELOG", key(i), "100", "3600000")] * 10),
        # plain Redis layouts
        ("INCR + EXPIRE", "`INCR k` + `PEXPIRE k 3600000` (fixed window, value 1)", 1,
         lambda i, s: [("INCR", key(i)), ("PEXPIRE", key(i), HOUR_MS)]),
        ("SET int PX", "`SET k <13-digit ms> PX 3600000` (e.g. a GCRA TAT in ms)", 1,
         lambda i, s: [("SET", key(i), str(ms + i), "PX", HOUR_MS)]),
        ("redis-cell-like", "`SET k <19-digit ns> PX 3600000`", 1,
         lambda i, s: [("SET", key(i), str(ns19 + i), "PX", HOUR_MS)]),
        ("Spring two-key (Lua)",
         "bench/lua/token_bucket.lua once: `{k}.tokens` + `{k}.timestamp`, both with PX (bytes per user, 2 keys)", 2,
         lambda i, s: [("EVALSHA", s["token_bucket"], 2, "{%s}.tokens" % key(i),
                        "{%s}.timestamp" % key(i), "0.001", "100", "1")]),
        ("ZSET log, 10 entries (Lua)", "bench/lua/sliding_log.lua 10 times (limit 100, 1 h)", 1,
         lambda i, s: [("EVALSHA", s["sliding_log"], 1, key(i), "100", HOUR_MS)] * 10),
    ]


LUA_SCRIPTS = ["token_bucket", "fixed_window", "sliding_log"]


def die(msg):
    print("memory.py: ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def used_memory(r):
    return int(r.info("memory")["used_memory"])


def stable_used_memory(r, first_wait=1.0, timeout=15.0):
    """Wait, then read used_memory until two reads 0.5 s apart agree (an
    incremental rehash of the hash tables finishing changes it)."""
    time.sleep(first_wait)
    prev = used_memory(r)
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.5)
        cur = used_memory(r)
        if cur == prev:
            return cur
        prev = cur
    return prev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--lua-dir", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-raw", required=True)
    a = ap.parse_args()

    quick = os.environ.get("QUICK", "") not in ("", "0")
    n = int(os.environ.get("BENCH_MEM_KEYS") or (20000 if quick else 200000))
    sel = [s.strip().lower() for s in os.environ.get("BENCH_MEM_CASES", "").split(",") if s.strip()]

    r = redis.Redis(host="127.0.0.1", port=a.port)
    shas = {}
    for name in LUA_SCRIPTS:
        with open(os.path.join(a.lua_dir, name + ".lua")) as f:
            shas[name] = r.script_load(f.read())

    todo = [c for c in cases() if not sel or any(s in c[0].lower() for s in sel)]
    if not todo:
        die("BENCH_MEM_CASES matched no case")

    raw = {"keys": n, "cases": []}
    rows = []
    for name, desc, keys_per_user, gen in todo:
        r.execute_command("FLUSHALL", "SYNC")
        before = stable_used_memory(r, first_wait=0.5)
        t0 = time.time()
        pipe = r.pipeline(transaction=False)
        for i in range(1, n + 1):
            for cmd in gen(i, shas):
                pipe.execute_command(*cmd)
            if len(pipe) >= 1000:
                pipe.execute()  # raises on the first error reply
        pipe.execute()
        fill_s = time.time() - t0
        after = stable_used_memory(r)
        dbsize = r.dbsize()
        if dbsize != n * keys_per_user:
            die("%s: DBSIZE %d after the fill, expected %d" % (name, dbsize, n * keys_per_user))
        per_key = (after - before) / n
        sample = key(1) if keys_per_user == 1 else "{%s}.tokens" % key(1)
        enc = None
        try:
            enc = r.object("encoding", sample)
            enc = enc.decode() if isinstance(enc, bytes) else enc
        except redis.ResponseError:
            pass
        mu = r.memory_usage(sample, samples=0)
        if keys_per_user == 2:
            mu = (mu or 0) + (r.memory_usage("{%s}.timestamp" % key(1), samples=0) or 0)
        rows.append((name, desc, per_key, mu))
        raw["cases"].append({"case": name, "how": desc, "before": before, "after": after,
                             "dbsize": dbsize, "bytes_per_key": per_key,
                             "fill_seconds": round(fill_s, 2), "sample_encoding": enc,
                             "sample_pttl": r.pttl(sample), "sample_memory_usage": mu})
        print("  %-28s %8.1f bytes/key  (fill %.1fs, dbsize %d, encoding %s)"
              % (name, per_key, fill_s, dbsize, enc), file=sys.stderr)
    r.execute_command("FLUSHALL", "SYNC")

    lines = ["## Memory", "",
             "used_memory per rate-limit key after %d keys `user:%%08d` on a FLUSHALLed server: "
             "(used_memory after - before) / %d. Includes key name, value, TTL entry and the "
             "hash-table slots. Every key has a TTL. MEMORY USAGE (of `user:00000001`, "
             "SAMPLES 0) is what the server reports for one key, for comparison." % (n, n), "",
             "| case | how each key is made | bytes/key | MEMORY USAGE |", "|---|---|---:|---:|"]
    for name, desc, per_key, mu in rows:
        lines.append("| %s | %s | %.1f | %s |" % (name, desc, per_key, mu))
    lines.append("")
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out_raw, "w") as f:
        json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
