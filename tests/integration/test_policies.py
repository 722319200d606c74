"""Policies (docs/policies.md): FG.POLICY SET/DEL/GET/LIST/ALLOW/DENY/UNLIST,
FG.CHECK and its waiting, FG.PLSTATE, the floodgate_policies section of
INFO, keyspace events, persistence and replication.

Decisions are checked to the number on the explicit-time server (`AT`):
each limit of a policy must answer what the command of its algorithm
answers for the same requests at the same instants, and several limits
must be all or nothing. Waiting clients are real blocked clients, each a
connection of its own in a thread (Waiter); tests learn that a request is
queued from the policy's `waited` counter before going on, and assert
orders and "well before the timeout", never tight latencies.

Policies survive FLUSHALL, so every test starts and ends with none.
"""

import os
import socket
import threading
import time

import pytest
import redis

from harness import T0, RawClient, RespError, Server, s, wait_for, wait_replica_synced
from topology import (aof_command_names, assert_no_crash, digest, read_log,
                      replicated_pair, wait_aof_rewrite_done)

MS = 1000                      # microseconds per millisecond
PROMPT_S = 5.0                 # "at once": a blocked client answers within this
WINDOW_START = T0 - T0 % (60_000 * MS)   # the 60 s window holding T0 (20 s before it)


# --------------------------------------------------------------------------
# helpers

def clear_policies(c):
    for name in c.execute_command("FG.POLICY", "LIST"):
        c.execute_command("FG.POLICY", "DEL", name)


@pytest.fixture
def pr(r):
    """The session server's client, without policies."""
    clear_policies(r)
    yield r
    clear_policies(r)


@pytest.fixture
def pt(t):
    """The explicit-time server's client, without policies."""
    clear_policies(t)
    yield t
    clear_policies(t)


def pset(c, name, *rules):
    assert c.execute_command("FG.POLICY", "SET", name, *rules) in (b"OK", "OK", True)


def decoded(rep):
    rep = [int(x) if isinstance(x, int) else s(x) for x in rep]
    return rep


def check(c, policy, key, *opts, at=None):
    args = ["FG.CHECK", policy, key, *opts]
    if at is not None:
        args += ["AT", at]
    return decoded(c.execute_command(*args))


def pget(c, name):
    """FG.POLICY GET as a dict, the field names and their order checked."""
    rep = c.execute_command("FG.POLICY", "GET", name)
    names = [s(x) for x in rep[0::2]]
    assert names == ["name", "limits", "penalty", "shadow", "allowlist", "denylist", "allowed",
                     "denied", "banned", "shadow_denied", "waited"], rep
    d = dict(zip(names, rep[1::2]))
    d["name"] = s(d["name"])
    d["limits"] = [s(x) for x in d["limits"]]
    d["penalty"] = s(d["penalty"])
    for name in ("allowlist", "denylist"):  # [kind, entries(, error, capacity)]
        kind, entries, *bloom = d[name]
        d[name] = [s(kind), int(entries)] + ([s(bloom[0]), int(bloom[1])] if bloom else [])
    return d


def counters(c, name):
    d = pget(c, name)
    return {k: d[k] for k in ("allowed", "denied", "banned", "shadow_denied", "waited")}


def rules_of(c, name):
    """GET without the counters: what must be equal across copies."""
    d = pget(c, name)
    return {k: d[k] for k in ("name", "limits", "penalty", "shadow", "allowlist", "denylist")}


def five(rep):
    return [int(x) for x in rep]


class Events:
    """Keyspace events of one key (notify-keyspace-events set for module
    events); each read ends with a marker, so it holds every event of the
    commands sent before it."""

    MARKER = "policy:event-marker"

    def __init__(self, c, key):
        self.c = c
        self.old = c.config_get("notify-keyspace-events")["notify-keyspace-events"]
        c.config_set("notify-keyspace-events", "KEA")
        self.ps = c.pubsub(ignore_subscribe_messages=True)
        self.ps.subscribe("__keyspace@0__:" + key, "__keyspace@0__:" + self.MARKER)
        self.drain()

    def drain(self):
        self.c.set(self.MARKER, 1)
        out = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self.ps.get_message(timeout=0.1)
            if m is None or m.get("type") != "message":
                continue
            if s(m["channel"]).endswith(self.MARKER):
                return out
            out.append(s(m["data"]))
        raise AssertionError("the marker's event never came (events so far: %r)" % out)

    def close(self):
        self.ps.close()
        self.c.delete(self.MARKER)
        self.c.config_set("notify-keyspace-events", self.old)


class Waiter:
    """One connection sending one command from a thread of its own, so that
    the command may block in the server."""

    def __init__(self, port, args, timeout=40):
        self.conn = RawClient(port, timeout=timeout)
        self.id = int(self.conn.execute("CLIENT", "ID"))
        self.args = args
        self.reply = None
        self.error = None
        self.done = threading.Event()
        self.finished_at = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        try:
            self.reply = decoded(self.conn.execute(*self.args))
        except Exception as e:  # noqa: BLE001 - reported by result()
            self.error = e
        self.finished_at = time.monotonic()
        self.done.set()

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
        self.conn.close()


@pytest.fixture
def spawn(server):
    made = []

    def make(*args):
        w = Waiter(server.port, args)
        made.append(w)
        return w

    yield make
    for w in made:
        w.hang_up()
    ids = {w.id for w in made}
    c = server.client()
    wait_for(lambda: not ids & {int(x["id"]) for x in c.client_list()}, timeout=10)
    c.close()


