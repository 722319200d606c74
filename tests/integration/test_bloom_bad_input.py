"""Every BF.* command refuses bad input with an error that changes nothing
(docs/bloom.md, "Errors"): the documented message where the docs give one
(an "ERR ..." or one of RedisBloom's messages without a code), the dataset
digest and the filters' DUMP unchanged, no key created, and the server
still answering.

Each case runs against keys that hold state (a grown scaling filter, a full
non-scaling one, a string, a list, a token bucket, a lock), so that a
refusal that wrote half of its effect shows, and, when the key is not what
makes the call wrong, against a fresh key, so that a refusal that created
the key shows. Bad values follow tests/integration/test_lock_bad_input.py:
non-numbers, empty, out of range, 64-bit overflows, inf/nan, trailing
garbage.

Also here: the keys of other types both ways (BF.* on them, their commands
on a filter), BF.SCANDUMP with any iterator, BF.LOADCHUNK with chunks that
do not fit, and the valid extremes (tiny and huge error rates, capacity 1,
the largest expansion, a chain that reaches its level limit).
"""

import pytest

from harness import RawClient, digest, s
from test_bloom import (bf_info, fresh_client, items, loadchunks, madd, mexists, port_of,
                        raw, scandump)

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
RATE_RANGE = "ERR (0 < error rate range < 1) "
CAP_RANGE = "ERR (capacity should be larger than 0)"
CAP_MAX = "ERR capacity must be at most 1099511627776"

NOT_NUMBERS = ["abc", "", " 0.01", "0.01 ", "0.01x", "nan", "NaN", "-nan", "0,01", "--0.1",
               "0.0.1", "1e", "\t0.5"]
RATE_OUT = ["0", "1", "-0.01", "1.5", "100", "-0", "0.0", "1.0", "1.0000000001"]
RATE_EDGE = ["inf", "-inf", "1e400", "-1e400", "1e-400"]  # not numbers, or out of range
NOT_INTEGERS = ["abc", "", "1.5", "1e3", " 1", "1 ", "\t1", "0x10", "inf", "nan", "1,5", "--1",
                "+-1", "9223372036854775808", "18446744073709551616", "-9223372036854775809",
                "99999999999999999999999"]
NON_POSITIVE = ["0", "-1", "-9223372036854775808"]
CAP_TOO_BIG = [str((1 << 40) + 1), str(1 << 62), str((1 << 63) - 1)]
EXP_BAD = NOT_INTEGERS + ["-1", "32769", str((1 << 63) - 1), "-9223372036854775808",
                          str(1 << 32), str((1 << 32) + 2)]
# BF.INSERT: RedisBloom 2.4.23 answers "Bad argument received" to values out
# of range; the docs name the per-option messages
INSERT_RANGE = {"CAPACITY": {"Bad capacity", "Bad argument received", CAP_RANGE, CAP_MAX},
                "ERROR": {"Bad error rate", "Bad argument received", RATE_RANGE},
                "EXPANSION": {"Bad expansion", "Bad argument received", "ERR bad expansion"}}

# -- the state every case starts from ------------------------------------------


@pytest.fixture
def r(server):
    yield from fresh_client(server)


GROWN, FULL = "grown", "full"
OTHERS = {"str": "a string", "list": "a list", "tok": "a token bucket", "lk": "a lock"}


def populate(c):
    assert c.execute_command("BF.RESERVE", GROWN, "0.01", 50, "EXPANSION", 2) in (b"OK", "OK")
    madd(c, GROWN, items("g", 200))
    assert bf_info(c, GROWN)["Number of filters"] >= 2
    assert c.execute_command("BF.INSERT", FULL, "CAPACITY", 3, "NONSCALING", "ITEMS",
                             "a", "b", "c") == [1, 1, 1]
    c.set("str", "hello")
    c.rpush("list", "a", "b")
    c.execute_command("FG.TOKEN", "tok", 5, "0.01")
    assert int(c.execute_command("FG.LOCK", "lk", "alice", 3_600_000)[0]) == 1


