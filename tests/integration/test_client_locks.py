"""libfloodgate's locks against real servers: fg_lock and the others with
exact replies, waiting calls that leave the client's shared connection
free, renewal and its three ways of losing a lock, durable mode with a real
replica, and Redlock over three servers.

Each runs on the module and on a stock server, where the library speaks
lock.lua (docs/scripts.md, "Locks"); the test's own FG.* commands go there
as the same script (backends.script_client). Redlock runs on three
module servers, three stock ones, and a mix.

The C program is tests/client/lock_client.c (a line protocol, see its top
comment); it is built when missing.
"""

import os
import queue
import signal
import subprocess
import threading
import time

import pytest
import redis

import backends
from lock_fixtures import r, target  # noqa: F401 - fixtures
from harness import Server, free_port, s, wait_for, wait_replica_synced
from test_client import program


class LockClient:
    """lock_client: one command per line, one answer per line. Answers are
    read by a thread, so that a test can tell an answer that does not come."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([program("lock_client"), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.answers = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.opened = self.answers.get(timeout=10)

    def _read(self):
        for line in self.proc.stdout:
            self.answers.put(line.strip())

    def __call__(self, line, timeout=30):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.answers.get(timeout=timeout)

    def close(self):
        """Ends the program; one still waiting (a failed test) is killed."""
        self.proc.stdin.close()
        try:
            assert self.proc.wait(timeout=10) == 0
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def url(server):
    return "redis://127.0.0.1:%d" % server.port


def lockinfo(c, key):
    """FG.LOCKINFO as a dict, None when the key has no lock."""
    raw = c.execute_command("FG.LOCKINFO", key)
    if raw is None:
        return None
    raw = s(raw)
    return dict(zip(raw[0::2], raw[1::2]))


def holders(c, key):
    """The owners holding key, in grant order ([] when none)."""
    info = lockinfo(c, key)
    return [] if info is None else [h[0] for h in info["holders"]]


def grant(answer):
    """'ok ACQUIRED TOKEN TTL HOLDS' as integers."""
    fields = answer.split()
    assert fields[0] == "ok", answer
    return [int(x) for x in fields[1:]]


@pytest.fixture
def client(target, r):
    c = LockClient(target.url)
    assert c.opened == "open ok"
    yield c
    c.close()


@pytest.fixture
def own_server():
    srv = Server().start()
    yield srv
    srv.cleanup()


# ------------------------------------------------------------------ basics

def test_owner_ids_are_random_hex(client):
    ids = {client("owner").split()[1] for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_lock_unlock_extend_reentrant(client, r):
    acquired, token, ttl, holds = grant(client("lock k o1 5000"))
    assert (acquired, ttl, holds) == (1, 5000, 1) and token > 0
    assert holders(r, "k") == ["o1"]
    acquired, tok, ttl, holds = grant(client("lock k o2 5000"))
    assert (acquired, tok, holds) == (0, 0, 0) and 0 < ttl <= 5000
    assert grant(client("lock k o1 5000"))[:2] == [0, 0]  # not reentrant: waits like anyone
    assert client("lock k o1 5000 reentrant=1") == "ok 1 %d 5000 2" % token
    assert client("unlock k o1") == "ok 1"
    assert client("unlock k o1") == "ok 0"
    assert client("unlock k o1") == "ok -1"
    assert lockinfo(r, "k") is None
    assert client("extend k o1 100") == "ok 0"
    token2 = grant(client("lock k o1 100"))[1]
    assert token2 > token
    assert client("extend k o1 60000") == "ok 1"
    assert 50000 < lockinfo(r, "k")["holders"][0][3] <= 60000


def test_shared_locks(client, r):
    t1 = grant(client("lock rw a 5000 shared=1"))
    t2 = grant(client("lock rw b 5000 shared=1"))
    assert t1[0] == t2[0] == 1 and t2[1] > t1[1]
    assert grant(client("lock rw w 5000"))[:2] == [0, 0]
    assert [h[1] for h in lockinfo(r, "rw")["holders"]] == ["shared", "shared"]
    assert client("lock rw a 5000").startswith("err invalid ERR owner holds a shared lock")
    assert client("unlock rw a") == "ok 0"
    assert client("unlock rw b") == "ok 0"
    assert grant(client("lock rw w 5000"))[0] == 1


def test_semaphore(client, r):
    acquired, token, ttl, held = grant(client("sacquire sem 3 o1 2 5000"))
    assert (acquired, ttl, held) == (1, 5000, 2) and token > 0
    assert grant(client("sacquire sem 3 o2 2 5000"))[:2] == [0, 0]
    assert grant(client("sacquire sem 3 o2 1 5000"))[0::3] == [1, 1]
    assert lockinfo(r, "sem")["used"] == 3
    assert client("srelease sem o1 1") == "ok 1"
    assert client("srelease sem o1 0") == "ok 0"
    assert client("srelease sem o1 0") == "ok -1"
    assert client("srelease sem o1 -1").startswith("err invalid")
    assert holders(r, "sem") == ["o2"]


def test_multi_key_lock(client, r):
    acquired, token, ttl, keys = grant(client("mlock o 5000 {m}a {m}b {m}c"))
    assert (acquired, ttl, keys) == (1, 5000, 3) and token > 0
    assert [lockinfo(r, k)["holders"][0][4] for k in ("{m}a", "{m}b", "{m}c")] == [token] * 3
    assert grant(client("lock {m}b x 5000"))[0] == 0
    assert grant(client("mlock x 5000 {m}c {m}d"))[0] == 0  # all or nothing
    assert lockinfo(r, "{m}d") is None
    assert client("munlock o {m}a {m}b {m}c") == "ok 3"
    assert r.exists("{m}a", "{m}b", "{m}c") == 0
    too_many = " ".join("{m}k%d" % i for i in range(65))
    assert client("mlock o 5000 " + too_many).startswith("err invalid")
    assert client("munlock o").startswith("err invalid")


def test_errors_map_like_the_rest_of_the_library(client, r):
    r.set("str", "v")
    assert client("lock str o 1000").startswith("err wrongtype WRONGTYPE")
    assert client("lock k o 0").startswith("err invalid ERR")
    assert client("sacquire sem 0 o 1 1000").startswith("err invalid ERR")
    assert client("lock k o 1000 wait=-2").startswith("err invalid wait_ms")
    assert client("lock k o 1000 durable=1 durable_timeout=0").startswith("err invalid durable")
    assert r.exists("k", "sem") == 0


def test_bad_arguments_are_refused_as_the_server_would_without_a_round_trip(client, r):
    """lib/lock.c checks the arguments as the module parses them, for every
    backend: the server's words, and nothing sent (even to no server)."""
    cases = (("lock k o 0", ("FG.LOCK", "k", "o", 0)),
             ("lock k o 1000 wait=1000000000001",
              ("FG.LOCK", "k", "o", 1000, "WAIT", 1000000000001)),
             ("lock k %s 1000" % ("o" * 300), ("FG.LOCK", "k", "o" * 300, 1000)),
             ("sacquire s 2 o 3 1000", ("FG.ACQUIRE", "s", 2, "o", 3, 1000)),
             ("sacquire s 2 o 0 1000", ("FG.ACQUIRE", "s", 2, "o", 0, 1000)),
             ("srelease s o 1000001", ("FG.RELEASE", "s", "o", 1000001)),
             ("extend k o 0", ("FG.EXTEND", "k", "o", 0)),
             ("mlock o 1000 a a", ("FG.MLOCK", 2, "a", "a", "o", 1000)),
             ("munlock o a a", ("FG.MUNLOCK", 2, "a", "a", "o")))
    before = client("stats").split()[1]
    nowhere = LockClient("redis://127.0.0.1:%d" % free_port())
    for line, command in cases:
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command(*command)
        assert client(line) == "err invalid ERR " + str(e.value), line
        assert nowhere(line) == "err invalid ERR " + str(e.value), line
    assert client("stats").split()[1] == before
    nowhere.close()