def queue_behind(c, w, policy, waited_before):
    """Starts w and waits until the policy counts it as waiting."""
    w.start()
    wait_for(lambda: counters(c, policy)["waited"] > waited_before, timeout=10)
    assert not w.done.is_set(), w.reply
    return counters(c, policy)["waited"]


# --------------------------------------------------------------------------
# policies

def test_set_get_list_del(pr):
    pset(pr, "api.search", "LIMIT", "token", "10", "10", "LIMIT", "FIXED", "1000", "86400000",
         "PENALTY", "60000", "AFTER", "5", "WITHIN", "10000")
    pset(pr, "a/b-c_d", "LIMIT", "GCRA", "5", "2.5", "1000.5", "SHADOW",
         "ALLOWLIST", "BLOOM", "0.01", "1000", "DENYLIST", "EXACT")
    pset(pr, "z", "LIMIT", "SLIDING", "3", "1500", "LIMIT", "LEAKY", "4", "0.5",
         "PENALTY", "2000")
    assert s(pr.execute_command("FG.POLICY", "LIST")) == ["a/b-c_d", "api.search", "z"]
    d = pget(pr, "api.search")
    assert d["name"] == "api.search"
    assert d["limits"] == [["TOKEN", "10", "10"], ["FIXED", "1000", "86400000"]]
    assert d["penalty"] == ["60000", "5", "10000"] and d["shadow"] == 0
    assert d["allowlist"] == ["exact", 0] and d["denylist"] == ["exact", 0]
    assert counters(pr, "api.search") == dict(allowed=0, denied=0, banned=0, shadow_denied=0,
                                              waited=0)
    d = pget(pr, "a/b-c_d")
    assert d["limits"] == [["GCRA", "5", "2.5", "1000.5"]]
    assert d["penalty"] == [] and d["shadow"] == 1
    assert d["allowlist"] == ["bloom", 0, "0.01", 1000] and d["denylist"] == ["exact", 0]
    d = pget(pr, "z")
    assert d["limits"] == [["SLIDING", "3", "1500"], ["LEAKY", "4", "0.5"]]
    assert d["penalty"] == ["2000", "1", "2000"]   # the defaults: AFTER 1, WITHIN ban_ms
    assert int(pr.execute_command("FG.POLICY", "DEL", "z")) == 1
    assert int(pr.execute_command("FG.POLICY", "DEL", "z")) == 0
    assert s(pr.execute_command("FG.POLICY", "LIST")) == ["a/b-c_d", "api.search"]
    with pytest.raises(redis.ResponseError, match="^no such policy 'z'$"):
        pr.execute_command("FG.POLICY", "GET", "z")
    with pytest.raises(redis.ResponseError, match="^no such policy 'z'$"):
        pr.execute_command("FG.CHECK", "z", "k")
    # 8 limits, and a 64-byte name
    name = "n" * 64
    pset(pr, name, *(["LIMIT", "FIXED", "5", "1000"] * 8))
    assert len(pget(pr, name)["limits"]) == 8
    # FLUSHALL keeps policies
    pr.flushall()
    assert len(pr.execute_command("FG.POLICY", "LIST")) == 3


def test_single_limit_answers_as_its_command(pt):
    """Each algorithm in a policy answers what its own command answers, at
    the same instants, for the same costs."""
    cases = [
        ("TOKEN", ["5", "2"]), ("LEAKY", ["4", "0.5"]), ("GCRA", ["3", "2", "1000"]),
        ("FIXED", ["4", "1000"]), ("SLIDING", ["4", "1000"]),
    ]
    steps = [(0, 1), (0, 2), (10, 3), (300, 1), (600, 4), (900, 0), (1200, 2), (2500, 9),
             (2600, 1), (4000, 3)]
    for algo, params in cases:
        pset(pt, "p", "LIMIT", algo, *params)
        apart_ms = 0  # the longest time between the two calls of a step
        for ms, cost in steps:
            at = T0 + ms * MS
            start = time.time_ns()
            got = check(pt, "p", "pk:" + algo, "COST", cost, at=at)
            want = five(pt.execute_command("FG." + algo, "ck:" + algo, *params, "COST", cost,
                                           "AT", at))
            apart_ms = max(apart_ms, (time.time_ns() - start) / 1e6)
            assert got[:5] == want, (algo, ms, cost, got, want)
            assert got[5] == "limit:1" and got[6] == 0
            # the same expiry, each counted from the server's clock when
            # written (in the last step that wrote, both or neither): apart
            # by at most the time between the two calls of that step
            expiries = [pt.execute_command("PEXPIRETIME", k + algo) for k in ("pk:", "ck:")]
            assert abs(expiries[0] - expiries[1]) <= apart_ms + 1, (algo, ms, expiries)


