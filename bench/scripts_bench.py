#!/usr/bin/python3
"""floodgate's rate-limit scripts (the script backend: the EVALSHA scripts
scripts/gen-scripts.sh builds from src/scripts/, as the library sends them,
run on a server without the module) against the module's commands and
against the Lua limiters people run today, each peer reproduced from its
published algorithm in bench/lua/peers/ (header comments there). One
run, two servers: a stock redis-server (no module) for every script, and
one with build/floodgate.so for the module's commands.

    make bench-scripts                               (about 4 minutes)
    QUICK=1 /usr/bin/python3 bench/scripts_bench.py  (smoke test, about a
                                                     minute; not for comparison)

Per family (token bucket, leaky bucket, GCRA, CL.THROTTLE, fixed window,
sliding window counter, sliding log) the rows are floodgate's script
(EVALSHA), its Functions form (FCALL fg_token..., the whole library
gen-scripts.sh builds, floodgate-functions.lua), the module's command
and the peers doing the same algorithm, plus INCR as the unit on each
server. Every row runs on a realistic spread of keys
(`key:__rand_int__`, redis-benchmark -r 100000) and on one hot key (every
client on the same key: past its first 100 requests nearly every decision
is a refusal, what an abusive client costs). Then the two-limit policy case:
the peers' cost of two separate calls per decision (rate-limiter-flexible
twice, Spring's bucket plus a rate-limiter-flexible window) and the
module's FG.CHECK, the baseline for floodgate's one-script policy.

Method. Both servers pinned to CPU 0 (`taskset -a -cp 0`), `--save ""
--appendonly no`, 127.0.0.1, stopped by their PID; redis-benchmark pinned
to CPU 1, `-c 50 -r 100000 -P 16`. An unrecorded INCR warm-up on each
server, then one short sizing run per case (its ops/s sets -n so that each
run takes about SCRIPTS_BENCH_SECONDS, INCR's twice that), then ROUNDS
interleaved rounds (every case once per round), FLUSHALL and CONFIG
RESETSTAT before each run.
Figures per run: the server process's CPU time over the run (/proc/PID/stat,
user + system, all threads) divided by -n, the steadiest measure since
other work on the machine does not change it; `usec_per_call` of the
command (INFO commandstats: EVALSHA's includes the redis.call()s inside,
not reading the request or writing the reply); and ops/s. Each row's ratio
to INCR is taken against INCR of its own server, same key mode, same round,
by CPU (INCR's µs / the row's µs) and by ops/s; tables give the medians
over rounds. A run whose commandstats show another call count than -n, a
failed or rejected call, or any error in INFO errorstats aborts the
benchmark, so a failing script never passes for a fast one. Other
processes' CPU time during each run (/proc/stat minus the servers and the
client; niced work apart) is recorded and its worst share printed, and
each run first waits for a quiet machine (SCRIPTS_BENCH_MAX_WAIT in all).

A row whose command floodgate's script does not have yet (the window
families while they are being written) is listed as such, not timed. Rows
are the ROWS list below, each a list of calls per decision: the one-script
policy, once src/scripts/ has it, is one more row of the "policy" family
with one call, "@fg:<family>" naming its script (gen/scripts/<family>.lua
of gen-scripts.sh's output: the family's fast path when src/scripts/fast/
has one, prelude.lua, <family>.lua and the run line, as for ratelimit),
and its FG.POLICY SET as the row's setup (commands run after each
FLUSHALL, not timed).

The scripts are only ever scripts/gen-scripts.sh's output: for the working
tree, `sh scripts/gen-scripts.sh src/scripts TMP`; for SCRIPTS_REV, that
revision's own gen-scripts.sh on its src/scripts/ (`git archive
SCRIPTS_REV src/scripts scripts/gen-scripts.sh | tar -x`), in a temporary
directory removed at exit. A family the output has no script for is listed
as missing. The report's header names where they came from, the last
commit that changed src/scripts/, and each script's SHA1.

Output: BENCH_OUT (default bench/results/scripts.md; QUICK:
bench/results/scripts-quick.md) and every run in the .raw file next to it
(JSON). Progress goes to stderr. Environment: QUICK=1,
SCRIPTS_BENCH_ROUNDS (3), SCRIPTS_BENCH_SECONDS (0.7 per run),
SCRIPTS_BENCH_ROWS (comma list of substrings of "family implementation"),
SCRIPTS_BENCH_MAX_WAIT (s waited in all for a quiet machine, 30),
SCRIPTS_BENCH_RETRY_BUDGET (s of runs again in all, 45: a run in which
other processes took over 25% of a CPU is run again, the least disturbed
kept),
SCRIPTS_REV (build the scripts of that git revision, with its
gen-scripts.sh, instead of the working tree's), MODULE, REDIS_SERVER
(/usr/bin/redis-server), REDIS_BENCHMARK.
"""

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import policy_bench as pb  # noqa: E402  (run_benchmark, main_thread_cpu, env_int, ...)
from bench_server import BenchServer  # noqa: E402

