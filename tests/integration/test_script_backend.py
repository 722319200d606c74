"""libfloodgate on servers without the module (issue 26): the rate limits
run as the server scripts (src/scripts/, sent as EVALSHA by conn.c), the
dialect learnt per connection or forced by ?backend=, through the Python
package and the C drivers (tests/client/driver.c, async_client.c):

  - a stock server, detected; a module server forced to ?backend=script; a
    stock server forced to ?backend=module (the unknown-command error)
  - check, peek, reset, inspect, refund (token leases), batches, the denial
    cache, the failure policies, integers above 2^53
  - NOSCRIPT: SCRIPT FLUSH between calls and in the middle of a pipelined
    batch, a server restart
  - a stock 3-master cluster, the asynchronous client on both
  - the Functions library (build/floodgate-functions.lua) and the embedded
    SHA1s
"""

import ctypes
import os
import re
import socket
import subprocess
import threading
import time

import pytest
import redis

import floodgate
from harness import REPO, Server, built_script, commandstats, free_port, wait_for
from test_async import AsyncClient
from test_client import Driver, url
from test_client_cluster import assert_on_owners, cluster_url
from topology import Cluster

GEN = os.path.join(REPO, "build", "gen")
FUNCTIONS = os.path.join(REPO, "build", "floodgate-functions.lua")
SCRIPTS = os.path.join(REPO, "src", "scripts")
SLOW = "token 5 0.001"  # 5 at once, then one every 1000 s: nothing refills during a test


# The families the built ratelimit.lua has, beyond the buckets.
RATELIMIT = built_script("ratelimit")
WINDOWS = [a for a, cmd in (("fixed", "FG.FIXED"), ("sliding", "FG.SLIDING"),
                            ("slidelog", "FG.SLIDELOG")) if "command = '%s'" % cmd in RATELIMIT]

# (driver text, Python limit) of every family the scripts have.
LIMITS = [("token 5 0.001", floodgate.token_bucket(5, 0.001)),
          ("leaky 5 0.001", floodgate.leaky_bucket(5, 0.001)),
          ("gcra 5 1 1000000", floodgate.gcra(5, 1, 1000000))] + \
         [("%s 5 1000000" % a, getattr(floodgate, {"fixed": "fixed_window",
                                                   "sliding": "sliding_window",
                                                   "slidelog": "sliding_log"}[a])(5, 1000000))
          for a in WINDOWS]


def fresh(server):
    """A flushed dataset, no script cached, zeroed command counts."""
    if not server.alive():
        server.start()
    c = server.client()
    c.flushall()
    c.script_flush()
    c.config_resetstat()
    c.close()
    return server


@pytest.fixture(scope="module")
def stock_server():
    s = Server(module=False).start()
    yield s
    s.cleanup()


@pytest.fixture
def stock(stock_server):
    """The module's stock server, flushed for each test."""
    return fresh(stock_server)


@pytest.fixture(scope="module")
def module_server():
    s = Server(["--floodgate.explicit-time", "yes"]).start()
    yield s
    s.cleanup()


@pytest.fixture
def module(module_server):
    return fresh(module_server)


@pytest.fixture(scope="module")
def stock_cluster_nodes():
    cl = Cluster(3, module=False)
    try:
        cl.start()
        yield cl
    finally:
        cl.stop()


@pytest.fixture
def stock_cluster(stock_cluster_nodes):
    """The module's stock cluster, every node flushed for each test."""
    for node in stock_cluster_nodes.nodes:
        fresh(node)
    return stock_cluster_nodes


def flush_scripts(*servers):
    for s in servers:
        c = s.client()
        c.script_flush()
        c.close()


# ------------------------------------------------------------- Python, auto

def test_a_server_without_the_module_runs_the_scripts(stock):
    client = floodgate.Client(url(stock))
    for i, (_, limit) in enumerate(LIMITS):
        key = "auto:%d" % i
        r = client.check(key, limit)
        assert (r.allowed, r.limit, r.remaining, r.source) == (True, 5, 4, floodgate.Source.SERVER)
        assert client.check(key, limit, cost=4).remaining == 0
        p = client.peek(key, limit)
        assert (p.allowed, p.remaining) == (False, 0)
        assert not client.check(key, limit).allowed
        assert client.inspect(key)  # the state, read back
        assert client.reset(key) is True
        assert client.reset(key) is False
        assert client.inspect(key) == {}
        assert client.check(key, limit).remaining == 4
    client.close()
    calls = commandstats(stock)
    assert calls.get("evalsha", 0) > 0
    assert not [name for name in calls if name.lower().startswith("fg.")]