def test_all_or_nothing_with_exact_numbers(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "10", "10", "LIMIT", "FIXED", "15", "60000")
    # the window of T0 ends 40 s later
    end_ms = (WINDOW_START + 60_000 * MS - T0) // MS
    assert end_ms == 40_000
    # 8 of both: the bucket has 2 left, the window 7: the bucket decides
    assert check(pt, "p", "k", "COST", 8, at=T0) == [1, 10, 2, -1, end_ms, "limit:1", 0]
    # 5: the bucket denies (3 more tokens: 300 ms); the window is not charged
    assert check(pt, "p", "k", "COST", 5, at=T0) == [0, 10, 2, 300, end_ms, "limit:1", 0]
    # a second later the bucket is full; the window still has 7: it denies 8
    # until its end, and the bucket is not charged either
    at = T0 + 1000 * MS
    assert check(pt, "p", "k", "COST", 8, at=at) == [0, 15, 7, end_ms - 1000, end_ms - 1000,
                                                     "limit:2", 0]
    assert check(pt, "p", "k", "COST", 7, at=at) == [1, 15, 0, -1, end_ms - 1000, "limit:2", 0]
    # the bucket kept 3 (10 - 7): a peek shows the fewest left, the window's 0
    assert check(pt, "p", "k", "COST", 0, at=at) == [1, 15, 0, -1, end_ms - 1000, "limit:2", 0]
    # cost above a capacity can never be allowed
    assert check(pt, "p", "k2", "COST", 11, at=at) == [0, 10, 10, -1, 0, "limit:1", 0]
    # the key lives until its last limit is full again: the window's end (its
    # TTL counted from the server's clock at the write)
    assert end_ms - 1000 - 5000 < pt.pttl("k") <= end_ms - 1000 + 1
    assert s(pt.type("k")) == "fg-plstat"


def test_key_ttl_follows_the_state(pt):
    # the TTLs count from the server's clock: less what passed since the write
    pset(pt, "p", "LIMIT", "TOKEN", "10", "10")
    start = time.time_ns()
    check(pt, "p", "k", "COST", 4, at=T0)                # full again in 400 ms
    pttl = pt.pttl("k")
    assert 400 - (time.time_ns() - start) / 1e6 - 1 <= pttl <= 401, pttl
    pset(pt, "q", "LIMIT", "TOKEN", "10", "10", "PENALTY", "5000", "AFTER", "3",
         "WITHIN", "30000")
    check(pt, "q", "k2", "COST", 10, at=T0)
    start = time.time_ns()
    check(pt, "q", "k2", "COST", 1, at=T0)               # one denial, counted for 30 s
    pttl = pt.pttl("k2")
    assert 30_000 - (time.time_ns() - start) / 1e6 - 1 <= pttl <= 30_001, pttl
    # a peek writes nothing; a key back to neutral is not created
    check(pt, "p", "k3", "COST", 0, at=T0)
    assert pt.exists("k3") == 0


def test_penalty_box_and_events(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "PENALTY", "5000", "AFTER", "2", "WITHIN", "10000")
    ev = Events(pt, "k")
    try:
        assert check(pt, "p", "k", at=T0) == [1, 1, 0, -1, 1000, "limit:1", 0]
        assert ev.drain() == ["fg.check"]
        # a first denial counts; no event (nothing charged, no ban)
        assert check(pt, "p", "k", at=T0 + 1 * MS) == [0, 1, 0, 999, 999, "limit:1", 0]
        assert ev.drain() == []
        # the second within 10 s bans for 5 s: the answer points at the ban's end
        assert check(pt, "p", "k", at=T0 + 2 * MS) == [0, 1, 0, 5000, 5000, "limit:1", 0]
        assert ev.drain() == ["fg.penalty"]
        # banned: even with tokens back, until the ban ends
        assert check(pt, "p", "k", at=T0 + 3000 * MS) == [0, 0, 0, 2002, 2002, "penalty", 0]
        # a peek during the ban is denied too, and the ban's denials do not count
        assert check(pt, "p", "k", "COST", 0, at=T0 + 4000 * MS)[:6] == [0, 0, 0, 1002, 1002,
                                                                        "penalty"]
        assert check(pt, "p", "k", at=T0 + 5002 * MS) == [1, 1, 0, -1, 1000, "limit:1", 0]
        assert ev.drain() == ["fg.check"]
        # denials further apart than WITHIN never ban
        assert check(pt, "p", "k", at=T0 + 5003 * MS)[0] == 0
        assert check(pt, "p", "k", at=T0 + 16_000 * MS)[0] == 1
        assert check(pt, "p", "k", at=T0 + 16_001 * MS)[:6] == [0, 1, 0, 999, 999, "limit:1"]
        assert ev.drain() == ["fg.check"]
    finally:
        ev.close()
    assert counters(pt, "p") == dict(allowed=3, denied=6, banned=1, shadow_denied=0, waited=0)


def test_cost_above_capacity_counts_towards_the_penalty(pt):
    pset(pt, "p", "LIMIT", "FIXED", "5", "1000", "PENALTY", "1000")
    assert check(pt, "p", "k", "COST", 6, at=T0) == [0, 5, 5, -1, 1000, "limit:1", 0]
    assert check(pt, "p", "k", at=T0 + 10 * MS) == [0, 0, 0, 990, 990, "penalty", 0]


