"""Every FG.UV* command refuses bad input with an error that changes nothing
(docs/uv.md, "Errors"): the documented message, the dataset digest, each
key's DUMP and FG.UVINFO unchanged, no key created, and the server still
answering.

Each case runs against keys that hold state (a default counter with items
over the last day, a custom one, a string, a list, FG.UVSTORE's string
destination), so that a refusal that wrote half of its effect shows, and,
where the key is not what makes the call wrong, against a missing key, so
that a refusal that created it shows. Bad values follow the other
*_bad_input.py files: non-numbers, empty, floats, inf/nan, 64-bit
overflows, out of range, trailing garbage.

FG.UVLOAD gets garbage of many kinds: random bytes, every short prefix and
some long ones of real payloads (written by an AOF rewrite, see
test_uv.aof_payloads), payloads with bytes appended, each bit flipped, and
payloads edited field by field to break each rule a counter obeys (the
format of src/core/uv.h, parsed here; the unedited parse must rebuild the
very payload, so the edits fail for the reason they name). A flipped bit
may still give a counter that could exist: then it must behave as one.
"""

import copy
import random
import re

import pytest

from harness import digest
from test_uv import (DAY, HOUR, MINUTE, SEC, between, fixed_second, off_grid, ok,
                     payloads, raw, refused_edge, server_second, too_long, uv_info)  # noqa: F401 (fixture)

# FG.UVADDAT and FG.UVLOAD are validated as a repair tool meets them.
pytestmark = pytest.mark.usefixtures("effect_commands")

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
WINDOW = "ERR window must be LAST n unit or BETWEEN start_us end_us"
UNIT = "ERR unit must be SECONDS, MINUTES, HOURS or DAYS"
BEFORE_END = "ERR BETWEEN start must be before end (in whole seconds)"
FUTURE = "ERR unix_us is more than 60 seconds in the future"
BAD_PAYLOAD = "ERR bad payload"

NOT_INTEGERS = ["abc", "", "1x", " 1", "1 ", "\t1", "inf", "-inf", "+inf", "nan", "NaN",
                "0x10", "1e3", "1.5", "1.0", "--1", "1,5", "+-1", "1e400"]
OVERFLOWS = ["9223372036854775808", "18446744073709551616", "-9223372036854775809",
             "99999999999999999999"]
OPTIONS = {"SPAN": (1, 15552000), "MINUTES": (0, 1440), "HOURS": (0, 744), "DAYS": (0, 1100),
           "TZOFFSET": (-86400, 86400)}
OUT_OF_RANGE = {
    "SPAN": ["0", "-1", "15552001", str(1 << 62), "9223372036854775807",
             "-9223372036854775808"],
    "MINUTES": ["-1", "1441", str(1 << 32), "9223372036854775807"],
    "HOURS": ["-1", "745", str(1 << 32)],
    "DAYS": ["-1", "1101", str(1 << 32)],
    "TZOFFSET": ["86460", "-86460", "172800", "8640000", "-9223372036854775800"],
}


def integer(name):
    return "ERR %s must be an integer" % name


def in_range(name, lo=r"-?\d+"):
    return re.compile(r"ERR %s must be between %s and -?\d+" % (re.escape(name), lo))


def integer_or_range(name):
    return re.compile(r"ERR %s must be (an integer|between -?\d+ and -?\d+)" % re.escape(name))


def between_msg(name, lo, hi):
    return "ERR %s must be between %d and %d" % (name, lo, hi)


# -- the state every case starts from ------------------------------------------

KEYS = ("uv", "uvc", "str", "list", "dst")


def populate(c):
    """The keys of KEYS, and the times the cases use: {n} the counters'
    newest second (13:17:23, so the grid around it is the same whenever the
    tests run); {past} a second before it; {future} 200 s ahead of the
    server's clock; {w1} {w2} a window that ends after {n} (exact, valid)."""
    n = fixed_second(c)
    p = c.pipeline(transaction=False)
    p.execute_command("FG.UVADDAT", "uv", (n - 30 * HOUR) * SEC, "a", "b", "c")
    p.execute_command("FG.UVADDAT", "uv", (n - 600) * SEC, "d", "e")
    p.execute_command("FG.UVADDAT", "uv", n * SEC, "f", "g", "a")
    p.execute_command("FG.UVCREATE", "uvc", "SPAN", 3600, "MINUTES", 10, "HOURS", 5, "DAYS", 3,
                      "TZOFFSET", 1800)
    p.execute_command("FG.UVADDAT", "uvc", (n - 100) * SEC, "x", "y")
    p.execute_command("FG.UVADDAT", "uvc", n * SEC, "z")
    p.set("str", "hello")
    p.rpush("list", "a", "b")
    p.set("dst", "old")
    p.execute()
    return {"n": n, "past": str((n - 10) * SEC), "future": str((server_second(c) + 200) * SEC),
            "w1": str((n - 10) * SEC), "w2": str((n + 10) * SEC)}