def snapshot(c):
    return (digest(c), c.dbsize(), c.dump(GROWN), c.dump(FULL),
            s(c.execute_command("DEBUG", "DIGEST-VALUE", "tok", "lk", "str", "list")))


# -- the cases -----------------------------------------------------------------------

CASES = []  # (argv with "{k}" for the key, expected messages, keys to try)


def add(case_id, argv, expected, keys=(GROWN, "new")):
    expected = {expected} if isinstance(expected, str) else set(expected)
    for key in keys:
        CASES.append(pytest.param(argv, expected, key, id="%s-%s" % (case_id, key)))


def printable(v):
    return repr(v)[1:-1][:24] if v else "EMPTY"


RESERVE = ["BF.RESERVE", "{k}", "0.01", "100"]
for v in NOT_NUMBERS:
    add("RESERVE-rate=" + printable(v), ["BF.RESERVE", "{k}", v, "100"], "ERR bad error rate")
for v in RATE_OUT:
    add("RESERVE-rate=" + printable(v), ["BF.RESERVE", "{k}", v, "100"], RATE_RANGE)
for v in RATE_EDGE:
    add("RESERVE-rate=" + printable(v), ["BF.RESERVE", "{k}", v, "100"],
        {"ERR bad error rate", RATE_RANGE})
for v in NOT_INTEGERS:
    add("RESERVE-capacity=" + printable(v), ["BF.RESERVE", "{k}", "0.01", v], "ERR bad capacity")
for v in NON_POSITIVE:
    add("RESERVE-capacity=" + printable(v), ["BF.RESERVE", "{k}", "0.01", v], CAP_RANGE)
for v in CAP_TOO_BIG:
    add("RESERVE-capacity=" + printable(v), ["BF.RESERVE", "{k}", "0.01", v], CAP_MAX)
for v in EXP_BAD:
    add("RESERVE-expansion=" + printable(v), RESERVE + ["EXPANSION", v], "ERR bad expansion")
for opts in (["EXPANSION"], ["NONSCALING", "EXPANSION"]):
    add("RESERVE-" + "-".join(opts), RESERVE + opts, "ERR no expansion")
# RedisBloom ignores what it does not look for; floodgate refuses it (any "ERR ...")
for opts in (["FOO"], ["EXPANSION", "2", "EXPANSION"], ["NONSCALING", "NONSCALING", "x"],
             ["EXPANSION", "2", "3"], ["ITEMS"]):
    add("RESERVE-unknown-" + "-".join(opts), RESERVE + opts, [])
for opts in (["NONSCALING", "EXPANSION", "2"], ["EXPANSION", "4", "NONSCALING"],
             ["nonscaling", "expansion", "1"]):
    add("RESERVE-" + "-".join(opts), RESERVE + opts, "Nonscaling filters cannot expand")
add("RESERVE-existing-scaling", RESERVE, "ERR item exists", keys=(GROWN,))
add("RESERVE-existing-full", RESERVE + ["NONSCALING"], "ERR item exists", keys=(FULL,))

for v in NOT_INTEGERS:
    add("INSERT-CAPACITY=" + printable(v),
        ["BF.INSERT", "{k}", "CAPACITY", v, "ITEMS", "x"], "Bad capacity")
for v in NON_POSITIVE + CAP_TOO_BIG:
    add("INSERT-CAPACITY=" + printable(v), ["BF.INSERT", "{k}", "CAPACITY", v, "ITEMS", "x"],
        INSERT_RANGE["CAPACITY"], keys=("new",))
for v in NOT_NUMBERS:
    add("INSERT-ERROR=" + printable(v),
        ["BF.INSERT", "{k}", "ERROR", v, "ITEMS", "x"], "Bad error rate")
