"""lock.lua against the module: on a stock server the script must answer
every lock, semaphore, multi-key and fencing command as floodgate.so does
(docs/locks.md), errors included, and wait as docs/scripts.md ("Locks")
says.

A seeded random walk (reproducible: the seed is the test's name) drives
both servers with the same commands: locks shared and exclusive,
reentrant or not, semaphores of several capacities, multi-key locks,
extends, forced unlocks, fenced writes with tokens up to 2^63 - 1, and
refusals of every argument at and beyond its bounds. Leases are long, so
no lease ends during a walk (test_leases_end_alike has those). After
every step the replies must be equal but for

- tokens: each server's own counter (the module's one per server, the
  script's one per key, both floored by the clock), so a token is
  compared by its rank among the tokens that server gave: both give them
  in grant order;
- remaining times: counted from each server's clock, so they may differ
  by the time between the two calls, which is measured;
- FG.FGET's token above 2^53, which a script answers as its decimal text.

and so must FG.LOCKINFO of every key (next_token compared with the
tokens given). Every lock key of the stock server has an expiry; a
fenced value has none, on both.
"""

import hashlib
import os
import random
import select
import shutil
import signal
import time

import pytest
import redis

import backends
import harness
from harness import RawClient, RespError, Server, wait_for

STEPS = 1500
LOCKS = ["a", "b", "{m}x", "{m}y"]
SEMAPHORES = ["s", "t"]
FENCED = ["f", "g"]
OWNERS = ["o1", "o2", "o3", "o\x00 4"]
LONG_MS = 100_000_000          # no lease ends during a walk
MAX_LEASE = 10 ** 12
I64 = 2 ** 63 - 1
SCRIPT = harness.built_script("lock")
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()


@pytest.fixture(scope="module")
def servers():
    module, stock = Server().start(), Server(module=False).start()
    yield module, stock
    module.cleanup()
    stock.cleanup()


@pytest.fixture
def pair(servers):
    module, stock = servers
    p = Pair(module, stock)
    p.m.execute("FLUSHALL")
    p.s.execute("FLUSHALL")
    p.s.execute("SCRIPT", "LOAD", SCRIPT)
    yield p
    p.close()


def outcome(c, args):
    try:
        return c.execute(*args)
    except RespError as e:
        return e


def plain(v):
    """Bytes as text, errors as their message, all the way down."""
    if isinstance(v, RespError):
        return ("error", str(v))
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


class Tokens:
    """A server's tokens by rank: the n-th distinct token it gave is n."""

    def __init__(self):
        self.rank = {}

    def of(self, token):
        if token == 0:
            return 0
        return self.rank.setdefault(token, len(self.rank) + 1)


class Pair:
    """The module's server and the stock one, each command sent to both."""

    def __init__(self, module, stock):
        self.m, self.s = RawClient(module.port), RawClient(stock.port)
        self.mt, self.st = Tokens(), Tokens()
        self.grant_slack = 0  # the most two grants' lease ends have differed by

    def close(self):
        self.m.close()
        self.s.close()

    def both(self, *cmd):
        """The two replies, and the time between the two calls (ms)."""
        cmd = [str(x) if isinstance(x, int) else x for x in cmd]
        t0 = time.monotonic()
        a = outcome(self.m, cmd)
        b = outcome(self.s, backends.lock_script_form(cmd))
        slack = (time.monotonic() - t0) * 1000 + 1
        self.grant_slack = max(self.grant_slack, slack)
        return plain(a), plain(b), slack

    def same(self, *cmd):
        a, b, slack = self.both(*cmd)
        name = str(cmd[0]).upper()
        if name in ("FG.LOCK", "FG.ACQUIRE", "FG.MLOCK") and isinstance(a, list):
            assert isinstance(b, list) and len(b) == 4, (cmd, a, b)
            a[1], b[1] = self.mt.of(a[1]), self.st.of(b[1])
            # a grant's lease counts from now; a refusal's wait from an
            # earlier grant's end, which differed as that grant's calls did
            assert abs(a[2] - b[2]) <= slack + (0 if a[0] else self.grant_slack), (cmd, a, b)
            a[2] = b[2]
        if name == "FG.FGET" and isinstance(b, list) and isinstance(b[1], str):
            assert int(b[1]) > 2 ** 53, (cmd, b)  # past 2^53 only: the script's decimal text
            b[1] = int(b[1])
        if name == "FG.LOCKINFO" and isinstance(a, list):
            a, b = self.info(a, self.mt), self.info(b, self.st)
            for ha, hb in zip(a["holders"], b["holders"]):
                # a hold's end differs as its grant's did, and now as this call's
                assert abs(ha[3] - hb[3]) <= slack + self.grant_slack, (cmd, a, b)
                ha[3] = hb[3]
        assert a == b, (cmd, a, b)
        return a

    @staticmethod
    def info(flat, tokens):
        d = dict(zip(flat[0::2], flat[1::2]))
        d["holders"] = [[o, mode, n, ttl, tokens.of(t)] for o, mode, n, ttl, t in d["holders"]]
        given = list(tokens.rank)
        assert all(d["next_token"] > t for t in given if tokens.of(t) in
                   {h[4] for h in d["holders"]}), d
        del d["next_token"]
        return d

    def assert_expiries(self, keys):
        for key in keys:
            kind = self.s.execute("TYPE", key)
            if kind == b"none":
                assert self.m.execute("EXISTS", key) == 0, key
                continue
            assert self.m.execute("EXISTS", key) == 1, key
            ttl = self.s.execute("PTTL", key)
            fenced = self.s.execute("HEXISTS", key, "m") == 0
            assert (ttl == -1) if fenced else (ttl > 0), (key, ttl)


