"""libfloodgate against real servers: the same answers as mem: (differential),
failure policies, reconnection, timeouts, the denial cache, pipelined
batches, AUTH and SELECT from the URL, inspect and error mapping.

The C programs are tests/client/differential.c and tests/client/driver.c
(a line protocol, see its top comment); they are built when missing.

What the library decides (the denial cache, batches, inspect, errors, AUTH
and SELECT, unix sockets, the differential run) runs on the module, on a
stock server and, where a URL can name one, a stock 3-master cluster
(backends.py): there the library runs its server scripts.
"""

import os
import signal
import subprocess
import time

import pytest
import redis

from backends import BACKENDS, of_param
from harness import REPO, Server, free_port, wait_for

BUILD = os.path.join(REPO, "build", "client")


def program(name):
    path = os.path.join(BUILD, name)
    if not os.path.exists(path):
        subprocess.run(["make", "-C", REPO, "build/client/" + name], check=True,
                       stdout=subprocess.DEVNULL)
    return path


class Driver:
    """tests/client/driver.c: one command per line, one answer per line."""

    def __init__(self, url, *opts):
        self.proc = subprocess.Popen([program("driver"), url, *opts], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.opened = self.proc.stdout.readline().strip()

    def __call__(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stats(self):
        fields = self("stats").split()[1:]
        return dict(zip(["decisions", "round_trips", "cached", "failures", "reconnects"],
                        map(int, fields)))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture
def server():
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A flushed backends.Target: this test's own module server, the stock
    server, the stock cluster."""
    return of_param(request)


def url(s):
    return "redis://127.0.0.1:%d" % s.port


# ------------------------------------------------------------ differential

@pytest.mark.parametrize("kind", ["module", "stock"])
def test_differential_mem_and_redis(kind):
    """A stock server takes AT from anyone: the scripts at the same instants."""
    if kind == "stock":
        s = Server(module=False).start()
    else:
        try:
            s = Server(["--floodgate.explicit-time", "yes"]).start()
        except RuntimeError as e:
            pytest.skip("the module has no floodgate.explicit-time yet: %s" % e)
    try:
        for seed in (1, 2) if kind == "stock" else (1, 2, 3, 4):  # (the scripts are slower)
            out = subprocess.run([program("differential"), str(s.port), str(seed), "5000"],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stdout + out.stderr
            assert out.stdout.startswith("OK 5000 operations")
    finally:
        s.stop()


def test_send_clock_refused_without_explicit_time(server):
    d = Driver(url(server))
    assert d("check k token 5 1").startswith("ok")  # no AT sent by default
    d.close()


# ---------------------------------------------------------------- policies

POLICY_ANSWERS = {
    "error": "err io",
    "open": "ok 1 5 5 -1 0 failed_open",
    "closed": "ok 0 5 0 1000 1000 failed_closed",
    "fallback": "ok 1 5 4 -1 200 fallback",
}


@pytest.mark.parametrize("policy", sorted(POLICY_ANSWERS))
def test_policy_nothing_listening(policy):
    d = Driver("redis://127.0.0.1:%d" % free_port(), "policy=" + policy)
    assert d.opened == "open ok"  # an unreachable server is not fatal
    assert d("check k token 5 5").startswith(POLICY_ANSWERS[policy])
    assert d("batch 3 k token 5 5").startswith(
        "err io" if policy == "error" else "ok")
    assert d("reset k").startswith("err io")
    st = d.stats()
    assert st["round_trips"] == 0 and st["failures"] >= 2
    d.close()


@pytest.mark.parametrize("policy", sorted(POLICY_ANSWERS))
def test_policy_server_killed_then_back(policy):
    s = Server().start()
    d = Driver(url(s), "policy=" + policy)
    try:
        assert d("check k token 5 5") == "ok 1 5 4 -1 200 server"
        s.kill9()
        assert d("check k token 5 5").startswith(POLICY_ANSWERS[policy])
        s.start()
        # The next attempt after the delay of a failed connect succeeds.
        wait_for(lambda: d("check k token 5 5").endswith("server"), timeout=5)
        st = d.stats()
        assert st["reconnects"] == 1
        assert st["failures"] >= 1
    finally:
        d.close()
        s.stop()


def test_command_timeout_on_a_stopped_server(server):
    d = Driver(url(server), "timeout_ms=300", "policy=closed")
    assert d("check k fixed 10 1000").endswith("server")
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        assert d("check k fixed 10 1000").endswith("failed_closed")
        elapsed = time.monotonic() - start
        # the 300 ms timeout, not the stopped server, ended the call (which
        # would otherwise block until SIGCONT): a bound far from both
        assert 0.25 < elapsed < 10, elapsed
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    wait_for(lambda: d("check k fixed 10 1000").endswith("server"), timeout=5)
    assert d.stats()["reconnects"] == 1
    d.close()


# ------------------------------------------------------------ denial cache

def test_denial_cache(backend):
    # The client caches a denial for its retry_after, by its own clock (the
    # server's): a check that ends within retry_after of the start of the
    # denied one is answered from the cache.
    d = Driver(backend.url, "cache")
    assert d("check k token 1 2") == "ok 1 1 0 -1 500 server"
    denied_at = time.monotonic()
    denied = d("check k token 1 2").split()
    assert denied[1] == "0" and denied[-1] == "server"
    trips = d.stats()["round_trips"]
    cached = 0
    for _ in range(20):
        local = d("check k token 1 2").split()
        assert local[1] == "0", local
        if (time.monotonic() - denied_at) * 1000 < int(denied[4]):
            assert local[-1] == "denial_cache", local
        if local[-1] == "denial_cache":
            assert 0 < int(local[4]) <= int(denied[4])
            cached += 1
    assert cached > 0
    # A smaller cost or another limit is not answered from the cache.
    assert d("check k token 1 2 0").endswith("server")
    assert d("check k token 2 2").endswith("server")
    st = d.stats()
    assert st["round_trips"] == trips + 2 + 20 - cached
    assert st["cached"] == cached and st["decisions"] == 24
    time.sleep(0.55)
    assert d("check k token 1 2") .endswith("server")
    d.close()


def test_reset_forgets_cached_denials(backend):
    d = Driver(backend.url, "cache")
    d("check k fixed 1 60000")
    assert d("check k fixed 1 60000").endswith("server")
    assert d("check k fixed 1 60000").endswith("denial_cache")
    assert d("reset k") == "ok 1"
    assert d("check k fixed 1 60000").startswith("ok 1 ")
    d.close()


def test_no_cache_unless_asked(backend):
    d = Driver(backend.url)
    for _ in range(3):
        d("check k fixed 1 60000")
    st = d.stats()
    assert st["cached"] == 0 and st["round_trips"] == 3
    d.close()


# ------------------------------------------------------------------ batches

def test_batch_of_100_is_one_round_trip(backend):
    d = Driver(backend.url)
    assert d("batch 100 b fixed 50 60000") == "ok 50 server"
    st = d.stats()
    assert st["round_trips"] == 1 and st["decisions"] == 100
    assert d("peek b fixed 50 60000 0").startswith("ok 1 50 0 ")
    if backend.module:  # the module's own view of the state
        assert backend.client().execute_command("FG.PEEK", "FIXED", "b", 50, 60000)[2] == 0
    d.close()


# ---------------------------------------------------------- URL: AUTH, db

@pytest.mark.parametrize("kind", ["module", "stock"])
def test_password_and_db_from_the_url(kind):
    """AUTH and SELECT come before the question of the module (stock)."""
    s = Server(module=kind == "module").start()
    s.client().config_set("requirepass", "s3cret")  # after start: the harness PINGs
    try:
        d = Driver("redis://:s3cret@127.0.0.1:%d/3" % s.port)
        assert d("check dbkey fixed 5 60000").endswith("server")
        d.close()
        d = Driver("redis://default:s3cret@127.0.0.1:%d" % s.port)
        assert d("check key0 fixed 5 60000").endswith("server")
        d.close()
        r3 = redis.Redis(host="127.0.0.1", port=s.port, password="s3cret", db=3)
        r0 = redis.Redis(host="127.0.0.1", port=s.port, password="s3cret", db=0)
        assert r3.exists("dbkey") == 1 and r0.exists("dbkey") == 0
        assert r0.exists("key0") == 1
        d = Driver("redis://:wrong@127.0.0.1:%d" % s.port)
        assert d.opened.startswith("open err server")
        d.proc.wait(timeout=10)
        d = Driver("redis://127.0.0.1:%d" % s.port)  # no password: NOAUTH
        assert d("check k fixed 5 60000").startswith("err server NOAUTH")
        d.close()
    finally:
        s.stop()


def test_invalid_url():
    d = Driver("redis://127.0.0.1:99999")
    assert d.opened.startswith("open err invalid")
    d.proc.wait(timeout=10)


# ----------------------------------------------------- replies and errors

def test_inspect(backend):
    d = Driver(backend.url)
    assert d("inspect nothing") == "ok"
    d("check b token 5 1")
    text = d("inspect b")
    assert text.startswith("ok type=bucket tat_ns=") and " pttl=" in text
    d("check l slidelog 5 1000 2")
    assert d("inspect l").startswith("ok type=slidelog entries=")
    assert d("inspect l").split()[2].count(",") == 1  # one run: ts,count
    backend.client().set("str", "x")
    assert d("inspect str").startswith("err wrongtype")
    d.close()


def test_error_mapping(backend):
    d = Driver(backend.url)
    backend.client().set("str", "x")
    assert d("check str fixed 5 1000").startswith("err wrongtype WRONGTYPE")
    d("check f fixed 5 1000")
    assert d("check f token 5 1").startswith("err wrongtype")
    assert d("check f fixed 0 1000").startswith("err invalid ERR limit")
    assert d("peek f fixed 5 1000 0").startswith("ok 1 5 4")
    assert d.stats()["round_trips"] == 4  # the invalid limit was not sent
    d.close()


def test_module_missing_is_a_protocol_error():
    """Told to use the module (?backend=module) where there is none; by
    default such a server runs the server scripts (test_script_backend.py)."""
    s = Server(module=False).start()
    try:
        d = Driver(url(s) + "?backend=module")
        assert d("check k fixed 5 1000").startswith("err protocol")
        d.close()
    finally:
        s.stop()


@pytest.mark.parametrize("kind", ["module", "stock"])
def test_unix_socket(kind):
    s = Server(module=kind == "module")
    sock = os.path.join(s.dir, "redis.sock")
    s.extra_args += ["--unixsocket", sock]
    s.start()
    try:
        d = Driver("unix://%s?db=2" % sock)
        assert d("check u fixed 5 60000").endswith("server")
        d.close()
        assert redis.Redis(unix_socket_path=sock, db=2).exists("u") == 1
    finally:
        s.stop()