def snapshot(c):
    return (digest(c), c.dbsize(), [c.dump(k) for k in KEYS],
            uv_info(c, "uv"), uv_info(c, "uvc"))


def matches(msg, expected):
    if expected is None:
        return msg.startswith("ERR ")
    if isinstance(expected, str):
        return msg == expected
    if isinstance(expected, re.Pattern):
        return expected.fullmatch(msg) is not None
    return any(matches(msg, e) for e in expected)


def check_refused(c, argv, expected):
    """argv answers an error matching `expected` (any "ERR ..." when None)
    and changes nothing; returns the message."""
    before = snapshot(c)
    rep = raw(c, *argv)
    assert isinstance(rep, Exception), "expected an error from %r, got %r" % (
        [a[:40] for a in argv], rep if not isinstance(rep, bytes) else rep[:40])
    msg = str(rep)
    assert "unknown command" not in msg, msg  # a renamed command would pass every case
    assert matches(msg, expected), "%r answered %r, expected %r" % (
        [a[:40] for a in argv], msg, expected)
    assert snapshot(c) == before, "%r (%s) changed the dataset" % ([a[:40] for a in argv], msg)
    assert c.ping()
    return msg


# -- the cases -------------------------------------------------------------------

CASES = []  # (argv with {placeholders}, expected, key)


def printable(v):
    return repr(v)[1:-1][:24] if v else "EMPTY"


def add(case_id, argv, expected, keys=("uv", "new")):
    for key in keys:
        CASES.append(pytest.param(argv, expected, key, id="%s-%s" % (case_id, key)))


# arity: every prefix of a valid call, and one argument too many where the
# argument count is fixed (lower-case names: the server's message and
# RedisModule_WrongArity's then read the same)
VALID = {
    "fg.uvcreate": ["fg.uvcreate", "{k}", "SPAN", "60"],
    "fg.uvadd": ["fg.uvadd", "{k}", "x"],
    "fg.uvaddat": ["fg.uvaddat", "{k}", "{past}", "x"],
    "fg.uvcount": ["fg.uvcount", "{k}", "LAST", "1", "HOURS"],
    "fg.uvcount/between": ["fg.uvcount", "{k}", "BETWEEN", "{w1}", "{w2}"],
    "fg.uvexport": ["fg.uvexport", "{k}", "LAST", "1", "HOURS"],
    "fg.uvexport/between": ["fg.uvexport", "{k}", "BETWEEN", "{w1}", "{w2}"],
    "fg.uvstore": ["fg.uvstore", "dst", "{k}", "LAST", "1", "HOURS"],
    "fg.uvstore/between": ["fg.uvstore", "dst", "{k}", "BETWEEN", "{w1}", "{w2}"],
    "fg.uvinfo": ["fg.uvinfo", "{k}"],
    "fg.uvload": ["fg.uvload", "{k}", "{payload}"],
}
MIN_ARGS = {"fg.uvcreate": 2, "fg.uvadd": 3, "fg.uvaddat": 4, "fg.uvcount": 5, "fg.uvexport": 5,
            "fg.uvstore": 6, "fg.uvinfo": 2, "fg.uvload": 3}
for case, argv in VALID.items():
    name = argv[0]
    arity = "ERR wrong number of arguments for '%s' command" % name
    for n in range(1, MIN_ARGS[name]):
        if "/" not in case or n > 2 + (name == "fg.uvstore"):
            add("%s-arity-%d" % (case, n), argv[:n], arity)
    if name in ("fg.uvinfo", "fg.uvload"):
        add("%s-extra-argument" % case, argv + ["x"], arity)

