#!/usr/bin/python3
"""Unique counting against a real server: one FG.UV counter against the
classic 84 HyperLogLog keys (docs/design-uv.md, "Benchmark plan", point 2).

    make bench-uv-server                          (about a minute)
    QUICK=1 /usr/bin/python3 bench/uv_server.py   (1M items; not for comparison)
    make bench-uv-memory                          (memory only, a few minutes)

Starts its own redis-server (127.0.0.1, a free port, `--save ""
--appendonly no`, build/floodgate.so) pinned to CPU 0, runs itself and
redis-benchmark on CPU 1, and stops the server (by PID) at exit.

Workload: UV_EVENTS items (default 10M) over the 24 hours ending at the
server's clock when the feed starts, at a diurnal rate (1 + 0.7 sin)
with a 10-minute spike at 4x; 60% of the events from 1M regulars (skewed:
id = 1M u^2.5), 40% from a tail of 40M ids (uniform), so ~4.7M distinct:
the in-process benchmark's workload (bench/uv_bench.c). Each second's
items go, pipelined, as one `FG.UVADDAT {uv}:c <second> items...` and one
`PFADD` into their hour key, `{uv}:h0` .. `{uv}:h23` (hours counted from the
start of the day), and for the last hour one more into their minute key,
`{uv}:m0` .. `{uv}:m59`: the 84 keys hold exactly the day, with no partial
key at either end.

Measures (server time is INFO commandstats' usec_per_call over 1,000 calls
in 5 batches, each after CONFIG RESETSTAT, pipelined 100 at a time: the
median batch; the round trip is the median of 201 unpipelined calls):
  - FG.UVCOUNT LAST 24 HOURS, and BETWEEN over exactly the fed day and its
    last hour (the sets the keys hold), against PFCOUNT of the 84 keys, of
    the 24 hour keys and of the 60 minute keys;
  - each count's error against the exact distinct count of its window (kept
    here: every id's last second). LAST 24 HOURS ends at the second it runs,
    so it misses the first seconds of the day, as many as the feed took;
    its exact count is of that window;
  - MEMORY USAGE of the counter against the sum over the keys;
  - FG.UVEXPORT -> SET -> PFCOUNT equals FG.UVCOUNT for the same window;
  - throughput of FG.UVADD, PFADD and INCR with redis-benchmark (-P 16,
    -c 50), one item and ten items per command, as ratios to INCR of the
    same round (5 interleaved rounds, the median).

MEMORY=1 measures memory only: counters with the default parameters fed
3, 100, 10,000 and 1M distinct items, all in one second or spread evenly
over the last 24 hours (MEMORY USAGE, FG.UVINFO, and the growth of
used_memory per counter, which adds the allocator's rounding), then the
busy counter of the workload above against its 84 keys, then full
counters by items a day, in process (`build/bench/uv_bench memory`).

Prints markdown and writes it to BENCH_OUT (default bench/results/uv-server.md;
QUICK: bench/results/uv-server-quick.md; MEMORY: bench/results/uv-memory.md).
Environment: QUICK=1, MEMORY=1, UV_EVENTS, MODULE, REDIS_SERVER,
REDIS_BENCHMARK.
"""

import array
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time

import redis

from bench_server import BenchServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.environ.get("QUICK", "") not in ("", "0")
MEMORY = os.environ.get("MEMORY", "") not in ("", "0")
EVENTS = int(os.environ.get("UV_EVENTS", 1000000 if QUICK else 10000000))
MODULE = os.environ.get("MODULE", os.path.join(ROOT, "build", "floodgate.so"))
UV_BENCH = os.path.join(ROOT, "build", "bench", "uv_bench")
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
REDIS_BENCHMARK = os.environ.get("REDIS_BENCHMARK", "redis-benchmark")
OUT = os.environ.get("BENCH_OUT", os.path.join(
    ROOT, "bench", "results",
    "uv-memory.md" if MEMORY else "uv-server-quick.md" if QUICK else "uv-server.md"))
SERVER_CPU, CLIENT_CPU = 0, 1