def test_shadow_mode(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "SHADOW")
    assert check(pt, "p", "k", at=T0) == [1, 1, 0, -1, 1000, "limit:1", 0]
    # the denial is answered as allowed, flagged, and charges nothing
    assert check(pt, "p", "k", at=T0 + 500 * MS) == [1, 1, 0, -1, 500, "limit:1", 1]
    assert check(pt, "p", "k", at=T0 + 1000 * MS) == [1, 1, 0, -1, 1000, "limit:1", 0]
    # with a penalty the state evolves as under enforcement: the key is banned
    pset(pt, "q", "LIMIT", "TOKEN", "1", "1", "PENALTY", "3000", "SHADOW")
    assert check(pt, "q", "b", at=T0)[0] == 1
    assert check(pt, "q", "b", at=T0 + 1 * MS) == [1, 1, 0, -1, 3000, "limit:1", 1]
    assert check(pt, "q", "b", at=T0 + 2000 * MS) == [1, 0, 0, -1, 1001, "penalty", 1]
    assert counters(pt, "p") == dict(allowed=3, denied=0, banned=0, shadow_denied=1, waited=0)
    assert counters(pt, "q") == dict(allowed=3, denied=0, banned=1, shadow_denied=2, waited=0)


# --------------------------------------------------------------------------
# lists

