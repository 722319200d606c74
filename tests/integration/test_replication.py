"""Replication and AOF determinism: a master and a replica on loopback under
tens of thousands of random calls over every command end with the same
dataset, and the master's AOF replayed later (at another wall-clock time)
rebuilds exactly the master's dataset."""

import os
import random
import shutil
import threading
import time

import pytest
import redis

from harness import T0, Server, wait_for, wait_replica_synced
from topology import (assert_no_crash, aof_files, digest, inspect,
                      read_aof_commands, replicated_pair, s)

# make soak multiplies the random calls.
CALLS = 30000 * int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))
THREADS = 3
BATCH = 250
POOL = 30  # keys per pool; keys [6f, 6f+6) prefer family f, 24..29 are shared

FAMILIES = ("bucket", "fixed", "sliding", "slidelog")
CHECK_NAMES = {b"FG.TOKEN", b"FG.LEAKY", b"FG.GCRA", b"CL.THROTTLE", b"FG.FIXED",
               b"FG.SLIDING", b"FG.SLIDELOG", b"FG.PEEK"}


def pick_key(rnd, pool, family):
    if rnd.random() < 0.25:
        i = rnd.randrange(POOL)
    else:
        i = 6 * FAMILIES.index(family) + rnd.randrange(6)
    return "%s:%d" % (pool, i)


def cost_args(rnd, limit, cl=False):
    c = rnd.choice([None, 0, 1, 1, 1, 2, 3, limit, limit + 1])
    if c is None:
        return [], 1
    return ([c] if cl else ["COST", c]), c


def fixed_windows_long(now_ms):
    return [w for w in (10 ** 12, 10 ** 11, 7 * 86400000)
            if w - now_ms % w > 900000]


def gen_call(rnd, now_ms, cell_strings=True):
    """One random call: (args, expectation) where expectation is
    ("fg", limit) / ("cl", limit) / ("reset",) / ("plain",)."""
    pool = rnd.choice("ab")  # a: short windows (roll over, expire); b: >= 30 s
    short = pool == "a"
    op = rnd.random()
    if op < 0.04:
        k = "%s:%d" % (pool, rnd.randrange(POOL))
        return ["FG.RESET", k], ("reset",)
    if op < 0.06:
        k = "%s:%d" % (pool, rnd.randrange(POOL))
        if cell_strings and rnd.random() < 0.5:
            # a redis-cell state (decimal ns TAT), which CL.THROTTLE converts
            # (pool b: far enough ahead that the converted state outlives the test)
            v = str(int(now_ms * 1e6) + (rnd.randrange(0, 2 * 10 ** 9) if short
                                         else rnd.randrange(40 * 10 ** 9, 10 ** 11)))
        else:
            v = "not-a-state"
        args = ["SET", k, v, "PX", rnd.randint(100, 800)] if short else ["SET", k, v]
        return args, ("plain",)
    if op < 0.07:
        return ["DEL", "%s:%d" % (pool, rnd.randrange(POOL))], ("plain",)
    peek = op < 0.17
    kind = rnd.choice(["TOKEN", "LEAKY", "GCRA", "CL", "FIXED", "SLIDING", "SLIDELOG"])
    if peek and kind == "CL":
        kind = "GCRA"
    fam = {"TOKEN": "bucket", "LEAKY": "bucket", "GCRA": "bucket", "CL": "bucket",
           "FIXED": "fixed", "SLIDING": "sliding", "SLIDELOG": "slidelog"}[kind]
    k = pick_key(rnd, pool, fam)
    if kind in ("TOKEN", "LEAKY"):
        cap = rnd.randint(1, 10) if short else rnd.randint(1, 20)
        rate = rnd.choice(["5", "10", "20.5", "100", "1000"]) if short else rnd.choice(["0.01", "0.02", "0.025"])
        params = [cap, rate]
        limit = cap
    elif kind == "GCRA":
        cap = rnd.randint(1, 10) if short else rnd.randint(1, 20)
        if short:
            params = [cap, rnd.choice([1, 2, 5, "2.5"]), rnd.choice([10, 50, "99.5", 200])]
        else:
            params = [cap, 1, rnd.choice([40000, 60000, "75000.5", 100000])]
        limit = cap
    elif kind == "CL":
        burst = rnd.randint(0, 9)
        if short:
            params = [burst, rnd.randint(5, 20), 1]
        else:
            params = [burst, 1, rnd.randint(40, 100)]
        ca, c = cost_args(rnd, burst + 1, cl=True)
        return ["CL.THROTTLE", k] + params + ca, ("cl", burst + 1)
    elif kind == "FIXED":
        limit = rnd.randint(1, 10)
        if short:
            w = rnd.choice([5, 20, "33.3", 100, 500, 1000])
        else:
            w = rnd.choice(fixed_windows_long(now_ms))
        params = [limit, w]
    else:  # SLIDING, SLIDELOG
        limit = rnd.randint(1, 20)
        w = rnd.choice([5, 20, "33.3", 100, 500, 1000]) if short else rnd.choice([60000, "90000.5", 300000])
        params = [limit, w]
    ca, c = cost_args(rnd, limit)
    if peek:
        return ["FG.PEEK", kind, k] + params + ca, ("fg", limit)
    return ["FG." + kind, k] + params + ca, ("fg", limit)


