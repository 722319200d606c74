"""The Bloom filters' script (src/scripts/bloom.lua) on a stock server and a
stock cluster against the module (docs/scripts.md, "Bloom filters").

Where the answer is determined, it must be the module's, exactly: every
refusal (and nothing written: DUMP before and after), the first add to an
empty filter, an add or lookup of an item already added, INFO's fields
other than Size, and the levels a filter grows to for a count of adds
away from a level's end. Where it is probabilistic, bounds: no false
negative ever, false positives at capacity within the configured rate
(at most the count that a Binomial(queries, rate) exceeds with
probability 1e-6), hidden adds and CARD within such bounds too. The
walk is seeded, the hashes are fixed: every run is the same run.

The script is called raw (EVALSHA, backends.script_client), and through
the library on the cluster (tests/client/bloom_client.c).
"""

import math
import random

import pytest
import redis

import backends
from test_bloom import expected_chain
from test_client_bloom import BloomClient

FULL = "non scaling filter is full"  # as redis-py gives it, "ERR " taken off
TAIL = 1e-6  # the chance a bound may be passed by a correct filter


@pytest.fixture(params=backends.STOCK)
def stock(request):
    return backends.target(request.param)


@pytest.fixture
def sc():
    """bloom.lua on the shared stock server."""
    c = backends.script_client(backends.target("stock").server)
    yield c
    c.close()


def both(r, sc, *args):
    """The module's and the script's reply to one command, errors as text."""
    out = []
    for c in (r, sc):
        try:
            reply = c.execute_command(*args)
        except redis.ResponseError as e:
            reply = "error: " + str(e)
        if isinstance(reply, list):
            reply = [("error: " + str(x)) if isinstance(x, Exception) else x for x in reply]
        out.append(reply)
    return out


def binomial_bound(n, p, tail=TAIL):
    """The smallest c with P(Binomial(n, p) > c) <= tail, summed exactly in
    log space."""
    log_pmf = lambda k: (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)  # noqa: E731
                         + k * math.log(p) + (n - k) * math.log1p(-p))
    c, above = n, 0.0
    while c > 0:
        above += math.exp(log_pmf(c))
        if above > tail:
            return c
        c -= 1
    return 0


def hidden_bound(adds):
    """Adds out of `adds` that false positives may have hidden, for the
    walk's filters (rates up to 0.1)."""
    return binomial_bound(adds, 0.1) if adds else 0


def info(c, key):
    flat = c.execute_command("BF.INFO", key)
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


# --------------------------------------------------------------- refusals