def test_exact_lists_and_identity(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1")
    assert int(pt.execute_command("FG.POLICY", "DENY", "p", "bad", "worse", "bad")) == 2
    assert int(pt.execute_command("FG.POLICY", "ALLOW", "p", "vip", "both")) == 2
    assert int(pt.execute_command("FG.POLICY", "DENY", "p", "both")) == 1
    assert int(pt.execute_command("FG.POLICY", "ALLOW", "p", "vip")) == 0
    assert pget(pt, "p")["denylist"] == ["exact", 3]
    assert pget(pt, "p")["allowlist"] == ["exact", 2]
    # the key is the identity by default; ID replaces it
    assert check(pt, "p", "bad", at=T0) == [0, 0, 0, -1, 0, "denylist", 0]
    assert check(pt, "p", "k", "ID", "worse", at=T0) == [0, 0, 0, -1, 0, "denylist", 0]
    assert check(pt, "p", "both", at=T0) == [0, 0, 0, -1, 0, "denylist", 0]  # deny first
    for _ in range(3):
        assert check(pt, "p", "k", "ID", "vip", "COST", 5, at=T0) == [1, 0, 0, -1, 0,
                                                                     "allowlist", 0]
    assert pt.exists("k", "bad", "both") == 0     # lists charge nothing, write nothing
    assert check(pt, "p", "k", at=T0)[:2] == [1, 1]
    assert check(pt, "p", "k", "ID", "someone", at=T0)[0] == 0   # the key's own state
    assert int(pt.execute_command("FG.POLICY", "UNLIST", "p", "DENY", "bad", "nobody")) == 1
    assert int(pt.execute_command("FG.POLICY", "UNLIST", "p", "allow", "vip")) == 1
    assert check(pt, "p", "bad", at=T0)[5] == "limit:1"
    assert check(pt, "p", "k2", "ID", "vip", at=T0)[5] == "limit:1"
    assert counters(pt, "p") == dict(allowed=6, denied=4, banned=0, shadow_denied=0, waited=0)


def test_bloom_lists(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "ALLOWLIST", "BLOOM", "0.001", "100",
         "DENYLIST", "BLOOM", "0.001", "50")
    items = ["10.0.0.%d" % i for i in range(300)]        # beyond the capacity: it grows
    # each new item may be taken for one already there (0.1%): a few are
    added = int(pt.execute_command("FG.POLICY", "DENY", "p", *items))
    assert 295 <= added <= 300
    assert int(pt.execute_command("FG.POLICY", "DENY", "p", *items[:10])) == 0
    assert int(pt.execute_command("FG.POLICY", "ALLOW", "p", "vip", b"\x00\xff")) == 2
    # a Bloom list's error and capacity, so a definition read back can be set again
    assert pget(pt, "p")["denylist"] == ["bloom", added, "0.001", 50]
    assert pget(pt, "p")["allowlist"] == ["bloom", 2, "0.001", 100]
    for item in items[::37]:
        assert check(pt, "p", "k", "ID", item, at=T0)[5] == "denylist"
    assert check(pt, "p", b"\x00\xff", at=T0)[5] == "allowlist"
    with pytest.raises(redis.ResponseError, match="^a Bloom list cannot remove items$"):
        pt.execute_command("FG.POLICY", "UNLIST", "p", "DENY", items[0])


def test_replacing_keeps_lists_of_the_same_kind_and_counters(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "DENYLIST", "BLOOM", "0.01", "100")
    pt.execute_command("FG.POLICY", "ALLOW", "p", "a", "b")
    pt.execute_command("FG.POLICY", "DENY", "p", "x")
    check(pt, "p", "k", at=T0)
    check(pt, "p", "x", at=T0)
    # the allow list stays exact, the deny list Bloom (other parameters: kept)
    pset(pt, "p", "LIMIT", "FIXED", "5", "1000", "DENYLIST", "BLOOM", "0.001", "10")
    assert pget(pt, "p")["allowlist"] == ["exact", 2]
    assert pget(pt, "p")["denylist"] == ["bloom", 1, "0.01", 100]  # the filter kept
    assert check(pt, "p", "x", at=T0)[5] == "denylist"
    assert counters(pt, "p") == dict(allowed=1, denied=2, banned=0, shadow_denied=0, waited=0)
    # a kind that changes starts empty
    pset(pt, "p", "LIMIT", "FIXED", "5", "1000", "ALLOWLIST", "BLOOM", "0.01", "10")
    assert pget(pt, "p")["allowlist"] == ["bloom", 0, "0.01", 10]
    assert pget(pt, "p")["denylist"] == ["exact", 0]
    assert check(pt, "p", "x", at=T0)[5] == "limit:1"


# --------------------------------------------------------------------------
# carrying a key over to new numbers

def peek(c, key, at, policy="p"):
    return check(c, policy, key, "COST", 0, at=at)


def test_rescale_buckets(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "10", "10")
    assert check(pt, "p", "k", "COST", 7, at=T0)[2] == 3
    # 7 used of 10: 93 of 100, at the same rate
    pset(pt, "p", "LIMIT", "TOKEN", "100", "10")
    assert peek(pt, "k", T0) == [1, 100, 93, -1, 700, "limit:1", 0]
    # the used units refill at the new rate: 700 ms of 10/s are 70 ms of 100/s
    pset(pt, "p", "LIMIT", "TOKEN", "100", "100")
    assert peek(pt, "k", T0) == [1, 100, 93, -1, 70, "limit:1", 0]
    # shrunk below what is used: empty, never in debt
    assert check(pt, "p", "k", "COST", 90, at=T0)[2] == 3     # 97 used
    pset(pt, "p", "LIMIT", "TOKEN", "5", "100")
    assert peek(pt, "k", T0) == [1, 5, 0, -1, 50, "limit:1", 0]
    assert check(pt, "p", "k", at=T0) == [0, 5, 0, 10, 50, "limit:1", 0]
    # another algorithm starts full
    pset(pt, "p", "LIMIT", "GCRA", "5", "100", "1000")
    assert peek(pt, "k", T0)[:3] == [1, 5, 5]


def test_rescale_windows_and_removed_limits(pt):
    pset(pt, "p", "LIMIT", "FIXED", "10", "60000", "LIMIT", "SLIDING", "10", "60000")
    check(pt, "p", "k", "COST", 4, at=T0)
    pset(pt, "p", "LIMIT", "FIXED", "20", "60000", "LIMIT", "SLIDING", "6", "60000")
    # the count is kept; the new limit applies to it at once
    assert peek(pt, "k", T0) == [1, 6, 2, -1, 100_000, "limit:2", 0]
    # as FG.SLIDING 6 60000 answers after 4 units
    pt.execute_command("FG.SLIDING", "s", 6, 60000, "COST", 4, "AT", T0)
    want = five(pt.execute_command("FG.SLIDING", "s", 6, 60000, "COST", 3, "AT", T0))
    assert want == [0, 6, 2, 55_000, 100_000]
    assert check(pt, "p", "k", "COST", 3, at=T0) == want + ["limit:2", 0]
    # the second limit removed: the first keeps its 4 of 20
    pset(pt, "p", "LIMIT", "FIXED", "20", "60000")
    assert peek(pt, "k", T0)[:3] == [1, 20, 16]
    # a new window length carries the count into the new window holding now
    pset(pt, "p", "LIMIT", "FIXED", "20", "1000")
    assert peek(pt, "k", T0) == [1, 20, 16, -1, 1000, "limit:1", 0]
    assert peek(pt, "k", T0 + 1000 * MS)[:3] == [1, 20, 20]


def test_rescale_penalty(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "PENALTY", "60000")
    check(pt, "p", "k", at=T0)
    assert check(pt, "p", "k", at=T0)[3] == 60000                   # banned for a minute
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1", "PENALTY", "10000")  # never beyond now + 10 s
    assert check(pt, "p", "k", at=T0 + 1000 * MS)[:6] == [0, 0, 0, 10000, 10000, "penalty"]
    pset(pt, "p", "LIMIT", "TOKEN", "1", "1")                      # no penalty: lifted
    assert check(pt, "p", "k", at=T0 + 2000 * MS)[:2] == [1, 1]


def test_key_of_another_policy(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "5", "1")
    pset(pt, "q", "LIMIT", "TOKEN", "5", "1")
    check(pt, "p", "k", at=T0)
    with pytest.raises(redis.ResponseError, match="^key holds the state of policy 'p'$"):
        pt.execute_command("FG.CHECK", "q", "k", "AT", T0)
    pt.set("str", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        pt.execute_command("FG.CHECK", "q", "str")
    # a deleted policy leaves its keys, which answer no such policy
    pt.execute_command("FG.POLICY", "DEL", "p")
    with pytest.raises(redis.ResponseError, match="^no such policy 'p'$"):
        pt.execute_command("FG.CHECK", "p", "k", "AT", T0)
    assert s(pt.type("k")) == "fg-plstat"


# --------------------------------------------------------------------------
# waiting

def test_waiters_are_served_in_fifo_order(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "3", "10")          # 100 ms per unit
    assert check(pr, "p", "k", "COST", 3)[0] == 1
    waited = 0
    big = spawn("FG.CHECK", "p", "k", "COST", 3, "WAIT", 10000)
    waited = queue_behind(pr, big, "p", waited)
    small = [spawn("FG.CHECK", "p", "k", "COST", 1, "WAIT", 10000) for _ in range(3)]
    for w in small:
        waited = queue_behind(pr, w, "p", waited)
    assert big.result()[:2] == [1, 3]
    for w in small:
        assert w.result()[0] == 1
    order = sorted([big] + small, key=lambda w: w.finished_at)
    assert order == [big] + small, "served out of order"
    c = counters(pr, "p")
    assert c["waited"] == 4 and c["allowed"] == 5 and c["denied"] == 0


def test_a_check_without_wait_does_not_queue(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "2", "2")           # 500 ms per unit
    assert check(pr, "p", "k", "COST", 2)[0] == 1
    w = spawn("FG.CHECK", "p", "k", "COST", 2, "WAIT", 10000)
    queue_behind(pr, w, "p", 0)
    # a request that fits is not refused because of the waiter...
    time.sleep(0.6)
    assert check(pr, "p", "k", "COST", 1)[0] == 1
    # ...nor is a WAIT request that can never fit queued
    assert check(pr, "p", "k", "COST", 3, "WAIT", 5000)[:4] == [0, 2, 0, -1]
    assert w.result()[0] == 1


def test_timeout_behind_another_waiter_charges_nothing(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "2", "1")           # 1 s per unit
    assert check(pr, "p", "k", "COST", 2)[0] == 1
    first = spawn("FG.CHECK", "p", "k", "COST", 2, "WAIT", 10000)      # about 2 s
    waited = queue_behind(pr, first, "p", 0)
    second = spawn("FG.CHECK", "p", "k", "COST", 1, "WAIT", 1200)      # would fit at 1 s
    queue_behind(pr, second, "p", waited)
    rep = second.result(timeout=PROMPT_S)
    assert rep[0] == 0 and rep[3] == 0 and rep[5] == "limit:1", rep
    assert not first.done.is_set()
    assert first.result()[:2] == [1, 2]                 # both units still there for it
    assert check(pr, "p", "k")[0] == 0
    c = counters(pr, "p")
    assert (c["allowed"], c["denied"], c["waited"]) == (2, 2, 2)


def test_head_that_cannot_make_it_is_denied(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "2", "1")           # 1 s per unit
    assert check(pr, "p", "k", "COST", 2)[0] == 1
    w = spawn("FG.CHECK", "p", "k", "COST", 2, "WAIT", 2500)   # retry 2 s: waits
    queue_behind(pr, w, "p", 0)
    time.sleep(1.3)
    assert check(pr, "p", "k", "COST", 1)[0] == 1       # taken in between, without WAIT
    rep = w.result(timeout=PROMPT_S)
    assert rep[0] == 0 and rep[5] == "limit:1" and 500 <= rep[3] <= 1100, rep
    assert check(pr, "p", "k", "COST", 0)[2] >= 1       # the waiter charged nothing


def test_waiting_does_not_ban(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "2", "PENALTY", "30000")
    assert check(pr, "p", "k")[0] == 1
    # without WAIT this denial would ban for 30 s; waiting, it needs 500 ms
    w = spawn("FG.CHECK", "p", "k", "WAIT", 5000)
    t0 = time.monotonic()
    w.start()
    assert w.result()[:2] == [1, 1]
    assert time.monotonic() - t0 < 5
    assert counters(pr, "p")["banned"] == 0
    assert check(pr, "p", "k")[:6] == [0, 1, 0, 30000, 30000, "limit:1"]   # now it bans


def test_wait_inside_multi_or_a_script_answers_at_once(pr):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "0.1")
    check(pr, "p", "k")
    p = pr.pipeline(transaction=True)
    p.execute_command("FG.CHECK", "p", "k", "WAIT", 20000)
    rep = decoded(p.execute()[0])
    assert rep[0] == 0 and rep[3] > 9000, rep
    rep = decoded(pr.eval("return redis.call('FG.CHECK', 'p', KEYS[1], 'WAIT', 20000)", 1, "k"))
    assert rep[0] == 0 and rep[3] > 9000, rep
    assert counters(pr, "p")["waited"] == 0


def test_client_unblock_leaves_waiters_alone(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "2")
    check(pr, "p", "k")
    w = spawn("FG.CHECK", "p", "k", "WAIT", 10000)
    queue_behind(pr, w, "p", 0)
    assert int(pr.execute_command("CLIENT", "UNBLOCK", w.id)) == 0
    assert int(pr.execute_command("CLIENT", "UNBLOCK", w.id, "ERROR")) == 0
    assert w.result()[0] == 1


def test_disconnected_waiter_does_not_stall_the_queue(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "2")           # 500 ms per unit
    check(pr, "p", "k")
    gone = spawn("FG.CHECK", "p", "k", "WAIT", 10000)
    waited = queue_behind(pr, gone, "p", 0)
    stays = spawn("FG.CHECK", "p", "k", "WAIT", 10000)
    queue_behind(pr, stays, "p", waited)
    gone.hang_up()
    assert stays.result()[0] == 1
    # only one unit was taken since: the next is 500 ms away, not 1000
    assert 0 < check(pr, "p", "k")[3] <= 500


def test_policy_deleted_or_replaced_while_waiting(pr, spawn):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "0.2")         # 5 s per unit
    check(pr, "p", "k")
    w = spawn("FG.CHECK", "p", "k", "WAIT", 8000)
    queue_behind(pr, w, "p", 0)
    pset(pr, "p", "LIMIT", "TOKEN", "10", "0.2")        # 1 of 10 used: it fits at once
    assert w.result()[:3] == [1, 10, 8]
    w2 = spawn("FG.CHECK", "p", "k", "COST", 9, "WAIT", 8000)
    w2.start()
    wait_for(lambda: counters(pr, "p")["waited"] == 2, timeout=10)
    pr.execute_command("FG.POLICY", "DEL", "p")
    with pytest.raises(RespError, match="^ERR no such policy 'p'$"):
        w2.result()


