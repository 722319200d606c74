"""The Python binding's locks (floodgate.Lock, Semaphore, MultiLock, Redlock)
on mem: and on a real server, held to what test_client_locks.py holds the C
library to: grants, refusals and fencing tokens, waiting in the server's
queue while other Python threads run (ctypes releases the GIL), renewal and
its three ways of losing a lock, the server's words for bad input, and
Redlock over three servers. The server is the module's and a stock one,
where the library speaks lock.lua (docs/scripts.md, "Locks"), and
Redlock's three are of either kind or mixed.

Nothing here asserts after a fixed short sleep: a test waits for its
condition with a deadline derived from the lease, or lets a number of
leases pass while it checks that a lock stays held.
"""

import sys
import threading
import time

import pytest
import redis

import backends
from lock_fixtures import r, target  # noqa: F401 - fixtures
import floodgate
from floodgate import LockNotAcquired, LostReason
from harness import Server, free_port, s, wait_for

# Renewed leases: an FG.EXTEND every LEASE_MS / 3, so a renewal thread kept
# from running for two thirds of it loses one (400 ms was lost on a loaded
# machine: test_renewal_stops_at_its_limit answered UNREACHABLE).
LEASE_MS = 1000
LEASE_S = LEASE_MS / 1000
LOST_S = 5 + 20 * LEASE_S               # the longest a loss may take to be reported
LONG_MS = 60000                         # leases and waits that never end during a test


def url(server):
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture(params=["mem", "module", "stock"])
def client(request):
    """A client on mem:, on the session server (flushed) or a stock one."""
    if request.param == "mem":
        c = floodgate.Client("mem:")
    else:
        server = request.getfixturevalue("server") if request.param == "module" else None
        target = backends.module_or_stock(request.param, server)
        c = floodgate.Client(target.url)
        c.test_node = target.server
    yield c
    c.close()


@pytest.fixture
def rr(client):
    """redis-py on the client's server; None on mem:."""
    if not client.is_remote:
        yield None
        return
    c = backends.script_client(client.test_node)
    yield c
    c.close()


def lockinfo(c, key):
    """FG.LOCKINFO as a dict, None when the key has no lock."""
    raw = c.execute_command("FG.LOCKINFO", key)
    return None if raw is None else dict(zip(s(raw)[0::2], s(raw)[1::2]))


def holders(c, key):
    info = lockinfo(c, key)
    return [] if info is None else [h[0] for h in info["holders"]]


def refused(client, key, capacity=0):
    """Another owner is refused the lock (or a permit of the semaphore of
    `capacity`) on key; a grant is given back at once."""
    other = client.semaphore(key, capacity) if capacity else client.lock(key)
    grant = other.acquire()
    if grant:
        other.release()
    return not grant.acquired and grant.token == 0 and grant.ttl_ms > 0


def during(seconds, check):
    """check() holds from now until `seconds` have passed (checked at the end too)."""
    end = time.monotonic() + seconds
    while True:
        assert check()
        if time.monotonic() >= end:
            return
        time.sleep(0.05)


class Lost:
    """An on_lost callback that keeps its calls and the threads they came from."""

    def __init__(self):
        self.calls, self.threads, self.event = [], [], threading.Event()

    def __call__(self, key, owner, reason):
        self.calls.append((key, owner, reason))
        self.threads.append(threading.get_ident())
        self.event.set()

    def wait(self):
        assert self.event.wait(LOST_S), "on_lost was not called within %.1f s" % LOST_S
        assert threading.get_ident() not in self.threads  # the renewal thread's
        return self.calls


# ------------------------------------------------------------------ locks

def test_with_takes_and_releases_with_growing_tokens(client):
    tokens = []
    for _ in range(2):
        with client.lock("k", lease_ms=5000) as lk:
            assert lk.grant == (True, lk.token, 5000, 1) and lk.grant
            assert refused(client, "k")
            tokens.append(lk.token)
        assert client.lock("k", owner="o").acquire() and client.unlock("k", "o") == 0
    assert 0 < tokens[0] < tokens[1]