# ------------------------------------------------------------- the walk

def lease(rng):
    return rng.choice([LONG_MS, LONG_MS * 2, MAX_LEASE, LONG_MS + rng.randrange(1000)])


def bad_number(rng, lo, hi):
    return rng.choice([lo - 1, hi + 1, "abc", "", "1.5", " 1", "+1", "01", "-0",
                       "9223372036854775808", "-9223372036854775809", I64, -I64 - 1])


def token_value(rng):
    return rng.choice([1, 2, 3, 5, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1, 10 ** 18, I64 - 1, I64])


def step(rng):
    o = rng.choice(OWNERS)
    k = rng.choice(LOCKS)
    sem = rng.choice(SEMAPHORES)
    roll = rng.random()
    if roll < 0.22:
        opts = [w for w in ("SHARED", "REENTRANT") if rng.random() < 0.4]
        rng.shuffle(opts)
        return ["FG.LOCK", k, o, lease(rng), *opts]
    if roll < 0.34:
        return ["FG.UNLOCK", k, o]
    if roll < 0.46:
        cap = rng.randrange(1, 5)
        return ["FG.ACQUIRE", sem, cap, o, rng.randrange(1, cap + 2), lease(rng)]
    if roll < 0.54:
        return ["FG.RELEASE", sem, o] + ([rng.randrange(1, 4)] if rng.random() < 0.5 else [])
    if roll < 0.59:
        return ["FG.EXTEND", rng.choice(LOCKS + SEMAPHORES), o, lease(rng)]
    if roll < 0.62:
        return ["FG.FORCEUNLOCK", rng.choice(LOCKS + SEMAPHORES)]
    if roll < 0.68:
        keys = rng.sample(["{m}x", "{m}y", "{m}z"], rng.randrange(1, 4))
        return ["FG.MLOCK", len(keys), *keys, o, lease(rng)]
    if roll < 0.72:
        keys = rng.sample(["{m}x", "{m}y", "{m}z"], rng.randrange(1, 4))
        return ["FG.MUNLOCK", len(keys), *keys, o]
    if roll < 0.82:
        f = rng.choice(FENCED)
        return rng.choice([["FG.FENCE", f, token_value(rng)],
                           ["FG.FSET", f, token_value(rng), "v%d" % rng.randrange(100)],
                           ["FG.FGET", f], ["FG.FGET", f, token_value(rng)]])
    if roll < 0.85:  # a key of another kind
        return rng.choice([["FG.LOCK", sem, o, LONG_MS], ["FG.ACQUIRE", k, 2, o, 1, LONG_MS],
                           ["FG.FENCE", k, 1], ["FG.UNLOCK", rng.choice(FENCED), o],
                           ["FG.LOCKINFO", rng.choice(FENCED)]])
    return refusal(rng, k, sem, o)