for v in RATE_OUT + RATE_EDGE:
    add("INSERT-ERROR=" + printable(v), ["BF.INSERT", "{k}", "ERROR", v, "ITEMS", "x"],
        INSERT_RANGE["ERROR"] | {"Bad error rate"}, keys=("new",))
for v in NOT_INTEGERS:
    add("INSERT-EXPANSION=" + printable(v),
        ["BF.INSERT", "{k}", "EXPANSION", v, "ITEMS", "x"], "Bad expansion")
for v in ["-1", "32769", str((1 << 63) - 1), str(1 << 32)]:
    add("INSERT-EXPANSION=" + printable(v), ["BF.INSERT", "{k}", "EXPANSION", v, "ITEMS", "x"],
        INSERT_RANGE["EXPANSION"], keys=("new",))
for opt in ("FOO", "XITEMS", "123", "-", "_"):
    add("INSERT-unknown-" + printable(opt), ["BF.INSERT", "{k}", opt, "ITEMS", "x"],
        "Unknown argument received")
add("INSERT-NOCREATE", ["BF.INSERT", "{k}", "NOCREATE", "ITEMS", "x"], "ERR not found",
    keys=("new",))
add("INSERT-NOCREATE-with-options",
    ["BF.INSERT", "{k}", "CAPACITY", "10", "NOCREATE", "NONSCALING", "ITEMS", "x"],
    "ERR not found", keys=("new",))
add("INSERT-full", ["BF.INSERT", "{k}", "ITEMS", "a", "new-item", "b"],  # [0, error]
    "ERR non scaling filter is full", keys=(FULL,))
add("MADD-full", ["BF.MADD", "{k}", "new-item", "a"], "ERR non scaling filter is full",
    keys=(FULL,))

add("ADD-full", ["BF.ADD", "{k}", "new-item"], "ERR non scaling filter is full", keys=(FULL,))
for bad in ("", "CAP", "capacityx", "ITEM", "FILTER", "EXPANSIONS", "size\x00"):
    add("INFO-field=" + printable(bad), ["BF.INFO", "{k}", bad], "Invalid information value",
        keys=(GROWN, FULL))
add("INFO-missing", ["BF.INFO", "{k}"], "ERR not found", keys=("new",))
for v in NOT_INTEGERS[:14]:
    add("SCANDUMP-iterator=" + printable(v), ["BF.SCANDUMP", "{k}", v],
        "Second argument must be numeric", keys=(GROWN,))
    add("LOADCHUNK-iterator=" + printable(v), ["BF.LOADCHUNK", "{k}", v, "data"],
        "ERR Second argument must be numeric")
add("SCANDUMP-missing", ["BF.SCANDUMP", "{k}", "0"], "ERR not found", keys=("new",))
for it in ("0", "2", "-1", "9223372036854775807", "-9223372036854775808"):
    add("LOADCHUNK-missing-iterator=" + it, ["BF.LOADCHUNK", "{k}", it, "data"],
        "ERR not found", keys=("new",))
for data in (b"", b"x", b"\x00" * 64, b"\xff" * 300, b"garbage" * 1000):
    add("LOADCHUNK-header=%d-bytes" % len(data), ["BF.LOADCHUNK", "{k}", "1", data],
        "ERR received bad data", keys=("new",))

# arity: every prefix of a valid call, and one argument too many
VALID = {
    "bf.reserve": ["bf.reserve", "{k}", "0.01", "100", "EXPANSION", "2"],
    "bf.add": ["bf.add", "{k}", "x"],
    "bf.madd": ["bf.madd", "{k}", "x"],
    "bf.insert": ["bf.insert", "{k}", "ITEMS", "x"],
    "bf.exists": ["bf.exists", "{k}", "x"],
    "bf.mexists": ["bf.mexists", "{k}", "x"],
    "bf.info": ["bf.info", "{k}", "CAPACITY"],
    "bf.card": ["bf.card", "{k}"],
    "bf.scandump": ["bf.scandump", "{k}", "0"],
    "bf.loadchunk": ["bf.loadchunk", "{k}", "1", "data"],
}
MIN_ARGS = {"bf.reserve": 4, "bf.add": 3, "bf.madd": 3, "bf.insert": 4, "bf.exists": 3,
            "bf.mexists": 3, "bf.info": 2, "bf.card": 2, "bf.scandump": 3, "bf.loadchunk": 4}