def test_second_owner_is_refused_and_with_raises(client, rr):
    holder = client.lock("k", owner="holder", lease_ms=LONG_MS)
    assert holder.acquire()
    grant = client.lock("k", owner="other").acquire()
    assert not grant and (grant.acquired, grant.token, grant.holds) == (False, 0, 0)
    assert 0 < grant.ttl_ms <= LONG_MS
    for wait_ms in (0, 200):  # tried once, or the wait runs out
        with pytest.raises(LockNotAcquired) as e:
            with client.lock("k", wait_ms=wait_ms):
                pytest.fail("entered a lock that is held")
        assert isinstance(e.value, floodgate.Error) and not e.value.grant.acquired
        assert e.value.grant.ttl_ms > 0
    if rr is not None:
        assert lockinfo(rr, "k")["waiters"] == []
    assert not client.lock("k", owner="holder").acquire()  # not reentrant: refused like anyone
    assert holder.release() == 0 and holder.release() == -1


def test_reentrant_holds(client):
    lk = client.lock("k", owner="o", reentrant=True, lease_ms=5000)
    with lk:
        token = lk.token
        with lk:
            assert lk.grant == (True, token, 5000, 2)
        assert refused(client, "k")  # one hold left
    assert not refused(client, "k")


def test_shared_locks_exclude_a_writer(client):
    a = client.lock("rw", owner="a", shared=True)
    b = client.lock("rw", owner="b", shared=True)
    assert a.acquire() and b.acquire() and b.token > a.token
    assert not client.lock("rw", owner="w").acquire()
    with pytest.raises(floodgate.InvalidError, match="^ERR owner holds a shared lock"):
        client.lock("rw", owner="a").acquire()
    assert a.release() == 0 and b.release() == 0
    with client.lock("rw", owner="w") as w:
        assert w.grant and not client.lock("rw", owner="r", shared=True).acquire()


def test_extend_and_unlock_by_another_object_of_the_owner(client, rr):
    lk = client.lock("k", owner="o", lease_ms=1000)
    assert lk.acquire() and lk.extend(LONG_MS) is True
    # A refusal's ttl_ms is the lease left; on a server FG.LOCKINFO says it too.
    assert LONG_MS - 10000 < client.lock("k").acquire().ttl_ms <= LONG_MS
    if rr is not None:
        assert LONG_MS - 10000 < lockinfo(rr, "k")["holders"][0][3] <= LONG_MS
    assert client.lock("k", owner="o").release() == 0
    assert lk.extend() is False and lk.release() == -1
    assert not refused(client, "k")


# ---------------------------------------------------------------- waiting