def test_the_same_answers_as_the_module_at_the_same_instants(module, stock):
    """One sequence of checks, peeks and batches at a clock of the test's
    own (send_clock), on the module and on the scripts: every field equal."""
    now = [1_800_000_000_000_000]
    a = floodgate.Client(url(module), clock=lambda: now[0], send_clock=True)
    b = floodgate.Client(url(stock), clock=lambda: now[0], send_clock=True)
    limits = [floodgate.token_bucket(7, 3), floodgate.leaky_bucket(4, 0.5),
              floodgate.gcra(6, 10, 2000)] + [limit for text, limit in LIMITS[3:]]
    for step in range(40):
        for i, limit in enumerate(limits):
            key = "same:%d" % i
            cost = (step * 7 + i) % 4
            if step % 5 == 4:
                assert a.peek(key, limit, cost) == b.peek(key, limit, cost), (step, i)
            else:
                assert a.check(key, limit, cost) == b.check(key, limit, cost), (step, i)
        batch = [("same:b%d" % (k % len(limits)), limits[k % len(limits)], k % 3)
                 for k in range(2 * len(limits) + 1)]
        assert a.check_batch(batch) == b.check_batch(batch), step
        now[0] += 137_000 * (step % 6)
    for i in range(len(limits)):
        assert sorted(a.inspect("same:%d" % i)) == sorted(b.inspect("same:%d" % i))
    a.close()
    b.close()


def test_integers_above_2_53_come_exact(stock):
    """A script answers them as decimal text; the library reads them."""
    client = floodgate.Client(url(stock), clock=lambda: 1_800_000_000_000_000, send_clock=True)
    big, limit = 2 ** 60 + 3, floodgate.token_bucket(2 ** 60 + 3, 1e9)  # 1 ns a unit
    # The large cost first: its state lasts 2^55 ns (a year) on the server's
    # clock, where a cost of 1 would leave one for a nanosecond, gone by the
    # next call on a slow server.
    r = client.check_batch([("big", limit, 2 ** 55)])[0]
    assert (r.limit, r.remaining) == (big, big - 2 ** 55)
    r = client.check("big", limit)
    assert (r.limit, r.remaining) == (big, big - 2 ** 55 - 1)
    client.close()


# -------------------------------------------------------- forced dialects

def test_a_module_server_told_to_use_the_scripts(module):
    client = floodgate.Client(url(module) + "/3?backend=script")
    assert client.check("forced", floodgate.token_bucket(5, 1)).remaining == 4
    client.close()
    calls = commandstats(module)
    assert (calls.get("evalsha"), calls.get("eval"), calls.get("FG.TOKEN")) == (1, 1, None)
    c = module.client(db=3)
    assert c.type("forced") == b"string"  # the scripts' state, not the module's type
    c.close()


def test_a_stock_server_told_to_use_the_module(stock):
    client = floodgate.Client(url(stock) + "?backend=module")
    with pytest.raises(floodgate.ProtocolError, match="unknown command"):
        client.check("k", floodgate.token_bucket(5, 1))
    client.close()
    d = Driver(url(stock) + "?backend=module")
    assert d("check k %s" % SLOW).startswith("err protocol ERR unknown command")
    d.close()


@pytest.mark.parametrize("address, why", [
    ("redis://127.0.0.1:1?backend=lua", "backend must be auto, module or script"),
    ("redis://127.0.0.1:1/2?backend=", "backend must be auto, module or script"),
    ("redis://127.0.0.1:1?backend=script&backend=module", "backend is given twice"),
    ("redis://127.0.0.1:1?db=2", "the only option is ?backend=auto|module|script"),
    ("redis://127.0.0.1:1?", "the only option is ?backend=auto|module|script"),
    ("unix:///tmp/x.sock?db=1&backend=modules", "backend must be auto, module or script"),
    ("unix:///tmp/x.sock?backend=script&db=1&db=2", "db is given twice"),
    ("unix:///tmp/x.sock?backend=script&", "the options are ?db=N and backend"),
    ("redis+cluster://127.0.0.1:1,127.0.0.1:2?backend=x", "backend must be auto, module or script"),
])
def test_bad_backends_are_refused_at_open(address, why):
    with pytest.raises(floodgate.InvalidError) as e:
        floodgate.Client(address)
    assert why in str(e.value) and address in str(e.value)


