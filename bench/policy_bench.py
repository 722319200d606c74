#!/usr/bin/python3
"""Policy checks through the server: FG.CHECK against INCR, FG.TOKEN and a
Lua two-limit script, with where the server's time goes and the memory a
key takes (docs/policies.md). The goal this measures: a check against a
two-limit policy at pipeline 16 runs at 0.7x INCR or better, INCR being
measured in the same round.

    make bench-policy                             (about 5 minutes)
    QUICK=1 /usr/bin/python3 bench/policy_bench.py  (smoke test, about a
                                                  minute; not for comparison)

Every part starts its own redis-server 7 (127.0.0.1, a free port, `--save ""
--appendonly no`, a copy of build/floodgate.so taken at the start, so that a
rebuild during the run changes nothing) pinned to CPU 0, runs its clients on
CPU 1, and stops the server by its PID at exit.

1. Throughput, as bench/throughput.py does it: redis-benchmark -c 50
   -r 100000 at -P 1 (-n 100000) and -P 16 (-n 1000000), 5 interleaved
   rounds after an unrecorded INCR warm-up, FLUSHALL before every run, the
   median of ops/s and of the ratio to INCR of the same round and depth.
   Each run also reads the server's own cost, which the client's limits do
   not affect: main-thread CPU time per command (INFO cpu) and usec_per_call
   (INFO commandstats, after CONFIG RESETSTAT). A run whose commandstats
   show a failed or rejected call, or a call count other than -n, aborts
   the benchmark. Other processes share the 2 CPUs: their CPU time during a
   run is /proc/stat's busy time minus the server's and the client's; a run
   in which they took more than 5% of a CPU is run again (at most twice, and
   16 times in all, a bound on the time; the least disturbed run is kept),
   and the median and worst shares kept are reported. Before each run the
   benchmark waits for the CPUs to be quiet (4 minutes in all at most: test
   suites and builds come in bursts).
2. Instructions (callgrind, deterministic): the server under valgrind
   --tool=callgrind; per case, one pass over 1,000 keys (so every key has its
   state), callgrind_control -z, 16,000 commands pipelined 16 at a time on
   one connection, callgrind_control -d. The dump's call graph is split into
   the Redis layers (reading, parsing, dispatch, the reply's write) and, for
   FG.CHECK, the module's parts: every instruction of a module function goes
   to one part by the function's name, and every call from the module into
   the server to one part by the callee (RM_Replicate, the key API, the
   keyspace event, the reply). serverCron is left out (it ticks with the
   wall clock, which valgrind stretches).
3. Memory: 100,000 keys per case on a FLUSHALLed server, used_memory
   (stable: two equal reads 0.5 s apart) before and after, and MEMORY USAGE
   of one key.

The cases run the same commands in all three parts. Denials: the policy
`pdeny` is the goal's policy with a daily quota of 1; every key of its
keyspace is checked once before its run, so every timed check is denied by
the quota (the run's denial share, from the policy's counters, is printed).
The Lua baseline is written for this benchmark (not copied from any
project): a GCRA token bucket (its TAT in one key) and an epoch-aligned fixed
window (its count in another, same hash tag), both decided, then both
charged, the clock from TIME; it returns 2 integers where FG.CHECK returns 7.

Output: BENCH_OUT (default bench/results/policy.md; QUICK:
bench/results/policy-quick.md) and every run's figures in the .raw file
next to it (JSON). Progress goes to stderr. Environment: QUICK=1,
POLICY_BENCH_ROUNDS, POLICY_BENCH_N1, POLICY_BENCH_N16,
POLICY_BENCH_MAX_REPEATS, POLICY_BENCH_MAX_WAIT (seconds),
POLICY_BENCH_CG_CALLS, POLICY_BENCH_MEM_KEYS, POLICY_BENCH_SKIP_CALLGRIND=1,
MODULE, REDIS_SERVER, REDIS_BENCHMARK.
"""

