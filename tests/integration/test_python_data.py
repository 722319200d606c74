"""The Python binding's Bloom filters (Client.bf_*, floodgate.Filter), unique
counting (Client.distinct_*) and policies (Client.policy_*) on mem: and on a
server, held to what test_client_bloom.py, test_client_distinct.py and
test_client_policies.py hold the C library to, and to redis-py's view.

No wall-clock minute matters: unique counts are added at explicit times 2-3
hours back, policy checks run on an injected clock (sent as AT), and only
policy_acquire waits on the real clock, bounded below from the rates.

The policies run on a stock server and a stock 3-master cluster too
(backends.py), where the library keeps them in keys through its server
scripts: there the counters (allowed, denied, banned, shadow_denied,
waited) read 0, lists are exact only and a wait has no FIFO order
(docs/scripts.md), so those stay with mem: and the module."""

import sys
import threading
import time

import pytest

import floodgate as fg
from backends import STOCK, target
from harness import wait_for

US = 1000000
T0 = 1900000000000000  # a whole second, far from the wall clock

# FG.UVADDAT and AT come from the clients here (floodgate.explicit-time).
pytestmark = pytest.mark.usefixtures("explicit_time")


class Clock:
    """unix µs from T0 that move only when told (advance)."""
    us = T0

    def __call__(self):
        return self.us

    def advance(self, ms):
        self.us += ms * 1000


@pytest.fixture(params=["mem", "server"])
def url(request, server, r):
    """Each test once in process and once on the (flushed) session server;
    the policies' tests (ALL_URLS) on the stock servers too."""
    if request.param in STOCK:
        return target(request.param).url
    return "mem:" if request.param == "mem" else "redis://127.0.0.1:%d" % server.port


# mem:, the module, a stock server, a stock cluster
ALL_URLS = ["mem", "server"] + list(STOCK)
ON_ALL = pytest.mark.parametrize("url", ALL_URLS, indirect=True, scope="function")


@pytest.fixture
def counting(request):
    """The backend counts a policy's decisions (not a stock server's scripts)."""
    return request.node.callspec.params["url"] not in STOCK


@pytest.fixture
def client(url):
    with fg.Client(url) as c:
        yield c


@pytest.fixture
def clocked(url):
    """A client on a Clock at T0; its checks carry the time to a server."""
    clock = Clock()
    with fg.Client(url, clock=clock, send_clock=True) as c:
        yield c, clock


@pytest.fixture(autouse=True)
def forget_policies(r):
    """Policies outlive FLUSHALL: the ones named here go after each test."""
    yield
    for name in r.execute_command("FG.POLICY", "LIST"):
        if name.startswith(b"py."):
            r.execute_command("FG.POLICY", "DEL", name)