# FG.UVCREATE
for opt, (lo, hi) in OPTIONS.items():
    for v in NOT_INTEGERS:
        add("CREATE-%s=%s" % (opt, printable(v)), ["FG.UVCREATE", "{k}", opt, v], integer(opt),
            keys=("new",))
    for v in OVERFLOWS:
        add("CREATE-%s=%s" % (opt, v), ["FG.UVCREATE", "{k}", opt, v], integer_or_range(opt),
            keys=("new",))
    for v in OUT_OF_RANGE[opt]:
        add("CREATE-%s=%s" % (opt, v), ["FG.UVCREATE", "{k}", opt, v], between_msg(opt, lo, hi),
            keys=("new",))
    other = "DAYS" if opt != "DAYS" else "HOURS"
    add("CREATE-%s-after-%s" % (opt, other),
        ["FG.UVCREATE", "{k}", other, "2", opt, OUT_OF_RANGE[opt][1]], between_msg(opt, lo, hi),
        keys=("new",))
    value = "60" if opt in ("SPAN", "TZOFFSET") else "5"
    add("CREATE-%s-twice" % opt, ["FG.UVCREATE", "{k}", opt, value, opt, value],
        "ERR %s given twice" % opt, keys=("new",))
    add("CREATE-%s-twice-apart" % opt,
        ["FG.UVCREATE", "{k}", opt, value, other, "3", opt, value],
        "ERR %s given twice" % opt, keys=("new",))
    add("CREATE-%s-without-value" % opt, ["FG.UVCREATE", "{k}", opt], None, keys=("new",))
for v in ["30", "-30", "1", "59", "61", "86399", "-86399", "3601", "-1"]:
    add("CREATE-TZOFFSET=%s" % v, ["FG.UVCREATE", "{k}", "TZOFFSET", v],
        "ERR TZOFFSET must be whole minutes", keys=("new",))
for u in ["FOO", "SPANS", "", "SPAN1", "-SPAN", "TZ", "60", "LAST", "WINDOW", "x" * 40]:
    add("CREATE-unknown-" + printable(u), ["FG.UVCREATE", "{k}", u, "1"],
        "ERR unknown option '%s'" % u, keys=("new",))
    add("CREATE-unknown-after-SPAN-" + printable(u), ["FG.UVCREATE", "{k}", "SPAN", "60", u, "1"],
        "ERR unknown option '%s'" % u, keys=("new",))
add("CREATE-option-missing-value-at-end", ["FG.UVCREATE", "{k}", "SPAN", "60", "DAYS"], None,
    keys=("new",))
for argv in (["FG.UVCREATE", "{k}"], ["FG.UVCREATE", "{k}", "SPAN", "60"]):
    add("CREATE-exists-%d" % len(argv), argv, "ERR key exists", keys=("uv", "uvc", "str", "list"))

# FG.UVADD, FG.UVADDAT
add("ADD-wrongtype", ["FG.UVADD", "{k}", "x"], WRONGTYPE, keys=("str", "list"))
add("ADD-wrongtype-many", ["FG.UVADD", "{k}", "x", "y", "z"], WRONGTYPE, keys=("str", "list"))
for v in NOT_INTEGERS:
    add("ADDAT-unix_us=" + printable(v), ["FG.UVADDAT", "{k}", v, "x"], integer("unix_us"))
for v in OVERFLOWS:
    add("ADDAT-unix_us=" + v, ["FG.UVADDAT", "{k}", v, "x"], integer_or_range("unix_us"))
for v in ["-1", "-1000000", "-9223372036854775808"]:
    add("ADDAT-unix_us=" + v, ["FG.UVADDAT", "{k}", v, "x"], in_range("unix_us", lo="0"))
add("ADDAT-future", ["FG.UVADDAT", "{k}", "{future}", "x", "y"], FUTURE)
for v in ["4000000000000000", "4294967296000000", "9223372036854775807"]:
    add("ADDAT-unix_us=" + v, ["FG.UVADDAT", "{k}", v, "x"], {FUTURE, in_range("unix_us", "0")})
add("ADDAT-wrongtype", ["FG.UVADDAT", "{k}", "{past}", "x"], WRONGTYPE, keys=("str", "list"))

# the windows of FG.UVCOUNT, FG.UVEXPORT, FG.UVSTORE
READS = {"COUNT": ["FG.UVCOUNT", "{k}"], "EXPORT": ["FG.UVEXPORT", "{k}"],
         "STORE": ["FG.UVSTORE", "dst", "{k}"]}