import atexit
import csv
import io
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_server import process_cpu_seconds  # noqa: E402


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.environ.get("QUICK", "") not in ("", "0")
MODULE = os.environ.get("MODULE", os.path.join(ROOT, "build", "floodgate.so"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
REDIS_BENCHMARK = os.environ.get("REDIS_BENCHMARK", "redis-benchmark")
OUT = os.environ.get("BENCH_OUT", os.path.join(
    ROOT, "bench", "results", "policy-quick.md" if QUICK else "policy.md"))
RAW = os.path.splitext(OUT)[0] + ".raw"
SERVER_CPU, CLIENT_CPU = 0, 1

ROUNDS = env_int("POLICY_BENCH_ROUNDS", 1 if QUICK else 5)
N1 = env_int("POLICY_BENCH_N1", 20000 if QUICK else 100000)
N16 = env_int("POLICY_BENCH_N16", 100000 if QUICK else 1000000)
CLIENTS = 50
KEYSPACE = 100000
CG_KEYS = 1000
CG_CALLS = env_int("POLICY_BENCH_CG_CALLS", 3200 if QUICK else 16000)
CG_PIPELINE = 16
MEM_KEYS = env_int("POLICY_BENCH_MEM_KEYS", 20000 if QUICK else 100000)
MAX_OTHERS = 0.05  # of one CPU, taken by other processes during a run
RETRIES = 2        # repeats of one run
MAX_REPEATS = env_int("POLICY_BENCH_MAX_REPEATS", 4 if QUICK else 16)  # in all: a time bound
MAX_WAIT = env_int("POLICY_BENCH_MAX_WAIT", 0 if QUICK else 240)  # s, for a quiet machine

TWO = ["LIMIT", "TOKEN", "100", "10", "LIMIT", "FIXED", "1000", "86400000"]
POLICIES = {
    "p1": ["LIMIT", "TOKEN", "100", "10"],
    "p2": TWO,
    "p2pen": TWO + ["PENALTY", "60000", "AFTER", "5", "WITHIN", "10000"],
    "p2shadow": TWO + ["SHADOW"],
    "pdeny": ["LIMIT", "TOKEN", "100", "10", "LIMIT", "FIXED", "1", "86400000"],
}

LUA_TWO_LIMITS = """
-- Two limits, all or nothing: a GCRA token bucket (its TAT, in microseconds,
-- in KEYS[1]) and an epoch-aligned fixed window (its count in KEYS[2]).
-- ARGV: capacity, refill per second, window limit, window_ms, cost.
-- Returns {allowed, remaining}.
local capacity, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local limit, window_ms, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = 1000000 / rate
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or 0, now)
local new_tat = tat + cost * interval
local count = tonumber(redis.call('GET', KEYS[2])) or 0
local bucket_left = math.floor((capacity * interval - (new_tat - now)) / interval)
if bucket_left < 0 or count + cost > limit then
  return {0, 0}
end
redis.call('SET', KEYS[1], string.format('%d', math.ceil(new_tat)), 'PXAT',
           math.ceil(new_tat / 1000))
local window_end = (math.floor(now / 1000 / window_ms) + 1) * window_ms
redis.call('SET', KEYS[2], count + cost, 'PXAT', window_end)
return {1, math.min(bucket_left, limit - count - cost)}
"""


class Case:
    def __init__(self, name, cmd, stat, policy=None, exhaust=False):
        self.name = name
        self.cmd = cmd          # __rand_int__ is a key number; "@lua" the script's SHA1
        self.stat = stat        # its INFO commandstats name
        self.policy = policy    # FG.CHECK's policy, for its counters
        self.exhaust = exhaust  # every key checked once before the run


CASES = [
    Case("INCR", ["INCR", "incr:__rand_int__"], "incr"),
    Case("FG.TOKEN", ["FG.TOKEN", "tb:__rand_int__", "100", "10"], "fg.token"),
    Case("FG.CHECK p1", ["FG.CHECK", "p1", "c1:__rand_int__"], "fg.check", "p1"),
    Case("FG.CHECK p2", ["FG.CHECK", "p2", "c2:__rand_int__"], "fg.check", "p2"),
    Case("FG.CHECK p2 PENALTY", ["FG.CHECK", "p2pen", "cp:__rand_int__"], "fg.check", "p2pen"),
    Case("FG.CHECK p2 SHADOW", ["FG.CHECK", "p2shadow", "cs:__rand_int__"], "fg.check",
         "p2shadow"),
    Case("FG.CHECK denied", ["FG.CHECK", "pdeny", "dn:__rand_int__"], "fg.check", "pdeny",
         exhaust=True),
    Case("Lua TOKEN + FIXED", ["EVALSHA", "@lua", "2", "{lp:__rand_int__}.tb",
                               "{lp:__rand_int__}.fw", "100", "10", "1000", "86400000", "1"],
         "evalsha"),
]
GOAL_CASE, GOAL = "FG.CHECK p2", 0.7


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log("policy_bench.py: ERROR: " + msg)
    sys.exit(1)


def key_arg(arg, n):
    """redis-benchmark writes __rand_int__ as 12 digits."""
    return arg.replace("__rand_int__", "%012d" % n)


# ================================================================ servers

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """redis-server with the module, pinned to SERVER_CPU; under callgrind
    when callgrind_out is given (its dumps are callgrind_out.<n>); other
    modules (bench/hot_paths.py's floor) are loaded after it."""

    running = []

    def __init__(self, workdir, module, callgrind_out=None, more_modules=()):
        self.port = free_port()
        self.log = os.path.join(workdir, "redis-%d.log" % self.port)
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", workdir, "--logfile", self.log,
                "--loadmodule", module]
        for extra in more_modules:
            argv += ["--loadmodule", extra]
        if callgrind_out:
            argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + callgrind_out,
                    "--log-file=" + callgrind_out + ".log"] + argv
        # taskset execs the server: the PID is the server's
        self.proc = subprocess.Popen(["taskset", "-c", str(SERVER_CPU)] + argv,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        Server.running.append(self)
        self.r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=600)
        deadline = time.time() + (120 if callgrind_out else 20)
        while True:
            if self.proc.poll() is not None:
                die("redis-server exited at start (port %d); see %s" % (self.port, self.log))
            try:
                if self.r.ping():
                    break
            except redis.ConnectionError:
                pass
            if time.time() > deadline:
                die("redis-server does not answer on port %d" % self.port)
            time.sleep(0.1)
        subprocess.run(["taskset", "-a", "-cp", str(SERVER_CPU), str(self.proc.pid)],
                       stdout=subprocess.DEVNULL, check=True)
        if "floodgate" not in repr(self.r.execute_command("MODULE", "LIST")):
            die("the module is not loaded: " + module)

    @property
    def pid(self):
        return self.proc.pid

    def cpu_seconds(self):
        """The process's user + system time, all threads."""
        return process_cpu_seconds(self.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self in Server.running:
            Server.running.remove(self)


def stop_all():
    for s in list(Server.running):
        s.stop()


def setup(r):
    """The policies and the script; the script's SHA1."""
    for name, rules in POLICIES.items():
        r.execute_command("FG.POLICY", "SET", name, *rules)
    return r.script_load(LUA_TWO_LIMITS)


def resolve(case, sha):
    return [sha if a == "@lua" else a for a in case.cmd]


def send(r, commands, check=None):
    """Sends commands pipelined CG_PIPELINE at a time; check(reply) on each."""
    pipe = r.pipeline(transaction=False)
    for i, cmd in enumerate(commands):
        pipe.execute_command(*cmd)
        if len(pipe) == CG_PIPELINE or i == len(commands) - 1:
            for reply in pipe.execute(raise_on_error=True):
                if check:
                    check(reply)


def exhaust(r, case, sha, keys):
    """Checks every key of the case's keyspace once: a quota of 1 is then
    used up on all of them."""
    pipe = r.pipeline(transaction=False)
    cmd = resolve(case, sha)
    for i in range(keys):
        pipe.execute_command(*[key_arg(a, i) for a in cmd])
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def counters(r, policy):
    reply = r.execute_command("FG.POLICY", "GET", policy)
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[0::2], reply[1::2])
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in items}


