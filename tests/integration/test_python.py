"""The Python binding (bindings/python/floodgate) on rate limits: its structs
match the C header, every backend answers through it as the C library does
(mem:, redis://, unix://, redis+cluster://), and the client's options (leases,
the denial cache, failure policies, clocks) reach the library.

The binding is the library's API in Python's idiom, so these tests hold the
binding to the library, not the algorithms (the C tests do that): the same
requests give the same answers on mem: and on a server at the same instant.
Locks are in test_python_locks.py, Bloom filters, unique counts and
policies in test_python_data.py, the middlewares in test_python_middleware.py.

The server tests run on the module, a stock server and a stock 3-master
cluster (backends.py), where the library answers by its server scripts.
"""

import ctypes
import os
import subprocess
import threading

import pytest

import floodgate
from backends import BACKENDS, of_param, target
from floodgate import _native
from harness import REPO, Server, free_port
from topology import Cluster

T0 = 1_800_000_000_000_000  # an explicit instant, unix microseconds


class FakeClock:
    """The in-process clock of a client, moved by the test (microseconds)."""

    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


def url_of(server):
    return "redis://127.0.0.1:%d" % server.port


def unused_url():
    return "redis://127.0.0.1:%d" % free_port()


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A flushed backends.Target: the session's module server, the stock
    server, the stock cluster."""
    return of_param(request, flush_session=True)


# ------------------------------------------------------------ the C structs

def test_structs_match_the_header():
    """Every struct's size and every field's offset, as the C compiler lays
    them out (tests/client/abi_layout.c), equal the ctypes declarations."""
    out = subprocess.run([os.path.join(REPO, "build", "client", "abi_layout")],
                         check=True, capture_output=True, text=True).stdout
    seen = set()
    for line in out.splitlines():
        name, value = line.rsplit(" ", 1)
        struct_name, _, field = name.partition(".")
        cls = _native.STRUCTS[struct_name]
        seen.add(struct_name)
        got = getattr(cls, field).offset if field else ctypes.sizeof(cls)
        assert got == int(value), "%s: ctypes says %d, C says %s" % (name, got, value)
    assert seen == set(_native.STRUCTS)


def test_error_classes_follow_fg_code():
    for code, cls in enumerate(floodgate.errors.BY_CODE):
        if cls is not None:
            assert cls.code == _native.code_name(code).decode()
            assert issubclass(cls, floodgate.Error)
    assert issubclass(floodgate.InvalidError, ValueError)
    assert issubclass(floodgate.IOError, ConnectionError)


# ---------------------------------------------------------- limits, results

def test_limit_constructors_are_named_like_c():
    assert floodgate.token_bucket(10, 2.5) == floodgate.Limit(floodgate.limits.TOKEN_BUCKET,
                                                              10, 0, 2.5)
    g = floodgate.gcra(5, 3, 1000)
    assert (g.algorithm, g.limit, g.rate, g.window_ms) == ("gcra", 5, 3, 1000)
    w = floodgate.sliding_window(100, 60000)
    assert (w.algorithm, w.limit, w.window_ms) == ("sliding_window", 100, 60000)
    assert repr(floodgate.fixed_window(3, 1000)) == "fixed_window(3, 1000.0)"
    assert len({floodgate.leaky_bucket(1, 1), floodgate.leaky_bucket(1, 1)}) == 1
    with pytest.raises(AttributeError):
        w.limit = 5


def test_results_are_read_only_and_give_headers():
    with floodgate.Client("mem:", clock=FakeClock()) as c:
        limit = floodgate.token_bucket(2, 1)
        first = c.check("k", limit)
        assert first and first.allowed and first.remaining == 1
        assert first.source is floodgate.Source.MEMORY
        with pytest.raises(AttributeError):
            first.allowed = False
        assert first.headers(limit, "api") == {"RateLimit-Policy": '"api";q=2;w=2',
                                               "RateLimit": '"api";r=1;t=1'}
        c.check("k", limit)
        denied = c.check("k", limit)
        assert not denied and denied.retry_after_ms == 1000
        assert denied.headers()["Retry-After"] == "1"
        assert "RateLimit-Policy" not in denied.headers()


def test_bad_input_raises_the_servers_message(server):
    """The library checks arguments before any round trip, with the
    module's words; the binding raises them as InvalidError (a ValueError)."""
    for url in ("mem:", url_of(server)):
        with floodgate.Client(url) as c:
            with pytest.raises(floodgate.InvalidError, match="^ERR capacity must be"):
                c.check("k", floodgate.token_bucket(0, 1))
            with pytest.raises(ValueError, match="^ERR COST must be"):
                c.check("k", floodgate.token_bucket(1, 1), -1)
            with pytest.raises(TypeError, match="Limit is needed"):
                c.check("k", "10 per second")
    # a NUL would end the key early in C, and name another key
    with floodgate.Client("mem:") as c:
        for call in (lambda: c.check("a\0b", floodgate.token_bucket(1, 1)),
                     lambda: c.bf_add(b"a\0b", "x"), lambda: c.reset("a\0"),
                     lambda: c.check_batch([("a\0", floodgate.token_bucket(1, 1))]),
                     lambda: c.policy_check("p", "k", identity="i\0d")):
            with pytest.raises(floodgate.InvalidError, match="NUL"):
                call()
        assert c.inspect("a") == {}
    with pytest.raises(floodgate.InvalidError, match="on_failure"):
        floodgate.Client("mem:", on_failure="maybe")
    with pytest.raises(floodgate.InvalidError):
        floodgate.Client("http://example.com")