for cmd, head in READS.items():
    for kw in ["LASTT", "BETWEN", "", "1", "HOURS", "FIRST", "NEXT", "LAST\x00", "L"]:
        add("%s-window=%s" % (cmd, printable(kw)), head + [kw, "1", "HOURS"], WINDOW)
    for v in NOT_INTEGERS:
        add("%s-n=%s" % (cmd, printable(v)), head + ["LAST", v, "HOURS"], integer("n"))
    for v in OVERFLOWS:
        add("%s-n=%s" % (cmd, v), head + ["LAST", v, "SECONDS"], integer_or_range("n"))
    for v in ["0", "-1", "-9223372036854775808"]:
        add("%s-n=%s" % (cmd, v), head + ["LAST", v, "HOURS"], in_range("n", lo="1"))
    for unit in ["HOURSS", "H", "", "SEC", "SECS", "WEEKS", "WEEK", "MS", "MILLISECONDS", "1",
                 "HOURS\x00", "HO URS", "MONTHS", "YEARS", "MINUTESS"]:
        add("%s-unit=%s" % (cmd, printable(unit)), head + ["LAST", "1", unit], UNIT)
    for v in NOT_INTEGERS:
        add("%s-start_us=%s" % (cmd, printable(v)), head + ["BETWEEN", v, "{w2}"],
            integer("start_us"))
        add("%s-end_us=%s" % (cmd, printable(v)), head + ["BETWEEN", "{w1}", v],
            integer("end_us"))
    for v in OVERFLOWS:
        add("%s-start_us=%s" % (cmd, v), head + ["BETWEEN", v, "{w2}"],
            integer_or_range("start_us"))
        add("%s-end_us=%s" % (cmd, v), head + ["BETWEEN", "{w1}", v],
            integer_or_range("end_us"))
    for v in ["-1", "-1000000", "-9223372036854775808"]:
        add("%s-start_us=%s" % (cmd, v), head + ["BETWEEN", v, "{w2}"], in_range("start_us", "0"))
        add("%s-end_us=%s" % (cmd, v), head + ["BETWEEN", "0", v],
            {in_range("end_us", "0"), BEFORE_END})
    for t1, t2 in [("5000000", "5000000"), ("6000000", "5000000"), ("5000000", "5999999"),
                   ("5999999", "5000000"), ("{w2}", "{w1}"), ("{w1}", "{w1}")]:
        add("%s-between-%s-%s" % (cmd, t1.strip("{}"), t2.strip("{}")),
            head + ["BETWEEN", t1, t2], BEFORE_END)
    for window in (["LAST", "1", "HOURS"], ["BETWEEN", "{w1}", "{w2}"]):
        add("%s-%s-wrongtype-first" % (cmd, window[0]), head + window, WRONGTYPE,
            keys=("str", "list"))
        add("%s-%s-wrongtype-later" % (cmd, window[0]),
            head[:-1] + ["uv"] + window + ["new", "{k}", "uvc"], WRONGTYPE, keys=("str", "list"))

add("STORE-into-its-own-wrongtype-source", ["FG.UVSTORE", "{k}", "{k}", "LAST", "1", "HOURS"],
    WRONGTYPE, keys=("str", "list"))

# FG.UVINFO, FG.UVLOAD
add("INFO-missing", ["FG.UVINFO", "{k}"], "ERR no such key", keys=("new",))
add("INFO-wrongtype", ["FG.UVINFO", "{k}"], WRONGTYPE, keys=("str", "list"))
add("LOAD-exists", ["FG.UVLOAD", "{k}", "{payload}"], "ERR key exists",
    keys=("uv", "uvc", "str", "list"))
_rng = random.Random(5)
GARBAGE = [b"", b"\x00", b"\x02", b"\x01" * 30, b"\xff" * 64, b"\x02" + b"\x00" * 40,
           b"\x02" + b"\xff" * 40, b"hello", b"HYLL" + b"\x00" * 12300, b"\x00" * 100000]
GARBAGE += [bytes([3]) + bytes(_rng.randrange(256) for _ in range(n))
            for n in (1, 6, 24, 26, 31, 32, 33, 100, 1000, 5000)]