def test_unix_socket_with_db_and_backend(tmp_path):
    sock = str(tmp_path / "redis.sock")
    s = Server(["--unixsocket", sock], module=False).start()
    try:
        for query in ("?db=1&backend=script", "?backend=auto&db=1"):
            d = Driver("unix://%s%s" % (sock, query))
            assert d("check u%s %s" % (query[1], SLOW)).endswith("server")
            d.close()
        assert redis.Redis(unix_socket_path=sock, db=1).exists("ud", "ub") == 2
    finally:
        s.cleanup()


def test_an_acl_user_without_command_keeps_the_module(module):
    """docs/security.md's limiter may run FG.TOKEN but not COMMAND: the
    library tells the module from an empty FG.TOKEN (an arity error) and
    keeps it; on a stock server the same probe finds no module."""
    c = module.client()
    c.execute_command("ACL", "SETUSER", "limiter", "on", ">pw", "~*", "-@all", "+fg.token",
                      "+fg.peek")
    c.close()
    d = Driver("redis://limiter:pw@127.0.0.1:%d" % module.port)
    assert d("check k %s" % SLOW).endswith("server")
    d.close()
    assert "FG.TOKEN" in commandstats(module) and "evalsha" not in commandstats(module)


def test_an_acl_user_without_command_on_a_stock_server(stock):
    c = stock.client()
    c.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-command")
    c.close()
    try:
        d = Driver("redis://app:pw@127.0.0.1:%d" % stock.port)
        assert d("check k %s" % SLOW) == "ok 1 5 4 -1 1000000 server"
        d.close()
    finally:
        c = stock.client()
        c.execute_command("ACL", "DELUSER", "app")
        c.close()


# ------------------------------------------------------ the C driver's calls

def test_driver_calls(stock):
    d = Driver(url(stock))
    started = time.monotonic()
    assert d("check k %s" % SLOW) == "ok 1 5 4 -1 1000000 server"
    peek = d("peek k %s" % SLOW).split()
    # the bucket is full again 2000 s after the check, less the time since
    waited_ms = (time.monotonic() - started) * 1000
    assert peek[:5] + peek[6:] == ["ok", "1", "5", "3", "-1", "server"]
    assert 2000000 - waited_ms - 1 <= int(peek[5]) <= 2000000, (peek, waited_ms)
    assert d("batch 6 k %s" % SLOW) == "ok 4 server"
    assert d("mbatch 8 m %s" % SLOW) == "ok 8 server"
    assert d("inspect k").startswith("ok type=bucket tat_ns=")
    assert d("reset k") == "ok 1"
    assert d("reset k") == "ok 0"
    assert d("inspect k") == "ok"
    st = d.stats()
    assert st["round_trips"] == 8 + 1  # one more for the NOSCRIPT of the first EVALSHA
    d.close()


def test_token_leases_and_their_refund(stock):
    d = Driver(url(stock), "lease=5", "lease_ms=60000")
    assert d("check k token 10 0.001") == "ok 1 10 9 -1 5000000 server"
    assert d("check k token 10 0.001").endswith(" lease")
    d.close()  # gives back the lease's 3 unused units: FG.REFUND as a script
    other = Driver(url(stock))
    assert other("check k token 10 0.001").startswith("ok 1 10 7 ")
    other.close()
    assert commandstats(stock).get("evalsha", 0) >= 3


def test_the_denial_cache(stock):
    d = Driver(url(stock), "cache")
    for _ in range(5):
        d("check k %s" % SLOW)
    assert d("check k %s" % SLOW).startswith("ok 0 5 0 ")
    assert d("check k %s" % SLOW).endswith(" denial_cache")
    assert d.stats()["cached"] == 1
    d.close()


@pytest.mark.parametrize("policy, answer", [("open", "ok 1 5 5 -1 0 failed_open"),
                                            ("closed", "ok 0 5 0 1000 1000 failed_closed")])
def test_failure_policies_then_back(policy, answer):
    s = Server(module=False).start()
    try:
        d = Driver(url(s), "policy=" + policy)
        assert d("check k %s" % SLOW).endswith(" server")
        s.stop()
        assert d("check k %s" % SLOW) == answer
        s.start()  # an empty dataset, and no script cached
        wait_for(lambda: d("check k %s" % SLOW).endswith(" server"), timeout=5)
        assert d.stats()["reconnects"] >= 1
        d.close()
    finally:
        s.cleanup()


