"""floodgate_async.h on a libevent loop (tests/client/async_client.c) against
real servers: the synchronous client's answers and messages, one pipelined
connection for concurrent calls, callbacks only from the loop, cancelling,
the denial cache, timeouts and the failure policies, reconnection, AUTH
and SELECT, unix sockets.

The answers, the pipelined connection, cancelling, the denial cache, AUTH
and SELECT, policies and a cluster run on stock servers too (backends.py),
where the client speaks the server scripts; semaphores need the module.
"""

import os
import signal
import subprocess
import time

import pytest
import redis

import floodgate
from backends import BACKENDS, of_param, target
from harness import Server, free_port, wait_for
from test_client import POLICY_ANSWERS, Driver, program, url

SLOW = "token 3 0.001"  # 3 at once, then one unit every 1000 s: nothing refills during a test


@pytest.fixture(autouse=True, params=["async_client", "async_client_asan"])
def build(request):
    """Every test runs on the plain library and on its ASan+UBSan build."""
    AsyncClient.program = request.param


class AsyncClient:
    """async_client: calls start at once; `wait` runs the loop and returns
    the answers by id (each once), and how long the loop ran."""

    program = "async_client"

    def __init__(self, address, *opts):
        self.proc = subprocess.Popen([program(self.program), address, *opts],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.opened = self.proc.stdout.readline().strip()
        self.refused = {}

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def call(self, line):
        """A command that answers one line at once (sleep, stats, close)."""
        self.send(line)
        return self.proc.stdout.readline().strip()

    def start(self, line):
        """A check or peek, answered at the next wait."""
        self.send(line)

    def refusal(self, line):
        """A check or peek refused at once: its line."""
        self.send(line)
        return self.proc.stdout.readline().strip()

    def wait(self):
        self.send("wait")
        answers, order = {}, []
        while True:
            line = self.proc.stdout.readline().strip()
            assert line, "the driver ended"
            if line.startswith("done "):
                return answers, order, float(line.split()[1])
            ident, rest = line.split(" ", 1)
            assert ident not in answers, "answered twice: " + line
            answers[ident] = rest
            order.append(ident)

    def stats(self):
        fields = self.call("stats").split()[1:]
        return dict(zip(["decisions", "round_trips", "cached", "failures", "reconnects"],
                        map(int, fields)))

    def close(self):
        """Ends the driver, which closes its client: it exits 0 (a sanitized
        build exits otherwise on a memory error or a leak)."""
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0


@pytest.fixture
def server():
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A flushed backends.Target: a module server of the test's own, the
    stock server, the stock cluster."""
    return of_param(request)


# one server's tests (they look at its clients, or stop it)
ONE_SERVER = pytest.mark.parametrize("backend", ["module", "stock"], indirect=True,
                                     scope="function")


def allowed(answers):
    return sum(1 for a in answers.values() if a.startswith("ok 1 "))


# ----------------------------------------------------------------- answers

def test_the_same_answers_as_the_synchronous_client(backend):
    """The same sequence of checks and peeks on two keys, one through each
    client: the same answers, field for field, but the reset time that the
    server counts from its own clock."""
    sync = Driver(backend.url)
    a = AsyncClient(backend.url)
    assert a.opened == "open ok"
    steps = ["check %s " + SLOW, "peek %s " + SLOW, "check %s " + SLOW + " 2",
             "check %s " + SLOW, "peek %s " + SLOW, "check %s fixed 2 60000 0",
             "check %s " + SLOW + " 5"]
    for i, step in enumerate(steps):
        expected = sync(step % "sync")
        a.start(step.replace(" %s ", " s%d async " % i, 1).replace("%s", "async"))
        answers, _, _ = a.wait()
        got = answers["s%d" % i]
        # allowed, limit, remaining, source; the durations count from each
        # key's own instants
        fields = [0, 1, 2, 3, 6]
        assert [got.split()[f] for f in fields] == [expected.split()[f] for f in fields], \
            (step, got, expected)
    sync.close()
    a.close()


def test_bad_input_is_refused_at_once_with_the_synchronous_message(server):
    sync = Driver(url(server))
    a = AsyncClient(url(server))
    for bad in ("token 0 1", "token 3 1 -1", "fixed 5 0", "slidelog 100001 1000"):
        refusal = a.refusal("check x k " + bad)
        assert refusal.startswith("x err invalid "), refusal
        assert refusal[2:] == sync("check k " + bad)
    assert a.stats()["round_trips"] == 0
    sync.close()
    a.close()


@ONE_SERVER
def test_concurrent_calls_share_one_pipelined_connection(backend):
    r = backend.client()
    before = {c["id"] for c in r.client_list()}
    a = AsyncClient(backend.url)
    a.start("burst 200 b hot " + SLOW)
    answers, order, _ = a.wait()
    assert len(answers) == 200
    # The server saw them in the order they were sent: the first three won.
    assert [i for i in order if answers[i].startswith("ok 1 ")] == ["b.0", "b.1", "b.2"]
    assert allowed(answers) == 3
    # the clients that came since (others, such as the harness's, may have
    # left meanwhile): the async client's one connection
    assert len({c["id"] for c in r.client_list()} - before) == 1
    st = a.stats()
    assert st["round_trips"] == 200 and st["decisions"] == 200 and st["reconnects"] == 0
    a.close()


def test_answers_come_from_the_loop_never_inside_a_call(backend):
    """Server answers, cached denials and failure answers alike."""
    a = AsyncClient(backend.url, "cache")
    a.start("burst 4 c k " + SLOW)
    answers, _, _ = a.wait()
    a.start("check d k " + SLOW)  # answered by the denial cache
    answers2, _, _ = a.wait()
    assert answers2["d"].endswith("denial_cache")
    assert a.stats()["cached"] == 1
    down = AsyncClient("redis://127.0.0.1:%d" % free_port(), "policy=open")
    down.start("check e k " + SLOW)
    answers3, _, _ = down.wait()
    for ans in list(answers.values()) + list(answers2.values()) + list(answers3.values()):
        assert not ans.startswith("inside"), ans
    down.close()
    a.close()


@ONE_SERVER
def test_a_cancelled_call_answers_nothing(backend):
    a = AsyncClient(backend.url)
    a.start("check one k " + SLOW)
    a.start("check two k " + SLOW)
    a.send("cancel one")
    answers, _, _ = a.wait()
    assert list(answers) == ["two"]
    assert answers["two"].startswith("ok 1 3 1 ")  # one's command still went
    a.close()


def test_cancelling_a_call_answered_does_nothing_even_once_its_memory_is_reused(server):
    """Issue 24: cancel wrote the freed call. The library clears the
    caller's handle when it answers, so a cancel after the answer is
    cancel(NULL), and cannot cancel a newer call that took the memory. On
    glibc, `two` takes the memory of one.7 (7 freed blocks of a size wait
    in a cache that calloc skips; the 8th is reused); ASan's quarantine
    reuses nothing, and reports any write to a freed call."""
    a = AsyncClient(url(server))
    a.start("burst 8 one k " + SLOW)
    assert len(a.wait()[0]) == 8
    cancels = "\n".join("cancel one.%d" % i for i in range(8))
    a.send(cancels)
    a.start("check two k " + SLOW)  # the size of each of one's
    a.send(cancels)
    answers, _, _ = a.wait()
    assert list(answers) == ["two"], answers
    a.close()


@ONE_SERVER
@pytest.mark.parametrize("answered_by", ["server", "denial_cache"])
def test_cancelling_from_callbacks(backend, answered_by):
    """A callback cancels itself, the call answered just before it (freed
    by then), and a call still waiting behind it, which never answers:
    with replies from the server, and with answers made at the loop's
    next turn (the denial cache)."""
    a = AsyncClient(backend.url, "cache")
    limit = "fixed 1 60000"
    if answered_by == "denial_cache":
        a.start("burst 2 used k " + limit)
        a.wait()
    for ident in ("x", "y", "self", "v", "w"):
        a.start("check %s k %s" % (ident, limit))
    a.send("cancels y x")
    a.send("cancels self self")
    a.send("cancels v w")
    answers, order, _ = a.wait()
    assert order == ["x", "y", "self", "v"], answers
    assert all(v.endswith(answered_by) for v in answers.values()), answers
    a.close()


def test_close_answers_the_calls_waiting_but_the_cancelled(server):
    """At close, a waiting call is answered (its callback cancels another,
    which is not), a cancelled one is not; after close, every handle the
    client filled is NULL, and cancelling it does nothing."""
    a = AsyncClient(url(server), "policy=closed")
    for ident in ("w", "v", "gone"):
        a.start("check %s k %s" % (ident, SLOW))
    a.send("cancel gone")
    a.send("cancels w v")
    a.send("close")
    line = a.proc.stdout.readline().strip()
    assert line.startswith("w ok 0 ") and line.endswith("failed_closed"), line
    assert a.proc.stdout.readline().strip() == "closed"
    for ident in ("w", "v", "gone"):
        a.send("cancel " + ident)
    assert a.call("stats") == "err no client"
    a.close()


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("policy", sorted(POLICY_ANSWERS))
def test_policy_nothing_listening(policy):
    a = AsyncClient("redis://127.0.0.1:%d" % free_port(), "policy=" + policy)
    assert a.opened == "open ok"
    a.start("check p k token 5 5")
    answers, _, _ = a.wait()
    assert answers["p"].startswith(POLICY_ANSWERS[policy]), answers
    assert a.stats()["failures"] >= 1
    a.close()


def test_a_stopped_server_is_answered_within_the_timeout_then_back(server):
    a = AsyncClient(url(server), "timeout_ms=300", "policy=closed")
    a.start("check first k fixed 10 1000")
    answers, _, _ = a.wait()
    assert answers["first"].endswith("server")
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        a.start("burst 3 late k fixed 10 1000")
        answers, _, _ = a.wait()
        took = time.monotonic() - start
        assert all(v.endswith("failed_closed") for v in answers.values()), answers
        # The 300 ms timeout ended the calls (they were sent after start):
        # not sooner, and not the server (stopped until SIGCONT).
        assert 0.3 <= took < 10, took
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)

    def back():
        a.start("check again k fixed 10 1000")
        return a.wait()[0]["again"].endswith("server")
    # the stopped server's replies to the lost calls may still arrive on the
    # old connection: the new one is clean
    wait_for(back, timeout=5)
    st = a.stats()
    assert st["reconnects"] == 1 and st["failures"] >= 1
    a.close()


def test_server_killed_then_back(server):
    a = AsyncClient(url(server), "policy=open")
    a.start("check k1 k " + SLOW)
    assert a.wait()[0]["k1"].endswith("server")
    server.kill9()
    a.start("check k2 k " + SLOW)
    assert a.wait()[0]["k2"].endswith("failed_open")
    server.start()

    def back():
        a.start("check k3 k " + SLOW)
        return a.wait()[0]["k3"].endswith("server")
    wait_for(back, timeout=5)
    assert a.stats()["reconnects"] == 1
    a.close()


def test_fallback_decides_in_process_while_the_server_is_down():
    a = AsyncClient("redis://127.0.0.1:%d" % free_port(), "policy=fallback")
    a.start("burst 5 f k " + SLOW)
    answers, _, _ = a.wait()
    assert all(v.endswith("fallback") for v in answers.values())
    assert allowed(answers) == 3
    a.close()


# ----------------------------------------------------------- addresses

@pytest.mark.parametrize("kind", ["module", "stock"])
def test_password_and_db_from_the_url(kind):
    """AUTH and SELECT before the question of the module (stock)."""
    s = Server(module=kind == "module").start()
    s.client().config_set("requirepass", "s3cret")
    try:
        a = AsyncClient("redis://:s3cret@127.0.0.1:%d/3" % s.port)
        a.start("check x dbkey fixed 5 60000")
        assert a.wait()[0]["x"].endswith("server")
        a.close()
        r3 = redis.Redis(host="127.0.0.1", port=s.port, password="s3cret", db=3)
        assert r3.exists("dbkey") == 1
        a = AsyncClient("redis://default:s3cret@127.0.0.1:%d" % s.port)
        a.start("check y key0 fixed 5 60000")
        assert a.wait()[0]["y"].endswith("server")
        a.close()
        # A refused AUTH drops the connection: the call is lost to I/O.
        a = AsyncClient("redis://:wrong@127.0.0.1:%d" % s.port)
        a.start("check z k fixed 5 60000")
        assert a.wait()[0]["z"].startswith("err io")
        a.close()
        a = AsyncClient("redis://127.0.0.1:%d" % s.port)  # no password: NOAUTH
        a.start("check n k fixed 5 60000")
        assert a.wait()[0]["n"].startswith("err server NOAUTH")
        a.close()
    finally:
        s.stop()


@pytest.mark.parametrize("kind", ["module", "stock"])
def test_unix_socket(kind):
    s = Server(module=kind == "module")
    sock = os.path.join(s.dir, "redis.sock")
    s.extra_args += ["--unixsocket", sock]
    s.start()
    try:
        a = AsyncClient("unix://%s?db=2" % sock)
        a.start("check u u fixed 5 60000")
        assert a.wait()[0]["u"].endswith("server")
        a.close()
        assert redis.Redis(unix_socket_path=sock, db=2).exists("u") == 1
    finally:
        s.stop()


def test_what_it_does_not_take():
    for address, opts, code in (("mem:", (), "unsupported"),
                                ("ftp://x", (), "invalid"),
                                ("redis+cluster://127.0.0.1:1/2", (), "invalid"),
                                ("redis://127.0.0.1:1", ("lease=5",), "unsupported")):
        a = AsyncClient(address, *opts)
        assert a.opened.startswith("open err " + code), a.opened
        a.close()


# -------------------------------------------------------------- semaphores

def test_a_refund_gives_a_check_back(backend):
    """fg_async_refund (nginx's several zones all or nothing): the units a
    check took come back, on every backend (a cluster routes it by key);
    a sliding window or log cannot give back, and bad units are refused at
    once, as a check's cost is."""
    a = AsyncClient(backend.url)
    for i in range(3):
        a.start("check c%d rk token 2 0.001" % i)
    answers, _, _ = a.wait()
    assert [answers["c%d" % i].split()[1] for i in range(3)] == ["1", "1", "0"], answers
    a.start("refund r rk token 2 0.001 1")
    answers, _, _ = a.wait()
    assert answers["r"] == "ok 1", answers
    a.start("check again rk token 2 0.001")
    a.start("check fixed rf fixed 1 60000")
    answers, _, _ = a.wait()
    assert answers["again"].startswith("ok 1 ") and answers["fixed"].startswith("ok 1 "), answers
    a.start("refund rf2 rf fixed 1 60000 1")
    a.start("check fixed2 rf fixed 1 60000")
    answers, _, _ = a.wait()
    assert answers["rf2"] == "ok 1" and answers["fixed2"].startswith("ok 1 "), answers
    assert a.refusal("refund s rs sliding 2 1000 1").startswith("s err invalid a refund takes")
    assert a.refusal("refund n rk token 2 0.001 -1").startswith("n err invalid ")
    a.close()


def test_semaphore_acquire_release_and_extend(server):
    a = AsyncClient(url(server))
    for i, owner in enumerate(("o1", "o2", "o3")):
        a.start("acquire a%d sem 2 %s 1 5000" % (i, owner))
    answers, _, _ = a.wait()
    grants = [answers["a%d" % i].split() for i in range(3)]
    assert [g[:2] for g in grants] == [["ok", "1"], ["ok", "1"], ["ok", "0"]], grants
    assert int(grants[0][2]) < int(grants[1][2])  # fencing tokens grow
    a.start("release r sem o1 0")
    a.start("extend e sem o2 60000")
    a.start("extend x sem nobody 60000")
    a.start("acquire again sem 2 o3 1 5000")
    answers, _, _ = a.wait()
    assert answers["r"] == "ok 0" and answers["e"] == "ok 1" and answers["x"] == "ok 0"
    assert answers["again"].startswith("ok 1 ")
    # the new lease (the key expires at its end rounded up to the ms)
    assert 5000 < server.client().execute_command("PTTL", "sem") <= 60000 + 1
    a.close()


def test_lock_calls_refuse_bad_input_as_the_synchronous_calls(server):
    from test_client_locks import LockClient
    sync = LockClient(url(server))
    a = AsyncClient(url(server))
    for mine, theirs in (("acquire x s 0 o 1 1000", "sacquire s 0 o 1 1000"),
                         ("acquire x s 2 o 3 1000", "sacquire s 2 o 3 1000"),
                         ("acquire x s 2 o 1 0", "sacquire s 2 o 1 0"),
                         ("release x s o -1", "srelease s o -1"),
                         ("extend x s o 0", "extend s o 0")):
        assert a.refusal(mine)[2:] == sync(theirs), mine
    assert a.stats()["round_trips"] == 0
    sync.close()
    a.close()


def test_lock_calls_have_no_failure_policy():
    a = AsyncClient("redis://127.0.0.1:%d" % free_port(), "policy=open")
    a.start("acquire a s 2 o 1 1000")
    a.start("release r s o 0")
    answers, _, _ = a.wait()
    assert answers["a"].startswith("err io") and answers["r"].startswith("err io")
    a.close()


# ---------------------------------------------------------------- policies

def test_policy_checks(backend):
    if backend.module:
        backend.client().execute_command("FG.POLICY", "SET", "api", "LIMIT", "TOKEN", 2, 0.001,
                                         "LIMIT", "FIXED", 100, 86400000)
        backend.client().execute_command("FG.POLICY", "DENY", "api", "bad")
    else:  # the policy's keys, through the synchronous library
        with floodgate.Client(backend.url) as c:
            c.policy_set("api", floodgate.PolicyDef([floodgate.token_bucket(2, 0.001),
                                                     floodgate.fixed_window(100, 86400000)]))
            c.policy_deny("api", "bad")
    a = AsyncClient(backend.url)
    for i in range(3):
        a.start("policy p%d api user" % i)
    a.start("policy d api bad")
    a.start("policy m nosuch user")
    answers, order, _ = a.wait()
    assert answers["p0"].startswith("ok 1 1 -1 limit 0"), answers
    assert answers["p1"].startswith("ok 1 0 -1 limit 0"), answers
    assert answers["p2"].startswith("ok 0 0 ") and answers["p2"].endswith("limit 0"), answers
    assert answers["d"].startswith("ok 0 ") and " denylist " in answers["d"], answers
    assert answers["m"] == "err invalid ERR no such policy 'nosuch'", answers
    assert a.refusal("policy x bad:name user") .startswith("x err invalid ")
    assert a.refusal("policy y api user -1").startswith("y err invalid ")
    a.close()


# ----------------------------------------------------------------- cluster

@pytest.fixture(scope="module")
def module_cluster():
    from topology import Cluster
    c = Cluster().start()
    yield c
    c.stop()


@pytest.fixture(params=["module", "stock"])
def cluster(request):
    """The file's cluster with the module, or the shared stock one (flushed)."""
    if request.param == "module":
        return request.getfixturevalue("module_cluster")
    return target("stock-cluster").cluster


def test_cluster_every_call_on_its_owner(cluster):
    from test_client_cluster import assert_on_owners, cluster_url
    module = cluster.nodes[0].module  # semaphores need it
    # One seed only: the other masters are learned from the map and MOVED.
    a = AsyncClient(cluster_url(cluster, cluster.nodes[:1]))
    keys = ["%s:%d" % (AsyncClient.program, i) for i in range(30)]
    for i, k in enumerate(keys):
        a.start("check c%d %s %s" % (i, k, SLOW))
        if module:
            a.start("acquire s%d sem:%s 2 o 1 60000" % (i, k))
    answers, _, _ = a.wait()
    assert len(answers) == len(keys) * (2 if module else 1)
    assert all(v.startswith("ok 1 ") for v in answers.values()), answers
    assert_on_owners(cluster, keys + (["sem:" + k for k in keys] if module else []))
    a.close()


def test_cluster_resharding_under_traffic(cluster):
    """A slot holding used-up limits moves to another master while checks
    go on: no error, and the state moves with the keys (ASK, then MOVED)."""
    import threading
    from test_client_cluster import cluster_url, migrate_slot, owner
    a = AsyncClient(cluster_url(cluster), "timeout_ms=5000")
    mig = ["{%s}:%d" % (AsyncClient.program, i) for i in range(10)]  # one run's own
    for i, k in enumerate(mig):
        a.start("burst 3 u%d %s %s" % (i, k, SLOW))
    answers, _, _ = a.wait()
    assert sum(v.startswith("ok 1 ") for v in answers.values()) == 30
    src = owner(cluster, mig[0])
    dst = next(n for n in cluster.nodes if n is not src)
    stop = threading.Event()
    seen = []

    def traffic():
        rounds = 0
        while not stop.is_set() or rounds == 0:
            for i, k in enumerate(mig):
                a.start("check t%d.%d %s %s" % (rounds, i, k, SLOW))
            seen.extend(a.wait()[0].values())
            rounds += 1
    t = threading.Thread(target=traffic)
    t.start()
    try:
        migrate_slot(cluster, mig[0], dst)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(30)
    assert seen and all(v.startswith("ok 0 ") for v in seen), [v for v in seen
                                                                if not v.startswith("ok 0 ")]
    assert owner(cluster, mig[0]) is dst
    c = src.client()
    try:
        assert "errorstat_MOVED" in c.info("errorstats")
    finally:
        c.close()
    a.close()
    migrate_slot(cluster, mig[0], src)  # back, for the shared stock cluster


def test_cluster_nothing_listening_is_answered_by_the_policy():
    a = AsyncClient("redis+cluster://127.0.0.1:%d" % free_port(), "policy=closed")
    a.start("check k k token 5 5")
    assert a.wait()[0]["k"].endswith("failed_closed")
    a.close()