GARBAGE += [bytes(_rng.randrange(256) for _ in range(n)) for n in (7, 64, 777)]
for i, payload in enumerate(GARBAGE):
    add("LOAD-garbage-%d-%d-bytes" % (i, len(payload)), ["FG.UVLOAD", "{k}", payload],
        BAD_PAYLOAD, keys=("new",))


def substitute(argv, key, ctx):
    out = []
    for a in argv:
        if isinstance(a, str) and a.startswith("{") and a.endswith("}"):
            out.append(key if a == "{k}" else ctx[a[1:-1]])
        else:
            out.append(a)
    return out


@pytest.mark.parametrize("argv,expected,key", CASES)
def test_refused(r, payloads, argv, expected, key):  # noqa: F811
    ctx = populate(r)
    ctx["payload"] = payloads[1]["src"]
    check_refused(r, substitute(argv, key, ctx), expected)
    assert r.exists("new") == 0
    assert r.get("dst") == b"old"


# -- refusals that depend on the counters' times ----------------------------------------


def test_windows_off_the_grid_or_longer_than_the_span(r):
    ctx = populate(r)
    n = ctx["n"]
    m = n // MINUTE * MINUTE
    old_minute = m - 65 * MINUTE  # 12:12, beyond the 60 minutes kept
    early = n - 100  # 13:15:43
    small = {"minutes": 10, "hours": 5, "days": 3}  # uvc's hours begin at :30
    cases = [(["uv"], between(old_minute, old_minute + MINUTE), off_grid(old_minute * SEC, "uv")),
             (["uv"], between(early, n - 50), off_grid(early * SEC, "uv")),
             (["uv"], between(0, 1), refused_edge(0, "uv", n)),
             (["uv", "uvc"], between(m - 20 * MINUTE, m - 19 * MINUTE),  # 12:57
              off_grid((m - 20 * MINUTE) * SEC, "uvc", **small)),
             (["new", "uvc"], between(m - 30 * MINUTE, m - 29 * MINUTE),  # 12:47
              off_grid((m - 30 * MINUTE) * SEC, "uvc", **small)),
             (["uv"], ["LAST", 8, "DAYS"], too_long(8 * DAY, "uv", 604800)),
             (["uv"], ["LAST", 604801, "SECONDS"], too_long(604801, "uv", 604800)),
             (["uvc"], ["LAST", 2, "HOURS"], too_long(7200, "uvc", 3600)),
             (["new", "uv", "uvc"], ["LAST", 61, "minutes"], too_long(3660, "uvc", 3600)),
             (["uv"], ["LAST", 106751991167301, "DAYS"],  # n * 86400 > 2^63
              {in_range("n", "1"), too_long(106751991167301 * DAY, "uv", 604800)}),
             (["uv"], ["LAST", 9223372036854775807, "MINUTES"],
              {in_range("n", "1"), too_long(9223372036854775807 * MINUTE, "uv", 604800)}),
             (["uv"], ["BETWEEN", 0, 9223372036854775807], None)]
    for keys, window, expected in cases:
        tail = [str(w) for w in window] + keys[1:]
        for head in (["FG.UVCOUNT", keys[0]], ["FG.UVEXPORT", keys[0]],
                     ["FG.UVSTORE", "dst", keys[0]], ["FG.UVSTORE", "new", keys[0]]):
            check_refused(r, head + tail, expected)
    assert r.exists("new") == 0 and r.get("dst") == b"old"


# -- the other way round, and the neighbours of the refused values ------------------------


@pytest.mark.parametrize("argv", [
    ["GET", "uv"], ["LPUSH", "uv", "x"], ["INCR", "uv"], ["SADD", "uv", "x"], ["APPEND", "uv", "x"],
    ["PFADD", "uv", "x"], ["PFCOUNT", "uv"], ["PFCOUNT", "str", "uv"], ["BF.ADD", "uv", "x"],
    ["FG.TOKEN", "uv", 5, "0.01"], ["FG.LOCK", "uv", "bob", 1000]],
    ids=lambda a: "-".join(map(str, a[:2])))
def test_other_commands_refuse_a_counter(r, argv):
    populate(r)
    msg = check_refused(r, [str(a) for a in argv], re.compile("WRONGTYPE .*"))
    assert msg == WRONGTYPE or argv[0].startswith("PF"), msg