def refusal(rng, k, sem, o):
    """A command the module refuses, each argument in turn."""
    return rng.choice([
        ["FG.LOCK", k, o, bad_number(rng, 1, MAX_LEASE)],
        ["FG.LOCK", k, "", LONG_MS], ["FG.LOCK", k, "x" * 257, LONG_MS],
        ["FG.LOCK", k, o], ["FG.LOCK", k, o, LONG_MS, "EXCLUSIVE"],
        ["FG.LOCK", k, o, LONG_MS, "WAIT"],
        ["FG.LOCK", k, o, LONG_MS, "WAIT", bad_number(rng, 0, MAX_LEASE)],
        ["FG.ACQUIRE", sem, bad_number(rng, 1, 10 ** 6), o, 1, LONG_MS],
        ["FG.ACQUIRE", sem, 2, o, bad_number(rng, 1, 10 ** 6), LONG_MS],
        ["FG.ACQUIRE", sem, 2, o, 3, LONG_MS], ["FG.ACQUIRE", sem, 2, o, 1],
        ["FG.ACQUIRE", sem, 2, o, 1, LONG_MS, "SHARED"],
        ["FG.RELEASE", sem, o, bad_number(rng, 1, 10 ** 6)], ["FG.RELEASE", sem],
        ["FG.RELEASE", sem, o, 1, 2], ["FG.UNLOCK", k], ["FG.UNLOCK", k, o, o],
        ["FG.EXTEND", k, o, bad_number(rng, 1, MAX_LEASE)], ["FG.EXTEND", k, o],
        ["FG.FORCEUNLOCK", k, o], ["FG.LOCKINFO", k, o],
        ["FG.MLOCK", bad_number(rng, 1, 64), "{m}x", o, LONG_MS],
        ["FG.MLOCK", 2, "{m}x", "{m}x", o, LONG_MS], ["FG.MLOCK", 1, "{m}x", o],
        ["FG.MLOCK", 1, "{m}x", o, LONG_MS, "SHARED"],
        ["FG.MUNLOCK", 2, "{m}x", "{m}x", o], ["FG.MUNLOCK", 1, "{m}x", o, o],
        ["FG.FENCE", rng.choice(FENCED), bad_number(rng, 1, I64)],
        ["FG.FSET", rng.choice(FENCED), 1], ["FG.FGET", rng.choice(FENCED), 1, 2],
        ["FG.FGET", rng.choice(FENCED), bad_number(rng, 1, I64)],
    ])


def test_a_walk_answers_as_the_module(pair):
    rng = random.Random("test_a_walk_answers_as_the_module")
    for _ in range(STEPS):
        cmd = step(rng)
        pair.same(*cmd)
        for key in LOCKS + SEMAPHORES + ["{m}z"]:
            pair.same("FG.LOCKINFO", key)
        pair.assert_expiries(LOCKS + SEMAPHORES + FENCED + ["{m}z"])


def test_a_refusal_changes_nothing(pair):
    rng = random.Random("test_a_refusal_changes_nothing")
    pair.same("FG.LOCK", "a", "o1", LONG_MS, "SHARED")
    pair.same("FG.ACQUIRE", "s", 3, "o1", 2, LONG_MS)
    pair.same("FG.MLOCK", 2, "{m}x", "{m}y", "o2", LONG_MS)
    pair.same("FG.FSET", "f", 7, "v")
    keys = ["a", "b", "s", "t", "{m}x", "{m}y", "f", "g"]
    before = [pair.s.execute("DUMP", k) for k in keys]
    for _ in range(300):
        a, b, _ = pair.both(*refusal(rng, rng.choice(["a", "b"]), rng.choice(["s", "t"]), "o1"))
        assert a == b and a[0] == "error", (a, b)
    assert [pair.s.execute("DUMP", k) for k in keys] == before


def test_fenced_tokens_around_2_53(pair):
    """Up to 2^53 a token is an integer reply on both; beyond it the
    script's is its decimal text (docs/scripts.md)."""
    for token in (2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1, 10 ** 18, I64):
        pair.same("FG.FSET", "f", token, "v")
        a, b, _ = pair.both("FG.FGET", "f")
        assert a == [1, token, "v"]
        assert b == [1, token if token <= 2 ** 53 else str(token), "v"], b