def check_reply(args, exp, r, problems):
    def bad(why):
        if len(problems) < 30:
            problems.append("%r -> %r: %s" % (args, r, why))

    if isinstance(r, Exception):
        if isinstance(r, redis.ResponseError) and str(r).startswith("WRONGTYPE"):
            return
        return bad("unexpected error")
    if exp[0] == "reset":
        if r not in (0, 1):
            bad("FG.RESET must answer 0 or 1")
        return
    if exp[0] == "plain":
        return
    if not (isinstance(r, list) and len(r) == 5 and all(isinstance(x, int) for x in r)):
        return bad("not five integers")
    flag, limit, remaining, retry, reset = r
    ok = (flag == 1) if exp[0] == "fg" else (flag == 0)
    if flag not in (0, 1):
        bad("first field must be 0 or 1")
    if limit != exp[1]:
        bad("limit should be %d" % exp[1])
    if not 0 <= remaining <= limit:
        bad("remaining out of [0, limit]")
    if ok and retry != -1:
        bad("retry_after must be -1 when allowed")
    if not ok and not (retry >= 0 or retry == -1):
        bad("retry_after must be >= 0 or -1 when denied")
    if reset < 0:
        bad("reset_after must be >= 0")


def wrap(rnd, args, exp):
    """Some calls go through a Lua script (EVAL), which propagates the
    module's effects inside the script's transaction."""
    if rnd.random() < 0.05:
        key = args[2] if args[0] == "FG.PEEK" else args[1]
        return ["EVAL", "return redis.pcall(unpack(ARGV))", 1, key] + args, exp
    return args, exp


def run_traffic(port, calls, seed, problems, crashes, done_calls, transactional=False,
                cell_strings=True):
    rnd = random.Random(seed)
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    done = 0
    try:
        while done < calls:
            n = min(BATCH, calls - done)
            now_ms = int(time.time() * 1000)
            batch = [wrap(rnd, *gen_call(rnd, now_ms, cell_strings)) for _ in range(n)]
            # one client sends its batches as MULTI/EXEC transactions
            p = c.pipeline(transaction=transactional)
            for args, _ in batch:
                p.execute_command(*args)
            res = p.execute(raise_on_error=False)
            for (args, exp), r in zip(batch, res):
                check_reply(args, exp, r, problems)
            done += n
            done_calls.append(n)
            time.sleep(0.05)  # spread the traffic over a few seconds: windows roll, keys expire
    except (redis.ConnectionError, redis.TimeoutError) as e:
        crashes.append("traffic client %d: %r" % (seed, e))
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        crashes.append("traffic client %d failed: %r" % (seed, e))
        raise
    finally:
        c.close()


def all_pool_keys():
    return ["%s:%d" % (p, i) for p in "ab" for i in range(POOL)]


def long_keys():
    return ["b:%d" % i for i in range(POOL)]


def per_key(c, keys):
    p = c.pipeline(transaction=False)
    for k in keys:
        p.execute_command("DEBUG", "DIGEST-VALUE", k)
    return {k: s(v[0]) for k, v in zip(keys, p.execute())}


def inspect_all(c, keys):
    out = {}
    for k in keys:
        try:
            out[k] = ("state", inspect(c, k))
        except redis.ResponseError as e:
            out[k] = ("error", str(e))
    return out


