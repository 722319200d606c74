"""Every command refuses bad input with an error that changes nothing
(docs/commands.md, "Argument ranges"): an ERR (or WRONGTYPE) reply, the
dataset digest unchanged, the server still answering."""

import time

import pytest
import redis

from harness import RawClient, RespError, digest, state

# FG.SETSTATE and FG.LOGAPPEND are validated as a repair tool meets them.
pytestmark = pytest.mark.usefixtures("effect_commands")

# -- bad values ---------------------------------------------------------------

COMMON_BAD = [
    "abc", "", "1x", " 1", "1 ", "\t1", "-1", "inf", "-inf", "+inf", "nan",
    "NaN", "0x10", "1e400", "--1", "1,5", "+-1", "1.2.3",
]
# integers: limit, capacity, count (CL), period (CL)
INT_POS = COMMON_BAD + ["0", "1.5", "9223372036854775808", "-9223372036854775809",
                        "99999999999999999999"]
# integers where 0 is allowed: max_burst, quantity, COST
INT_NONNEG = [v for v in INT_POS if v != "0"]
# numbers > 0, fractions allowed: window_ms, period_ms, count (GCRA), rates
NUM_POS = COMMON_BAD + ["0", "-0", "0.0", "-0.5", "0x1p3", "1e", "e5", ".", "1e-400"]
DURATION = NUM_POS + ["1000000000001", "1e13", "1000000000000.5"]
RATE = NUM_POS + ["1000000001", "1e10"]

# -- commands: base arguments and their numeric positions ----------------------

# name -> (argv, {position: (argument name, bad values)}, family used to set up "k")
COMMANDS = {
    "CL.THROTTLE": (["CL.THROTTLE", "k", "15", "30", "60", "1"],
                    {2: ("max_burst", INT_NONNEG), 3: ("count", INT_POS),
                     4: ("period", INT_POS), 5: ("quantity", INT_NONNEG)}),
    "FG.FIXED": (["FG.FIXED", "k", "5", "60000"],
                 {2: ("limit", INT_POS), 3: ("window_ms", DURATION)}),
    "FG.SLIDING": (["FG.SLIDING", "k", "5", "60000"],
                   {2: ("limit", INT_POS), 3: ("window_ms", DURATION)}),
    "FG.SLIDELOG": (["FG.SLIDELOG", "k", "5", "60000"],
                    {2: ("limit", INT_POS + ["100001", "1000000"]),
                     3: ("window_ms", DURATION)}),
    "FG.TOKEN": (["FG.TOKEN", "k", "5", "0.1"],
                 {2: ("capacity", INT_POS), 3: ("refill_per_sec", RATE)}),
    "FG.LEAKY": (["FG.LEAKY", "k", "5", "0.1"],
                 {2: ("capacity", INT_POS), 3: ("leak_per_sec", RATE)}),
    "FG.GCRA": (["FG.GCRA", "k", "5", "5", "50000"],
                {2: ("capacity", INT_POS), 3: ("count", NUM_POS),
                 4: ("period_ms", DURATION)}),
}
FAMILY_OF = {"FG.FIXED": "FIXED", "FG.SLIDING": "SLIDING", "FG.SLIDELOG": "SLIDELOG",
             "FG.TOKEN": "TOKEN", "FG.LEAKY": "LEAKY", "FG.GCRA": "GCRA"}

# a valid state in "k" for each command, with a TTL far longer than a test
SETUP = {
    "CL.THROTTLE": ["CL.THROTTLE", "k", "15", "30", "60", "3"],
    "FG.FIXED": ["FG.FIXED", "k", "5", "1000000000000", "COST", "2"],
    "FG.SLIDING": ["FG.SLIDING", "k", "5", "1000000000000", "COST", "2"],
    "FG.SLIDELOG": ["FG.SLIDELOG", "k", "5", "600000", "COST", "2"],
    "FG.TOKEN": ["FG.TOKEN", "k", "5", "0.01", "COST", "2"],
    "FG.LEAKY": ["FG.LEAKY", "k", "5", "0.01", "COST", "2"],
    "FG.GCRA": ["FG.GCRA", "k", "5", "5", "500000", "COST", "2"],
}