BAD = [
    ("BF.RESERVE", "b"), ("BF.RESERVE", "b", "0.01"),
    ("BF.RESERVE", "b", "0.01", "10", "EXPANSION", "2", "NONSCALING", "x"),
    ("BF.RESERVE", "b", "x", "10"), ("BF.RESERVE", "b", "nan", "10"),
    ("BF.RESERVE", "b", " 0.1", "10"), ("BF.RESERVE", "b", "0.1 ", "10"),
    ("BF.RESERVE", "b", "1e999", "10"), ("BF.RESERVE", "b", "1e-400", "10"),
    ("BF.RESERVE", "b", "0", "10"), ("BF.RESERVE", "b", "1", "10"),
    ("BF.RESERVE", "b", "inf", "10"), ("BF.RESERVE", "b", "-0.5", "10"),
    ("BF.RESERVE", "b", "1e-10", "10"),
    ("BF.RESERVE", "b", "0.01", "1.5"), ("BF.RESERVE", "b", "0.01", "+5"),
    ("BF.RESERVE", "b", "0.01", "05"), ("BF.RESERVE", "b", "0.01", "0"),
    ("BF.RESERVE", "b", "0.01", "-3"), ("BF.RESERVE", "b", "0.01", "1099511627777"),
    ("BF.RESERVE", "b", "0.01", "9223372036854775808"),
    ("BF.RESERVE", "b", "0.01", "10", "EXPANSION"),
    ("BF.RESERVE", "b", "0.01", "10", "NONSCALING", "EXPANSION", "2"),
    ("BF.RESERVE", "b", "0.01", "10", "EXPANSION", "0"),
    ("BF.RESERVE", "b", "0.01", "10", "EXPANSION", "32769"),
    ("BF.RESERVE", "b", "0.01", "10", "EXPANSION", "x"),
    ("BF.RESERVE", "b", "0.01", "10", "FOO"),
    ("BF.RESERVE", "b", "0.01", "10", "expansion", "3", "bar"),
    ("BF.RESERVE", "b", "0.000001", "1099511627776"),  # bits past 1 TiB
    ("BF.RESERVE", "k", "0.01", "10"),  # exists
    ("BF.ADD", "b"), ("BF.ADD", "b", "x", "y"), ("BF.MADD", "b"),
    ("BF.EXISTS", "b"), ("BF.MEXISTS", "b"), ("BF.CARD", "b", "x"),
    ("BF.INFO", "b"), ("BF.INFO", "k", "bogus"), ("BF.INFO", "k", "a", "b"),
    ("BF.INSERT", "b", "ITEMS"), ("BF.INSERT", "b", "a"), ("BF.INSERT", "b", "CAPACITY"),
    ("BF.INSERT", "b", "NOCREATE", "ITEMS", "a"), ("BF.INSERT", "b", "CAPACITY", "x", "ITEMS", "a"),
    ("BF.INSERT", "b", "ERROR", "x", "ITEMS", "a"), ("BF.INSERT", "b", "EXPANSION", "x", "ITEMS", "a"),
    ("BF.INSERT", "b", "FOO", "ITEMS", "a"), ("BF.INSERT", "b", "ERROR", "2", "ITEMS", "a"),
    ("BF.INSERT", "b", "ERROR", "1e-10", "ITEMS", "a"), ("BF.INSERT", "b", "CAPACITY", "0", "ITEMS", "a"),
    ("BF.INSERT", "b", "EXPANSION", "0", "ITEMS", "a"),
    ("BF.INSERT", "b", "EXPANSION", "40000", "ITEMS", "a"),
    ("BF.INSERT", "b", "CAPACITY", "1099511627777", "ITEMS", "a"),
    ("BF.INSERT", "b", "ERROR", "0.000001", "CAPACITY", "1099511627776", "ITEMS", "a"),
    ("BF.INSERT", "k", "ERROR", "x", "ITEMS", "a"),
] + [(cmd, key, *rest) for key in ("str", "hash")
     for cmd, *rest in (("BF.ADD", "a"), ("BF.MADD", "a"), ("BF.EXISTS", "a"), ("BF.MEXISTS", "a"),
                        ("BF.INFO",), ("BF.CARD",), ("BF.RESERVE", "0.01", "10"),
                        ("BF.INSERT", "ITEMS", "a"))]


def test_refusals_are_the_modules_and_write_nothing(r, sc):
    for c in (r, sc):
        c.execute_command("BF.RESERVE", "k", "0.01", 10)
        c.execute_command("BF.MADD", "k", "a", "b")
        c.set("str", "v")
        c.hset("hash", "f", "v")
    before = {c: {k: c.dump(k) for k in ("k", "str", "hash")} for c in (r, sc)}
    for args in BAD:
        module, script = both(r, sc, *args)
        assert isinstance(module, str) and module.startswith("error: "), (args, module)
        assert script == module, args
    for c in (r, sc):
        assert {k: c.dump(k) for k in ("k", "str", "hash")} == before[c]
        assert c.exists("b") == 0
        assert sorted(c.keys()) == [b"hash", b"k", b"str"]


def test_a_filter_too_large_for_a_string_is_refused_as_the_modules_ceiling(sc):
    """512 MB, the module's default floodgate.max-structure-size, is a
    Redis string's bound: the whole filter is refused past it."""
    with pytest.raises(redis.ResponseError, match="^too large: the structure would take "
                       r"\d+ bytes, above floodgate.max-structure-size \(536870912\)$"):
        sc.execute_command("BF.RESERVE", "big", "0.000001", 300000000)
    assert sc.exists("big") == 0