def test_locks_unsupported_on_cluster():
    c = LockClient("redis+cluster://127.0.0.1:%d" % free_port())
    assert c.opened == "open ok"
    for line in ("lock k o 1000", "unlock k o", "extend k o 100", "sacquire s 2 o 1 100",
                 "srelease s o 0", "mlock o 100 a", "munlock o a"):
        assert c(line).startswith("err unsupported "), line
    c.close()


def test_locks_on_mem():
    """The in-process backend runs the same locks (tests/unit/test_mem_lock.c
    has the details); here through the same driver as the server's."""
    c = LockClient("mem:")
    assert c("lock k o 60000").startswith("ok 1 ")
    assert c("lock k p 1000").startswith("ok 0 0 ")
    assert c("unlock k p") == "ok -1"
    assert c("unlock k o") == "ok 0"
    assert c("mlock o 100 a b").startswith("ok 1 ")
    assert c("munlock o a b") == "ok 2"
    assert c("lock k o 1000 durable=1").startswith("err unsupported ")
    c.close()


def test_unreachable_server_is_an_io_error():
    c = LockClient("redis://127.0.0.1:%d" % free_port())
    assert c("lock k o 1000").startswith("err io")
    assert c("lock k o 1000 wait=100").startswith("err io")
    assert c("unlock k o").startswith("err io")
    c.close()


