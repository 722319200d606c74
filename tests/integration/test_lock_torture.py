"""The lock torture test: processes and threads take FG.LOCK around a
read-modify-write of counters kept in Redis under fencing tokens, while a
nemesis pauses workers past their lease, kills workers holding locks, and
kill -9s the server (appendonly, appendfsync always) and restarts it.

The workers are tests/client/lock_torture.c (hiredis only), WORKERS processes
of THREADS threads, each logging every step (the format is in that file);
now and then a thread stalls past its lease between its read and its write.
The nemesis takes one action at a time, so that no two overlap: SIGSTOP a
worker that holds a lock for 1.5 to 2.5 leases, then SIGCONT; SIGKILL a worker
that holds a lock and start a replacement; kill -9 the server and restart it
on its AOF. A sampler reads FG.LOCKINFO of every lock meanwhile, keeping the
queues of waiters it sees. After the run (and one more kill -9 and restart)
the test reads the counters and judges, from the logs and the samples:

- lost updates: every write stores the value read plus one, so the accepted
  values of a counter must be distinct and, with writes whose reply was lost
  filling gaps and nothing else, make exactly 1 .. the final value. A value
  read can never be above the final value either.
- stale writes accepted: along the values, tokens never decrease; and a read
  with token T that saw u was recorded before u + 1 was written, so every
  write of a value above u carries a token >= T.
- tokens: one per grant, and every token of a restarted server is above every
  token of the servers before it (each grant is logged with the run_id of
  the server that made it).
- FIFO: for a waiter A of a sample that was granted later with token tA,
  every grant of that lock with a token from the sample's next_token (the
  next token the server gives: every later grant has at least that one) up
  to tA went to a waiter ahead of A in the sample: nobody overtook it (so of
  two waiters of a sample, the first gets the smaller token).

No check needs a clock: the values order the writes of a counter and the
tokens order the grants. The FIFO check sees only the queues the sampler
caught, which is plenty (tens of thousands of pairs a minute); the faults are
random, so a short run may miss a rare interleaving a long one finds.

It runs twice: on the module, and on a stock server where lock.lua holds
the locks and the workers take them through libfloodgate, which waits for
the script's hand-off (lock_torture.c's script mode): the same verdict for
both. Short in make test (FLOODGATE_TORTURE_SECONDS, default 12); `make
torture` runs it long. The counts go to stdout and to
build/torture-report[-script].txt.
"""

import bisect
import collections
import os
import random
import signal
import subprocess
import threading
import time

import pytest
import redis

import backends
from harness import REPO, Server, s, wait_for

SECONDS = float(os.environ.get("FLOODGATE_TORTURE_SECONDS", "12"))
LONG_RUN = SECONDS >= 60
WORKERS, THREADS, COUNTERS, LEASE_MS = 4, 3, 3, 250
PROGRAM = os.path.join(REPO, "build", "client", "lock_torture")
REPORT = os.path.join(REPO, "build", "torture-report%s.txt")
LOCK_SCRIPT = os.path.join(REPO, "build", "gen", "scripts", "lock.lua")


def lockinfo(client, counter):
    """FG.LOCKINFO lock:counter as a dict, None when nobody holds or waits."""
    raw = s(client.execute_command("FG.LOCKINFO", "lock:%d" % counter))
    return None if raw is None else dict(zip(raw[0::2], raw[1::2]))


def worker_of(owner):
    """The worker id in an owner "wID:THREAD:SEQ"."""
    return int(owner.split(":")[0][1:])


# ----------------------------------------------------------------- the run