# ------------------------------------------------------------- the walk

def test_a_seeded_walk_answers_as_the_module(r, sc):
    rng = random.Random(28)
    params = [("0.01", 50, ["EXPANSION", "2"]), ("0.001", 20, ["EXPANSION", "3"]),
              ("0.1", 30, ["NONSCALING"]), ("0.05", 10, ["EXPANSION", "1"])]
    added = {}  # key -> the items added (present on both)
    offered = {}  # key -> the items offered to it: no more can have been inserted
    fresh = iter("w%d" % i for i in range(10 ** 9))
    hidden = {"module": 0, "script": 0}
    seen = {"refused": 0, "full": 0, "created": 0}
    new_adds = 0
    keys = []
    for step in range(1500):
        op = rng.choice(["reserve", "add", "madd", "insert", "exists", "mexists", "info", "card",
                         "readd"])
        # mostly the filters made so far; a new name for a reserve, and now and then for the
        # others (an add creates it with the defaults, a lookup finds nothing)
        new = rng.random() < (0.7 if op == "reserve" else 0.03) or not added
        key = "wk%d" % (len(keys) if new else rng.randrange(len(keys)))
        if new:
            keys.append(key)
        if op == "reserve":
            error, capacity, opts = rng.choice(params)
            module, script = both(r, sc, "BF.RESERVE", key, error, capacity, *opts)
            assert script == module, (step, key)
            seen["refused" if isinstance(module, str) else "created"] += 1
            if module == b"OK":
                added[key] = []
        elif op in ("add", "madd", "insert"):
            items = [next(fresh) for _ in range(1 if op == "add" else rng.randrange(1, 40))]
            args = {"add": ["BF.ADD", key], "madd": ["BF.MADD", key],
                    "insert": ["BF.INSERT", key, "CAPACITY", "40", "ERROR", "0.01", "ITEMS"]}[op]
            empty = not added.get(key)
            offered[key] = offered.get(key, 0) + len(items)
            module, script = both(r, sc, *args, *items)
            m = module if isinstance(module, list) else [module]
            s = script if isinstance(script, list) else [script]
            full = [x for x in m + s if isinstance(x, str)]
            assert all(x == "error: " + FULL for x in full), (step, full)
            if not full:
                assert len(m) == len(s) == len(items)
                if empty:
                    assert m[0] == s[0] == 1  # no false positive in an empty filter
                added.setdefault(key, []).extend(items)
                hidden["module"] += m.count(0)
                hidden["script"] += s.count(0)
                new_adds += len(items)
            else:  # a non-scaling filter filled up: whichever items each took stay present
                seen["full"] += 1
                taken = min(len(m), len(s)) - 1
                added.setdefault(key, []).extend(items[:max(taken, 0)])
        elif op == "readd" and added.get(key):
            items = rng.sample(added[key], min(5, len(added[key])))
            module, script = both(r, sc, "BF.MADD", key, *items)
            assert module == script == [0] * len(items), step
        elif op in ("exists", "mexists") and added.get(key):
            items = rng.sample(added[key], min(20, len(added[key])))
            module, script = both(r, sc, "BF.MEXISTS", key, *items)
            assert module == script == [1] * len(items), step  # no false negative
        elif op == "info" and key in added:
            m, s = info(r, key), info(sc, key)
            assert set(m) == set(s)
            assert m["Expansion rate"] == s["Expansion rate"]
            for i in (m, s):
                assert len(added[key]) - hidden_bound(len(added[key])) <= \
                    i["Number of items inserted"] <= offered.get(key, 0)
        elif op == "card":
            module, script = both(r, sc, "BF.CARD", key)
            assert script >= 0 and (module == 0) == (script == 0), step
    assert seen["refused"] > 20 and seen["created"] > 5 and seen["full"] > 5, seen
    # hidden adds: false positives of filters below capacity, well within 10%
    bound = hidden_bound(new_adds)
    assert hidden["script"] <= bound and hidden["module"] <= bound, (hidden, new_adds)