# ----------------------------------------------------------------- waiting

def test_waiting_lock_leaves_the_shared_connection_free(client, r):
    r.execute_command("FG.LOCK", "w", "holder", 60000)
    assert client("bg 1 lock w waiter 5000 wait=30000") == "ok started"
    wait_for(lambda: [x[0] for x in lockinfo(r, "w")["waiters"]] == ["waiter"])
    assert client("bg 2 lock w waiter2 5000 wait=-1") == "ok started"
    wait_for(lambda: [x[0] for x in lockinfo(r, "w")["waiters"]] == ["waiter", "waiter2"])
    # Both wait in the server; this thread's calls on the same client go on.
    assert grant(client("lock other o 5000", timeout=5))[0] == 1
    assert client("unlock other o", timeout=5) == "ok 0"
    assert client("result 1") == "pending" and client("result 2") == "pending"
    r.execute_command("FG.UNLOCK", "w", "holder")
    acquired, token, ttl, holds = grant(client("join 1"))
    assert (acquired, ttl, holds) == (1, 5000, 1)
    assert holders(r, "w") == ["waiter"]
    assert client("unlock w waiter") == "ok 0"
    assert grant(client("join 2"))[0] == 1  # wait -1: no timeout
    assert holders(r, "w") == ["waiter2"]


def test_waiting_lock_times_out(client, r):
    r.execute_command("FG.LOCK", "w", "holder", 60000)
    acquired, token, ttl, holds = grant(client("lock w waiter 5000 wait=200"))
    assert (acquired, token, holds) == (0, 0, 0) and 0 < ttl <= 60000
    assert lockinfo(r, "w")["waiters"] == []


# ----------------------------------------------------------------- renewal

def test_renewal_keeps_short_leases_alive(client, r):
    assert grant(client("lock rk o 300 renew=1"))[0] == 1
    assert grant(client("sacquire rs 2 o 1 300 renew=1"))[0] == 1
    assert grant(client("mlock o 300 {r}a {r}b renew=1"))[0] == 1
    time.sleep(2.0)
    for key in ("rk", "rs", "{r}a", "{r}b"):
        info = lockinfo(r, key)
        assert info is not None and info["holders"][0][0] == "o", key
        assert 0 < info["holders"][0][3] <= 300
    assert client("lost") == "ok 0"
    assert client("unlock rk o") == "ok 0"
    assert client("srelease rs o 0") == "ok 0"
    assert client("munlock o {r}a {r}b") == "ok 2"
    time.sleep(0.5)  # renewals of released locks would now answer 0
    assert client("lost") == "ok 0"
    assert r.exists("rk", "rs", "{r}a", "{r}b") == 0


def test_renewal_reports_a_forced_unlock(client, r):
    assert grant(client("lock fk o 300 renew=1"))[0] == 1
    assert grant(client("lock keep o 300 renew=1"))[0] == 1
    r.execute_command("FG.FORCEUNLOCK", "fk")
    wait_for(lambda: client("lost") == "ok 1 fk/o/not_held", timeout=5)
    time.sleep(0.4)
    assert holders(r, "keep") == ["o"]  # the other lock is still renewed
    assert client("lost") == "ok 1 fk/o/not_held"


def test_renewal_reports_a_lost_lock_while_other_keys_are_unlocked(server):
    """Regression: one unlock in flight anywhere in the client made the
    renewal thread re-ask instead of reporting a lost lock, so with other
    threads unlocking other keys all the time, a lock taken away was
    reported only when its lease ended, as unreachable."""
    out = subprocess.run([program("renewal_unlocks"), str(server.port), "4"],
                         stdout=subprocess.PIPE, timeout=60, check=True)
    line = s(out.stdout).strip()
    fields = dict(f.split("=") for f in line.split())
    assert fields["reason"] == "not_held", line
    assert 0 <= int(fields["after_ms"]) < 3000, line  # before the lease (3 s) ends


def test_renewal_stops_at_its_limit(client, r):
    assert grant(client("lock lk o 300 renew=1 renew_max=1500"))[0] == 1
    time.sleep(0.9)
    assert holders(r, "lk") == ["o"]  # renewed: three leases later
    wait_for(lambda: client("lost") == "ok 1 lk/o/renew_limit", timeout=5)
    wait_for(lambda: r.exists("lk") == 0, timeout=5)  # the last lease ran out