def test_a_restart_loses_the_scripts_not_an_answer():
    s = Server(module=False, extra_args=["--save", "60 1"]).start()
    try:
        d = Driver(url(s))
        assert d("check k %s" % SLOW) == "ok 1 5 4 -1 1000000 server"
        c = s.client()
        c.save()
        c.close()
        s.restart()  # the dataset comes back from the RDB, the script cache does not
        wait_for(lambda: d("check k %s" % SLOW).startswith("ok 1 5 3 "), timeout=5)
        d.close()
    finally:
        s.cleanup()


# ------------------------------------------------------------------ NOSCRIPT

def test_script_flush_between_calls(stock):
    d = Driver(url(stock))
    assert d("check k %s" % SLOW).startswith("ok 1 5 4 ")
    before = d.stats()["round_trips"]
    assert d("check k %s" % SLOW).startswith("ok 1 5 3 ")
    assert d.stats()["round_trips"] == before + 1
    flush_scripts(stock)
    assert d("check k %s" % SLOW).startswith("ok 1 5 2 ")  # as EVAL, once more
    assert d.stats()["round_trips"] == before + 3
    assert d("check k %s" % SLOW).startswith("ok 1 5 1 ")  # cached again by the EVAL
    assert d.stats()["round_trips"] == before + 4
    d.close()


def test_script_flush_in_the_middle_of_a_pipelined_batch(stock):
    """SCRIPT FLUSH from another client lands between the commands of one
    batch (the server reads the pipeline in parts): those after it answer
    NOSCRIPT and go again as EVAL, and the batch admits exactly the limit.
    The flush is sent once the server has run one of the batch's EVALSHAs,
    and tried again until it falls inside a batch, not after it."""
    n, limit = 3000, 1000
    d = Driver(url(stock))
    stop = threading.Event()

    def flusher():
        # once the batch is under way: a script as fast as the fast path
        # runs a whole batch between two flushes of a loop that flushes
        # all the time, whose flush then lands before it
        c = stock.client()
        while not stop.is_set():
            if c.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) > 0:
                c.script_flush()
                break
        c.close()

    middles = 0
    try:
        for attempt in range(30):
            d("check warm %s" % SLOW)  # the script cached again
            c = stock.client()
            c.config_resetstat()
            c.close()
            t = threading.Thread(target=flusher)
            t.start()
            try:
                assert d("batch %d b%d token %d 0.001" % (n, attempt, limit)) == \
                    "ok %d server" % limit
            finally:
                stop.set()
                t.join()
                stop.clear()
            calls = commandstats(stock)
            again = calls.get("eval", 0)  # the commands that got NOSCRIPT
            if 0 < again < n:
                middles += 1
                if middles == 3:
                    break
    finally:
        d.close()
    assert middles >= 1, "no SCRIPT FLUSH fell inside a batch in 30 tries"


# ------------------------------------------------------------------- cluster

def test_stock_cluster(stock_cluster):
    cl = stock_cluster
    d = Driver(cluster_url(cl, cl.nodes[:1]))
    keys = ["route:%d" % i for i in range(30)] + ["{user1}.a", "{user1}.b"]
    for k in keys:
        assert d("check %s %s" % (k, SLOW)) == "ok 1 5 4 -1 1000000 server"
    assert_on_owners(cl, keys)
    before = d.stats()["round_trips"]
    assert d("mbatch 30 route: %s" % SLOW) == "ok 30 server"
    assert d.stats()["round_trips"] == before + 3  # one per node
    flush_scripts(*cl.nodes)
    assert d("mbatch 30 route: %s" % SLOW) == "ok 30 server"  # NOSCRIPT, then EVAL
    assert d.stats()["round_trips"] == before + 3 + 6
    flush_scripts(cl.nodes[1])
    assert d("mbatch 30 route: %s" % SLOW) == "ok 30 server"
    assert d.stats()["round_trips"] == before + 3 + 6 + 4  # the flushed node once more
    assert d("peek route:0 %s" % SLOW).startswith("ok 1 5 0 ")
    assert d("reset route:0") == "ok 1"
    assert d("check route:0 %s" % SLOW).startswith("ok 1 5 4 ")
    d.close()
    client = floodgate.Client(cluster_url(cl))
    assert client.check("py:1", floodgate.token_bucket(5, 1)).remaining == 4
    got = client.check_batch([("py:%d" % i, floodgate.gcra(5, 1, 1000)) for i in range(20)])
    assert [r.remaining for r in got] == [4, 3] + [4] * 18
    client.close()
    forced = Driver(cluster_url(cl) + "?backend=module")
    assert forced("check route:0 %s" % SLOW).startswith("err protocol")
    forced.close()