# ------------------------------------------------ rates, scaling, fullness

@pytest.mark.parametrize("error,capacity,opts", [
    ("0.01", 20000, ["NONSCALING"]), ("0.001", 20000, ["NONSCALING"]),
    ("0.1", 5000, ["NONSCALING"]), ("0.01", 1000, ["EXPANSION", "2"]),
])
def test_false_positives_at_capacity_within_the_rate(sc, error, capacity, opts):
    """Filled to capacity (a scaling filter through three levels, 7 times
    its first capacity), then queried with items never added."""
    n = capacity * (7 if opts[0] == "EXPANSION" else 1)
    sc.execute_command("BF.RESERVE", "fp", error, capacity, *opts)
    items = ["in%d" % i for i in range(n)]
    for i in range(0, n, 1000):
        sc.execute_command("BF.MADD", "fp", *items[i:i + 1000])
    for i in range(0, n, 1000):
        assert sc.execute_command("BF.MEXISTS", "fp", *items[i:i + 1000]) == [1] * len(items[i:i + 1000])
    queries = 100000
    fp = sum(sum(sc.execute_command("BF.MEXISTS", "fp", *("out%d" % j for j in range(i, i + 1000))))
             for i in range(0, queries, 1000))
    assert fp <= binomial_bound(queries, float(error)), fp / queries
    if opts[0] == "EXPANSION":
        assert info(sc, "fp")["Number of filters"] == 3


@pytest.mark.parametrize("capacity,expansion,adds", [(100, 2, 1000), (50, 3, 1500), (50, 1, 175)])
def test_growth_through_levels_is_the_modules(r, sc, capacity, expansion, adds):
    """A count of adds away from every level's end: the module and the
    script open the same levels, whatever few adds false positives hid."""
    items = ["g%d" % i for i in range(adds)]
    for c in (r, sc):
        c.execute_command("BF.RESERVE", "g", "0.01", capacity, "EXPANSION", expansion)
        for i in range(0, adds, 500):
            c.execute_command("BF.MADD", "g", *items[i:i + 500])
    m, s = info(r, "g"), info(sc, "g")
    slack = binomial_bound(adds, 0.01)  # adds a false positive may hide
    for i in (m, s):
        assert adds - slack <= i["Number of items inserted"] <= adds
        levels, total = expected_chain(i["Number of items inserted"], capacity, expansion)
        assert expected_chain(adds - slack, capacity, expansion) == (levels, total), "near a level's end"
        assert (i["Number of filters"], i["Capacity"]) == (levels, total)
    for field in ("Capacity", "Number of filters", "Expansion rate"):
        assert m[field] == s[field], field
    assert sc.execute_command("BF.MEXISTS", "g", *items) == [1] * adds
    card = sc.execute_command("BF.CARD", "g")
    assert s["Number of items inserted"] <= card <= adds + slack


def test_sixty_four_levels_then_no_more(r, sc):
    """The module's cap on levels, with its message."""
    items = ["d%d" % i for i in range(200)]
    for c in (r, sc):
        c.execute_command("BF.RESERVE", "deep", "0.5", 1, "EXPANSION", 1)
    module, script = both(r, sc, "BF.MADD", "deep", *items)
    for reply in (module, script):
        assert reply[-1] == "error: problem inserting into filter"
    assert info(sc, "deep")["Number of filters"] == info(r, "deep")["Number of filters"] == 64
    assert info(sc, "deep")["Number of items inserted"] == 64