def assert_same_keys(m, r, keys, what):
    dm, dr = per_key(m, keys), per_key(r, keys)
    diff = ["%s: %s vs %s" % (k, dm[k], dr[k]) for k in keys if dm[k] != dr[k]]
    assert not diff, "%s: DEBUG DIGEST-VALUE differs for %d keys:\n  %s" % (
        what, len(diff), "\n  ".join(diff[:20]))


@pytest.fixture
def pair():
    yield from replicated_pair(["--appendonly", "yes", "--repl-ping-replica-period", "3600",
                     "--repl-diskless-sync-delay", "0"])


@pytest.mark.parametrize("cell_strings", [True, False], ids=["with-redis-cell-strings", "fg-only"])
def test_random_traffic_replicates_and_aof_replays_later(pair, tmp_path, cell_strings):
    """cell_strings: some keys are set to redis-cell states (decimal strings)
    that CL.THROTTLE converts; the fg-only run leaves those out, so a problem
    with the conversion does not hide everything else."""
    master, replica, m, r = pair
    # ---- 1. tens of thousands of random calls, pipelined from a few clients
    problems, crashes, done_calls = [], [], []
    threads = [threading.Thread(target=run_traffic,
                                args=(master.port, CALLS // THREADS, 7 + i, problems, crashes,
                                      done_calls, i == 0, cell_strings))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not crashes, crashes
    assert sum(done_calls) == CALLS - CALLS % THREADS
    assert not problems, "bad replies:\n  " + "\n  ".join(problems)
    assert_no_crash(master)
    assert_no_crash(replica)
    keys = all_pool_keys()

    # ---- 2. no key may vanish between the reads: stop active expiry on the
    # master (the replica never expires keys itself), then compare everything,
    # short-lived keys included
    m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 0)
    try:
        wait_replica_synced(m, r, timeout=30)
        assert digest(m) == digest(r), "master and replica digests differ after the traffic"
        assert_same_keys(m, r, keys, "after the traffic")
        assert m.dbsize() == r.dbsize()
    finally:
        m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 1)

    # ---- 3. let the short-lived keys expire (EXISTS expires them lazily on the
    # master, which sends DEL to the replica): only the >= 30 s states remain
    short = ["a:%d" % i for i in range(POOL)]

    def short_gone():
        p = m.pipeline(transaction=False)
        for k in short:
            p.exists(k)
        return not any(p.execute())
    wait_for(short_gone, timeout=15, interval=0.1)
    wait_replica_synced(m, r, timeout=30)
    longk = long_keys()
    present = [k for k in longk if m.exists(k)]
    assert len(present) >= POOL // 2, "too few long-lived keys survived: %r" % present
    for k in present:
        pt = m.pttl(k)
        assert pt == -1 or pt > 15000, "%s: PTTL %d is too short for this test" % (k, pt)
    final_digest = digest(m)
    assert digest(r) == final_digest
    final_states = inspect_all(m, longk)
    assert inspect_all(r, longk) == final_states
    final_expire = {k: m.execute_command("PEXPIRETIME", k) for k in longk}
    assert {k: r.execute_command("PEXPIRETIME", k) for k in longk} == final_expire
    final_values = per_key(m, longk)

    # ---- 4. the AOF holds states with absolute times, never the checks
    names = set()
    for f in aof_files(master):
        if f.endswith(".aof"):
            cmds = read_aof_commands(f)
            if cmds:
                names |= {a[0].upper() for a in cmds}
    assert b"FG.SETSTATE" in names and b"FG.LOGAPPEND" in names, sorted(names)
    assert not names & CHECK_NAMES, "AOF holds rate-limit checks: %r" % sorted(names & CHECK_NAMES)

    # ---- 5. shut the master down; replay its AOF later, in a fresh server
    master.stop()
    copy_dir = str(tmp_path / "replay")
    os.makedirs(copy_dir)
    shutil.copytree(os.path.join(master.dir, "appendonlydir"), os.path.join(copy_dir, "appendonlydir"))
    time.sleep(1.5)  # the wall clock moves on before the replay
    replay = Server(["--appendonly", "yes"], dir=copy_dir)
    try:
        replay.start(timeout=30)
        c = replay.client()
        assert "DB loaded from append only file" in open(replay.logfile, errors="replace").read()
        assert digest(c) == final_digest, "AOF replayed later gives another dataset"
        assert per_key(c, longk) == final_values
        assert inspect_all(c, longk) == final_states
        assert {k: c.execute_command("PEXPIRETIME", k) for k in longk} == final_expire
        assert_no_crash(replay)
        c.close()
    finally:
        replay.cleanup()

    # ---- 6. restart both: the master loads its AOF, the replica resyncs
    master.start(timeout=30)
    m = master.client(socket_timeout=30)
    assert digest(m) == final_digest, "master after restart (AOF) differs"
    replica.restart(timeout=30)
    r = replica.client(socket_timeout=30)
    wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
    wait_replica_synced(m, r, timeout=30)
    assert digest(r) == final_digest
    assert inspect_all(r, longk) == final_states
    assert_no_crash(master)
    assert_no_crash(replica)