def test_renewal_reports_an_unreachable_server(own_server):
    c = LockClient(url(own_server), "timeout_ms=200")
    assert grant(c("lock uk o 300 renew=1"))[0] == 1
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: c("lost") == "ok 1 uk/o/unreachable", timeout=10)
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    wait_for(lambda: grant(c("lock other o 1000"))[0] == 1, timeout=5)
    c.close()


# ----------------------------------------------------------------- durable

@pytest.fixture(params=("module", "stock"))
def replicated(request):
    module = request.param == "module"
    master = Server(["--repl-diskless-sync-delay", "0"], module=module).start()
    replica = Server(["--replicaof", "127.0.0.1", str(master.port)], module=module).start()
    m, rep = backends.script_client(master), backends.script_client(replica)
    wait_replica_synced(m, rep)
    c = LockClient(url(master))
    yield c, m, rep, replica
    c.close()
    if replica.alive():
        os.kill(replica.proc.pid, signal.SIGCONT)
    replica.cleanup()
    master.cleanup()


# A durable grant that must succeed waits up to DURABLE_OK_MS for its
# replica: the ack comes as soon as the replica has it, and the default
# (1000 ms) is shorter than a loaded machine can take (two suites of 4
# xdist workers on 2 CPUs saw "only 0 of the 1 replicas ... within 1000 ms").
DURABLE_OK_MS = 30000


def test_durable_grants(replicated):
    c, m, rep, replica = replicated
    assert grant(c("lock d1 o 5000 durable=1 durable_timeout=%d" % DURABLE_OK_MS))[0] == 1
    assert holders(rep, "d1") == ["o"]  # acknowledged: the replica has it now
    a = c("lock d2 o 5000 durable=2 durable_timeout=200")
    assert a.startswith("err not_durable ") and "only 1 of the 2 replicas" in a
    assert lockinfo(m, "d2") is None
    a = c("sacquire d3 2 o 1 5000 durable=2 durable_timeout=200")
    assert a.startswith("err not_durable ")
    assert lockinfo(m, "d3") is None
    a = c("mlock o 5000 {d}a {d}b durable=2 durable_timeout=200")
    assert a.startswith("err not_durable ")
    assert m.exists("{d}a", "{d}b") == 0
    a = c("lock d1 o 5000 reentrant=1 durable=2 durable_timeout=200")
    assert a.startswith("err not_durable ")
    assert lockinfo(m, "d1")["holders"][0][2] == 1  # the re-entry was undone, the hold kept


def test_durable_grant_refused_while_the_replica_is_paused(replicated):
    c, m, rep, replica = replicated
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        a = c("lock d o 5000 durable=1 durable_timeout=200")
        assert a.startswith("err not_durable ") and "only 0 of the 1 replicas" in a
        assert lockinfo(m, "d") is None
        # A waiting request: WAIT follows the grant on its connection.
        m.execute_command("FG.LOCK", "dw", "holder", 60000)
        assert c("bg 1 lock dw o 5000 wait=30000 durable=1 durable_timeout=200") == "ok started"
        wait_for(lambda: lockinfo(m, "dw")["waiters"] != [])
        m.execute_command("FG.UNLOCK", "dw", "holder")
        assert c("join 1").startswith("err not_durable ")
        assert lockinfo(m, "dw") is None
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    wait_replica_synced(m, rep)
    m.execute_command("FG.LOCK", "dw", "holder", 60000)
    assert c("bg 2 lock dw o 5000 wait=30000 durable=1 durable_timeout=%d"
             % DURABLE_OK_MS) == "ok started"
    wait_for(lambda: lockinfo(m, "dw")["waiters"] != [])
    m.execute_command("FG.UNLOCK", "dw", "holder")
    assert grant(c("join 2"))[0] == 1
    assert holders(rep, "dw") == ["o"]


# ----------------------------------------------------------------- redlock

@pytest.fixture(params=("module", "stock", "mixed"))
def three(request):
    modules = {"module": (True,) * 3, "stock": (False,) * 3, "mixed": (True, False, True)}
    servers = [Server(module=m).start() for m in modules[request.param]]
    for srv in servers:  # lock.lua cached, as on a server that has seen it
        backends.script_client(srv).close()
    yield servers
    for srv in servers:
        if srv.alive():
            os.kill(srv.proc.pid, signal.SIGCONT)
        srv.cleanup()