def test_an_upgrade_and_the_reentry_limit_are_refused_alike(pair):
    pair.same("FG.LOCK", "a", "o1", LONG_MS, "SHARED")
    err = pair.same("FG.LOCK", "a", "o1", LONG_MS, "REENTRANT")
    assert err == ("error", "ERR owner holds a shared lock: release it before asking "
                            "for the exclusive lock")
    # The reentry count is kept exact up to 10^9 holds: set it by hand on
    # the stock server (its state is a hash) and see the limit refused.
    pair.same("FG.LOCK", "b", "o1", LONG_MS)
    hold = pair.s.execute("HGET", "b", "ho1").decode().split()
    hold[1] = str(10 ** 9)
    pair.s.execute("HSET", "b", "ho1", " ".join(hold))
    a = plain(outcome(pair.s, ["EVALSHA", SHA, 1, "b", "FG.LOCK", "o1", LONG_MS, "REENTRANT"]))
    assert a == ("error", "ERR reentrancy limit reached")


# ------------------------------------------------------------- time

def server_us(c):
    sec, us = c.execute("TIME")
    return int(sec) * 1_000_000 + int(us)


def until_server_passes(c, at_us):
    """Waits until the server's clock has passed at_us."""
    wait_for(lambda: server_us(c) > at_us, timeout=30, interval=0.01)


def test_leases_end_alike(pair):
    pair.same("FG.LOCK", "a", "o1", 300)
    pair.same("FG.ACQUIRE", "s", 2, "o1", 2, 300)
    end = max(server_us(pair.m), server_us(pair.s)) + 300_000
    pair.same("FG.LOCK", "a", "o2", LONG_MS)  # busy until the lease ends
    until_server_passes(pair.m, end)
    until_server_passes(pair.s, end)
    pair.same("FG.LOCKINFO", "a")
    pair.same("FG.UNLOCK", "a", "o1")  # -1: lost
    pair.same("FG.EXTEND", "s", "o1", LONG_MS)  # 0: lost
    pair.same("FG.LOCK", "a", "o2", LONG_MS)
    pair.same("FG.ACQUIRE", "s", 2, "o3", 2, LONG_MS)
    pair.same("FG.LOCKINFO", "s")
    pair.assert_expiries(["a", "s"])


def test_tokens_never_repeat_for_a_key(servers):
    """Across releases, the key's expiry and a restart: each grant's token
    is above every earlier one of the key."""
    _, stock = servers
    c = backends.script_client(stock)
    tokens = []
    for _ in range(50):
        tokens.append(c.execute_command("FG.LOCK", "tk", "o", 1000)[1])
        assert c.execute_command("FG.UNLOCK", "tk", "o") == 0
    assert c.exists("tk") == 0
    tokens.append(c.execute_command("FG.LOCK", "tk", "o", 50)[1])
    wait_for(lambda: c.exists("tk") == 0, timeout=10)  # expired
    tokens.append(c.execute_command("FG.LOCK", "tk", "o", 60000)[1])
    c.execute_command("FG.LOCK", "tk2", "o", 60000)
    c.save()
    stock.restart()
    c = backends.script_client(stock)
    assert c.execute_command("FG.LOCKINFO", "tk")[7][0][4] == tokens[-1]  # kept by the RDB file
    c.execute_command("FG.FORCEUNLOCK", "tk")
    tokens.append(c.execute_command("FG.LOCK", "tk", "p", 60000)[1])
    assert tokens == sorted(set(tokens)) and 0 < tokens[0] and tokens[-1] < 2 ** 53
    c.close()


# ------------------------------------------------------------- waiting

class Listener:
    """The key's sharded channel, as lock.lua tells its waiters: every
    message (redis-py 4.3 has no SSUBSCRIBE)."""

    def __init__(self, node, key):
        self.port, self.key = node.port, key
        self.c = RawClient(node.port)
        assert self.c.execute("SSUBSCRIBE", key)[0] == b"ssubscribe"

    def messages(self, n, timeout=10):
        got, deadline = [], time.monotonic() + timeout
        while len(got) < n:
            left = deadline - time.monotonic()
            if not self.c.buf and (left <= 0 or not select.select([self.c.sock], [], [], left)[0]):
                break
            m = self.c.read_reply()
            if m[0] == b"smessage":
                got.append(m[2].decode("latin-1"))
        return got

    def nothing_told(self):
        """No message came before now: a marker published now on the same
        channel is the next one (a channel's messages keep their order)."""
        with RawClient(self.port) as c:
            c.execute("SPUBLISH", self.key, "marker")
        assert self.messages(1) == ["marker"]

    def close(self):
        self.c.close()