@pytest.mark.parametrize("remove", ["DEL", "FG.RESET", "FLUSHDB"])
def test_waiters_are_served_when_the_key_goes(pr, spawn, remove):
    # FLUSHDB once reached only the lock waiters: one callback per server
    # event, and the policies' subscription had replaced the locks'.
    pset(pr, "p", "LIMIT", "FIXED", "1", "60000")
    check(pr, "p", "k")
    w = spawn("FG.CHECK", "p", "k", "WAIT", 86400000)
    queue_behind(pr, w, "p", 0)
    pr.execute_command(*([remove] if remove == "FLUSHDB" else [remove, "k"]))
    assert w.result()[:2] == [1, 1]


def test_reset_deletes_a_policy_key(pt):
    pset(pt, "p", "LIMIT", "TOKEN", "5", "1")
    check(pt, "p", "k", "COST", 5, at=T0)
    assert pt.execute_command("FG.RESET", "k") == 1
    assert pt.exists("k") == 0
    assert check(pt, "p", "k", at=T0)[:3] == [1, 5, 4]


# --------------------------------------------------------------------------
# INFO, explicit time

def test_info_section(pr, server):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "1", "PENALTY", "1000")
    pset(pr, "q.2", "LIMIT", "TOKEN", "1", "1", "SHADOW")
    check(pr, "p", "k")
    check(pr, "p", "k")
    check(pr, "q.2", "k2")
    check(pr, "q.2", "k2")
    info = pr.info("floodgate_policies")
    assert info["floodgate_policies"] == 2
    assert info["floodgate_policy_p"] == dict(allowed=1, denied=1, banned=1, shadow_denied=0,
                                              waited=0)
    assert info["floodgate_policy_q.2"] == dict(allowed=2, denied=0, banned=0, shadow_denied=1,
                                                waited=0)


