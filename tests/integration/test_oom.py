"""Full memory under `maxmemory-policy noeviction` (issue 24, docs/security.md
"When memory is full").

FG.EXTEND was refused with OOM where PEXPIRE works, so on a full lock server
every renewed lease ran out and its waiters took over. The rule now: what
grows memory is refused with Redis's own OOM error and changes nothing (a
new key, a new holder, a waiter, a longer value); what keeps or frees
memory works: renewals, releases, re-entries, more permits for a holder,
answers that write nothing, checks and refunds on keys that exist, resets,
the master's effects on a replica.

Memory is filled the same way every time, without timing: maxmemory is set
1 MB above what the server uses, then a 2 MB string takes it past; a plain
SET is then refused (asserted in fill). Leases, windows and TTLs are minutes
long, and the sliding log and the refunds decide at explicit times (AT).
"""

import time

import pytest
import redis

from harness import T0, RawClient, Server, digest, inspect, wait_replica_synced
from test_effects import string_of_dump
from test_locks import (acquire, enqueue, extend, fget, holders, lock, lockinfo, mlock,
                        munlock, release, spawn, unlock)  # noqa: F401 - spawn is a fixture

MB = 1024 * 1024
OOM = "OOM command not allowed when used memory > 'maxmemory'."
LEASE = 600000      # ms: no lease of these tests runs out while they run


@pytest.fixture(scope="module")
def server(request):
    """A server of these tests' own (spawn's waiters connect to it), AT
    allowed, DUMP uncompressed so that a policy state's payload can be taken
    out of it."""
    s = Server(["--maxmemory-policy", "noeviction", "--floodgate.explicit-time", "yes",
                "--rdbcompression", "no"])
    request.addfinalizer(s.cleanup)
    return s.start()


@pytest.fixture
def c(server):
    cl = server.client()
    cl.config_set("maxmemory", 0)
    cl.flushall()
    yield cl
    cl.config_set("maxmemory", 0)
    cl.config_set("floodgate.enable-effect-commands", "no")
    for name in cl.execute_command("FG.POLICY", "LIST"):
        cl.execute_command("FG.POLICY", "DEL", name)
    cl.flushall()
    cl.close()


def refused(c, *args):
    """args answer Redis's OOM error, and the dataset is as it was."""
    before = digest(c)
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command(*args)
    assert str(e.value) == OOM, (args, e.value)
    assert digest(c) == before, args


def fill(c):
    """Memory full: maxmemory 1 MB above what is used, then a 2 MB string past
    it (admitted, since the server was below maxmemory before it)."""
    c.config_set("maxmemory", c.info("memory")["used_memory"] + MB)
    c.setrange("ballast", 2 * MB, "x")
    refused(c, "SET", "probe", "x")


def now_us():
    return time.time_ns() // 1000


# ---------------------------------------------------------------- locks

def test_a_lock_renews_answers_and_releases_when_full(c):
    grant = lock(c, "lock", "a", LEASE)
    fill(c)
    assert extend(c, "lock", "a", 2 * LEASE) == 1
    assert c.pttl("lock") > LEASE
    assert [(h.owner, h.token) for h in lockinfo(c, "lock")["holders"]] == [("a", grant[1])]
    assert lock(c, "lock", "b", LEASE)[0] == 0                 # busy: answered, nothing stored
    refused(c, "FG.LOCK", "lock", "b", LEASE, "WAIT", 10000)   # a waiter grows memory
    refused(c, "FG.LOCK", "other", "b", LEASE)                 # so does a new lock
    assert unlock(c, "lock", "a") == 0
    assert c.exists("lock") == 0
    refused(c, "FG.LOCK", "lock", "b", LEASE)                  # a new holder


def test_a_reentrant_lock_reenters_when_full(c):
    first = lock(c, "re", "a", LEASE, "REENTRANT")
    fill(c)
    again = lock(c, "re", "a", LEASE, "REENTRANT")
    assert again[0] == 1 and again[1] == first[1] and again[3] == 2, again
    assert extend(c, "re", "a", 2 * LEASE) == 1
    assert unlock(c, "re", "a") == 1
    assert unlock(c, "re", "a") == 0
    assert lockinfo(c, "re") is None