def hour_start(hours_ago):
    """The unix second where the hour `hours_ago` hours back began."""
    return (int(time.time()) // 3600 - hours_ago) * 3600


def words(prefix, n):
    return ["%s%d" % (prefix, i) for i in range(n)]


# ------------------------------------------------------------ Bloom filters

def test_bf_reserve_add_exists(client):
    client.bf_reserve("bf", 0.01, 100, 2)
    with pytest.raises(fg.InvalidError) as e:
        client.bf_reserve("bf", 0.5, 1, 0)
    assert e.value.message == "ERR item exists"
    # a str is its UTF-8 bytes; bytes may hold NULs
    assert [client.bf_add("bf", x) for x in ("a", "a", b"a", b"\x00\xff", "")] == \
        [True, False, False, True, True]
    assert [client.bf_exists("bf", x) for x in (b"\x00\xff", "a", b"")] == [True] * 3
    assert [client.bf_exists("bf", x) for x in (b"\x00", b"\x00\xff\x00", "b")] == [False] * 3
    assert client.bf_madd("bf", ["x", b"y\x00z", "a"]) == [True, True, False]
    assert client.bf_mexists("bf", ["x", b"y\x00z", b"y", "nope"]) == [True, True, False, False]
    assert client.bf_card("bf") == 5
    # a missing key: nothing there, and created with the defaults by an add
    assert (client.bf_exists("none", "a"), client.bf_mexists("none", ["a", "b"]),
            client.bf_card("none")) == (False, [False, False], 0)
    assert client.bf_madd("auto", ["p", "q"]) == [True, True]
    with pytest.raises(fg.InvalidError, match="^ERR item exists$"):
        client.bf_reserve("auto", 0.01, 100, 2)


def test_bf_non_scaling_filter_fills(client):
    """BF.MADD stops at the first item that does not fit, those before it added."""
    items = words("s", 20)
    client.bf_reserve("full", 0.001, 12, 0)
    with pytest.raises(fg.InvalidError, match="^ERR non scaling filter is full$") as refused:
        client.bf_madd("full", items)
    assert refused.value.added[:12] == [True] * 12  # which items made it in
    assert client.bf_card("full") == 12
    assert client.bf_mexists("full", items[:12]) == [True] * 12
    assert client.bf_add("full", items[0]) is False  # there already: not refused
    with pytest.raises(fg.InvalidError, match="^ERR non scaling filter is full$"):
        client.bf_add("full", "zz")


def test_bf_server_filter_is_what_redis_py_reads(r, server):
    with fg.Client("redis://127.0.0.1:%d" % server.port) as c:
        c.bf_reserve("shared", 0.01, 50, 2)
        added = c.bf_madd("shared", words("m", 200) + [b"\x00", b"\x00\xff\x00"])
        probes = words("m", 200) + words("p", 300) + [b"\x00", b"\x00\xff", b""]
        assert c.bf_mexists("shared", probes) == \
            [bool(x) for x in r.execute_command("BF.MEXISTS", "shared", *probes)]
        assert r.execute_command("BF.EXISTS", "shared", b"\x00\xff\x00") == 1
        assert c.bf_card("shared") == r.execute_command("BF.CARD", "shared") == sum(added)
        r.execute_command("BF.ADD", "shared", b"from\x00redis")
        assert c.bf_exists("shared", b"from\x00redis") is True


def test_filter_is_the_servers_filter(r):
    """floodgate.Filter answers as a server's BF.* key of the same options."""
    items = ["f%d" % (i % 700) for i in range(1000)]
    probes = words("f", 700) + words("p", 1000)
    r.execute_command("BF.RESERVE", "twin", 0.01, 100, "EXPANSION", 2)
    with fg.Filter(0.01, 100, 2) as f:
        assert [f.add(x) for x in items] == \
            [bool(x) for x in r.execute_command("BF.MADD", "twin", *items)]
        assert [x in f for x in probes] == \
            [bool(x) for x in r.execute_command("BF.MEXISTS", "twin", *probes)]
        assert len(f) == r.execute_command("BF.CARD", "twin")
        assert f.bytes() == r.execute_command("BF.INFO", "twin", "SIZE")[0]


def test_filter_items_refusals_and_closing():
    f = fg.Filter(0.01, 5, 0)
    assert [f.add(x) for x in ("a", b"a", b"\x00", b"", "e", "f")] == [1, 0, 1, 1, 1, 1]
    assert ("a" in f, b"\x00" in f, b"\x00\x00" in f, "b" in f) == (True, True, False, False)
    assert (len(f), f.cardinality(), f.add("a")) == (5, 5, False)  # full, but "a" is there
    with pytest.raises(fg.InvalidError, match="^ERR non scaling filter is full$"):
        f.add("g")
    assert f.bytes() > 0
    f.close()
    f.close()  # harmless
    with pytest.raises(fg.Error, match="closed"):
        "a" in f  # noqa: B015 - the lookup is what raises
    with fg.Filter(0.5, 1, 1) as deep:  # one item per level: stops at the last level
        with pytest.raises(fg.InvalidError, match="^ERR problem inserting into filter$"):
            for x in words("d", 300):
                deep.add(x)
        assert len(deep) == 64
    for options, message in (((0, 100, 2), "error rate"), ((1, 100, 2), "error rate"),
                             ((float("nan"), 100, 2), "error rate"), ((0.01, 0, 2), "capacity"),
                             ((0.01, 100, -1), "expansion"), ((0.01, 100, 40000), "expansion")):
        with pytest.raises(fg.InvalidError, match=message):
            fg.Filter(*options)


def test_filter_false_positive_rate():
    """A non-scaling filter filled to capacity at error 1%: the false
    positives among 10000 items never added stay within 6 standard
    deviations of the binomial(10000, 0.01) mean (100 ± 60). The hash is
    fixed, so the count is the same on every run."""
    n, error = 10000, 0.01
    with fg.Filter(error, n, 0) as f:
        assert sum(f.add("item:%d" % i) for i in range(n)) > n * (1 - error)
        assert all(("item:%d" % i) in f for i in range(n))  # never a false negative
        false = sum(("probe:%d" % i) in f for i in range(n))
    mean = n * error
    assert false <= mean + 6 * (mean * (1 - error)) ** 0.5, false


# --------------------------------------------------------- unique counting

def test_distinct_windows_at_explicit_times(client):
    """Items 2 to 3 hours back: BETWEEN on the grid counted from the newest
    item, exact when the window ends after it; LAST over hours."""
    h = hour_start(2)
    at = lambda s: (h + s) * US + 123456  # noqa: E731 - µs are truncated to seconds
    client.distinct_create("uv")
    with pytest.raises(fg.InvalidError, match="^ERR key exists$"):
        client.distinct_create("uv")
    assert client.distinct_add("uv", ["a", "b", "c"], at_us=at(10)) is True
    assert client.distinct_add("uv", "a", at_us=at(10)) is False
    assert client.distinct_add("uv", ["d", "e"], at_us=at(70)) is True
    assert client.distinct_add("uv", [b"", b"\x00", b"\x00\xff"], at_us=at(3000)) is True
    count = lambda window, keys="uv": client.distinct_count(keys, window)  # noqa: E731
    assert count(fg.between(h * US, (h + 3600) * US)) == 8
    assert count(fg.between(h * US, (h + 60) * US)) == 3
    assert count(fg.between((h + 60) * US, (h + 120) * US + 999999)) == 2
    assert count(fg.between((h + 60) * US, (h + 3001) * US)) == 5  # ends after the newest
    with pytest.raises(fg.InvalidError, match="is not on the grid of 'uv'"):
        count(fg.between((h + 10) * US, (h + 20) * US))
    assert count(fg.last(4, fg.HOURS)) == 8
    assert count(fg.last(60, fg.MINUTES)) == 0
    with pytest.raises(fg.InvalidError, match="longer than the SPAN of 'uv'"):
        count(fg.last(8, fg.DAYS))
    assert count(fg.last(4, fg.HOURS), "nokey") == 0
    assert count(fg.last(4, fg.HOURS), ["uv", "nokey"]) == 8


def test_distinct_now_and_last_minutes(client):
    """Items added now and half an hour back, in LAST windows that hold
    them with minutes to spare."""
    # (no "unchanged" asked of a second add now: a second boundary between
    # the two renews the item's time, a change; the explicit-time test asks it)
    assert client.distinct_add("live", ["x", "y"]) is True
    assert client.distinct_add("live", ["z", "x"], at_us=int(time.time() - 1800) * US) is True
    assert [client.distinct_count("live", w) for w in (
        fg.last(10, fg.MINUTES), fg.last(600, fg.SECONDS), fg.last(2, fg.HOURS),
        fg.last(1, fg.DAYS))] == [2, 2, 3, 3]


def test_distinct_union_of_tagged_keys(client, r):
    """A union over keys of one hash slot, counted as PFCOUNT counts a
    PFADD of the same items."""
    h = hour_start(2)
    home, about = words("u", 100), words("u", 150)[50:]
    assert client.distinct_add("{page}:home", home, at_us=(h + 5) * US)
    assert client.distinct_add("{page}:about", about, at_us=(h + 65) * US)
    window = fg.last(4, fg.HOURS)
    r.pfadd("pf:home", *home)
    r.pfadd("pf:union", *(home + about))
    assert client.distinct_count("{page}:home", window) == r.pfcount("pf:home")
    union = client.distinct_count(["{page}:home", "{page}:about", "{page}:none"], window)
    assert union == r.pfcount("pf:union")
    assert abs(union - 150) <= 2
    r.pfadd("pf:about", *about)  # a window ending after both newest items: exact
    assert client.distinct_count(["{page}:home", "{page}:about"],
                                 fg.between((h + 60) * US, (h + 120) * US)) == r.pfcount("pf:about")


def test_distinct_export_is_a_hyperloglog(client, r):
    """The export is a dense HLL string: PFCOUNT and PFMERGE take it."""
    h = hour_start(3)
    items = words("v", 3000) + [b"\x00", b""]
    assert client.distinct_add("exp", items, at_us=h * US + 5)
    window = fg.last(1, fg.DAYS)
    hll = client.distinct_export("exp", window)
    assert len(hll) == 12304 and hll[:5] == b"HYLL\x00"
    r.set("exported", hll)
    assert r.pfcount("exported") == client.distinct_count("exp", window)
    r.pfadd("twin", *items)
    assert r.pfcount("exported") == r.pfcount("twin")
    assert r.pfmerge("merged", "exported", "twin")
    assert r.pfcount("merged") == r.pfcount("twin")


def test_distinct_mem_and_server_agree(server):
    """The same adds at the same times: the same counts and bytes."""
    h = hour_start(2)
    adds = [((h + 60 * m + m % 7) * US, words("i%d-" % (m % 5), 40 * m + 1)) for m in range(45)]
    windows = [fg.between(h * US, (h + 600) * US), fg.between((h + 120) * US, (h + 2700) * US),
               fg.between((h + 1800) * US, (h + 3600) * US), fg.last(4, fg.HOURS)]
    answers = []
    for url in ("mem:", "redis://127.0.0.1:%d" % server.port):
        with fg.Client(url) as c:
            c.distinct_create("{d}:a", minutes=120)
            for i, (at_us, items) in enumerate(adds):
                c.distinct_add("{d}:a" if i % 3 else "{d}:b", items, at_us=at_us)
            answers.append([(c.distinct_count(["{d}:a", "{d}:b"], w),
                             c.distinct_count("{d}:a", w), c.distinct_export("{d}:b", w))
                            for w in windows])
    assert answers[0] == answers[1]
    assert answers[0][3][0] > 1000


# ---------------------------------------------------------------- policies

def result(r):
    """A PolicyResult's decision fields, the source and reset left out."""
    return (r.allowed, r.result.limit, r.result.remaining, r.result.retry_after_ms,
            r.decided_by, r.limit_index, r.shadow_denied)


@ON_ALL
def test_policy_limits_all_or_nothing(clocked, url, counting):
    c, clock = clocked
    c.policy_set("py.api", fg.PolicyDef([fg.token_bucket(10, 1), fg.fixed_window(6, 1000)]))
    first = c.policy_check("py.api", "u1", 6)
    assert result(first) == (True, 6, 0, -1, "limit", 1, False)
    assert first and first.result.source == (fg.Source.MEMORY if url == "mem:" else
                                              fg.Source.SERVER)
    # limit 2 denies 3 units that limit 1 has: limit 1 is charged nothing
    assert result(c.policy_check("py.api", "u1", 3)) == (False, 6, 0, 1000, "limit", 1, False)
    clock.advance(1000)  # a new window; the bucket has 4 + 1 (2, had the denial charged it)
    assert result(c.policy_check("py.api", "u1", 0)) == (True, 10, 5, -1, "limit", 0, False)
    assert result(c.policy_check("py.api", "u1", 5)) == (True, 10, 0, -1, "limit", 0, False)
    assert result(c.policy_check("py.api", "u1", 1)) == (False, 10, 0, 1000, "limit", 0, False)
    assert result(c.policy_check("py.api", "u1", 11))[:4] == (False, 10, 0, -1)  # never fits
    info = c.policy_get("py.api")
    assert (info.allowed, info.denied, info.banned) == ((3, 3, 0) if counting else (0, 0, 0))


@ON_ALL
def test_policy_penalty_box(clocked, counting):
    c, clock = clocked
    c.policy_set("py.pen", fg.PolicyDef([fg.fixed_window(1, 1000)], ban_ms=5000, ban_after=2,
                                        ban_within_ms=3000))
    assert result(c.policy_check("py.pen", "u2")) == (True, 1, 0, -1, "limit", 0, False)
    assert result(c.policy_check("py.pen", "u2")) == (False, 1, 0, 1000, "limit", 0, False)
    # the second denial within 3 s starts a 5 s ban
    assert result(c.policy_check("py.pen", "u2")) == (False, 1, 0, 5000, "limit", 0, False)
    clock.advance(3000)
    assert result(c.policy_check("py.pen", "u2")) == (False, 0, 0, 2000, "penalty", 0, False)
    clock.advance(2000)
    assert result(c.policy_check("py.pen", "u2")) == (True, 1, 0, -1, "limit", 0, False)
    assert c.policy_get("py.pen").banned == (1 if counting else 0)


@ON_ALL
def test_policy_shadow_mode(clocked, counting):
    c, clock = clocked
    c.policy_set("py.sh", fg.PolicyDef([fg.token_bucket(3, 1)], shadow=True))
    assert result(c.policy_check("py.sh", "u3", 2)) == (True, 3, 1, -1, "limit", 0, False)
    denied = c.policy_check("py.sh", "u3", 2)  # reported, not enforced: 1 unit still left
    assert result(denied) == (True, 3, 1, -1, "limit", 0, True) and denied
    assert c.policy_check("py.sh", "u3", 0).result.remaining == 1
    info = c.policy_get("py.sh")
    assert (info.shadow_denied, info.definition.shadow) == (1 if counting else 0, True)


@pytest.mark.parametrize("url, kind", [(u, "exact") for u in ALL_URLS] +
                         [("mem", "bloom"), ("server", "bloom")],  # the module's only
                         indirect=["url"], scope="function")
def test_policy_lists_and_identity(clocked, url, kind):
    c, _ = clocked
    spec = fg.ListSpec("bloom", 0.001, 1000) if kind == "bloom" else fg.ListSpec("exact")
    c.policy_set("py.lists", fg.PolicyDef([fg.token_bucket(1, 1)], allowlist=spec,
                                          denylist=spec))
    assert (c.policy_allow("py.lists", ["vip", "vip", "ops"]), c.policy_deny("py.lists", "bad"),
            c.policy_deny("py.lists", [b"bad", b"worse"])) == (2, 1, 1)
    listed = (True, 0, 0, -1, "allowlist", 0, False)
    assert result(c.policy_check("py.lists", "u4", identity="vip")) == listed
    # a list decided: no quota counted, so no RateLimit fields to give
    assert c.policy_check("py.lists", "u4", identity="vip").headers() == {}
    # the allowlist charged nothing: the key's unit is still there
    assert result(c.policy_check("py.lists", "u4")) == (True, 1, 0, -1, "limit", 0, False)
    assert not c.policy_check("py.lists", "u4")
    assert result(c.policy_check("py.lists", "u4", identity=b"ops")) == listed
    assert result(c.policy_check("py.lists", "u4", identity="worse")) == \
        (False, 0, 0, -1, "denylist", 0, False)
    assert result(c.policy_check("py.lists", "vip")) == listed  # the identity is the key
    assert c.policy_check("py.lists", "bad").decided_by == "denylist"
    assert c.policy_allow("py.lists", "bad") == 1
    assert c.policy_check("py.lists", "u5", identity="bad").decided_by == "denylist"
    info = c.policy_get("py.lists")
    assert (info.allow_entries, info.deny_entries) == (3, 2)
    assert (info.definition.allowlist, info.definition.denylist) == (spec, spec)


@ON_ALL
def test_policy_get_names_delete(client, counting):
    rich = fg.PolicyDef([fg.gcra(5, 5, 60000), fg.leaky_bucket(4, 2.5),
                         fg.sliding_window(100, 60000), fg.token_bucket(9, 3)],
                        ban_ms=60000, ban_after=5, ban_within_ms=10000, shadow=True)
    plain = fg.PolicyDef([fg.token_bucket(2, 0.001)], ban_ms=1500)
    client.policy_set("py.b.rich", rich)
    client.policy_set("py.a.plain", plain)
    info = client.policy_get("py.b.rich")
    assert info.definition == rich
    assert info[1:] == (0, 0, 0, 0, 0, 0, 0)
    # WITHIN defaults to ban_ms, and reads back filled in
    assert client.policy_get("py.a.plain").definition == plain._replace(ban_within_ms=1500)
    client.policy_check("py.a.plain", "k", 2)
    client.policy_check("py.a.plain", "k", 1)
    info = client.policy_get("py.a.plain")
    assert (info.allowed, info.denied, info.banned) == ((1, 1, 1) if counting else (0, 0, 0))
    names = client.policy_names()
    assert names == sorted(names)
    assert [n for n in names if n.startswith("py.")] == ["py.a.plain", "py.b.rich"]
    assert (client.policy_delete("py.b.rich"), client.policy_delete("py.b.rich")) == (True, False)
    assert "py.b.rich" not in client.policy_names()
    for call in (lambda: client.policy_get("py.b.rich"),
                 lambda: client.policy_check("py.b.rich", "k"),
                 lambda: client.policy_allow("py.b.rich", "x")):
        with pytest.raises(fg.InvalidError, match="^ERR no such policy 'py.b.rich'$"):
            call()


@ON_ALL
def test_policy_refused_definitions(client):
    bad = [fg.PolicyDef([]), fg.PolicyDef([fg.token_bucket(1, 1)] * 9),
           fg.PolicyDef([fg.sliding_log(5, 1000)]), fg.PolicyDef([fg.token_bucket(0, 1)]),
           fg.PolicyDef([fg.token_bucket(1, 1)], denylist=fg.ListSpec("fuzzy")),
           fg.PolicyDef([fg.token_bucket(1, 1)], allowlist=fg.ListSpec("bloom", 0, 10))]
    for definition in bad:
        with pytest.raises(fg.InvalidError, match="^ERR "):
            client.policy_set("py.bad", definition)
    with pytest.raises(fg.InvalidError, match="^ERR policy name must be"):
        client.policy_set("py:bad", fg.PolicyDef([fg.token_bucket(1, 1)]))
    with pytest.raises(TypeError):
        client.policy_set("py.bad", fg.PolicyDef([(1, 1)]))
    assert "py.bad" not in client.policy_names()


@ON_ALL
def test_policy_loader(url, capsys):
    """Asked once for a missing policy; None or an exception: no such
    policy. The exception goes to sys.unraisablehook, or for Python's own
    hook (it takes only the interpreter's args) is written as it writes."""
    calls, reported = [], []

    def loader(name):
        calls.append(name)
        if name == "py.broken":
            raise KeyError(name)
        return fg.PolicyDef([fg.token_bucket(5, 0.001)]) if name == "py.loaded" else None

    hook = sys.unraisablehook
    try:
        with fg.Client(url, policy_loader=loader) as c:
            assert result(c.policy_check("py.loaded", "k", 2)) == (True, 5, 3, -1, "limit", 0,
                                                                   False)
            assert c.policy_check("py.loaded", "k", 1).result.remaining == 2
            assert calls == ["py.loaded"]  # once: then the policy is there
            assert c.policy_get("py.loaded").definition.limits == [fg.token_bucket(5, 0.001)]
            sys.unraisablehook = reported.append
            for name in ("py.unknown", "py.broken"):
                with pytest.raises(fg.InvalidError, match="^ERR no such policy '%s'$" % name):
                    c.policy_check(name, "k")
            assert [(u.err_msg, type(u.exc_value)) for u in reported] == \
                [("Exception ignored in floodgate policy loader", KeyError)]
            sys.unraisablehook = sys.__unraisablehook__
            with pytest.raises(fg.InvalidError, match="^ERR no such policy 'py.broken'$"):
                c.policy_check("py.broken", "k")
            err = capsys.readouterr().err
            assert err.startswith("Exception ignored in floodgate policy loader: <function ")
            assert "KeyError: 'py.broken'" in err and "TypeError" not in err
            c.set_policy_loader(None)
            with pytest.raises(fg.InvalidError, match="no such policy"):
                c.policy_check("py.other", "k")
            assert calls == ["py.loaded", "py.unknown", "py.broken", "py.broken"]
    finally:
        sys.unraisablehook = hook


CONF = """# policies.conf
policies = (
  { name = "py.search";
    limits = ( { algorithm = "token"; capacity = 10; rate = 10.0; },
               { algorithm = "fixed"; limit = 1000; window_ms = 86400000.0; } );
    penalty = { ban_ms = 60000.0; after = 5; within_ms = 10000.0; };
    denylist = { kind = "bloom"; error = 0.001; capacity = 100000;
                 items = [ "10.0.0.66", "10.0.0.67" ]; };
    allowlist = { kind = "exact"; items = [ "monitor" ]; }; },
  { name = "py.login";
    limits = ( { algorithm = "gcra"; capacity = 5; count = 5; period_ms = 60000; } ); }
);
"""


@ON_ALL
def test_apply_policy_file(client, url, tmp_path, request):
    conf, denylist = CONF, fg.ListSpec("bloom", 0.001, 100000)
    if request.node.callspec.params["url"] in STOCK:  # exact lists only
        conf = CONF.replace('kind = "bloom"; error = 0.001; capacity = 100000;', 'kind = "exact";')
        assert conf != CONF
        denylist = fg.ListSpec("exact")
    path = tmp_path / "policies.conf"
    path.write_text(conf)
    assert client.apply_policy_file(path) == 2
    assert client.apply_policy_file(str(path)) == 2  # again: the same policies
    search = client.policy_get("py.search")
    assert search.definition == fg.PolicyDef(
        [fg.token_bucket(10, 10), fg.fixed_window(1000, 86400000)], ban_ms=60000, ban_after=5,
        ban_within_ms=10000, denylist=denylist)
    assert (search.allow_entries, search.deny_entries) == (1, 2)
    assert client.policy_get("py.login").definition.limits == [fg.gcra(5, 5, 60000)]
    assert [client.policy_check("py.search", "user:1", identity=i).decided_by
            for i in ("10.0.0.66", "monitor", "10.0.0.1")] == ["denylist", "allowlist", "limit"]
    # a mistake on line 4 stops the file before anything is sent
    bad = tmp_path / "bad.conf"
    bad.write_text(conf.replace("rate = 10.0", "rate = 0.0").replace("py.", "py.bad."))
    with pytest.raises(fg.InvalidError) as e:
        client.apply_policy_file(bad)
    assert e.value.message.startswith("%s:4: policies[0].limits[0].rate: " % bad)
    assert not [n for n in client.policy_names() if n.startswith("py.bad.")]
    with pytest.raises(fg.InvalidError, match="cannot read"):
        client.apply_policy_file(tmp_path / "missing.conf")


@ON_ALL
def test_policy_acquire_waits_for_the_refill(client, counting):
    """2 units at 4 a second: emptied, the bucket has 2 again 500 ms after
    it was emptied, which is after `start` (10% off for rounding)."""
    client.policy_set("py.acq", fg.PolicyDef([fg.token_bucket(2, 4)]))
    start = time.monotonic()
    assert client.policy_check("py.acq", "k", 2)
    got = client.policy_acquire("py.acq", "k", 20000, 2)
    waited = time.monotonic() - start
    assert result(got) == (True, 2, 0, -1, "limit", 0, False)
    assert 0.45 <= waited < 20, waited
    assert client.policy_get("py.acq").waited == (1 if counting else 0)


@pytest.mark.parametrize("url", STOCK, indirect=True, scope="function")
def test_policy_acquire_answered_at_once(client):
    """test_policy_acquire_timeouts' answers given at once, on the stock
    backends (whose waits are the library's, without a FIFO queue)."""
    client.policy_set("py.to", fg.PolicyDef([fg.token_bucket(2, 0.05)]))  # a unit in 20 s
    assert client.policy_check("py.to", "q", 1).result.remaining == 1
    late = client.policy_acquire("py.to", "q", 100, 2)
    assert not late and late.result.retry_after_ms > 100
    assert result(client.policy_acquire("py.to", "q", 100, 3))[:4] == (False, 2, 1, -1)
    assert client.policy_check("py.to", "q", 0).result.remaining == 1  # charged nothing


def test_policy_acquire_timeouts(client):
    client.policy_set("py.to", fg.PolicyDef([fg.token_bucket(2, 0.05)]))  # a unit in 20 s
    assert client.policy_check("py.to", "q", 1).result.remaining == 1
    # a wait beyond the timeout, or a cost that never fits: answered at once
    late = client.policy_acquire("py.to", "q", 100, 2)
    assert not late and late.result.retry_after_ms > 100
    assert result(client.policy_acquire("py.to", "q", 100, 3))[:4] == (False, 2, 1, -1)
    # A waits for 2 units; B's unit is there, but B queues behind A until
    # its deadline: denied with retry 0, charged nothing
    out = {}

    def wait_for_two():
        out["a"] = client.policy_acquire("py.to", "q", 60000, 2)

    a = threading.Thread(target=wait_for_two)
    a.start()
    try:
        wait_for(lambda: client.policy_get("py.to").waited >= 1, timeout=30)
        start = time.monotonic()
        b = client.policy_acquire("py.to", "q", 200, 1)
        assert time.monotonic() - start >= 0.15
        assert result(b) == (False, 2, 0, 0, "limit", 0, False)
        assert client.policy_check("py.to", "q", 0).result.remaining == 1
    finally:
        client.reset("q")  # serves A at once, on a full bucket
        a.join(30)
    assert result(out["a"]) == (True, 2, 0, -1, "limit", 0, False)
    info = client.policy_get("py.to")
    assert (info.waited, info.denied) == (2, 3)