CASES = []  # (id, setup name or None, argv, expected prefix, message must contain)


def add(case_id, argv, setup, expect="ERR", contains=None):
    CASES.append(pytest.param(setup, argv, expect, contains, id=case_id))


def printable(v):
    return repr(v)[1:-1] if v else "EMPTY"


# bad numbers at every numeric position, for the command itself and via FG.PEEK
for name, (argv, positions) in COMMANDS.items():
    for pos, (argname, bad) in positions.items():
        for v in bad:
            a = list(argv)
            a[pos] = v
            add("%s-%s=%s" % (name, argname, printable(v)), a, name)
            if name in FAMILY_OF:
                add("FG.PEEK-%s-%s=%s" % (FAMILY_OF[name], argname, printable(v)),
                    ["FG.PEEK", FAMILY_OF[name]] + a[1:], name)

# COST: bad values, missing value, unknown options, trailing garbage
for name, (argv, _) in COMMANDS.items():
    if name == "CL.THROTTLE":
        continue
    fam = FAMILY_OF[name]
    variants = {"COST=" + printable(v): ["COST", v] for v in INT_NONNEG}
    variants.update({
        "COST-without-value": ["COST"],
        "COST-then-garbage": ["COST", "1", "extra"],
        "COST-twice-no-value": ["COST", "1", "COST"],
        "unknown-option": ["FOO", "1"],
        "unknown-flag": ["NX"],
        "extra-positional": ["1"],
        "COST-name-as-value": ["COST", "COST"],
    })
    for vid, extra in variants.items():
        add("%s-%s" % (name, vid), argv + extra, name)
        add("FG.PEEK-%s-%s" % (fam, vid), ["FG.PEEK", fam] + argv[1:] + extra, name)

# arity: too few, too many
for name, (argv, _) in COMMANDS.items():
    nreq = len(argv) - (1 if name == "CL.THROTTLE" else 0)
    for n in range(1, nreq):
        add("%s-arity-%d-args" % (name, n - 1), argv[:n], name)
        if name in FAMILY_OF and n >= 2:
            add("FG.PEEK-%s-arity-%d-args" % (FAMILY_OF[name], n - 1),
                ["FG.PEEK", FAMILY_OF[name]] + argv[1:n], name)
add("CL.THROTTLE-arity-too-many", COMMANDS["CL.THROTTLE"][0] + ["1"], "CL.THROTTLE")
add("CL.THROTTLE-arity-too-many-2", COMMANDS["CL.THROTTLE"][0] + ["1", "1"], "CL.THROTTLE")
add("FG.PEEK-no-args", ["FG.PEEK"], "FG.TOKEN")
add("FG.PEEK-family-only", ["FG.PEEK", "TOKEN"], "FG.TOKEN")
add("FG.PEEK-unknown-family", ["FG.PEEK", "BOGUS", "k", "5", "0.1"], "FG.TOKEN")
add("FG.PEEK-empty-family", ["FG.PEEK", "", "k", "5", "0.1"], "FG.TOKEN")
add("FG.PEEK-cl-family", ["FG.PEEK", "THROTTLE", "k", "15", "30", "60"], "CL.THROTTLE")
add("FG.PEEK-key-before-family", ["FG.PEEK", "k", "TOKEN", "5", "0.1"], "FG.TOKEN")
add("FG.PEEK-family-with-prefix", ["FG.PEEK", "FG.TOKEN", "k", "5", "0.1"], "FG.TOKEN")
for name in ("FG.RESET", "FG.INSPECT"):
    add(name + "-arity-0", [name], "FG.TOKEN")
    add(name + "-arity-2", [name, "k", "k2"], "FG.TOKEN")