def test_a_read_write_lock_when_full(c):
    lock(c, "rw", "r1", LEASE, "SHARED")
    lock(c, "rw", "r2", LEASE, "SHARED")
    fill(c)
    assert extend(c, "rw", "r1", 2 * LEASE) == 1
    assert lock(c, "rw", "r2", LEASE, "SHARED", "REENTRANT")[3] == 2
    refused(c, "FG.LOCK", "rw", "r3", LEASE, "SHARED")         # a new reader
    assert lock(c, "rw", "w", LEASE)[0] == 0                   # the writer: busy
    assert unlock(c, "rw", "r1") == 0
    assert holders(c, "rw") == ["r2"]
    assert lockinfo(c, "rw")["used"] == 2


def test_a_semaphore_when_full(c):
    first = acquire(c, "sem", 5, "a", 2, LEASE)
    fill(c)
    more = acquire(c, "sem", 5, "a", 1, LEASE)                 # a holder's permits grow in place
    assert more[0] == 1 and more[1] == first[1] and more[3] == 3, more
    assert acquire(c, "sem", 5, "a", 3, LEASE)[0] == 0         # 6 of 5: busy
    refused(c, "FG.ACQUIRE", "sem", 5, "b", 1, LEASE)          # a new holder
    assert extend(c, "sem", "a", 2 * LEASE) == 1
    assert release(c, "sem", "a", 1) == 2
    assert lockinfo(c, "sem")["used"] == 2
    assert release(c, "sem", "a") == 0
    assert lockinfo(c, "sem") is None


def test_a_multi_key_lock_when_full(c):
    keys = ["{m}x", "{m}y"]
    grant = mlock(c, keys, "a", LEASE)
    fill(c)
    for k in keys:
        assert extend(c, k, "a", 2 * LEASE) == 1
        assert [(h.owner, h.token) for h in lockinfo(c, k)["holders"]] == [("a", grant[1])]
    assert mlock(c, keys, "b", LEASE)[0] == 0                  # busy
    refused(c, "FG.MLOCK", 2, "{m}p", "{m}q", "b", LEASE)
    assert munlock(c, keys, "a") == 2
    assert c.exists(*keys) == 0


def test_a_waiter_is_granted_a_lock_released_when_full(c, spawn):
    lock(c, "h", "a", LEASE)
    w = spawn("FG.LOCK", "h", "b", LEASE, "WAIT", 0)
    enqueue(c, w, "b", "h")
    fill(c)
    assert unlock(c, "h", "a") == 0
    assert w.result()[0] == 1
    assert holders(c, "h") == ["b"]


def test_a_script_renews_when_full(c):
    lock(c, "lock", "a", LEASE)
    fill(c)
    script = "return redis.call(ARGV[1], KEYS[1], ARGV[2], ARGV[3])"
    assert c.eval(script, 1, "lock", "FG.EXTEND", "a", 2 * LEASE) == 1
    assert c.pttl("lock") > LEASE
    with pytest.raises(redis.ResponseError, match="^OOM command not allowed"):
        c.eval(script, 1, "new", "FG.LOCK", "a", LEASE)
    assert c.exists("new") == 0


# -------------------------------------------------------------- fencing

def test_fencing_when_full(c):
    assert c.execute_command("FG.FENCE", "f", 5) == 1
    assert c.execute_command("FG.FSET", "v", 5, "abc") == 1
    fill(c)
    assert c.execute_command("FG.FENCE", "f", 6) == 1
    assert c.execute_command("FG.FENCE", "f", 3) == 0
    assert fget(c, "f") == [1, 6, None]
    assert fget(c, "f", 7) == [1, 7, None]
    assert fget(c, "new") == [1, 0, None]                      # a read
    assert c.execute_command("FG.FSET", "v", 6, "xyz") == 1    # no longer than the value held
    assert c.execute_command("FG.FSET", "v", 4, "longer than it") == 0   # stale
    assert fget(c, "v") == [1, 6, b"xyz"]
    refused(c, "FG.FSET", "v", 7, "longer than it")
    refused(c, "FG.FENCE", "new", 1)
    refused(c, "FG.FGET", "new", 1)
    refused(c, "FG.FSET", "new", 1, "x")