ROOT = pb.ROOT
QUICK = pb.QUICK
MODULE = os.environ.get("MODULE", os.path.join(ROOT, "build", "floodgate.so"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "/usr/bin/redis-server")
OUT = os.environ.get("BENCH_OUT", os.path.join(
    ROOT, "bench", "results", "scripts-quick.md" if QUICK else "scripts.md"))
RAW = os.path.splitext(OUT)[0] + ".raw"
ROUNDS = pb.env_int("SCRIPTS_BENCH_ROUNDS", 1 if QUICK else 3)
SECONDS = float(os.environ.get("SCRIPTS_BENCH_SECONDS", "0.4" if QUICK else "0.6"))
MAX_WAIT = pb.env_int("SCRIPTS_BENCH_MAX_WAIT", 0 if QUICK else 30)
SCRIPTS_REV = os.environ.get("SCRIPTS_REV", "")
if SCRIPTS_REV:  # one commit for the whole run, however HEAD moves meanwhile
    SCRIPTS_REV = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", SCRIPTS_REV + "^{commit}"],
                                 stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
MAX_OTHERS = 0.25  # of a CPU taken by other processes (not niced) during a run
RETRY_BUDGET = pb.env_int("SCRIPTS_BENCH_RETRY_BUDGET", 0 if QUICK else 45)  # s of runs again
SIZING_N = 4000
N_MIN, N_MAX = 8000, 3200000
BATCH = 50 * 16  # -n a multiple of clients x pipeline: redis-benchmark sends whole batches
PIPELINE = 16
SERVER_CPU = pb.SERVER_CPU

# The client's clock for limits' moving window (it sends time.time()): one
# value for the whole run, whose entries then all lie within the window.
CLIENT_NOW = "%.6f" % time.time()

STOCK, MODULE_SERVER = "stock", "module"
SPREAD, HOT = "spread", "hot"

FG, FN, PEER = "floodgate script", "floodgate function", "peer"
UNIT, MOD, OTHER = "unit", "module", "baseline"
FLOOR = "floor"  # a command's Redis calls alone (FLOOR_NAME)


class Row:
    """One line of a table: calls is the list of commands one decision
    takes (argv lists; "__rand_int__" is the key's number, "@src" a
    script's SHA1), run on the stock server or the module's."""

    def __init__(self, family, name, kind, server, calls, state, modes=(SPREAD, HOT), setup=()):
        self.family, self.name, self.kind, self.server = family, name, kind, server
        self.calls, self.state, self.modes = calls, state, modes
        self.setup = setup  # commands run after each FLUSHALL, before the run (not timed)
        self.missing = None  # why it is not timed

    @property
    def label(self):
        return "%s %s" % (self.family, self.name)


def ev(src, keys, *args):
    return ["EVALSHA", "@" + src, str(len(keys))] + list(keys) + [str(a) for a in args]


def fg(key, *args):
    return ev("fg:ratelimit", [key], *args)


def fcall(command, key, *args):
    """The Functions form of a command (functions.lua): FCALL fg_token 1 key ..."""
    return ["FCALL", command.lower().replace(".", "_"), "1", key] + [str(a) for a in args]


POLICY = ["LIMIT", "TOKEN", "100", "10", "LIMIT", "FIXED", "1000", "86400000"]
POLICY_KEYS = ["fg:policy:{p2}", "fg:policy:{p2}:allow", "fg:policy:{p2}:deny"]

# The Redis calls a command of floodgate's must make, alone: no parsing, no
# decision, the reply written out. What such a script costs bounds from
# below every script that decides on the server's clock with those calls;
# a peer whose whole script costs less cannot be overtaken by arithmetic.
FLOOR_NAME = "the Redis calls %s makes, alone"
FLOOR_CALLS = """
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1] .. t[2] .. '000', 'PXAT', (tonumber(t[1]) + 1) .. '000')
return {1, 100, 99, -1, 100}
"""
FLOOR_CHECK = """
local d = redis.call('HMGET', KEYS[2], 'rules', 'nallow', 'ndeny')
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], 'p1|p2|0|0|0|T,100,100000000,' .. t[1] .. t[2] .. '000|F,1000,86400000000,'
           .. t[1] .. '000000,1', 'PXAT', (tonumber(t[1]) + 1) .. '000')
return {1, 100, 99, -1, 1000, 'limit:1', 0}
"""

ROWS = [
    Row("unit", "INCR", UNIT, STOCK, [["INCR", "incr:__rand_int__"]], "STRING counter"),
    Row("unit", "INCR (module server)", UNIT, MODULE_SERVER, [["INCR", "incr:__rand_int__"]],
        "STRING counter"),

    Row("token bucket", "floodgate script FG.TOKEN", FG, STOCK,
        [fg("tb:__rand_int__", "FG.TOKEN", 100, 10)], "STRING TAT (ns), PXAT"),
    Row("token bucket", "floodgate function FCALL fg_token", FN, STOCK,
        [fcall("FG.TOKEN", "tf:__rand_int__", 100, 10)], "STRING TAT (ns), PXAT",
        modes=(SPREAD,)),
    Row("token bucket", "module FG.TOKEN", MOD, MODULE_SERVER,
        [["FG.TOKEN", "tb:__rand_int__", "100", "10"]], "module type"),
    Row("token bucket", "Spring Cloud Gateway (HASH)", PEER, STOCK,
        [ev("peer:spring_token_bucket", ["sp:__rand_int__"], 10, 100, 1)],
        "HASH tokens, timestamp; EXPIRE"),
    Row("token bucket", "Spring Cloud Gateway (2 keys, older)", PEER, STOCK,
        [ev("peer:spring_token_bucket_2keys",
            ["{s2:__rand_int__}.tokens", "{s2:__rand_int__}.timestamp"], 10, 100, 1)],
        "2 STRING, SETEX"),

    Row("leaky bucket", "floodgate script FG.LEAKY", FG, STOCK,
        [fg("lb:__rand_int__", "FG.LEAKY", 100, 10)], "STRING TAT (ns), PXAT"),
    Row("leaky bucket", "floodgate function FCALL fg_leaky", FN, STOCK,
        [fcall("FG.LEAKY", "lf:__rand_int__", 100, 10)], "STRING TAT (ns), PXAT",
        modes=(SPREAD,)),
    Row("leaky bucket", "module FG.LEAKY", MOD, MODULE_SERVER,
        [["FG.LEAKY", "lb:__rand_int__", "100", "10"]], "module type"),

    Row("GCRA", "floodgate script FG.GCRA", FG, STOCK,
        [fg("gc:__rand_int__", "FG.GCRA", 100, 10, 1000)], "STRING TAT (ns), PXAT"),
    Row("GCRA", "floodgate function FCALL fg_gcra", FN, STOCK,
        [fcall("FG.GCRA", "gf:__rand_int__", 100, 10, 1000)], "STRING TAT (ns), PXAT",
        modes=(SPREAD,)),
    Row("GCRA", "module FG.GCRA", MOD, MODULE_SERVER,
        [["FG.GCRA", "gc:__rand_int__", "100", "10", "1000"]], "module type"),
    Row("GCRA", "go-redis/redis_rate", PEER, STOCK,
        [ev("peer:redis_rate_gcra", ["rr:__rand_int__"], 100, 10, 1, 1)],
        "STRING TAT (float s), EX"),

    Row("CL.THROTTLE", "floodgate script CL.THROTTLE", FG, STOCK,
        [fg("cl:__rand_int__", "CL.THROTTLE", 15, 30, 60)], "STRING TAT (ns), PXAT"),
    Row("CL.THROTTLE", "floodgate function FCALL cl_throttle", FN, STOCK,
        [fcall("CL.THROTTLE", "cf:__rand_int__", 15, 30, 60)], "STRING TAT (ns), PXAT",
        modes=(SPREAD,)),
    Row("CL.THROTTLE", "module CL.THROTTLE", MOD, MODULE_SERVER,
        [["CL.THROTTLE", "cl:__rand_int__", "15", "30", "60"]], "module type"),
    # the same limit: capacity max_burst + 1 = 16, 30 per 60 s
    Row("CL.THROTTLE", "go-redis/redis_rate (same limit)", PEER, STOCK,
        [ev("peer:redis_rate_gcra", ["rc:__rand_int__"], 16, 30, 60, 1)],
        "STRING TAT (float s), EX"),

    Row("fixed window", "floodgate script FG.FIXED", FG, STOCK,
        [fg("fx:__rand_int__", "FG.FIXED", 100, 60000)], "see ratelimit.lua"),
    Row("fixed window", "floodgate function FCALL fg_fixed", FN, STOCK,
        [fcall("FG.FIXED", "ff:__rand_int__", 100, 60000)], "see ratelimit.lua",
        modes=(SPREAD,)),
    Row("fixed window", "module FG.FIXED", MOD, MODULE_SERVER,
        [["FG.FIXED", "fx:__rand_int__", "100", "60000"]], "module type"),
    Row("fixed window", "rate-limiter-flexible", PEER, STOCK,
        [ev("peer:rlf_fixed_window", ["rf:__rand_int__"], 1, 60)], "STRING counter, EX"),
    Row("fixed window", "rate-limit-redis", PEER, STOCK,
        [ev("peer:rate_limit_redis_fixed_window", ["rl:__rand_int__"], 0, 60000)],
        "STRING counter, PEXPIRE"),

    Row("fixed window", FLOOR_NAME % "FG.FIXED" + " (TIME, GET, SET PXAT, the 5-integer reply)",
        FLOOR, STOCK,
        [ev("text:floor_calls", ["ff:__rand_int__"], "FG.FIXED", 100, 60000)], "", modes=(SPREAD,)),
    Row("sliding window", "floodgate script FG.SLIDING", FG, STOCK,
        [fg("sw:__rand_int__", "FG.SLIDING", 100, 60000)], "see ratelimit.lua"),
    Row("sliding window", "floodgate function FCALL fg_sliding", FN, STOCK,
        [fcall("FG.SLIDING", "sf:__rand_int__", 100, 60000)], "see ratelimit.lua",
        modes=(SPREAD,)),
    Row("sliding window", "module FG.SLIDING", MOD, MODULE_SERVER,
        [["FG.SLIDING", "sw:__rand_int__", "100", "60000"]], "module type"),
    Row("sliding window", "limits (sliding window counter)", PEER, STOCK,
        [ev("peer:limits_sliding_window", ["{ls:__rand_int__}.prev", "{ls:__rand_int__}.cur"],
            100, 60, 1)], "2 STRING counters, PX"),

    Row("sliding log", "floodgate script FG.SLIDELOG", FG, STOCK,
        [fg("sl:__rand_int__", "FG.SLIDELOG", 100, 60000)], "ZSET"),
    Row("sliding log", "floodgate function FCALL fg_slidelog", FN, STOCK,
        [fcall("FG.SLIDELOG", "slf:__rand_int__", 100, 60000)], "ZSET", modes=(SPREAD,)),
    Row("sliding log", "module FG.SLIDELOG", MOD, MODULE_SERVER,
        [["FG.SLIDELOG", "sl:__rand_int__", "100", "60000"]], "module type"),
    Row("sliding log", "limits (moving window)", PEER, STOCK,
        [ev("peer:limits_moving_window", ["lm:__rand_int__"], CLIENT_NOW, 100, 60, 1)],
        "LIST of timestamps, EXPIRE"),
    Row("sliding log", "ZSET log (bench/lua/sliding_log.lua)", OTHER, STOCK,
        [ev("lua:sliding_log", ["lz:__rand_int__"], 100, 60000)], "ZSET, PEXPIRE"),

    # Two limits per decision: 10 per second and 1,000 per day (or Spring's
    # bucket of 100 at 10/s and the daily window), two calls for the peers.
    Row("policy", "rate-limiter-flexible x2 (10/s + 1000/day)", PEER, STOCK,
        [ev("peer:rlf_fixed_window", ["p1s:__rand_int__"], 1, 1),
         ev("peer:rlf_fixed_window", ["p1d:__rand_int__"], 1, 86400)],
        "2 STRING counters", modes=(SPREAD,)),
    Row("policy", "Spring bucket + rate-limiter-flexible day", PEER, STOCK,
        [ev("peer:spring_token_bucket", ["p2b:__rand_int__"], 10, 100, 1),
         ev("peer:rlf_fixed_window", ["p2d:__rand_int__"], 1, 86400)],
        "HASH + STRING", modes=(SPREAD,)),
    # floodgate's one-script policy (src/scripts/policy.lua): the state key and the
    # policy's three keys; the policy is set again after every FLUSHALL
    Row("policy", "floodgate script FG.CHECK (TOKEN 100 10 + FIXED 1000/day)", FG, STOCK,
        [ev("fg:policy", ["pf:__rand_int__"] + POLICY_KEYS, "FG.CHECK", "p2")],
        "STRING p1|...", modes=(SPREAD,),
        setup=[ev("fg:policy", POLICY_KEYS, "FG.POLICY", "SET", "p2", *POLICY)]),
    Row("policy", "floodgate function FCALL fg_check", FN, STOCK,
        [["FCALL", "fg_check", "4", "pff:__rand_int__"] + POLICY_KEYS + ["p2"]],
        "STRING p1|...", modes=(SPREAD,),
        setup=[ev("fg:policy", POLICY_KEYS, "FG.POLICY", "SET", "p2", *POLICY)]),
    Row("policy", FLOOR_NAME % "FG.CHECK" + " (HMGET of the policy, TIME, GET, SET PXAT, the "
        "7-field reply)", FLOOR, STOCK,
        [ev("text:floor_check", ["pk:__rand_int__"] + POLICY_KEYS, "FG.CHECK", "p2")], "",
        modes=(SPREAD,), setup=[ev("fg:policy", POLICY_KEYS, "FG.POLICY", "SET", "p2", *POLICY)]),
    Row("policy", "module FG.CHECK (TOKEN 100 10 + FIXED 1000/day)", MOD, MODULE_SERVER,
        [["FG.CHECK", "p2", "pc:__rand_int__"]], "module type", modes=(SPREAD,)),
]

# Where the time of floodgate's FG.TOKEN script goes (spread keys): the
# same EVALSHA arguments through scripts that do less, and the same limit
# with its rate written 1e1: the exact code reads it as 10, the fast path
# (src/scripts/fast/ratelimit.lua) takes plain decimals only and leaves the
# call to the exact code after it.
BREAKDOWN = [
    Row("FG.TOKEN script", "EVALSHA of `return 1`", OTHER, STOCK,
        [ev("text:return1", ["bk:__rand_int__"], "FG.TOKEN", 100, 10)], "", modes=(SPREAD,)),
    Row("FG.TOKEN script", "the exact path (rate written 1e1, which the fast path leaves to "
        "the exact code)", OTHER, STOCK,
        [ev("fg:ratelimit", ["bk:__rand_int__"], "FG.TOKEN", 100, "1e1")], "", modes=(SPREAD,)),
    Row("FG.TOKEN script", "its Redis calls alone (TIME, GET, SET PXAT, the 5-integer reply)",
        OTHER, STOCK, [ev("text:floor_calls", ["bk:__rand_int__"], "FG.TOKEN", 100, 10)], "",
        modes=(SPREAD,)),
    Row("FG.TOKEN script", "the whole command", OTHER, STOCK,
        [fg("bk:__rand_int__", "FG.TOKEN", 100, 10)], "", modes=(SPREAD,)),
]
TEXTS = {"return1": "return 1\n", "floor_calls": FLOOR_CALLS, "floor_check": FLOOR_CHECK}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log("scripts_bench.py: ERROR: " + msg)
    sys.exit(1)


# ================================================================ scripts

class Built:
    """scripts/gen-scripts.sh's output, made once per run in a temporary
    directory (removed at exit): from the working tree's src/scripts/, or
    from SCRIPTS_REV's src/scripts/ with that revision's gen-scripts.sh."""
    out = None
    root = None  # the tree gen-scripts.sh ran on

    @classmethod
    def dir(cls):
        if cls.out is None:
            tmp = tempfile.mkdtemp(prefix="floodgate-scripts-bench.")
            atexit.register(shutil.rmtree, tmp, True)
            root = ROOT
            if SCRIPTS_REV:
                root = os.path.join(tmp, "tree")
                os.mkdir(root)
                archive = subprocess.Popen(
                    ["git", "-C", ROOT, "archive", SCRIPTS_REV, "src/scripts",
                     "scripts/gen-scripts.sh"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                tar = subprocess.run(["tar", "-x", "-C", root], stdin=archive.stdout,
                                     stderr=subprocess.PIPE)
                archive.stdout.close()
                err = archive.stderr.read().decode(errors="replace")
                if archive.wait() != 0 or tar.returncode != 0:
                    die("git archive %s src/scripts scripts/gen-scripts.sh | tar -x: %s%s"
                        % (SCRIPTS_REV[:12], err.strip(), tar.stderr.decode(errors="replace")))
            out = os.path.join(tmp, "out")
            gen = subprocess.run(["sh", os.path.join(root, "scripts", "gen-scripts.sh"),
                                  os.path.join(root, "src", "scripts"), out],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if gen.returncode != 0:
                die("scripts/gen-scripts.sh%s failed: %s" % (
                    " of " + SCRIPTS_REV[:12] if SCRIPTS_REV else "", gen.stdout.strip()))
            cls.out, cls.root = out, root
        return cls.out

    @classmethod
    def has_fast(cls, family):
        """Whether the family had a fast path (src/scripts/fast/) where it was built."""
        cls.dir()
        return os.path.isfile(os.path.join(cls.root, "src", "scripts", "fast", family + ".lua"))

    @classmethod
    def text(cls, rel):
        """A file of the output, or None when the build made none."""
        path = os.path.join(cls.dir(), rel)
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return f.read()


def script_text(src):
    """The text of "@src": fg:<family> (floodgate's, as gen-scripts.sh built
    it: gen/scripts/<family>.lua, None when there is no such family),
    peer:<name> (bench/lua/peers/), lua:<name> (bench/lua/), text:<name>
    (TEXTS)."""
    kind, name = src.split(":", 1)
    if kind == "fg":
        return Built.text(os.path.join("gen", "scripts", name + ".lua"))
    if kind == "text":
        return TEXTS[name]
    folder = os.path.join(HERE, "lua", "peers" if kind == "peer" else "")
    with open(os.path.join(folder, name + ".lua")) as f:
        return f.read()


def load_scripts(r, rows):
    """SCRIPT LOAD of every script the rows use: {src: sha}, None for a
    floodgate file that does not exist (yet)."""
    shas = {}
    for row in rows:
        for call in list(row.calls) + list(row.setup):
            for a in call:
                if a.startswith("@") and a[1:] not in shas:
                    text = script_text(a[1:])
                    shas[a[1:]] = r.script_load(text) if text is not None else None
    if any(call[0] == "FCALL" for row in rows for call in row.calls):
        # the whole library as the build makes it
        text = Built.text("floodgate-functions.lua")
        shas["functions"] = None
        if text is not None:
            r.execute_command("FUNCTION", "LOAD", "REPLACE", text)
            shas["functions"] = hashlib.sha1(text.encode()).hexdigest()
    return shas


def resolve(call, shas, mode):
    out = [shas[a[1:]] if a.startswith("@") else a for a in call]
    if mode == HOT:
        out = [a.replace("__rand_int__", "hot") for a in out]
    return out


# ================================================================ running

def cpu_busy_seconds():
    """All CPUs' user and system time, not nice: niced work (other people's
    builds and test suites here) runs in the gaps the benchmark leaves and
    is reported apart; interrupts left out (the run's own loopback traffic
    is accounted there)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    hz = os.sysconf("SC_CLK_TCK")
    return (int(fields[1]) + int(fields[3])) / hz, int(fields[2]) / hz


class Quiet:
    """Waits before a run until other processes take under 10% of a CPU
    (over 0.2 s, nice work left out), within MAX_WAIT seconds for the whole
    benchmark."""
    waited = 0.0

    @classmethod
    def wait(cls):
        while cls.waited < MAX_WAIT:
            busy0, t0 = cpu_busy_seconds()[0], time.time()
            time.sleep(0.2)
            if (cpu_busy_seconds()[0] - busy0) / (time.time() - t0) <= 0.10:
                return
            cls.waited += time.time() - t0


class Retries:
    spent, count = 0.0, 0


def stat_name(call):
    return "cmdstat_" + call[0].lower()


def timed(srv, servers, call, n, setup=()):
    """One run of one call on a FLUSHALLed server (then given its setup):
    its figures."""
    r = srv.client
    r.flushall()
    for cmd in setup:
        r.execute_command(*cmd)
    r.config_resetstat()
    Quiet.wait()
    all_srv = lambda: sum(s.cpu_seconds() for s in servers.values())  # noqa: E731
    cpu0, main0, (busy0, nice0), all0, cli0, t0 = (
        srv.cpu_seconds(), pb.main_thread_cpu(r), cpu_busy_seconds(), all_srv(),
        pb.children_cpu_seconds(), time.time())
    rps, line = pb.run_benchmark(srv.port, n, PIPELINE, call)
    cpu1, main1, (busy1, nice1), all1, cli1, t1 = (
        srv.cpu_seconds(), pb.main_thread_cpu(r), cpu_busy_seconds(), all_srv(),
        pb.children_cpu_seconds(), time.time())
    stats = {k.lower(): v for k, v in r.info("commandstats").items()}.get(stat_name(call))
    errors = r.info("errorstats")
    if not stats or stats["calls"] != n or stats.get("failed_calls", 0) or \
            stats.get("rejected_calls", 0) or errors:
        die("commandstats %r, errorstats %r after %d commands (%s)" % (stats, errors, n, line))
    others = max(0.0, (busy1 - busy0) - (all1 - all0) - (cli1 - cli0)) / (t1 - t0)
    return {"n": n, "rps": rps, "cpu_us": (cpu1 - cpu0) * 1e6 / n,
            "main_cpu_us": (main1 - main0) * 1e6 / n,
            "usec_per_call": stats["usec"] / stats["calls"], "others_cpu": others,
            "others_nice_cpu": (nice1 - nice0) / (t1 - t0),
            "keys_after": r.dbsize(), "seconds": t1 - t0, "argv": line}


def probe(srv, row, shas):
    """Every call once through redis-py before anything is timed; a call
    floodgate's script does not have (yet) marks the row as missing."""
    for call in row.calls:
        for a in call:
            if a.startswith("@") and shas.get(a[1:]) is None:
                row.missing = "src/scripts/%s.lua does not exist" % a[4:]
                return
        if call[0] == "FCALL" and shas.get("functions") is None:
            row.missing = "no Functions library (src/scripts/functions.lua does not exist)"
            return
        argv = [a.replace("__rand_int__", "probe") for a in resolve(call, shas, SPREAD)]
        try:
            for cmd in row.setup:
                srv.client.execute_command(*resolve(cmd, shas, SPREAD))
            reply = srv.client.execute_command(*argv)
        except redis.ResponseError as e:
            m = re.search(r"unknown command '([^']*)' for this floodgate script", str(e))
            if m:
                row.missing = "%s is not in src/scripts/ratelimit.lua yet" % m.group(1)
                return
            if call[0] == "FCALL" and "function not found" in str(e).lower():
                row.missing = "no function %s: its command is not in ratelimit.lua yet" % call[1]
                return
            if row.kind in (FG, FN):  # floodgate's, being written: said, not timed
                row.missing = "fails: %s" % str(e).replace("|", "/")[:120]
                return
            die("%s: %s -> %s" % (row.label, " ".join(argv), e))
        log("  check %-58s -> %r" % (row.label[:58], reply))


def main():
    if not os.path.isfile(MODULE):
        die("module not found: %s (run 'make module' first)" % MODULE)
    for tool in (REDIS_SERVER, pb.REDIS_BENCHMARK, "taskset"):
        if not (os.path.isfile(tool) or subprocess.run(["which", tool], stdout=subprocess.DEVNULL)
                .returncode == 0):
            die(tool + " not found")
    load_start = " ".join(open("/proc/loadavg").read().split()[:3])
    t_start = time.time()

    servers = {}

    def stop_servers():
        for s in list(servers.values()):
            s.stop()
        servers.clear()

    atexit.register(stop_servers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    servers[STOCK] = BenchServer(REDIS_SERVER, None, SERVER_CPU, "floodgate-scripts-stock.")
    servers[MODULE_SERVER] = BenchServer(REDIS_SERVER, MODULE, SERVER_CPU,
                                         "floodgate-scripts-module.")
    servers[MODULE_SERVER].client.execute_command("FG.POLICY", "SET", "p2", *POLICY)

    wanted = [w.strip().lower() for w in os.environ.get("SCRIPTS_BENCH_ROWS", "").split(",")
              if w.strip()]
    rows = [row for row in ROWS if row.kind == UNIT or not wanted
            or any(w in row.label.lower() for w in wanted)]
    breakdown = BREAKDOWN if not wanted or any(w in "fg.token script" for w in wanted) else []
    shas = load_scripts(servers[STOCK].client, rows + breakdown)
    head = header(load_start, servers, shas)
    for row in rows + breakdown:
        probe(servers[row.server], row, shas)
        if row.missing:
            log("  not timed: %s (%s)" % (row.label, row.missing))

    # the cases: (row, mode, call index); INCR first in every round
    cases = [(row, mode, i) for row in rows + breakdown if not row.missing
             for mode in row.modes for i in range(len(row.calls))]
    for srv in servers.values():  # warm-up, not recorded
        pb.run_benchmark(srv.port, 200000, PIPELINE, ["INCR", "incr:__rand_int__"])

    sizes = {}
    for row, mode, i in cases:
        srv = servers[row.server]
        srv.client.flushall()
        for cmd in row.setup:
            srv.client.execute_command(*resolve(cmd, shas, mode))
        rps, _ = pb.run_benchmark(srv.port, SIZING_N, PIPELINE, resolve(row.calls[i], shas, mode))
        seconds = SECONDS * (2 if row.kind == UNIT else 1)  # the unit of every ratio: longer
        n = int(min(N_MAX, max(N_MIN, rps * seconds)) // BATCH * BATCH)
        sizes[(row.label, mode, i)] = n
        log("  sizing %-60s %-6s %9.0f ops/s -> -n %d" % (row.label[:60], mode, rps, n))

    runs = {}
    for rnd in range(1, ROUNDS + 1):
        for row, mode, i in cases:
            key = (row.label, mode, i)
            res = timed(servers[row.server], servers, resolve(row.calls[i], shas, mode),
                        sizes[key], [resolve(c, shas, mode) for c in row.setup])
            # a run other processes disturbed is run again, within a budget for the
            # whole benchmark; the least disturbed one is kept
            while res["others_cpu"] > MAX_OTHERS and Retries.spent < RETRY_BUDGET:
                t0 = time.time()
                again = timed(servers[row.server], servers, resolve(row.calls[i], shas, mode),
                              sizes[key], [resolve(c, shas, mode) for c in row.setup])
                Retries.spent += time.time() - t0
                Retries.count += 1
                if again["others_cpu"] < res["others_cpu"]:
                    res = again
            res.update({"round": rnd, "row": row.label, "mode": mode, "call": i})
            runs.setdefault(key, []).append(res)
            log("  round %d %-58s %-6s %9.0f ops/s  %7.2f us/call (main %.2f, usec_per_call "
                "%.2f)  others %3.0f%% (+%.0f%% niced)"
                % (rnd, row.label[:58], mode, res["rps"], res["cpu_us"], res["main_cpu_us"],
                   res["usec_per_call"], 100 * res["others_cpu"], 100 * res["others_nice_cpu"]))
    stop_servers()
    head[-2] += "; at end: %s; %d run%s run again (other processes took over %d%% of a CPU), " \
        "%.0f s waited for a quiet machine" % (
            " ".join(open("/proc/loadavg").read().split()[:3]), Retries.count,
            "" if Retries.count == 1 else "s", 100 * MAX_OTHERS, Quiet.waited)
    text = "\n".join(head + report(rows, breakdown, runs)) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT + ".tmp", "w") as f:
        f.write(text)
    os.replace(OUT + ".tmp", OUT)
    with open(RAW, "w") as f:
        json.dump({"rounds": ROUNDS, "seconds_per_run": SECONDS, "sizes": {
            "|".join(map(str, k)): v for k, v in sizes.items()},
            "missing": {row.label: row.missing for row in rows + breakdown if row.missing},
            "runs": [x for v in runs.values() for x in v],
            "retries": Retries.count, "retry_seconds": round(Retries.spent, 1),
            "seconds": round(time.time() - t_start, 1)}, f, indent=1)
    print(text, end="")
    log("Written: %s (every run: %s), %.0f s" % (OUT, RAW, time.time() - t_start))


# ================================================================ report

def decision(runs, row, mode, rnd):
    """A decision's figures in one round: the sum over its calls of CPU and
    usec_per_call, and its rate when the calls run one after the other."""
    per = [next(x for x in runs[(row.label, mode, i)] if x["round"] == rnd)
           for i in range(len(row.calls))]
    return {"cpu_us": sum(x["cpu_us"] for x in per),
            "usec_per_call": sum(x["usec_per_call"] for x in per),
            "rps": 1 / sum(1 / x["rps"] for x in per)}


def figures(runs, row, mode, unit):
    """Medians over rounds: µs per decision, usec_per_call, and the ratios
    to the unit (INCR on the same server, same mode, same round)."""
    if (row.label, mode, 0) not in runs:
        return None
    rounds = sorted({x["round"] for x in runs[(row.label, mode, 0)]})
    ds = [decision(runs, row, mode, r) for r in rounds]
    us = [decision(runs, unit, mode, r) for r in rounds]
    return {"cpu_us": statistics.median(d["cpu_us"] for d in ds),
            "usec_per_call": statistics.median(d["usec_per_call"] for d in ds),
            "rps": statistics.median(d["rps"] for d in ds),
            "x_cpu": statistics.median(u["cpu_us"] / d["cpu_us"] for d, u in zip(ds, us)),
            "x_rps": statistics.median(d["rps"] / u["rps"] for d, u in zip(ds, us)),
            "cpu_range": (min(d["cpu_us"] for d in ds), max(d["cpu_us"] for d in ds)),
            "x_rps_range": (min(d["rps"] / u["rps"] for d, u in zip(ds, us)),
                            max(d["rps"] / u["rps"] for d, u in zip(ds, us)))}


def report(rows, breakdown, runs):
    units = {row.server: row for row in rows if row.kind == UNIT}
    fig = {(row.label, mode): figures(runs, row, mode, units[row.server])
           for row in rows + breakdown for mode in (SPREAD, HOT)}

    def cells(row, mode):
        f = fig[(row.label, mode)]
        if f is None:
            return ["", "", "", ""]
        return ["%.2f" % f["cpu_us"], "%.2f" % f["usec_per_call"], "%.3f" % f["x_cpu"],
                "%.3f" % f["x_rps"]]

    out = ["## Per decision",
           "",
           "µs: the server process's CPU time per decision (/proc/PID/stat over the run "
           "divided by -n; the steadiest figure). usec_per_call: INFO commandstats (EVALSHA's "
           "includes its redis.call()s, not reading the request or writing the reply). "
           "x INCR: INCR of the same server, same keys, same round, by CPU (INCR's µs / the "
           "row's) and by ops/s at P=16; medians over rounds. Spread: `-r 100000`; hot: one "
           "key for all 50 clients (nearly every decision a refusal after the first 100).",
           "",
           "| family | implementation | server | state | spread µs | usec_per_call "
           "| x INCR by CPU | P=16 x INCR | hot µs | usec_per_call | x INCR by CPU "
           "| P=16 x INCR |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        if row.family == "policy":
            continue
        name = "**%s**" % row.name if row.kind in (FG, FN) else row.name
        if row.missing:
            out.append("| %s | %s | %s | %s | not timed: %s | | | | | | | |"
                       % (row.family, name, row.server, row.state, row.missing))
            continue
        out.append("| %s |" % " | ".join([row.family, name, row.server, row.state]
                                         + cells(row, SPREAD) + cells(row, HOT)))
    out.append("")

    out += ["### floodgate's script against the peers",
            "",
            "Each family's cheapest peer (by CPU on spread keys) beside floodgate's script "
            "(EVALSHA) and its Functions form (FCALL); peer / floodgate by CPU > 1: floodgate "
            "is the cheaper; floodgate / peer by ops/s > 1: floodgate is the faster.",
            "",
            "| family | floodgate script µs | FCALL µs | cheapest peer | peer µs "
            "| peer / script by CPU, spread | hot | peer / FCALL by CPU | script / peer by ops/s, "
            "spread | hot | module µs |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    families = []
    for row in rows:
        if row.family not in families and row.family not in ("unit", "policy"):
            families.append(row.family)

    def timed_row(family, kind):
        r = next((r for r in rows if r.family == family and r.kind == kind), None)
        return r if r is not None and not r.missing else None

    for family in families:
        ours, fn, mod = timed_row(family, FG), timed_row(family, FN), timed_row(family, MOD)
        peers = [r for r in rows if r.family == family and r.kind == PEER and not r.missing]
        if not peers:
            continue
        peer = min(peers, key=lambda r: fig[(r.label, SPREAD)]["cpu_us"])
        p, ph = fig[(peer.label, SPREAD)], fig[(peer.label, HOT)]
        c = [family, "not timed", "", peer.name, "%.2f" % p["cpu_us"], "", "", "", "", ""]
        if ours:
            o, oh = fig[(ours.label, SPREAD)], fig[(ours.label, HOT)]
            c[1] = "%.2f" % o["cpu_us"]
            c[5] = "**%.2f**" % (p["cpu_us"] / o["cpu_us"])
            c[6] = "%.2f" % (ph["cpu_us"] / oh["cpu_us"])
            c[8] = "%.2f" % (o["rps"] / p["rps"])
            c[9] = "%.2f" % (oh["rps"] / ph["rps"])
        if fn:
            f = fig[(fn.label, SPREAD)]
            c[2] = "%.2f" % f["cpu_us"]
            c[7] = "%.2f" % (p["cpu_us"] / f["cpu_us"])
        c.append("%.2f" % fig[(mod.label, SPREAD)]["cpu_us"] if mod else "")
        out.append("| %s |" % " | ".join(c))
    out.append("")

    floors = [r for r in rows if r.kind == FLOOR and not r.missing]
    if floors:
        out += ["### The floor: a command's Redis calls alone",
                "",
                "The calls floodgate's script makes, in a script that does nothing else (no "
                "parsing, no decision, its reply written out), beside the family's cheapest peer. "
                "Peer / calls alone below 1: the peer's whole script costs less than those calls, "
                "so no script that makes them, floodgate's or any, can be the cheaper.",
                "",
                "| family | calls alone µs | cheapest peer | peer µs | peer / calls alone |",
                "|---|---:|---|---:|---:|"]
        for row in floors:
            peers = [r for r in rows if r.family == row.family and r.kind == PEER and not r.missing]
            if not peers:
                continue
            peer = min(peers, key=lambda r: fig[(r.label, SPREAD)]["cpu_us"])
            f, p = fig[(row.label, SPREAD)]["cpu_us"], fig[(peer.label, SPREAD)]["cpu_us"]
            out.append("| %s | %.2f | %s | %.2f | **%.2f** |" % (row.family, f, peer.name, p, p / f))
        out.append("")

    out += ["## Two limits per decision (the policy baseline)",
            "",
            "A peer's decision is its two calls (each timed on its own; µs and usec_per_call "
            "are their sums, ops/s their rate one after the other: 1 / (1/a + 1/b)). Spread "
            "keys.",
            "",
            "| implementation | server | calls | µs per decision | usec_per_call | x INCR by CPU "
            "| P=16 x INCR |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        if row.family != "policy":
            continue
        name = "**%s**" % row.name if row.kind in (FG, FN) else row.name
        if row.missing:
            out.append("| %s | %s | %d | not timed: %s | | | |"
                       % (name, row.server, len(row.calls), row.missing))
            continue
        c = cells(row, SPREAD)
        out.append("| %s | %s | %d | %s |" % (name, row.server, len(row.calls), " | ".join(c)))
    out.append("")

    if breakdown:
        out += ["## Where the time of floodgate's FG.TOKEN script goes",
                "",
                "The same `EVALSHA sha 1 key FG.TOKEN 100 10` (spread keys) through scripts "
                "that do less, and through the whole script with the rate written `1e1` (the "
                "same limit to the exact code; the fast path takes plain decimals only, so it "
                "leaves the call to the exact code); the differences split a decision's server "
                "CPU.",
                "",
                "| script | µs | usec_per_call | x INCR by CPU |",
                "|---|---:|---:|---:|"]
        for row in breakdown:
            if row.missing:
                out.append("| %s | not timed: %s | | |" % (row.name, row.missing))
                continue
            f = fig[(row.label, SPREAD)]
            out.append("| %s | %.2f | %.2f | %.3f |" % (row.name, f["cpu_us"],
                                                          f["usec_per_call"], f["x_cpu"]))
        if not any(row.missing for row in breakdown):
            e, exact, calls, whole = (fig[(row.label, SPREAD)]["cpu_us"] for row in breakdown)
            split = ("Split: EVALSHA itself %.1f µs; the Redis calls and the reply %.1f; the "
                     "rest of the command as it runs (the script's top level, parsing the "
                     "arguments, the decision) %.1f" % (e, calls - e, whole - calls))
            if Built.has_fast("ratelimit"):
                split += ("; the exact path costs %.1f more than that (the prelude's and "
                          "ratelimit.lua's top level, run again on every call, and their int64 "
                          "arithmetic)." % (exact - whole))
            else:
                split += (". These scripts have no fast path (no src/scripts/fast/ratelimit.lua): "
                          "the 1e1 row runs the same exact code as the whole command.")
            out += ["", split]
        out.append("")

    out += ["## Spread over rounds", "",
            "Ratio to INCR by ops/s and µs per decision, min-max over rounds; others: the "
            "worst share of a CPU that other processes took during one of the row's runs "
            "(/proc/stat less the servers and the client), and apart the niced work (builds, "
            "test suites run at nice 19), which mostly fills the gaps the benchmark leaves.",
            "", "| row | mode | P=16 x INCR | µs | others (worst) | niced (worst) |",
            "|---|---|---:|---:|---:|---:|"]
    for row in rows + breakdown:
        for mode in (SPREAD, HOT):
            f = fig.get((row.label, mode))
            if not f:
                continue
            mine = [x for i in range(len(row.calls)) for x in runs[(row.label, mode, i)]]
            out.append("| %s | %s | %.3f-%.3f | %.2f-%.2f | %.0f%% | %.0f%% |" % (
                row.label, mode, f["x_rps_range"][0], f["x_rps_range"][1], f["cpu_range"][0],
                f["cpu_range"][1], 100 * max(x["others_cpu"] for x in mine),
                100 * max(x["others_nice_cpu"] for x in mine)))
    out.append("")
    return out


def header(load_start, servers, shas):
    """The header, made before the run from what was loaded."""
    versions = {name: srv.client.info("server")["redis_version"] for name, srv in servers.items()}
    modules = servers[MODULE_SERVER].client.execute_command("MODULE", "LIST")
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rev = git.stdout.strip() or "no commit"
    source = "git %s (with its gen-scripts.sh)" % SCRIPTS_REV[:7] if SCRIPTS_REV \
        else "the working tree"
    if not SCRIPTS_REV:
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src/scripts",
                                "scripts/gen-scripts.sh"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if dirty.stdout.strip():
            source += " (modified since HEAD)"
    last = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cs",
                           SCRIPTS_REV or "HEAD", "--", "src/scripts"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True).stdout
    m = re.search(r"^Model name:\s*(.*)$", lscpu, re.M)
    bench_version = subprocess.run([pb.REDIS_BENCHMARK, "--version"], stdout=subprocess.PIPE,
                                   text=True).stdout.strip()
    mod = [x for x in modules if b"floodgate" in (x[1] if isinstance(x, list) else b"")]
    ver = mod[0][3] if mod else "?"
    built = ", ".join("%s %s" % (src[3:] if src.startswith("fg:") else "Functions library", sha)
                      for src, sha in sorted(shas.items())
                      if sha and (src == "functions" or src.startswith("fg:")))
    return [
        "# floodgate's scripts against the module and the Lua peers",
        "",
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "- mode: %s; %d round%s, about %.1f s per run" % (
            "QUICK (smoke test, not for comparison)" if QUICK else "full", ROUNDS,
            "" if ROUNDS == 1 else "s", SECONDS),
        "- machine: nproc %d, %s, %s" % (os.cpu_count(), m.group(1) if m else "unknown CPU",
                                         " ".join(os.uname()[i] for i in (0, 2))),
        "- servers: %s %s with no module, and with floodgate.so (ver %s), both on CPU %d "
        "(`--save \"\" --appendonly no`, 127.0.0.1); %s on CPU 1, `-c 50 -r 100000 -P 16`"
        % (REDIS_SERVER, versions[STOCK], ver, SERVER_CPU, bench_version),
        "- floodgate's scripts: scripts/gen-scripts.sh's output (gen/scripts/<family>.lua, "
        "floodgate-functions.lua) on src/scripts/ of %s; src/scripts/ last changed %s; "
        "SHA1s: %s" % (source, last.stdout.strip() or "?", built or "-"),
        "- peers: bench/lua/peers/*.lua, written for this benchmark from each project's "
        "published algorithm (see their headers); git %s" % rev,
        "- load average at start: %s" % load_start,
        "",
    ]


if __name__ == "__main__":
    main()