def test_accepted_neighbours_of_the_refused_values(r):
    """The ends of each range are valid, so the cases above fail for the
    reason they name."""
    n = server_second(r)
    for i, opts in enumerate([["SPAN", 1], ["SPAN", 15552000], ["MINUTES", 0], ["MINUTES", 1440],
                              ["HOURS", 0], ["HOURS", 744], ["DAYS", 0], ["DAYS", 1100],
                              ["TZOFFSET", -86400], ["TZOFFSET", 86400], ["TZOFFSET", 60],
                              ["TZOFFSET", -60], ["TZOFFSET", 0]]):
        key = "ok:%d" % i
        assert ok(r.execute_command("FG.UVCREATE", key, *opts)), opts
        # 30 s ahead: LAST 1 SECONDS holds it whenever the count runs
        assert r.execute_command("FG.UVADDAT", key, (n + 30) * SEC, "x") == 1, opts
        assert r.execute_command("FG.UVCOUNT", key, "LAST", 1, "SECONDS") == 1, opts
    assert ok(r.execute_command("FG.UVCREATE", "all", "TZOFFSET", 120, "DAYS", 1, "HOURS", 1,
                                "MINUTES", 1, "SPAN", 2))
    assert r.execute_command("FG.UVADDAT", "k", 0, "x") == 1  # the epoch: old, not bad
    assert r.execute_command("FG.UVADDAT", "k", n * SEC + 30 * SEC, "y") == 1
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 1, "SECONDS") == 1
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 604800, "SECONDS") == 1
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 7, "DAYS") == 1
    assert r.execute_command("FG.UVCOUNT", "k", "BETWEEN", (n + 30) * SEC,
                             (n + 31) * SEC) == 1
    assert r.execute_command("FG.UVCOUNT", "none", "BETWEEN", 0, SEC) == 0
    assert r.execute_command("FG.UVCOUNT", "none", "BETWEEN", 0, 1 + SEC) == 0
    for unit in ("SECONDS", "second", "Minutes", "minute", "HOURS", "hour", "days", "DAY"):
        assert r.execute_command("FG.UVCOUNT", "k", "LAST", 1, unit) == 1, unit


# -- FG.UVLOAD: payloads that are nearly right --------------------------------------------


def parse_payload(b):
    """The serialized counter of src/core/uv.h (version 2), as a dict."""
    pos = 0

    def take(n, signed=False):
        nonlocal pos
        assert pos + n <= len(b), "payload ends early at %d" % pos
        v = int.from_bytes(b[pos:pos + n], "little", signed=signed)
        pos += n
        return v

    d = {"version": take(1), "span": take(4), "newest": take(8, True), "base": take(8, True)}
    count = take(4)
    d["entries"] = [[take(2), take(4), take(1)] for _ in range(count)]
    d["counts"] = [take(2) for _ in range(3)]
    d["tz"] = take(4, True)
    d["tiers"] = []
    for _ in range(3):
        buckets = []
        for _ in range(take(2)):
            number, nonzero = take(8, True), take(2)
            buckets.append([number, [[take(2), take(1)] for _ in range(nonzero)]])
        d["tiers"].append(buckets)
    assert pos == len(b), "%d bytes after the payload" % (len(b) - pos)
    return d


def build_payload(d):
    def le(v, n, signed=False):
        return int(v).to_bytes(n, "little", signed=signed)

    out = [le(d["version"], 1), le(d["span"], 4), le(d["newest"], 8, True),
           le(d["base"], 8, True), le(d.get("count", len(d["entries"])), 4)]
    out += [le(reg, 2) + le(sec, 4) + le(rank, 1) for reg, sec, rank in d["entries"]]
    out += [le(v, 2) for v in d["counts"]] + [le(d["tz"], 4, True)]
    for buckets in d["tiers"]:
        out.append(le(len(buckets), 2))
        for number, pairs in buckets:
            out.append(le(number, 8, True) + le(len(pairs), 2))
            out += [le(reg, 2) + le(rank, 1) for reg, rank in pairs]
    return b"".join(out)


def test_payload_format_is_the_documented_one(r, payloads):  # noqa: F811
    """The parser reads the AOF's payloads whole and rebuilds them byte for
    byte, and the rebuilt ones load: the edits below break one rule each."""
    _, loads, dumps = payloads
    for key, payload in loads.items():
        d = parse_payload(payload)
        assert d["version"] == 2, d["version"]
        assert build_payload(d) == payload, key
        assert ok(r.execute_command("FG.UVLOAD", key, build_payload(d)))
        assert r.dump(key) == dumps[key], key
    big = parse_payload(loads["big"])
    assert big["entries"] and all(len(t) >= 2 for t in big["tiers"]), [len(t) for t in
                                                                       big["tiers"]]