# overflow: a huge capacity times a slow rate, and other 64-bit products
OV = "overflow"
add("FG.TOKEN-overflow-capacity-x-rate", ["FG.TOKEN", "k", "9223372036854775807", "0.001"],
    "FG.TOKEN", contains=OV)
add("FG.TOKEN-overflow-capacity-x-rate-2", ["FG.TOKEN", "k", "10", "1e-9"], "FG.TOKEN",
    contains=OV)
add("FG.LEAKY-overflow-capacity-x-rate", ["FG.LEAKY", "k", "9223372036854775807", "0.001"],
    "FG.LEAKY", contains=OV)
add("FG.GCRA-overflow-capacity-x-period",
    ["FG.GCRA", "k", "9223372036854775807", "1", "60000"], "FG.GCRA", contains=OV)
add("FG.GCRA-overflow-capacity-x-period-2",
    ["FG.GCRA", "k", "1000000000", "1", "1000000000000"], "FG.GCRA", contains=OV)
add("FG.PEEK-GCRA-overflow-capacity-x-period",
    ["FG.PEEK", "GCRA", "k", "9223372036854775807", "1", "60000"], "FG.GCRA", contains=OV)
add("FG.PEEK-TOKEN-overflow-capacity-x-rate",
    ["FG.PEEK", "TOKEN", "k", "9223372036854775807", "0.001"], "FG.TOKEN", contains=OV)
add("CL.THROTTLE-overflow-burst-x-period",
    ["CL.THROTTLE", "k", "9223372036854775806", "1", "60"], "CL.THROTTLE", contains=OV)
add("CL.THROTTLE-overflow-burst-x-period-2",
    ["CL.THROTTLE", "k", "100", "1", "9223372036"], "CL.THROTTLE", contains=OV)
add("CL.THROTTLE-overflow-period-ns",
    ["CL.THROTTLE", "k", "0", "1", "9223372036854775807"], "CL.THROTTLE")
add("CL.THROTTLE-max-burst-int64-max",
    ["CL.THROTTLE", "k", "9223372036854775807", "1", "60"], "CL.THROTTLE")
# emission intervals that do not fit 64-bit nanoseconds, or are below 1 ns
add("FG.TOKEN-rate-too-slow", ["FG.TOKEN", "k", "1", "1e-11"], "FG.TOKEN")
add("FG.GCRA-interval-too-long", ["FG.GCRA", "k", "1", "1e-9", "1000000000000"], "FG.GCRA")
add("CL.THROTTLE-interval-below-1ns",
    ["CL.THROTTLE", "k", "1", "9223372036854775807", "1"], "CL.THROTTLE")

# -- FG.SETSTATE and FG.LOGAPPEND ------------------------------------------------

NOW_US = time.time_ns() // 1000
FUTURE_MS = NOW_US // 1000 + 3_600_000
T1, T2 = NOW_US, NOW_US + 1000
T3 = NOW_US + 3_600_000_000  # an hour ahead: newer than any entry a test sets up

