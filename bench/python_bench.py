#!/usr/bin/python3
"""Decisions per second from Python: the floodgate package (ctypes over
libfloodgate) in process (mem:) and against a server (redis://), next to
redis-py running a plain Lua token bucket, with INCR as the reference
(docs/benchmarks.md, "Python").

    make bench-python                              (about a minute)
    /usr/bin/python3 bench/python_bench.py [--output FILE] [--decisions N]
    QUICK=1 /usr/bin/python3 bench/python_bench.py (smoke test; not for comparison)

Needs build/floodgate.so and build/libfloodgate.so.0 (`make module
library`) and redis-py. Starts its own redis-server ($FLOODGATE_REDIS_SERVER,
default /usr/bin/redis-server; 127.0.0.1, a free port, `--save ""
--appendonly no`, --loadmodule build/floodgate.so) pinned to CPU 0, runs
itself on CPU 1, and stops the server by its PID at exit.

One token bucket per key, 1,000 keys taken in turn, capacity 1,000 and
1,000 units a second, cost 1: no key is asked for more than its refill, so
nothing is denied after the start (the denials are counted and printed).
Cases, each DECISIONS decisions per run (64,000 by default):

  floodgate mem:, one at a time      Client("mem:").check(key, limit)
  floodgate mem:, check_batch of 64  Client("mem:").check_batch(64 requests)
  floodgate redis://, one at a time  client.check: one FG.TOKEN round trip
  floodgate redis://, batch of 64    client.check_batch: 64 FG.TOKEN in one
                                     pipelined round trip
  Lua, one at a time                 redis-py evalsha(LUA_TOKEN_BUCKET)
  Lua, pipeline of 64                the same in pipeline(transaction=False)
  INCR, one at a time / of 64        redis-py execute_command("INCR", key)
                                     (redis-py's incr() sends INCRBY)

Every case gets its own key prefix (keys of one length), the server is
FLUSHALLed once before the warm-ups, and every case has one unrecorded
warm-up of DECISIONS/4 decisions (it creates the keys, loads the script,
opens the connections). Then RUNS interleaved rounds (3: every case once,
then again...). Each run is timed with time.perf_counter around the loop
alone; the batches' request lists are built before it. Before each run of a
server case: CONFIG RESETSTAT and INFO cpu; after it, INFO commandstats and
INFO cpu, on another connection. A run whose command count is not
DECISIONS, or that saw a failed or rejected call, aborts the benchmark.

Reported per case, each the median of the runs (the range of decisions/s
over the runs beside it): decisions/s, microseconds per decision, the
ratio to the Lua script in the same mode (one at a time, or 64 at once)
and to INCR in the same mode (each the median over the rounds of the
ratio within a round), the client's CPU time per decision, user
and system apart (getrusage: user is Python, ctypes and libfloodgate or
redis-py; system is mostly the socket calls; the rest of the wall time is
waiting for the server), the server's usec_per_call of the command
(INFO commandstats: FG.TOKEN, EVALSHA, INCR; the script's inner calls are
inside EVALSHA's time) and the server's main-thread CPU time per decision
(INFO cpu: with the socket reads and writes, which a pipeline shares among
its commands). Also the share of a CPU that other processes took during
each round (/proc/stat's busy time less the server's and this process's):
other work on the 2 CPUs makes the numbers noisy. Before each round the
benchmark waits for 2 s in which other processes took under 10% of a CPU
(PYTHON_BENCH_MAX_WAIT seconds in all at most, 120 by default; then it goes
on and the share shows it).

The Lua script is written for this benchmark, a plain token bucket of the
usual shape: the time from TIME, tokens and timestamp in one hash (HMGET,
HSET), PEXPIRE of the time to refill. It returns 2 integers where FG.TOKEN
returns 5.

Output: the markdown on stdout, and in FILE with --output FILE. Progress
goes to stderr. Environment: QUICK=1 (6,400 decisions, 1 round),
PYTHON_BENCH_DECISIONS, PYTHON_BENCH_RUNS, PYTHON_BENCH_MAX_WAIT,
FLOODGATE_REDIS_SERVER, MODULE (default build/floodgate.so).
"""

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))