# ============================================================= throughput

def cpu_busy_seconds():
    """All CPUs' user, nice and system time; interrupts left out (the run's
    own loopback traffic is accounted there)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[1]) + int(fields[2]) + int(fields[3])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main_thread_cpu(r):
    info = r.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def run_benchmark(port, n, pipeline, cmd):
    argv = ["taskset", "-c", str(CLIENT_CPU), REDIS_BENCHMARK, "-h", "127.0.0.1",
            "-p", str(port), "-c", str(CLIENTS), "-r", str(KEYSPACE), "-n", str(n),
            "-P", str(pipeline), "-q", "--csv"] + cmd
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rps = None
    for row in csv.reader(io.StringIO(p.stdout)):
        if len(row) >= 2 and row[0] != "test":
            try:
                rps = float(row[1])
            except ValueError:
                pass
    line = " ".join(shlex.quote(a) for a in argv)
    if p.returncode != 0 or rps is None or "Error" in p.stdout or "Error" in p.stderr:
        die("redis-benchmark failed (rc=%d) for: %s\nstdout:\n%s\nstderr:\n%s"
            % (p.returncode, line, p.stdout, p.stderr))
    return rps, line


class Quiet:
    """Waits, before a run, until other processes leave the CPUs alone (less
    than MAX_OTHERS of a CPU over half a second), within MAX_WAIT seconds
    for the whole benchmark: test suites and builds come in bursts."""

    waited = 0.0

    @classmethod
    def wait(cls):
        while cls.waited < MAX_WAIT:
            busy0, t0 = cpu_busy_seconds(), time.time()
            time.sleep(0.5)
            if (cpu_busy_seconds() - busy0) / (time.time() - t0) <= MAX_OTHERS:
                return
            cls.waited += time.time() - t0


def timed_run(srv, case, sha, n, pipeline):
    """One run of a case on a FLUSHALLed server: its figures."""
    r = srv.r
    r.flushall()
    if case.exhaust:
        exhaust(r, case, sha, KEYSPACE)
    before = counters(r, case.policy) if case.policy else None
    r.config_resetstat()
    Quiet.wait()
    cpu0, busy0, srv0, cli0, t0 = (main_thread_cpu(r), cpu_busy_seconds(), srv.cpu_seconds(),
                                   children_cpu_seconds(), time.time())
    rps, line = run_benchmark(srv.port, n, pipeline, resolve(case, sha))
    cpu1, busy1, srv1, cli1, t1 = (main_thread_cpu(r), cpu_busy_seconds(), srv.cpu_seconds(),
                                   children_cpu_seconds(), time.time())
    # module commands keep the case they were registered with
    stats = {k.lower(): v for k, v in r.info("commandstats").items()}.get("cmdstat_" + case.stat)
    if not stats or stats["calls"] != n or stats.get("failed_calls", 0) or \
            stats.get("rejected_calls", 0):
        die("%s: commandstats %r after %d commands (%s)" % (case.name, stats, n, line))
    others = max(0.0, (busy1 - busy0) - (srv1 - srv0) - (cli1 - cli0)) / (t1 - t0)
    run = {"case": case.name, "P": pipeline, "rps": rps, "argv": line,
           "server_cpu_us": (cpu1 - cpu0) * 1e6 / n,
           "usec_per_call": stats["usec"] / stats["calls"],
           "others_cpu": others, "keys_after": r.dbsize()}
    if case.policy:
        after = counters(r, case.policy)
        decided = {k: after[k] - before[k] for k in ("allowed", "denied", "shadow_denied")}
        total = decided["allowed"] + decided["denied"]
        run["denied_share"] = decided["denied"] / total if total else 0.0
        run["shadow_denied_share"] = decided["shadow_denied"] / total if total else 0.0
    return run


def throughput(srv, sha, raw):
    # Every command must work before it is timed.
    for case in CASES:
        probe = [key_arg(a, 0) for a in resolve(case, sha)]
        try:
            reply = srv.r.execute_command(*probe)
        except redis.ResponseError as e:
            die("case %s: %s -> %s" % (case.name, " ".join(probe), e))
        log("  check %-20s -> %r" % (case.name, reply))
    for pipeline, n in ((1, min(N1, 50000)), (16, min(N16, 200000))):
        srv.r.flushall()
        run_benchmark(srv.port, n, pipeline, CASES[0].cmd)

    results = {}  # (case, P) -> [run]
    repeats_left = MAX_REPEATS
    for rnd in range(1, ROUNDS + 1):
        for pipeline, n in ((1, N1), (16, N16)):
            incr = None
            for case in CASES:
                tries = []
                while True:
                    tries.append(timed_run(srv, case, sha, n, pipeline))
                    if tries[-1]["others_cpu"] <= MAX_OTHERS or len(tries) > RETRIES or \
                            repeats_left == 0:
                        break
                    repeats_left -= 1
                run = min(tries, key=lambda t: t["others_cpu"])
                run.update(round=rnd, repeated=len(tries) - 1)
                if case.name == "INCR":
                    incr = run
                run["x_incr"] = run["rps"] / incr["rps"]
                run["x_incr_cpu"] = incr["server_cpu_us"] / run["server_cpu_us"]
                results.setdefault((case.name, pipeline), []).append(run)
                raw["throughput"].append(run)
                log("  round %d P=%-2d %-20s %9.0f ops/s x%.2f  cpu %.2f us  call %.2f us"
                    "  others %2.0f%%%s" % (rnd, pipeline, case.name, run["rps"], run["x_incr"],
                                            run["server_cpu_us"], run["usec_per_call"],
                                            100 * run["others_cpu"],
                                            "  denied %.0f%%" % (100 * run["denied_share"])
                                            if "denied_share" in run else ""))
    srv.r.flushall()
    return results


def throughput_md(results):
    med = lambda case, p, k: statistics.median(r[k] for r in results[(case, p)])
    lo_hi = lambda case, p, k: (min(r[k] for r in results[(case, p)]),
                                max(r[k] for r in results[(case, p)]))
    runs = [r for v in results.values() for r in v]
    lines = [
        "## Throughput",
        "",
        "redis-benchmark on CPU %d, `-c %d -r %d`, P=1 `-n %d`, P=16 `-n %d`; %d interleaved "
        "round%s after an INCR warm-up; FLUSHALL before every run; medians over the rounds, "
        "x INCR is the ratio to INCR of the same round and depth. The server's own cost, at "
        "P=16: \"CPU us/cmd\" is its main thread's CPU time per command (INFO cpu: reading, "
        "parsing, executing, writing), \"us/call\" the command alone (INFO commandstats "
        "usec_per_call), and \"x INCR (CPU)\" is INCR's CPU time per command divided by the "
        "case's: the throughput ratio a server-bound client would see."
        % (CLIENT_CPU, CLIENTS, KEYSPACE, N1, N16, ROUNDS, "" if ROUNDS == 1 else "s"),
        "",
        "| case | P=1 ops/s | P=1 x INCR | P=16 ops/s | P=16 x INCR | CPU us/cmd | "
        "x INCR (CPU) | us/call | denied |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in CASES:
        denied = ""
        if case.policy:
            denied = "%.1f%%" % (100 * med(case.name, 16, "denied_share"))
            if case.name.endswith("SHADOW"):
                denied = "0%% (%.1f%% shadow)" % (100 * med(case.name, 16, "shadow_denied_share"))
        lines.append("| %s | %.0f | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f | %s |" % (
            case.name, med(case.name, 1, "rps"), med(case.name, 1, "x_incr"),
            med(case.name, 16, "rps"), med(case.name, 16, "x_incr"),
            med(case.name, 16, "server_cpu_us"), med(case.name, 16, "x_incr_cpu"),
            med(case.name, 16, "usec_per_call"), denied))
    lines.append("")
    g, (glo, ghi) = med(GOAL_CASE, 16, "x_incr"), lo_hi(GOAL_CASE, 16, "x_incr")
    lines.append("**Goal** (`%s` at P=16 >= %.1fx INCR): %.2fx (rounds %.2f-%.2f), %s; by "
                 "server CPU %.2fx: at INCR's %.2f us of server CPU per command, the goal "
                 "allows a check %.2f us; it takes %.2f." % (
                     GOAL_CASE, GOAL, g, glo, ghi, "met" if g >= GOAL else "not met",
                     med(GOAL_CASE, 16, "x_incr_cpu"), med("INCR", 16, "server_cpu_us"),
                     med("INCR", 16, "server_cpu_us") / GOAL,
                     med(GOAL_CASE, 16, "server_cpu_us")))
    lines.append("")
    lines.append("| case | command |")
    lines.append("|---|---|")
    for case in CASES:
        shown = " ".join(case.cmd).replace("@lua", "<sha>")
        lines.append("| %s | `%s` |" % (case.name, shown))
    lines.append("")
    lines.append("Policies (`FG.POLICY SET name ...`): " + "; ".join(
        "`%s` = `%s`" % (n, " ".join(r)) for n, r in POLICIES.items()) + ".")
    lines.append("")
    lines.append("Notes: a `TOKEN 100 10` state is full again 100 ms after a check, so FG.TOKEN "
                 "and p1 keys have mostly expired when hit again: those checks create their "
                 "key, and the server expires it (as FG.TOKEN in bench/run.sh). A p2 key lives "
                 "until its daily window ends (UTC midnight), so p2 checks mostly update a "
                 "state in place (about %.0f%% create it: %d checks over %d random keys after "
                 "a FLUSHALL). "
                 "The denied case is the goal's policy with its daily quota used up: nothing "
                 "changes, so nothing is stored or replicated. The Lua script answers 2 "
                 "integers, FG.CHECK 7; redis-benchmark gives its two keys independent numbers "
                 "(the work per call is the same)."
                 % (100 * KEYSPACE * (1 - math.exp(-N16 / KEYSPACE)) / N16, N16, KEYSPACE))
    lines.append("")
    if ROUNDS > 1:
        lines.append("Spread over rounds (min-max; the INCR row is ops/s, a wide range means "
                     "a busy machine):")
        lines.append("")
        lines.append("| case | P=1 x INCR | P=16 x INCR | P=16 x INCR (CPU) |")
        lines.append("|---|---:|---:|---:|")
        lines.append("| INCR ops/s (noise check) | %.0f-%.0f | %.0f-%.0f | |"
                     % (lo_hi("INCR", 1, "rps") + lo_hi("INCR", 16, "rps")))
        for case in CASES[1:]:
            lines.append("| %s | %.2f-%.2f | %.2f-%.2f | %.2f-%.2f |" % (
                (case.name,) + lo_hi(case.name, 1, "x_incr") + lo_hi(case.name, 16, "x_incr")
                + lo_hi(case.name, 16, "x_incr_cpu")))
        lines.append("")
    worst = max(r["others_cpu"] for r in runs)
    repeated = sum(r["repeated"] for r in runs)
    median = statistics.median(r["others_cpu"] for r in runs)
    lines.append("Other processes took %.0f%% of a CPU during the median kept run, %.0f%% at "
                 "most. Each run waits for them to leave the CPUs alone (%.0f s waited, %d s at "
                 "most in all), and is repeated when they take more than %.0f%% of a CPU during "
                 "it (at most %d times, %d repeats in all; %d were made)."
                 % (100 * median, 100 * worst, Quiet.waited, MAX_WAIT, 100 * MAX_OTHERS,
                    RETRIES, MAX_REPEATS, repeated))
    lines.append("")
    return lines


# ============================================================== callgrind

class CallGraph:
    """A callgrind dump (Ir only): each function's own instructions and the
    inclusive cost of each caller -> callee arc. Functions are (object,
    name); the file each was defined in is kept."""

    def __init__(self, path):
        self.self_cost, self.arcs, self.file = {}, {}, {}
        names = {"ob": {}, "fl": {}, "fn": {}}
        kinds = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl",
                 "cfl": "fl", "fn": "fn", "cfn": "fn"}

        def name_of(kind, value):
            m = re.match(r"\((\d+)\)(?: (.*))?$", value)
            if not m:
                return value
            table = names[kinds[kind]]
            if m.group(2) is not None:
                table[m.group(1)] = m.group(2)
            return table[m.group(1)]

        ob = fl = fn = cob = cfn = None
        call_next = False
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line[0] == "#":
                    continue
                if line[0].isdigit() or line[0] in "+-*":
                    ir = int(line.split()[-1]) if len(line.split()) > 1 else 0
                    if call_next:
                        arc = (fn, (cob or ob, cfn))
                        self.arcs[arc] = self.arcs.get(arc, 0) + ir
                        call_next, cob = False, None
                    else:
                        self.self_cost[fn] = self.self_cost.get(fn, 0) + ir
                    continue
                key, _, value = line.partition("=")
                if key in ("ob", "fl", "fn", "cob", "cfn", "fi", "fe", "cfi", "cfl"):
                    v = name_of(key, value)
                    if key == "ob":
                        ob = v
                    elif key == "fl":
                        fl = v
                    elif key == "fn":
                        fn = (ob, v)
                        self.file.setdefault(fn, fl)
                    elif key == "cob":
                        cob = v
                    elif key == "cfn":
                        cfn = v
                elif key == "calls":
                    call_next = True
        self.total = sum(self.self_cost.values())
        self.callees = {}
        for (caller, callee) in self.arcs:
            self.callees.setdefault(caller, set()).add(callee)

    def find(self, name):
        return [f for f in set(self.self_cost) | {c for _, c in self.arcs} if f[1] == name]

    def calls_to(self, name, callers=None):
        """Inclusive cost of every call to the functions of that name (from
        the given callers only, when given), calls from itself left out."""
        return sum(c for (caller, callee), c in self.arcs.items()
                   if callee[1] == name and caller[1] != name
                   and (callers is None or caller[1] in callers))

    def inclusive(self, name):
        return sum(self.self_cost.get(f, 0) +
                   sum(self.arcs[(f, c)] for c in self.callees.get(f, ()))
                   for f in self.find(name))


def in_module(fn, module_path):
    return fn[0] == module_path


# The parts of a check. Module functions go to a part by name (else: the
# core's files are "decision", the rest "glue"); calls from the module into
# the server go to a part by the callee, or by caller and callee (else: the
# caller's part).
MODULE_PARTS = {
    "replication": {"plstat_payload", "fg_policy_state_serialize",
                    "fg_policy_state_serialized_size", "format_number", "replicate_state"},
    "key": {"plstat_store", "plstat_lookup_key", "plstat_fill", "plstat_new", "set_value",
            "close_key"},
    "reply": {"reply_answer", "answer_of", "ns_to_ms_ceil"},
}
SERVER_PARTS = {
    "replication": {"RM_Replicate"},
    "key": {"RM_OpenKey", "RM_CloseKey", "RM_SetAbsExpire", "RM_ModuleTypeSetValue",
            "RM_ModuleTypeGetValue", "RM_ModuleTypeGetType", "RM_KeyType", "RM_DeleteKey",
            "RM_SignalModifiedKey"},
    "event": {"RM_NotifyKeyspaceEvent"},
    "reply": {"RM_ReplyWithLongLong", "RM_ReplyWithArray", "RM_ReplyWithCString",
              "RM_ReplyWithError", "RM_ReplyWithSimpleString"},
}
PART_ROWS = [
    ("decision", "module: the decision in src/core (rescale, decide, expiry)"),
    ("glue", "module: arguments, policy and list lookups, state copies, counters"),
    ("key", "module: the key (RM_OpenKey/CloseKey, plstat_store with PEXPIREAT, "
            "SignalModifiedKey)"),
    ("replication", "module: replication (FG.PLSTATE payload + RM_Replicate)"),
    ("event", "module: keyspace event fg.check (RM_NotifyKeyspaceEvent)"),
    ("reply", "module: the reply (answer_of + 7 RM_ReplyWith*)"),
]
# The payload's free, wherever replicate_state was inlined.
CALL_PARTS = {(caller, "RM_Free"): "replication" for caller in ("settle", "store",
                                                                  "replicate_state")}
# Inside the parts: the calls worth naming, per command (all callers).
DETAILS = [
    ("RM_Replicate", "RM_Replicate (whole)"),
    ("lookupCommandByCString", "  of which the command name's lookup"),
    ("moduleCreateArgvFromUserFormat", "  of which the argument objects"),
    ("plstat_payload", "plstat_payload (allocation + serialization)"),
    ("fg_policy_state_serialize", "  of which fg_policy_state_serialize"),
    ("format_number", "format_number (PXAT's digits)"),
    ("RM_OpenKey", "RM_OpenKey (lookup, expiry check)"),
    ("RM_SetAbsExpire", "RM_SetAbsExpire (PEXPIREAT)"),
    ("plstat_store", "plstat_store (incl. RM_SetAbsExpire)"),
    ("RM_NotifyKeyspaceEvent", "RM_NotifyKeyspaceEvent"),
    ("moduleNotifyKeyspaceEvent", "module subscribers' callbacks, every event (expiry too)"),
    ("answer_of", "answer_of (the fields, decided_by)"),
    ("reply_answer", "reply_answer (7 replies)"),
    ("fg_policy_decide", "fg_policy_decide"),
    ("fg_policy_rescale", "fg_policy_rescale"),
    ("fg_policy_expires_at_us", "fg_policy_expires_at_us"),
]


def module_parts(g, module_path):
    """Instructions of the module's command function split into parts."""
    dispatch = [f for f in g.find("RedisModuleCommandDispatcher")]
    roots = {c for d in dispatch for c in g.callees.get(d, ()) if in_module(c, module_path)}
    hot, todo = set(roots), list(roots)
    while todo:  # module functions reached from the command, not callbacks
        f = todo.pop()
        for c in g.callees.get(f, ()):
            if in_module(c, module_path) and c not in hot:
                hot.add(c)
                todo.append(c)

    def part_of_module_fn(fn):
        for part, names in MODULE_PARTS.items():
            if fn[1] in names:
                return part
        return "decision" if "/src/core/" in (g.file.get(fn) or "") else "glue"

    parts = {}
    for fn in hot:
        part = part_of_module_fn(fn)
        parts[part] = parts.get(part, 0) + g.self_cost.get(fn, 0)
        for c in g.callees.get(fn, ()):
            if in_module(c, module_path):
                continue
            cpart = CALL_PARTS.get((fn[1], c[1])) or next(
                (p for p, names in SERVER_PARTS.items() if c[1] in names), part)
            parts[cpart] = parts.get(cpart, 0) + g.arcs[(fn, c)]
    module_total = sum(g.arcs[(d, c)] for d in dispatch for c in roots)
    return parts, module_total


