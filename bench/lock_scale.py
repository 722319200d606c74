#!/usr/bin/python3
"""How the cost of a lock command grows with the holders and the waiters of
one key (docs/benchmarks.md, "Locks: hand-off and semaphores at scale").

    make bench-lock-scale                           (about a minute)
    QUICK=1 /usr/bin/python3 bench/lock_scale.py    (smoke test; not for comparison)

Starts its own redis-server (127.0.0.1, a free port, `--save ""
--appendonly no`, MODULE, default build/floodgate.so) pinned to CPU 0, runs
itself on CPU 1, and stops the server (by its PID) at exit. Every figure is
the server's own time, which the client's speed does not change:
usec_per_call of INFO commandstats (the command itself, timed by the
server's clock: a busy machine that takes the CPU away adds to it), and for
the hand-off the main thread's CPU time (INFO cpu, getrusage of the
thread) twice: of FG.UNLOCK alone (INFO cpu, FG.UNLOCK, INFO cpu sent in
one pipeline: the server runs the three in one event-loop turn, and the
waiters' replies are written after it), and from before the release to
after the last waiter's reply, which adds those replies.

1. Hand-off. One writer holds `FG.LOCK hk w 600000`; N clients (one
   connection each) queue `FG.LOCK hk r<i> 600000 SHARED WAIT 0`; once all
   N wait, `FG.UNLOCK hk w` grants all of them inside that one command.
   Every reply is checked: N grants, tokens all different. N = 500, 2,000,
   4,000 and 8,000; the median of ROUNDS rounds.
2. Semaphores. A semaphore of capacity 1,000,000 with h holders of one permit
   each (h = 1,000, 10,000, 40,000; leases of 10 minutes, so none ends
   during a run), then OPS pairs `FG.ACQUIRE sem 1000000 n<i> 1 600000` +
   `FG.RELEASE sem n<i>` pipelined 100 at a time (a newcomer joins and
   leaves: the holders' owner lookup, a place in the lease order and the
   key's expiry are paid each time), then OPS refused acquires on a full
   semaphore (capacity h: the refusal says when enough permits come back,
   a search over the lease ends). usec_per_call of each command; the
   median of ROUNDS rounds.

Output: markdown on stdout and in BENCH_OUT (default
bench/results/lock-scale.md; QUICK: lock-scale-quick.md). Environment:
QUICK=1, MODULE, REDIS_SERVER, LOCK_SCALE_ROUNDS, LOCK_SCALE_OPS.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

from bench_server import BenchServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.environ.get("QUICK", "") not in ("", "0")
MODULE = os.environ.get("MODULE", os.path.join(ROOT, "build", "floodgate.so"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
ROUNDS = int(os.environ.get("LOCK_SCALE_ROUNDS", 1 if QUICK else 5))
OPS = int(os.environ.get("LOCK_SCALE_OPS", 200 if QUICK else 2000))
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "bench", "results",
                                               "lock-scale-quick.md" if QUICK else "lock-scale.md"))
SERVER_CPU, CLIENT_CPU = 0, 1
WAITERS = [500, 2000] if QUICK else [500, 2000, 4000, 8000]
HOLDERS = [1000, 10000] if QUICK else [1000, 10000, 40000]
LEASE_MS = 600000
PIPELINE = 100


def log(msg):
    print("lock_scale.py: " + msg, file=sys.stderr, flush=True)


def die(msg):
    log("ERROR: " + msg)
    sys.exit(1)


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(a), a))
    return b"".join(out)


def thread_cpu_us(cpu):
    return (cpu["used_cpu_sys_main_thread"] + cpu["used_cpu_user_main_thread"]) * 1e6


def main_thread_cpu_us(c):
    return thread_cpu_us(c.info("cpu"))


def usec_per_call(c, name):
    stats = {k.lower(): v for k, v in c.info("commandstats").items()}.get("cmdstat_" + name)
    if not stats:
        die("no commandstats for " + name)
    if stats.get("failed_calls", 0) or stats.get("rejected_calls", 0):
        die("%s failed: %r" % (name, stats))
    return stats["usec_per_call"], stats["calls"]


def read_grant(sock):
    """The 4-integer reply of FG.LOCK, read to its end."""
    buf = b""
    while buf.count(b"\r\n") < 5:
        chunk = sock.recv(256)
        if not chunk:
            die("a waiter's connection closed")
        buf += chunk
    lines = buf.split(b"\r\n")
    if lines[0] != b"*4":
        die("unexpected reply %r" % buf)
    return [int(x[1:]) for x in lines[1:5]]


def handoff_round(srv, n):
    c = srv.client
    c.flushall()
    if c.execute_command("FG.LOCK", "hk", "w", LEASE_MS)[0] != 1:
        die("the writer was not granted")
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(resp("FG.LOCK", "hk", "r%d" % i, LEASE_MS, "SHARED", "WAIT", 0))
        socks.append(s)
    deadline = time.monotonic() + 60
    while c.info("floodgate").get("floodgate_lock_waiters", 0) < n:
        if time.monotonic() > deadline:
            die("the waiters did not all queue")
        time.sleep(0.05)
    c.config_resetstat()
    p = c.pipeline(transaction=False)
    p.info("cpu")
    p.execute_command("FG.UNLOCK", "hk", "w")
    p.info("cpu")
    before, released, after = p.execute()
    if released != 0:
        die("the writer did not release")
    cpu0 = thread_cpu_us(before)
    unlock_cpu = thread_cpu_us(after) - cpu0
    tokens = set()
    for s in socks:
        acquired, token, _, _ = read_grant(s)
        if acquired != 1:
            die("a waiter was not granted")
        tokens.add(token)
    cpu = main_thread_cpu_us(c) - cpu0
    for s in socks:
        s.close()
    if len(tokens) != n:
        die("tokens repeat")
    unlock_us, calls = usec_per_call(c, "fg.unlock")
    if calls != 1:
        die("FG.UNLOCK called %d times" % calls)
    return unlock_us, unlock_cpu, cpu


def pipelined(c, commands, check):
    for start in range(0, len(commands), PIPELINE):
        p = c.pipeline(transaction=False)
        for args in commands[start:start + PIPELINE]:
            p.execute_command(*args)
        for reply in p.execute():
            check(reply)


def semaphore_round(srv, h):
    c = srv.client
    c.flushall()
    cap = 1000000
    pipelined(c, [("FG.ACQUIRE", "sem", cap, "o%d" % i, 1, LEASE_MS) for i in range(h)],
              lambda r: r[0] == 1 or die("a holder was not granted"))
    pairs = []
    for i in range(OPS):
        pairs.append(("FG.ACQUIRE", "sem", cap, "n%d" % i, 1, LEASE_MS))
        pairs.append(("FG.RELEASE", "sem", "n%d" % i))
    c.config_resetstat()
    pipelined(c, pairs, lambda r: r == 0 or r[0] == 1 or die("a pair failed: %r" % (r,)))
    acquire_us, _ = usec_per_call(c, "fg.acquire")
    release_us, _ = usec_per_call(c, "fg.release")
    # Full (capacity h): every acquire is refused with the time permits come back.
    c.config_resetstat()
    pipelined(c, [("FG.ACQUIRE", "sem", h, "x%d" % i, 1, LEASE_MS) for i in range(OPS)],
              lambda r: r[0] == 0 or die("a full semaphore granted"))
    refused_us, _ = usec_per_call(c, "fg.acquire")
    if c.execute_command("FG.LOCKINFO", "sem")[5] != h:
        die("the holders changed")
    return acquire_us, release_us, refused_us


def median(xs):
    return statistics.median(xs)


def main():
    if not os.path.exists(MODULE):
        die("module not found: %s (run 'make module' first)" % MODULE)
    os.sched_setaffinity(0, {CLIENT_CPU})
    try:
        srv = BenchServer(REDIS_SERVER, MODULE, SERVER_CPU, "floodgate-lockscale.",
                          ["--maxclients", max(WAITERS) + 1000])
    except RuntimeError as e:
        die(str(e))
    try:
        version = srv.client.info("server")["redis_version"]
        handoff = {}
        for n in WAITERS:
            runs = [handoff_round(srv, n) for _ in range(ROUNDS)]
            handoff[n] = tuple(median([r[k] for r in runs]) for k in range(3))
            log("hand-off to %d readers: FG.UNLOCK %.0f us, %.0f us of CPU"
                % (n, handoff[n][0], handoff[n][1]))
        semaphore = {}
        for h in HOLDERS:
            runs = [semaphore_round(srv, h) for _ in range(ROUNDS)]
            semaphore[h] = tuple(median([r[k] for r in runs]) for k in range(3))
            log("semaphore of %d holders: FG.ACQUIRE %.2f us" % (h, semaphore[h][0]))
    finally:
        srv.stop()

    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "no commit"
    lines = ["# floodgate locks at scale", "",
             "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
             "- mode: %s" % ("QUICK (smoke test, not for comparison)" if QUICK else "full"),
             "- redis-server %s on CPU %d, client on CPU %d; module %s (git %s)"
             % (version, SERVER_CPU, CLIENT_CPU, MODULE, rev),
             "- load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]),
             "- rounds: %d (medians); semaphore commands per case: %d" % (ROUNDS, OPS), "",
             "## Hand-off: one FG.UNLOCK grants N queued SHARED waiters", "",
             "| N waiters | FG.UNLOCK usec (commandstats) | x N=%d | FG.UNLOCK CPU us | x N=%d "
             "| CPU us with the N replies | x N=%d |" % ((WAITERS[1],) * 3),
             "|---:|---:|---:|---:|---:|---:|---:|"]
    base = handoff[WAITERS[1]]
    for n in WAITERS:
        h = handoff[n]
        lines.append("| %d | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f |"
                     % (n, h[0], h[0] / base[0], h[1], h[1] / base[1], h[2], h[2] / base[2]))
    lines += ["", "## Semaphore with h holders (usec_per_call)", "",
              "| h holders | FG.ACQUIRE granted | FG.RELEASE | FG.ACQUIRE refused (full) |",
              "|---:|---:|---:|---:|"]
    for h in HOLDERS:
        a, r, f = semaphore[h]
        lines.append("| %d | %.2f | %.2f | %.2f |" % (h, a, r, f))
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(text)
    log("written: " + OUT)


if __name__ == "__main__":
    main()