SET = ["FG.SETSTATE", "k"]
setstate_bad = {
    "arity-0": ["FG.SETSTATE"],
    "arity-1": ["FG.SETSTATE", "k"],
    "no-fields": SET + ["bucket"],
    "unknown-type": SET + ["bogus", "1"],
    "empty-type": SET + ["", "1"],
    "bucket-tat-0": SET + ["bucket", "0"],
    "bucket-tat-negative": SET + ["bucket", "-1"],
    "bucket-tat-abc": SET + ["bucket", "abc"],
    "bucket-tat-empty": SET + ["bucket", ""],
    "bucket-tat-float": SET + ["bucket", "1.5"],
    "bucket-tat-overflow": SET + ["bucket", "9223372036854775808"],
    "bucket-two-fields": SET + ["bucket", str(T1 * 1000), "5"],
    "compact-tat-0": SET + ["0"],
    "compact-tat-negative": SET + ["-1"],
    "compact-tat-float": SET + ["1.5"],
    "compact-tat-overflow": SET + ["9223372036854775808"],
    "compact-with-pxat": SET + ["PXAT", str(FUTURE_MS)],
    "fixed-count-0": SET + ["fixed", str(T1), "0"],
    "fixed-count-negative": SET + ["fixed", str(T1), "-1"],
    "fixed-start-negative": SET + ["fixed", "-1", "3"],
    "fixed-start-abc": SET + ["fixed", "abc", "3"],
    "fixed-one-field": SET + ["fixed", str(T1)],
    "fixed-three-fields": SET + ["fixed", str(T1), "1", "1"],
    "sliding-count-negative": SET + ["sliding", str(T1), "-1", "1"],
    "sliding-prev-negative": SET + ["sliding", str(T1), "1", "-1"],
    "sliding-both-zero": SET + ["sliding", str(T1), "0", "0"],
    "sliding-two-fields": SET + ["sliding", str(T1), "1"],
    "sliding-four-fields": SET + ["sliding", str(T1), "1", "1", "1"],
    "slidelog-no-entries": SET + ["slidelog"],
    "slidelog-out-of-order": SET + ["slidelog", str(T3), str(T2), str(T1)],
    "slidelog-out-of-order-pairs": SET + ["slidelog", str(T2), "1", str(T1), "1"],
    "slidelog-negative-ts": SET + ["slidelog", "-5"],
    "slidelog-ts-abc": SET + ["slidelog", "abc"],
    "slidelog-over-100000-pairs": SET + ["slidelog", str(T1), "60000", str(T2), "40001"],
    "slidelog-over-100000-one-run": SET + ["slidelog", str(T1), "100001"],
    "pxat-abc": SET + ["bucket", str(T1 * 1000), "PXAT", "abc"],
    "pxat-negative": SET + ["bucket", str(T1 * 1000), "PXAT", "-1"],
    "pxat-float": SET + ["bucket", str(T1 * 1000), "PXAT", "1.5"],
    "pxat-overflow": SET + ["bucket", str(T1 * 1000), "PXAT", "9223372036854775808"],
}
for sid, argv in setstate_bad.items():
    add("FG.SETSTATE-" + sid, argv, "FG.TOKEN")

LA = ["FG.LOGAPPEND", "k"]
logappend_bad = {
    "arity-0": ["FG.LOGAPPEND"],
    "arity-1": LA,
    "arity-2": LA + ["0"],
    "arity-3": LA + ["0", str(T3)],
    "arity-5": LA + ["0", str(T3), "1", "7"],
    "older-than-newest": LA + ["0", "1", "1"],
    "older-than-newest-with-pxat": LA + ["0", "1", "1", "PXAT", str(FUTURE_MS)],
    "drop-abc": LA + ["abc", str(T3), "1"],
    "drop-float": LA + ["1.5", str(T3), "1"],
    "at-abc": LA + ["0", "abc", "1"],
    "at-negative": LA + ["0", "-7", "1"],
    "at-empty": LA + ["0", "", "1"],
    "at-overflow": LA + ["0", "9223372036854775808", "1"],
    "count-0": LA + ["0", str(T3), "0"],
    "count-negative": LA + ["0", str(T3), "-1"],
    "count-abc": LA + ["0", str(T3), "abc"],
    "count-over-100000": LA + ["0", str(T3), "100001"],
    "log-over-100000": LA + ["0", str(T3), "99999"],
    "pxat-abc": LA + ["0", str(T3), "1", "PXAT", "abc"],
    "pxat-negative": LA + ["0", str(T3), "1", "PXAT", "-1"],
}
for sid, argv in logappend_bad.items():
    add("FG.LOGAPPEND-" + sid, argv, "FG.SLIDELOG")

# -- keys of other types ------------------------------------------------------

OTHER_TYPES = ["string", "list", "hash", "set", "zset"]
TYPE_CMDS = {}
for name, (argv, _) in COMMANDS.items():
    TYPE_CMDS[name] = argv
    if name in FAMILY_OF:
        TYPE_CMDS["FG.PEEK-" + FAMILY_OF[name]] = ["FG.PEEK", FAMILY_OF[name]] + argv[1:]