REDIS_SERVER = os.environ.get("FLOODGATE_REDIS_SERVER", "/usr/bin/redis-server")
MODULE = os.path.abspath(os.environ.get("MODULE", os.path.join(REPO, "build", "floodgate.so")))
QUICK = os.environ.get("QUICK", "0") not in ("", "0")
SERVER_CPU, CLIENT_CPU = 0, 1
KEYS = 1000
CAPACITY, RATE = 1000, 1000.0
BATCH = 64
MAX_WAIT = float(os.environ.get("PYTHON_BENCH_MAX_WAIT", 0 if QUICK else 120))

LUA_TOKEN_BUCKET = r"""
-- Token bucket in one hash (written for the floodgate benchmark).
-- KEYS[1] the bucket; ARGV capacity, refill per second, cost.
-- Returns {allowed (1|0), tokens left (floor)}.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(capacity, tokens + elapsed * rate / 1000000)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000))
return {allowed, math.floor(tokens)}
"""


def die(msg):
    print("bench/python_bench.py: ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


try:
    import redis
except ImportError:
    die("%s has no redis-py (apt install python3-redis)" % sys.executable)
if not os.path.exists(MODULE):
    die("module not found: %s (run 'make module library')" % MODULE)
try:
    import floodgate
except ImportError as e:
    die("%s (run 'make module library')" % e)
from bench_server import BenchServer, process_cpu_seconds  # noqa: E402


# ------------------------------------------------------------- measurements

def cpu_busy_seconds():
    """All CPUs' user, nice and system time (interrupts left out: the run's
    own loopback traffic is accounted there)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[1]) + int(fields[2]) + int(fields[3])) / os.sysconf("SC_CLK_TCK")


def cpu_usage(server_pid):
    """(wall clock, all CPUs' busy time, this process's CPU time, the
    server's), to tell how much of the CPUs other processes took."""
    return (time.perf_counter(), cpu_busy_seconds(), process_cpu_seconds(os.getpid()),
            process_cpu_seconds(server_pid))


def others_share(before, after):
    """The share of one CPU that processes other than the server and this
    one took between two cpu_usage() (measured over a round: /proc's
    clock ticks are too coarse for one run)."""
    wall, busy, me, srv = (a - b for a, b in zip(after, before))
    return max(0.0, busy - me - srv) / wall


def wait_for_quiet(server_pid, deadline):
    """Waits (until `deadline`, a perf_counter time) for 2 s in which other
    processes took under 10% of a CPU: test suites and builds come in
    bursts. Answers the seconds waited."""
    start = time.perf_counter()
    while True:
        before = cpu_usage(server_pid)
        time.sleep(2)
        share = others_share(before, cpu_usage(server_pid))
        if share < 0.10 or time.perf_counter() >= deadline:
            return time.perf_counter() - start
        progress("waiting for the CPUs to be quiet: others took %.0f%% of a CPU" % (100 * share))


def main_thread_cpu(r):
    info = r.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def keys_of(prefix, n):
    """n keys taken in turn among KEYS, all of one length."""
    names = ["%s:%06d" % (prefix, i) for i in range(KEYS)]
    return (names * (n // KEYS + 1))[:n]


def batches_of(seq):
    return [seq[i:i + BATCH] for i in range(0, len(seq), BATCH)]


# ------------------------------------------------------------------- cases
# Each case: make(n) -> a function that makes n decisions and answers the
# number denied; the lists it walks are built in make(), outside the timing.

class Case:
    def __init__(self, name, mode, kind, command, make):
        self.name, self.mode, self.kind, self.command, self.make = name, mode, kind, command, make
        self.runs = []  # dicts: seconds, denied, usec_per_call, cpu_per_decision


def fg_single(client, limit, prefix):
    def make(n):
        seq = keys_of(prefix, n)

        def run():
            denied = 0
            check = client.check
            for key in seq:
                if not check(key, limit).allowed:
                    denied += 1
            return denied
        return run
    return make


def fg_batch(client, limit, prefix):
    def make(n):
        batches = [[(key, limit) for key in b] for b in batches_of(keys_of(prefix, n))]

        def run():
            denied = 0
            check_batch = client.check_batch
            for reqs in batches:
                for res in check_batch(reqs):
                    if not res.allowed:
                        denied += 1
            return denied
        return run
    return make


def lua_single(r, sha, prefix):
    def make(n):
        seq = keys_of(prefix, n)

        def run():
            denied = 0
            evalsha = r.evalsha
            for key in seq:
                if not evalsha(sha, 1, key, CAPACITY, RATE, 1)[0]:
                    denied += 1
            return denied
        return run
    return make


def lua_batch(r, sha, prefix):
    def make(n):
        batches = batches_of(keys_of(prefix, n))

        def run():
            denied = 0
            pipe = r.pipeline(transaction=False)
            for b in batches:
                for key in b:
                    pipe.evalsha(sha, 1, key, CAPACITY, RATE, 1)
                for reply in pipe.execute():
                    if not reply[0]:
                        denied += 1
            return denied
        return run
    return make


def incr_single(r, prefix):
    def make(n):
        seq = keys_of(prefix, n)

        def run():
            command = r.execute_command
            for key in seq:
                command("INCR", key)
            return 0
        return run
    return make


def incr_batch(r, prefix):
    def make(n):
        batches = batches_of(keys_of(prefix, n))

        def run():
            pipe = r.pipeline(transaction=False)
            for b in batches:
                for key in b:
                    pipe.execute_command("INCR", key)
                pipe.execute()
            return 0
        return run
    return make


def measure(case, n, control):
    """One run of n decisions: the figures of INFO and the clock."""
    run = case.make(n)
    if case.kind == "server":
        control.config_resetstat()
        cpu0 = main_thread_cpu(control)
    u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    denied = run()
    seconds, u1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    out = {"seconds": seconds, "denied": denied,
           "client_user": (u1.ru_utime - u0.ru_utime) * 1e6 / n,
           "client_sys": (u1.ru_stime - u0.ru_stime) * 1e6 / n}
    if case.kind == "server":
        cpu1 = main_thread_cpu(control)
        stats = control.info("commandstats")
        row = stats.get("cmdstat_" + case.command)
        if row is None or row["calls"] != n:
            die("%s: %s calls %s, expected %d (commandstats: %s)"
                % (case.name, case.command, row and row["calls"], n, sorted(stats)))
        for name, s in stats.items():
            if s.get("failed_calls") or s.get("rejected_calls"):
                die("%s: %s has failed or rejected calls: %s" % (case.name, name, s))
        out["usec_per_call"] = float(row["usec_per_call"])
        out["cpu_per_decision"] = (cpu1 - cpu0) * 1e6 / n
    return out


# ------------------------------------------------------------------ report

def fmt_int(x):
    return "{:,.0f}".format(x)


def median_of(case, field):
    return statistics.median(run[field] for run in case.runs)


def rate_of(case, n):
    return statistics.median(n / run["seconds"] for run in case.runs)


def round_ratio(case, ref, field=None):
    """The median over the rounds of case's figure over ref's in the same
    round: decisions/s (field None), or ref's field over case's (a cost)."""
    if field is None:
        return statistics.median(r["seconds"] / c["seconds"] for c, r in zip(case.runs, ref.runs))
    return statistics.median(r[field] / c[field] for c, r in zip(case.runs, ref.runs))


LUA, FG_REMOTE = "Lua token bucket (EVALSHA)", "floodgate redis://"


def table(cases, n):
    by = {(c.name, c.mode): c for c in cases}
    lines = ["| case | mode | decisions/s | µs/decision | decisions/s, runs' range | "
             "x Lua, same mode | x INCR, same mode | client CPU µs/decision, user + system | "
             "server µs/call (commandstats) | x INCR by server µs/call | "
             "server main-thread CPU µs/decision | denied |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        rate = rate_of(c, n)
        rates = [n / run["seconds"] for run in c.runs]
        lua = by[(LUA, c.mode)]
        incr = by[("INCR", c.mode)]
        # in process against a server is no "same mode": mem: gets no ratios
        x_lua = "" if c.kind != "server" or c.name == "INCR" else "%.2f" % round_ratio(c, lua)
        x_incr = "" if c.kind != "server" else "%.2f" % round_ratio(c, incr)
        if c.kind == "server":
            server = "%.2f (%s) | %.2f | %.2f" % (
                median_of(c, "usec_per_call"), c.command.upper(),
                round_ratio(c, incr, "usec_per_call"), median_of(c, "cpu_per_decision"))
        else:
            server = "in process | | "
        lines.append("| %s | %s | %s | %.2f | %s-%s | %s | %s | %s | %s | %d |" % (
            c.name, c.mode, fmt_int(rate), 1e6 / rate, fmt_int(min(rates)), fmt_int(max(rates)),
            x_lua, x_incr, "%.2f + %.2f" % (median_of(c, "client_user"),
                                            median_of(c, "client_sys")), server,
            max(run["denied"] for run in c.runs)))
    lines.append("")
    for mode in sorted({c.mode for c in cases}, key=lambda m: m != "one at a time"):
        fg, lua = by[(FG_REMOTE, mode)], by[(LUA, mode)]
        lines.append("- %s: the Lua script costs the server %.1f x FG.TOKEN's time per call "
                     "(commandstats) and %.1f x its main-thread CPU time per decision."
                     % (mode, round_ratio(fg, lua, "usec_per_call"),
                        round_ratio(fg, lua, "cpu_per_decision")))
    return "\n".join(lines)


def header(server, n, runs, load_start):
    info = server.client.info("server")
    module_ver = "?"
    for m in server.client.execute_command("MODULE", "LIST"):
        d = dict(zip(m[0::2], m[1::2])) if isinstance(m, list) else m
        name = d.get(b"name", d.get("name"))
        if name in (b"floodgate", "floodgate"):
            module_ver = d.get(b"ver", d.get("ver"))
    cpu_model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or "no commit"
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src",
                                "bindings"], capture_output=True, text=True).stdout.strip()
        if dirty:
            rev += " (src or bindings modified)"
    except OSError:
        rev = "?"
    return "\n".join([
        "# floodgate from Python: decisions per second",
        "",
        "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "- mode: %s" % ("QUICK (smoke test, not for comparison)" if QUICK else "full"),
        "- machine: nproc %d, %s, %s %s" % (os.cpu_count(), cpu_model, platform.system(),
                                            platform.release()),
        "- redis-server %s (CPU %d, `--save \"\" --appendonly no`, 127.0.0.1), module ver %s, "
        "git %s" % (info["redis_version"], SERVER_CPU, module_ver, rev),
        "- client: Python %s on CPU %d, redis-py %s, floodgate %s (%s)"
        % (platform.python_version(), CLIENT_CPU, redis.__version__, floodgate.__version__,
           floodgate.library_path),
        "- %s decisions per run, %d keys taken in turn, token bucket capacity %d, %g/s, "
        "cost 1; one warm-up of %s per case, then %d interleaved round%s; every figure is "
        "the median over the runs"
        % (fmt_int(n), KEYS, CAPACITY, RATE, fmt_int(n // 4), runs, "" if runs == 1 else "s"),
        "- load average at start: %s" % load_start,
    ])


# -------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", help="also write the markdown to this file")
    ap.add_argument("--decisions", type=int, default=int(os.environ.get(
        "PYTHON_BENCH_DECISIONS", 6400 if QUICK else 64000)),
        help="decisions per run and case (a multiple of 64)")
    ap.add_argument("--runs", type=int, default=int(os.environ.get(
        "PYTHON_BENCH_RUNS", 1 if QUICK else 3)), help="rounds")
    args = ap.parse_args()
    n = args.decisions
    if n <= 0 or n % BATCH:
        die("--decisions must be a positive multiple of %d" % BATCH)
    if os.cpu_count() >= 2:
        os.sched_setaffinity(0, {CLIENT_CPU})
    else:
        progress("WARNING: one CPU: the server and the client share it")
    load_start = " ".join(open("/proc/loadavg").read().split()[:3])
    server = BenchServer(REDIS_SERVER, MODULE, SERVER_CPU, "floodgate-bench-python-")
    clients = []
    try:
        control = server.client
        if "floodgate" not in repr(control.execute_command("MODULE", "LIST")):
            die("the module is not loaded: " + MODULE)
        url = "redis://127.0.0.1:%d" % server.port
        limit = floodgate.token_bucket(CAPACITY, RATE)
        mem = floodgate.Client("mem:")
        remote = floodgate.Client(url)
        clients += [mem, remote]
        r = redis.Redis(host="127.0.0.1", port=server.port)
        sha = r.script_load(LUA_TOKEN_BUCKET)
        one, many = "one at a time", "batch of %d" % BATCH
        cases = [
            Case("floodgate mem:", one, "mem", None, fg_single(mem, limit, "fm1")),
            Case("floodgate mem:", many, "mem", None, fg_batch(mem, limit, "fmb")),
            Case("floodgate redis://", one, "server", "FG.TOKEN", fg_single(remote, limit, "fr1")),
            Case("floodgate redis://", many, "server", "FG.TOKEN", fg_batch(remote, limit, "frb")),
            Case("Lua token bucket (EVALSHA)", one, "server", "evalsha", lua_single(r, sha, "lu1")),
            Case("Lua token bucket (EVALSHA)", many, "server", "evalsha", lua_batch(r, sha, "lub")),
            Case("INCR", one, "server", "incr", incr_single(r, "in1")),
            Case("INCR", many, "server", "incr", incr_batch(r, "inb")),
        ]
        control.flushall()
        started = time.perf_counter()
        for c in cases:
            progress("warm-up  %-28s %-14s" % (c.name, c.mode))
            c.make(n // 4)()
        others, waited = [], 0.0
        wait_deadline = time.perf_counter() + MAX_WAIT
        for rnd in range(args.runs):
            waited += wait_for_quiet(server.proc.pid, wait_deadline)
            usage0 = cpu_usage(server.proc.pid)
            for c in cases:
                trips0 = remote.stats().round_trips
                m = measure(c, n, control)
                trips = remote.stats().round_trips - trips0
                expected = {"floodgate redis://": n if c.mode == one else n // BATCH}.get(c.name)
                if expected is not None and trips != expected:
                    die("%s, %s: %d round trips, expected %d" % (c.name, c.mode, trips, expected))
                c.runs.append(m)
                progress("round %d  %-28s %-14s %10s decisions/s  %6.2f us  denied %d%s"
                         % (rnd + 1, c.name, c.mode, fmt_int(n / m["seconds"]),
                            m["seconds"] * 1e6 / n, m["denied"],
                            "  server %.2f us/call" % m["usec_per_call"]
                            if "usec_per_call" in m else ""))
            others.append(others_share(usage0, cpu_usage(server.proc.pid)))
            progress("round %d: other processes took %.0f%% of a CPU"
                     % (rnd + 1, 100 * others[-1]))
        elapsed = time.perf_counter() - started
        load_end = " ".join(open("/proc/loadavg").read().split()[:3])
        md = "\n".join([
            header(server, n, args.runs, load_start),
            "- load average at end: %s; other processes took %s of a CPU in the "
            "round%s; %.0f s from the first warm-up to the end, of which %.0f s checking "
            "for (2 s before each round) or waiting for quiet CPUs"
            % (load_end, ", ".join("%.0f%%" % (100 * x) for x in others),
               "" if len(others) == 1 else "s", elapsed, waited),
            "",
            table(cases, n),
            "",
            "Figures are medians over the rounds. x Lua and x INCR: decisions/s over the "
            "Lua script's and INCR's in the same mode (one at a time, or %d at once) and the "
            "same round, the median over the rounds; x INCR by server µs/call: INCR's "
            "usec_per_call over the command's, likewise. Server µs/call is INFO "
            "commandstats' usec_per_call (EVALSHA's includes the script's inner calls); the "
            "main-thread CPU time (INFO cpu) includes reading and writing the sockets. "
            "Client CPU is this process's user and system time per decision (getrusage): "
            "user is Python, ctypes and libfloodgate or redis-py; system is mostly the "
            "socket calls. "
            "\"denied\" is the most denials in one run." % BATCH,
            "",
        ])
        print(md)
        if args.output:
            with open(args.output, "w") as f:
                f.write(md)
            progress("Written: " + args.output)
    finally:
        for c in clients:
            c.close()
        server.stop()


if __name__ == "__main__":
    main()