TOO_MANY = {"bf.reserve": ["NONSCALING", "x"], "bf.add": ["y"], "bf.exists": ["y"],
            "bf.info": ["SIZE"], "bf.card": ["x"], "bf.scandump": ["0"], "bf.loadchunk": ["x"]}
for name, argv in VALID.items():
    arity = "ERR wrong number of arguments for '%s' command" % name
    for n in range(1, MIN_ARGS[name]):
        add("%s-arity-%d" % (name, n), argv[:n], arity)
    if name in TOO_MANY:
        add("%s-extra-argument" % name, argv + TOO_MANY[name], arity)

# other types under a BF.* command
WRONG_KEY_CALLS = {
    "RESERVE": ["BF.RESERVE", "{k}", "0.01", "100"],
    "ADD": ["BF.ADD", "{k}", "x"],
    "MADD": ["BF.MADD", "{k}", "x", "y"],
    "INSERT": ["BF.INSERT", "{k}", "ITEMS", "x"],
    "INSERT/NOCREATE": ["BF.INSERT", "{k}", "NOCREATE", "ITEMS", "x"],
    "INSERT/options": ["BF.INSERT", "{k}", "CAPACITY", "5", "NONSCALING", "ITEMS", "x"],
    "EXISTS": ["BF.EXISTS", "{k}", "x"],
    "MEXISTS": ["BF.MEXISTS", "{k}", "x", "y"],
    "INFO": ["BF.INFO", "{k}"],
    "INFO/field": ["BF.INFO", "{k}", "CAPACITY"],
    "CARD": ["BF.CARD", "{k}"],
    "SCANDUMP": ["BF.SCANDUMP", "{k}", "0"],
    "SCANDUMP/1": ["BF.SCANDUMP", "{k}", "1"],
    "LOADCHUNK/header": ["BF.LOADCHUNK", "{k}", "1", "{header}"],
    "LOADCHUNK/2": ["BF.LOADCHUNK", "{k}", "2", "data"],
}
for name, argv in WRONG_KEY_CALLS.items():
    add("%s-wrongtype" % name, argv, WRONGTYPE, keys=tuple(OTHERS))


def substitute(argv, key, header):
    return [key if a == "{k}" else header if a == "{header}" else a for a in argv]


_header = {}


def a_header(c):
    """A valid BF.LOADCHUNK header (from a filter made and dropped here)."""
    if "h" not in _header:
        c.execute_command("BF.RESERVE", "tmp:hdr", "0.01", 100)
        _header["h"] = scandump(c, "tmp:hdr")[0][1]
        c.delete("tmp:hdr")
    return _header["h"]


def check_refused(c, argv, expected):
    """argv answers an error in `expected` (any "ERR ..." when empty) and
    changes nothing. Returns the message."""
    before = snapshot(c)
    rep = raw(c, *argv)
    if isinstance(rep, list) and argv[0].upper() in ("BF.MADD", "BF.INSERT"):
        # a full filter: the items before the first new one, then the error
        assert rep and isinstance(rep[-1], Exception), rep
        assert all(x == 0 for x in rep[:-1]), rep
        msg = str(rep[-1])
    else:
        assert isinstance(rep, Exception), "expected an error from %r, got %r" % (argv, rep)
        msg = str(rep)
    assert "unknown command" not in msg, msg  # a renamed command would pass every case
    if expected:
        assert msg in expected, "%r answered %r, expected one of %r" % (argv, msg, expected)
    else:
        assert msg.startswith("ERR "), msg
    assert snapshot(c) == before, "%r (%s) changed the dataset" % (argv, msg)
    assert c.ping()
    return msg