def registers_with(d, k):
    """Indexes of the entries of the registers holding at least k entries."""
    by = {}
    for i, (reg, _, _) in enumerate(d["entries"]):
        by.setdefault(reg, []).append(i)
    return [ix for ix in by.values() if len(ix) >= k]


def bucket_of(d, tier, sec):
    width = (MINUTE, HOUR, DAY)[tier]
    offset = 0 if tier == 0 else d["tz"]
    return (sec + offset) // width


def edit(name, d):
    """Breaks one rule of a counter in d (in place), or returns raw bytes."""
    e, tiers = d["entries"], d["tiers"]
    if name.startswith("version="):
        d["version"] = int(name.split("=")[1])
    elif name.startswith("span="):
        d["span"] = int(name.split("=")[1])
    elif name == "count+1":
        d["count"] = len(e) + 1
    elif name == "count-1":
        d["count"] = len(e) - 1
    elif name.startswith("rank="):
        e[0][2] = int(name.split("=")[1])
    elif name.startswith("register="):
        e[-1][0] = int(name.split("=")[1])
    elif name == "registers-unsorted":
        e[0], e[-1] = e[-1], e[0]
    elif name == "entry-twice":
        e.insert(1, list(e[1]))
    elif name == "rank-kept-by-an-older-second":
        i = next(i for i, x in enumerate(e) if x[1] > d["base"] + 1)
        e.insert(i, [e[i][0], e[i][1] - 1, e[i][2]])
    elif name == "ranks-ascending":
        ix = registers_with(d, 2)[0]
        e[ix[0]][2], e[ix[-1]][2] = e[ix[-1]][2], e[ix[0]][2]
    elif name == "second-after-newest":
        ix = registers_with(d, 1)[0]
        e[ix[-1]][1] = d["newest"] + 1
    elif name == "second-before-base":
        ix = registers_with(d, 1)[0]
        e[ix[0]][1] = d["base"] - 1
    elif name == "newest+1":
        d["newest"] += 1
    elif name == "newest-1":
        d["newest"] -= 1
    elif name == "newest=-1":
        d["newest"] = -1
    elif name == "newest=2^32":
        d["newest"] = 1 << 32
    elif name == "base-within-the-span":
        d["base"] = d["newest"] - d["span"] + 1
    elif name == "base-beyond-the-rebase-limit":
        d["base"] = d["newest"] - (1 << 25)
    elif name == "base-after-newest":
        d["base"] = d["newest"] + 1
    elif name.startswith("minutes=") or name.startswith("hours=") or name.startswith("days="):
        tier, v = name.split("=")
        d["counts"][["minutes", "hours", "days"].index(tier)] = int(v)
    elif name.startswith("tz="):
        d["tz"] = int(name.split("=")[1])
    elif name == "more-buckets-than-kept":
        d["counts"][1] = len(tiers[1]) - 1
    elif name == "bucket-no-longer-kept":
        tiers[2][0][0] -= d["counts"][2]
    elif name == "bucket-after-newest":
        tiers[0][-1][0] = bucket_of(d, 0, d["newest"]) + 1
    elif name == "buckets-swapped":
        tiers[1][0], tiers[1][1] = tiers[1][1], tiers[1][0]
    elif name == "bucket-twice":
        tiers[1].insert(1, copy.deepcopy(tiers[1][1]))
    elif name == "bucket-empty":
        tiers[2][0][1] = []
    elif name == "pairs-unsorted":
        pairs = tiers[2][0][1]
        pairs[0], pairs[1] = pairs[1], pairs[0]
    elif name == "pair-twice":
        tiers[2][0][1].insert(1, list(tiers[2][0][1][1]))
    elif name.startswith("pair-register="):
        tiers[2][0][1][-1][0] = int(name.split("=")[1])
    elif name.startswith("pair-rank="):
        tiers[1][0][1][0][1] = int(name.split("=")[1])
    elif name == "empty-with-buckets":
        d["entries"] = []
    elif name == "byte-appended":
        return build_payload(d) + b"\x00"
    elif name == "last-byte-cut":
        return build_payload(d)[:-1]
    else:
        raise AssertionError("no edit named " + name)
    return build_payload(d)


