"""BF.DEBUG (docs/bloom.md "Compatibility with RedisBloom"): RedisBloom 2.4's
shape -- "size:<items>", then one line per level, oldest first -- with
numbers computed from floodgate's own levels.

What each number must be is worked out here from the filter's parameters
and from what the test added, not read back from the module: capacities
from the growth schedule, the items of each level from the adds that
answered 1 (every level but the newest full), the rate of each level from
the documented shares of the target, and the bits and probes from the
classic Bloom formula, which a blocked filter must beat (it needs more than
the classic count, never less). The answer must survive BF.SCANDUMP /
BF.LOADCHUNK and a reload, since redis-py's own Bloom test compares BF.DEBUG
before and after such a round trip.

With FLOODGATE_REDISBLOOM set to the path of a RedisBloom 2.4 module, the
same commands also go to a server running it, and the shape, the errors and
the numbers that do not depend on the filter's layout must be the same.
"""

import math
import os
import re

import pytest

from harness import RawClient, Server, s
from test_bloom import bf_info, error_of, items, loadchunks, madd, port_of, raw, scandump

LINE = re.compile(r"bytes:(\d+) bits:(\d+) hashes:(\d+) hashwidth:(\d+) capacity:(\d+) "
                  r"size:(\d+) ratio:(\S+)")
FIELDS = ("bytes", "bits", "hashes", "hashwidth", "capacity", "size", "ratio")
BLOCK_BYTES = 64
# Level 0 of a scaling filter gets 0.8 of the target, level i >= 1 gets
# 0.2 x 6 / (pi^2 i^2) (docs/bloom.md "Growth").
FIRST_SHARE = 0.8
LATER_SHARE = 0.2 * 6.0 / (math.pi * math.pi)


def debug(c, key):
    """BF.DEBUG as (items, [level dict, ...]), checking every line's form."""
    rep = s(c.execute_command("BF.DEBUG", key))
    assert isinstance(rep, list) and len(rep) >= 2, rep
    m = re.fullmatch(r"size:(\d+)", rep[0])
    assert m, rep[0]
    levels = []
    for line in rep[1:]:
        lm = LINE.fullmatch(line)
        assert lm, line
        level = dict(zip(FIELDS, lm.groups()))
        levels.append({k: v if k == "ratio" else int(v) for k, v in level.items()})
    return int(m.group(1)), levels


def level_rate(p, i, scaling):
    if not scaling:
        return p
    return FIRST_SHARE * p if i == 0 else LATER_SHARE * p / (i * i)


def fill(c, key, n, prefix="it"):
    """Adds n distinct items; returns how many answered 1."""
    return sum(madd(c, key, items(prefix, n)))


def check_chain(c, key, p, capacity0, expansion, added):
    """The whole answer, against what the parameters and the adds imply."""
    total, levels = debug(c, key)
    assert total == added == bf_info(c, key)["Number of items inserted"]
    scaling = expansion is not None
    left = added
    for i, level in enumerate(levels):
        assert level["hashwidth"] == 64
        assert level["capacity"] == capacity0 * (expansion ** i if scaling else 1)
        newest = i == len(levels) - 1
        assert level["size"] == (left if newest else level["capacity"]), (i, levels)
        left -= level["size"]
        assert level["ratio"] == "%g" % level_rate(p, i, scaling), (i, level)
        assert level["bytes"] % BLOCK_BYTES == 0 and level["bytes"] > 0
        assert level["bits"] == 8 * level["bytes"]
        assert level["hashes"] >= 1
    assert left == 0
    return levels


# -- shape and values --------------------------------------------------------------


def test_a_reserved_filter(r):
    assert r.execute_command("BF.RESERVE", "bf", "0.01", 1000) in (b"OK", "OK")
    levels = check_chain(r, "bf", 0.01, 1000, 2, 0)
    assert len(levels) == 1
    assert s(r.execute_command("BF.DEBUG", "bf"))[1].endswith("size:0 ratio:0.008")


@pytest.mark.parametrize("p, capacity0, expansion, n", [
    (0.01, 10, 2, 100),        # RedisBloom's own example: four levels
    (0.001, 100, 2, 4000),     # six levels
    (0.1, 50, 4, 3000),
    (0.0001, 1000, 1, 3500),   # expansion 1: equal levels, shrinking rates
    (0.5, 3, 3, 200),
])
def test_a_grown_filter(r, p, capacity0, expansion, n):
    assert r.execute_command("BF.RESERVE", "bf", p, capacity0, "EXPANSION", expansion) in (
        b"OK", "OK")
    added = fill(r, "bf", n)
    levels = check_chain(r, "bf", p, capacity0, expansion, added)
    assert len(levels) >= 2
    # Only the level that was newest changes on the next add.
    before = debug(r, "bf")[1]
    added += fill(r, "bf", 1, prefix="one-more")
    after = check_chain(r, "bf", p, capacity0, expansion, added)
    assert after[:len(before) - 1] == before[:-1]