def test_at_needs_explicit_time(pr):
    pset(pr, "p", "LIMIT", "TOKEN", "1", "1")
    with pytest.raises(redis.ResponseError, match="AT is disabled"):
        pr.execute_command("FG.CHECK", "p", "k", "AT", T0)
    assert pr.exists("k") == 0


# --------------------------------------------------------------------------
# persistence and replication

def populate(c):
    """Policies with lists, and keys in several states."""
    pset(c, "p", "LIMIT", "TOKEN", "10", "1", "LIMIT", "SLIDING", "100", "60000",
         "PENALTY", "60000", "AFTER", "2", "DENYLIST", "BLOOM", "0.01", "100")
    # A window of 10^12 ms (aligned to the epoch, its next end in 2033): one
    # of 60 s ended at a minute's turn between two snapshots of k3's state.
    pset(c, "q", "LIMIT", "FIXED", "3", "1000000000000", "SHADOW", "ALLOWLIST", "EXACT")
    c.execute_command("FG.POLICY", "DENY", "p", *["bad%d" % i for i in range(150)])
    c.execute_command("FG.POLICY", "ALLOW", "q", "vip", b"\x00bin\xff")
    check(c, "p", "k1", "COST", 4)
    check(c, "p", "k2", "COST", 10)
    check(c, "p", "k2")
    check(c, "p", "k2")               # banned
    for _ in range(5):
        check(c, "q", "k3")
    c.set("plain", "x")


def policies_view(c):
    return {name: rules_of(c, name) for name in s(c.execute_command("FG.POLICY", "LIST"))}


def keys_view(c):
    return digest(c), {k: c.execute_command("DUMP", k) for k in ("k1", "k2", "k3")}


def test_debug_reload_and_restart_keep_policies_and_states():
    with Server() as srv:
        c = srv.client()
        populate(c)
        before, keys = policies_view(c), keys_view(c)
        assert c.execute_command("DEBUG", "RELOAD") in (True, b"OK")
        assert policies_view(c) == before and keys_view(c) == keys
        assert check(c, "p", "bad77")[5] == "denylist"
        c.execute_command("SAVE")
        srv.restart()
        c = srv.client()
        assert policies_view(c) == before and keys_view(c) == keys
        assert check(c, "q", "x", "ID", b"\x00bin\xff")[5] == "allowlist"
        assert check(c, "p", "k2")[5] == "penalty"
        # an RDB file replaces the registry: a policy made since is gone
        pset(c, "later", "LIMIT", "TOKEN", "1", "1")
        c.execute_command("DEBUG", "RELOAD", "NOSAVE")
        assert policies_view(c) == before
        assert_no_crash(srv)


def test_aof_with_preamble_keeps_policies_and_logs_states_not_checks():
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"]) as srv:
        c = srv.client()
        populate(c)
        c.execute_command("BGREWRITEAOF")
        wait_aof_rewrite_done(c)
        # after the rewrite: in the incremental file
        pset(c, "r", "LIMIT", "GCRA", "5", "1", "1000")
        c.execute_command("FG.POLICY", "DENY", "q", "late")
        check(c, "r", "k4", "COST", 2)
        before, keys = policies_view(c), keys_view(c)
        names = aof_command_names(srv)
        assert b"FG.PLSTATE" in names and b"FG.POLICY" in names and b"FG.CHECK" not in names
        srv.restart()
        c = srv.client()
        assert policies_view(c) == before and keys_view(c) == keys
        assert check(c, "q", "late")[5] == "denylist"
        assert_no_crash(srv)