# ---------------------------------------------------------------------- async

@pytest.fixture(params=["async_client", "async_client_asan"])
def async_program(request):
    class Client(AsyncClient):
        program = request.param
    return Client


def test_async_on_a_stock_server(stock, async_program):
    a = async_program(url(stock))
    # Started before the connection knows its dialect: held, then sent in order.
    a.send("burst 7 b k %s" % SLOW)
    answers, order, _ = a.wait()
    got = [answers["b.%d" % i].split()[:4] + answers["b.%d" % i].split()[-1:] for i in range(7)]
    assert got == [["ok", "1", "5", str(4 - i), "server"] for i in range(5)] + \
        [["ok", "0", "5", "0", "server"]] * 2
    flush_scripts(stock)
    a.send("burst 3 c j %s" % SLOW)  # NOSCRIPT, again as EVAL
    a.send("peek p k %s" % SLOW)
    answers, _, _ = a.wait()
    assert [answers["c.%d" % i][:10] for i in range(3)] == ["ok 1 5 4 -", "ok 1 5 3 -",
                                                            "ok 1 5 2 -"]
    assert answers["p"].startswith("ok 0 5 0 ")
    assert commandstats(stock).get("eval", 0) >= 2
    a.close()
    forced = async_program(url(stock) + "?backend=module")
    forced.send("check f k %s" % SLOW)
    answers, _, _ = forced.wait()
    assert answers["f"].startswith("err protocol ERR unknown command")
    forced.close()


def test_async_dialect_question_unanswered(async_program):
    """A server that accepts and never answers: the calls held for the
    dialect are answered within the timeouts, by the failure policy."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        a = async_program("redis://127.0.0.1:%d" % listener.getsockname()[1], "timeout_ms=200",
                          "policy=closed")
        a.send("burst 3 h k %s" % SLOW)
        answers, _, waited = a.wait()
        assert sorted(answers.values()) == ["ok 0 5 0 1000 1000 failed_closed"] * 3
        assert waited < 2000
        a.close()
    finally:
        listener.close()


def test_async_server_down_and_back(async_program):
    s = Server(module=False).start()
    try:
        a = async_program(url(s), "policy=open")
        a.send("check x k %s" % SLOW)
        assert a.wait()[0]["x"].endswith(" server")
        s.stop()
        a.send("check y k %s" % SLOW)
        assert a.wait()[0]["y"] == "ok 1 5 5 -1 0 failed_open"
        s.start()

        def back():
            a.call("sleep 150")
            a.send("check z k %s" % SLOW)
            return a.wait()[0]["z"].endswith(" server")
        wait_for(back, timeout=10)
        a.close()
    finally:
        s.cleanup()


def test_async_on_a_stock_cluster(stock_cluster, async_program):
    cl = stock_cluster
    a = async_program(cluster_url(cl, cl.nodes[:1]))
    for i in range(20):
        a.send("check a%d async:%d %s" % (i, i, SLOW))
    answers, _, _ = a.wait()
    assert all(answers["a%d" % i] == "ok 1 5 4 -1 1000000 server" for i in range(20)), answers
    assert_on_owners(cl, ["async:%d" % i for i in range(20)])
    flush_scripts(*cl.nodes)
    for i in range(20):
        a.send("check b%d async:%d %s" % (i, i, SLOW))
    answers, _, _ = a.wait()
    assert all(answers["b%d" % i].startswith("ok 1 5 3 ") for i in range(20)), answers
    a.close()


# ------------------------------------------------------- Functions and SHA1s

def family_files():
    return sorted(f for f in os.listdir(SCRIPTS)
                  if f.endswith(".lua") and f not in ("base.lua", "prelude.lua", "functions.lua"))


def test_the_embedded_sha1s_are_the_servers(stock):
    with open(os.path.join(GEN, "scripts.c")) as f:
        table = dict(re.findall(r'\{"(\w+)", text_\d+, sizeof\(text_\d+\) - 1, "([0-9a-f]{40})"\}',
                                f.read()))
    assert sorted(table) == sorted(f[:-4] for f in family_files())
    c = stock.client()
    for family, sha in table.items():
        assert c.script_load(built_script(family)) == sha
    c.script_flush()
    c.close()
    d = Driver(url(stock))
    d("check k %s" % SLOW)
    d.close()
    c = stock.client()
    assert c.script_exists(table["ratelimit"]) == [True]  # cached by the library's EVAL
    c.close()


def commands_of(c, family):
    """The names in a family's `commands`, as the family itself lists them."""
    with open(os.path.join(SCRIPTS, "base.lua")) as b, \
            open(os.path.join(SCRIPTS, "prelude.lua")) as p, \
            open(os.path.join(SCRIPTS, family)) as f:
        text = b.read() + "\n" + p.read() + "\n" + f.read() + \
            "\nlocal t = {} for k in pairs(commands) do t[#t + 1] = k end return t\n"
    return {s.decode() for s in c.eval(text, 0)}


