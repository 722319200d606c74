"""Operators pause writes: CLIENT PAUSE WRITE, FAILOVER, CLUSTER FAILOVER.

While writes are paused the server must neither write nor replicate (Redis
7.0 asserts against it), yet the module's timers keep firing: lease ends,
waiter deadlines, a waiter ahead leaving. Each test queues waiters of one
family, pauses writes, waits until a timer has found the pause (INFO
floodgate_pauses counts deferred work), checks that the dataset, the
replication offset and the AOF did not move, then lets the pause end and
checks that every waiter gets its answer right after, with the replica and
the replayed AOF identical to the master.

No assertion reads the wall clock: the pause is ended by CLIENT UNPAUSE
once the test has seen what it waits for, and leases end on their own.
"""

import os
import shutil
import signal
import subprocess
import threading

import pytest

from harness import Server, wait_for
from topology import assert_no_crash, aof_files, digest, s

LONG_MS = 600000  # leases and timeouts that must not end during a test
# A short lease or timeout ends inside the pause. It must not end before the
# pause begins: when the machine was too slow for that, the scenario runs
# again with a longer one (SHORT_MS times 4, 16, ...).
SHORT_MS = 300


def pause_info(c):
    return c.info("floodgate_pauses")


def deferred(c):
    return int(pause_info(c).get("floodgate_deferred_during_pauses", 0))


def blocked_clients(c):
    return int(c.info("clients")["blocked_clients"])


def aof_bytes(server):
    return sum(os.path.getsize(f) for f in aof_files(server) if f.endswith(".aof"))


class Call(threading.Thread):
    """A blocking command on its own connection; .reply or .error after join."""

    def __init__(self, server, *args):
        super().__init__(daemon=True)
        self.c = server.client(socket_timeout=60)
        self.id = self.c.client_id()
        self.args = args
        self.reply = self.error = None

    def run(self):
        try:
            self.reply = self.c.execute_command(*self.args)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            self.error = e
        finally:
            self.c.close()

    def result(self, timeout=60):
        self.join(timeout)
        assert not self.is_alive(), "%r was never answered" % (self.args,)
        return self.reply, self.error


def start_waiters(server, admin, calls):
    """Starts each blocking call in order, each queued before the next.
    Stops at the first call answered instead (or that let one before it
    be answered): on a slow machine a short lease or timeout can end
    before its call is queued, and the callers then try a longer one. (It
    waited for the call to block, which such a call never does: 30 s, then
    TimeoutError, as seen on a loaded machine running the suite on several
    workers.)"""
    threads = []
    for args in calls:
        before = blocked_clients(admin)
        t = Call(server, *args)
        t.start()
        threads.append(t)
        wait_for(lambda: blocked_clients(admin) > before
                 or not all(w.is_alive() for w in threads), timeout=30)
        if not all(w.is_alive() for w in threads):
            break
    return threads


# ----------------------------------------------------------------- families
#
# Each scenario, given the short time t (ms): setup commands, the waiters
# (in queue order), and what each must be answered once the pause ends. In
# the "lease" scenarios a lease ends inside the pause; in the "timeout"
# ones a waiter's deadline passes inside the pause and frees the one behind.