def analyse(g, module_path, n, case):
    cron = g.inclusive("serverCron")
    total = g.total - cron
    command = g.calls_to("call", callers={"processCommand"})
    res = {"total": total / n, "command": command / n, "outside": (total - command) / n,
           "cron_left_out": cron / n}
    if case.cmd[0].startswith("FG."):
        parts, module_total = module_parts(g, module_path)
        res["module"] = module_total / n
        res["dispatch"] = (command - module_total) / n
        res["parts"] = {k: v / n for k, v in parts.items()}
        res["parts_sum_check"] = sum(parts.values()) / n
        res["details"] = {name: g.calls_to(name) / n for name, _ in DETAILS}
    return res


def callgrind(workdir, module, raw):
    out = os.path.join(workdir, "callgrind.out")
    srv = Server(workdir, module, callgrind_out=out)
    sha = setup(srv.r)
    results = {}
    for case in CASES:
        cmd = resolve(case, sha)
        srv.r.flushall()
        replies = {"allowed": 0, "denied": 0}

        def check(reply, replies=replies):
            if isinstance(reply, list) and case.cmd[0] in ("FG.CHECK", "EVALSHA", "FG.TOKEN"):
                replies["allowed" if reply[0] == 1 else "denied"] += 1

        send(srv.r, [[key_arg(a, i) for a in cmd] for i in range(CG_KEYS)])
        before = set(os.listdir(workdir))
        callgrind_control("-z", srv.pid)
        send(srv.r, [[key_arg(a, i % CG_KEYS) for a in cmd] for i in range(CG_CALLS)], check)
        callgrind_control("-d", srv.pid)
        dump = wait_for_dump(workdir, before)
        res = analyse(CallGraph(dump), os.path.realpath(module), CG_CALLS, case)
        res["replies"] = replies
        results[case.name] = res
        raw["callgrind"][case.name] = res
        os.unlink(dump)
        log("  callgrind %-20s %6.0f instructions/command  %s" % (case.name, res["total"],
                                                                  replies))
    srv.stop()
    return results