FAMILY_SETUP = [
    # (write command, peek command)
    (["FG.TOKEN", "{k}", 10, "0.01", "COST", 3], ["FG.PEEK", "TOKEN", "{k}", 10, "0.01"]),
    (["FG.LEAKY", "{k}", 10, "0.01", "COST", 3], ["FG.PEEK", "LEAKY", "{k}", 10, "0.01"]),
    (["FG.GCRA", "{k}", 10, 1, 100000, "COST", 3], ["FG.PEEK", "GCRA", "{k}", 10, 1, 100000]),
    (["CL.THROTTLE", "{k}", 9, 1, 100, 3], ["FG.PEEK", "GCRA", "{k}", 10, 1, 100000]),
    (["FG.FIXED", "{k}", 10, 10 ** 12, "COST", 3], ["FG.PEEK", "FIXED", "{k}", 10, 10 ** 12]),
    (["FG.SLIDING", "{k}", 10, 600000, "COST", 3], ["FG.PEEK", "SLIDING", "{k}", 10, 600000]),
    (["FG.SLIDELOG", "{k}", 10, 600000, "COST", 3], ["FG.PEEK", "SLIDELOG", "{k}", 10, 600000]),
]


def fmt(cmd, k):
    return [a.replace("{k}", k) if isinstance(a, str) else a for a in cmd]


def offset(c):
    return c.info("replication")["master_repl_offset"]


def test_replica_serves_peek_and_refuses_writes(pair):
    master, replica, m, r = pair
    for i, (write, peek) in enumerate(FAMILY_SETUP):
        k = "ro:%d" % i
        m.execute_command(*fmt(write, k))
    wait_replica_synced(m, r)
    for i, (write, peek) in enumerate(FAMILY_SETUP):
        k = "ro:%d" % i
        assert inspect(r, k) == inspect(m, k)
        # the replica answers the read-only peek like the master
        rp, mp = r.execute_command(*fmt(peek, k)), m.execute_command(*fmt(peek, k))
        assert rp[:3] == mp[:3], (peek, rp, mp)
        assert rp[2] == 6, rp  # 10 - 3 already taken - 1 for this request
        assert r.execute_command("FG.INSPECT", k) is not None
        # and refuses every write
        with pytest.raises(redis.ReadOnlyError):
            r.execute_command(*fmt(write, k))
    now_ms = int(time.time() * 1000)
    for cmd in (["FG.RESET", "ro:0"],
                ["FG.SETSTATE", "ro:x", "bucket", (now_ms + 60000) * 10 ** 6, "PXAT", now_ms + 60000],
                ["FG.LOGAPPEND", "ro:6", 0, now_ms * 1000, 1, "PXAT", now_ms + 60000],
                ["FG.TOKEN", "ro:new", 10, 1, "COST", 0]):
        with pytest.raises(redis.ReadOnlyError):
            r.execute_command(*cmd)
    # nothing changed on the replica
    for i in range(len(FAMILY_SETUP)):
        assert inspect(r, "ro:%d" % i) == inspect(m, "ro:%d" % i)
    assert r.exists("ro:x", "ro:new") == 0