def test_a_nonscaling_filter_reports_its_whole_target(r):
    assert r.execute_command("BF.RESERVE", "ns", "0.05", 300, "NONSCALING") in (b"OK", "OK")
    added = fill(r, "ns", 300)
    levels = check_chain(r, "ns", 0.05, 300, None, added)
    assert len(levels) == 1 and levels[0]["ratio"] == "0.05"
    if added == 300:
        assert error_of(r, "BF.ADD", "ns", "beyond") == "ERR non scaling filter is full"
    assert debug(r, "ns") == (added, levels)


def test_filters_created_by_adds_use_the_defaults(r):
    assert r.execute_command("BF.ADD", "d", "x") == 1
    check_chain(r, "d", 0.01, 100, 2, 1)
    assert r.execute_command("BF.INSERT", "i", "ERROR", "0.001", "CAPACITY", 50000, "ITEMS",
                             "foo") == [1]
    levels = check_chain(r, "i", 0.001, 50000, 2, 1)
    assert levels[0]["ratio"] == "0.0008"


@pytest.mark.parametrize("p", [0.1, 0.01, 0.001, 0.0001])
@pytest.mark.parametrize("nonscaling", [False, True])
def test_bits_and_hashes_describe_a_filter_that_meets_its_rate(r, p, nonscaling):
    """The classic formula (1 - e^(-h n / m))^h for the reported bits m and
    hashes h at capacity n must not exceed the level's rate (a blocked filter
    needs more than the classic count), nor fall below half of it (an
    oversized level); m at least the classic optimum -n ln r / ln^2 2; h
    within 1.5 of the classic count for the rate, log2(1 / r)."""
    n = 10000
    argv = ["BF.RESERVE", "f", p, n] + (["NONSCALING"] if nonscaling else [])
    assert r.execute_command(*argv) in (b"OK", "OK")
    level = debug(r, "f")[1][0]
    rate = float(level["ratio"])
    m, h = level["bits"], level["hashes"]
    classic = (1 - math.exp(-h * n / m)) ** h
    assert 0.5 * rate <= classic <= rate, (level, classic)
    assert m >= n * -math.log(rate) / math.log(2) ** 2, level
    assert abs(h - math.log2(1 / rate)) <= 1.5, level


def test_bytes_are_the_bit_arrays_within_info_size(r):
    """BF.INFO's Size counts the bit arrays, plus headers of a few dozen
    bytes per level (and alignment)."""
    assert r.execute_command("BF.RESERVE", "bf", "0.01", 20, "EXPANSION", 3) in (b"OK", "OK")
    fill(r, "bf", 2000)
    levels = debug(r, "bf")[1]
    arrays = sum(level["bytes"] for level in levels)
    size = bf_info(r, "bf")["Size"]
    assert arrays < size <= arrays + 32 + 128 * len(levels), (arrays, size, len(levels))


def test_the_same_answer_after_scandump_loadchunk_and_reload(r):
    """What redis-py's Bloom test checks: BF.DEBUG before BF.SCANDUMP equals
    BF.DEBUG after BF.LOADCHUNK; also after DEBUG RELOAD, and while a filter
    is being loaded (from its header, as BF.INFO)."""
    assert r.execute_command("BF.RESERVE", "src", "0.0001", 1000, "EXPANSION", 2) in (b"OK", "OK")
    fill(r, "src", 5000)
    want = r.execute_command("BF.DEBUG", "src")
    chunks = scandump(r, "src")
    loadchunks(r, "partial", chunks[:1])
    assert r.execute_command("BF.DEBUG", "partial") == want
    loadchunks(r, "copy", chunks)
    assert r.execute_command("BF.DEBUG", "copy") == want
    r.execute_command("DEBUG", "RELOAD")
    assert r.execute_command("BF.DEBUG", "src") == want
    assert r.execute_command("BF.DEBUG", "copy") == want


def test_resp3_gives_the_same_strings(r):
    assert r.execute_command("BF.RESERVE", "bf", "0.01", 10) in (b"OK", "OK")
    fill(r, "bf", 30)
    with RawClient(port_of(r), protocol=3) as rc:
        assert rc.execute("BF.DEBUG", "bf") == r.execute_command("BF.DEBUG", "bf")


# -- errors ------------------------------------------------------------------------