@pytest.mark.parametrize("argv,expected,key", CASES)
def test_refused(r, argv, expected, key):
    populate(r)
    check_refused(r, substitute(argv, key, a_header(r)), expected)
    assert r.exists("new") == 0


# -- the other way round, and the neighbours of the refused values ------------------


@pytest.mark.parametrize("argv", [
    ["GET", "{k}"], ["LPUSH", "{k}", "x"], ["INCR", "{k}"], ["SADD", "{k}", "x"],
    ["FG.TOKEN", "{k}", 5, "0.01"], ["FG.FIXED", "{k}", 5, 1000],
    ["FG.PEEK", "TOKEN", "{k}", 5, "0.01"],
    ["FG.LOCK", "{k}", "bob", 1000], ["FG.UNLOCK", "{k}", "bob"], ["FG.LOCKINFO", "{k}"],
    ["FG.FSET", "{k}", 5, "v"], ["FG.ACQUIRE", "{k}", 3, "bob", 1, 1000],
], ids=lambda a: a[0] + ("-" + a[1] if a[1] != "{k}" else ""))
def test_other_commands_refuse_a_filter(r, argv):
    populate(r)
    msg = check_refused(r, substitute(argv, GROWN, None), {WRONGTYPE, "ERR " + WRONGTYPE})
    assert msg == WRONGTYPE, msg


def test_accepted_neighbours_of_the_refused_values(r):
    """The edges of each range are valid (so the cases above fail for the
    reason they name)."""
    for n, argv in enumerate([
            ["BF.RESERVE", "{k}", "0.0000001", "1"],
            ["BF.RESERVE", "{k}", "0.99999", "1"],
            ["BF.RESERVE", "{k}", "0.5", str(1 << 20), "NONSCALING"],
            ["BF.RESERVE", "{k}", "0.01", "1", "EXPANSION", "1"],
            ["BF.RESERVE", "{k}", "0.01", "1", "EXPANSION", "32768"],
            ["BF.RESERVE", "{k}", "1e-3", "10", "expansion", "3"],
            ["BF.RESERVE", "{k}", ".5", "10"],
            ["BF.RESERVE", "{k}", "5e-1", "10"],
            ["BF.INSERT", "{k}", "CAPACITY", "1", "ERROR", "0.99", "ITEMS", "x"],
            ["BF.INSERT", "{k}", "EXPANSION", "32768", "ITEMS", "x"],
            ["BF.INSERT", "{k}", "EXPANSION", "1", "CAPACITY", "1", "ITEMS", "x", "y"],
    ]):
        key = "edge:%d" % n
        rep = r.execute_command(*[key if a == "{k}" else a for a in argv])
        assert rep in (b"OK", "OK") or isinstance(rep, list), (argv, rep)
        assert r.execute_command("BF.ADD", key, "z") in (0, 1)
        assert r.execute_command("BF.EXISTS", key, "z") == 1


def test_expansion_zero(r):
    """EXPANSION 0: RedisBloom 2.4 stores a growth of 0; the docs do not say.
    Whatever the answer, it is consistent: refused with ERR, or a filter
    that never grows beyond what it can serve."""
    rep = raw(r, "BF.RESERVE", "z", "0.01", 2, "EXPANSION", 0)
    if isinstance(rep, Exception):
        assert str(rep).startswith("ERR ") and r.exists("z") == 0, rep
        return
    assert rep == b"OK"
    answers = [raw(r, "BF.ADD", "z", "i%d" % i) for i in range(10)]
    assert all(a in (0, 1) or str(a).startswith("ERR ") for a in answers), answers
    info = bf_info(r, "z")
    assert info["Number of items inserted"] == answers.count(1), (answers, info)