DAY = 86400
REGULARS = 1000000
TAIL = 40000000
SPIKE_AT, SPIKE_LEN = 15 * 3600, 600
COUNTER = "{uv}:c"
HOUR_KEYS = ["{uv}:h%d" % h for h in range(24)]
MINUTE_KEYS = ["{uv}:m%d" % m for m in range(60)]
CALLS = 100 if QUICK else 1000
BATCHES = 5
RTT_CALLS = 51 if QUICK else 201
BATCH_SECONDS = 300  # seconds of items per pipelined batch
ROUNDS = 1 if QUICK else 5
THROUGHPUT_N = 200000 if QUICK else 2000000  # commands per run (a tenth with 10 items)
# MEMORY=1: (distinct items, counters fed alike, whose used_memory is averaged)
MEMORY_SIZES = ((3, 100), (100, 100), (10000, 10), (1000000, 1))
ITEMS_PER_COMMAND = 1000


def log(msg):
    print("uv_server.py: " + msg, file=sys.stderr, flush=True)


def die(msg):
    log("ERROR: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------- workload

def events_per_second():
    """Events at each second of the day, from the cumulative rate: exactly
    EVENTS in all (as bench/uv_bench.c)."""
    def rate(s):
        r = 1 + 0.7 * math.sin(2 * math.pi * s / DAY)
        return 4 * r if SPIKE_AT <= s < SPIKE_AT + SPIKE_LEN else r
    rates = [rate(s) for s in range(DAY)]
    total, cum, first = sum(rates), 0.0, []
    for r in rates:
        first.append(int(EVENTS * cum / total))
        cum += r
    first.append(EVENTS)
    return [first[s + 1] - first[s] for s in range(DAY)]


def bulk(b):
    return b"$%d\r\n%b\r\n" % (len(b), b)


def command(*parts):
    """A RESP command from already-encoded bulk strings."""
    return b"*%d\r\n" % len(parts) + b"".join(parts)


class Exact:
    """Exact distinct counts of windows ending at the day's last second: the
    last second (+1) each id was seen at, and how many ids were last seen at
    each second. Distinct in [t, end] = the sum of that from t on."""

    def __init__(self):
        self.last = array.array("i", bytes(4 * (REGULARS + TAIL)))
        self.last_at = [0] * DAY

    def since(self, t):
        return sum(self.last_at[max(t, 0):])


def feed(srv, start):
    """Feeds the day [start, start + DAY) second by second; returns the
    exact counts and the seconds the feed took."""
    rng = random.Random(20240601)
    rnd = rng.random
    exact = Exact()
    last, last_at = exact.last, exact.last_at
    regulars = {}  # id -> its RESP bulk string (the regulars repeat)
    counts = events_per_second()
    ucmd, pfadd, key = bulk(b"FG.UVADDAT"), bulk(b"PFADD"), bulk(COUNTER.encode())
    hour_keys = [bulk(k.encode()) for k in HOUR_KEYS]
    minute_keys = [bulk(k.encode()) for k in MINUTE_KEYS]
    sock = socket.create_connection(("127.0.0.1", srv.port))
    t0 = time.monotonic()
    pending, replies = [], 0
    for s in range(DAY):
        items = []
        for _ in range(counts[s]):
            if rnd() < 0.6:
                i = int(REGULARS * rnd() ** 2.5)
                b = regulars.get(i)
                if b is None:
                    b = regulars[i] = bulk(b"u%d" % i)
            else:
                i = REGULARS + int(rnd() * TAIL)
                b = bulk(b"u%d" % i)
            items.append(b)
            seen = last[i]
            if seen:
                last_at[seen - 1] -= 1
            last[i] = s + 1
            last_at[s] += 1
        if items:
            us = bulk(b"%d" % ((start + s) * 1000000))
            pending.append(command(ucmd, key, us, *items))
            pending.append(command(pfadd, hour_keys[s // 3600], *items))
            replies += 2
            if s >= DAY - 3600:
                pending.append(command(pfadd, minute_keys[(s - (DAY - 3600)) // 60], *items))
                replies += 1
        if (s + 1) % BATCH_SECONDS == 0 or s == DAY - 1:
            sock.sendall(b"".join(pending))
            read_integer_replies(sock, replies)
            pending, replies = [], 0
        if (s + 1) % 7200 == 0:
            log("fed %2d h of 24 (%.0f s)" % ((s + 1) // 3600, time.monotonic() - t0))
    sock.close()
    return exact, time.monotonic() - t0


def read_integer_replies(sock, n):
    """Reads n integer replies; any other reply (an error) stops the run."""
    data = b""
    while data.count(b"\r\n") < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            die("the server closed the connection during the feed")
        data += chunk
    for line in data.split(b"\r\n")[:n]:
        if not line.startswith(b":"):
            die("feed: unexpected reply %r" % line[:200])


# ------------------------------------------------------------- measuring

def server_time_per_call(r, args):
    """usec_per_call of INFO commandstats, in BATCHES batches of CALLS /
    BATCHES calls (each after CONFIG RESETSTAT): the median batch, and the
    fastest and slowest (other work on the server's CPU shows there)."""
    per_batch = CALLS // BATCHES
    batches = []
    for _ in range(BATCHES):
        r.config_resetstat()
        for done in range(0, per_batch, 100):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(100, per_batch - done)):
                pipe.execute_command(*args)
            pipe.execute()
        name = "cmdstat_" + args[0].lower()
        stat = r.info("commandstats").get(name)
        if stat is None or stat["calls"] != per_batch:
            die("commandstats for %s: %r" % (args[0], stat))
        batches.append(stat["usec_per_call"])
    return statistics.median(batches), min(batches), max(batches)


def round_trip_us(r, args):
    times = []
    for _ in range(RTT_CALLS):
        t0 = time.perf_counter()
        r.execute_command(*args)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def in_one_second(r, calls):
    """The replies of calls sent back to back, and the server second they
    ran at (retried until TIME agrees before and after)."""
    for _ in range(20):
        pipe = r.pipeline(transaction=False)
        pipe.time()
        for args in calls:
            pipe.execute_command(*args)
        pipe.time()
        out = pipe.execute()
        if out[0][0] == out[-1][0]:
            return out[1:-1], out[0][0]
    die("could not run %r within one second" % (calls,))


def error(count, exact):
    return (count - exact) / exact


def memory_usage(r, key):
    return r.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")


def uv_info(r, key):
    rep = r.execute_command("FG.UVINFO", key)
    return dict(zip((k.decode() for k in rep[::2]), rep[1::2]))


def busy_memory_lines(r):
    """MEMORY USAGE of the fed counter against its 84 keys."""
    info = uv_info(r, COUNTER)
    hour_bytes = sum(memory_usage(r, k) for k in HOUR_KEYS)
    minute_bytes = sum(memory_usage(r, k) for k in MINUTE_KEYS)
    return [
        "| memory (`MEMORY USAGE ... SAMPLES 0`) | bytes |",
        "|---|---:|",
        "| the counter `{uv}:c` (FG.UVINFO: %s entries, %s buckets, %s bytes) | %d |"
        % (info["entries"], info["buckets"], info["bytes"], memory_usage(r, COUNTER)),
        "| its `DUMP` (the RDB payload: sparse buckets) | %d |" % len(r.dump(COUNTER)),
        "| the 24 hour keys | %d |" % hour_bytes,
        "| the 60 minute keys | %d |" % minute_bytes,
        "| the 84 keys | %d |" % (hour_bytes + minute_bytes),
    ]


def redis_benchmark(port, n, args):
    argv = ["taskset", "-c", str(CLIENT_CPU), REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port),
            "-c", "50", "-P", "16", "-r", "100000", "-n", str(n), "-q", "--csv"] + args
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = [line.split(",") for line in p.stdout.splitlines() if line and not line.startswith('"test"')]
    if p.returncode != 0 or "Error" in p.stdout + p.stderr or not rows:
        die("redis-benchmark failed: %s\n%s%s" % (" ".join(argv), p.stdout, p.stderr))
    return float(rows[-1][1].strip('"'))


THROUGHPUT = [
    ("INCR", ["INCR", "uvb:incr:__rand_int__"], 1),
    ("PFADD, 1 item", ["PFADD", "uvb:hll1", "item:__rand_int__"], 1),
    ("FG.UVADD, 1 item", ["FG.UVADD", "uvb:uv1", "item:__rand_int__"], 1),
    ("PFADD, 10 items", ["PFADD", "uvb:hll10"] + ["i%d:__rand_int__" % i for i in range(10)], 10),
    ("FG.UVADD, 10 items", ["FG.UVADD", "uvb:uv10"] + ["i%d:__rand_int__" % i for i in range(10)], 10),
]


def throughput(srv):
    r = srv.client
    for name, args, _ in THROUGHPUT:  # every command works before it is timed
        r.execute_command(*[a.replace("__rand_int__", "probe") for a in args])
    r.flushall()
    redis_benchmark(srv.port, THROUGHPUT_N // 5, THROUGHPUT[0][1])  # warm-up, not recorded
    ratios = {name: [] for name, _, _ in THROUGHPUT}
    rates = {name: [] for name, _, _ in THROUGHPUT}
    for rnd in range(ROUNDS):
        incr = None
        for name, args, items in THROUGHPUT:
            r.flushall()
            ops = redis_benchmark(srv.port, THROUGHPUT_N // items, args)
            incr = ops if incr is None else incr
            rates[name].append(ops)
            ratios[name].append(ops / incr)
            log("round %d %-20s %10.0f ops/s  x%.3f" % (rnd + 1, name, ops, ops / incr))
    r.flushall()
    return rates, ratios


# ------------------------------------------------------------------ memory

def feed_counter(sock, key, by_second):
    """FG.UVADDAT key for {second: [item, ...]}, pipelined, at most
    ITEMS_PER_COMMAND items a command."""
    cmd, k = bulk(b"FG.UVADDAT"), bulk(key.encode())
    pending = []
    for sec in sorted(by_second):
        items, us = by_second[sec], bulk(b"%d" % (sec * 1000000))
        for i in range(0, len(items), ITEMS_PER_COMMAND):
            pending.append(command(cmd, k, us, *(bulk(x) for x in items[i:i + ITEMS_PER_COMMAND])))
        if len(pending) >= 1000:
            sock.sendall(b"".join(pending))
            read_integer_replies(sock, len(pending))
            pending = []
    sock.sendall(b"".join(pending))
    read_integer_replies(sock, len(pending))


def placed(items, placement, end):
    """The items at the second `end`, or spread evenly over the 24 hours
    ending there."""
    if placement == "one second":
        return {end: items}
    by_second = {}
    for i, item in enumerate(items):
        by_second.setdefault(end - DAY + 1 + i * DAY // len(items), []).append(item)
    return by_second


def pfadd_keys(r, by_second, end):
    """The items, {second: [item, ...]}, PFADDed into a key per minute of
    the hour ending at `end` and per hour of the day ending there (the 84
    keys of the busy counter): the keys written."""
    keys = set()
    p = r.pipeline(transaction=False)
    for sec, items in by_second.items():
        age = end - sec
        for key, kept in (("{uv}:pf:m%d" % (sec // 60), age < 3600), ("{uv}:pf:h%d" % (sec // 3600), True)):
            if kept:
                keys.add(key)
                p.execute_command("PFADD", key, *items)
    p.execute()
    return sorted(keys)


def small_counters(srv):
    """Counters with the default parameters, by items and placement."""
    r = srv.client
    sock = socket.create_connection(("127.0.0.1", srv.port))
    out = ["## Memory of a counter by its items",
           "",
           "Counters created by their first add (the defaults: SPAN 7 days, 60 minute, 48 hour "
           "and 31 day buckets), fed distinct items with `FG.UVADDAT`, all at the server's "
           "current second or spread evenly over the 24 hours ending there. `MEMORY USAGE` is "
           "the counter's `mem_usage` (the bytes it asked for) plus the key; used_memory is "
           "the growth of `INFO memory`'s used_memory per counter over N counters fed alike "
           "(what the allocator really handed out); `DUMP` is the RDB payload's length. "
           "\"PFADD keys\" is what the usual alternative takes for the same items: a "
           "HyperLogLog key per minute of the last hour and per hour of the last day that "
           "has items (`MEMORY USAGE` summed; each key sparse until its items make it dense).",
           "",
           "| items | placed | N | `MEMORY USAGE` | used_memory / counter | staircase entries "
           "| buckets | FG.UVINFO bytes | `DUMP` | PFADD keys (keys) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, counters in MEMORY_SIZES:
        for placement in ("one second", "24 hours"):
            r.flushall()
            end = r.time()[0]
            before = r.info("memory")["used_memory"]
            for c in range(counters):
                items = [b"c%d:i%d" % (c, i) for i in range(n)]
                feed_counter(sock, "{uv}:n%d" % c, placed(items, placement, end))
            grown = (r.info("memory")["used_memory"] - before) / counters
            info = uv_info(r, "{uv}:n0")
            pf_keys = pfadd_keys(r, placed([b"c0:i%d" % i for i in range(n)], placement, end), end)
            out.append("| %d | %s | %d | %d | %.0f | %d | %d | %d | %d | %d (%d) |"
                       % (n, placement, counters, memory_usage(r, "{uv}:n0"), grown, info["entries"],
                          info["buckets"], info["bytes"], len(r.dump("{uv}:n0")),
                          sum(memory_usage(r, k) for k in pf_keys), len(pf_keys)))
            log("memory: %d items, %s" % (n, placement))
    sock.close()
    r.flushall()
    return out + [""]


def measure_memory(srv):
    out = small_counters(srv)
    r = srv.client
    end = r.time()[0]
    log("feeding %d items over the day ending at %d" % (EVENTS, end))
    exact, _ = feed(srv, end - DAY + 1)
    out += ["## The busy counter",
            "",
            "The workload of the full run: %d items (%d distinct) over the 24 hours ending at "
            "the server's clock, into one counter with the default parameters and into the 84 "
            "minute and hour keys." % (EVENTS, exact.since(0)),
            ""]
    out += busy_memory_lines(r)
    log("full counters in process (%s memory)" % UV_BENCH)
    full = subprocess.run([UV_BENCH, "memory"], stdout=subprocess.PIPE, text=True, check=True)
    out += ["", full.stdout]
    load = "- load average at end: %s" % " ".join(open("/proc/loadavg").read().split()[:3])
    return [load, ""] + out


# ------------------------------------------------------------------ report

def header(r):
    info = r.info("server")
    cpu = "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        cpu = next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                         text=True).stdout.strip() or "no commit"
    if subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src"], stdout=subprocess.PIPE,
                      text=True).stdout.strip():
        git += " (src modified)"
    return [
        "# floodgate unique counting against a server",
        "",
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "- mode: %s" % ("MEMORY" if MEMORY else
                        "QUICK (smoke test, not for comparison)" if QUICK else "full"),
        "- machine: nproc %d, %s, %s %s" % (os.cpu_count(), cpu, os.uname().sysname, os.uname().release),
        "- redis-server %s on CPU %d (`--save \"\" --appendonly no`, 127.0.0.1); client and "
        "redis-benchmark on CPU %d" % (info["redis_version"], SERVER_CPU, CLIENT_CPU),
        "- module: %s, git %s" % (MODULE, git),
        "- load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]),
    ]


def main():
    if not os.path.exists(MODULE):
        die("module not found: %s (run 'make module')" % MODULE)
    if MEMORY and not os.path.exists(UV_BENCH):
        die("%s not found (run 'make bench-uv-memory')" % UV_BENCH)
    if (os.cpu_count() or 1) < 2:
        die("needs 2 CPUs (server on CPU 0, client on CPU 1)")
    os.sched_setaffinity(0, {CLIENT_CPU})
    try:
        srv = BenchServer(REDIS_SERVER, MODULE, SERVER_CPU, "floodgate-uvbench.",
                          ("--floodgate.explicit-time", "yes"))  # FG.UVADDAT
    except RuntimeError as e:
        die(str(e))
    try:
        lines = header(srv.client)
        lines += measure_memory(srv) if MEMORY else measure(srv)
    finally:
        srv.stop()
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(text)
    log("written: " + OUT)


def measure(srv):
    r = srv.client
    try:
        r.execute_command("FG.UVCOUNT", COUNTER, "LAST", "1", "SECONDS")
    except redis.ResponseError as e:
        die("the module has no working FG.UVCOUNT: %s" % e)
    end = r.time()[0]
    start = end - DAY + 1
    log("feeding %d items over the day ending at %d" % (EVENTS, end))
    exact, feed_s = feed(srv, start)
    day_exact = exact.since(0)
    hour_exact = exact.since(DAY - 3600)
    day_us, hour_us, end_us = start * 1000000, (end - 3599) * 1000000, (end + 1) * 1000000

    last24 = ["FG.UVCOUNT", COUNTER, "LAST", "24", "HOURS"]
    between_day = ["FG.UVCOUNT", COUNTER, "BETWEEN", day_us, end_us]
    between_hour = ["FG.UVCOUNT", COUNTER, "BETWEEN", hour_us, end_us]
    pf84 = ["PFCOUNT"] + MINUTE_KEYS + HOUR_KEYS
    pf24 = ["PFCOUNT"] + HOUR_KEYS
    pf60 = ["PFCOUNT"] + MINUTE_KEYS

    (count24, count_day, count_hour), at = in_one_second(r, [last24, between_day, between_hour])
    exact24 = exact.since(at - 86399 - start)
    count84, count_h24, count_m60 = (r.execute_command(*c) for c in (pf84, pf24, pf60))

    log("timing the counts")
    rows = []
    for label, args, count, want in (
            ("`FG.UVCOUNT c LAST 24 HOURS`", last24, count24, exact24),
            ("`FG.UVCOUNT c BETWEEN` the fed day", between_day, count_day, day_exact),
            ("`PFCOUNT` of the 84 keys", pf84, count84, day_exact),
            ("`PFCOUNT` of the 24 hour keys", pf24, count_h24, day_exact),
            ("`FG.UVCOUNT c BETWEEN` its last hour", between_hour, count_hour, hour_exact),
            ("`PFCOUNT` of the 60 minute keys", pf60, count_m60, hour_exact)):
        rows.append((label, server_time_per_call(r, args), round_trip_us(r, args), count, want))

    (export, again), _ = in_one_second(r, [["FG.UVEXPORT", COUNTER, "LAST", "24", "HOURS"], last24])
    r.set("{uv}:export", export)
    exported = r.pfcount("{uv}:export")
    r.delete("{uv}:export")

    memory_lines = busy_memory_lines(r)

    log("throughput")
    rates, ratios = throughput(srv)

    out = ["- load average at end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]), ""]
    out.append("## Counting the last 24 hours: one counter against 84 keys")
    out.append("")
    out.append("%d items (%d distinct) over the 24 h ending at the server's clock, fed in %.0f s "
               "(%.0f items/s, to the counter and to the keys). Server time: `usec_per_call` of "
               "`INFO commandstats`, %d calls in %d batches of %d (pipelined 100 at a time, "
               "`CONFIG RESETSTAT` before each), the median batch; round trip: median of "
               "%d unpipelined calls. `LAST 24 HOURS` ran %d s after the day's last second, so its "
               "window misses the day's first %d s; its exact count is that window's."
               % (EVENTS, day_exact, feed_s, EVENTS / feed_s, CALLS, BATCHES, CALLS // BATCHES, RTT_CALLS,
                  at - end, at - end))
    out.append("")
    out.append("| count | server µs/call | (batches: min-max) | round trip µs | count | exact | error |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for label, (usec, fastest, slowest), rtt, count, want in rows:
        out.append("| %s | %.1f | %.1f-%.1f | %.0f | %d | %d | %+.2f%% |"
                   % (label, usec, fastest, slowest, rtt, count, want, 100 * error(count, want)))
    out.append("")
    out.append("`FG.UVCOUNT c LAST 24 HOURS` takes %.1f µs of server time (target: at most 50 µs), "
               "%.0fx less than `PFCOUNT` of the 84 keys and %.0fx less than of the 24 hour keys."
               % (rows[0][1][0], rows[2][1][0] / rows[0][1][0], rows[3][1][0] / rows[0][1][0]))
    out.append("Over the same items the counter and the keys give the same count (the same "
               "registers): the day %d and %d (%s), its last hour %d and %d (%s)."
               % (count_day, count84, "equal" if count_day == count84 else "DIFFERENT", count_hour,
                  count_m60, "equal" if count_hour == count_m60 else "DIFFERENT"))
    out.append("")
    out += memory_lines
    out.append("")
    same = "equal" if exported == again else "DIFFERENT"
    out.append("Export: `FG.UVEXPORT c LAST 24 HOURS` gave %d bytes (%s); `SET` then `PFCOUNT` "
               "of it: %d; `FG.UVCOUNT` in the same second: %d (%s)."
               % (len(export), "a dense HLL" if export[:4] == b"HYLL" else "NOT an HLL", exported, again,
                  same))
    out.append("")
    out.append("## Adds: throughput against INCR")
    out.append("")
    out.append("redis-benchmark `-c 50 -P 16 -r 100000 -n %d` (a tenth with 10 items) on CPU %d, "
               "%d interleaved round%s, the server FLUSHALLed before each run. INCR's keys are "
               "random among 100,000 (as in bench/run.sh); the counter and the HLL are one key "
               "each, items random among 100,000 (`__rand_int__`, drawn independently for each "
               "item)." % (THROUGHPUT_N, CLIENT_CPU, ROUNDS, "" if ROUNDS == 1 else "s"))
    out.append("")
    out.append("| command | ops/s (median) | items/s | x INCR (median) | x INCR (min-max) |")
    out.append("|---|---:|---:|---:|---:|")
    for name, args, items in THROUGHPUT:
        med = statistics.median(rates[name])
        out.append("| %s | %.0f | %.0f | %.2f | %.2f-%.2f |"
                   % (name, med, med * items, statistics.median(ratios[name]), min(ratios[name]),
                      max(ratios[name])))
    out.append("")
    if exported != again or count_day != count84 or count_hour != count_m60:
        die("a count differs from the one it must equal:\n" + "\n".join(out))
    return out


if __name__ == "__main__":
    main()
