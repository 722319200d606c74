"""Locks under replication and AOF (docs/locks.md, "Replication and
persistence"): the master decides and replicates effects (FG.HOLD,
FG.UNHOLD, FG.FSET, FG.FENCE, DEL) with absolute times, so a replica, a
restarted replica and an AOF replayed later all hold exactly the master's
locks, and the fencing counter travels with them.

The fencing counter is raised far above the clock's floor (2^40 tokens,
about 17 minutes ahead) before the traffic, with an FG.HOLD: from then on
every token comes from the counter, not from the clock, so a replica or a
replay that lost the counter would hand out smaller tokens, and the checks
on tokens below can fail.

Random traffic comes from a few threads on their own connections, with
short leases (so leases run out while others wait, and the master prunes
holders) and waiting clients; the comparisons then stop active expiry on the
master, as tests/integration/test_replication.py does, so no key vanishes
between two reads.
"""

import os
import random
import shutil
import threading
import time

import pytest
import redis

from harness import (RawClient, RespError, Server, expiry_command, wait_for,
                     wait_replica_synced)
from topology import (aof_command_names, assert_no_crash, digest, replicated_pair, s,
                      wait_aof_rewrite_done)

# make soak multiplies the random calls.
CALLS = 500 * int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))  # per thread and half
THREADS = 4
LOCK_KEYS = ["l:%d" % i for i in range(6)]
SEM_KEYS = ["s:%d" % i for i in range(3)]
FENCE_KEYS = ["f:%d" % i for i in range(3)]
OWNERS = ["o%d" % i for i in range(6)]
LONG_MS = 3_600_000  # longer than any run, make soak included
SHORT_MS = 300  # the longest short lease of the random traffic
UPGRADE = "owner holds a shared lock"
# what lock commands are replicated as (never as sent), and what else the
# AOF of the traffic may hold
EFFECTS = {b"FG.HOLD", b"FG.UNHOLD", b"FG.FSET", b"FG.FENCE"}
AOF_OTHERS = {b"DEL", b"MULTI", b"EXEC", b"SELECT", b"PEXPIREAT"}


def lockinfo(c, key):
    """FG.LOCKINFO as a dict of str, None when the key holds nothing."""
    raw = c.execute_command("FG.LOCKINFO", key)
    if raw is None:
        return None
    return {k: s_all(v) for k, v in zip(s_all(raw[0::2]), raw[1::2])}


def s_all(v):
    if isinstance(v, list):
        return [s_all(x) for x in v]
    return s(v)


def held(info):
    """What must be equal on a master and its replica: LOCKINFO without the
    ttl_ms of the holders (relative to now), the waiters (a replica has
    none) and the counter."""
    if info is None:
        return None
    out = {k: v for k, v in info.items() if k not in ("waiters", "next_token")}
    out["holders"] = [h[:3] + h[4:] for h in info["holders"]]
    return out


def counter(c):
    return int(c.info("floodgate")["floodgate_lock_next_token"])


def waiters(c):
    return int(c.info("floodgate")["floodgate_lock_waiters"])


def raise_counter(c, key="raise"):
    """Raises the master's fencing counter 2^40 above the clock's floor
    (now in microseconds) with a holder of a long lease; returns that token.
    The hold is sent as a repair tool would; the replica and the AOF replays
    keep the default (off) and take it as an effect."""
    token = time.time_ns() // 10 ** 3 + 2 ** 40
    expires_us = time.time_ns() // 1000 + LONG_MS * 1000
    c.config_set("floodgate.enable-effect-commands", "yes")
    c.execute_command("FG.HOLD", key, "lock", 0, "raiser", "exclusive", 1, expires_us, token)
    c.config_set("floodgate.enable-effect-commands", "no")
    return token


def grant_token(c, key, owner="prober"):
    rep = [int(x) for x in c.execute_command("FG.LOCK", key, owner, LONG_MS)]
    assert rep[0] == 1, (key, rep)
    return rep[1]