ERRORS = [
    (["BF.DEBUG", "missing"], "ERR not found"),
    (["BF.DEBUG", "str"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
    (["BF.DEBUG"], "ERR wrong number of arguments for 'bf.debug' command"),
    (["BF.DEBUG", "bf", "extra"], "ERR wrong number of arguments for 'bf.debug' command"),
]


def prepare_error_keys(c):
    c.execute_command("SET", "str", "v")
    c.execute_command("BF.ADD", "bf", "x")


@pytest.mark.parametrize("argv, expected", ERRORS, ids=lambda v: " ".join(v) if isinstance(
    v, list) else None)
def test_errors(r, argv, expected):
    prepare_error_keys(r)
    assert error_of(r, *argv) == expected
    assert r.exists("missing") == 0


def test_reads_only(r):
    """A read: the filter is unchanged, and the server knows it for one."""
    assert r.execute_command("BF.RESERVE", "bf", "0.01", 10) in (b"OK", "OK")
    dump = r.dump("bf")
    r.execute_command("BF.DEBUG", "bf")
    assert r.dump("bf") == dump
    flags = set(s(raw(r, "COMMAND", "INFO", "BF.DEBUG")[0][2]))
    assert "readonly" in flags and "write" not in flags


# -- side by side with RedisBloom ------------------------------------------------

REDISBLOOM = os.environ.get("FLOODGATE_REDISBLOOM")


@pytest.fixture(scope="module")
def redisbloom():
    if not REDISBLOOM:
        pytest.skip("FLOODGATE_REDISBLOOM (the path of a RedisBloom 2.4 module) is not set: "
                    "no RedisBloom to compare with")
    with Server(["--loadmodule", REDISBLOOM], module=False) as srv:
        c = srv.client()
        yield c
        c.close()


# Each filter's parameters and the adds it gets. Both modules grow by the
# same capacities, so the number of levels and their capacities agree; the
# items per level may differ by the few that a false positive hid (the
# hashes differ), so each side's sizes are checked against its own adds.
SEQUENCES = [
    (["0.01", 10], 100),
    (["0.001", 100], 1500),
    (["0.1", 50, "EXPANSION", 4], 3000),
    (["0.0001", 1000, "EXPANSION", 1], 3500),
]


def both(fg, rb, *argv):
    return fg.execute_command(*argv), rb.execute_command(*argv)


@pytest.mark.parametrize("args, n", SEQUENCES, ids=lambda v: "-".join(map(str, v))
                         if isinstance(v, list) else str(v))
def test_side_by_side_with_redisbloom(r, redisbloom, args, n):
    redisbloom.flushall()
    assert both(r, redisbloom, "BF.RESERVE", "bf", *args) in ((b"OK", b"OK"), ("OK", "OK"))
    added = [fill(r, "bf", n), fill(redisbloom, "bf", n)]
    ours, theirs = debug(r, "bf"), debug(redisbloom, "bf")
    assert [ours[0], theirs[0]] == added
    assert len(ours[1]) == len(theirs[1])
    for mine, other in zip(ours[1], theirs[1]):
        assert mine["hashwidth"] == other["hashwidth"] == 64
        assert mine["capacity"] == other["capacity"]
        assert mine["bits"] == 8 * mine["bytes"] and other["bits"] == 8 * other["bytes"]
    # Within each module, every level but the newest is full.
    for _, levels in (ours, theirs):
        assert all(level["size"] == level["capacity"] for level in levels[:-1])


def test_nonscaling_lines_agree_but_for_the_layout(r, redisbloom):
    redisbloom.flushall()
    both(r, redisbloom, "BF.RESERVE", "ns", "0.05", 1000, "NONSCALING")
    n = 500
    added = [fill(r, "ns", n), fill(redisbloom, "ns", n)]
    ours, theirs = debug(r, "ns"), debug(redisbloom, "ns")
    assert [ours[0], theirs[0]] == added
    (mine,), (other,) = ours[1], theirs[1]
    for field in ("hashwidth", "capacity", "ratio"):
        assert mine[field] == other[field], field


def test_errors_agree_with_redisbloom(r, redisbloom):
    redisbloom.flushall()
    for c in (r, redisbloom):
        prepare_error_keys(c)
    for argv, expected in ERRORS:
        assert error_of(r, *argv) == error_of(redisbloom, *argv) == expected, argv


def test_resp3_types_agree_with_redisbloom(r, redisbloom):
    redisbloom.flushall()
    both(r, redisbloom, "BF.ADD", "bf", "x")
    replies = []
    for c in (r, redisbloom):
        with RawClient(port_of(c), protocol=3) as rc:
            replies.append(rc.execute("BF.DEBUG", "bf"))
    assert [type(x) for x in replies[0]] == [type(x) for x in replies[1]] == [bytes, bytes]
