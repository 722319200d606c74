"""Locks, semaphores, multi-key locks and fencing (docs/locks.md): FG.LOCK,
FG.UNLOCK, FG.ACQUIRE, FG.RELEASE, FG.MLOCK, FG.MUNLOCK, FG.EXTEND,
FG.FORCEUNLOCK, FG.LOCKINFO, FG.FENCE, FG.FSET, FG.FGET, and the
floodgate_locks section of INFO.

Waiting clients are real blocked clients: each one is a connection of its
own whose command runs in a thread (Waiter). Tests learn that a waiter is
queued from FG.LOCKINFO before they go on, so the order of the queue is
known, and they assert orders and "well before the timeout", never tight
latencies: leases and timeouts are short, margins generous (a loaded
2-core machine).
"""

import collections
import socket
import threading
import time

import pytest
import redis

from harness import RawClient, RespError, Server, s, wait_for, wait_replica_synced

ERR_UPGRADE = ("ERR owner holds a shared lock: release it before asking for "
               "the exclusive lock")
MAX_TOKEN = 2 ** 63 - 1
SLACK_MS = 1500     # how far a remaining lease may have moved between two reads
PROMPT_S = 5.0      # "at once": a blocked client answers within this (its timeout is far longer)

Holder = collections.namedtuple("Holder", "owner mode count ttl token")
Waiting = collections.namedtuple("Waiting", "owner mode count waited_ms")


# --------------------------------------------------------------------------
# helpers

def ints(reply):
    return [int(x) for x in reply]


def lock(c, key, owner, lease_ms, *opts):
    return ints(c.execute_command("FG.LOCK", key, owner, lease_ms, *opts))


def unlock(c, key, owner):
    return int(c.execute_command("FG.UNLOCK", key, owner))


def acquire(c, key, capacity, owner, permits, lease_ms, *opts):
    return ints(c.execute_command("FG.ACQUIRE", key, capacity, owner, permits, lease_ms, *opts))


def release(c, key, owner, *permits):
    return int(c.execute_command("FG.RELEASE", key, owner, *permits))


def lock_once_free(c, key, owner, lease_ms):
    """Asks (without WAIT) until granted; the grant's reply."""
    def attempt():
        rep = lock(c, key, owner, lease_ms)
        return rep if rep[0] == 1 else None
    return wait_for(attempt, timeout=10, interval=0.05)


def mlock(c, keys, owner, lease_ms, *opts):
    return ints(c.execute_command("FG.MLOCK", len(keys), *keys, owner, lease_ms, *opts))


def munlock(c, keys, owner):
    return int(c.execute_command("FG.MUNLOCK", len(keys), *keys, owner))


def extend(c, key, owner, lease_ms):
    return int(c.execute_command("FG.EXTEND", key, owner, lease_ms))


def fget(c, key, *token):
    ok, highest, value = c.execute_command("FG.FGET", key, *token)
    return [int(ok), int(highest), value]


def lockinfo(c, key):
    """FG.LOCKINFO as a dict; the field names and their order are checked."""
    raw = c.execute_command("FG.LOCKINFO", key)
    if raw is None:
        return None
    names = [s(x) for x in raw[0::2]]
    assert names == ["kind", "capacity", "used", "holders", "waiters", "next_token"], raw
    d = dict(zip(names, raw[1::2]))
    return {
        "kind": s(d["kind"]),
        "capacity": int(d["capacity"]),
        "used": int(d["used"]),
        "holders": [Holder(s(h[0]), s(h[1]), int(h[2]), int(h[3]), int(h[4]))
                    for h in d["holders"]],
        "waiters": [Waiting(s(w[0]), s(w[1]), int(w[2]), int(w[3])) for w in d["waiters"]],
        "next_token": int(d["next_token"]),
    }


def settled(info):
    """LOCKINFO without what moves with the clock alone (next_token is the
    token a grant would get now, floored by the clock)."""
    if info is None:
        return None
    out = dict(info)
    del out["next_token"]
    out["holders"] = [h._replace(ttl=None) for h in info["holders"]]
    out["waiters"] = [w._replace(waited_ms=None) for w in info["waiters"]]
    return out


def holders(c, key):
    info = lockinfo(c, key)
    return [] if info is None else [h.owner for h in info["holders"]]


def queue(c, key):
    info = lockinfo(c, key)
    return [] if info is None else [w.owner for w in info["waiters"]]


def next_token_of(read, last):
    """read() -> a next_token field; checks it is the token a grant would get
    at the time of the read: max(last + 1, the clock's floor, now in us)."""
    before = time.time_ns() // 1_000
    value = read()
    after = time.time_ns() // 1_000
    assert max(last + 1, before - 2000) <= value <= max(last + 1, after + 3000), (
        value, last, before, after)
    return value


def dirty(c):
    return c.info("persistence")["rdb_changes_since_last_save"]


LOCK_FIELDS = ["floodgate_lock_grants", "floodgate_lock_waited_grants",
               "floodgate_lock_timeouts", "floodgate_lock_waiters",
               "floodgate_lock_expired", "floodgate_lock_next_token"]


def lock_stats(c):
    info = c.info("floodgate")
    missing = [f for f in LOCK_FIELDS if f not in info]
    assert not missing, "INFO floodgate lacks %s" % missing
    return {f: int(info[f]) for f in LOCK_FIELDS}


def assert_ttl(ttl, lease_ms, slack_ms=SLACK_MS):
    """A remaining lease read just after a grant of lease_ms (+1: the lease
    end is rounded up to a millisecond, the clock read down)."""
    assert lease_ms - slack_ms <= ttl <= lease_ms + 1, (ttl, lease_ms)


def assert_near(ttl, expected_ms, slack_ms=SLACK_MS):
    """ttl_ms of a reply against a PTTL read just before it."""
    assert expected_ms - slack_ms <= ttl <= expected_ms + 2, (ttl, expected_ms)


def assert_denied(reply, ttl_ms=None):
    assert len(reply) == 4 and reply[0] == 0 and reply[1] == 0 and reply[3] == 0, reply
    if ttl_ms is not None:
        assert_near(reply[2], ttl_ms)