@pytest.fixture
def pair():
    """A master (AOF in plain commands, so a rewrite emits FG.HOLD and
    FG.FSET) and its replica."""
    yield from replicated_pair(["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                     "--repl-diskless-sync-delay", "0"])


# -- random traffic -----------------------------------------------------------


class Traffic:
    """Shared between the traffic threads: the tokens granted (token ->
    owner), the problems seen."""

    def __init__(self, floor_token):
        self.floor_token = floor_token
        self.tokens = {}
        self.recent = []
        self.problems = []
        self.calls = 0
        self.lock = threading.Lock()

    def bad(self, argv, reply, why):
        with self.lock:
            if len(self.problems) < 30:
                self.problems.append("%r -> %r: %s" % (argv, reply, why))

    def granted(self, argv, owner, token):
        with self.lock:
            known = self.tokens.setdefault(token, owner)
            self.recent = (self.recent + [token])[-20:]
        if known != owner:
            self.bad(argv, token, "token already granted to %s" % known)
        if token <= self.floor_token:
            self.bad(argv, token, "token not above the counter raised to %d" % self.floor_token)

    def some_token(self, rnd):
        with self.lock:
            recent = list(self.recent)
        return rnd.choice(recent) if recent and rnd.random() < 0.8 else rnd.randint(1, 10 ** 6)


def lease(rnd):
    return LONG_MS if rnd.random() < 0.04 else rnd.randint(20, SHORT_MS)


def wait_opt(rnd, p):
    return ["WAIT", rnd.randint(1, 150)] if rnd.random() < p else []


def gen_call(rnd, traffic):
    """One random call: (argv, owner or None)."""
    owner = rnd.choice(OWNERS)
    op = rnd.random()
    if op < 0.22:
        argv = ["FG.LOCK", rnd.choice(LOCK_KEYS), owner, lease(rnd)]
        if rnd.random() < 0.35:
            argv.append("SHARED")
        if rnd.random() < 0.3:
            argv.append("REENTRANT")
        return argv + wait_opt(rnd, 0.25), owner
    if op < 0.36:
        return ["FG.UNLOCK", rnd.choice(LOCK_KEYS), owner], owner
    if op < 0.48:
        cap = rnd.randint(2, 5)
        return (["FG.ACQUIRE", rnd.choice(SEM_KEYS), cap, owner, rnd.randint(1, cap), lease(rnd)]
                + wait_opt(rnd, 0.25)), owner
    if op < 0.56:
        permits = [rnd.randint(1, 3)] if rnd.random() < 0.5 else []
        return ["FG.RELEASE", rnd.choice(SEM_KEYS), owner] + permits, owner
    if op < 0.64:
        keys = rnd.sample(LOCK_KEYS, rnd.randint(1, 3))
        return ["FG.MLOCK", len(keys)] + keys + [owner, lease(rnd)] + wait_opt(rnd, 0.2), owner
    if op < 0.70:
        keys = rnd.sample(LOCK_KEYS, rnd.randint(1, 3))
        return ["FG.MUNLOCK", len(keys)] + keys + [owner], owner
    if op < 0.76:
        return ["FG.EXTEND", rnd.choice(LOCK_KEYS + SEM_KEYS), owner, lease(rnd)], owner
    if op < 0.78:
        return ["FG.FORCEUNLOCK", rnd.choice(LOCK_KEYS + SEM_KEYS)], None
    if op < 0.81:
        return ["FG.LOCKINFO", rnd.choice(LOCK_KEYS + SEM_KEYS)], None
    if op < 0.82:
        return ["DEL", rnd.choice(LOCK_KEYS + SEM_KEYS)], None
    key = rnd.choice(FENCE_KEYS)
    token = traffic.some_token(rnd)
    kind = rnd.random()
    if kind < 0.3:
        return ["FG.FENCE", key, token], None
    if kind < 0.7:
        return ["FG.FSET", key, token, "v%d" % rnd.randrange(1000)], None
    if kind < 0.9:
        return ["FG.FGET", key, token], None
    return ["FG.FGET", key], None


def check_reply(traffic, argv, owner, reply, exact=True):
    """exact: False for a reply seen through a script, where Lua turns
    integers into doubles (tokens, near 2^61, lose their low bits)."""
    name = argv[0]
    if isinstance(reply, Exception):
        if name in ("FG.LOCK", "FG.MLOCK") and UPGRADE in str(reply):
            return
        return traffic.bad(argv, reply, "unexpected error")
    if name in ("FG.LOCK", "FG.ACQUIRE", "FG.MLOCK"):
        if not (isinstance(reply, list) and len(reply) == 4):
            return traffic.bad(argv, reply, "not four integers")
        acquired, token, ttl_ms, holds = (int(x) for x in reply)
        if acquired == 1 and token >= 1 and ttl_ms >= 0 and holds >= 1:
            return traffic.granted(argv, owner, token) if exact else None
        if not (acquired == 0 and token == 0 and ttl_ms >= 0 and holds == 0):
            traffic.bad(argv, reply, "not a grant nor a refusal")
    elif name in ("FG.UNLOCK", "FG.RELEASE"):
        if not (isinstance(reply, int) and reply >= -1):
            traffic.bad(argv, reply, "holds left must be >= -1")
    elif name == "FG.MUNLOCK":
        if not (isinstance(reply, int) and 0 <= reply <= int(argv[1])):
            traffic.bad(argv, reply, "keys released out of range")
    elif name in ("FG.EXTEND", "FG.FENCE", "FG.FSET"):
        if reply not in (0, 1):
            traffic.bad(argv, reply, "must be 0 or 1")
    elif name == "FG.FORCEUNLOCK":
        if not (isinstance(reply, int) and reply >= 0):
            traffic.bad(argv, reply, "holders removed must be >= 0")
    elif name == "FG.FGET":
        if not (isinstance(reply, list) and len(reply) == 3 and reply[0] in (0, 1)):
            traffic.bad(argv, reply, "not [ok, highest_token, value]")


def run_traffic(port, calls, seed, traffic, failures):
    """calls random commands, one at a time (waits block this connection);
    some go in a MULTI/EXEC or a script, where WAIT is ignored. No call waits
    more than 150 ms, so one without a reply in 10 s never got one."""
    rnd = random.Random(seed)
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    batch = []
    try:
        for _ in range(calls):
            how = rnd.random()
            if how >= 0.08:
                batch = [gen_call(rnd, traffic)]
                try:
                    replies = [c.execute_command(*batch[0][0])]
                except redis.ResponseError as e:
                    replies = [e]
            elif how >= 0.04:
                batch = [gen_call(rnd, traffic) for _ in range(rnd.randint(2, 4))]
                p = c.pipeline(transaction=True)
                for argv, _ in batch:
                    p.execute_command(*argv)
                replies = p.execute(raise_on_error=False)
            else:
                argv, owner = gen_call(rnd, traffic)
                key = argv[2] if argv[0] in ("FG.MLOCK", "FG.MUNLOCK") else argv[1]
                batch = [(argv, owner)]
                try:
                    replies = [c.execute_command("EVAL", "return redis.pcall(unpack(ARGV))",
                                                 1, key, *argv)]
                except redis.ResponseError as e:
                    replies = [e]
            through_script = how < 0.04
            for (argv, owner), reply in zip(batch, replies):
                check_reply(traffic, argv, owner, reply, exact=not through_script)
            with traffic.lock:
                traffic.calls += len(batch)
    except redis.TimeoutError:
        failures.append("traffic client %d: no reply in 10 s to %r" % (seed, [a for a, _ in batch]))
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        failures.append("traffic client %d: %r" % (seed, e))
    finally:
        c.close()


def traffic_round(port, traffic, seed):
    failures = []
    threads = [threading.Thread(target=run_traffic,
                                args=(port, CALLS, seed + i, traffic, failures))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert not traffic.problems, "bad replies:\n  " + "\n  ".join(traffic.problems)


def hold_long_locks(c):
    """Locks of every shape with leases longer than the test, so the AOF
    rewrite and the replay have holders to carry."""
    for extra, holds in (([], 1), ([], 2), (["SHARED"], 3)):  # a writer may also read
        rep = c.execute_command("FG.LOCK", "keep:x", "alice", LONG_MS, "REENTRANT", *extra)
        assert [int(rep[0]), int(rep[3])] == [1, holds], rep
    for owner in ("r1", "r2"):
        assert int(c.execute_command("FG.LOCK", "keep:r", owner, LONG_MS, "SHARED")[0]) == 1
    for owner, permits in (("p1", 2), ("p2", 1)):
        assert int(c.execute_command("FG.ACQUIRE", "keep:s", 4, owner, permits, LONG_MS)[0]) == 1
    assert int(c.execute_command("FG.MLOCK", 2, "keep:m1", "keep:m2", "malice", LONG_MS)[0]) == 1
    assert int(c.execute_command("FG.FSET", "keep:f", 5, "value")) == 1
    assert int(c.execute_command("FG.FENCE", "keep:g", 7)) == 1


ALL_KEYS = LOCK_KEYS + SEM_KEYS + ["raise", "keep:x", "keep:r", "keep:s", "keep:m1", "keep:m2"]


def prune(c):
    """Touches every lock key with a call for an owner that holds nothing,
    so the master removes the holders whose lease ended (FG.UNHOLD)."""
    for k in LOCK_KEYS:
        assert int(c.execute_command("FG.UNLOCK", k, "nobody")) == -1
    for k in SEM_KEYS:
        assert int(c.execute_command("FG.RELEASE", k, "nobody")) == -1


def per_key(c, keys):
    return {k: s(c.execute_command("DEBUG", "DIGEST-VALUE", k)[0]) for k in keys}


DATA_KEYS = ALL_KEYS + FENCE_KEYS + ["keep:f", "keep:g"]


def data_of(c, with_info=True):
    """The dataset digest, and each key's digest and FG.LOCKINFO (to show what
    differs). with_info=False: digests only, for states with ended leases, which
    LOCKINFO hides depending on the reader's clock. Fenced values only have
    their digest (FG.FGET is refused on a replica)."""
    keys = {}
    for k in DATA_KEYS:
        shown = held(lockinfo(c, k)) if with_info and k in ALL_KEYS else None
        keys[k] = (s(c.execute_command("DEBUG", "DIGEST-VALUE", k)[0]), shown)
    return digest(c), keys


def assert_same_data(expected, got, what):
    diff = ["%s: %r vs %r" % (k, expected[1][k], got[1][k])
            for k in DATA_KEYS if expected[1][k] != got[1][k]]
    assert not diff, "%s: keys differ:\n  %s" % (what, "\n  ".join(diff))
    assert expected[0] == got[0], "%s: DEBUG DIGEST differs" % what


def test_random_traffic_replicates_and_aof_replays(pair, tmp_path):
    master, replica, m, r = pair
    floor_token = raise_counter(m)
    hold_long_locks(m)
    traffic = Traffic(floor_token)

    # ---- 1. random traffic, an AOF rewrite (plain commands) in the middle
    traffic_round(master.port, traffic, seed=11)
    m.execute_command("BGREWRITEAOF")
    wait_aof_rewrite_done(m)
    traffic_round(master.port, traffic, seed=31)
    short_leases_end = time.monotonic() + SHORT_MS / 1000 + 0.1
    assert traffic.calls >= 2 * THREADS * CALLS
    assert len(traffic.tokens) >= 50, "too few grants: %d" % len(traffic.tokens)
    max_token = max(traffic.tokens)
    assert waiters(m) == 0
    assert_no_crash(master)
    assert_no_crash(replica)

    # ---- 2. compare with no key expiring in between (the replica never
    # expires keys itself), expired holders not yet pruned included
    m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 0)
    try:
        wait_replica_synced(m, r)
        assert_same_data(data_of(m, False), data_of(r, False), "after the traffic")
        assert counter(r) >= max_token, (counter(r), max_token)

        # ---- 3. a restarted replica loads the master's RDB: same data, and
        # the counter from the RDB's aux data
        replica.restart(timeout=30)
        r = replica.client(socket_timeout=30)
        wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
        wait_replica_synced(m, r)
        assert_same_data(data_of(m, False), data_of(r, False), "after the replica's restart")
        assert counter(r) >= max_token, (counter(r), max_token)
    finally:
        m.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 1)

    # ---- 4. once every short lease has ended, the master prunes them; the
    # replica follows (the holders left have leases longer than the test)
    time.sleep(max(0.0, short_leases_end - time.monotonic()))
    prune(m)
    wait_replica_synced(m, r)
    final = data_of(m)
    assert_same_data(final, data_of(r), "after pruning")
    keep_x = held(lockinfo(m, "keep:x"))
    assert [h[:3] for h in keep_x["holders"]] == [["alice", "exclusive", 3]], keep_x

    # ---- 5. the AOF holds effects, never the decisions
    names = aof_command_names(master)
    assert EFFECTS <= names, sorted(names)
    others = AOF_OTHERS | {expiry_command(m)}
    assert names <= EFFECTS | others, "the AOF holds %r" % sorted(names - EFFECTS - others)

    # ---- 6. the AOF replayed later, in a fresh server: same data, and a
    # counter at least the highest token granted
    master.stop()
    copy_dir = str(tmp_path / "replay")
    os.makedirs(copy_dir)
    shutil.copytree(os.path.join(master.dir, "appendonlydir"),
                    os.path.join(copy_dir, "appendonlydir"))
    time.sleep(0.5)  # the wall clock moves on before the replay
    with Server(["--appendonly", "yes"], dir=copy_dir) as replay:
        c = replay.client()
        assert_same_data(final, data_of(c), "the AOF replayed later")
        assert counter(c) >= max_token, (counter(c), max_token)
        assert grant_token(c, "after:replay") > max_token
        assert_no_crash(replay)
        c.close()


# -- failover ---------------------------------------------------------------------


def wait_in_thread(port, argv, out, i):
    """Sends argv on a raw connection; out[i] is the reply or the error text."""
    with RawClient(port, timeout=60) as raw:
        try:
            out[i] = raw.execute(*argv)
        except RespError as e:
            out[i] = "error: " + str(e)
        except (ConnectionError, OSError) as e:
            out[i] = "connection: %r" % e


def start_waiters(port, c, key, owners, timeout_ms=0):
    """One blocked FG.LOCK per owner, queued in the order given."""
    out = [None] * len(owners)
    threads = []
    for i, owner in enumerate(owners):
        argv = ["FG.LOCK", key, owner, LONG_MS, "WAIT", timeout_ms]
        t = threading.Thread(target=wait_in_thread, args=(port, argv, out, i))
        t.start()
        threads.append(t)
        before = i
        wait_for(lambda: waiters(c) > before, timeout=10)
    return threads, out


def replica_refuses(c, port):
    """Every lock command but FG.LOCKINFO answers READONLY on a replica."""
    expires_us = time.time_ns() // 1000 + LONG_MS * 1000
    calls = [["FG.LOCK", "ro", "x", 1000], ["FG.UNLOCK", "w", "alice"],
             ["FG.ACQUIRE", "ro", 2, "x", 1, 1000], ["FG.RELEASE", "ro", "x"],
             ["FG.MLOCK", 1, "ro", "x", 1000], ["FG.MUNLOCK", 1, "w", "alice"],
             ["FG.EXTEND", "w", "alice", 1000], ["FG.FORCEUNLOCK", "w"],
             ["FG.FENCE", "ro", 5], ["FG.FSET", "ro", 5, "v"], ["FG.FGET", "ro", 5],
             ["FG.FGET", "ro"],
             ["FG.HOLD", "ro", "lock", 0, "x", "exclusive", 1, expires_us, 5],
             ["FG.UNHOLD", "w", "alice"]]
    before = digest(c)
    with RawClient(port) as raw:
        for argv in calls:
            msg = raw.error_of(*argv)
            assert msg.startswith("READONLY "), (argv, msg)
    assert digest(c) == before


def test_promotion_continues_tokens_and_demotion_unblocks_waiters(pair):
    master, replica, m, r = pair
    floor_token = raise_counter(m)
    # ---- grants of every kind on the master, each above the raised counter
    tokens = [grant_token(m, "w", "alice")]
    tokens.append(int(m.execute_command("FG.ACQUIRE", "sem", 3, "p", 2, LONG_MS)[1]))
    tokens.append(int(m.execute_command("FG.MLOCK", 2, "m1", "m2", "q", LONG_MS)[1]))
    tokens.append(int(m.execute_command("FG.LOCK", "rd", "r1", LONG_MS, "SHARED")[1]))
    assert all(t > floor_token for t in tokens), (floor_token, tokens)
    assert tokens == sorted(tokens) and len(set(tokens)) == 4, tokens

    # ---- three clients wait for "w" on the master, in a known order
    owners = ["bob0", "bob1", "bob2"]
    threads, out = start_waiters(master.port, m, "w", owners)
    info = lockinfo(m, "w")
    assert [w[:3] for w in info["waiters"]] == [[o, "exclusive", 1] for o in owners], info
    wait_replica_synced(m, r)
    rinfo = lockinfo(r, "w")
    assert rinfo["waiters"] == [], rinfo
    assert held(rinfo) == held(info) and rinfo["holders"][0][0] == "alice", (rinfo, info)
    replica_refuses(r, replica.port)

    # ---- promote the replica: its next token is above every one granted
    assert r.execute_command("REPLICAOF", "NO", "ONE") in (b"OK", "OK")
    new_token = grant_token(r, "after:promotion")
    assert new_token > max(tokens), (new_token, tokens)

    # ---- the old master follows the new one: its waiters are unblocked
    assert m.execute_command("REPLICAOF", "127.0.0.1", replica.port) in (b"OK", "OK")
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "waiters still blocked after REPLICAOF"
    assert all(isinstance(o, str) and o.startswith("error: UNBLOCKED") for o in out), out

    # ---- and it stays healthy: syncs, serves LOCKINFO, refuses the rest
    assert m.ping()
    wait_for(lambda: m.info("replication")["master_link_status"] == "up", timeout=20)
    wait_replica_synced(r, m)
    assert waiters(m) == 0
    minfo = lockinfo(m, "w")
    assert minfo["waiters"] == [] and held(minfo) == held(lockinfo(r, "w")), minfo
    assert digest(m) == digest(r)
    replica_refuses(m, master.port)
    assert_no_crash(master)
    assert_no_crash(replica)


def test_client_unblock_racing_a_grant_gets_an_answer(pair):
    """Regression: an FG.UNLOCK that grants a waiter, then CLIENT UNBLOCK for
    that waiter, in one pipeline (so in one event loop pass): Redis 7.0 drops
    the reply of a module blocked client that is unblocked by CLIENT UNBLOCK
    after RedisModule_UnblockClient. The waiter must get an answer (the
    grant, or the timeout reply) that matches the lock's holders."""
    master, replica, m, r = pair
    for i in range(5):
        key = "unblock:%d" % i
        m.execute_command("FG.LOCK", key, "a", LONG_MS)
        with RawClient(master.port, timeout=5) as waiter:
            client_id = waiter.execute("CLIENT", "ID")
            waiter.sock.sendall(waiter.encode(["FG.LOCK", key, "b", LONG_MS, "WAIT", 0]))
            wait_for(lambda: waiters(m) == 1, timeout=10)
            p = m.pipeline(transaction=False)
            p.execute_command("FG.UNLOCK", key, "a")
            p.execute_command("CLIENT", "UNBLOCK", client_id)
            assert p.execute()[0] == 0
            try:
                rep = [int(x) for x in waiter.read_reply()]
            except OSError:
                pytest.fail("attempt %d: the waiter got no answer; the holders: %r"
                            % (i, lockinfo(m, key)["holders"]))
        holders = [h[0] for h in (lockinfo(m, key) or {"holders": []})["holders"]]
        assert (rep[0] == 1) == (holders == ["b"]), (i, rep, holders)
    assert waiters(m) == 0


# -- leases that run out ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_waiter_timing_out_as_the_lease_ends_gets_an_answer(pair, kind):
    """Regression: a waiter whose WAIT timeout ends with the holder's lease is
    granted by the lease timer and timed out by the server in the same event
    loop pass; on Redis 7.0 the grant's reply was then lost (the client never
    answered, the lock held by an owner that does not know it). Every waiter
    must get exactly one answer, and it must match the lock's holders."""
    master, replica, m, r = pair
    for i in range(20):
        key = "race:%s:%d" % (kind, i)
        if kind == "lock":
            m.execute_command("FG.LOCK", key, "a", 50)
            argv = ["FG.LOCK", key, "b", LONG_MS, "WAIT", 50]
        else:
            m.execute_command("FG.ACQUIRE", key, 1, "a", 1, 50)
            argv = ["FG.ACQUIRE", key, 1, "b", 1, LONG_MS, "WAIT", 50]
        with RawClient(master.port, timeout=5) as raw:
            try:
                rep = [int(x) for x in raw.execute(*argv)]
            except OSError:
                holders = lockinfo(m, key)["holders"]
                pytest.fail("attempt %d: no answer to %r in 5 s; the holders: %r"
                            % (i, argv, holders))
        holders = [h[0] for h in (lockinfo(m, key) or {"holders": []})["holders"]]
        assert (rep[0] == 1) == (holders == ["b"]), (i, rep, holders)
    assert waiters(m) == 0
    wait_replica_synced(m, r)
    assert digest(m) == digest(r)


def synced_info(m, r, key):
    wait_replica_synced(m, r)
    return held(lockinfo(m, key)), held(lockinfo(r, key))


def test_lease_expiry_replicates(pair):
    master, replica, m, r = pair
    # ---- a lone holder runs out: the next command on the key removes it
    assert grant_token(m, "e1", "alice") >= 1
    assert int(m.execute_command("FG.EXTEND", "e1", "alice", 200)) == 1
    # ---- one of two readers runs out, the other stays
    for owner, lease_ms in (("r1", 200), ("r2", LONG_MS)):
        assert int(m.execute_command("FG.LOCK", "e2", owner, lease_ms, "SHARED")[0]) == 1
    time.sleep(0.4)
    # nothing touched e2 since (its key lives on with r2): the ended lease is
    # still in its state, on both
    wait_replica_synced(m, r)
    both = per_key(m, ["e2"])
    assert per_key(r, ["e2"]) == both
    assert int(m.execute_command("FG.UNLOCK", "e1", "alice")) == -1
    assert int(m.execute_command("FG.EXTEND", "e2", "r1", 1000)) == 0
    mi, ri = synced_info(m, r, "e1")
    assert mi is None and ri is None, (mi, ri)
    mi, ri = synced_info(m, r, "e2")
    assert [h[0] for h in mi["holders"]] == ["r2"] and ri == mi, (mi, ri)
    pruned = per_key(m, ["e2"])
    assert pruned != both, "the master did not remove r1's ended lease"
    assert per_key(r, ["e2"]) == pruned
    assert m.exists("e1") == 0 and r.exists("e1") == 0
    assert digest(m) == digest(r)

    # ---- with waiters, the timer at the lease's end grants the next one,
    # with no other command on the key: a lock, then a semaphore
    alice = int(m.execute_command("FG.LOCK", "e3", "alice", 300)[1])
    threads, out = start_waiters(master.port, m, "e3", ["bob"], timeout_ms=20000)
    assert int(m.execute_command("FG.ACQUIRE", "e4", 2, "a", 2, 300)[0]) == 1
    sem_out = [None]
    sem = threading.Thread(target=wait_in_thread, args=(
        master.port, ["FG.ACQUIRE", "e4", 2, "b", 1, LONG_MS, "WAIT", 20000], sem_out, 0))
    sem.start()
    for t in threads + [sem]:
        t.join(timeout=15)
    assert not any(t.is_alive() for t in threads + [sem]), "waiters not granted by the timer"
    got = [int(x) for x in out[0]]
    assert got[0] == 1 and got[1] > alice and got[3] == 1, got
    got = [int(x) for x in sem_out[0]]
    assert got[0] == 1 and got[3] == 1, got
    mi, ri = synced_info(m, r, "e3")
    assert mi["holders"] == [["bob", "exclusive", 1, int(out[0][1])]], mi
    assert ri == mi, (mi, ri)
    mi, ri = synced_info(m, r, "e4")
    assert [h[0] for h in mi["holders"]] == ["b"] and ri == mi, (mi, ri)
    assert digest(m) == digest(r)
    assert_no_crash(master)
    assert_no_crash(replica)