@pytest.fixture
def stock(servers):
    _, node = servers
    c = backends.script_client(node)
    c.flushall()
    c.script_load(SCRIPT)
    yield node, c
    c.close()


def ask(c, key, owner, stay_ms, *opts):
    return c.execute_command("FG.LOCK", key, owner, LONG_MS, *opts, "WAIT", stay_ms)


def waiters(c, key):
    flat = c.execute_command("FG.LOCKINFO", key)
    return [w[0].decode() for w in dict(zip(flat[0::2], flat[1::2]))[b"waiters"]]


def holders(c, key):
    flat = c.execute_command("FG.LOCKINFO", key)
    if flat is None:
        return []
    return [h[0].decode() for h in dict(zip(flat[0::2], flat[1::2]))[b"holders"]]


def test_the_queue_is_fifo_readers_go_together_and_nobody_overtakes(stock):
    node, c = stock
    listen = Listener(node, "q")
    assert c.execute_command("FG.LOCK", "q", "w0", LONG_MS)[0] == 1
    for owner, opts in (("r1", ["SHARED"]), ("r2", ["SHARED"]), ("w1", []), ("r3", ["SHARED"])):
        assert ask(c, "q", owner, 60000, *opts)[0] == 0
    assert waiters(c, "q") == ["r1", "r2", "w1", "r3"]
    # A newcomer, and r3 asking again, wait behind the writer.
    assert c.execute_command("FG.LOCK", "q", "r4", LONG_MS, "SHARED")[:2] == [0, 0]
    assert ask(c, "q", "r3", 60000, "SHARED")[:2] == [0, 0]
    assert c.execute_command("FG.UNLOCK", "q", "w0") == 0
    told = listen.messages(2)
    assert [m.split()[0] + m.split()[-1] for m in told] == ["gr1", "gr2"], told
    listen.nothing_told()  # the writer is not woken, nor anyone behind it
    assert holders(c, "q") == ["r1", "r2"] and waiters(c, "q") == ["w1", "r3"]
    # A reader granted by message finds its hold when it asks again.
    rep = ask(c, "q", "r1", 60000, "SHARED")
    assert rep[0] == 1 and rep[1] == int(told[0].split()[1])
    assert c.execute_command("FG.UNLOCK", "q", "r1") == 0
    listen.nothing_told()
    assert c.execute_command("FG.UNLOCK", "q", "r2") == 0
    assert [m.split()[-1] for m in listen.messages(1)] == ["w1"]
    assert c.execute_command("FG.UNLOCK", "q", "w1") == 0
    assert [m.split()[-1] for m in listen.messages(1)] == ["r3"]
    listen.close()


def test_a_semaphore_serves_a_large_request_first(stock):
    node, c = stock
    listen = Listener(node, "sq")
    assert c.execute_command("FG.ACQUIRE", "sq", 3, "a", 3, LONG_MS)[0] == 1
    assert c.execute_command("FG.ACQUIRE", "sq", 3, "big", 2, LONG_MS, "WAIT", 60000)[0] == 0
    assert c.execute_command("FG.ACQUIRE", "sq", 3, "small", 1, LONG_MS, "WAIT", 60000)[0] == 0
    assert c.execute_command("FG.RELEASE", "sq", "a", 1) == 2
    listen.nothing_told()  # one permit free: big does not fit, small may not pass it
    assert c.execute_command("FG.RELEASE", "sq", "a", 1) == 1
    assert [m.split()[-1] for m in listen.messages(1)] == ["big"]
    assert c.execute_command("FG.RELEASE", "sq", "a") == 0
    assert [m.split()[-1] for m in listen.messages(1)] == ["small"]
    listen.close()


def test_unwait_gives_back_a_grant_handed_meanwhile(stock):
    node, c = stock
    c.execute_command("FG.LOCK", "u", "holder", LONG_MS)
    ask(c, "u", "gone", 60000)
    ask(c, "u", "next", 60000)
    assert c.execute_command("FG.UNLOCK", "u", "holder") == 0
    assert holders(c, "u") == ["gone"]  # handed; its owner has not heard yet
    assert c.execute_command("FG.UNWAIT", 1, "u", "gone") == 1
    assert holders(c, "u") == ["next"] and waiters(c, "u") == []
    assert c.execute_command("FG.UNWAIT", 1, "u", "nobody") == 0


