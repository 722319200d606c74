"""libfloodgate's Bloom filters (fg_bf_*, fg_filter) against real servers
with the module: the same answers as mem: on the same sequences (a scripted
one with exact values, and random differential runs), the server's own
replies through a raw connection for the same commands, binary items, error
mapping, BF.MADD/BF.MEXISTS in one round trip, unix sockets, a 3-master
cluster, and I/O failures. On a stock server and cluster (bloom.lua,
docs/scripts.md "Bloom filters") the scripted sequence's determined
answers, and the tests of the server's words, mapping, binary items and
round trips; mem:'s exact twins (the differential runs, fg_filter) are the
module's layout only. A server with BF.* of its own keeps them, also under
?backend=script.

The C program is tests/client/bloom_client.c (a line protocol and a
differential mode, see its top comment); it is built when missing.
"""

import os
import re
import subprocess

import pytest
import redis

import backends
from harness import RawClient, RespError, Server, commandstats, wait_for
from test_client import program
from topology import Cluster


@pytest.fixture(autouse=True)
def needs_bloom(server):
    c = server.client()
    try:
        if c.execute_command("COMMAND", "INFO", "BF.ADD") == [None]:
            pytest.skip("the module has no BF.* commands yet")
    finally:
        c.close()


class BloomClient:
    """bloom_client: one command per line, one answer per line."""

    def __init__(self, url):
        self.proc = subprocess.Popen([program("bloom_client"), url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.opened = self.proc.stdout.readline().strip()
        assert self.opened == "ok opened", self.opened

    def __call__(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def round_trips(self):
        return int(self("stats").split()[1])

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0


def url(server):
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture(params=backends.BACKENDS)
def target(request):
    return backends.of_param(request, flush_session=True)


def raw(port, *argv, script=False):
    """The server's reply as the wire gives it (errors verbatim); script:
    sent as the library sends it to a server without the module."""
    if script:
        argv = backends.lock_script_form(argv)
    with RawClient(port) as rc:
        rc.sock.sendall(rc.encode(argv))
        try:
            return rc.read_reply()
        except RespError as e:
            return e


def words(prefix, n):
    return ["%s%d" % (prefix, i) for i in range(n)]


# ------------------------------------------------------------- mem: and server

# (command, the answer both backends must give; None: any, but the same)
SCRIPT = [
    ("reserve k 0.01 5 0", "ok"),
    ("madd k a b c d e f g h i j",
     "err invalid added=1,1,1,1,1,0,0,0,0,0 ERR non scaling filter is full"),
    ("add k a", "ok 0"),
    ("add k zz", "err invalid ERR non scaling filter is full"),
    ("exists k a", "ok 1"),
    ("mexists k a b c d e", "ok 1 1 1 1 1"),
    ("mexists k zz 0x00ff", None),
    ("card k", "ok 5"),
    ("reserve k 0.01 5 0", "err invalid ERR item exists"),
    ("reserve k 0.5 1 0", "err invalid ERR item exists"),
    ("reserve bad 0 5 0", "err invalid ERR (0 < error rate range < 1) "),
    ("reserve bad 0.01 0 0", "err invalid ERR (capacity should be larger than 0)"),
    ("reserve bad 0.01 5 -1", "err invalid ERR bad expansion"),
    ("reserve huge 0.000001 1099511627776 0",  # 4 TiB of bits: refused, not allocated
     "err invalid ERR filter too big: its bits would exceed 1 TiB"),
    ("exists bad a", "ok 0"),
    ("exists nokey a", "ok 0"),
    ("mexists nokey a b", "ok 0 0"),
    ("card nokey", "ok 0"),
    ("add auto x", "ok 1"),
    ("add auto x", "ok 0"),
    ("madd auto 0x 0x00 0x0000 0x 0x01", "ok 1 1 1 0 1"),
    ("mexists auto 0x 0x00 0x0000 0x01 x", "ok 1 1 1 1 1"),
    ("reserve auto 0.01 100 2", "err invalid ERR item exists"),
    ("reserve grow 0.001 10 1", "ok"),
    ("madd grow " + " ".join(words("g", 200)), None),
    ("mexists grow " + " ".join(words("g", 200)), "ok" + " 1" * 200),
    ("mexists grow " + " ".join(words("h", 200)), None),
    ("card grow", None),
    ("reserve deep 0.5 1 1", "ok"),
    ("madd deep " + " ".join(words("d", 300)),
     None),  # one item per level: stops at the last level
    ("card deep", None),
]


def run_script(client):
    return [client(line) for line, _ in SCRIPT]


def test_same_answers_as_mem(r, server):
    mem, srv = BloomClient("mem:"), BloomClient(url(server))
    try:
        got_mem, got_srv = run_script(mem), run_script(srv)
    finally:
        mem.close()
        srv.close()
    for (line, expected), a, b in zip(SCRIPT, got_mem, got_srv):
        assert a == b, "%s: mem: %r, server: %r" % (line[:60], a, b)
        if expected is not None:
            assert a == expected, line[:60]
    answers = {line.split(" ", 2)[0] + " " + line.split(" ", 2)[1]: a
               for (line, _), a in zip(SCRIPT, got_srv)}
    assert answers["madd deep"].startswith("err invalid added=1,")
    assert answers["madd deep"].endswith(" ERR problem inserting into filter")
    assert r.execute_command("BF.INFO", "deep", "FILTERS") == [64]
    assert r.execute_command("BF.INFO", "k", "ITEMS") == [5]
    assert answers["card grow"] == "ok %d" % r.execute_command("BF.CARD", "grow")
    assert answers["card deep"] == "ok %d" % r.execute_command("BF.CARD", "deep")
    assert r.exists("huge") == 0


# The lines of SCRIPT whose answers a false positive could change: what
# stays determined in them.
PROBABILISTIC = {
    "madd k a b c d e f g h i j":
        r"err invalid added=[01](,[01]){9} ERR non scaling filter is full",
    "madd auto 0x 0x00 0x0000 0x 0x01": r"ok [01] [01] [01] 0 [01]",
}


@pytest.mark.parametrize("kind", backends.STOCK)
def test_stock_backends_answer_as_the_module(r, server, kind):
    """The scripted sequence over bloom.lua: every answer that no false
    positive can change is the module's; the others keep what is
    determined in them (5 adds before the full filter's refusal, a
    repeated item's 0)."""
    stock = backends.target(kind)
    module, scripts = BloomClient(url(server)), BloomClient(stock.url)
    try:
        for line, expected in SCRIPT:
            got, theirs = scripts(line), module(line)
            if line in PROBABILISTIC:
                assert re.fullmatch(PROBABILISTIC[line], got), line
                assert not line.startswith("madd k") or got.count("1") == 5
            elif expected is not None:
                assert got == expected == theirs, line[:60]
            elif line.startswith("madd deep"):  # the 65th level, after whichever adds
                assert got.endswith(" ERR problem inserting into filter")
    finally:
        module.close()
        scripts.close()


def differential(target, seed, ops):
    """Runs bloom_client diff; the counts of the paths it went through."""
    out = subprocess.run([program("bloom_client"), "diff", target, str(seed), str(ops)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.fullmatch(r"OK (\d+) operations: (\d+) reserved, (\d+) bad options, (\d+) full, "
                     r"(\d+) at the last level", out.stdout.strip())
    assert m and int(m.group(1)) == ops, out.stdout
    return [int(x) for x in m.groups()[1:]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_differential(r, server, seed):
    reserved, refused, full, last_level = differential(url(server), seed, 10000)
    assert reserved > 50 and refused > 10 and full > 10 and last_level > 0


# --------------------------------------------------------- the server's words


# options the client refuses without a round trip, as BF.RESERVE would
BAD_OPTIONS = [
    ("0", "100", "2"), ("1", "100", "2"), ("-0.5", "100", "2"), ("nan", "100", "2"),
    ("inf", "100", "2"), ("0.01", "0", "2"), ("0.01", "-3", "2"),
    ("0.01", str((1 << 40) + 1), "2"), ("0.01", "100", "-1"), ("0.01", "100", "32769"),
    ("2", "0", "-1"), ("0.01", "0", "-1"),
]


def reserve_argv(key, error, capacity, expansion):
    """What the client sends for these options."""
    argv = ["BF.RESERVE", key, "%.17g" % float(error), capacity]
    return argv + (["NONSCALING"] if expansion == "0" else ["EXPANSION", expansion])


def test_refused_options_have_the_servers_message(target):
    c = BloomClient(target.url)
    try:
        before = c.round_trips()
        for error, capacity, expansion in BAD_OPTIONS:
            answer = c("reserve k %s %s %s" % (error, capacity, expansion))
            reply = raw(target.owner("k").port, *reserve_argv("k", error, capacity, expansion),
                        script=not target.module)
            assert isinstance(reply, RespError), (error, capacity, expansion, reply)
            assert answer == "err invalid " + str(reply), (error, capacity, expansion)
        assert c.round_trips() == before  # refused in the client
        assert target.client().exists("k") == 0
    finally:
        c.close()


@pytest.mark.parametrize("target", backends.BACKENDS[:2], indirect=True)
def test_error_mapping(target):
    r = target.client()
    r.set("str", "v")
    if target.module:
        r.execute_command("FG.TOKEN", "limit", 10, 2)
    else:
        r.evalsha(backends.script_sha("ratelimit"), 1, "limit", "FG.TOKEN", 10, 2)
    c = BloomClient(target.url)
    try:
        message = "WRONGTYPE Operation against a key holding the wrong kind of value"
        wrongtype = "err wrongtype " + message
        for key in ("str", "limit"):
            assert c("add %s a" % key) == wrongtype
            assert c("madd %s a b" % key) == "err wrongtype added=0,0 " + message
            assert c("exists %s a" % key) == wrongtype
            assert c("mexists %s a b" % key) == wrongtype
            assert c("reserve %s 0.01 10 2" % key) == wrongtype
            assert c("card %s" % key) == wrongtype
        assert r.get("str") == b"v"
    finally:
        c.close()


@pytest.mark.parametrize("target", backends.BACKENDS[:2], indirect=True)
def test_binary_items_reach_the_server_intact(target):
    r = backends.script_client(target.server)
    c = BloomClient(target.url)
    try:
        assert c("add bin 0x00ff00") == "ok 1"
        assert c("madd bin 0x 0x0d0a 0x20") == "ok 1 1 1"
        assert c("add bin 0x00ff00") == "ok 0"
    finally:
        c.close()
    for item in (b"\x00\xff\x00", b"", b"\r\n", b" "):
        assert r.execute_command("BF.EXISTS", "bin", item) == 1, item
    assert r.execute_command("BF.MEXISTS", "bin", b"\x00\xff", b"\x00", b"\x00\xff\x00\x00") == \
        [0, 0, 0]
    assert r.execute_command("BF.INFO", "bin", "ITEMS") == [4]


def test_multi_item_calls_take_one_round_trip(target):
    r = backends.script_client(target.owner("rt"))
    items = words("rt", 100)
    c = BloomClient(target.url)
    try:
        before = c.round_trips()
        added = c("madd rt " + " ".join(items)).split()
        assert added[0] == "ok" and len(added) == 101
        if target.module:  # the script's false positives are others
            assert added == ["ok"] + ["1"] * 100
        assert c.round_trips() == before + 1
        assert c("mexists rt " + " ".join(items)) == "ok" + " 1" * 100
        assert c.round_trips() == before + 2
        card = c("card rt")
    finally:
        c.close()
    assert r.execute_command("BF.MEXISTS", "rt", *items) == [1] * 100
    assert card == "ok %d" % r.execute_command("BF.CARD", "rt")
    assert r.execute_command("BF.INFO", "rt", "ITEMS") == [added.count("1")]


@pytest.mark.parametrize("target", backends.BACKENDS[:2], indirect=True)
def test_madd_stops_where_the_server_stops(target):
    """A non-scaling filter that fills up in the second command of a call
    sent as several: the client's answer is the single command's."""
    r, script = backends.script_client(target.server), not target.module
    items = words("s", 20)
    for key in ("half", "raw"):
        assert raw(target.port, "BF.RESERVE", key, "0.001", 12, "NONSCALING", script=script) == b"OK"
    reply = raw(target.port, "BF.MADD", "raw", *items, script=script)
    assert reply[:12] == [1] * 12 and len(reply) == 13
    assert str(reply[12]) == "ERR non scaling filter is full"
    c = BloomClient(target.url)
    try:
        assert c("madd half " + " ".join(items)) == \
            "err invalid added=" + ",".join(["1"] * 12 + ["0"] * 8) + \
            " ERR non scaling filter is full"
    finally:
        c.close()
    for key in ("half", "raw"):
        assert r.execute_command("BF.INFO", key, "ITEMS") == [12]
    assert r.execute_command("BF.MEXISTS", "half", *items) == \
        r.execute_command("BF.MEXISTS", "raw", *items)


def test_standalone_filter_is_the_servers_filter(r, server):
    items = ["f%d" % (i % 700) for i in range(1000)]
    probes = words("f", 700) + words("p", 1000)
    assert raw(server.port, "BF.RESERVE", "twin", "0.01", 100, "EXPANSION", 2) == b"OK"
    c = BloomClient("mem:")
    try:
        assert c("fnew 0.01 100 2") == "ok"
        added = [int(c("fadd " + x).split()[1]) for x in items]
        found = [int(c("fhas " + x).split()[1]) for x in probes]
        card, size = c("fcard"), c("fbytes")
        assert c("fnew 0.01 0 2") == "err invalid ERR (capacity should be larger than 0)"
    finally:
        c.close()
    assert added == r.execute_command("BF.MADD", "twin", *items)
    assert found == r.execute_command("BF.MEXISTS", "twin", *probes)
    assert card == "ok %d" % r.execute_command("BF.CARD", "twin")
    assert size == "ok %d" % r.execute_command("BF.INFO", "twin", "SIZE")[0]


# ---------------------------------------------------------------- transports


def test_unreachable_server_is_an_io_error():
    s = Server().start()
    c = BloomClient(url(s))
    try:
        assert c("add k a") == "ok 1"
        s.stop()
        for line in ("add k a", "exists k a", "madd k a b", "mexists k a b", "card k",
                     "reserve j 0.01 10 2"):
            assert c(line).startswith("err io "), line
        s.start()
        # reconnected (not sooner than 100 ms after the last failed connect);
        # the restarted server is empty
        assert wait_for(lambda: c("add k a") == "ok 1", timeout=10)
    finally:
        c.close()
        s.stop()


def test_server_without_the_module_told_to_use_it():
    s = Server(module=False).start()
    c = BloomClient(url(s) + "?backend=module")
    try:
        assert c("add k a").startswith("err protocol ERR unknown command")
        assert c("madd k a b").startswith("err protocol added=0,0 ERR unknown command")
    finally:
        c.close()
        s.stop()


def app_user(server, acl):
    """The URL's user part: none, or a user that may run anything but
    COMMAND (so the library probes)."""
    if not acl:
        return ""
    c = server.client()
    c.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-command")
    c.close()
    return "app:pw@"


@pytest.mark.parametrize("acl", [False, True])
def test_a_server_with_bf_of_its_own_keeps_them_under_backend_script(acl):
    """The module's BF.* are RedisBloom's commands: a connection told to
    speak scripts still sends BF.* as they are to a server that has them
    (COMMAND INFO BF.ADD, or an empty BF.ADD where COMMAND is refused),
    and its rate limits as scripts."""
    s = Server().start()
    try:
        auth = app_user(s, acl)
        c = BloomClient("redis://%s127.0.0.1:%d?backend=script" % (auth, s.port))
        assert c("reserve own 0.01 10 2") == "ok"
        assert c("madd own a b") == "ok 1 1"
        assert c("mexists own a b z") == "ok 1 1 0"
        c.close()
        calls = commandstats(s)
        assert "evalsha" not in calls and "eval" not in calls
        assert calls["bf.madd"] == 1 and calls["bf.reserve"] == 1
        assert s.client().type("own") == b"fg-bloomf"  # the server's own filter
    finally:
        s.stop()


@pytest.mark.parametrize("acl", [False, True])
def test_a_stock_server_runs_the_script(acl):
    s = Server(module=False).start()
    try:
        auth = app_user(s, acl)
        c = BloomClient("redis://%s127.0.0.1:%d" % (auth, s.port))
        assert c("madd st a b") == "ok 1 1"
        assert c("mexists st a b z") == "ok 1 1 0"
        c.close()
        assert s.client().type("st") == b"string"  # bloom.lua's filter
        assert "evalsha" in commandstats(s)
    finally:
        s.stop()


def test_unix_socket():
    s = Server()
    sock = os.path.join(s.dir, "redis.sock")
    s.extra_args += ["--unixsocket", sock]
    s.start()
    try:
        c = BloomClient("unix://%s?db=3" % sock)
        assert c("reserve u 0.01 10 0") == "ok"
        assert c("madd u a b c") == "ok 1 1 1"
        assert c("exists u b") == "ok 1"
        assert c("card u") == "ok 3"
        c.close()
        assert redis.Redis(unix_socket_path=sock, db=3).execute_command("BF.EXISTS", "u", "c") == 1
    finally:
        s.stop()


def test_cluster():
    cl = Cluster().start()
    try:
        seeds = "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in cl.nodes)
        keys = ["c%d" % i for i in range(12)]
        c = BloomClient(seeds)
        for k in keys:
            assert c("madd %s a b %s" % (k, k)) == "ok 1 1 1"
            assert c("mexists %s a b %s zz" % (k, k)).startswith("ok 1 1 1 ")
        c.close()
        owners = {cl.owner_of(k)[1].port for k in keys}
        assert len(owners) == 3  # the keys are spread over every master
        for k in keys:
            node = cl.owner_of(k)[1].client()
            assert node.execute_command("BF.MEXISTS", k, "a", "b", k) == [1, 1, 1]
            node.close()
        assert differential(seeds, 7, 2000)[0] > 10
    finally:
        cl.stop()
