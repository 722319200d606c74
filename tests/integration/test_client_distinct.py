"""libfloodgate's unique counting (fg_distinct_*) against real servers with
the module: the same answers as mem: on the same sequences (a scripted one
with exact values, and random differential runs comparing counts and
exported bytes), exports that are the HyperLogLog a PFADD of the same items
builds, the server's own messages for refused arguments (without a round
trip), error mapping, unions of many keys in one round trip, mem:'s
injected clock, unix sockets and a 3-master cluster.

The C program is tests/client/distinct_client.c (a line protocol and a
differential mode, see its top comment); it is built when missing.
"""

import os
import re
import subprocess
import time

import pytest
import redis

import backends
from harness import RawClient, RespError, Server
from test_client import program

US = 1000000
HLL_BYTES = 12304
MAX_US = 4294967296 * US - 1

# The library backfills with FG.UVADDAT, which a server allows with
# floodgate.explicit-time.
pytestmark = pytest.mark.usefixtures("explicit_time")


@pytest.fixture(autouse=True)
def needs_uv(server):
    c = server.client()
    try:
        if c.execute_command("COMMAND", "INFO", "FG.UVCOUNT") == [None]:
            pytest.skip("the module has no FG.UV* commands yet")
    finally:
        c.close()


class DistinctClient:
    """distinct_client: one command per line, one answer per line."""

    def __init__(self, url, clock_us=None):
        argv = [program("distinct_client"), url] + ([str(clock_us)] if clock_us else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.opened = self.proc.stdout.readline().strip()
        assert self.opened == "ok opened", self.opened

    def __call__(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def export(self, line):
        """The bytes of an export, or the error line."""
        answer = self("export " + line)
        return bytes.fromhex(answer[3:]) if answer.startswith("ok ") else answer

    def round_trips(self):
        return int(self("stats").split()[1])

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0


def url(server):
    return "redis://127.0.0.1:%d" % server.port


def raw(port, *argv):
    """The server's reply as the wire gives it (errors verbatim)."""
    with RawClient(port) as rc:
        rc.sock.sendall(rc.encode(argv))
        try:
            return rc.read_reply()
        except RespError as e:
            return e


def hour_start(hours_ago):
    """The unix second of the start of the hour `hours_ago` hours back."""
    return (int(time.time()) // 3600 - hours_ago) * 3600


def grid():
    """How the module describes the default grid."""
    return "minutes for the last 60 minutes, hours for the last 48 hours, days for the last 31 days"


# ------------------------------------------------------------- mem: and server


def off_grid(h, off):
    """Windows of counter k, around hour h, that no grid has."""
    return [("count k between %d %d" % ((h + 10) * US, (h + 20) * US),
             off % ((h + 10) * US, "k", grid())),
            ("count k between %d %d" % (h * US, (h + 90) * US), off % ((h + 90) * US, "k", grid()))]


def last_windows():
    """LAST windows of counter k, whose 8 items are 2 to 4 hours old."""
    return [("count k last 1 minutes", "ok 0"),
            ("count k last 4 hours", "ok 8"),
            ("count k nokey last 4 hours", "ok 8"),
            ("count nokey last 4 hours", "ok 0"),
            ("count k last 8 days",
             "err invalid ERR LAST window of 691200 seconds is longer than the SPAN of 'k' (604800 "
             "seconds)")]


def script(h):
    """(command, the answer both backends must give) with items around the
    hour h, two to three hours ago, and the real clock for LAST."""
    at = lambda s: str((h + s) * US + 123456)  # noqa: E731 - µs are truncated
    future = str(int(time.time() + 3600) * US)
    off = "err invalid ERR BETWEEN edge %d is not on the grid of '%s' (%s)"
    return [
        ("create k", "ok"),
        ("create k", "err invalid ERR key exists"),
        ("add k %s a b c" % at(10), "ok 1"),
        ("add k %s a" % at(10), "ok 0"),
        ("add k %s d e" % at(70), "ok 1"),
        ("add k %s 0x 0x00 0x00ff" % at(3000), "ok 1"),
        ("count k between %d %d" % (h * US, (h + 3600) * US), "ok 8"),
        ("count k between %d %d" % (h * US, (h + 60) * US), "ok 3"),
        ("count k between %d %d" % ((h + 60) * US, (h + 120) * US + 999999), "ok 2"),
        *off_grid(h, off),
        ("count k between %d %s" % ((h + 60) * US, future), "ok 5"),  # exact: ends after newest
        *last_windows(),
        ("count k last 0 hours", "err invalid ERR n must be between 1 and 15552000"),
        ("count k last 1 7", "err invalid ERR unit must be SECONDS, MINUTES, HOURS or DAYS"),
        ("count k between 5000000 5999999",
         "err invalid ERR BETWEEN start must be before end (in whole seconds)"),
        ("count k between -1 5", "err invalid ERR start_us must be between 0 and %d" % (MAX_US + 1)),
        ("count k between 0 %d" % (MAX_US + 2),
         "err invalid ERR end_us must be between 0 and %d" % (MAX_US + 1)),
        ("count last 1 seconds", "err invalid ERR wrong number of arguments for 'fg.uvcount' command"),
        ("export last 1 seconds",
         "err invalid ERR wrong number of arguments for 'fg.uvexport' command"),
        ("add k %d x" % (MAX_US + 1), "err invalid ERR unix_us must be between 0 and %d" % MAX_US),
        ("add k %s x" % future, "err invalid ERR unix_us is more than 60 seconds in the future"),
        ("add k 5", "err invalid ERR wrong number of arguments for 'fg.uvaddat' command"),
        ("add k -1", "err invalid ERR wrong number of arguments for 'fg.uvadd' command"),
        ("create b 0 60 48 31 0", "err invalid ERR SPAN must be between 1 and 15552000"),
        ("create b 60 1441 48 31 0", "err invalid ERR MINUTES must be between 0 and 1440"),
        ("create b 60 60 745 31 0", "err invalid ERR HOURS must be between 0 and 744"),
        ("create b 60 60 48 1101 0", "err invalid ERR DAYS must be between 0 and 1100"),
        ("create b 60 60 48 31 86460", "err invalid ERR TZOFFSET must be between -86400 and 86400"),
        ("create b 60 60 48 31 30", "err invalid ERR TZOFFSET must be whole minutes"),
        ("count b last 1 seconds", "ok 0"),  # nothing was created
        ("create t 3600 0 0 0 0", "ok"),
        ("add t %s a" % at(10), "ok 1"),
        ("count t last 2 hours",
         "err invalid ERR LAST window of 7200 seconds is longer than the SPAN of 't' (3600 "
         "seconds)"),
        ("count t between %d %d" % (h * US, (h + 5) * US), off % (h * US, "t", "no buckets")),
        ("count t between %d %d" % (h * US, (h + 60) * US), "ok 1"),
        ("count t k between %d %d" % (h * US, (h + 60) * US), "ok 3"),
        ("create f 86400 120 24 90 3600", "ok"),  # every option set: sent as FG.UVLOAD
        ("create f 86400 120 24 90 3600", "err invalid ERR key exists"),
        ("create g 86400 120 24 90 0", "ok"),
        ("add f %s a" % at(0), "ok 1"),
        ("count f between %d %d" % ((h - 3630) * US, (h - 3600) * US),
         off % ((h - 3630) * US, "f", "minutes for the last 120 minutes, hours for the last 24 "
                "hours, days for the last 90 days")),
        ("count f between %d %d" % ((h + 3600 - 86400) * US, (h + 3600) * US), "ok 1"),
        ("count f g k nokey last 1 days", "ok 8"),
        ("count f g k n1 n2 n3 n4 n5 n6 n7 n8 last 1 days", "ok 8"),  # 11 keys: exported, merged
        ("count t last 1 days",
         "err invalid ERR LAST window of 86400 seconds is longer than the SPAN of 't' (3600 "
         "seconds)"),
        ("count f g k n1 n2 n3 n4 n5 n6 n7 n8 last 8 days",
         "err invalid ERR LAST window of 691200 seconds is longer than the SPAN of 'f' (86400 "
         "seconds)"),
    ]


def test_same_answers_as_mem(r, server):
    h = hour_start(2)
    steps = script(h)
    mem, srv = DistinctClient("mem:"), DistinctClient(url(server))
    try:
        got_mem = [mem(line) for line, _ in steps]
        got_srv = [srv(line) for line, _ in steps]
        exports = [(c.export("k f g last 1 days"),
                    c.export("k between %d %d" % (h * US, (h + 60) * US))) for c in (mem, srv)]
    finally:
        mem.close()
        srv.close()
    for (line, expected), a, b in zip(steps, got_mem, got_srv):
        assert a == b, "%s: mem: %r, server: %r" % (line[:70], a, b)
        assert a == expected, line[:70]
    assert exports[0] == exports[1]
    assert len(exports[0][0]) == HLL_BYTES
    # what the server holds: the options, the FG.UVLOAD-created one included
    for key, options in (("f", [86400, 120, 24, 90, 3600]), ("g", [86400, 120, 24, 90, 0]),
                         ("t", [3600, 0, 0, 0, 0]), ("k", [604800, 60, 48, 31, 0])):
        info = r.execute_command("FG.UVINFO", key)
        assert info[1:10:2] == options, key
    assert r.exists("b") == 0
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 4, "HOURS") == 8
    assert r.execute_command("FG.UVCOUNT", "k", "BETWEEN", h * US, (h + 60) * US) == 3


def differential(target, seed, ops):
    """Runs distinct_client diff; the counts of the paths it went through."""
    out = subprocess.run([program("distinct_client"), "diff", target, str(seed), str(ops)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.fullmatch(r"OK (\d+) operations: (\d+) counted \((\d+) not 0\), (\d+) exported, "
                     r"(\d+) of over 6 keys, (\d+) off the grid, (\d+) longer than the SPAN, "
                     r"(\d+) refused", out.stdout.strip())
    assert m and int(m.group(1)) == ops, out.stdout
    return dict(zip(["counted", "nonzero", "exported", "wide", "off_grid", "too_long", "refused"],
                    [int(x) for x in m.groups()[1:]]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_differential(r, server, seed):
    n = differential(url(server), seed, 10000)
    assert n["counted"] > 300 and n["nonzero"] > 200 and n["exported"] > 150, n
    assert n["wide"] > 20 and n["off_grid"] > 300 and n["too_long"] > 50, n
    assert n["refused"] > 100, n


# ------------------------------------------------------------ HyperLogLogs


def test_export_is_the_hll_of_a_pfadd(r, server):
    """The registers of a window are those of PFADD of its items: the same
    bytes once both are dense, and the same PFCOUNT."""
    h = hour_start(3)
    early = ["u%d" % i for i in range(3000)] + ["0x00", "0x", "0x00ff00"]
    late = ["v%d" % i for i in range(1500)] + ["u%d" % i for i in range(500)]
    raw_items = lambda items: [bytes.fromhex(x[2:]) if x.startswith("0x") else x.encode()  # noqa
                               for x in items]
    windows = {"early": "between %d %d" % (h * US, (h + 60) * US),
               "late": "between %d %d" % ((h + 60) * US, (h + 3600) * US),
               "all": "last 1 days"}
    exports = {}
    for target in ("mem:", url(server)):
        c = DistinctClient(target)
        try:
            before = c.round_trips()
            assert c("add pf %d %s" % (h * US + 5, " ".join(early))) == "ok 1"
            assert c("add pf %d %s" % ((h + 61) * US, " ".join(late))) == "ok 1"
            if target != "mem:":
                assert c.round_trips() == before + 2  # hundreds of commands, two round trips
            exports[target] = {w: (c.export("pf " + spec), c("count pf " + spec))
                               for w, spec in windows.items()}
        finally:
            c.close()
    assert exports["mem:"] == exports[url(server)]
    r.config_set("hll-sparse-max-bytes", 0)  # PFADD builds dense strings at once
    try:
        for w, items in (("early", early), ("late", late), ("all", early + late)):
            hll, count = exports["mem:"][w]
            r.delete("twin", "merged")
            r.pfadd("twin", *raw_items(items))
            twin = r.get("twin")
            assert hll[:5] == twin[:5] == b"HYLL\x00"  # dense
            assert hll[16:] == twin[16:], w  # the very same registers
            r.set("exported", hll)
            assert count == "ok %d" % r.pfcount("exported") == "ok %d" % r.pfcount("twin")
            assert r.pfmerge("merged", "exported", "twin")
            assert r.pfcount("merged") == r.pfcount("twin")
        assert 4400 < r.pfcount("twin") < 4600
    finally:
        r.config_set("hll-sparse-max-bytes", 3000)


def test_many_keys_are_one_round_trip(r, server):
    keys = ["m%d" % i for i in range(20)]
    c = DistinctClient(url(server))
    try:
        for i, k in enumerate(keys[:15]):  # the last five are missing
            assert c("add %s -1 %s x%d" % (k, k, i)) == "ok 1"
        for n in (1, 6, 7, 11, 12, 20):
            before = c.round_trips()
            spec = " ".join(keys[:n]) + " last 1 hours"
            count = c("count " + spec)
            hll = c.export(spec)
            assert c.round_trips() == before + 2, n
            assert count == "ok %d" % r.execute_command("FG.UVCOUNT", keys[0], "LAST", 1, "HOURS",
                                                        *keys[1:n]), n
            assert hll == r.execute_command("FG.UVEXPORT", keys[0], "LAST", 1, "HOURS",
                                            *keys[1:n]), n
    finally:
        c.close()


# --------------------------------------------------------- the server's words


# (client line, the same command on the wire): refused in the client
REFUSED = [
    ("create k 0 60 48 31 0", ["FG.UVCREATE", "k", "SPAN", "0"]),
    ("create k 15552001 60 48 31 0", ["FG.UVCREATE", "k", "SPAN", "15552001"]),
    ("create k 60 -1 48 31 0", ["FG.UVCREATE", "k", "MINUTES", "-1"]),
    ("create k 60 60 745 31 0", ["FG.UVCREATE", "k", "HOURS", "745"]),
    ("create k 60 60 48 -5 0", ["FG.UVCREATE", "k", "DAYS", "-5"]),
    ("create k 60 60 48 31 -86401", ["FG.UVCREATE", "k", "TZOFFSET", "-86401"]),
    ("create k 60 60 48 31 61", ["FG.UVCREATE", "k", "TZOFFSET", "61"]),
    ("add k -1", ["FG.UVADD", "k"]),
    ("add k 0", ["FG.UVADDAT", "k", "0"]),
    ("add k %d a" % (MAX_US + 1), ["FG.UVADDAT", "k", str(MAX_US + 1), "a"]),
    ("count k last 0 days", ["FG.UVCOUNT", "k", "LAST", "0", "DAYS"]),
    ("count k last 15552001 seconds", ["FG.UVCOUNT", "k", "LAST", "15552001", "SECONDS"]),
    ("count k last 1 2", ["FG.UVCOUNT", "k", "LAST", "1", "FORTNIGHTS"]),
    ("count k between 3000000 2000000", ["FG.UVCOUNT", "k", "BETWEEN", "3000000", "2000000"]),
    ("count k between 3000000 3999999", ["FG.UVCOUNT", "k", "BETWEEN", "3000000", "3999999"]),
    ("count k between -5 0", ["FG.UVCOUNT", "k", "BETWEEN", "-5", "0"]),
    ("export k between 0 %d" % (MAX_US + 2), ["FG.UVEXPORT", "k", "BETWEEN", "0", str(MAX_US + 2)]),
    ("count last 5 days", ["FG.UVCOUNT", "LAST", "5", "DAYS"]),
]


def test_refused_arguments_have_the_servers_message(r, server):
    c = DistinctClient(url(server))
    try:
        before = c.round_trips()
        for line, argv in REFUSED:
            reply = raw(server.port, *argv)
            assert isinstance(reply, RespError), (line, reply)
            assert c(line) == "err invalid " + str(reply), line
        # NULL pointers and no keys: refused too
        assert c("invalid") == "ok" + " invalid" * 11
        assert c.round_trips() == before  # nothing was sent
        assert r.keys("*") == []
    finally:
        c.close()
    m = DistinctClient("mem:")
    try:
        for line, argv in REFUSED:
            assert m(line) == "err invalid " + str(raw(server.port, *argv)), line
        assert m("invalid") == "ok" + " invalid" * 11
    finally:
        m.close()


def test_error_mapping(r, server):
    r.set("str", "v")
    r.execute_command("FG.TOKEN", "limit", 10, 2)
    r.execute_command("BF.ADD", "bloom", "a")
    c = DistinctClient(url(server))
    wrongtype = "err wrongtype WRONGTYPE Operation against a key holding the wrong kind of value"
    try:
        assert c("add uv -1 a") == "ok 1"
        for key in ("str", "limit", "bloom"):
            assert c("create %s" % key) == "err invalid ERR key exists"
            assert c("add %s -1 a" % key) == wrongtype
            assert c("add %s 1000000 a b c d e f g h i j k" % key) == wrongtype
            assert c("count %s last 1 hours" % key) == wrongtype
            assert c("count uv %s last 1 hours" % key) == wrongtype
            assert c("export uv %s last 1 hours" % key) == wrongtype
            # the wrong key in the second command of a long union
            assert c("count uv n1 n2 n3 n4 n5 n6 %s last 1 hours" % key) == wrongtype
            assert c("export uv n1 n2 n3 n4 n5 n6 n7 %s last 1 hours" % key) == wrongtype
        assert r.get("str") == b"v"
    finally:
        c.close()


def test_mem_runs_by_the_injected_clock():
    """mem: stamps FG.UVADD, ends LAST windows and limits FG.UVADDAT by the
    client's clock, to the second."""
    t = 1763683200  # a day's start
    c = DistinctClient("mem:", t * US + 500000)
    try:
        assert c("add k -1 a b") == "ok 1"
        assert c("count k between %d %d" % (t * US, (t + 1) * US)) == "ok 2"
        assert c("count k between %d %d" % ((t - 60) * US, t * US)) == "ok 0"
        assert c("clock %d" % ((t + 59) * US + 999999)) == "ok"
        assert c("count k last 60 seconds") == "ok 2"
        assert c("count k last 1 minutes") == "ok 2"
        assert c("clock %d" % ((t + 60) * US)) == "ok"
        assert c("count k last 60 seconds") == "ok 0"
        assert c("count k last 61 seconds") == "ok 2"
        assert c("add k -1 c") == "ok 1"  # at t + 60
        assert c("count k between %d %d" % (t * US, (t + 60) * US)) == "ok 2"  # a minute bucket
        assert c("count k between %d %d" % (t * US, (t + 120) * US)) == "ok 3"
        assert c("count k last 1 seconds") == "ok 1"
        assert c("add k %d d" % ((t + 120) * US)) == "ok 1"  # 60 s ahead: accepted
        assert c("add k %d e" % ((t + 120) * US + 1)) == \
            "err invalid ERR unix_us is more than 60 seconds in the future"
        # items after "now" (the clock went back) still count in LAST windows
        assert c("count k last 1 seconds") == "ok 2"
        assert c("clock -1") == "ok"
        assert c("add k -1 f") == "err invalid ERR the client's clock is out of range"
        assert c("count k last 1 seconds") == "err invalid ERR the client's clock is out of range"
        assert c("count k between %d %d" % (t * US, (t + 180) * US)) == "ok 4"
    finally:
        c.close()


# ---------------------------------------------------------------- transports


def test_unreachable_server_and_server_without_the_module():
    s = Server(module=False).start()
    c = DistinctClient(url(s) + "?backend=module")  # auto: the scripts (below)
    try:
        assert c("add k -1 a").startswith("err protocol ERR unknown command")
        assert c("count k last 1 hours").startswith("err protocol ERR unknown command")
        s.stop()
        for line in ("create k", "add k -1 a", "add k 1000000 a", "count k last 1 hours",
                     "export k n1 n2 n3 n4 n5 n6 n7 last 1 hours"):
            assert c(line).startswith("err io "), line
    finally:
        c.close()
        s.stop()


def test_unix_socket():
    s = Server()
    sock = os.path.join(s.dir, "redis.sock")
    s.extra_args += ["--unixsocket", sock]
    s.start()
    try:
        c = DistinctClient("unix://%s?db=3" % sock)
        assert c("add u -1 a b c") == "ok 1"
        assert c("count u last 1 hours") == "ok 3"
        c.close()
        assert redis.Redis(unix_socket_path=sock, db=3).execute_command(
            "FG.UVCOUNT", "u", "LAST", 1, "HOURS") == 3
    finally:
        s.stop()


@pytest.mark.usefixtures("cluster_explicit_time")
def test_cluster(cluster):
    seeds = "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in cluster.nodes)
    keys = ["c%d" % i for i in range(12)]
    tagged = ["{page}:%d" % i for i in range(9)]
    c = DistinctClient(seeds)
    try:
        for k in keys + tagged:
            assert c("add %s -1 a b %s" % (k, k)) == "ok 1"
            assert c("count %s last 1 hours" % k) == "ok 3"
        # one slot: any number of keys (9: two commands, both to the slot's node)
        assert c("count %s last 1 hours" % " ".join(tagged)) == "ok 11"
        assert len(c.export("%s last 1 hours" % " ".join(tagged))) == HLL_BYTES
        # several slots: the cluster's CROSSSLOT, as FG_CODE_INVALID
        spread = [k for k in keys if cluster.owner_of(k)[1].port != cluster.owner_of("c0")[1].port]
        for many in ([keys[0], spread[0]], [keys[0]] + tagged[:6] + [spread[0]]):
            assert c("count %s last 1 hours" % " ".join(many)).startswith(
                "err invalid CROSSSLOT"), many
    finally:
        c.close()
    assert len({cluster.owner_of(k)[1].port for k in keys}) == 3  # spread over every master
    for k in keys:
        node = cluster.owner_of(k)[1].client()
        assert node.execute_command("FG.UVCOUNT", k, "LAST", 1, "HOURS") == 3
        node.close()
    assert differential(seeds, 7, 3000)["counted"] > 50


# ------------------------------------------------------- servers without the module


def stock_script(h):
    """The lines of script(h) whose windows uv.lua answers as the module does
    (docs/scripts.md, "Unique counters"): on the hour grid, or LAST windows whose items
    lie far from their start; FG.UVCREATE with options needs the module."""
    at = lambda s: str((h + s) * US + 123456)  # noqa: E731
    off = "err invalid ERR BETWEEN edge %d is not on the grid of '%s' (%s)"
    return [
        ("add k %s a b c" % at(10), "ok 1"),
        ("add k %s a" % at(10), "ok 0"),
        ("add k %s d e" % at(3670), "ok 1"),
        ("add k %s 0x 0x00 0x00ff" % at(3000), "ok 1"),
        ("count k between %d %d" % (h * US, (h + 3600) * US), "ok 6"),
        ("count k between %d %d" % (h * US, (h + 7200) * US), "ok 8"),
        *off_grid(h, off),
        *last_windows(),
        ("count k n1 n2 n3 n4 n5 n6 n7 n8 n9 last 1 days", "ok 8"),
        ("create k", "err invalid ERR key exists"),
        ("create b", "ok"),
        ("add k %s x" % str(int(time.time() + 3600) * US),
         "err invalid ERR unix_us is more than 60 seconds in the future"),
    ]


@pytest.mark.parametrize("kind", backends.STOCK)
def test_stock_backends_answer_as_the_module(r, server, kind):
    """fg_distinct_* over the scripts (uv.lua) of a stock server and cluster:
    the module's answers for these lines, exports of the same bytes, a union
    of many keys in one round trip, and WRONGTYPE for another family's key."""
    stock = backends.target(kind)
    h = hour_start(3)
    steps = stock_script(h)
    module, scripts = DistinctClient(url(server)), DistinctClient(stock.url)
    try:
        for line, expected in steps:
            assert module(line) == expected, line[:70]
            assert scripts(line) == expected, line[:70]
        for spec in ("k last 1 days", "k between %d %d" % (h * US, (h + 3600) * US),
                     "k nokey last 4 hours"):
            assert scripts.export(spec) == module.export(spec), spec
        keys = ["{m}%d" % i for i in range(12)]
        for i, k in enumerate(keys):
            assert scripts("add %s -1 %s x%d" % (k, k, i)) == "ok 1"
        before = scripts.round_trips()
        assert scripts("count %s last 1 hours" % " ".join(keys)) == "ok 24"
        assert scripts.round_trips() == before + 1
        c = stock.client()
        c.set("str", "v")
        c.close()
        assert scripts("add str -1 a") == \
            "err wrongtype WRONGTYPE Operation against a key holding the wrong kind of value"
        assert scripts("count k str last 1 hours").startswith("err wrongtype WRONGTYPE")
    finally:
        module.close()
        scripts.close()