def test_level_limit(r):
    """A chain of capacity 1 and expansion 1 gets one level per item: at its
    limit of levels it refuses new items with an error, and keeps every item
    it took."""
    assert r.execute_command("BF.RESERVE", "chain", "0.01", 1, "EXPANSION", 1) in (b"OK", "OK")
    taken, refusals = [], set()
    for i in range(120):
        rep = raw(r, "BF.ADD", "chain", "c%d" % i)
        if rep == 1:
            taken.append("c%d" % i)
        elif isinstance(rep, Exception):
            refusals.add(str(rep))
        else:
            assert rep == 0, rep
    info = bf_info(r, "chain")
    assert info["Number of items inserted"] == len(taken)
    assert info["Number of filters"] <= 64 and info["Capacity"] == info["Number of filters"], info
    assert all(m.startswith("ERR ") for m in refusals), refusals
    if refusals:
        assert info["Number of filters"] >= 32, info
    assert mexists(r, "chain", taken) == [1] * len(taken)
    before = r.dump("chain")
    assert r.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
    assert r.dump("chain") == before


def test_scandump_with_any_iterator(r):
    """RedisBloom's test_scandump_scan_small: any iterator answers, never
    crashes; what is not a position gives [0, ""] or an error."""
    populate(r)
    before = snapshot(r)
    size = bf_info(r, GROWN)["Size"]
    its = list(range(-3, size + 300)) + [1 << 31, 1 << 32, (1 << 62), (1 << 63) - 1, -(1 << 63)]
    with RawClient(port_of(r), timeout=30) as rc:
        for it in its:
            rc.sock.sendall(rc.encode(["BF.SCANDUMP", GROWN, it]))
            rep = rc.read_reply()
            if isinstance(rep, Exception):
                assert str(rep).startswith("ERR "), (it, rep)
            else:
                assert isinstance(rep, list) and len(rep) == 2 and isinstance(rep[0], int), rep
                assert isinstance(rep[1], bytes) and len(rep[1]) <= 16 << 20, it
    assert snapshot(r) == before
    assert r.ping()


def test_loadchunk_that_does_not_fit(r):
    """Chunks that do not fit: on a complete filter any chunk (RedisBloom's
    test_scandump_invalid), on a filter being loaded one that is not the
    next, longer than what is left of its level, or whose bits are not the
    ones the header counted. Each answers "ERR received bad data" and
    changes nothing; the right chunks then complete the filter."""
    populate(r)
    chunks = scandump(r, GROWN)
    assert len(chunks) >= 4, [len(d) for _, d in chunks]
    size = bf_info(r, GROWN)["Size"]
    last_it, last = chunks[-1]
    bad = "ERR received bad data"
    for it, data in [("-9223372036854775808", "1"), ("922337203685477588", "1"), ("0", "x"),
                     ("-1", "x"), (str(size * 8 + 1), "x"), (str(1 << 40), "x" * 100),
                     (str(chunks[1][0]), chunks[1][1]), (str(last_it), last),
                     (str(last_it + len(last)), b"\x00"), ("1", chunks[0][1])]:
        check_refused(r, ["BF.LOADCHUNK", GROWN, it, data], {bad})
    # a filter being loaded: the header and the first chunk arrived
    for it, data in chunks[:2]:
        assert r.execute_command("BF.LOADCHUNK", "half", it, data) in (b"OK", "OK")
    (it2, d2), (it3, d3) = chunks[2], chunks[3]
    flipped = bytes([d2[0] ^ 1]) + d2[1:]
    for it, data in [(it3, d3), chunks[1], chunks[0], (it2, d2 + b"\x00"), (it2 + 1, d2 + b"\x00"),
                     (it2, b""), (it2 - 1, d2[:-1] + b"\xff"), (it2, flipped),
                     (it2 + len(d3), d2 + d3), (it2, b"\xff" * len(d2))]:
        check_refused(r, ["BF.LOADCHUNK", "half", it, data], {bad})
    loadchunks(r, "half", chunks[2:])
    assert r.dump("half") == r.dump(GROWN)
    assert mexists(r, "half", items("g", 200)) == [1] * 200