def test_a_waiter_that_stops_asking_leaves_within_its_stay(stock):
    node, c = stock
    c.execute_command("FG.LOCK", "d", "holder", LONG_MS)
    raw = RawClient(node.port)
    ask(c, "d", "dead", 200)
    asked = server_us(raw)
    ask(c, "d", "alive", 60000)
    assert waiters(c, "d") == ["dead", "alive"]
    until_server_passes(raw, asked + 200_000)
    assert waiters(c, "d") == ["alive"]
    assert c.execute_command("FG.UNLOCK", "d", "holder") == 0
    assert holders(c, "d") == ["alive"]
    raw.close()


def test_a_multi_key_waiter_is_told_to_ask(stock):
    node, c = stock
    listen = Listener(node, "{w}a")
    c.execute_command("FG.LOCK", "{w}a", "holder", LONG_MS)
    assert c.execute_command("FG.MLOCK", 2, "{w}a", "{w}b", "m", LONG_MS, "WAIT", 60000)[0] == 0
    ask(c, "{w}b", "single", 60000)  # behind m on {w}b
    assert c.execute_command("FG.UNLOCK", "{w}a", "holder") == 0
    assert listen.messages(1) == ["w m"]
    assert holders(c, "{w}a") == []  # not handed: this call had not {w}b
    rep = c.execute_command("FG.MLOCK", 2, "{w}a", "{w}b", "m", LONG_MS, "WAIT", 60000)
    assert rep[0] == 1 and rep[3] == 2
    assert waiters(c, "{w}a") == [] and waiters(c, "{w}b") == ["single"]
    listen.close()


def test_the_library_hands_off_in_fifo_order(servers):
    """libfloodgate's waiting calls on the stock server: each is granted in
    its turn, told by message (no poll in between: the grant comes long
    before the next ask would)."""
    from test_client_locks import LockClient, grant
    _, node = servers
    c = backends.script_client(node)
    c.flushall()
    url = "redis://127.0.0.1:%d" % node.port
    clients = [LockClient(url) for _ in range(4)]
    assert c.execute_command("FG.LOCK", "h", "holder", LONG_MS)[0] == 1
    for i, lc in enumerate(clients):
        assert lc("bg 1 lock h w%d 60000 wait=60000" % i) == "ok started"
        wait_for(lambda: len(waiters(c, "h")) == i + 1)
    assert waiters(c, "h") == ["w0", "w1", "w2", "w3"]
    order, previous = [], "holder"
    for lc in clients:
        t0 = time.monotonic()
        assert c.execute_command("FG.UNLOCK", "h", previous) == 0
        g = grant(lc("join 1"))
        assert g[0] == 1
        order.append(holders(c, "h")[0])
        previous = order[-1]
        assert time.monotonic() - t0 < 0.25  # sooner than its next ask
    assert order == ["w0", "w1", "w2", "w3"]
    for lc in clients:
        lc.close()
    c.close()


def test_a_waiter_that_stops_asking_keeps_a_hand_off_no_longer_than_its_stay(servers):
    """The lock handed to a waiter whose process is stopped (dead, as far as
    the server can tell) is held for it only until its stay ends, not for
    its lease: then it goes to the next waiter. Resumed, the first answers
    not acquired: its turn came and went (a message proves nothing, only a
    claim grants), and it is not queued again. (The torture test in script
    mode found the library asking again as a newcomer instead, and taking a
    later turn behind those it had been ahead of.)"""
    from test_client_locks import LockClient, grant
    _, node = servers
    c = backends.script_client(node)
    c.flushall()
    url = "redis://127.0.0.1:%d" % node.port
    first, second = LockClient(url), LockClient(url)
    listen = Listener(node, "p")
    assert c.execute_command("FG.LOCK", "p", "holder", LONG_MS)[0] == 1
    assert first("bg 1 lock p first 600000 wait=60000") == "ok started"
    wait_for(lambda: waiters(c, "p") == ["first"])
    assert second("bg 1 lock p second 600000 wait=60000") == "ok started"
    wait_for(lambda: waiters(c, "p") == ["first", "second"])
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        stay_until = int(c.hget("p", "wfirst").split()[1])  # lock.lua's waiter: its stay's end
        assert c.execute_command("FG.UNLOCK", "p", "holder") == 0
        assert holders(c, "p") == ["first"]  # handed, not claimed
        handed = int(listen.messages(1)[0].split()[1])
        g = grant(second("join 1"))
        raw = RawClient(node.port)
        assert g[0] == 1 and server_us(raw) >= stay_until  # only once first's stay ended
        raw.close()
        assert holders(c, "p") == ["second"] and g[1] > handed
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    assert grant(first("join 1")) == [0, 0, 0, 0]
    assert waiters(c, "p") == [] and holders(c, "p") == ["second"]
    assert first("unlock p first") == "ok -1"
    first.close()
    second.close()
    listen.close()
    c.close()