def test_wrongtype(backend):
    r = backend.client()
    r.set("plain", "x")
    with floodgate.Client(backend.url) as c:
        with pytest.raises(floodgate.WrongTypeError):
            c.check("plain", floodgate.token_bucket(1, 1))


@pytest.fixture(params=BACKENDS)
def timed_backend(request):
    """backend, with the module's server that takes AT (a stock server
    takes it from anyone)."""
    if request.param == "module":
        timed = request.getfixturevalue("timed")
        timed.client().flushall()
        return target("module", module=timed)
    return target(request.param)


def test_mem_and_server_agree_at_the_same_instants(timed_backend):
    """Every algorithm, through check, peek and check_batch, gives the same
    answers in process and on a server when both decide at the same
    explicit instants (send_clock)."""
    limits = [floodgate.fixed_window(3, 1000), floodgate.sliding_window(3, 1000),
              floodgate.sliding_log(3, 1000), floodgate.token_bucket(3, 2),
              floodgate.leaky_bucket(3, 2), floodgate.gcra(3, 2, 1000)]
    clock = FakeClock()
    mem = floodgate.Client("mem:", clock=clock)
    srv = floodgate.Client(timed_backend.url, clock=clock, send_clock=True)
    try:
        for step in range(12):
            clock.now += 170_000
            for i, limit in enumerate(limits):
                key = "agree:%d" % i
                a, b = mem.check(key, limit), srv.check(key, limit)
                assert a[:5] == b[:5], (limit, step)
                assert (a.source, b.source) == (floodgate.Source.MEMORY, floodgate.Source.SERVER)
                assert mem.peek(key, limit, 2)[:5] == srv.peek(key, limit, 2)[:5]
            batch = [("agree:%d" % i, limit, 1, step % 2 == 0) for i, limit in enumerate(limits)]
            assert [r[:5] for r in mem.check_batch(batch)] == \
                [r[:5] for r in srv.check_batch(batch)]
        # the same stored state (pttl aside: a server counts it on its own clock)
        mem_state, srv_state = mem.inspect("agree:3"), srv.inspect("agree:3")
        del mem_state["pttl"], srv_state["pttl"]
        assert mem_state == srv_state
        assert srv.reset("agree:0") and not srv.reset("agree:0")
        assert srv.inspect("agree:0") == {}
    finally:
        mem.close()
        srv.close()


def test_inspect_grows_its_buffer_for_a_long_log():
    """A sliding log of 3,000 entries reads ~60 KB: more than the first
    buffer the binding offers."""
    clock = FakeClock()
    with floodgate.Client("mem:", clock=clock) as c:
        limit = floodgate.sliding_log(5000, 60000)
        for _ in range(3000):
            clock.now += 1000
            c.check("log", limit)
        state = c.inspect("log")
        assert state["type"] == "slidelog"
        assert len(state["entries"]) == 2 * 3000


def test_batch_errors_in_place(backend):
    with floodgate.Client(backend.url) as c:
        good = floodgate.token_bucket(5, 1)
        backend.client().set("batch:plain", "x")
        requests = [floodgate.Request("batch:a", good), ("batch:plain", good)]
        out = c.check_batch(requests, raise_on_error=False)
        assert out[0].allowed and isinstance(out[1], floodgate.WrongTypeError)
        with pytest.raises(floodgate.WrongTypeError):
            c.check_batch(requests)
        before = c.stats().round_trips
        assert len(c.check_batch([("batch:%d" % i, good) for i in range(100)])) == 100
        nodes = {backend.owner("batch:%d" % i).port for i in range(100)}
        assert c.stats().round_trips == before + len(nodes)  # one per node
        assert c.check_batch([]) == []


def test_the_clock_option_moves_mem_time():
    clock = FakeClock()
    with floodgate.Client("mem:", clock=clock) as c:
        limit = floodgate.fixed_window(1, 1000)
        assert c.check("w", limit).allowed
        assert not c.check("w", limit).allowed
        clock.now += 1_000_000
        assert c.check("w", limit).allowed


# -------------------------------------------------------------- other URLs