TYPE_CMDS["FG.RESET"] = ["FG.RESET", "k"]
TYPE_CMDS["FG.INSPECT"] = ["FG.INSPECT", "k"]
TYPE_CMDS["FG.SETSTATE-bucket"] = SET + ["bucket", str(T1 * 1000 + 5 * 10 ** 9)]
TYPE_CMDS["FG.SETSTATE-fixed"] = SET + ["fixed", str(T1), "2"]
TYPE_CMDS["FG.LOGAPPEND"] = LA + ["0", str(T3), "1"]


def populate_other(c, kind):
    if kind == "string":
        c.set("k", "hello")
    elif kind == "list":
        c.rpush("k", "a", "b")
    elif kind == "hash":
        c.hset("k", mapping={"a": "1", "b": "2"})
    elif kind == "set":
        c.sadd("k", "a", "b")
    else:
        c.zadd("k", {"a": 1, "b": 2})


def populate(c, setup):
    # unrelated keys, so the digest covers more than the target
    c.set("other:str", "hello")
    c.rpush("other:list", "x", "y")
    c.hset("other:hash", "f", "v")
    c.execute_command("FG.TOKEN", "other:bucket", "5", "0.01", "COST", "2")
    c.execute_command("FG.SLIDELOG", "other:log", "5", "600000", "COST", "2")
    if setup is not None:
        c.execute_command(*SETUP[setup])


def check_refused(c, argv, expect, contains):
    """Runs argv on a raw connection (redis-py strips "ERR "), expects an
    error reply starting with `expect`, an unchanged dataset and a live
    server. Returns the full message."""
    before = digest(c)
    port = c.connection_pool.connection_kwargs["port"]
    with RawClient(port) as raw:
        msg = raw.error_of(*argv)
    if expect == "ERR|WRONGTYPE":
        assert msg.startswith("ERR") or msg.startswith("WRONGTYPE"), msg
    else:
        assert msg.startswith(expect + " "), msg
    if contains:
        assert contains in msg.lower(), msg
    assert digest(c) == before, "dataset changed by %r" % (argv,)
    assert c.ping()
    return msg


@pytest.mark.parametrize("setup,argv,expect,contains", CASES)
def test_refused(r, setup, argv, expect, contains):
    populate(r, setup)
    check_refused(r, argv, expect, contains)


@pytest.mark.parametrize("kind", OTHER_TYPES)
@pytest.mark.parametrize("cmd", sorted(TYPE_CMDS))
def test_wrongtype(r, cmd, kind):
    populate(r, None)
    populate_other(r, kind)
    argv = TYPE_CMDS[cmd]
    # a string may be a redis-cell state for CL.THROTTLE; "hello" is not, and
    # the docs only promise "an error" there
    expect = "ERR|WRONGTYPE" if (cmd == "CL.THROTTLE" and kind == "string") else "WRONGTYPE"
    check_refused(r, argv, expect, None)


def test_error_names_the_argument(r):
    # "an ERR ... reply that names the argument"
    cases = [
        (["FG.FIXED", "k", "abc", "60000"], "limit"),
        (["FG.FIXED", "k", "5", "abc"], "window_ms"),
        (["FG.SLIDELOG", "k", "100001", "60000"], "limit"),
        (["FG.TOKEN", "k", "0", "1"], "capacity"),
        (["FG.TOKEN", "k", "5", "inf"], "refill_per_sec"),
        (["FG.LEAKY", "k", "5", "nan"], "leak_per_sec"),
        (["FG.GCRA", "k", "5", "0", "1000"], "count"),
        (["FG.GCRA", "k", "5", "1", "-1"], "period_ms"),
        (["FG.TOKEN", "k", "5", "1", "COST", "-1"], "cost"),
        (["CL.THROTTLE", "k", "-1", "30", "60"], "max_burst"),
        (["CL.THROTTLE", "k", "15", "0", "60"], "count"),
        (["CL.THROTTLE", "k", "15", "30", "x"], "period"),
        (["CL.THROTTLE", "k", "15", "30", "60", "-2"], "quantity"),
    ]
    for argv, name in cases:
        msg = check_refused(r, argv, "ERR", None)
        assert name in msg.lower(), (argv, msg)