def redlock(servers, *opts):
    c = LockClient("redlock", ",".join(url(x) for x in servers), "server_timeout=500",
                   "retries=1", "delay=50", "jitter=10", *opts)
    assert c.opened == "open ok"
    return c


def rgrant(answer):
    """'ok ACQUIRED VALIDITY VOTES TOKEN' as integers."""
    fields = answer.split()
    assert fields[0] == "ok", answer
    return [int(x) for x in fields[1:]]


def test_redlock_all_up(three):
    c = redlock(three)
    acquired, validity, votes, token = rgrant(c("rlock rk o 10000"))
    assert (acquired, votes) == (1, 3) and 0 < validity < 10000
    tokens = [lockinfo(backends.script_client(x), "rk")["holders"][0][4] for x in three]
    assert [lockinfo(backends.script_client(x), "rk")["holders"][0][0] for x in three] == ["o"] * 3
    assert token == max(tokens)
    assert rgrant(c("rlock rk other 10000")) == [0, 0, 0, 0]  # retried once, then given up
    acquired, validity, votes, token = rgrant(c("rextend rk o 20000"))
    assert (acquired, votes, token) == (1, 3, 0) and 10000 < validity < 20000
    assert all(10000 < lockinfo(backends.script_client(x), "rk")["holders"][0][3] <= 20000 for x in three)
    assert c("runlock rk o") == "ok"
    assert all(lockinfo(backends.script_client(x), "rk") is None for x in three)
    assert rgrant(c("rextend rk o 1000")) == [0, 0, 0, 0]
    c.close()


def test_redlock_one_server_down(three):
    c = redlock(three)
    three[2].stop()
    acquired, validity, votes, token = rgrant(c("rlock rk o 10000"))
    assert (acquired, votes) == (1, 2) and 0 < validity < 10000
    assert [holders(backends.script_client(x), "rk") for x in three[:2]] == [["o"], ["o"]]
    a = c("runlock rk o")
    assert a.startswith("err io 1 of 3 servers did not answer")
    assert all(lockinfo(backends.script_client(x), "rk") is None for x in three[:2])
    c.close()


def test_redlock_stopped_server_costs_its_timeout_only(three):
    c = redlock(three)
    os.kill(three[2].proc.pid, signal.SIGSTOP)
    try:
        acquired, validity, votes, token = rgrant(c("rlock rk o 10000"))
        assert (acquired, votes) == (1, 2) and 0 < validity < 10000
    finally:
        os.kill(three[2].proc.pid, signal.SIGCONT)
    # The request it got while stopped is granted late, and released by the
    # unlock on a new connection.
    wait_for(lambda: holders(backends.script_client(three[2]), "rk") == ["o"])
    assert c("runlock rk o") == "ok"
    assert all(lockinfo(backends.script_client(x), "rk") is None for x in three)
    c.close()


def test_redlock_without_a_majority_leaves_nothing_held(three):
    c = redlock(three)
    three[1].stop()
    three[2].stop()
    assert rgrant(c("rlock rk o 10000")) == [0, 0, 1, 0]
    assert lockinfo(backends.script_client(three[0]), "rk") is None
    c.close()


def test_redlock_majority_held_by_another(three):
    c = redlock(three)
    for x in three[:2]:
        backends.script_client(x).execute_command("FG.LOCK", "rk", "other", 60000)
    assert rgrant(c("rlock rk o 10000")) == [0, 0, 1, 0]
    assert lockinfo(backends.script_client(three[2]), "rk") is None
    assert [holders(backends.script_client(x), "rk") for x in three[:2]] == [["other"], ["other"]]
    c.close()


def test_redlock_on_servers_that_lost_the_script():
    """Regression: Redlock sent EVALSHA alone, so a server without the
    module that had lost lock.lua (a restart, SCRIPT FLUSH) answered
    NOSCRIPT and gave no vote, however long it had been up."""
    servers = [Server(module=False).start() for _ in range(3)]
    try:
        c = redlock(servers)
        acquired, validity, votes, token = rgrant(c("rlock rk o 10000"))
        assert (acquired, votes) == (1, 3) and token > 0
        for srv in servers:
            srv.client().script_flush()
        assert rgrant(c("rextend rk o 20000"))[:3:2] == [1, 3]
        assert c("runlock rk o") == "ok"
        assert all(lockinfo(backends.script_client(x), "rk") is None for x in servers)
        c.close()
    finally:
        for srv in servers:
            srv.cleanup()