def callgrind_control(option, pid):
    p = subprocess.run(["callgrind_control", option, str(pid)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        die("callgrind_control %s %d: %s" % (option, pid, p.stdout))


def wait_for_dump(workdir, before, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = [f for f in os.listdir(workdir) if f.startswith("callgrind.out.")
               and not f.endswith(".log") and f not in before]
        for f in new:
            path = os.path.join(workdir, f)
            with open(path) as fh:
                if "\ntotals:" in fh.read():
                    return path
        time.sleep(0.2)
    die("no callgrind dump in %s" % workdir)


def callgrind_md(res):
    incr = res["INCR"]["total"]
    checks = [c.name for c in CASES if c.cmd[0] == "FG.CHECK"]
    lines = [
        "## Where the time goes (callgrind)",
        "",
        "Instructions per command executed by the server (valgrind --tool=callgrind, "
        "deterministic): %d keys each given its state first, then %d commands pipelined %d "
        "at a time on one connection, between callgrind_control -z and -d; everything the "
        "server does is counted except serverCron. The Lua script's two keys are one user's "
        "here (the throughput runs give them independent numbers)."
        % (CG_KEYS, CG_CALLS, CG_PIPELINE),
        "",
        "| case | instructions | x INCR | the command (call()) | reading, parsing, "
        "writing, event loop |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in CASES:
        r = res[case.name]
        lines.append("| %s | %s | %.2f | %s | %s |" % (
            case.name, fmt(r["total"]), r["total"] / incr, fmt(r["command"]),
            fmt(r["outside"])))
    lines += ["", "FG.CHECK split (instructions per command):", "",
              "| part | " + " | ".join(checks) + " |",
              "|---|" + "---:|" * len(checks)]

    def row(label, get):
        lines.append("| %s | %s |" % (label, " | ".join(fmt(get(res[c])) for c in checks)))

    row("**total**", lambda r: r["total"])
    row("Redis: reading, parsing, command lookup, writing the reply", lambda r: r["outside"])
    row("Redis: call() and module dispatch (context, propagation)", lambda r: r["dispatch"])
    for key, label in PART_ROWS:
        row(label, lambda r, key=key: r["parts"].get(key, 0))
    lines += ["", "Named calls inside those parts (inclusive, per command):", "",
              "| call | " + " | ".join(checks) + " |",
              "|---|" + "---:|" * len(checks)]
    for name, label in DETAILS:
        row(label, lambda r, name=name: r["details"][name])
    lines.append("")
    lines.append("FG.TOKEN and p1 keys expire 100 ms after a check: under valgrind most have "
                 "expired when checked again, so those rows include creating the key and, in "
                 "part, expiring it (the expiry done by serverCron is left out): they vary from "
                 "run to run. The other rows are deterministic (their keys persist). The "
                 "module's parts add up to its command function's instructions; \"named "
                 "calls\" overlap (a call and its callees).")
    lines.append("")
    lines.append("Replies seen during the measured commands: " + "; ".join(
        "%s %d allowed / %d denied" % (c.name, res[c.name]["replies"]["allowed"],
                                       res[c.name]["replies"]["denied"])
        for c in CASES if c.cmd[0] in ("FG.CHECK", "EVALSHA", "FG.TOKEN")) + ".")
    lines.append("")
    return lines


def fmt(v):
    return "{:,.0f}".format(v)


# ================================================================= memory

def stable_used_memory(r, first_wait=1.0, timeout=15.0):
    time.sleep(first_wait)
    last = r.info("memory")["used_memory"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.5)
        now = r.info("memory")["used_memory"]
        if now == last:
            return now
        last = now
    return last


def memory(srv, sha, raw):
    """Bytes per key. The buckets refill slowly here (0.001 per second), so
    that no key expires during the fill."""
    r = srv.r
    r.execute_command("FG.POLICY", "SET", "p1", "LIMIT", "TOKEN", "100", "0.001")
    r.execute_command("FG.POLICY", "SET", "p2", "LIMIT", "TOKEN", "100", "0.001",
                      "LIMIT", "FIXED", "1000", "86400000")
    cases = [
        ("FG.CHECK p2 (TOKEN + FIXED)", lambda k: [["FG.CHECK", "p2", k]], 1),
        ("FG.CHECK p1 (TOKEN)", lambda k: [["FG.CHECK", "p1", k]], 1),
        ("FG.TOKEN (no policy)", lambda k: [["FG.TOKEN", k, "100", "0.001"]], 1),
        ("Lua TOKEN + FIXED (2 keys per user)",
         lambda k: [["EVALSHA", sha, "2", "{%s}.tb" % k, "{%s}.fw" % k, "100", "0.001",
                     "1000", "86400000", "1"]], 2),
    ]
    lines = ["## Memory per key", "",
             "%d keys `user:%%08d` per case on a FLUSHALLed server: the used_memory delta per "
             "key (stable: two equal reads 0.5 s apart), which counts the key name, the value, "
             "the TTL and the hash tables' share, and `MEMORY USAGE` of the first key "
             "(`SAMPLES 0`). Buckets refill at 0.001 per second here, so nothing expires "
             "during the fill (the state's size does not depend on the numbers)." % MEM_KEYS,
             "", "| state | bytes/key (used_memory) | MEMORY USAGE |", "|---|---:|---:|"]
    for name, make, nkeys in cases:
        r.execute_command("FLUSHALL", "SYNC")
        before = stable_used_memory(r, first_wait=0.5)
        pipe = r.pipeline(transaction=False)
        for i in range(1, MEM_KEYS + 1):
            for cmd in make("user:%08d" % i):
                pipe.execute_command(*cmd)
            if len(pipe) >= 1000:
                pipe.execute()
        pipe.execute()
        after = stable_used_memory(r)
        dbsize = r.dbsize()
        if dbsize != MEM_KEYS * nkeys:
            die("memory %s: DBSIZE %d, expected %d" % (name, dbsize, MEM_KEYS * nkeys))
        first = make("user:%08d" % 1)[0]
        if first[0] == "EVALSHA":
            usage = sum(r.memory_usage(k, samples=0) for k in first[3:5])
            usage_s = "%d (both keys)" % usage
        else:
            usage = r.memory_usage(first[2] if first[0] == "FG.CHECK" else first[1], samples=0)
            usage_s = "%d" % usage
        per_key = (after - before) / MEM_KEYS
        raw["memory"].append({"case": name, "keys": MEM_KEYS, "before": before, "after": after,
                              "per_key": per_key, "memory_usage": usage})
        lines.append("| %s | %.1f | %s |" % (name, per_key, usage_s))
        log("  memory %-36s %7.1f bytes/key  MEMORY USAGE %s" % (name, per_key, usage_s))
    r.execute_command("FLUSHALL", "SYNC")
    lines += ["", "Per user for the Lua pair: both keys, as one user needs them.", ""]
    return lines


# ================================================================== main

def header(module, load_start, redis_version):
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rev = git.stdout.strip() or "no commit"
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if dirty.stdout.strip():
        rev += " (src modified)"
    cpu = ""
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True).stdout
    m = re.search(r"^Model name:\s*(.*)$", lscpu, re.M)
    if m:
        cpu = m.group(1)
    bench_version = subprocess.run([REDIS_BENCHMARK, "--version"], stdout=subprocess.PIPE,
                                   text=True).stdout.strip()
    return [
        "# floodgate policy benchmark",
        "",
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "- mode: %s" % ("QUICK (smoke test, not for comparison)" if QUICK else "full"),
        "- machine: nproc %d, %s, %s" % (os.cpu_count(), cpu or "unknown CPU",
                                         " ".join(os.uname()[i] for i in (0, 2))),
        "- redis-server %s on CPU %d (`--save \"\" --appendonly no`, 127.0.0.1), %s on CPU %d"
        % (redis_version, SERVER_CPU, bench_version, CLIENT_CPU),
        "- module: %s (copied at the start), git %s" % (MODULE, rev),
        "- load average at start: %s; at end: %s (the run itself keeps both CPUs busy)"
        % (load_start, " ".join(open("/proc/loadavg").read().split()[:3])),
        "",
    ]


def main():
    if not os.path.isfile(MODULE):
        die("module not found: %s (run 'make module' first)" % MODULE)
    for tool in (REDIS_SERVER, REDIS_BENCHMARK, "taskset"):
        if not shutil.which(tool):
            die(tool + " not found")
    if (os.cpu_count() or 1) < 2:
        log("policy_bench.py: WARNING: 1 CPU; server and client share it")
    skip_cg = os.environ.get("POLICY_BENCH_SKIP_CALLGRIND", "") not in ("", "0")
    if not skip_cg and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        log("policy_bench.py: valgrind not found: the callgrind part is skipped")
        skip_cg = True

    workdir = tempfile.mkdtemp(prefix="floodgate-policybench.")
    atexit.register(shutil.rmtree, workdir, True)
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    module = os.path.join(workdir, "floodgate.so")
    shutil.copy(MODULE, module)
    load_start = " ".join(open("/proc/loadavg").read().split()[:3])
    raw = {"rounds": ROUNDS, "n": {"1": N1, "16": N16}, "clients": CLIENTS,
           "keyspace": KEYSPACE, "throughput": [], "callgrind": {}, "memory": []}

    t0 = time.time()
    srv = Server(workdir, module)
    redis_version = srv.r.info("server")["redis_version"]
    sha = setup(srv.r)
    log("== throughput (%d rounds)" % ROUNDS)
    body = throughput_md(throughput(srv, sha, raw))
    log("== memory")
    body += memory(srv, sha, raw)
    srv.stop()
    if not skip_cg:
        log("== callgrind")
        body += callgrind_md(callgrind(workdir, module, raw))
    else:
        body += ["## Where the time goes (callgrind)", "", "Skipped (no valgrind, or "
                 "POLICY_BENCH_SKIP_CALLGRIND=1).", ""]
    raw["seconds"] = round(time.time() - t0, 1)
    text = "\n".join(header(MODULE, load_start, redis_version) + body) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT + ".tmp", "w") as f:
        f.write(text)
    os.replace(OUT + ".tmp", OUT)
    with open(RAW, "w") as f:
        json.dump(raw, f, indent=1)
    print(text, end="")
    log("Written: %s (every run: %s), %.0f s" % (OUT, RAW, raw["seconds"]))


if __name__ == "__main__":
    main()
