"""The unique counters' script (src/scripts/uv.lua) on a stock server and a
stock cluster against the module: the same items added at the same
explicit times count the same over every window both answer exactly (the
windows on the buckets' grid, and LAST windows whose items lie away from
their start, where the script's whole buckets and the module's seconds
hold the same items: the registers are then the same, so the counts are
equal, not only within HyperLogLog's error), exports are the same bytes
once dense and PFCOUNT reads them, bad input is refused with the module's
words and writes nothing, every key has the expiry of its bucket, and the
buckets stay in their counter's slot (docs/scripts.md, "Unique counters").

The script is driven through the library (tests/client/distinct_client.c,
which declares the bucket keys), and raw, by EVALSHA, for the refusals.
"""

import os
import time

import pytest

import backends
from harness import REPO, RespError
from test_client_distinct import HLL_BYTES, US, DistinctClient

pytestmark = pytest.mark.usefixtures("explicit_time")

TEXT = open(os.path.join(REPO, "build", "gen", "scripts", "uv.lua"), "rb").read()
TIERS = ((60, 60), (3600, 48), (86400, 31))  # width, buckets kept
GRID = "minutes for the last 60 minutes, hours for the last 48 hours, days for the last 31 days"


@pytest.fixture(params=backends.STOCK)
def stock(request):
    return backends.target(request.param)


def items(prefix, n):
    return ["%s%d" % (prefix, i) for i in range(n)]


def add_both(r, lib, key, at_s, group):
    """The same items at the same second, on the module and the script."""
    for i in range(0, len(group), 500):
        chunk = group[i:i + 500]
        r.execute_command("FG.UVADDAT", key, at_s * US + 1234, *chunk)
        assert lib("add %s %d %s" % (key, at_s * US + 1234, " ".join(chunk))) in ("ok 0", "ok 1")