# ---------------------------------------------------------- rate limits

CHECKS = [
    ["FG.TOKEN", 10, 1],
    ["FG.LEAKY", 10, 1],
    ["FG.GCRA", 10, 1, 1000],
    ["FG.FIXED", 10, 60000],
    ["FG.SLIDING", 10, 60000],
    ["FG.SLIDELOG", 10, 60000],
    ["CL.THROTTLE", 9, 1, 60],
]


@pytest.mark.parametrize("check", CHECKS, ids=[ch[0] for ch in CHECKS])
def test_a_check_of_a_key_that_exists_when_full(c, check):
    name, *params = check
    c.execute_command(name, "k", *params)
    fill(c)
    reply = c.execute_command(name, "k", *params)
    assert reply[0] == (0 if name == "CL.THROTTLE" else 1), reply   # admitted, written in place
    refused(c, name, "new", *params)


def test_a_check_that_writes_nothing_is_answered_when_full(c):
    fill(c)
    assert c.execute_command("FG.TOKEN", "new", 10, 1, "COST", 11)[0] == 0
    assert c.execute_command("FG.TOKEN", "new", 10, 1, "COST", 0)[0] == 1
    assert c.execute_command("FG.PEEK", "TOKEN", "new", 10, 1)[0] == 1
    assert c.exists("new") == 0


def test_a_sliding_log_grows_only_within_its_ring_when_full(c):
    c.execute_command("FG.SLIDELOG", "log", 100, 60000, "COST", 8, "AT", T0)
    fill(c)
    later = T0 + 120 * 10 ** 6     # the 8 entries have left the window
    assert c.execute_command("FG.SLIDELOG", "log", 100, 60000, "AT", later)[0] == 1
    refused(c, "FG.SLIDELOG", "log", 100, 60000, "COST", 99, "AT", later)


def test_refunds_and_resets_when_full(c):
    c.execute_command("FG.TOKEN", "tb", 10, "0.1", "COST", 10, "AT", T0)
    c.execute_command("FG.TOKEN", "back", 10, "0.1", "COST", 2, "AT", T0)
    c.execute_command("FG.FIXED", "fw", 10, 60000, "COST", 5, "AT", T0)
    fill(c)
    assert c.execute_command("FG.REFUND", "TOKEN", "tb", 10, "0.1", "COST", 4, "AT", T0) == 4
    assert c.execute_command("FG.REFUND", "FIXED", "fw", 10, 60000, "COST", 2, "AT", T0) == 2
    assert c.execute_command("FG.REFUND", "TOKEN", "back", 10, "0.1", "COST", 9, "AT", T0) == 2
    assert c.exists("back") == 0                               # all back: the key went
    assert c.execute_command("FG.REFUND", "TOKEN", "none", 10, "0.1", "COST", 1) == 0
    assert c.execute_command("FG.RESET", "tb") == 1
    assert c.execute_command("FG.RESET", "fw") == 1
    assert c.exists("tb", "fw") == 0


def test_a_policy_check_of_a_key_that_exists_when_full(c):
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, "0.01")
    c.execute_command("FG.CHECK", "p", "k")
    fill(c)
    assert c.execute_command("FG.CHECK", "p", "k")[0] == 1     # its state rewritten in place
    assert c.execute_command("FG.CHECK", "p", "k", "COST", 11)[0] == 0
    refused(c, "FG.CHECK", "p", "new")
    # 8 left, a unit per 100 s: 9 would wait, and a waiter grows memory
    refused(c, "FG.CHECK", "p", "k", "COST", 9, "WAIT", 600000)
    assert c.execute_command("FG.RESET", "k") == 1