class Torture:
    """One run: the server, the workers, the nemesis and the sampler."""

    def __init__(self, logdir, script):
        self.script = script  # no module: lock.lua and the library's waiting
        self.server = Server(["--appendonly", "yes", "--appendfsync", "always"],
                             module=not script)
        self.logdir = logdir
        self.workers = {}       # id -> Popen
        self.killed = set()     # ids of the workers the nemesis killed
        self.run_ids = []       # of every start of the server, in order
        self.snapshots = []     # (counter, next_token, waiter owners in order)
        self.actions = collections.Counter()
        self.failures = []      # exceptions of the threads
        self.sampling = threading.Event()
        self.deadline = 0.0

    def logs(self):
        return [os.path.join(self.logdir, "worker-%d.log" % i) for i in self.workers]

    def start_server(self):
        self.server.start(timeout=60)
        self.run_ids.append(s(self.server.client().info("server")["run_id"]))

    def client(self, **kw):
        """The test's own client: its FG.LOCKINFO and FG.FGET are lock.lua's
        without the module."""
        return backends.script_client(self.server, **kw)

    def start_worker(self, seconds):
        wid = len(self.workers)
        with open(os.path.join(self.logdir, "worker-%d.err" % wid), "w") as err:
            self.workers[wid] = subprocess.Popen(
                [PROGRAM, str(self.server.port), str(wid), str(THREADS), "%.3f" % seconds,
                 str(LEASE_MS), str(COUNTERS), os.path.join(self.logdir, "worker-%d.log" % wid)]
                + ([LOCK_SCRIPT, backends.lock_script_sha()] if self.script else []),
                stdout=subprocess.DEVNULL, stderr=err)

    def stop_workers(self):
        for p in self.workers.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def guarded(self, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.failures.append("%s: %r" % (fn.__name__, e))

    # -- the nemesis ----------------------------------------------------------

    def victim(self, rng, client):
        """A live worker, one holding a lock when there is one; None when none
        is left."""
        live = [i for i, p in self.workers.items() if i not in self.killed and p.poll() is None]
        holding = set()
        try:
            for c in range(COUNTERS):
                info = lockinfo(client, c)
                holding.update(worker_of(h[0]) for h in (info or {}).get("holders", []))
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # the first command after a restart, on the old connection
        return rng.choice([i for i in live if i in holding] or live) if live else None

    def pause(self, rng, client):
        wid = self.victim(rng, client)
        if wid is None:
            return
        p = self.workers[wid]
        p.send_signal(signal.SIGSTOP)
        time.sleep(rng.uniform(1.5, 2.5) * LEASE_MS / 1000)
        p.send_signal(signal.SIGCONT)
        self.actions["pauses"] += 1

    def kill_client(self, rng, client):
        wid = self.victim(rng, client)
        if wid is None:
            return
        self.workers[wid].kill()
        self.workers[wid].wait()
        self.killed.add(wid)
        self.actions["client_kills"] += 1
        self.start_worker(max(1.0, self.deadline - time.monotonic()))

    def kill_server(self, rng=None, client=None):
        self.server.kill9()
        self.actions["server_kills"] += 1
        time.sleep(0.2)
        self.start_server()

    def nemesis(self):
        rng = random.Random()
        client = self.client(socket_timeout=10)
        steps = [self.pause, self.kill_client, self.pause, self.pause, self.kill_server, self.pause]
        i = 0
        while time.monotonic() < self.deadline - 2:
            time.sleep(rng.uniform(0.2, 0.5))
            steps[i % len(steps)](rng, client)
            i += 1

    # -- the sampler ----------------------------------------------------------

    def sample(self):
        client = self.client(socket_timeout=10)
        while self.sampling.is_set():
            for c in range(COUNTERS):
                try:
                    info = lockinfo(client, c)
                except (redis.ConnectionError, redis.TimeoutError):  # a restart
                    time.sleep(0.05)
                    continue
                if info and info["waiters"]:
                    self.snapshots.append(
                        (c, int(info["next_token"]), [w[0] for w in info["waiters"]]))
            time.sleep(0.005)

    # -- the whole run --------------------------------------------------------

    def run(self):
        """Runs the workers under the nemesis; answers the final value of
        every counter, read after one more kill -9 and restart."""
        self.start_server()
        self.deadline = time.monotonic() + SECONDS
        for _ in range(WORKERS):
            self.start_worker(SECONDS)
        self.sampling.set()
        threads = [threading.Thread(target=self.guarded, args=(fn,))
                   for fn in (self.nemesis, self.sample)]
        for t in threads:
            t.start()
        threads[0].join()
        for wid, p in list(self.workers.items()):
            try:
                rc = p.wait(timeout=max(1, self.deadline - time.monotonic()) + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "stuck"
            if wid not in self.killed and rc != 0:
                self.failures.append("worker %d ended with %s" % (wid, rc))
        self.sampling.clear()
        threads[1].join()
        self.kill_server()
        c = self.client()
        finals = {}
        for k in range(COUNTERS):
            ok, _, value = c.execute_command("FG.FGET", "ctr:%d" % k)
            assert ok == 1
            finals[k] = int(value or 0)
        # Abandoned holds (killed workers) end with their lease, restart or not.
        wait_for(lambda: all(lockinfo(c, k) is None for k in range(COUNTERS)), timeout=30)
        return finals


# ------------------------------------------------------------- the verdict

class Logs:
    """The logs of all the workers, parsed (lock_torture.c has the format)."""

    def __init__(self, paths):
        self.grants = []         # (counter, owner, token, run_id)
        self.reads = []          # (counter, token, ok, highest, value)
        self.accepted = []       # (counter, value, token)
        self.unknown = []        # (counter, value, token): reply lost or process killed
        self.refused_writes = 0
        self.timeouts = 0
        self.stalls = 0          # holders that slept past their lease on their own
        self.lease_lost = 0      # FG.UNLOCK answered -1
        self.errors = []
        for path in paths:
            self.parse(path)
        self.token_of = {owner: token for _, owner, token, _ in self.grants}

    def parse(self, path):
        with open(path) as f:
            text = f.read()
        # A last line without its newline was cut by a SIGKILL: it is dropped,
        # which is safe (a W line is written before its FG.FSET is sent).
        lines = text.split("\n")
        sent = {}  # owner -> (counter, value, token) of a W line not yet answered
        for line in lines[:-1]:
            try:
                self.parse_line(line.split(" "), sent)
            except (ValueError, IndexError, KeyError):
                self.errors.append("%s: bad line %r" % (path, line))
        self.unknown.extend(sent.values())

    def parse_line(self, f, sent):
        kind = f[0]
        if kind == "E":
            self.errors.append(" ".join(f))
            return
        c, owner = int(f[1]), f[2]
        if kind == "G":
            self.grants.append((c, owner, int(f[3]), f[4]))
        elif kind == "T":
            self.timeouts += 1
        elif kind == "S":
            self.stalls += 1
        elif kind == "R":
            token, ok, highest, value = map(int, f[3:7])
            if (ok == 1 and highest > token) or (ok == 0 and highest <= token):
                self.errors.append("FG.FGET answered %r" % " ".join(f))
            self.reads.append((c, token, ok, highest, value))
        elif kind == "W":
            sent[owner] = (c, int(f[4]), int(f[3]))
        elif kind == "A":
            del sent[owner]
            if f[5] == "1":
                self.accepted.append((c, int(f[4]), int(f[3])))
            else:
                self.refused_writes += 1
        elif kind == "U":
            self.unknown.append(sent.pop(owner))
        elif kind == "L":
            self.lease_lost += f[3] == "-1"
        else:
            raise ValueError(kind)


def check_counter(c, final, logs, out):
    """Lost updates and stale writes of one counter (see the top comment)."""
    accepted = [(v, t) for k, v, t in logs.accepted if k == c]
    seen = collections.Counter(v for v, _ in accepted)
    out["lost_updates"] += sum(n - 1 for n in seen.values())
    out["lost_updates"] += sum(1 for v in seen if v > final)
    out["lost_updates"] += sum(1 for k, _, ok, _, v in logs.reads if k == c and ok and v > final)
    chain = {v: t for v, t in accepted if seen[v] == 1 and v <= final}
    unknown = collections.defaultdict(list)
    for k, v, t in logs.unknown:
        if k == c:
            unknown[v].append(t)
    for v in range(1, final + 1):
        if v in seen:
            continue
        if not unknown[v]:
            out["unexplained_values"] += 1  # a value nobody wrote
            continue
        out["unknown_landed"] += 1
        if len(unknown[v]) == 1:
            chain[v] = unknown[v][0]
    # A read of u with token T came before the write of u + 1.
    floor = collections.defaultdict(int)
    for k, token, ok, _, u in logs.reads:
        if k == c and ok:
            floor[u + 1] = max(floor[u + 1], token)
    highest = 0
    for v in range(1, final + 1):
        highest = max(highest, floor[v])
        if v in chain:
            out["stale_accepted"] += chain[v] < highest
            highest = max(highest, chain[v])


def check_tokens(logs, run_ids, out):
    """Unique tokens; each restart's tokens above all earlier ones."""
    tokens = collections.Counter(t for _, _, t, _ in logs.grants)
    out["duplicate_tokens"] = sum(n - 1 for n in tokens.values())
    epoch = {run_id: i for i, run_id in enumerate(run_ids)}
    by_epoch = collections.defaultdict(list)
    for _, owner, token, run_id in logs.grants:
        if run_id == "?":  # the server restarted around the library's grant
            out["unattributed_grants"] += 1
            continue
        if run_id not in epoch:
            logs.errors.append("%s granted by an unknown server %s" % (owner, run_id))
            continue
        by_epoch[epoch[run_id]].append(token)
    highest = 0
    for i in sorted(by_epoch):
        out["token_regressions"] += sum(1 for t in by_epoch[i] if t <= highest)
        highest = max(highest, max(by_epoch[i]))
    out["server_epochs"] = len(by_epoch)


def check_fifo(logs, snapshots, out):
    grants = collections.defaultdict(list)  # counter -> sorted [(token, owner)]
    for c, owner, token, _ in logs.grants:
        grants[c].append((token, owner))
    for g in grants.values():
        g.sort()
    for c, next_token, waiters in snapshots:
        order = [(o, logs.token_of[o]) for o in waiters if o in logs.token_of]
        for i, (_, ta) in enumerate(order):
            for _, tb in order[i + 1:]:
                out["fifo_pairs"] += 1
                out["fifo_violations"] += ta > tb
        for i, owner in enumerate(waiters):
            if owner not in logs.token_of:
                continue
            ahead = set(waiters[:i])
            g = grants[c]
            lo = bisect.bisect_left(g, (next_token, ""))
            hi = bisect.bisect_left(g, (logs.token_of[owner], ""))
            out["fifo_overtakes"] += sum(1 for _, o in g[lo:hi] if o not in ahead)
    out["fifo_samples"] = len(snapshots)


@pytest.mark.parametrize("mode", ["module", "script"])
def test_lock_torture(tmp_path, mode):
    if not os.path.exists(PROGRAM):  # make integration builds it; a lone pytest may not
        subprocess.run(["make", "-C", REPO, "build/client/lock_torture"], check=True,
                       stdout=subprocess.DEVNULL)
    torture = Torture(str(tmp_path), mode == "script")
    try:
        finals = torture.run()
    finally:
        torture.stop_workers()
        torture.server.cleanup()
    logs = Logs(torture.logs())
    out = collections.Counter()
    for c, final in finals.items():
        check_counter(c, final, logs, out)
    check_tokens(logs, torture.run_ids, out)
    check_fifo(logs, torture.snapshots, out)
    stale_reads = sum(1 for r in logs.reads if r[2] == 0)
    report = (
        "lock torture (%s): %.0f s, %d workers x %d threads, %d counters, lease %d ms: "
        "grants=%d accepted_writes=%d final_sum=%d stale_refused=%d (reads %d, writes %d) "
        "unknown_writes=%d (landed %d) lost_updates=%d stale_accepted=%d unexplained_values=%d "
        "duplicate_tokens=%d token_regressions=%d server_epochs=%d "
        "fifo_samples=%d fifo_pairs=%d fifo_violations=%d fifo_overtakes=%d "
        "wait_timeouts=%d leases_lost=%d stalls=%d pauses=%d client_kills=%d server_kills=%d "
        "unattributed_grants=%d errors=%d"
        % (mode, SECONDS, WORKERS, THREADS, COUNTERS, LEASE_MS,
           len(logs.grants), len(logs.accepted), sum(finals.values()),
           stale_reads + logs.refused_writes, stale_reads, logs.refused_writes,
           len(logs.unknown), out["unknown_landed"], out["lost_updates"], out["stale_accepted"],
           out["unexplained_values"], out["duplicate_tokens"], out["token_regressions"],
           out["server_epochs"], out["fifo_samples"], out["fifo_pairs"], out["fifo_violations"],
           out["fifo_overtakes"], logs.timeouts, logs.lease_lost, logs.stalls,
           torture.actions["pauses"],
           torture.actions["client_kills"], torture.actions["server_kills"],
           out["unattributed_grants"], len(logs.errors) + len(torture.failures)))
    print("\n" + report)
    with open(REPORT % ("-script" if mode == "script" else ""), "w") as f:
        f.write(report + "\n")
    detail = "%s\nlogs in %s\n%s" % (report, tmp_path,
                                     "\n".join((torture.failures + logs.errors)[:20]))
    assert not torture.failures and not logs.errors, detail
    assert out["lost_updates"] == 0 and out["unexplained_values"] == 0, detail
    assert out["stale_accepted"] == 0, detail
    assert out["duplicate_tokens"] == 0 and out["token_regressions"] == 0, detail
    assert out["fifo_violations"] == 0 and out["fifo_overtakes"] == 0, detail
    # The run did what it is for: work done, and every kind of fault met.
    assert len(logs.accepted) > 0 and out["server_epochs"] >= 2, detail
    assert min(torture.actions[a] for a in ("pauses", "client_kills", "server_kills")) >= 1, detail
    if LONG_RUN:
        assert stale_reads + logs.refused_writes > 0 and out["fifo_pairs"] > 0, detail