def test_aof_rewrite_without_preamble_warns():
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client()
        populate(c)
        c.execute_command("BGREWRITEAOF")
        wait_aof_rewrite_done(c)
        assert "does not keep the 2 policies" in read_log(srv)
        keys = keys_view(c)
        srv.restart()
        c = srv.client()
        # the states are in the rewritten AOF, the policies are not
        assert keys_view(c) == keys
        assert c.execute_command("FG.POLICY", "LIST") == []
        with pytest.raises(redis.ResponseError, match="^no such policy 'p'$"):
            c.execute_command("FG.CHECK", "p", "k1")


def test_replication():
    pair = replicated_pair(["--appendonly", "yes"])
    master, replica, m, r = next(pair)
    try:
        # the replica's own policies go at the full sync
        populate(m)
        wait_replica_synced(m, r)
        assert policies_view(r) == policies_view(m)
        assert digest(r) == digest(m)
        # granted waiters replicate their states from timers
        pset(m, "w", "LIMIT", "TOKEN", "1", "5")
        check(m, "w", "kw")
        w = Waiter(master.port, ["FG.CHECK", "w", "kw", "WAIT", 5000]).start()
        assert w.result()[0] == 1
        m.execute_command("FG.POLICY", "UNLIST", "q", "ALLOW", "vip")
        wait_replica_synced(m, r)
        assert policies_view(r) == policies_view(m)
        assert digest(r) == digest(m)
        assert r.execute_command("DUMP", "kw") == m.execute_command("DUMP", "kw")
        # an expiry that keys share (a fixed window's end) goes out as one
        # kept string: the replica's expiries are the master's, shared or not
        pset(m, "fx", "LIMIT", "FIXED", 100, 60000)
        pset(m, "tk", "LIMIT", "TOKEN", 100, 1)
        keys = []
        for i in range(6):  # a token key i + 1 s ahead between two window keys
            for policy, cost in (("fx", 1), ("tk", i + 1), ("fx", 1)):
                keys.append("exp:%s:%d:%d" % (policy, i, len(keys)))
                check(m, policy, keys[-1], "COST", cost)
        wait_replica_synced(m, r)
        expiries = [m.execute_command("PEXPIRETIME", k) for k in keys]
        assert len({e for k, e in zip(keys, expiries) if ":tk:" in k}) == 6, expiries
        assert [r.execute_command("PEXPIRETIME", k) for k in keys] == expiries
        for cmd in (["FG.CHECK", "p", "k1"], ["FG.POLICY", "SET", "x", "LIMIT", "FIXED", 1, 1],
                    ["FG.POLICY", "DENY", "p", "y"]):
            with pytest.raises(redis.exceptions.ReadOnlyError):
                r.execute_command(*cmd)
        assert pget(r, "p")["denylist"] == pget(m, "p")["denylist"]
        assert pget(r, "p")["denylist"][0] == "bloom"
        names = aof_command_names(master)
        assert b"FG.PLSTATE" in names and b"FG.CHECK" not in names
        # a replica that syncs again gets the master's registry, not its own
        r.execute_command("REPLICAOF", "NO", "ONE")
        pset(r, "stale", "LIMIT", "TOKEN", "1", "1")
        r.execute_command("FG.POLICY", "DEL", "q")
        r.execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
        wait_replica_synced(m, r)
        assert policies_view(r) == policies_view(m)
        assert digest(r) == digest(m)
        assert_no_crash(master)
        assert_no_crash(replica)
    finally:
        next(pair, None)


def test_a_master_that_becomes_a_replica_unblocks_its_waiters():
    with Server() as other, Server() as srv:
        c = srv.client()
        pset(c, "p", "LIMIT", "TOKEN", "1", "0.1")
        check(c, "p", "k")
        w = Waiter(srv.port, ["FG.CHECK", "p", "k", "WAIT", 20000]).start()
        wait_for(lambda: counters(c, "p")["waited"] == 1, timeout=10)
        c.execute_command("REPLICAOF", "127.0.0.1", other.port)
        with pytest.raises(RespError, match="^UNBLOCKED"):
            w.result()
        wait_for(lambda: c.info("replication")["master_link_status"] == "up", timeout=20)
        assert c.execute_command("FG.POLICY", "LIST") == []     # the master's registry
        w.hang_up()
        assert_no_crash(srv)


def test_command_metadata(server):
    with RawClient(server.port) as c:
        info = c.execute("COMMAND", "INFO", "FG.POLICY")[0]
        subs = {s(x[0]): (x[1], sorted(s(f) for f in x[2])) for x in info[9]}
        assert subs == {
            "FG.POLICY|SET": (-4, ["denyoom", "module", "write"]),
            "FG.POLICY|DEL": (3, ["module", "write"]),
            "FG.POLICY|GET": (3, ["module", "readonly"]),
            "FG.POLICY|LIST": (2, ["module", "readonly"]),
            "FG.POLICY|ALLOW": (-4, ["denyoom", "module", "write"]),
            "FG.POLICY|DENY": (-4, ["denyoom", "module", "write"]),
            "FG.POLICY|UNLIST": (-5, ["module", "write"]),
            "FG.POLICY|HELP": (2, ["fast", "loading", "module", "readonly", "stale"]),
        }
        assert c.execute("COMMAND", "GETKEYS", "FG.CHECK", "p", "key", "COST", 1) == [b"key"]
        assert c.execute("COMMAND", "GETKEYS", "FG.PLSTATE", "key", "x") == [b"key"]