def test_denied_peek_and_cost0_replicate_nothing(pair):
    master, replica, m, r = pair
    for i, (write, peek) in enumerate(FAMILY_SETUP):
        k = "np:%d" % i
        m.execute_command(*fmt(write, k))
    wait_replica_synced(m, r)
    for i, (write, peek) in enumerate(FAMILY_SETUP):
        k = "np:%d" % i
        state = inspect(m, k)
        base = offset(m)
        m.execute_command(*fmt(peek, k))
        if write[0] == "CL.THROTTLE":
            m.execute_command("CL.THROTTLE", k, 9, 1, 100, 0)      # quantity 0
            denied = m.execute_command("CL.THROTTLE", k, 9, 1, 100, 50)
            assert denied[0] == 1, denied
        else:
            m.execute_command(*(fmt(write, k)[:-2] + ["COST", 0]))
            denied = m.execute_command(*(fmt(write, k)[:-2] + ["COST", 11]))
            assert denied[0] == 0, denied
            denied = m.execute_command(*(fmt(write, k)[:-2] + ["COST", 8]))
            assert denied[0] == 0, denied
        m.execute_command("FG.RESET", k + ":absent")
        assert offset(m) == base, "%s: peek/COST 0/denial/absent reset replicated something" % write[0]
        assert inspect(m, k) == state
        # an admitted request does replicate, as a state
        if write[0] == "CL.THROTTLE":
            m.execute_command("CL.THROTTLE", k, 9, 1, 100, 1)
        else:
            m.execute_command(*(fmt(write, k)[:-2] + ["COST", 1]))
        assert offset(m) > base
        wait_replica_synced(m, r)
        assert inspect(r, k) == inspect(m, k) != state
    assert_no_crash(master)


def test_redis_cell_string_conversion_replicates(pair, tmp_path):
    """CL.THROTTLE converts a string left by redis-cell (a decimal ns TAT) into
    a bucket state; the replica and the AOF must end with that state too."""
    master, replica, m, r = pair
    now_ns = time.time_ns()
    m.set("cell", str(now_ns + 60 * 10 ** 9))
    m.set("cell:denied", str(now_ns + 600 * 10 ** 9))
    reply = m.execute_command("CL.THROTTLE", "cell", 99, 1, 60)
    assert reply[0] == 0, reply
    assert m.type("cell") != b"string"
    assert m.execute_command("CL.THROTTLE", "cell:denied", 9, 1, 60)[0] == 1
    state = inspect(m, "cell")
    wait_replica_synced(m, r)
    assert r.type("cell") == m.type("cell"), (
        "replica still holds %r after the master converted the redis-cell string to %r"
        % (r.type("cell"), state))
    assert inspect(r, "cell") == state
    assert digest(m) == digest(r)
    d = digest(m)
    master.stop()
    copy_dir = str(tmp_path / "replay")
    os.makedirs(copy_dir)
    shutil.copytree(os.path.join(master.dir, "appendonlydir"), os.path.join(copy_dir, "appendonlydir"))
    with Server(["--appendonly", "yes"], dir=copy_dir) as replay:
        c = replay.client()
        assert c.type("cell") == b"fg-bucket" and inspect(c, "cell") == state, (
            "AOF replay: %r %r" % (c.type("cell"), c.get("cell") if c.type("cell") == b"string" else ""))
        assert digest(c) == d


def test_sliding_counts_near_the_64_bit_edge_replicate_and_reload(pair):
    """Regression: two ordinary FG.SLIDING calls with a limit near 2^63 left a
    state (count + prev_count > 2^63) that the state validator refused, so the
    replica dropped the key, DEBUG RELOAD emptied the dataset and the RDB could
    not be loaded again."""
    master, replica, m, r = pair
    huge = 2 ** 63 - 1
    window_ms = 60000
    # decided at chosen times (the replica only applies the states): T0 is
    # 20 s into a window, the second call 20 s into the next, and the state
    # lives 100 s
    m.config_set("floodgate.explicit-time", "yes")
    m.execute_command("FG.SLIDING", "s", huge, window_ms, "COST", huge, "AT", T0)
    reply = m.execute_command("FG.SLIDING", "s", huge, window_ms, "AT", T0 + window_ms * 1000)
    assert reply[0] == 1, reply
    state = inspect(m, "s")
    fields = {s(k): int(v) for k, v in zip(state[2::2], state[3::2])}
    assert fields["prev_count"] == huge and fields["count"] == 1, state
    wait_replica_synced(m, r)
    assert inspect(r, "s") == state
    assert m.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
    assert inspect(m, "s") == state
    assert_no_crash(master)
    assert_no_crash(replica)