def test_the_functions_library(stock):
    c = stock.client()
    with open(FUNCTIONS) as f:
        library = f.read()
    assert c.function_load(library, replace=True) in ("floodgate", b"floodgate")
    fields = lambda flat: dict(zip(flat[::2], flat[1::2]))  # noqa: E731 - RESP2's pairs
    fns = {fields(fn)[b"name"].decode(): set(fields(fn)[b"flags"])
           for lib in map(fields, c.function_list()) if lib[b"library_name"] == b"floodgate"
           for fn in lib[b"functions"]}
    names = set()
    for family in family_files():
        names |= commands_of(c, family)
    assert set(fns) == {n.lower().replace(".", "_") for n in names}  # none missed
    assert fns["fg_peek"] == fns["fg_inspect"] == {b"no-writes"} and fns["fg_token"] == set()
    # The same answers as the EVALSHA scripts, on twin keys, at one instant
    # (cl_throttle, inspect and reset take no AT).
    at = ["AT", "1800000000000000"]
    sha = c.script_load(built_script("ratelimit"))
    for fn, key, args in [("fg_token", "token", ["10", "2"] + at),
                          ("fg_token", "token", ["10", "2", "COST", "4"] + at),
                          ("fg_leaky", "leaky", ["4", "1", "COST", "3"] + at),
                          ("fg_gcra", "gcra", ["5", "10", "1000"] + at),
                          ("cl_throttle", "cell", ["5", "10", "60", "2"]),
                          ("fg_peek", "token", ["TOKEN", "10", "2"] + at),
                          ("fg_refund", "token", ["TOKEN", "10", "2", "COST", "2"] + at),
                          ("fg_inspect", "token", []), ("fg_reset", "token", []),
                          ("fg_reset", "token", [])]:
        command = fn.upper().replace("_", ".", 1)
        f = c.fcall(fn, 1, "fn:" + key, *args)
        e = c.evalsha(sha, 1, "es:" + key, command, *args)
        if fn == "fg_inspect":
            assert f[-2] == b"pttl"
            f, e = f[:-2], e[:-2]  # the PTTLs count down from each key's own write
        assert f == e, (fn, args)
    assert c.fcall_ro("fg_peek", 1, "fn:token", "TOKEN", "10", "2")[:3] == [1, 10, 9]
    with pytest.raises(redis.ResponseError, match="write flag"):
        c.fcall_ro("fg_token", 1, "fn:token", "10", "2")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        c.fcall("fg_token", 1, "fn:token", "10")
    c.function_flush()
    c.close()


def test_fg_functions_library_is_the_file():
    lib = ctypes.CDLL(floodgate.library_path)
    lib.fg_functions_library.restype = ctypes.c_void_p
    lib.fg_functions_library.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    n = ctypes.c_size_t()
    text = ctypes.string_at(lib.fg_functions_library(ctypes.byref(n)), n.value)
    with open(FUNCTIONS, "rb") as f:
        assert text == f.read()
    assert text.startswith(b"#!lua name=floodgate\n")


# ------------------------------------------------------------- refusals

# Regression: on Redis 7.0 pcall hands an error table over as its text, and
# the prelude's run() wrapped it as "ERR floodgate script failed: WRONGTYPE
# ..." (FG_CODE_INVALID).
def test_wrongtype_as_the_module(stock):
    c = stock.client()
    c.set("w", "not a bucket")
    c.close()
    client = floodgate.Client(url(stock))
    with pytest.raises(floodgate.WrongTypeError):
        client.check("w", floodgate.token_bucket(5, 1))
    client.close()