@pytest.mark.parametrize("argv", [
    ["FG.TOKEN", "k", "5", "0.1", "COST", "9223372036854775807"],
    ["FG.GCRA", "k", "5", "5", "50000", "COST", "9223372036854775807"],
    ["FG.LEAKY", "k", "5", "0.1", "COST", "4611686018427387904"],
    ["FG.FIXED", "k", "5", "60000", "COST", "9223372036854775807"],
    ["FG.SLIDING", "k", "5", "60000", "COST", "9223372036854775807"],
    ["FG.SLIDELOG", "k", "5", "60000", "COST", "9223372036854775807"],
    ["CL.THROTTLE", "k", "15", "30", "60", "9223372036854775807"],
    ["FG.PEEK", "TOKEN", "k", "5", "0.1", "COST", "9223372036854775807"],
], ids=lambda a: "-".join(a[:2]) if a[0] != "FG.PEEK" else "FG.PEEK-" + a[1])
def test_huge_cost_is_denied_never_an_error(r, argv):
    """Regression: a cost that can never fit is a denial with retry_after -1,
    in every family (the buckets once answered an overflow error); never a
    write, never a crash."""
    setup = {"FG.PEEK": "FG.TOKEN"}.get(argv[0], argv[0])
    populate(r, setup)
    before = digest(r)
    port = r.connection_pool.connection_kwargs["port"]
    with RawClient(port) as raw:
        rep = [int(x) for x in raw.execute(*argv)]
    if argv[0] == "CL.THROTTLE":
        assert rep[0] == 1 and rep[3] == -1, rep
    else:
        assert rep[0] == 0 and rep[3] == -1, rep
    assert digest(r) == before
    assert r.ping()


def test_gcra_interval_overflow_is_refused_by_name(r):
    """Regression: a tiny count over a long period once overflowed a
    double-to-integer conversion (undefined behaviour)."""
    before = digest(r)
    msg = check_refused(r, ["FG.GCRA", "g", "1", "0.001", "1000000000000"], "ERR", None)
    assert "count" in msg.lower() and "overflow" in msg.lower(), msg
    assert digest(r) == before


@pytest.mark.parametrize("argv", [
    ["FG.FIXED", "k", "9223372036854775807", "1000000000000"],
    ["FG.SLIDING", "k", "9223372036854775807", "1000000000000"],
    ["FG.SLIDELOG", "k", "100000", "1000000000000"],
    ["FG.GCRA", "k", "1", "1", "1000000000000"],
    ["FG.TOKEN", "k", "1", "1e9"],
    ["FG.TOKEN", "k", "1", "1e-9"],
    ["FG.GCRA", "k", "1", "1000000", "1"],
    ["CL.THROTTLE", "k", "0", "1000000000", "1"],
    ["FG.FIXED", "k", "1", "0.001"],
    ["FG.SLIDING", "k", "1", "0.001"],
], ids=lambda a: "-".join(a[:1] + a[2:]))
def test_extremes_within_range_are_accepted(r, argv):
    """The edges of the documented ranges are valid requests."""
    rep = [int(x) for x in r.execute_command(*argv)]
    assert len(rep) == 5
    ok = 0 if argv[0] == "CL.THROTTLE" else 1
    assert rep[0] == ok, rep
    assert r.ping()


# -- FG.SETSTATE / FG.LOGAPPEND accept what the docs describe -----------------