EDITS = ["version=0", "version=1", "version=3", "version=255", "span=0", "span=15552001",
         "span=4294967295", "count+1", "count-1", "rank=0", "rank=52", "rank=63", "rank=64",
         "rank=255", "register=16384", "register=65535", "registers-unsorted", "entry-twice",
         "rank-kept-by-an-older-second", "ranks-ascending", "second-after-newest",
         "second-before-base", "newest+1", "newest-1", "newest=-1", "newest=2^32",
         "base-within-the-span", "base-beyond-the-rebase-limit", "base-after-newest",
         "minutes=1441", "hours=745", "days=1101", "minutes=0", "tz=30", "tz=86460",
         "tz=-86460", "more-buckets-than-kept", "bucket-no-longer-kept", "bucket-after-newest",
         "buckets-swapped", "bucket-twice", "bucket-empty", "pairs-unsorted", "pair-twice",
         "pair-register=16384", "pair-rank=0", "pair-rank=52", "empty-with-buckets",
         "byte-appended", "last-byte-cut"]


@pytest.mark.parametrize("name", EDITS)
def test_edited_payload_refused(r, payloads, name):  # noqa: F811
    populate(r)
    payload = edit(name, parse_payload(payloads[1]["big"]))
    check_refused(r, ["FG.UVLOAD", "new", payload], BAD_PAYLOAD)
    assert r.exists("new") == 0


def test_cut_and_extended_payloads_refused(r, payloads):  # noqa: F811
    populate(r)
    for key, payload in payloads[1].items():
        size = len(payload)
        cuts = set(range(0, min(size, 48))) | {size - k for k in (1, 2, 3, 7, 8) if size > k} | \
            {size // 2, size // 3, 2 * size // 3}
        for cut in sorted(cuts):
            check_refused(r, ["FG.UVLOAD", "new", payload[:cut]], BAD_PAYLOAD)
        for tail in (b"\x00", b"\xff" * 7, payload):
            check_refused(r, ["FG.UVLOAD", "new", payload + tail], BAD_PAYLOAD)
    assert r.exists("new") == 0


def behaves_as_a_counter(c, key, n):
    """A loaded counter answers every command, round-trips DUMP/RESTORE,
    takes adds, and goes."""
    info = uv_info(c, key)
    assert info["entries"] >= 0 and info["bytes"] > 0, info
    for window in (["LAST", 1, "HOURS"], ["LAST", 1, "SECONDS"],
                   ["BETWEEN", (n - 10) * SEC, (n + 10) * SEC]):
        rep = raw(c, "FG.UVCOUNT", key, *window)
        assert isinstance(rep, int) or str(rep).startswith("ERR "), (window, rep)
        rep = raw(c, "FG.UVEXPORT", key, *window)
        assert isinstance(rep, bytes) and len(rep) == 12304 or str(rep).startswith("ERR "), window
    dump = c.dump(key)
    assert ok(c.execute_command("RESTORE", key + ":copy", 0, dump))
    assert c.dump(key + ":copy") == dump
    assert c.execute_command("FG.UVADDAT", key, n * SEC, "new-item") in (0, 1)
    assert c.delete(key, key + ":copy") == 2


def test_flipped_bits(r, payloads):  # noqa: F811
    """Each byte of a payload with one bit flipped: refused and nothing
    changed, or loaded as a counter that behaves as one."""
    ctx = populate(r)
    payload = payloads[1]["src"]
    refused = 0
    for i in range(len(payload)):
        flipped = payload[:i] + bytes([payload[i] ^ (1 << (i % 8))]) + payload[i + 1:]
        before = snapshot(r)
        rep = raw(r, "FG.UVLOAD", "new", flipped)
        if isinstance(rep, Exception):
            assert str(rep) == BAD_PAYLOAD, (i, rep)
            assert snapshot(r) == before and r.exists("new") == 0, i
            refused += 1
        else:
            assert rep == b"OK", (i, rep)
            behaves_as_a_counter(r, "new", ctx["n"])
            assert snapshot(r) == before, i
        assert r.ping()
    assert refused >= len(payload) // 4, (refused, len(payload))