def test_a_full_nonscaling_filter_refuses_as_the_module(r, sc):
    items = ["n%d" % i for i in range(40)]
    for c in (r, sc):
        c.execute_command("BF.RESERVE", "ns", "0.001", 25, "NONSCALING")
    module, script = both(r, sc, "BF.MADD", "ns", *items)
    for reply in (module, script):
        assert reply[-1] == "error: " + FULL and 26 <= len(reply) <= 40
    for c in (r, sc):
        i = info(c, "ns")
        assert (i["Number of items inserted"], i["Capacity"], i["Number of filters"],
                i["Expansion rate"]) == (25, 25, 1, None)
    dump = sc.dump("ns")
    taken = len(script) - 1
    assert both(r, sc, "BF.ADD", "ns", items[0]) == [0, 0]  # present: answered, not refused
    try:
        sc.execute_command("BF.ADD", "ns", "never-added")
        refused = False
    except redis.ResponseError as e:  # unless a false positive answers 0
        assert str(e) == FULL
        refused = True
    assert refused or sc.execute_command("BF.EXISTS", "ns", "never-added") == 1
    assert sc.dump("ns") == dump
    assert sc.execute_command("BF.MEXISTS", "ns", *items[:taken]) == [1] * taken


def test_the_state_is_one_string_without_a_ttl(sc):
    sc.execute_command("BF.INSERT", "one", "CAPACITY", 10, "ITEMS", *("x%d" % i for i in range(100)))
    assert info(sc, "one")["Number of filters"] >= 3
    assert sc.keys() == [b"one"] and sc.type("one") == b"string"
    assert sc.ttl("one") == -1
    assert sc.strlen("one") <= info(sc, "one")["Size"]
    assert sc.getrange("one", 0, 4) == b"fgbf1"


def test_the_functions_answer_as_the_script(sc):
    with open(backends.SCRIPTS + "/../../floodgate-functions.lua") as f:
        sc.execute_command("FUNCTION", "LOAD", "REPLACE", f.read())
    assert sc.fcall("bf_madd", 1, "fn", "a", "b") == [1, 1]
    assert sc.execute_command("FCALL_RO", "bf_mexists", 1, "fn", "a", "b", "c") == [1, 1, 0]
    assert sc.execute_command("FCALL_RO", "bf_info", 1, "fn", "ITEMS") == [2]
    assert sc.execute_command("FCALL_RO", "bf_card", 1, "fn") == 2
    assert sc.execute_command("BF.MEXISTS", "fn", "a", "b", "c") == [1, 1, 0]  # the script's own
    with pytest.raises(redis.ResponseError, match="write flag"):
        sc.execute_command("FCALL_RO", "bf_add", 1, "fn", "z")


# ------------------------------------------------------------- clusters

def test_each_filter_is_one_key_in_its_own_slot(stock):
    """Through the library: a filter grows in place, its levels in its own
    key, so every filter is one string on its slot's node and nothing else
    is written."""
    keys = ["c%d" % i for i in range(12)] + ["{tag}a", "{tag}b"]
    c = BloomClient(stock.url)
    try:
        for k in keys:
            assert c("reserve %s 0.01 10 2" % k) == "ok"
            assert c("madd %s %s" % (k, " ".join("%s-%d" % (k, i) for i in range(60)))).startswith("ok")
            assert c("mexists %s %s" % (k, " ".join("%s-%d" % (k, i) for i in range(60)))) == \
                "ok" + " 1" * 60
    finally:
        c.close()
    total = 0
    for node in stock.nodes:
        n = node.client()
        total += n.dbsize()
        n.close()
    assert total == len(keys)
    for k in keys:
        owner = backends.script_client(stock.owner(k))
        assert owner.type(k) == b"string" and owner.ttl(k) == -1
        assert owner.execute_command("BF.INFO", k, "FILTERS")[0] >= 3
        owner.close()
    if stock.is_cluster:
        assert len({stock.owner(k).port for k in keys}) == 3


def test_raw_errors_have_no_code_as_the_modules(sc):
    """RedisBloom's bare words reach the client bare (no ERR added)."""
    with pytest.raises(redis.ResponseError) as e:
        sc.execute_command("BF.INSERT", "q", "CAPACITY", "x", "ITEMS", "a")
    assert str(e.value) == "Bad capacity"