def test_a_forged_message_grants_nothing(servers):
    """Regression: anyone may publish on a key's channel, and the library
    answered a grant it had been told of when the claim found no hold: a
    forged "g <token> ..." made a waiter believe it held the lock. Only the
    claim's reply grants; a claim that finds the owner still queued goes on
    waiting. Nor may a message too short for its kind be read past its end."""
    from test_client_locks import LockClient, grant
    _, node = servers
    c = backends.script_client(node)
    c.flushall()
    lc = LockClient("redis://127.0.0.1:%d" % node.port)
    listen = Listener(node, "fk")
    assert c.execute_command("FG.LOCK", "fk", "holder", LONG_MS)[0] == 1
    assert lc("bg 1 lock fk victim 60000 wait=60000") == "ok started"
    wait_for(lambda: waiters(c, "fk") == ["victim"])
    monitor = RawClient(node.port)
    monitor.sock.sendall(RawClient.encode(["MONITOR"]))
    assert monitor.read_reply() == b"OK"
    for forged in ("w", "e", "g", "g 123 60000 1 victim"):
        c.execute_command("SPUBLISH", "fk", forged)
    while b"CLAIM" not in monitor.read_reply():  # the victim's claim, answered "still queued"
        pass
    monitor.close()
    assert waiters(c, "fk") == ["victim"] and holders(c, "fk") == ["holder"]
    assert c.execute_command("FG.UNLOCK", "fk", "holder") == 0
    real = [m for m in listen.messages(5) if m.startswith("g ") and m != "g 123 60000 1 victim"]
    g = grant(lc("join 1"))
    assert g[0] == 1 and g[1] == int(real[0].split()[1]) and g[1] != 123, (g, real)
    lc.close()
    listen.close()
    c.close()


# ------------------------------------------------------------- cluster

def test_on_a_stock_cluster(request):
    """One slot a call: a multi-key lock across slots is CROSSSLOT, within
    one it is granted, and a waiter on the key's node hears its grant on
    the key's sharded channel there."""
    t = backends.target("stock-cluster")
    owner = t.owner("{c}a")
    node = backends.script_client(owner)
    try:
        with pytest.raises(redis.ResponseError, match="CROSSSLOT"):
            node.execute_command("FG.MLOCK", 2, "{c}a", "{d}b", "o", LONG_MS)
        assert node.execute_command("FG.MLOCK", 2, "{c}a", "{c}b", "o", LONG_MS)[0] == 1
        listen = Listener(owner, "{c}a")
        assert ask(node, "{c}a", "w", 60000)[0] == 0
        assert node.execute_command("FG.MUNLOCK", 2, "{c}a", "{c}b", "o") == 2
        told = listen.messages(1)
        assert [m.split()[0] + m.split()[-1] for m in told] == ["gw"]
        assert holders(node, "{c}a") == ["w"] and 0 < node.pttl("{c}a") <= LONG_MS + 1
        listen.close()
    finally:
        node.close()


def test_the_functions_library_answers_as_the_scripts(stock):
    """FCALL fg_lock, fg_mlock (keys counted) and fg_lockinfo (no-writes,
    so FCALL_RO) answer as the EVALSHA form does."""
    node, c = stock
    with open(harness.os.path.join(harness.REPO, "build", "floodgate-functions.lua")) as f:
        c.function_load(f.read(), replace=True)
    rep = c.execute_command("FCALL", "fg_lock", 1, "fa", "o", LONG_MS, "SHARED")
    assert rep[0] == 1 and rep[3] == 1
    rep = c.execute_command("FCALL", "fg_mlock", 2, "{fm}a", "{fm}b", 2, "o", LONG_MS)
    assert rep[0] == 1 and rep[3] == 2
    info = c.execute_command("FCALL_RO", "fg_lockinfo", 1, "fa")
    assert info[0:2] == [b"kind", b"lock"] and info[7][0][1] == b"shared"
    with pytest.raises(redis.ResponseError, match="numkeys is larger"):
        c.execute_command("FCALL", "fg_munlock", 1, "{fm}a", 2, "o")
    assert c.execute_command("FCALL", "fg_munlock", 2, "{fm}a", "{fm}b", 2, "o") == 2
    c.function_flush()