class Waiter:
    """One connection that sends one command from a thread of its own, so the
    command may block in the server. `reply` holds the answer (integers for
    an array of integers), `error` what was raised instead."""

    def __init__(self, port, args, timeout=40):
        self.conn = RawClient(port, timeout=timeout)
        self.id = int(self.conn.execute("CLIENT", "ID"))
        self.args = args
        self.reply = None
        self.error = None
        self.elapsed = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.t0 = time.monotonic()
        self.thread.start()
        return self

    def _run(self):
        try:
            rep = self.conn.execute(*self.args)
            self.reply = ints(rep) if isinstance(rep, list) else rep
        except Exception as e:  # noqa: BLE001 - reported by result()
            self.error = e
        self.elapsed = time.monotonic() - self.t0
        self.done.set()

    def finished(self):
        return self.done.is_set()

    def result(self, timeout=PROMPT_S):
        assert self.done.wait(timeout), "%r still blocked after %.1fs" % (self.args, timeout)
        if self.error is not None:
            raise self.error
        return self.reply

    def hang_up(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        self.hang_up()   # a plain close() leaves a recv() in the thread blocked, and no FIN sent
        self.conn.close()


@pytest.fixture
def spawn(server):
    """spawn(*command) -> a Waiter (not started); all closed after the test."""
    made = []

    def make(*args, timeout=40):
        w = Waiter(server.port, args, timeout=timeout)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
    # gone from the server before the next test's FLUSHALL, which would
    # otherwise serve a waiter left behind by a failed test
    ids = {w.id for w in made}
    c = server.client()
    wait_for(lambda: not ids & {int(x["id"]) for x in c.client_list()}, timeout=10)
    c.close()


def enqueue(c, w, owner, *keys):
    """Starts w and waits until owner is queued on each key."""
    w.start()
    wait_for(lambda: all(owner in queue(c, k) for k in keys), timeout=10)
    assert not w.finished(), w.reply


# --------------------------------------------------------------------------
# FG.LOCK / FG.UNLOCK

def test_grant_reply_and_denial(r):
    rep = lock(r, "k", "a", 10000)
    assert rep[0] == 1 and rep[3] == 1, rep
    assert rep[1] > 0
    assert_ttl(rep[2], 10000)
    d0 = dirty(r)
    pttl = r.pttl("k")
    assert_ttl(pttl, 10000)
    denied = lock(r, "k", "b", 20000)
    assert_denied(denied, pttl)
    assert dirty(r) == d0
    info = lockinfo(r, "k")
    assert [h[:3] for h in info["holders"]] == [("a", "exclusive", 1)]
    assert info["holders"][0].token == rep[1]


def test_tokens_strictly_increase(r):
    tokens = []
    for key, owner in [("k1", "a"), ("k1", "b"), ("k2", "a"), ("k1", "c"), ("k3", "a")]:
        rep = lock(r, key, owner, 10000)
        assert rep[0] == 1, (key, owner, rep)
        tokens.append(rep[1])
        assert unlock(r, key, owner) == 0
    tokens.append(acquire(r, "sem", 3, "a", 1, 10000)[1])
    tokens.append(mlock(r, ["m1", "m2"], "a", 10000)[1])
    tokens.append(lock(r, "k1", "d", 10000, "SHARED")[1])
    tokens.append(lock(r, "k1", "e", 10000, "SHARED")[1])
    assert tokens == sorted(set(tokens)), tokens
    next_token_of(lambda: lockinfo(r, "k1")["next_token"], tokens[-1])


def test_token_is_floored_by_the_clock():
    # A fresh server: its counter starts at 0, so the first token is the
    # clock's floor, the time in microseconds; below 2^53, so a Lua script
    # reads it exactly and can hand it to FG.FSET.
    with Server() as srv:
        c = srv.client()
        before = time.time_ns() // 1_000
        tok = lock(c, "k", "a", 10000)[1]
        after = time.time_ns() // 1_000
        assert before - 2000 <= tok <= after + 2000, (tok, before, after)
        assert tok < 2 ** 53
        assert lock(c, "k2", "a", 10000)[1] > tok
        script = ("local g = redis.call('FG.LOCK', KEYS[1], 'lua', 10000) "
                  "return redis.call('FG.FSET', KEYS[2], g[2], 'v')")
        assert c.eval(script, 2, "k3", "res") == 1
        assert c.execute_command("FG.FGET", "res")[1] == lockinfo(c, "k3")["holders"][0].token
        c.close()


def test_same_owner_without_reentrant_is_denied(r):
    lock(r, "k", "a", 10000)
    pttl = r.pttl("k")
    assert_denied(lock(r, "k", "a", 10000), pttl)
    assert unlock(r, "k", "a") == 0
    assert unlock(r, "k", "a") == -1
    assert r.exists("k") == 0


def test_reentrant_counts_holds(r):
    first = lock(r, "k", "a", 10000, "REENTRANT")
    assert first[0] == 1 and first[3] == 1
    for n in (2, 3):
        rep = lock(r, "k", "a", 10000, "REENTRANT")
        assert rep[0] == 1 and rep[1] == first[1] and rep[3] == n, rep
    info = lockinfo(r, "k")
    assert [h[:3] for h in info["holders"]] == [("a", "exclusive", 3)]
    assert info["used"] == 3
    assert [unlock(r, "k", "a") for _ in range(4)] == [2, 1, 0, -1]
    assert r.exists("k") == 0
    assert lockinfo(r, "k") is None


def test_reentry_lease_is_the_later_one(r):
    lock(r, "k", "a", 10000)
    rep = lock(r, "k", "a", 1000, "REENTRANT")
    assert rep[3] == 2
    assert_ttl(rep[2], 10000)
    assert_ttl(r.pttl("k"), 10000)
    rep = lock(r, "k", "a", 20000, "REENTRANT")
    assert rep[3] == 3
    assert_ttl(rep[2], 20000)
    assert_ttl(r.pttl("k"), 20000)
    assert_ttl(lockinfo(r, "k")["holders"][0].ttl, 20000)


def test_unlock_by_non_owner_changes_nothing(r):
    lock(r, "k", "a", 10000)
    before = settled(lockinfo(r, "k"))
    d0 = dirty(r)
    assert unlock(r, "k", "b") == -1
    assert unlock(r, "nokey", "b") == -1
    assert settled(lockinfo(r, "k")) == before
    assert dirty(r) == d0
    assert r.exists("nokey") == 0


def test_upgrade_is_refused(r, server):
    lock(r, "k", "a", 10000, "SHARED")
    before = settled(lockinfo(r, "k"))
    with RawClient(server.port) as rc:
        assert rc.error_of("FG.LOCK", "k", "a", 10000, "REENTRANT") == ERR_UPGRADE
        assert rc.error_of("FG.LOCK", "k", "a", 10000, "REENTRANT", "WAIT", 1000) == ERR_UPGRADE
    assert settled(lockinfo(r, "k")) == before


def test_upgrade_without_reentrant_is_refused(r, server):
    # docs: "A reader asking for the write lock (an upgrade) is refused".
    lock(r, "k", "a", 10000, "SHARED")
    with RawClient(server.port) as rc:
        assert rc.error_of("FG.LOCK", "k", "a", 10000) == ERR_UPGRADE


def test_writer_may_take_the_read_lock_reentrantly(r):
    w = lock(r, "k", "a", 10000)
    rep = lock(r, "k", "a", 10000, "SHARED", "REENTRANT")
    assert rep[0] == 1 and rep[1] == w[1] and rep[3] == 2, rep
    info = lockinfo(r, "k")
    assert [h[:3] for h in info["holders"]] == [("a", "exclusive", 2)]
    # still a writer: others can read neither
    assert_denied(lock(r, "k", "b", 10000, "SHARED"))
    assert unlock(r, "k", "a") == 1
    assert unlock(r, "k", "a") == 0
    assert r.exists("k") == 0


def test_shared_readers_and_a_writer(r):
    toks = []
    for owner, lease in [("r1", 5000), ("r2", 10000), ("r3", 7000)]:
        rep = lock(r, "k", owner, lease, "SHARED")
        assert rep[0] == 1 and rep[3] == 1, rep
        assert_ttl(rep[2], lease)
        toks.append(rep[1])
    assert toks == sorted(set(toks))
    info = lockinfo(r, "k")
    assert info["kind"] == "lock" and info["capacity"] == 0 and info["used"] == 3
    assert [h[:3] for h in info["holders"]] == [
        ("r1", "shared", 1), ("r2", "shared", 1), ("r3", "shared", 1)]
    assert [h.token for h in info["holders"]] == toks
    # the writer waits for the longest lease among the readers
    pttl = r.pttl("k")
    assert_ttl(pttl, 10000)
    assert_denied(lock(r, "k", "w", 10000), pttl)
    # a writer in, readers out (their ttl: the writer's lease)
    for owner in ("r1", "r2", "r3"):
        assert unlock(r, "k", owner) == 0
    assert lock(r, "k", "w", 8000)[0] == 1
    pttl = r.pttl("k")  # read before the denial it bounds
    assert_denied(lock(r, "k", "r4", 1000, "SHARED"), pttl)


def test_pttl_is_the_latest_lease(r):
    lock(r, "k", "a", 5000, "SHARED")
    assert_ttl(r.pttl("k"), 5000)
    lock(r, "k", "b", 20000, "SHARED")
    assert_ttl(r.pttl("k"), 20000)
    lock(r, "k", "c", 3000, "SHARED")
    assert_ttl(r.pttl("k"), 20000)
    assert unlock(r, "k", "b") == 0
    assert_ttl(r.pttl("k"), 5000)
    assert extend(r, "k", "c", 30000) == 1
    assert_ttl(r.pttl("k"), 30000)
    assert unlock(r, "k", "a") == 0
    assert unlock(r, "k", "c") == 0
    assert r.exists("k") == 0


def test_lease_expiry_frees_the_lock(r):
    t0 = time.monotonic()
    first = lock(r, "k", "a", 80)
    assert first[0] == 1
    rep = lock_once_free(r, "k", "b", 10000)
    assert time.monotonic() - t0 >= 0.075   # not before the lease ended
    assert rep[1] > first[1]
    assert unlock(r, "k", "a") == -1
    assert extend(r, "k", "a", 1000) == 0
    assert holders(r, "k") == ["b"]


def test_abandoned_lock_key_disappears(r):
    lock(r, "k", "a", 60)
    wait_for(lambda: r.exists("k") == 0, timeout=10, interval=0.05)
    assert lockinfo(r, "k") is None
    assert unlock(r, "k", "a") == -1


def test_reentry_passes_the_queue(r, spawn):
    # A holder's re-entry is not a newcomer: were it queued behind a waiter
    # that waits for it, both would wait until the lease ends.
    tok = lock(r, "k", "a", 20000, "REENTRANT")[1]
    w = spawn("FG.LOCK", "k", "b", 10000, "WAIT", 20000)
    enqueue(r, w, "b", "k")
    rep = lock(r, "k", "a", 20000, "REENTRANT", "WAIT", 1000)
    assert rep[0] == 1 and rep[1] == tok and rep[3] == 2, rep
    assert unlock(r, "k", "a") == 1
    assert not w.finished()
    assert unlock(r, "k", "a") == 0
    assert w.result()[0] == 1


# --------------------------------------------------------------------------
# WAIT

def test_waiter_is_granted_when_the_holder_unlocks(r, spawn, server):
    held = lock(r, "k", "a", 30000)
    w = spawn("FG.LOCK", "k", "b", 7000, "WAIT", 20000)
    enqueue(r, w, "b", "k")
    flags = {int(c["id"]): c["flags"] for c in r.client_list()}
    assert "b" in flags[w.id], flags[w.id]
    info = lockinfo(r, "k")
    assert [x[:3] for x in info["waiters"]] == [("b", "exclusive", 1)]
    assert unlock(r, "k", "a") == 0
    rep = w.result()
    assert rep[0] == 1 and rep[3] == 1 and rep[1] > held[1], rep
    assert_ttl(rep[2], 7000)
    assert w.elapsed < 15, w.elapsed   # granted, not timed out
    info = lockinfo(r, "k")
    assert [h[:3] for h in info["holders"]] == [("b", "exclusive", 1)]
    assert info["holders"][0].token == rep[1]
    assert info["waiters"] == []


def test_waiters_are_served_in_fifo_order(r, spawn):
    lock(r, "k", "a", 30000)
    order = ["w%d" % i for i in range(5)]
    ws = {}
    for i, owner in enumerate(order):
        ws[owner] = spawn("FG.LOCK", "k", owner, 30000, "WAIT", 30000)
        enqueue(r, ws[owner], owner, "k")
        assert queue(r, "k") == order[:i + 1]
    waited = lockinfo(r, "k")["waiters"]
    assert [w.waited_ms for w in waited] == sorted([w.waited_ms for w in waited], reverse=True)
    tokens = []
    prev = "a"
    for i, owner in enumerate(order):
        assert unlock(r, "k", prev) == 0
        rep = ws[owner].result()
        assert rep[0] == 1 and rep[3] == 1, (owner, rep)
        tokens.append(rep[1])
        assert holders(r, "k") == [owner]
        assert queue(r, "k") == order[i + 1:]
        assert not any(ws[o].finished() for o in order[i + 1:])
        prev = owner
    assert tokens == sorted(set(tokens)), tokens
    assert unlock(r, "k", prev) == 0
    assert r.exists("k") == 0


def test_wait_timeout_denies_and_leaves_the_queue(r, server):
    lock(r, "k", "a", 10000)
    pttl = r.pttl("k")
    with RawClient(server.port) as rc:
        t0 = time.monotonic()
        rep = ints(rc.execute("FG.LOCK", "k", "b", 1000, "WAIT", 300))
        elapsed = time.monotonic() - t0
    assert_denied(rep, pttl)
    assert 0.25 <= elapsed < PROMPT_S, elapsed
    assert queue(r, "k") == []
    assert holders(r, "k") == ["a"]
    # and the next release finds nobody waiting
    assert unlock(r, "k", "a") == 0
    assert r.exists("k") == 0


def test_wait_zero_waits_without_timeout(r, spawn):
    lock(r, "k", "a", 30000)
    w = spawn("FG.LOCK", "k", "b", 5000, "WAIT", 0)
    enqueue(r, w, "b", "k")
    time.sleep(0.5)
    assert not w.finished()
    assert queue(r, "k") == ["b"]
    assert unlock(r, "k", "a") == 0
    assert w.result()[0] == 1


def test_lease_end_hands_over_to_the_waiter(r, spawn):
    stats = lock_stats(r)
    lease_ms = 1500
    t_grant = time.monotonic()
    lock(r, "k", "a", lease_ms)
    w = spawn("FG.LOCK", "k", "b", 5000, "WAIT", 20000)
    enqueue(r, w, "b", "k")
    queued_at = time.monotonic() - t_grant
    assert queued_at < lease_ms / 1000 - 0.2, "machine too slow to test the timer: %.2fs" % queued_at
    # Nobody touches the key now: only the timer can hand it over.
    rep = w.result(timeout=15)
    handed_at = time.monotonic() - t_grant
    assert rep[0] == 1 and rep[3] == 1, rep
    assert lease_ms / 1000 - 0.05 <= handed_at < lease_ms / 1000 + 4, handed_at
    assert holders(r, "k") == ["b"]
    after = lock_stats(r)
    assert after["floodgate_lock_waited_grants"] == stats["floodgate_lock_waited_grants"] + 1


def test_lease_end_during_a_long_command_hands_over_at_once(r, spawn, server):
    """The lease ends while DEBUG SLEEP holds the server; its timer fires
    right after and must see the lease as ended. Had it read a time cached
    at the sleep's start, it would have waited the lease's remainder again
    (7.2+ refreshes its cache for module timers; floodgate's timers read the
    clock themselves, docs/time.md)."""
    for lease_ms in (2000, 8000):   # a slow machine gets a longer lease
        r.delete("k")
        locked = time.monotonic()
        lock(r, "k", "a", lease_ms)
        w = spawn("FG.LOCK", "k", "b", 5000, "WAIT", 60000)
        enqueue(r, w, "b", "k")
        with RawClient(server.port, timeout=60) as rc:
            sleep_starts = time.monotonic()
            rc.execute("DEBUG", "SLEEP", 2 * lease_ms / 1000)
            sleep_ended = time.monotonic()
        rep = w.result(timeout=60)
        if sleep_starts - locked < lease_ms / 2000:
            break   # else the lease may have ended before the sleep: retry
    assert rep[0] == 1, rep
    # the stale clock would have made it wait about lease_ms more
    assert w.t0 + w.elapsed - sleep_ended < lease_ms / 2000, (w.t0 + w.elapsed - sleep_ended)
    assert holders(r, "k") == ["b"]


def test_retry_without_reentrant_waits_for_its_own_lease(r, server):
    # a retried request after a lost reply: the owner waits like anybody
    # else, and is granted a new hold when its lease ends
    t0 = time.monotonic()  # before the grant: its lease ends 600 ms after
    first = lock(r, "k", "a", 600)
    with RawClient(server.port) as rc:
        rep = ints(rc.execute("FG.LOCK", "k", "a", 5000, "WAIT", 20000))
        elapsed = time.monotonic() - t0
    assert rep[0] == 1 and rep[1] > first[1] and rep[3] == 1, rep
    assert_ttl(rep[2], 5000)
    assert 0.55 <= elapsed < 0.6 + PROMPT_S, elapsed
    assert [h[:3] for h in lockinfo(r, "k")["holders"]] == [("a", "exclusive", 1)]


def test_disconnected_waiter_leaves_the_queue(r, spawn):
    base = lock_stats(r)["floodgate_lock_waiters"]
    lock(r, "k", "a", 30000)
    w1 = spawn("FG.LOCK", "k", "w1", 5000, "WAIT", 0)
    w2 = spawn("FG.LOCK", "k", "w2", 5000, "WAIT", 0)
    w3 = spawn("FG.LOCK", "k", "w3", 5000, "WAIT", 0)
    enqueue(r, w1, "w1", "k")
    enqueue(r, w2, "w2", "k")
    enqueue(r, w3, "w3", "k")
    assert lock_stats(r)["floodgate_lock_waiters"] == base + 3
    assert r.execute_command("CLIENT", "KILL", "ID", w1.id) == 1
    wait_for(lambda: queue(r, "k") == ["w2", "w3"], timeout=10)
    with pytest.raises(Exception):
        w1.result()
    # a client that hangs up itself
    w2.hang_up()
    wait_for(lambda: queue(r, "k") == ["w3"], timeout=10)
    assert lock_stats(r)["floodgate_lock_waiters"] == base + 1
    assert unlock(r, "k", "a") == 0
    assert w3.result()[0] == 1
    assert holders(r, "k") == ["w3"]
    assert lock_stats(r)["floodgate_lock_waiters"] == base


@pytest.mark.parametrize("how", ["timeout", "kill"])
def test_leaving_head_waiter_lets_the_next_in(r, spawn, how):
    # a reader holds; a writer waits at the head, a reader behind it. When
    # the writer gives up, the reader fits at once (not at its own timeout).
    lock(r, "k", "a", 30000, "SHARED")
    w = spawn("FG.LOCK", "k", "w", 30000, "WAIT", 400 if how == "timeout" else 0)
    enqueue(r, w, "w", "k")
    rd = spawn("FG.LOCK", "k", "r", 30000, "SHARED", "WAIT", 30000)
    enqueue(r, rd, "r", "k")
    if how == "kill":
        assert r.execute_command("CLIENT", "KILL", "ID", w.id) == 1
    else:
        assert_denied(w.result())
    rep = rd.result()
    assert rep[0] == 1 and rep[3] == 1, rep
    assert rd.elapsed < 15, rd.elapsed
    assert holders(r, "k") == ["a", "r"]
    assert queue(r, "k") == []


def test_client_unblock_leaves_lock_waiters_alone(r, spawn):
    # Redis 7.0 would drop the reply of a waiter granted in the same turn as
    # a CLIENT UNBLOCK, so lock waiters refuse it and keep waiting.
    lock(r, "k", "a", 10000)
    w = spawn("FG.LOCK", "k", "b", 5000, "WAIT", 0)
    enqueue(r, w, "b", "k")
    assert r.execute_command("CLIENT", "UNBLOCK", w.id) == 0
    assert r.execute_command("CLIENT", "UNBLOCK", w.id, "ERROR") == 0
    assert queue(r, "k") == ["b"]
    assert unlock(r, "k", "a") == 0
    rep = w.result()
    assert rep[0] == 1 and rep[3] == 1, rep
    assert holders(r, "k") == ["b"]


def test_readers_at_the_head_together_writer_not_starved(r, spawn):
    lock(r, "k", "a", 30000)
    ws = {}
    for owner, mode in [("r1", "SHARED"), ("r2", "SHARED"), ("r3", "SHARED"),
                        ("w", None), ("r4", "SHARED")]:
        args = ["FG.LOCK", "k", owner, 30000] + ([mode] if mode else []) + ["WAIT", 30000]
        ws[owner] = spawn(*args)
        enqueue(r, ws[owner], owner, "k")
    assert [(x.owner, x.mode) for x in lockinfo(r, "k")["waiters"]] == [
        ("r1", "shared"), ("r2", "shared"), ("r3", "shared"), ("w", "exclusive"), ("r4", "shared")]
    assert unlock(r, "k", "a") == 0
    for owner in ("r1", "r2", "r3"):
        assert ws[owner].result()[0] == 1
    # r4 is compatible with the readers but stays behind the writer
    time.sleep(0.2)
    assert not ws["w"].finished() and not ws["r4"].finished()
    assert holders(r, "k") == ["r1", "r2", "r3"]
    assert queue(r, "k") == ["w", "r4"]
    assert unlock(r, "k", "r1") == 0
    assert unlock(r, "k", "r2") == 0
    assert not ws["w"].finished()
    assert unlock(r, "k", "r3") == 0
    assert ws["w"].result()[0] == 1
    assert not ws["r4"].finished()
    assert unlock(r, "k", "w") == 0
    assert ws["r4"].result()[0] == 1
    assert holders(r, "k") == ["r4"]


def test_no_overtaking_an_older_waiter(r, spawn):
    lock(r, "k", "a", 30000, "SHARED")
    w = spawn("FG.LOCK", "k", "w", 30000, "WAIT", 30000)
    enqueue(r, w, "w", "k")
    d0 = dirty(r)
    # compatible with the holder, but a writer waits ahead: only the queue
    # is in the way, so ttl 0
    assert lock(r, "k", "r", 1000, "SHARED") == [0, 0, 0, 0]
    assert dirty(r) == d0
    # with WAIT it queues behind the writer
    rw = spawn("FG.LOCK", "k", "r", 1000, "SHARED", "WAIT", 30000)
    enqueue(r, rw, "r", "k")
    assert queue(r, "k") == ["w", "r"]
    assert unlock(r, "k", "a") == 0
    assert w.result()[0] == 1
    assert not rw.finished()
    assert unlock(r, "k", "w") == 0
    assert rw.result()[0] == 1


@pytest.mark.parametrize("how", ["DEL", "FLUSHDB", "FORCEUNLOCK"])
def test_removing_the_lock_serves_waiters(r, spawn, how):
    held = lock(r, "k", "a", 30000)
    w = spawn("FG.LOCK", "k", "b", 9000, "WAIT", 30000)
    enqueue(r, w, "b", "k")
    if how == "DEL":
        assert r.delete("k") == 1
    elif how == "FLUSHDB":
        r.flushdb()
    else:
        assert r.execute_command("FG.FORCEUNLOCK", "k") == 1
    rep = w.result()
    assert rep[0] == 1 and rep[1] > held[1] and rep[3] == 1, rep
    assert holders(r, "k") == ["b"]
    assert_ttl(r.pttl("k"), 9000)
    assert unlock(r, "k", "a") == -1


def test_forceunlock_counts_holders(r):
    for owner in ("r1", "r2", "r3"):
        lock(r, "k", owner, 30000, "SHARED")
    acquire(r, "s", 5, "a", 2, 30000)
    acquire(r, "s", 5, "b", 1, 30000)
    assert r.execute_command("FG.FORCEUNLOCK", "k") == 3
    assert r.execute_command("FG.FORCEUNLOCK", "s") == 2
    assert r.execute_command("FG.FORCEUNLOCK", "k") == 0
    assert r.execute_command("FG.FORCEUNLOCK", "none") == 0
    assert r.exists("k", "s") == 0
    assert unlock(r, "k", "r1") == -1


# --------------------------------------------------------------------------
# MULTI, scripts

def test_wait_inside_multi_answers_at_once(r, server):
    lock(r, "k", "a", 30000)
    c = server.client(socket_timeout=60)
    p = c.pipeline(transaction=True)
    p.execute_command("FG.LOCK", "k", "b", 1000, "WAIT", 30000)
    p.execute_command("FG.LOCK", "free", "b", 1000, "WAIT", 30000)
    t0 = time.monotonic()
    busy, free = p.execute()
    assert time.monotonic() - t0 < 10
    assert_denied(ints(busy))
    free = ints(free)
    assert free[0] == 1 and free[3] == 1
    assert holders(c, "free") == ["b"]
    assert queue(c, "k") == []
    c.close()


def test_lock_inside_multi_when_free(r):
    p = r.pipeline(transaction=True)
    p.execute_command("FG.LOCK", "k", "a", 10000)
    p.execute_command("FG.LOCK", "k", "b", 10000)
    p.execute_command("FG.UNLOCK", "k", "a")
    p.execute_command("FG.LOCK", "k", "b", 10000)
    a, b1, un, b2 = p.execute()
    assert int(a[0]) == 1 and int(a[3]) == 1
    assert_denied(ints(b1))
    assert un == 0
    assert int(b2[0]) == 1 and int(b2[1]) > int(a[1])
    assert holders(r, "k") == ["b"]


def test_wait_inside_a_script_answers_at_once(r, server):
    lock(r, "k", "a", 30000)
    c = server.client(socket_timeout=60)
    script = "return redis.call('FG.LOCK', KEYS[1], ARGV[1], ARGV[2], 'WAIT', ARGV[3])"
    t0 = time.monotonic()
    busy = ints(c.eval(script, 1, "k", "b", 1000, 30000))
    assert time.monotonic() - t0 < 10
    assert_denied(busy)
    free = ints(c.eval(script, 1, "free", "b", 1000, 30000))
    assert free[0] == 1 and free[3] == 1
    assert queue(c, "k") == []
    c.close()


# --------------------------------------------------------------------------
# semaphores

def test_semaphore_accounting(r):
    a = acquire(r, "s", 5, "a", 2, 10000)
    assert a[0] == 1 and a[3] == 2, a
    assert_ttl(a[2], 10000)
    b = acquire(r, "s", 5, "b", 3, 20000)
    assert b[0] == 1 and b[3] == 3 and b[1] > a[1], b
    info = lockinfo(r, "s")
    assert info["kind"] == "semaphore" and info["capacity"] == 5 and info["used"] == 5
    assert [h[:3] for h in info["holders"]] == [("a", "exclusive", 2), ("b", "exclusive", 3)]
    assert [h.token for h in info["holders"]] == [a[1], b[1]]
    assert info["waiters"] == []
    # one permit comes back when a's lease ends
    ttl = lockinfo(r, "s")["holders"][0].ttl  # read before the denial it bounds
    assert_denied(acquire(r, "s", 5, "c", 1, 10000), ttl)
    assert release(r, "s", "a", 1) == 1
    assert lockinfo(r, "s")["used"] == 4
    c = acquire(r, "s", 5, "c", 1, 10000)
    assert c[0] == 1 and c[3] == 1
    assert release(r, "s", "b") == 0
    assert release(r, "s", "b") == -1
    assert release(r, "s", "nobody", 1) == -1
    assert release(r, "s", "a") == 0
    assert release(r, "s", "c", 1) == 0
    assert r.exists("s") == 0


def test_semaphore_same_owner_adds_permits(r):
    first = acquire(r, "s", 10, "a", 2, 10000)
    rep = acquire(r, "s", 10, "a", 3, 1000)
    assert rep[0] == 1 and rep[1] == first[1] and rep[3] == 5, rep
    assert_ttl(rep[2], 10000)     # the later lease
    rep = acquire(r, "s", 10, "a", 1, 20000)
    assert rep[3] == 6
    assert_ttl(rep[2], 20000)
    assert_ttl(r.pttl("s"), 20000)
    info = lockinfo(r, "s")
    assert info["used"] == 6 and [h[:3] for h in info["holders"]] == [("a", "exclusive", 6)]
    # more than is left
    assert_denied(acquire(r, "s", 10, "a", 5, 1000))
    assert release(r, "s", "a", 4) == 2
    assert release(r, "s", "a", 2) == 0
    assert r.exists("s") == 0


def test_lowering_capacity_keeps_holders(r):
    assert acquire(r, "s", 5, "a", 3, 30000)[0] == 1
    rep = acquire(r, "s", 4, "b", 1, 30000)
    assert rep[0] == 1
    info = lockinfo(r, "s")
    assert info["capacity"] == 4 and info["used"] == 4
    # capacity 2 now: nobody loses permits, nobody new gets one
    assert_denied(acquire(r, "s", 2, "c", 1, 30000))
    assert [h[:3] for h in lockinfo(r, "s")["holders"]] == [
        ("a", "exclusive", 3), ("b", "exclusive", 1)]
    assert release(r, "s", "a") == 0
    # used 1: one more fits under 2
    rep = acquire(r, "s", 2, "c", 1, 30000)
    assert rep[0] == 1, rep
    info = lockinfo(r, "s")
    assert info["capacity"] == 2 and info["used"] == 2
    assert_denied(acquire(r, "s", 2, "d", 1, 30000))


def test_semaphore_permits_above_capacity_is_an_error(r):
    for args in ([3, "a", 4, 1000], [3, "a", 0, 1000], [0, "a", 1, 1000],
                 [1000001, "a", 1, 1000]):
        with pytest.raises(redis.ResponseError):
            r.execute_command("FG.ACQUIRE", "s", *args)
    assert r.exists("s") == 0
    assert acquire(r, "s", 1000000, "a", 1000000, 1000)[3] == 1000000


def test_semaphore_denied_ttl_is_when_enough_leases_end(r):
    acquire(r, "s", 3, "a", 1, 5000)
    acquire(r, "s", 3, "b", 1, 10000)
    acquire(r, "s", 3, "c", 1, 20000)
    ttl = {h.owner: h.ttl for h in lockinfo(r, "s")["holders"]}
    assert_denied(acquire(r, "s", 3, "d", 1, 1000), ttl["a"])
    assert_denied(acquire(r, "s", 3, "d", 2, 1000), ttl["b"])
    assert_denied(acquire(r, "s", 3, "d", 3, 1000), ttl["c"])


def test_semaphore_fifo_big_request_not_overtaken(r, spawn):
    assert acquire(r, "s", 5, "a", 4, 30000)[0] == 1
    big = spawn("FG.ACQUIRE", "s", 5, "big", 3, 30000, "WAIT", 30000)
    enqueue(r, big, "big", "s")
    small = spawn("FG.ACQUIRE", "s", 5, "small", 1, 30000, "WAIT", 30000)
    enqueue(r, small, "small", "s")
    assert [w[:3] for w in lockinfo(r, "s")["waiters"]] == [
        ("big", "exclusive", 3), ("small", "exclusive", 1)]
    # one permit is free, but older waiters are in the way
    assert acquire(r, "s", 5, "x", 1, 1000) == [0, 0, 0, 0]
    assert release(r, "s", "a", 2) == 2
    rep = big.result()
    assert rep[0] == 1 and rep[3] == 3, rep
    assert not small.finished()
    assert lockinfo(r, "s")["used"] == 5
    assert release(r, "s", "a") == 0
    rep = small.result()
    assert rep[0] == 1 and rep[3] == 1
    info = lockinfo(r, "s")
    assert info["used"] == 4 and info["waiters"] == []
    assert [h.owner for h in info["holders"]] == ["big", "small"]


# --------------------------------------------------------------------------
# FG.MLOCK / FG.MUNLOCK

def test_mlock_one_token_on_all_keys(r):
    keys = ["{o}:a", "{o}:b", "{o}:c"]
    rep = mlock(r, keys, "m", 10000)
    assert rep[0] == 1 and rep[3] == 3, rep
    assert_ttl(rep[2], 10000)
    for k in keys:
        info = lockinfo(r, k)
        assert info["kind"] == "lock"
        assert [tuple(h[:3]) + (h.token,) for h in info["holders"]] == [
            ("m", "exclusive", 1, rep[1])]
        assert_ttl(r.pttl(k), 10000)
    # ordinary lock keys
    assert extend(r, keys[0], "m", 20000) == 1
    assert_ttl(r.pttl(keys[0]), 20000)
    assert unlock(r, keys[0], "m") == 0
    assert munlock(r, keys, "m") == 2
    assert munlock(r, keys, "m") == 0
    assert r.exists(*keys) == 0


def test_mlock_all_or_nothing(r):
    lock(r, "k2", "b", 10000)
    pttl = r.pttl("k2")
    d0 = dirty(r)
    assert_denied(mlock(r, ["k1", "k2", "k3"], "m", 10000), pttl)
    assert r.exists("k1", "k3") == 0
    assert dirty(r) == d0
    assert holders(r, "k2") == ["b"]
    assert unlock(r, "k2", "b") == 0
    assert mlock(r, ["k1", "k2", "k3"], "m", 10000)[0] == 1


def test_mlock_bad_keys(r):
    for args in ([2, "k", "k", "m", 1000], [0, "m", 1000], [65] + ["k%d" % i for i in range(65)] + ["m", 1000],
                 [3, "k1", "k2", "m", 1000], [-1, "m", 1000]):
        with pytest.raises(redis.ResponseError):
            r.execute_command("FG.MLOCK", *args)
    assert r.dbsize() == 0
    keys = ["k%d" % i for i in range(64)]
    rep = mlock(r, keys, "m2", 10000)
    assert rep[0] == 1 and rep[3] == 64
    assert munlock(r, keys, "m2") == 64


def test_waiting_mlock_granted_when_the_last_key_frees(r, spawn):
    lock(r, "k1", "b", 30000)
    lock(r, "k2", "c", 30000)
    w = spawn("FG.MLOCK", 2, "k1", "k2", "m", 10000, "WAIT", 30000)
    enqueue(r, w, "m", "k1", "k2")
    assert unlock(r, "k1", "b") == 0
    time.sleep(0.2)
    assert not w.finished()
    assert holders(r, "k1") == [] and queue(r, "k1") == ["m"]
    # k1 is free, but m waits for it first
    assert lock(r, "k1", "d", 1000) == [0, 0, 0, 0]
    assert unlock(r, "k2", "c") == 0
    rep = w.result()
    assert rep[0] == 1 and rep[3] == 2, rep
    assert holders(r, "k1") == ["m"] and holders(r, "k2") == ["m"]
    assert lockinfo(r, "k1")["holders"][0].token == rep[1] == lockinfo(r, "k2")["holders"][0].token


def test_mlock_waiter_leaves_every_queue(r, spawn, server):
    lock(r, "k2", "b", 10000)
    pttl = r.pttl("k2")
    with RawClient(server.port) as rc:
        t0 = time.monotonic()
        rep = ints(rc.execute("FG.MLOCK", 2, "k1", "k2", "m", 1000, "WAIT", 300))
        assert 0.25 <= time.monotonic() - t0 < PROMPT_S
    assert_denied(rep, pttl)
    assert lockinfo(r, "k1") is None and queue(r, "k2") == []
    w = spawn("FG.MLOCK", 2, "k1", "k2", "m", 1000, "WAIT", 0)
    enqueue(r, w, "m", "k1", "k2")
    assert r.execute_command("CLIENT", "KILL", "ID", w.id) == 1
    wait_for(lambda: lockinfo(r, "k1") is None and queue(r, "k2") == [], timeout=10)
    assert lock(r, "k1", "d", 1000)[0] == 1


def test_semaphore_wait_timeout(r, server):
    acquire(r, "s", 2, "a", 2, 10000)
    pttl = r.pttl("s")
    with RawClient(server.port) as rc:
        t0 = time.monotonic()
        rep = ints(rc.execute("FG.ACQUIRE", "s", 2, "b", 1, 1000, "WAIT", 300))
        assert 0.25 <= time.monotonic() - t0 < PROMPT_S
    assert_denied(rep, pttl)
    assert queue(r, "s") == []


def test_opposite_order_mlocks_both_complete(r, spawn):
    mlock(r, ["k1", "k2"], "x", 30000)
    a = spawn("FG.MLOCK", 2, "k1", "k2", "A", 30000, "WAIT", 30000)
    enqueue(r, a, "A", "k1", "k2")
    b = spawn("FG.MLOCK", 2, "k2", "k1", "B", 30000, "WAIT", 30000)
    enqueue(r, b, "B", "k1", "k2")
    assert queue(r, "k1") == ["A", "B"] and queue(r, "k2") == ["A", "B"]
    assert munlock(r, ["k1", "k2"], "x") == 2
    ra = a.result()
    assert ra[0] == 1
    assert not b.finished()
    assert munlock(r, ["k2", "k1"], "A") == 2
    rb = b.result()
    assert rb[0] == 1 and rb[1] > ra[1]
    assert munlock(r, ["k1", "k2"], "B") == 2


def test_mlocks_in_a_ring_never_deadlock(server):
    # three lockers on (k1,k2), (k2,k3), (k3,k1), each in a loop
    rounds = 15
    errors = []

    def worker(keys, owner):
        c = server.client(socket_timeout=30)
        try:
            for _ in range(rounds):
                rep = mlock(c, keys, owner, 5000, "WAIT", 20000)
                if rep[0] != 1 or rep[3] != 2:
                    errors.append((owner, rep))
                    return
                if munlock(c, keys, owner) != 2:
                    errors.append((owner, "munlock"))
                    return
        except Exception as e:  # noqa: BLE001
            errors.append((owner, e))
        finally:
            c.close()

    c0 = server.client()
    c0.flushall()
    threads = [threading.Thread(target=worker, args=(keys, "o%d" % i), daemon=True)
               for i, keys in enumerate([["k1", "k2"], ["k2", "k3"], ["k3", "k1"]])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert errors == []
    assert c0.exists("k1", "k2", "k3") == 0
    c0.close()


# --------------------------------------------------------------------------
# FG.EXTEND, FG.LOCKINFO

def test_extend(r):
    lock(r, "k", "a", 5000)
    assert extend(r, "k", "a", 20000) == 1
    assert_ttl(r.pttl("k"), 20000)
    assert_ttl(lockinfo(r, "k")["holders"][0].ttl, 20000)
    # shorter: the lease now ends lease_ms from now
    assert extend(r, "k", "a", 3000) == 1
    assert_ttl(r.pttl("k"), 3000)
    d0 = dirty(r)
    assert extend(r, "k", "b", 20000) == 0
    assert extend(r, "none", "a", 20000) == 0
    assert dirty(r) == d0
    assert r.exists("none") == 0
    # semaphores too
    acquire(r, "s", 3, "a", 1, 1000)
    assert extend(r, "s", "a", 15000) == 1
    assert_ttl(r.pttl("s"), 15000)
    # after expiry
    lock(r, "e", "a", 50)
    time.sleep(0.2)
    assert extend(r, "e", "a", 20000) == 0
    assert r.exists("e") == 0


def test_lockinfo_fields(r, spawn):
    assert lockinfo(r, "none") is None
    tok = lock(r, "k", "a", 10000)[1]
    w = spawn("FG.LOCK", "k", "b", 5000, "SHARED", "WAIT", 30000)
    enqueue(r, w, "b", "k")
    time.sleep(0.3)
    info = lockinfo(r, "k")
    t_after = time.monotonic()
    assert info["kind"] == "lock" and info["capacity"] == 0 and info["used"] == 1
    (h,) = info["holders"]
    assert (h.owner, h.mode, h.count, h.token) == ("a", "exclusive", 1, tok)
    assert_ttl(h.ttl, 10000)
    (wt,) = info["waiters"]
    assert (wt.owner, wt.mode, wt.count) == ("b", "shared", 1)
    assert 250 <= wt.waited_ms <= (t_after - w.t0) * 1000 + 5, wt
    assert info["next_token"] > tok
    assert unlock(r, "k", "a") == 0
    assert w.result()[0] == 1
    acquire(r, "s", 7, "a", 3, 10000)
    info = lockinfo(r, "s")
    assert (info["kind"], info["capacity"], info["used"]) == ("semaphore", 7, 3)
    assert [h[:3] for h in info["holders"]] == [("a", "exclusive", 3)]


# --------------------------------------------------------------------------
# fencing

def test_fence_fset_fget(r):
    assert fget(r, "f") == [1, 0, None]
    assert r.exists("f") == 0
    assert r.execute_command("FG.FENCE", "f", 10) == 1
    assert r.execute_command("FG.FENCE", "f", 10) == 1       # equal passes
    d0 = dirty(r)
    assert r.execute_command("FG.FENCE", "f", 9) == 0
    assert dirty(r) == d0
    assert fget(r, "f") == [1, 10, None]
    assert r.execute_command("FG.FSET", "f", 10, "v1") == 1
    assert r.execute_command("FG.FSET", "f", 10, "v1b") == 1  # one grant, many writes
    d0 = dirty(r)
    assert r.execute_command("FG.FSET", "f", 9, "old") == 0
    assert dirty(r) == d0
    assert fget(r, "f") == [1, 10, b"v1b"]
    assert r.execute_command("FG.FSET", "f", 11, "v2") == 1
    assert fget(r, "f") == [1, 11, b"v2"]
    # FGET with a stale token: refused, nothing recorded
    assert fget(r, "f", 5) == [0, 11, None]
    assert fget(r, "f") == [1, 11, b"v2"]
    # FGET with a newer token records it
    assert fget(r, "f", 12) == [1, 12, b"v2"]
    assert r.execute_command("FG.FSET", "f", 11, "late") == 0
    assert fget(r, "f") == [1, 12, b"v2"]
    # FENCE keeps the value; an empty value is a value
    assert r.execute_command("FG.FENCE", "f", 13) == 1
    assert fget(r, "f") == [1, 13, b"v2"]
    assert r.execute_command("FG.FSET", "g", 1, "") == 1
    assert fget(r, "g") == [1, 1, b""]
    # FGET with a token on a missing key records it
    assert fget(r, "h", 7) == [1, 7, None]
    assert r.execute_command("FG.FSET", "h", 6, "x") == 0
    assert r.execute_command("FG.FSET", "h", MAX_TOKEN, "x") == 1
    assert fget(r, "h") == [1, MAX_TOKEN, b"x"]


def test_fence_token_bounds(r):
    for cmd in (["FG.FENCE", "f", 0], ["FG.FENCE", "f", 2 ** 63], ["FG.FENCE", "f", -1],
                ["FG.FSET", "f", 0, "v"], ["FG.FGET", "f", 0], ["FG.FENCE", "f", "x"]):
        with pytest.raises(redis.ResponseError):
            r.execute_command(*cmd)
    assert r.exists("f") == 0


def test_fencing_read_modify_write(r):
    # the older holder pauses past its lease; the newer one reads first
    t1 = lock(r, "L", "A", 80)[1]
    rep = lock_once_free(r, "L", "B", 10000)
    t2 = rep[1]
    assert t2 > t1
    assert r.execute_command("FG.FSET", "res", t1 - 1, "v0") == 1
    assert fget(r, "res", t2) == [1, t2, b"v0"]
    assert r.execute_command("FG.FSET", "res", t1, "from A") == 0
    assert r.execute_command("FG.FSET", "res", t2, "from B") == 1
    assert fget(r, "res") == [1, t2, b"from B"]
    # the older holder's write lands first: the newer read sees it
    assert unlock(r, "L", "B") == 0
    t3 = lock(r, "L", "C", 80)[1]
    rep = lock_once_free(r, "L", "D", 10000)
    t4 = rep[1]
    assert r.execute_command("FG.FSET", "res", t3, "from C") == 1
    assert fget(r, "res", t4) == [1, t4, b"from C"]
    assert r.execute_command("FG.FSET", "res", t3, "C again") == 0
    assert fget(r, "res") == [1, t4, b"from C"]


# --------------------------------------------------------------------------
# WRONGTYPE

def wrongtype(c, *args):
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        c.execute_command(*args)


def test_wrongtype(r):
    r.set("str", "x")
    lock(r, "lk", "a", 10000)
    acquire(r, "sem", 3, "a", 1, 10000)
    r.execute_command("FG.FSET", "fen", 5, "v")
    for key in ("str", "fen"):
        wrongtype(r, "FG.LOCK", key, "a", 1000)
        wrongtype(r, "FG.UNLOCK", key, "a")
        wrongtype(r, "FG.ACQUIRE", key, 3, "a", 1, 1000)
        wrongtype(r, "FG.RELEASE", key, "a")
        wrongtype(r, "FG.MLOCK", 2, "free", key, "a", 1000)
        wrongtype(r, "FG.EXTEND", key, "a", 1000)
        wrongtype(r, "FG.LOCKINFO", key)
    for key in ("str", "lk", "sem"):
        wrongtype(r, "FG.FENCE", key, 6)
        wrongtype(r, "FG.FSET", key, 6, "v")
        wrongtype(r, "FG.FGET", key)
    wrongtype(r, "FG.LOCK", "sem", "b", 1000)
    wrongtype(r, "FG.MLOCK", 1, "sem", "b", 1000)
    wrongtype(r, "FG.ACQUIRE", "lk", 3, "b", 1, 1000)
    assert r.exists("free") == 0
    assert r.get("str") == b"x"
    assert fget(r, "fen") == [1, 5, b"v"]
    assert holders(r, "lk") == ["a"] and holders(r, "sem") == ["a"]


# --------------------------------------------------------------------------
# bad input

@pytest.mark.parametrize("argv", [
    ["FG.LOCK", "k", "", 1000],
    ["FG.LOCK", "k", "o" * 257, 1000],
    ["FG.LOCK", "k", "b", 0],
    ["FG.LOCK", "k", "b", -5],
    ["FG.LOCK", "k", "b", 10 ** 12 + 1],
    ["FG.LOCK", "k", "b", "ten"],
    ["FG.LOCK", "k", "b", 1000, "WAIT"],
    ["FG.LOCK", "k", "b", 1000, "WAIT", -1],
    ["FG.LOCK", "k", "b", 1000, "WAIT", 10 ** 12 + 1],
    ["FG.LOCK", "k", "b", 1000, "NOPE"],
    ["FG.LOCK", "k", "b"],
    ["FG.UNLOCK", "k"],
    ["FG.EXTEND", "k", "a", 0],
    ["FG.EXTEND", "k", "a", 10 ** 12 + 1],
    ["FG.ACQUIRE", "k", 3, "a", 1, 1000],   # a lock key: WRONGTYPE
    ["FG.RELEASE", "k"],
    ["FG.MLOCK", 1, "k", "", 1000],
])
def test_bad_input_changes_nothing(r, argv):
    lock(r, "k", "a", 30000)
    before = settled(lockinfo(r, "k"))
    d0 = dirty(r)
    with pytest.raises(redis.ResponseError):
        r.execute_command(*argv)
    assert settled(lockinfo(r, "k")) == before
    assert dirty(r) == d0
    assert r.dbsize() == 1


def test_limits_accepted(r):
    rep = lock(r, "k", "o" * 256, 10 ** 12)
    assert rep[0] == 1
    assert_ttl(rep[2], 10 ** 12)
    assert_ttl(r.pttl("k"), 10 ** 12)
    assert holders(r, "k") == ["o" * 256]
    owner = b"\x00\xffbin\r\n"
    assert lock(r, "b", owner, 1000)[0] == 1
    assert lockinfo(r, "b")["holders"][0].owner == s(owner)
    assert unlock(r, "b", owner) == 0
    rep = lock(r, "w", "a", 1000, "WAIT", 10 ** 12)
    assert rep[0] == 1


# --------------------------------------------------------------------------
# replicas

def test_replica_answers_readonly_and_shows_holders(server):
    m = server.client()
    m.flushall()
    with Server(["--replicaof", "127.0.0.1", str(server.port)]) as replica:
        c = replica.client()
        wait_replica_synced(m, c)
        tok = lock(m, "k", "a", 30000)[1]
        acquire(m, "s", 4, "a", 2, 30000)
        wait_replica_synced(m, c)
        info = lockinfo(c, "k")
        assert [tuple(h[:3]) + (h.token,) for h in info["holders"]] == [("a", "exclusive", 1, tok)]
        assert info["waiters"] == []
        assert lockinfo(c, "s")["used"] == 2
        assert_ttl(c.pttl("k"), 30000)
        for cmd in (["FG.LOCK", "k", "b", 1000], ["FG.LOCK", "n", "b", 1000, "WAIT", 100],
                    ["FG.UNLOCK", "k", "a"], ["FG.ACQUIRE", "s", 4, "b", 1, 1000],
                    ["FG.RELEASE", "s", "a"], ["FG.MLOCK", 1, "n", "b", 1000],
                    ["FG.MUNLOCK", 1, "k", "a"], ["FG.EXTEND", "k", "a", 1000],
                    ["FG.FORCEUNLOCK", "k"], ["FG.FENCE", "f", 1], ["FG.FSET", "f", 1, "v"]):
            with pytest.raises(redis.exceptions.ReadOnlyError):
                c.execute_command(*cmd)
        assert holders(c, "k") == ["a"]
        c.close()
    m.close()


# --------------------------------------------------------------------------
# INFO floodgate_locks

def test_info_counters(r, server, spawn):
    st0 = lock_stats(r)
    t1 = lock(r, "k", "a", 30000)[1]
    st = lock_stats(r)
    assert st["floodgate_lock_grants"] == st0["floodgate_lock_grants"] + 1
    next_token_of(lambda: lock_stats(r)["floodgate_lock_next_token"], t1)
    next_token_of(lambda: lockinfo(r, "k")["next_token"], t1)
    # a waiter
    w = spawn("FG.LOCK", "k", "b", 30000, "WAIT", 30000)
    enqueue(r, w, "b", "k")
    assert lock_stats(r)["floodgate_lock_waiters"] == st0["floodgate_lock_waiters"] + 1
    assert unlock(r, "k", "a") == 0
    t2 = w.result()[1]
    st = lock_stats(r)
    assert st["floodgate_lock_grants"] == st0["floodgate_lock_grants"] + 2
    assert st["floodgate_lock_waited_grants"] == st0["floodgate_lock_waited_grants"] + 1
    assert st["floodgate_lock_waiters"] == st0["floodgate_lock_waiters"]
    next_token_of(lambda: lock_stats(r)["floodgate_lock_next_token"], t2)
    # a timeout
    with RawClient(server.port) as rc:
        assert ints(rc.execute("FG.LOCK", "k", "c", 1000, "WAIT", 100))[0] == 0
    st = lock_stats(r)
    assert st["floodgate_lock_timeouts"] == st0["floodgate_lock_timeouts"] + 1
    assert st["floodgate_lock_waiters"] == st0["floodgate_lock_waiters"]
    # a denial without WAIT is not a timeout, nor a grant
    assert lock(r, "k", "c", 1000)[0] == 0
    st = lock_stats(r)
    assert st["floodgate_lock_timeouts"] == st0["floodgate_lock_timeouts"] + 1
    assert st["floodgate_lock_grants"] == st0["floodgate_lock_grants"] + 2
    # an expired hold, pruned while another holder keeps the key
    lock(r, "sh", "x", 80, "SHARED")
    lock(r, "sh", "y", 30000, "SHARED")
    time.sleep(0.25)
    lock(r, "sh", "z", 30000, "SHARED")
    assert holders(r, "sh") == ["y", "z"]
    st = lock_stats(r)
    assert st["floodgate_lock_expired"] == st0["floodgate_lock_expired"] + 1
    assert st["floodgate_lock_grants"] == st0["floodgate_lock_grants"] + 5


def test_expired_counts_holds_removed_with_their_key(r):
    # "floodgate_lock_expired (holds whose lease ran out)": also when the
    # last holder's lease end is the key's expiry and the key goes first.
    st0 = lock_stats(r)
    lock(r, "k", "a", 60)
    lock(r, "s", "x", 60, "SHARED")
    lock(r, "s", "y", 60, "SHARED")
    wait_for(lambda: r.exists("k", "s") == 0, timeout=10, interval=0.05)
    assert lock_stats(r)["floodgate_lock_expired"] == st0["floodgate_lock_expired"] + 3


def test_grant_in_the_same_turn_as_the_timeout_is_answered(r, spawn):
    # The waiter's timeout passes while the server sleeps; the unlock that
    # grants it runs in the same event-loop turn. It must be told the truth:
    # granted (and holding) or denied (and not holding), never nothing.
    lock(r, "k", "a", 30000)
    w = spawn("FG.LOCK", "k", "b", 30000, "WAIT", 200, timeout=5)
    enqueue(r, w, "b", "k")
    p = r.pipeline(transaction=False)
    p.execute_command("DEBUG", "SLEEP", "0.5")
    p.execute_command("FG.UNLOCK", "k", "a")
    assert p.execute()[1] == 0
    rep = w.result(timeout=5)
    if rep[0] == 1:
        assert [(h.owner, h.token) for h in lockinfo(r, "k")["holders"]] == [("b", rep[1])]
    else:
        assert_denied(rep)
        assert holders(r, "k") == []


def test_watch_sees_lock_writes_only(r, server):
    # A write to a key breaks a WATCH on it (as for the limiters, see
    # test_families.test_watch_sees_writes_only); a denial writes nothing.
    other = server.client()
    lock(r, "k", "a", 30000)
    r.execute_command("FG.FSET", "f", 5, "v")
    cases = [
        (["FG.LOCK", "k", "b", 1000], False),          # denied
        (["FG.UNLOCK", "k", "b"], False),               # not the owner
        (["FG.FSET", "f", 4, "x"], False),              # stale
        (["FG.LOCKINFO", "k"], False),
        (["FG.EXTEND", "k", "a", 30000], True),
        (["FG.LOCK", "k", "a", 30000, "REENTRANT"], True),
        (["FG.UNLOCK", "k", "a"], True),
        (["FG.FSET", "f", 6, "y"], True),
        (["FG.FENCE", "f", 7], True),
        (["FG.FORCEUNLOCK", "k"], True),
        (["FG.MLOCK", 1, "k", "m", 30000], True),
        (["FG.MUNLOCK", 1, "k", "m"], True),
        (["FG.ACQUIRE", "s", 3, "a", 1, 30000], True),
        (["FG.RELEASE", "s", "a"], True),
    ]
    broken = []
    for cmd, writes in cases:
        key = "s" if cmd[0] in ("FG.ACQUIRE", "FG.RELEASE") else (
            "f" if cmd[0] in ("FG.FSET", "FG.FENCE") else "k")
        with r.pipeline(transaction=True) as p:
            p.watch(key)
            other.execute_command(*cmd)
            p.multi()
            p.set("marker", "1")
            try:
                p.execute()
                aborted = False
            except redis.WatchError:
                aborted = True
        if aborted != writes:
            broken.append((cmd, "aborted" if aborted else "not aborted"))
    other.close()
    assert broken == []


def test_mlock_keys_are_routed_in_a_cluster():
    # docs: "On a cluster, the keys must be in one hash slot". One node
    # serving slots 0-8000: "b" (3300) and "c" (7365) are served, "a"
    # (15495) is not.
    with Server(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-require-full-coverage", "no"]) as node, \
            RawClient(node.port) as rc:
        rc.execute("CLUSTER", "ADDSLOTSRANGE", 0, 8000)
        wait_for(lambda: b"cluster_state:ok" in rc.execute("CLUSTER", "INFO"),
                 timeout=20, interval=0.05)
        assert [int(rc.execute("CLUSTER", "KEYSLOT", k)) for k in "abc"] == [15495, 3300, 7365]
        rep = ints(rc.execute("FG.MLOCK", 2, "b", "{b}:x", "o", 1000))
        assert rep[0] == 1 and rep[3] == 2
        assert rc.execute("FG.MUNLOCK", 2, "b", "{b}:x", "o") == 2
        # like FG.LOCK on a slot this node does not serve
        assert rc.error_of("FG.LOCK", "a", "o", 1000).startswith("CLUSTERDOWN")
        assert rc.error_of("FG.MLOCK", 1, "a", "o", 1000).startswith("CLUSTERDOWN")
        assert rc.error_of("FG.MUNLOCK", 1, "a", "o").startswith("CLUSTERDOWN")
        # keys of two slots
        assert rc.error_of("FG.MLOCK", 2, "b", "c", "o", 1000).startswith("CROSSSLOT")
        assert rc.error_of("FG.MUNLOCK", 2, "b", "c", "o").startswith("CROSSSLOT")
        assert rc.execute("EXISTS", "b") == 0 and rc.execute("DBSIZE") == 0


# -- regressions found in review ------------------------------------------------------


def test_multi_waiter_failing_lets_the_queue_behind_it_go(r, spawn):
    """Regression: a multi-key waiter failed with WRONGTYPE (one of its keys
    became a string) left its other queue unserved: the waiter behind it on
    a free key waited for ever, and newcomers were refused behind it."""
    lock(r, "{t}k1", "h", 300)
    a = spawn("FG.MLOCK", 2, "{t}k1", "{t}k2", "a", 10000, "WAIT", 0)
    enqueue(r, a, "a", "{t}k1", "{t}k2")
    b = spawn("FG.LOCK", "{t}k2", "b", 10000, "WAIT", 0)
    enqueue(r, b, "b", "{t}k2")
    r.set("{t}k1", "x")  # at h's lease end, a's request can never be granted
    with pytest.raises(RespError, match="WRONGTYPE"):
        a.result()
    rep = b.result()
    assert rep[0] == 1 and rep[3] == 1, rep
    assert holders(r, "{t}k2") == ["b"] and queue(r, "{t}k2") == []


@pytest.mark.usefixtures("effect_commands")  # FG.HOLD
def test_mlock_over_a_shared_hold_is_refused_like_lock(r, spawn):
    """Regression: FG.MLOCK on a key its owner reads (an upgrade) answered
    [0,...] or queued for ever, where FG.LOCK refuses it: two such readers
    waited on each other and starved every queue they were in."""
    lock(r, "{u}a", "o1", 10000, "SHARED")
    lock(r, "{u}a", "o2", 10000, "SHARED")
    for opts in ((), ("WAIT", 0)):
        with pytest.raises(redis.ResponseError, match="owner holds a shared lock"):
            mlock(r, ["{u}a", "{u}b"], "o1", 3000, *opts)
    assert queue(r, "{u}a") == [] and queue(r, "{u}b") == []
    # a waiting multi-lock whose owner takes a shared hold meanwhile fails
    # when it reaches the head instead of blocking the queues behind it
    lock(r, "{v}a", "h", 300)
    m = spawn("FG.MLOCK", 2, "{v}a", "{v}b", "o3", 3000, "WAIT", 0)
    enqueue(r, m, "o3", "{v}a", "{v}b")
    r.execute_command("FG.HOLD", "{v}b", "lock", 0, "o3", "shared", 1,
                      time.time_ns() // 1000 + 10 ** 7, 1)
    c = spawn("FG.LOCK", "{v}c", "x", 1000, "WAIT", 0)  # unrelated: not blocked
    c.start()
    assert c.result()[0] == 1
    with pytest.raises(RespError, match="owner holds a shared lock"):
        m.result()
    assert queue(r, "{v}a") == [] and queue(r, "{v}b") == []


def test_shortened_lease_wakes_the_waiters_at_its_new_end(r, spawn):
    """Regression: FG.EXTEND to a shorter lease left the queue's timer at the
    old lease end, so a semaphore permit freed early went unused."""
    acquire(r, "sem", 2, "h1", 1, 30000)
    acquire(r, "sem", 2, "h2", 1, 30000)
    w = spawn("FG.ACQUIRE", "sem", 2, "w", 1, 30000, "WAIT", 0)
    enqueue(r, w, "w", "sem")
    start = time.monotonic()
    assert extend(r, "sem", "h1", 100) == 1
    rep = w.result(timeout=10)
    assert rep[0] == 1 and rep[3] == 1, rep
    assert time.monotonic() - start < 10  # not at the old lease end (30 s)
    assert sorted(holders(r, "sem")) == ["h2", "w"]


@pytest.mark.usefixtures("effect_commands")  # FG.HOLD
def test_mlock_after_serving_turned_a_key_into_a_semaphore(r, spawn):
    """Regression: FG.MLOCK prunes its keys and serves their waiters first; a
    semaphore waiter could thereby turn one key into a semaphore, and
    FG.MLOCK then decided against it as if it were a lock."""
    acquire(r, "{s}k", 1, "h", 1, 60000)
    w = spawn("FG.ACQUIRE", "{s}k", 1, "w", 1, 60000, "WAIT", 0)
    enqueue(r, w, "w", "{s}k")
    script = """
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('FG.HOLD', KEYS[1], 'lock', 0, 'x', 'exclusive', 1, now + 2000, 5)
local deadline = now + 4000
while true do
    t = redis.call('TIME')
    if tonumber(t[1]) * 1000000 + tonumber(t[2]) > deadline then break end
end
return redis.call('FG.MLOCK', 1, KEYS[1], 'o', 1000)
"""
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.eval(script, 1, "{s}k")
    rep = w.result()
    assert rep[0] == 1, rep
    assert holders(r, "{s}k") == ["w"]