def test_counts_and_exports_are_the_modules(r, stock):
    now = int(time.time())
    h = (now // 3600 - 3) * 3600  # an hour's start, 3 hours back
    day = (now // 86400 - 3) * 86400  # a day's start, 3 days back
    lib = DistinctClient(stock.url)
    try:
        add_both(r, lib, "uv", day + 7200, items("old", 800))
        add_both(r, lib, "uv", h + 10, items("a", 3000))
        add_both(r, lib, "uv", h + 3670, items("a", 500) + items("b", 1500))
        add_both(r, lib, "uv", now - 1200, items("c", 1000))
        windows = [
            ("BETWEEN", h * US, (h + 3600) * US),
            ("BETWEEN", h * US, (h + 7200) * US),
            ("BETWEEN", (h + 3600) * US, (h + 7200) * US),
            ("BETWEEN", day * US, (day + 86400) * US),
            ("BETWEEN", h * US, (now + 86400) * US),  # the module: exact, ending after newest
            ("LAST", 10, "MINUTES"), ("LAST", 30, "MINUTES"), ("LAST", 6, "HOURS"),
            ("LAST", 1, "DAYS"), ("LAST", 7, "DAYS"),
        ]
        for w in windows:
            spec = " ".join(str(x) for x in w).lower()
            module = r.execute_command("FG.UVCOUNT", "uv", *w)
            assert lib("count uv " + spec) == "ok %d" % module, w
            exported = lib.export("uv " + spec)
            assert exported == r.execute_command("FG.UVEXPORT", "uv", *w), w
            assert len(exported) == HLL_BYTES
        assert r.execute_command("FG.UVCOUNT", "uv", "LAST", 7, "DAYS") > 5000
        # the script's own reply, sparse or dense, is a HyperLogLog PFCOUNT reads
        c = stock.client()
        try:
            keys = ["uv"] + every_key("uv", int(time.time()))
            hll = c.evalsha(sha(c), len(keys), *keys, "FG.UVEXPORT", "LAST", 1, "DAYS")
            assert hll[:4] == b"HYLL"
            c.set("{uv}:copy", hll)
            assert c.pfcount("{uv}:copy") == r.execute_command("FG.UVCOUNT", "uv", "LAST", 1, "DAYS")
            c.delete("{uv}:copy")
            assert not c.exists("{uv}:uv:tmp")  # the merge's key is gone
        finally:
            c.close()
    finally:
        lib.close()


def sha(c):
    return c.script_load(TEXT)


def base(name):
    """The prefix of a counter's buckets (uv.lua's counter)."""
    opened = name.find("{")
    if opened >= 0 and name.find("}", opened + 1) > opened + 1:
        return name
    return "{%s}" % name


def every_key(name, now):
    """Every bucket a call may need at second now, and the merge's key: what
    the library declares at most (core/uv_keys.c)."""
    return ["%s:uv:%d:%d" % (base(name), w, b * w) for w, count in TIERS
            for b in range(now // w - count, now // w + 3)] + [base(name) + ":uv:tmp"]


def stock_keys(c, name):
    """The counter's bucket keys on the server."""
    return sorted(k.decode() for k in c.scan_iter(match=base(name) + ":uv:*", count=1000))


def test_every_key_expires_when_its_bucket_leaves_its_tier(stock):
    now = int(time.time())
    lib = DistinctClient(stock.url)
    try:
        for at in (now, now - 3 * 3600, now - 5 * 86400, now - 40 * 86400):
            assert lib("add ttl %d x y" % (at * US)) in ("ok 1", "ok 0")
        assert lib("add ttl -1 z") == "ok 1"
    finally:
        lib.close()
    c = stock.client()
    try:
        keys = stock_keys(c, "ttl")
        assert len(keys) == 5  # a minute, two hours, two days: 40 days back is kept by none
        for k in keys:
            width, start = (int(x) for x in k.split(":")[-2:])
            count = dict(TIERS)[width]
            assert c.pexpiretime(k) == (start + width * count) * 1000, k
            assert c.pttl(k) > 0
    finally:
        c.close()


# (the module's command, its key first): refused by both in the same words
REFUSED = [
    ["FG.UVADD", "k"],
    ["FG.UVADDAT", "k", "5"],
    ["FG.UVADDAT", "k", "x", "a"],
    ["FG.UVADDAT", "k", "-1", "a"],
    ["FG.UVADDAT", "k", "4294967296000000", "a"],
    ["FG.UVADDAT", "k", str((int(time.time()) + 3600) * US), "a"],
    ["FG.UVCOUNT", "k", "LAST", "5"],
    ["FG.UVCOUNT", "k", "LAST", "0", "DAYS"],
    ["FG.UVCOUNT", "k", "LAST", "15552001", "DAYS"],
    ["FG.UVCOUNT", "k", "LAST", "1", "WEEKS"],
    ["FG.UVCOUNT", "k", "NEXT", "1", "DAYS"],
    ["FG.UVCOUNT", "k", "BETWEEN", "5000000", "5999999"],
    ["FG.UVCOUNT", "k", "BETWEEN", "-1", "5"],
    ["FG.UVEXPORT", "k", "BETWEEN", "0", "4294967296000001"],
    ["FG.UVCREATE", "k", "SPAN", "0"],
    ["FG.UVCREATE", "k", "HOURS", "745"],
    ["FG.UVCREATE", "k", "TZOFFSET", "30"],
    ["FG.UVCREATE", "k", "DAYS", "1", "DAYS", "2"],
    ["FG.UVCREATE", "k", "DAYS"],
    ["FG.UVCREATE", "k", "WEEKS", "2"],
]


def test_bad_input_is_refused_in_the_modules_words(r, stock):
    c = stock.client()
    try:
        h = sha(c)
        for argv in REFUSED:
            with pytest.raises(Exception) as module:
                r.execute_command(*argv)
            with pytest.raises(Exception) as script:
                c.evalsha(h, 1, argv[1], argv[0], *argv[2:])
            assert str(script.value) == str(module.value), argv
        # what the script refuses where the module would not
        for argv, words in (
                (["FG.UVCREATE", "k", "DAYS", "90"], "DAYS needs the floodgate module"),
                (["FG.UVADD", "a}b", "x"], "keeps no slot for its buckets"),
                (["FG.UVADD", "x" * 65, "x"], "1 to 64 bytes"),
                (["FG.UVADD", "k", "x"], "is needed but not declared")):
            with pytest.raises(Exception) as script:
                c.evalsha(h, 1, argv[1], argv[0], *argv[2:])
            assert words in str(script.value), argv
        assert c.dbsize() == 0  # nothing written
    finally:
        c.close()
    c = stock.client()
    try:
        c.set("str", "v")
        lib = DistinctClient(stock.url)
        try:
            assert lib("add str -1 a").startswith("err wrongtype WRONGTYPE Operation against")
            assert lib("count str last 1 hours").startswith("err wrongtype WRONGTYPE")
            assert lib("create str") == "err invalid ERR key exists"
            assert lib("add ok -1 a") == "ok 1"
            assert lib("create ok") == "err invalid ERR key exists"
            assert lib("create fresh") == "ok"  # writes nothing: a counter is its buckets
        finally:
            lib.close()
        assert sorted(k.decode() for k in c.scan_iter() if "{ok}" not in k.decode()) == ["str"]
    finally:
        c.close()


def test_grid_and_retention_refusals(r, stock):
    now = int(time.time())
    lib = DistinctClient(stock.url)
    try:
        r.execute_command("FG.UVADD", "g", "a")
        assert lib("add g -1 a") == "ok 1"
        h = (now // 3600 - 3) * 3600
        # off the grid: an edge within an hour, or a minute 3 hours back
        for start, end in ((h + 10, h + 3600), (h, h + 1800), (h + 60, now + 3600)):
            line = lib("count g between %d %d" % (start * US, end * US))
            assert line.startswith("err invalid ERR BETWEEN edge %d is not on the grid of 'g' ("
                                   % ((start if start % 3600 else end) * US)), line
            assert line.endswith("(%s)" % GRID), line
        assert "older than what 'g' keeps" in lib("count g between 0 %d" % (h * US))
        assert lib("count g last 8 days") == \
            "err invalid ERR LAST window of 691200 seconds is longer than the SPAN of 'g' " \
            "(604800 seconds)"
        assert lib("count missing last 8 days") == "ok 0"  # no buckets: no window to check
    finally:
        lib.close()


def test_slots(stock):
    """Every bucket in its counter's slot: the name's hash tag kept, or the
    name wrapped in one."""
    lib = DistinctClient(stock.url)
    names = ["plain", "{tag}:page", "a{b", "}{x}", "{user1}"]
    try:
        for n in names:
            assert lib("add %s -1 i1 i2" % n) == "ok 1", n
            assert lib("count %s last 1 hours" % n) == "ok 2", n
            assert len(lib.export("%s last 1 days" % n)) == HLL_BYTES, n
        for n in ("x{}y", "x{}y{z}", "a}b"):  # no hash tag ("{}" is none), and a '}'
            assert lib("add %s -1 a" % n).startswith("err invalid ERR counter '%s' keeps no slot" % n)
    finally:
        lib.close()
    c = stock.client()
    try:
        for n in names:
            keys = stock_keys(c, n)
            assert len(keys) == 3, (n, keys)
            if stock.is_cluster:
                node = stock.nodes[0].client()
                slots = {node.execute_command("CLUSTER", "KEYSLOT", k) for k in keys + [n]}
                node.close()
                assert len(slots) == 1, n
    finally:
        c.close()