# ------------------------------------------------ replication and failover

@pytest.fixture
def stock_pair():
    """A stock master (AOF, fsync always) and its stock replica, with
    clients whose lock commands are lock.lua's."""
    from topology import replicated_pair
    yield from replicated_pair(["--appendonly", "yes", "--appendfsync", "always"], module=False,
                               client=backends.script_client)


def test_replicas_and_aof_replay_hold_the_masters_locks(stock_pair, tmp_path):
    """lock.lua replicates its writes with absolute expiries: after random
    traffic (waiters and fenced values included) the replica, and a server
    started on the master's AOF, hold exactly the master's keys."""
    from topology import digest
    master, replica, m, r = stock_pair
    rng = random.Random("test_replicas_and_aof_replay_hold_the_masters_locks")
    for _ in range(600):
        try:
            m.execute_command(*step(rng))
        except redis.ResponseError:
            pass
        if rng.random() < 0.05:  # a waiter's place in a queue
            m.execute_command("FG.LOCK", rng.choice(LOCKS), "waiter%d" % rng.randrange(3),
                              LONG_MS, "WAIT", LONG_MS)
    harness.wait_replica_synced(m, r)
    assert m.dbsize() > 0 and digest(m) == digest(r)
    m.bgrewriteaof()
    wait_for(lambda: m.info("persistence")["aof_rewrite_in_progress"] == 0, timeout=30)
    replay = Server(module=False, dir=str(tmp_path))
    shutil.copytree(os.path.join(master.dir, "appendonlydir"), os.path.join(replay.dir, "appendonlydir"))
    replay.extra_args = ["--appendonly", "yes"]
    replay.start()
    try:
        assert digest(replay.client()) == digest(m)
    finally:
        replay.cleanup()


def test_a_promoted_replica_keeps_the_durable_grant_its_token_and_the_fence(stock_pair):
    """Failover without the module: a durable grant reached the replica, so
    the promoted replica holds it with its token; a grant there after it
    gets a larger token, and the old holder's fenced write is refused once
    the new holder has read with its token. A library waiter of the old
    master, demoted, gets an answer, not a hang."""
    from test_client_locks import LockClient, grant
    master, replica, m, r = stock_pair
    old = LockClient("redis://127.0.0.1:%d" % master.port)
    g = grant(old("lock res o1 600000 durable=1 durable_timeout=30000"))
    assert g[0] == 1
    t1 = g[1]
    assert m.execute_command("FG.FGET", "ctr", t1)[0] == 1
    assert m.execute_command("FG.FSET", "ctr", t1, "v1") == 1
    assert old("bg 1 lock res waiter 600000 wait=600000") == "ok started"
    wait_for(lambda: waiters(m, "res") == ["waiter"])
    harness.wait_replica_synced(m, r)

    assert r.execute_command("REPLICAOF", "NO", "ONE") in (b"OK", "OK")
    assert m.execute_command("REPLICAOF", "127.0.0.1", replica.port) in (b"OK", "OK")
    answer = old("join 1", timeout=60)
    assert answer.startswith("err "), answer  # READONLY from the demoted master
    assert holders(r, "res") == ["o1"]
    flat = r.execute_command("FG.LOCKINFO", "res")
    assert dict(zip(flat[0::2], flat[1::2]))[b"holders"][0][4] == t1

    new = LockClient("redis://127.0.0.1:%d" % replica.port)
    assert new("unlock res o1") == "ok 0"  # the old holder's lease, ended by hand
    # The old master's waiter is queued here too until its stay ends (its
    # FG.UNWAIT met READONLY): a waiting call is granted after it.
    t2 = grant(new("lock res o2 600000 wait=30000"))[1]
    assert t2 > t1 and waiters(r, "res") == []
    assert r.execute_command("FG.FGET", "ctr", t2)[0] == 1
    assert r.execute_command("FG.FSET", "ctr", t1, "stale") == 0
    assert r.execute_command("FG.FGET", "ctr")[2] == b"v1"
    assert r.execute_command("FG.FSET", "ctr", t2, "v2") == 1
    old.close()
    new.close()