SCENARIOS = {
    "lock-lease": lambda t: (
        [("FG.LOCK", "L", "holder", t)],
        [("FG.LOCK", "L", "w1", LONG_MS, "WAIT", LONG_MS)],
        ["grant"]),
    "lock-timeout": lambda t: (
        [("FG.LOCK", "L", "reader", LONG_MS, "SHARED")],
        [("FG.LOCK", "L", "writer", LONG_MS, "WAIT", t),
         ("FG.LOCK", "L", "reader2", LONG_MS, "SHARED", "WAIT", LONG_MS)],
        ["deny", "grant"]),
    "semaphore-lease": lambda t: (
        [("FG.ACQUIRE", "S", 2, "holder", 2, t)],
        [("FG.ACQUIRE", "S", 2, "w1", 1, LONG_MS, "WAIT", LONG_MS)],
        ["grant"]),
    "semaphore-timeout": lambda t: (
        [("FG.ACQUIRE", "S", 2, "holder", 1, LONG_MS)],
        [("FG.ACQUIRE", "S", 2, "big", 2, LONG_MS, "WAIT", t),
         ("FG.ACQUIRE", "S", 2, "small", 1, LONG_MS, "WAIT", LONG_MS)],
        ["deny", "grant"]),
    "mlock-lease": lambda t: (
        [("FG.MLOCK", 2, "{m}a", "{m}b", "holder", t)],
        [("FG.MLOCK", 2, "{m}a", "{m}b", "w1", LONG_MS, "WAIT", LONG_MS)],
        ["grant"]),
    "mlock-timeout": lambda t: (
        [("FG.LOCK", "{m}a", "holder", LONG_MS)],
        [("FG.MLOCK", 2, "{m}a", "{m}b", "both", LONG_MS, "WAIT", t),
         ("FG.LOCK", "{m}b", "second", LONG_MS, "WAIT", LONG_MS)],
        ["deny", "grant"]),
    # A bucket of one token refilled every t ms: the waiter is let through
    # when it refills, inside the pause; its deadline passes there too.
    "policy-refill": lambda t: (
        [("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 1, 1000.0 / t),
         ("FG.CHECK", "p", "k")],
        [("FG.CHECK", "p", "k", "WAIT", t + t // 4)],
        ["grant"]),
}


def granted(reply):
    return int(reply[0]) == 1


def clear(admin):
    admin.execute_command("FLUSHALL")
    for name in admin.execute_command("FG.POLICY", "LIST"):
        admin.execute_command("FG.POLICY", "DEL", name)


def pause_with_waiters(server, admin, scenario, t):
    """Sets up, queues the waiters and pauses writes. None when a short
    lease or timeout ended before the pause began (the machine was slow)."""
    setup, calls, expected = scenario(t)
    for cmd in setup:
        admin.execute_command(*cmd)
    waiters = start_waiters(server, admin, calls)
    admin.execute_command("CLIENT", "PAUSE", LONG_MS, "WRITE")
    if all(w.is_alive() for w in waiters) and blocked_clients(admin) == len(waiters):
        return waiters, expected
    admin.execute_command("CLIENT", "UNPAUSE")
    for w in waiters:
        w.result()
    clear(admin)
    return None


# Timers that must find the pause: in policy-refill the queue's timer and
# the waiter's deadline (both settle decisions) are deferred.
DEFERRALS = {"policy-refill": 2}


def run_scenario(server, admin, name, replica=None):
    t = SHORT_MS
    while not (queued := pause_with_waiters(server, admin, SCENARIOS[name], t)):
        t *= 4
        assert t < LONG_MS / 10, "the machine is too slow for this test"
    waiters, expected = queued
    deferred_before = deferred(admin)
    try:
        frozen = digest(admin)
        offset = admin.info("replication")["master_repl_offset"]
        aof = aof_bytes(server)
        # A timer fires inside the pause and defers its work.
        want = deferred_before + DEFERRALS.get(name, 1)
        wait_for(lambda: deferred(admin) >= want, timeout=30)
        assert int(pause_info(admin)["floodgate_writes_paused"]) == 1
        assert_no_crash(server)
        assert digest(admin) == frozen, "the dataset changed while writes were paused"
        assert admin.info("replication")["master_repl_offset"] == offset, \
            "something was replicated while writes were paused"
        assert aof_bytes(server) == aof, "the AOF grew while writes were paused"
        for w, want in zip(waiters, expected):
            if want == "grant":
                assert w.is_alive(), "a waiter was granted while writes were paused"
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    for w, want in zip(waiters, expected):
        reply, error = w.result()
        assert error is None, "%s: %r" % (name, error)
        assert granted(reply) == (want == "grant"), "%s: %r for %r" % (name, reply, w.args)
    assert_no_crash(server)
    wait_for(lambda: int(pause_info(admin)["floodgate_deferred_waiting"]) == 0, timeout=10)
    if replica is not None:
        rc = replica.client()
        try:
            wait_for(lambda: rc.info("replication")["master_repl_offset"]
                     == admin.info("replication")["master_repl_offset"], timeout=30)
            assert digest(rc) == digest(admin), "the replica differs from its master"
        finally:
            rc.close()
        assert_no_crash(replica)


def replay_aof(server):
    """The digest of a fresh server loading a copy of server's AOF."""
    d = server.dir + "-replay"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copytree(os.path.join(server.dir, "appendonlydir"), os.path.join(d, "appendonlydir"))
    replay = Server(["--appendonly", "yes"], dir=d)
    try:
        replay.start(timeout=30)
        c = replay.client()
        try:
            wait_for(lambda: c.info("persistence")["loading"] == 0, timeout=30)
            return digest(c)
        finally:
            c.close()
    finally:
        replay.cleanup()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_client_pause_write_with_aof_and_a_replica(name):
    master = Server(["--appendonly", "yes", "--appendfsync", "always"])
    master.start()
    replica = Server(["--replicaof", "127.0.0.1", master.port])
    replica.start()
    admin = master.client()
    try:
        wait_for(lambda: admin.info("replication")["connected_slaves"] == 1, timeout=30)
        run_scenario(master, admin, name, replica)
        expected = digest(admin)
        assert replay_aof(master) == expected, "the AOF replays to another state"
    finally:
        admin.close()
        replica.cleanup()
        master.cleanup()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_client_pause_write_alone(name):
    """Without AOF or replicas Redis 7.0 does not assert on replication,
    but a key whose lease ended is still in the keyspace while paused (its
    expiry waits too): writing it then aborted the server in dbAdd."""
    server = Server()
    server.start()
    admin = server.client()
    try:
        run_scenario(server, admin, name)
    finally:
        admin.close()
        server.cleanup()


def test_a_waiter_that_disconnects_during_a_pause_hands_over_after_it():
    server = Server(["--appendonly", "yes"])
    server.start()
    admin = server.client()
    try:
        admin.execute_command("FG.LOCK", "L", "reader", LONG_MS, "SHARED")
        first, second = start_waiters(server, admin, [
            ("FG.LOCK", "L", "writer", LONG_MS, "WAIT", LONG_MS),
            ("FG.LOCK", "L", "reader2", LONG_MS, "SHARED", "WAIT", LONG_MS)])
        before = deferred(admin)
        admin.execute_command("CLIENT", "PAUSE", LONG_MS, "WRITE")
        frozen = digest(admin)
        admin.execute_command("CLIENT", "KILL", "ID", first.id)  # the writer goes away
        first.result()
        wait_for(lambda: deferred(admin) > before, timeout=30)
        assert digest(admin) == frozen
        assert second.is_alive()
        admin.execute_command("CLIENT", "UNPAUSE")
        reply, error = second.result()
        assert error is None and granted(reply)
        assert_no_crash(server)
    finally:
        admin.close()
        server.cleanup()


# ------------------------------------------------------------------ FAILOVER


def failover_with_waiters(master, m, t):
    """Queues a lock and a policy waiter whose wait ends t ms from now and
    starts FAILOVER (the replica is asleep: the master stays paused). None
    when the waits ended before the pause began."""
    m.execute_command("FG.LOCK", "L", "holder", t)
    m.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 1, 1000.0 / t)
    m.execute_command("FG.CHECK", "p", "k")
    waiters = start_waiters(master, m, [
        ("FG.LOCK", "L", "w1", LONG_MS, "WAIT", LONG_MS),
        ("FG.CHECK", "p", "k", "WAIT", LONG_MS)])
    m.execute_command("FAILOVER", "TIMEOUT", LONG_MS)
    if all(w.is_alive() for w in waiters):
        return waiters
    m.execute_command("FAILOVER", "ABORT")
    for w in waiters:
        w.result()
    clear(m)
    return None


def test_failover_with_waiters_queued():
    """FAILOVER pauses writes until the replica has caught up, then demotes
    the master. The replica sleeps (DEBUG SLEEP) so that the pause lasts
    until a lease ends and a bucket refills inside it; the old master must
    neither crash nor write, and its waiters are answered -UNBLOCKED (the
    queues were the old master's)."""
    master = Server(["--appendonly", "yes"])
    master.start()
    replica = Server(["--replicaof", "127.0.0.1", master.port])
    replica.start()
    m, r = master.client(), replica.client(socket_timeout=120)
    try:
        wait_for(lambda: m.info("replication")["connected_slaves"] == 1, timeout=30)
        t = SHORT_MS
        while True:
            sleeper = Call(replica, "DEBUG", "SLEEP", 10 * t / 1000.0)
            sleeper.start()
            before = deferred(m)
            waiters = failover_with_waiters(master, m, t)
            if waiters:
                break
            sleeper.result()
            t *= 4
            assert t < LONG_MS / 10, "the machine is too slow for this test"
        wait_for(lambda: deferred(m) >= before + 2, timeout=30)
        assert int(pause_info(m)["floodgate_writes_paused"]) == 1
        assert all(w.is_alive() for w in waiters), "granted while writes were paused"
        offset = m.info("replication")["master_repl_offset"]
        sleeper.result()
        wait_for(lambda: m.info("replication")["role"] == "slave", timeout=60)
        for w in waiters:
            reply, error = w.result()
            assert error is not None and "UNBLOCKED" in str(error), (reply, error)
        assert_no_crash(master)
        assert_no_crash(replica)
        assert r.info("replication")["role"] == "master"
        # the old master wrote nothing of its own once the pause began
        wait_for(lambda: m.info("replication")["master_repl_offset"]
                 == r.info("replication")["master_repl_offset"], timeout=30)
        assert digest(m) == digest(r)
        assert int(r.info("replication")["master_repl_offset"]) >= offset
    finally:
        m.close()
        r.close()
        replica.cleanup()
        master.cleanup()


# ---------------------------------------------------------- CLUSTER FAILOVER


def cluster_node(extra=()):
    return Server(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", "5000", "--appendonly", "yes"] + list(extra))


def test_cluster_failover_with_waiters_queued():
    """CLUSTER FAILOVER pauses the old master's writes until its replica is
    elected. With the other masters stopped (SIGSTOP) the replica cannot win
    the election, so the pause lasts until the manual failover times out:
    long enough for a lease to end inside it. The master must write nothing
    then, and serve its waiter once the pause is over."""
    a, b, c, d = (cluster_node() for _ in range(4))
    nodes = [a, b, c, d]
    for n in nodes:
        n.start()
    ca, cb = a.client(socket_timeout=60), b.client(socket_timeout=60)
    stopped = []
    try:
        others = [n.client() for n in (b, c, d)]
        ranges = {a: (0, 5460), c: (5461, 10922), d: (10923, 16383)}
        for n, (lo, hi) in ranges.items():
            n.client().execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for cl in others:
            cl.execute_command("CLUSTER", "MEET", "127.0.0.1", a.port)
        wait_for(lambda: all(len(s(n.client().execute_command("CLUSTER", "NODES")).splitlines()) == 4
                             for n in nodes), timeout=30)
        a_id = s(ca.execute_command("CLUSTER", "MYID"))
        cb.execute_command("CLUSTER", "REPLICATE", a_id)
        wait_for(lambda: cb.info("replication")["master_link_status"] == "up", timeout=30)
        wait_for(lambda: all("cluster_state:ok" in s(n.client().execute_command("CLUSTER", "INFO"))
                             for n in nodes), timeout=30)
        key = "{a}L"  # slot 15495 is not a's: pick a key in a's range
        for i in range(1000):
            if int(ca.execute_command("CLUSTER", "KEYSLOT", "k%d" % i)) <= 5460:
                key = "k%d" % i
                break
        ca.execute_command("FG.LOCK", key, "holder", 2000)
        (waiter,) = start_waiters(a, ca, [("FG.LOCK", key, "w1", LONG_MS, "WAIT", LONG_MS)])
        before = deferred(ca)
        for n in (c, d):
            os.kill(n.proc.pid, signal.SIGSTOP)
            stopped.append(n)
        cb.execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: int(pause_info(ca)["floodgate_writes_paused"]) == 1, timeout=30)
        frozen = digest(ca)
        offset = ca.info("replication")["master_repl_offset"]
        wait_for(lambda: deferred(ca) > before, timeout=30)
        assert waiter.is_alive(), "granted while writes were paused"
        assert digest(ca) == frozen
        assert ca.info("replication")["master_repl_offset"] == offset
        for n in stopped:
            os.kill(n.proc.pid, signal.SIGCONT)
        stopped.clear()
        # Either the failover completed (the waiter is told the master
        # changed) or it timed out (the old master grants the lock).
        reply, error = waiter.result(timeout=60)
        if error is not None:
            assert "UNBLOCKED" in str(error), error
        else:
            assert granted(reply), reply
        for n in nodes:
            assert_no_crash(n)
    finally:
        for n in stopped:
            os.kill(n.proc.pid, signal.SIGCONT)
        ca.close()
        cb.close()
        for n in nodes:
            n.cleanup()