# ------------------------------------------------------------------ policies

API = floodgate.PolicyDef([floodgate.token_bucket(2, 0.001), floodgate.fixed_window(5, 60000)])


def exercise_policies(client, prefix):
    """The library's policy calls on a server that keeps policies in keys."""
    client.policy_set("api", API)
    assert "api" in client.policy_names()
    got = client.policy_get("api")
    assert got.definition.limits == API.limits and got.allowed == 0
    checks = [client.policy_check("api", prefix + "u") for _ in range(3)]
    assert [(c.result.allowed, c.result.remaining, c.decided_by) for c in checks] == \
        [(True, 1, "limit"), (True, 0, "limit"), (False, 0, "limit")]
    assert checks[2].result.retry_after_ms > 0
    client.policy_deny("api", [prefix + "bad"])
    client.policy_allow("api", [prefix + "good"])
    assert client.policy_check("api", prefix + "bad").decided_by == "denylist"
    good = [client.policy_check("api", prefix + "good") for _ in range(4)]
    assert all(g.result.allowed and g.decided_by == "allowlist" for g in good)
    # a denial that can never be allowed within the wait is answered at once
    waited = client.policy_acquire("api", prefix + "u", 50)
    assert not waited.result.allowed
    assert client.policy_delete("api") is True
    assert "api" not in client.policy_names()
    with pytest.raises(floodgate.InvalidError, match="no such policy 'api'"):
        client.policy_check("api", prefix + "u")


def test_policies_on_a_stock_server(stock):
    client = floodgate.Client(url(stock))
    exercise_policies(client, "s:")
    client.close()
    c = stock.client()
    assert all(c.pttl(k) > 0 for k in c.keys("s:*"))  # states expire; definitions are gone
    assert c.keys("fg:policy:*") == []
    c.close()


def test_policies_on_a_stock_cluster(stock_cluster):
    client = floodgate.Client(cluster_url(stock_cluster))
    # keys on other slots than the policy's: LOOKUP, then the check with RULES
    exercise_policies(client, "c:")
    client.close()


def test_async_policies_on_a_stock_cluster(stock_cluster, async_program):
    cl = stock_cluster
    setter = floodgate.Client(cluster_url(cl))
    setter.policy_set("api", API)
    setter.policy_deny("api", ["deny:me"])
    a = async_program(cluster_url(cl, cl.nodes[:1]))
    # the first check meets CROSSSLOT as one script, the others LOOKUP first
    for i in range(6):
        a.send("policy p%d api ak:%d" % (i, i % 2))
    a.send("policy d api deny:me")
    answers, _, _ = a.wait()
    assert [answers["p%d" % i].split()[:3] for i in range(6)] == \
        [["ok", "1", "1"]] * 2 + [["ok", "1", "0"]] * 2 + [["ok", "0", "0"]] * 2, answers
    assert answers["d"].split()[1] == "0" and "denylist" in answers["d"], answers
    a.close()
    setter.policy_delete("api")
    setter.close()


# ------------------------------------------------------- script cache eviction

def test_a_script_evicted_from_the_cache():
    """Redis 7.4 and later evict the scripts EVAL cached (the oldest, past
    500); the library's EVAL after NOSCRIPT is such a script, so it may go
    any time: the next call finds it gone and sends it again."""
    s = Server(module=False).start()
    try:
        d = Driver(url(s))
        assert d("check ev %s" % SLOW).startswith("ok 1 5 4 ")
        c = s.client()
        ours = [sha for sha in re.findall(r"[0-9a-f]{40}", open(os.path.join(GEN, "scripts.c")).read())]
        c.script_flush()
        assert d("check ev %s" % SLOW).startswith("ok 1 5 3 ")  # NOSCRIPT: cached by EVAL
        assert any(c.script_exists(sha)[0] for sha in ours)
        for i in range(600):
            c.eval("return %d" % i, 0)
        if any(c.script_exists(sha)[0] for sha in ours):
            pytest.skip("this server keeps every script EVAL cached (Redis 7.4 began evicting them)")
        assert d("check ev %s" % SLOW).startswith("ok 1 5 2 ")
        assert any(c.script_exists(sha)[0] for sha in ours)
        d.close()
        c.close()
    finally:
        s.cleanup()