# ------------------------------------------------------ effect commands

def test_effect_commands_from_a_client_when_full(c):
    grant = lock(c, "h", "a", LEASE)
    c.execute_command("FG.TOKEN", "b", 10, "0.1")
    c.execute_command("FG.SLIDELOG", "log", 10, 60000)
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, "0.1")
    c.execute_command("FG.CHECK", "p", "pk")
    c.execute_command("FG.UVADD", "counted", "a")
    payload = string_of_dump(c, "pk")
    tat = inspect(c, "b")["tat_ns"]
    c.config_set("floodgate.enable-effect-commands", "yes")
    fill(c)
    end_us = now_us() + 2 * LEASE * 1000
    hold = ["FG.HOLD", "h", "lock", 0, "a", "exclusive", 1, end_us, grant[1]]
    assert c.execute_command(*hold) == b"OK"                   # the holder there: in place
    assert c.pttl("h") > LEASE
    refused(c, "FG.HOLD", "h2", "lock", 0, "b", "exclusive", 1, end_us, grant[1])
    assert c.execute_command("FG.SETSTATE", "b", tat) == b"OK"
    refused(c, "FG.SETSTATE", "b2", tat)
    assert c.execute_command("FG.LOGAPPEND", "log", 0, now_us(), 1) == b"OK"   # 2 in its ring
    refused(c, "FG.LOGAPPEND", "log", 0, now_us(), 5)
    assert c.execute_command("FG.PLSTATE", "pk", payload) == b"OK"
    refused(c, "FG.PLSTATE", "pk2", payload)
    refused(c, "FG.UVADDAT", "counted", now_us(), "b")         # as FG.UVADD
    refused(c, "FG.UVLOAD", "loaded", string_of_dump(c, "counted"))
    assert c.execute_command("FG.UNHOLD", "h", "a") == 1


def test_a_full_replica_applies_its_masters_effects():
    """A replica that obeys its own maxmemory (replica-ignore-maxmemory no)
    refused deny-oom commands from its master: a renewal's FG.HOLD was lost
    there, and a failover found the lease ended early."""
    with Server() as master, \
            Server(["--replicaof", "127.0.0.1", master.port, "--replica-ignore-maxmemory", "no",
                    "--replica-read-only", "no"]) as replica:
        m, rc = master.client(), replica.client()
        lock(m, "lock", "a", LEASE)
        wait_replica_synced(m, rc)
        fill(rc)
        assert extend(m, "lock", "a", 2 * LEASE) == 1
        lock(m, "new", "b", LEASE)
        m.execute_command("FG.TOKEN", "t", 10, 1)
        wait_replica_synced(m, rc)
        assert rc.pttl("lock") > LEASE
        for key in ("lock", "new", "t"):
            assert rc.execute_command("DEBUG", "DIGEST-VALUE", key) == \
                m.execute_command("DEBUG", "DIGEST-VALUE", key), key
        m.close()
        rc.close()


# ---------------------------------------------------------------- flags

# The commands that always grow memory, or whose growth the module cannot
# tell before it happens, or whose flags are another's (docs/security.md).
DENY_OOM = {"bf.reserve", "bf.add", "bf.madd", "bf.insert", "bf.loadchunk", "gcra",
            "fg.uvcreate", "fg.uvadd", "fg.uvstore", "fg.policy|set", "fg.policy|allow",
            "fg.policy|deny"}


def test_deny_oom_is_left_on_the_commands_that_only_grow(server):
    with RawClient(server.port) as raw:
        names = raw.execute("COMMAND", "LIST", "FILTERBY", "MODULE", "floodgate")
        flagged = set()
        for info in raw.execute("COMMAND", "INFO", *names):
            for cmd in [info] + info[9]:
                if b"denyoom" in cmd[2]:
                    flagged.add(cmd[0].decode().lower())
    assert flagged == DENY_OOM