@pytest.mark.parametrize("kind", ["module", "stock"])
def test_unix_socket_and_database_from_the_url(kind):
    sock = "/tmp/fg-py-%d.sock" % free_port()
    with Server(["--unixsocket", sock, "--unixsocketperm", "700"],
                module=kind == "module") as srv:
        with floodgate.Client("unix://%s?db=3" % sock) as c:
            assert c.check("u", floodgate.fixed_window(5, 60000)).source is \
                floodgate.Source.SERVER
        assert srv.client(db=3).exists("u") == 1


@pytest.mark.parametrize("kind", ["module", "stock"])
def test_cluster_routes_by_slot(kind):
    cluster = Cluster().start() if kind == "module" else target("stock-cluster").cluster
    try:
        url = "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in cluster.nodes)
        limit = floodgate.fixed_window(2, 60000)
        with floodgate.Client(url) as c:
            keys = ["user:%d" % i for i in range(30)]
            for _ in range(3):
                out = c.check_batch([(k, limit) for k in keys])
            assert not any(r.allowed for r in out)
            assert all(c.check(k, limit, 0).remaining == 0 for k in keys)
            assert c.stats().round_trips <= 3 * len(cluster.nodes) + 30 + 3
            with pytest.raises(floodgate.UnsupportedError):
                c.lock("{t}a").acquire()
    finally:
        if kind == "module":
            cluster.stop()


# ------------------------------------------------------ the client's options

@pytest.mark.parametrize("policy,allowed,source", [
    ("open", True, floodgate.Source.FAILED_OPEN),
    ("closed", False, floodgate.Source.FAILED_CLOSED),
    ("fallback", True, floodgate.Source.FALLBACK),
])
def test_failure_policies_with_nothing_listening(policy, allowed, source):
    with floodgate.Client(unused_url(), on_failure=policy, connect_timeout_ms=200) as c:
        r = c.check("f", floodgate.token_bucket(1, 0.001))
        assert (r.allowed, r.source) == (allowed, source)
        if policy == "fallback":  # the in-process table decides and counts
            assert not c.check("f", floodgate.token_bucket(1, 0.001)).allowed
        if policy == "closed":
            assert r.retry_after_ms == 1000


def test_the_default_failure_policy_raises_io():
    with floodgate.Client(unused_url(), connect_timeout_ms=200) as c:
        with pytest.raises(floodgate.IOError):
            c.check("f", floodgate.token_bucket(1, 1))
        with pytest.raises(ConnectionError):
            c.reset("f")
        assert c.stats().failures >= 1


def test_denial_cache_saves_round_trips(backend):
    with floodgate.Client(backend.url, cache_denials=True) as c:
        limit = floodgate.fixed_window(1, 3_600_000)
        assert c.check("dc", limit).source is floodgate.Source.SERVER
        assert c.check("dc", limit).source is floodgate.Source.SERVER  # the denial
        trips = c.stats().round_trips
        cached = c.check("dc", limit)
        assert (cached.allowed, cached.source) == (False, floodgate.Source.DENIAL_CACHE)
        stats = c.stats()
        assert (stats.round_trips, stats.denials_cached) == (trips, 1)
        c.reset("dc")
        assert c.check("dc", limit).allowed


def test_leases_serve_locally_and_give_back(backend):
    limit = floodgate.token_bucket(1000, 0.001)
    with floodgate.Client(backend.url, lease_units=10, lease_ms=60000) as c:
        sources = [c.check("lease", limit).source for _ in range(10)]
        assert sources[0] is floodgate.Source.SERVER
        assert sources[1:] == [floodgate.Source.LEASE] * 9
        assert c.stats().lease_hits == 9
        c.check("lease", limit)  # the 11th takes a second lease
        assert c.stats().round_trips == 2
        peek = floodgate.Client(backend.url)
        assert peek.peek("lease", limit, 0).remaining == 1000 - 20
        peek.close()
    # closing gave the 9 unused units back
    with floodgate.Client(backend.url) as c:
        assert c.peek("lease", limit, 0).remaining == 1000 - 11


def test_threads_share_a_client_and_count_exactly(backend):
    """One client, many threads: every unit of a limit is handed out exactly
    once, on mem: and on a server (ctypes lets the threads run together)."""
    for url in ("mem:", backend.url):
        with floodgate.Client(url) as c:
            limit = floodgate.fixed_window(500, 3_600_000)
            allowed = []

            def worker():
                n = sum(c.check("threads", limit).allowed for _ in range(100))
                allowed.append(n)

            threads = [threading.Thread(target=worker) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sum(allowed) == 500, url


def test_a_closed_client_raises_and_closing_twice_is_harmless():
    c = floodgate.Client()
    c.close()
    c.close()
    with pytest.raises(floodgate.Error, match="closed"):
        c.check("k", floodgate.token_bucket(1, 1))
    assert "closed" in repr(c)