def test_setstate_valid_states_are_accepted(r):
    # an hour from now (FUTURE_MS was an hour from when the file was loaded)
    start = time.time_ns()
    tat = start + 30 * 10 ** 9
    pxat = start // 10 ** 6 + 3_600_000
    assert r.execute_command("FG.SETSTATE", "b", "bucket", tat, "PXAT", pxat) in (b"OK", "OK")
    assert r.execute_command("FG.SETSTATE", "f", "fixed", T1, 3, "PXAT", pxat) in (b"OK", "OK")
    assert r.execute_command("FG.SETSTATE", "s", "sliding", T1, 0, 4, "PXAT", pxat) in (b"OK", "OK")
    assert r.pttl("b") >= 3_600_000 - (time.time_ns() - start) / 10 ** 6 - 1
    # the compact form: the key expires when the bucket is full again
    assert r.execute_command("FG.SETSTATE", "c", tat) in (b"OK", "OK")
    assert r.execute_command("PEXPIRETIME", "c") == -(-tat // 10 ** 6)
    # the bucket state: 30 s ahead at 10 s per unit (capacity 5) = 3 used
    rep = [int(x) for x in r.execute_command("FG.PEEK", "TOKEN", "b", 5, 0.1, "COST", 0)]
    assert rep[2] == 2, rep


def test_setstate_slidelog_as_documented(r):
    """docs: slidelog fields are runs `ts_us count`, oldest first."""
    now = time.time_ns() // 1000
    runs = [now - 3000, 1, now - 2000, 2]
    reply = r.execute_command("FG.SETSTATE", "l", "slidelog", *runs,
                              "PXAT", now // 1000 + 60000)
    assert reply in (b"OK", "OK")
    rep = [int(x) for x in r.execute_command("FG.PEEK", "SLIDELOG", "l", 5, 60000, "COST", 0)]
    assert rep[2] == 2, rep  # three units used out of five


def test_setstate_slidelog_refuses_a_lone_timestamp(r):
    """An odd number of fields is not a list of runs."""
    now = time.time_ns() // 1000
    with pytest.raises(redis.ResponseError):
        r.execute_command("FG.SETSTATE", "l", "slidelog", now - 3000, 1, now - 2000)
    assert r.exists("l") == 0


def test_setstate_roundtrips_inspect(r):
    """FG.SETSTATE takes the same fields as FG.INSPECT shows."""
    r.execute_command("FG.SLIDELOG", "src", 10, 60000, "COST", 2)
    time.sleep(0.002)
    r.execute_command("FG.SLIDELOG", "src", 10, 60000)
    raw = r.execute_command("FG.INSPECT", "src")
    fields = []
    it = iter(raw)
    for k, v in zip(it, it):
        k = k.decode() if isinstance(k, bytes) else k
        if k in ("type", "pttl", "ttl"):
            continue
        fields.extend(v if isinstance(v, list) else [v])
    reply = r.execute_command("FG.SETSTATE", "dst", "slidelog", *fields,
                              "PXAT", time.time_ns() // 10 ** 6 + 60000)
    assert reply in (b"OK", "OK")
    assert state(r, "src") == state(r, "dst")
    assert r.execute_command("DEBUG", "DIGEST-VALUE", "src") == \
        r.execute_command("DEBUG", "DIGEST-VALUE", "dst")


def test_logappend_applies_and_refuses_older(r):
    now = time.time_ns() // 1000
    assert r.execute_command("FG.LOGAPPEND", "l", 0, now, 2, "PXAT", now // 1000 + 60000) \
        in (b"OK", "OK")
    rep = [int(x) for x in r.execute_command("FG.PEEK", "SLIDELOG", "l", 5, 60000, "COST", 0)]
    assert rep[2] == 3, rep
    # same timestamp is fine, older is not
    assert r.execute_command("FG.LOGAPPEND", "l", 0, now, 1) in (b"OK", "OK")
    check_refused(r, ["FG.LOGAPPEND", "l", 0, now - 1, 1], "ERR", None)
    # dropping entries through a time
    assert r.execute_command("FG.LOGAPPEND", "l", now, now + 10, 1) in (b"OK", "OK")
    rep = [int(x) for x in r.execute_command("FG.PEEK", "SLIDELOG", "l", 5, 60000, "COST", 0)]
    assert rep[2] == 4, rep