def in_call(thread):
    """The thread is inside Lock.acquire's call into the library."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name == "_acquire"


def test_waiter_is_granted_when_another_thread_releases(client, rr):
    holder = client.lock("w", owner="holder", lease_ms=LONG_MS)
    assert holder.acquire()
    waiter = client.lock("w", owner="waiter", lease_ms=5000, wait_ms=LONG_MS)
    grants = []
    t = threading.Thread(target=lambda: grants.append(waiter.acquire()))
    t.start()
    # This thread runs Python while the other blocks in its call: the GIL is free.
    if rr is not None:
        wait_for(lambda: [x[0] for x in lockinfo(rr, "w")["waiters"]] == ["waiter"])
    else:
        wait_for(lambda: in_call(t))
    assert t.is_alive() and grants == []  # it cannot be granted while the holder holds
    assert holder.release() == 0
    t.join(LOST_S)
    assert not t.is_alive() and grants[0] == (True, waiter.token, 5000, 1)
    assert waiter.token > holder.token and refused(client, "w")
    assert waiter.release() == 0


def test_threads_contending_never_overlap(client):
    rounds, inside, most, tokens, failures = 5, [0], [0], [], []
    count = threading.Lock()  # guards the counters only: the floodgate lock excludes

    def worker():
        try:
            for _ in range(rounds):
                with client.lock("cs", lease_ms=LONG_MS, wait_ms=LONG_MS) as lk:
                    with count:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                        tokens.append(lk.token)
                    time.sleep(0.001)  # let the others try to get in
                    with count:
                        inside[0] -= 1
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == [] and not any(t.is_alive() for t in threads)
    assert most[0] == 1 and len(tokens) == 8 * rounds
    assert tokens == sorted(set(tokens))  # each grant fences off the one before


# ------------------------------------------------------ semaphores, multi

def test_semaphore_capacity_across_owners(client, rr):
    o1 = client.semaphore("sem", 3, permits=2, owner="o1", lease_ms=5000)
    assert o1.acquire() == (True, o1.token, 5000, 2)
    assert not client.semaphore("sem", 3, permits=2, owner="o2").acquire()
    o2 = client.semaphore("sem", 3, permits=1, owner="o2")
    assert o2.acquire().holds == 1
    if rr is not None:
        assert lockinfo(rr, "sem")["used"] == 3
    assert o1.release() == 0 and o1.release() == -1
    twice = client.semaphore("sem", 3, permits=1, owner="o3")
    assert twice.acquire().holds == 1 and twice.acquire().holds == 2
    assert not client.semaphore("sem", 3, owner="o4").acquire()  # full again
    assert twice.release() == 1 and twice.release() == 0
    with client.semaphore("sem", 3, permits=2):
        with pytest.raises(LockNotAcquired):
            with client.semaphore("sem", 3):
                pytest.fail("a permit beyond the capacity")
    assert o2.release() == 0


def test_lock_multi_is_all_or_nothing(client, rr):
    keys = ["{t}a", "{t}b", "{t}c"]
    m = client.lock_multi(keys, owner="o", lease_ms=5000)
    assert m.acquire() == (True, m.token, 5000, 3)
    if rr is not None:
        assert [lockinfo(rr, k)["holders"][0][4] for k in keys] == [m.token] * 3
    assert refused(client, "{t}b")
    x = client.lock_multi(["{t}c", "{t}d"], owner="x")
    assert not x.acquire()
    assert not refused(client, "{t}d")  # none of x's keys was taken
    assert m.release() == 3
    with x:
        assert x.grant.holds == 2 and refused(client, "{t}c")
    if rr is not None:
        assert rr.exists(*keys, "{t}d") == 0


def test_lock_multi_across_slots_outside_a_cluster(client):
    """Only a cluster refuses keys of several slots (CROSSSLOT,
    test_lock_cluster.py); a plain server and mem: lock them, as the C
    library does."""
    with client.lock_multi(["a", "b"]) as m:
        assert m.grant.holds == 2 and refused(client, "a") and refused(client, "b")


# ---------------------------------------------------------------- renewal

def test_renewal_keeps_short_leases_alive_and_a_release_is_quiet(client, rr):
    lost = Lost()
    opts = dict(owner="o", lease_ms=LEASE_MS, renew=True, on_lost=lost)
    held = [client.lock("rk", **opts), client.semaphore("rs", 1, **opts),
            client.lock_multi(["{r}a", "{r}b"], **opts)]
    assert all(h.acquire() for h in held)
    keys = ("rk", "rs", "{r}a", "{r}b")

    def still_held():
        if rr is not None:
            assert all(0 < lockinfo(rr, k)["holders"][0][3] <= LEASE_MS + 1 for k in keys)
        return (all(refused(client, k, 1 if k == "rs" else 0) for k in keys)
                and lost.calls == [])
    during(3 * LEASE_S, still_held)  # three leases later
    assert [h.release() for h in held] == [0, 0, 2]
    # Other owners take the keys: a renewal still running would be refused now.
    others = [client.lock(k, lease_ms=LONG_MS) for k in keys]
    assert all(o.acquire() for o in others)
    during(3 * LEASE_S, lambda: lost.calls == [])


def test_renewal_reports_a_lock_taken_away(target, r):
    c = floodgate.Client(target.url)
    lost, kept = Lost(), Lost()
    lk = c.lock("fk", owner="o", lease_ms=LEASE_MS, renew=True, on_lost=lost)
    assert lk.acquire() and lk.release() == 0  # taken again: its callback still counts
    assert lk.acquire()
    keep = c.lock("keep", owner="o", lease_ms=LEASE_MS, renew=True, on_lost=kept)
    assert keep.acquire()
    r.execute_command("FG.FORCEUNLOCK", "fk")
    assert lost.wait() == [("fk", "o", LostReason.NOT_HELD)]
    during(3 * LEASE_S, lambda: holders(r, "keep") == ["o"] and kept.calls == [])
    assert lk.release() == -1 and keep.release() == 0
    m = c.lock_multi(["{f}a", "{f}b"], owner="p", lease_ms=LEASE_MS, renew=True, on_lost=lost)
    assert m.acquire()
    r.delete("{f}b")
    wait_for(lambda: len(lost.calls) == 2, timeout=LOST_S)
    assert lost.calls[1] == ("{f}b", "p", LostReason.NOT_HELD)
    c.close()


def test_renewal_on_mem_reports_a_lease_its_clock_ended():
    offset_us = [0]
    c = floodgate.Client("mem:", clock=lambda: time.time_ns() // 1000 + offset_us[0])
    lost = Lost()
    lk = c.lock("k", owner="o", lease_ms=LEASE_MS, renew=True, on_lost=lost)
    assert lk.acquire()
    offset_us[0] = 3600 * 10**6  # an hour later by the client's clock: the lease ended
    assert lost.wait() == [("k", "o", LostReason.NOT_HELD)]
    assert lk.release() == -1
    c.close()


def test_renewal_stops_at_its_limit(client):
    lost, renew_max_ms = Lost(), 5 * LEASE_MS
    lk = client.lock("lk", owner="o", lease_ms=LEASE_MS, renew=True, renew_max_ms=renew_max_ms,
                     on_lost=lost)
    start = time.monotonic()
    assert lk.acquire()

    def held_before_the_limit():
        held = refused(client, "lk") and lost.calls == []
        return held or time.monotonic() - start >= renew_max_ms / 1000  # a stalled machine
    during(2.5 * LEASE_S, held_before_the_limit)
    assert lost.wait() == [("lk", "o", LostReason.RENEW_LIMIT)]
    assert time.monotonic() - start >= renew_max_ms / 1000
    wait_for(lambda: not refused(client, "lk"), timeout=LOST_S)  # the last lease ran out


def test_renewal_reports_an_unreachable_server():
    with Server() as own, floodgate.Client(url(own), command_timeout_ms=200) as c:
        lost = Lost()
        lk = c.lock("uk", owner="o", lease_ms=LEASE_MS, renew=True, on_lost=lost)
        assert lk.acquire()
        own.stop()
        assert lost.wait() == [("uk", "o", LostReason.UNREACHABLE)]
        with pytest.raises(floodgate.IOError):
            lk.release()


# ----------------------------------------------------------------- errors

# A call of the binding, and the command the server refuses the same way.
BAD_INPUT = [
    (lambda c: c.lock("k", "o", lease_ms=0).acquire(), ("FG.LOCK", "k", "o", 0)),
    (lambda c: c.lock("k", "o", lease_ms=1000, wait_ms=10**12 + 1).acquire(),
     ("FG.LOCK", "k", "o", 1000, "WAIT", 10**12 + 1)),
    (lambda c: c.lock("k", "o" * 300, lease_ms=1000).acquire(), ("FG.LOCK", "k", "o" * 300, 1000)),
    (lambda c: c.semaphore("s", 2, 3, "o", lease_ms=1000).acquire(),
     ("FG.ACQUIRE", "s", 2, "o", 3, 1000)),
    (lambda c: c.semaphore("s", 2, 0, "o", lease_ms=1000).acquire(),
     ("FG.ACQUIRE", "s", 2, "o", 0, 1000)),
    (lambda c: c.semaphore_release("s", "o", 1000001), ("FG.RELEASE", "s", "o", 1000001)),
    (lambda c: c.lock("k", "o").extend(0), ("FG.EXTEND", "k", "o", 0)),
    (lambda c: c.lock_multi(["a", "a"], "o", lease_ms=1000).acquire(),
     ("FG.MLOCK", 2, "a", "a", "o", 1000)),
    (lambda c: c.unlock_multi(["a", "a"], "o"), ("FG.MUNLOCK", 2, "a", "a", "o")),
]


@pytest.mark.parametrize("call,command", BAD_INPUT)
def test_bad_input_is_the_servers_error_on_every_backend(target, r, call, command):
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command(*command)
    for where in ("mem:", target.url):
        with floodgate.Client(where) as c:
            with pytest.raises(floodgate.InvalidError) as got:
                call(c)
        assert isinstance(got.value, ValueError) and got.value.code == "invalid"
        assert got.value.message == "ERR " + str(e.value), where
    assert r.dbsize() == 0


def test_bad_options(client, rr):
    for options in (dict(wait_ms=-2), dict(renew_max_ms=-1),
                    dict(durable_replicas=1, durable_timeout_ms=0)):
        with pytest.raises(floodgate.InvalidError):
            client.lock("k", **options).acquire()
    with pytest.raises(TypeError, match="unknown option 'leese_ms'"):
        client.lock("k", leese_ms=1000)
    with pytest.raises(TypeError, match="unknown option 'shared'"):
        client.semaphore("s", 2, shared=True)
    if rr is None:
        with pytest.raises(floodgate.UnsupportedError):  # no replicas in process
            client.lock("k", durable_replicas=1).acquire()
    else:
        rr.set("str", "v")
        with pytest.raises(floodgate.WrongTypeError, match="^WRONGTYPE"):
            client.lock("str").acquire()


def test_locks_unsupported_on_a_cluster_url():
    with floodgate.Client("redis+cluster://127.0.0.1:%d" % free_port()) as c:
        for call in (lambda: c.lock("k").acquire(), lambda: c.unlock("k", "o"),
                     lambda: c.extend("k", "o", 100), lambda: c.semaphore("s", 2).acquire(),
                     lambda: c.semaphore_release("s", "o"), lambda: c.lock_multi(["a"]).acquire(),
                     lambda: c.unlock_multi(["a"], "o")):
            with pytest.raises(floodgate.UnsupportedError):
                call()
        with pytest.raises(floodgate.UnsupportedError):
            with c.lock("k"):
                pytest.fail("entered a lock on a cluster URL")


# ---------------------------------------------------------------- redlock

@pytest.fixture(params=("module", "stock", "mixed"))
def three(request):
    modules = {"module": (True,) * 3, "stock": (False,) * 3, "mixed": (True, False, True)}
    servers = [Server(module=m).start() for m in modules[request.param]]
    yield servers
    for srv in servers:
        srv.cleanup()


def redlock(servers):
    return floodgate.Redlock([url(x) for x in servers], retry_count=1, retry_delay_ms=50,
                             retry_jitter_ms=10, server_timeout_ms=500)


def rinfo(srv, key):
    with backends.script_client(srv) as c:
        return lockinfo(c, key)


def test_redlock_all_up(three):
    with redlock(three) as rl:
        with rl.lock("rk", lease_ms=10000, owner="o") as lk:
            assert lk.grant.acquired and lk.grant.votes == 3
            assert 0 < lk.grant.validity_ms < 10000
            infos = [rinfo(x, "rk")["holders"][0] for x in three]
            assert [h[0] for h in infos] == ["o"] * 3
            token = max(h[4] for h in infos)
            assert lk.token == lk.grant.token == token
            assert rl.acquire("rk", "other", 10000) == (False, 0, 0, 0)  # retried, given up
            grant = lk.extend(20000)
            assert (grant.acquired, grant.votes, grant.token) == (True, 3, 0)
            assert 10000 < grant.validity_ms < 20000 and lk.token == token  # kept
            assert all(10000 < rinfo(x, "rk")["holders"][0][3] <= 20000 for x in three)
        assert all(rinfo(x, "rk") is None for x in three)  # released everywhere
        assert rl.extend("rk", "o", 1000) == (False, 0, 0, 0)
        with rl.lock("rk", lease_ms=10000) as again:
            assert again.token > lk.token


def test_redlock_majority_with_one_server_stopped(three):
    rl = redlock(three)
    three[2].stop()
    with rl.lock("rk", lease_ms=10000, owner="o") as lk:
        assert lk.grant.acquired and lk.grant.votes == 2
        assert [rinfo(x, "rk")["holders"][0][0] for x in three[:2]] == ["o", "o"]
    assert all(rinfo(x, "rk") is None for x in three[:2])  # `with` let the third go
    lk = rl.lock("rk", lease_ms=10000)
    assert lk.acquire().votes == 2
    with pytest.raises(floodgate.IOError, match="^1 of 3 servers did not answer"):
        lk.release()
    assert all(rinfo(x, "rk") is None for x in three[:2])
    rl.close()
    rl.close()  # twice is fine
    with pytest.raises(floodgate.Error, match="closed"):
        rl.acquire("rk", "o", 1000)


def test_redlock_without_a_majority(three):
    rl = redlock(three)
    three[1].stop()
    three[2].stop()
    with pytest.raises(LockNotAcquired) as e:
        with rl.lock("rk", lease_ms=10000, owner="o"):
            pytest.fail("entered without a majority")
    assert isinstance(e.value, floodgate.Error) and e.value.grant == (False, 0, 1, 0)
    assert rinfo(three[0], "rk") is None  # the one vote was given back
    rl.close()


def test_redlock_needs_server_urls():
    with pytest.raises(floodgate.InvalidError, match="redis: or unix: URLs"):
        floodgate.Redlock(["mem:"])
