"""FG.UV* semantics (docs/uv.md): every count checked against Redis's own
HyperLogLog.

The reference is the documented contract: a window's registers are the
registers a PFADD of exactly that window's items would have. So each window
here is checked three ways: FG.UVEXPORT's 16,384 registers equal those of a
PFADD of the window's items (PFDEBUG TODENSE, then byte for byte), FG.UVCOUNT
equals PFCOUNT of that PFADD, and PFCOUNT of the exported string agrees.
Small sets would count exactly anyway; the registers make the check exact at
any size and catch an item in the wrong window even when the count would hide
it.

Time. Counts read the server's clock, so every test takes its times from the
server's TIME and backfills with FG.UVADDAT at chosen seconds, as clients
may with floodgate.explicit-time (on for this file). Past windows are
answered from the counter's newest second, which the test fixes (at a
fixed time of day, fixed_second, where the grid matters), so they do not
depend on when the test runs. Windows that end "now" (LAST) are read
in a MULTI between two TIMEs and retried when the second changed, so they are
exact to the second without sleeping.

Also here: FG.UVCREATE's options and FG.UVINFO, FG.UVSTORE, multi-key
unions, the future limit, WATCH and keyspace events, INFO, COMMAND GETKEYS /
DOCS / INFO, FG.UVLOAD of the payloads an AOF rewrite writes. Bad input is
in test_uv_bad_input.py (which imports the helpers defined here);
persistence, replication and cluster in their own files.
"""

import os
import random
import subprocess
import time

import pytest
import redis

from harness import RawClient, RespError, Server, s, wait_for
from topology import aof_files, read_aof_commands, wait_aof_rewrite_done

SEC = 1_000_000
MINUTE, HOUR, DAY = 60, 3600, 86400
HLL_BYTES = 12304
REGISTERS = 16384
INFO_FIELDS = ["span", "minutes", "hours", "days", "tzoffset", "newest_us", "entries",
               "buckets", "bytes"]
DEFAULTS = {"span": 604800, "minutes": 60, "hours": 48, "days": 31, "tzoffset": 0}
UV_COMMANDS = ["fg.uvcreate", "fg.uvadd", "fg.uvaddat", "fg.uvcount", "fg.uvexport",
               "fg.uvstore", "fg.uvinfo", "fg.uvload"]
REF, EXP = "__uv:ref", "__uv:exp"  # scratch keys of the reference checks
TIMED = ["--floodgate.explicit-time", "yes"]

pytestmark = pytest.mark.usefixtures("explicit_time")


# -- helpers (imported by test_uv_bad_input.py) ------------------------------------


def ok(reply):
    return reply in (b"OK", "OK", True)


def port_of(c):
    return c.connection_pool.connection_kwargs["port"]


def raw(c, *argv):
    """The reply as the wire gives it, errors as RespError (full text)."""
    with RawClient(port_of(c), timeout=30) as rc:
        rc.sock.sendall(rc.encode(argv))
        return rc.read_reply()


def error_of(c, *argv):
    rep = raw(c, *argv)
    assert isinstance(rep, RespError), "expected an error from %r, got %r" % (argv, rep)
    return str(rep)


def server_us(c):
    sec, us = c.time()
    return sec * SEC + us


def server_second(c):
    return c.time()[0]


def fixed_second(c):
    """13:17:23 UTC on the day before the server's: 11 to 35 hours ago. A
    newest item there puts the minute, hour and day edges around it (and the
    hours of a TZOFFSET) at the same places whenever the tests run: past
    windows are answered from the counter's newest second, not the clock."""
    return (server_second(c) // DAY - 1) * DAY + 13 * HOUR + 17 * MINUTE + 23


def grid_message(key, minutes=60, hours=48, days=31):
    """The parenthesis of the off-grid error: the counter's own figures, a
    tier it does not keep left out."""
    tiers = [("minutes", minutes), ("hours", hours), ("days", days)]
    return "(%s)" % (", ".join("%s for the last %d %s" % (unit, count, unit)
                               for unit, count in tiers if count) or "no buckets")


def off_grid(edge_us, key, **grid):
    return "ERR BETWEEN edge %d is not on the grid of '%s' %s" % (
        edge_us, key, grid_message(key, **grid))


def oldest_kept(newest, span=604800, tzoffset=0, minutes=60, hours=48, days=31):
    """The oldest second a BETWEEN edge may name, for a counter whose newest
    second is `newest`: the start of its exact span or of its oldest bucket."""
    starts = [newest - span]
    for width, count in ((MINUTE, minutes), (HOUR, hours), (DAY, days)):
        if count:
            starts.append(((newest + tzoffset) // width - count + 1) * width - tzoffset)
    return min(starts)


def out_of_retention(edge_us, key, oldest_us, **grid):
    return "ERR BETWEEN edge %d is older than what '%s' keeps: its oldest time is %d %s" % (
        edge_us, key, oldest_us, grid_message(key, **grid))


def refused_edge(edge, key, newest, span=604800, tzoffset=0, **grid):
    """The refusal of a BETWEEN edge (seconds): older than anything the
    counter keeps, or off its grid."""
    oldest = oldest_kept(newest, span, tzoffset, **grid)
    if edge < oldest:
        return out_of_retention(edge * SEC, key, oldest * SEC, **grid)
    return off_grid(edge * SEC, key, **grid)


def too_long(seconds, key, span):
    return "ERR LAST window of %d seconds is longer than the SPAN of '%s' (%d seconds)" % (
        seconds, key, span)


def uv_info(c, key):
    """FG.UVINFO as a dict of ints, checking the names and their order."""
    rep = c.execute_command("FG.UVINFO", key)
    assert isinstance(rep, list) and s(rep[0::2]) == INFO_FIELDS, rep
    assert all(isinstance(v, int) for v in rep[1::2]), rep
    return dict(zip(INFO_FIELDS, rep[1::2]))


def add_at(c, key, sec, items, us=0):
    return c.execute_command("FG.UVADDAT", key, sec * SEC + us, *items)


def add_events(c, key, events):
    """FG.UVADDAT each (second, item), in the order given."""
    p = c.pipeline(transaction=False)
    for sec, item in events:
        p.execute_command("FG.UVADDAT", key, sec * SEC, item)
    p.execute()


def uvadd(c, key, items, batch=1000):
    p = c.pipeline(transaction=False)
    for i in range(0, len(items), batch):
        p.execute_command("FG.UVADD", key, *items[i:i + batch])
    return [int(x) for x in p.execute()]


def decode_registers(hll):
    """The 16,384 6-bit registers of a dense HLL string."""
    body = hll[16:]
    out = []
    for i in range(REGISTERS):
        bit = 6 * i
        v = body[bit >> 3] >> (bit & 7)
        if (bit & 7) > 2:
            v |= body[(bit >> 3) + 1] << (8 - (bit & 7))
        out.append(v & 63)
    return out


def pf_reference(c, items):
    """(dense HLL string, PFCOUNT) of a PFADD of exactly `items`."""
    items = list(items)
    c.delete(REF)
    c.execute_command("PFADD", REF)
    for i in range(0, len(items), 1000):
        c.execute_command("PFADD", REF, *items[i:i + 1000])
    c.execute_command("PFDEBUG", "TODENSE", REF)
    dense = c.get(REF)
    count = c.pfcount(REF)
    c.delete(REF)
    assert len(dense) == HLL_BYTES and dense[:5] == b"HYLL\x00", dense[:16]
    return dense, count


def assert_hll_header(export):
    assert isinstance(export, bytes) and len(export) == HLL_BYTES, \
        (type(export), len(export) if isinstance(export, bytes) else export)
    assert export[:4] == b"HYLL", export[:16]
    assert export[4] == 0, "encoding byte %d, not dense" % export[4]
    assert export[5:8] == b"\x00\x00\x00", export[:16]


def assert_same_registers(got, want, what):
    if got[16:] == want[16:]:
        return
    g, w = decode_registers(got), decode_registers(want)
    diff = [(i, g[i], w[i]) for i in range(REGISTERS) if g[i] != w[i]]
    raise AssertionError("%s: %d registers differ from PFADD's (register, got, PFADD): %r"
                         % (what, len(diff), diff[:12]))


def check_export(c, export, items, what):
    """The exported string is PFADD's of exactly `items`; returns PFCOUNT."""
    assert_hll_header(export)
    ref, count = pf_reference(c, items)
    assert_same_registers(export, ref, what)
    c.set(EXP, export)
    assert c.pfcount(EXP) == count, what
    c.delete(EXP)
    return count


def window_argv(keys, window):
    return [keys[0]] + [str(w) for w in window] + list(keys[1:])


def check_window(c, keys, window, items, what=None):
    """FG.UVEXPORT and FG.UVCOUNT of the keys' window against a PFADD of
    `items`; returns the count."""
    what = what or "%r %r" % (keys, window)
    argv = window_argv(keys, window)
    count = check_export(c, c.execute_command("FG.UVEXPORT", *argv), items, what)
    assert c.execute_command("FG.UVCOUNT", *argv) == count, what
    return count


def between(t1, t2):
    """A BETWEEN window of whole seconds, in microseconds."""
    return ["BETWEEN", t1 * SEC, t2 * SEC]


def at_one_second(c, commands, tries=8):
    """Runs the commands in one MULTI between two TIMEs, until both TIMEs
    fall in the same second: (that second, the replies)."""
    for _ in range(tries):
        p = c.pipeline(transaction=True)
        p.time()
        for argv in commands:
            p.execute_command(*argv)
        p.time()
        replies = p.execute()
        if replies[0][0] == replies[-1][0]:
            return replies[0][0], replies[1:-1]
    raise AssertionError("the server's clock never stayed on one second")


def items_between(events, t1, t2):
    return {item for sec, item in events if t1 <= sec < t2}


def items_since(events, t1):
    return {item for sec, item in events if sec >= t1}


# -- FG.UVLOAD payloads, as an AOF rewrite writes them -----------------------------


def payload_script(n):
    """Counters built at absolute times around second n (the newest):
    'src' custom (SPAN 3600, few buckets, TZOFFSET 1800, an item older than
    its span), 'big' default with ~2,700 items over three days,
    'empty' created and never added to."""
    script = [["FG.UVCREATE", "src", "SPAN", 3600, "MINUTES", 5, "HOURS", 3, "DAYS", 2,
               "TZOFFSET", 1800],
              ["FG.UVADDAT", "src", (n - 7000) * SEC, "a", "b", "c"],
              ["FG.UVADDAT", "src", (n - 200) * SEC + 5, "d", "e", "a"],
              ["FG.UVADDAT", "src", (n - 100) * SEC, "f", "g", "h", "i", "j"],
              ["FG.UVADDAT", "src", n * SEC + 999999, "k", "l", "a"],
              ["FG.UVCREATE", "empty", "SPAN", 10, "MINUTES", 0, "HOURS", 0, "DAYS", 0]]
    rng = random.Random(7)
    for i in range(2000):
        sec = n - rng.randrange(3 * DAY) if i else n
        script.append(["FG.UVADDAT", "big", sec * SEC, "big:%d" % i, "big:%d" % (i // 3)])
    return script


def aof_payloads():
    """(script, {key: FG.UVLOAD payload}, {key: DUMP}) from a server with
    the AOF on (no RDB preamble) that ran payload_script and a rewrite."""
    srv = Server(TIMED + ["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    try:
        srv.start()
        c = srv.client(socket_timeout=60)
        wait_aof_rewrite_done(c)
        script = payload_script(server_second(c) - 5)
        p = c.pipeline(transaction=False)
        for argv in script:
            p.execute_command(*argv)
        p.execute()
        c.execute_command("BGREWRITEAOF")
        wait_aof_rewrite_done(c)
        loads = {}
        for path in aof_files(srv):
            if path.endswith(".aof"):
                for argv in read_aof_commands(path) or []:
                    if argv[0].upper() == b"FG.UVLOAD":
                        assert len(argv) == 3, argv[:2]
                        loads[s(argv[1])] = argv[2]
        assert set(loads) >= {"src", "big", "empty"}, sorted(loads)
        dumps = {k: c.dump(k) for k in loads}
        c.close()
        return script, loads, dumps
    finally:
        srv.cleanup()


@pytest.fixture(scope="module")
def payloads():
    return aof_payloads()


# -- registers: exactly PFADD's ----------------------------------------------------

ODD_ITEMS = [b"", b"\x00", b"\xff\x00\r\n", "\u00fcn\u00efc\u00f6de", "x" * 10000, b"\x80" * 7,
             "12345678", "123456789"]


@pytest.mark.parametrize("n", [1, 10, 1000, 30000])
def test_export_registers_equal_pfadd(r, n):
    items = ["item:%d" % i for i in range(n)]
    if n == 10:
        items = items[:2] + ODD_ITEMS  # binary, empty, long, every tail length
    assert uvadd(r, "uv", items)[0] == 1
    export = r.execute_command("FG.UVEXPORT", "uv", "LAST", 1, "HOURS")
    assert_hll_header(export)
    r.set("exp", export)
    r.execute_command("PFADD", "pf", *items[:1000])
    for i in range(1000, len(items), 1000):
        r.execute_command("PFADD", "pf", *items[i:i + 1000])
    r.execute_command("PFDEBUG", "TODENSE", "pf")
    r.execute_command("PFDEBUG", "TODENSE", "exp")
    a, b = r.get("exp"), r.get("pf")
    assert len(a) == len(b) == HLL_BYTES
    assert a[:5] == b[:5] == b"HYLL\x00"
    assert_same_registers(a, b, "%d items" % n)
    count = r.execute_command("FG.UVCOUNT", "uv", "LAST", 1, "HOURS")
    assert r.pfcount("exp") == r.pfcount("pf") == count
    if n <= 10:
        assert count == n
    else:
        assert abs(count - n) <= 0.03 * n, (count, n)
    # the export is a HyperLogLog PFADD and PFMERGE take as their own
    assert r.execute_command("PFADD", "exp", "one-more") in (0, 1)
    assert r.execute_command("PFADD", "pf", "one-more") in (0, 1)
    assert r.pfcount("exp") == r.pfcount("pf")
    info = uv_info(r, "uv")
    # docs/uv.md, "Memory": 3.4 MB of staircase at most, plus 16 KB a bucket
    assert 0 < info["bytes"] <= 3_400_000 + 16_400 * info["buckets"], info


def test_exports_merge_like_pfmerge(r):
    uvadd(r, "a", ["a%d" % i for i in range(300)] + ["both%d" % i for i in range(200)])
    uvadd(r, "b", ["b%d" % i for i in range(400)] + ["both%d" % i for i in range(200)])
    r.set("ea", r.execute_command("FG.UVEXPORT", "a", "LAST", 1, "HOURS"))
    r.set("eb", r.execute_command("FG.UVEXPORT", "b", "LAST", 1, "HOURS"))
    assert ok(r.execute_command("PFMERGE", "m", "ea", "eb"))
    union = r.execute_command("FG.UVCOUNT", "a", "LAST", 1, "HOURS", "b")
    assert r.pfcount("m") == r.pfcount("ea", "eb") == union
    r.execute_command("PFDEBUG", "TODENSE", "m")
    assert_same_registers(r.get("m"), r.execute_command("FG.UVEXPORT", "a", "LAST", 1, "HOURS",
                                                        "b"), "PFMERGE of two exports")


# -- FG.UVADD / FG.UVADDAT replies -------------------------------------------------


def test_add_replies_like_pfadd(r):
    assert r.execute_command("PFADD", "pf", "a", "b", "c") == 1
    assert r.execute_command("PFADD", "pf", "a", "b", "c") == 0
    now = server_second(r)
    m = (now - 10 * MINUTE) // MINUTE * MINUTE
    t = m + 30
    assert add_at(r, "k", t, ["a", "b", "c"]) == 1
    assert add_at(r, "k", t, ["a", "b", "c"], us=999999) == 0  # the same second
    assert add_at(r, "k", t, ["b"]) == 0
    assert add_at(r, "k", t, ["a", "d"]) == 1
    # a later second is a newer time for the same rank: the counter changes
    assert add_at(r, "k", t + 1, ["a"]) == 1
    assert add_at(r, "k", t + 1, ["a"]) == 0
    # older, in the same minute (and hour, day): dominated, nothing changes
    before = r.dump("k")
    assert add_at(r, "k", t - 1, ["a", "b"]) == 0
    assert r.dump("k") == before
    # older, in the previous minute: that minute's bucket changes
    assert check_window(r, ["k"], between(m - MINUTE, m), []) == 0
    assert add_at(r, "k", t - 40, ["a"]) == 1
    assert check_window(r, ["k"], between(m - MINUTE, m), ["a"]) == 1
    assert check_window(r, ["k"], between(m, m + MINUTE), ["a", "b", "c", "d"]) == 4
    # older than the span and every retention: changes nothing
    before = r.dump("k")
    assert add_at(r, "k", now - 40 * DAY, ["zz", "a"]) == 0
    assert add_at(r, "k", 0, ["zz"]) == 0
    assert r.dump("k") == before
    # FG.UVADD: 1, then 0 for the same items in the same second
    second, replies = at_one_second(r, [["FG.UVADD", "n", "x", "y"], ["FG.UVADD", "n", "y", "x"],
                                        ["FG.UVADD", "n", "x", "z"]])
    assert replies == [1, 0, 1]
    assert uv_info(r, "n")["newest_us"] == second * SEC


def test_add_creates_with_defaults(r):
    assert r.execute_command("FG.UVADD", "k", "x") == 1
    info = uv_info(r, "k")
    assert {f: info[f] for f in DEFAULTS} == DEFAULTS
    assert add_at(r, "k2", server_second(r) - 100, ["x"]) == 1
    assert {f: uv_info(r, "k2")[f] for f in DEFAULTS} == DEFAULTS
    assert r.type("k") == r.type("k2") == b"fg-uvcntr"


def test_expired_counter_comes_back_with_defaults(r):
    assert ok(r.execute_command("FG.UVCREATE", "k", "SPAN", 3600, "MINUTES", 5))
    assert r.execute_command("FG.UVADD", "k", "x") == 1
    assert r.pexpire("k", 30)
    wait_for(lambda: r.exists("k") == 0, timeout=10)
    assert r.execute_command("FG.UVADD", "k", "x") == 1
    info = uv_info(r, "k")
    assert {f: info[f] for f in DEFAULTS} == DEFAULTS
    assert r.ttl("k") == -1


# -- LAST windows ------------------------------------------------------------------


def test_last_windows(r):
    t = server_second(r)
    events = [(t - 3600, "old:%d" % i) for i in range(5)] + \
             [(t - 120, "mid:%d" % i) for i in range(7)] + [(t, "now:%d" % i) for i in range(3)]
    add_events(r, "k", events)
    windows = [(1, "MINUTES"), (5, "MINUTES"), (2, "HOURS"), (1, "HOURS"), (3601, "SECONDS"),
               (3600, "seconds"), (1, "Hour"), (60, "minute"), (1, "DAYS"), (7, "day"),
               (1, "second"), (121, "SECONDS"), (120, "Seconds")]
    cmds = []
    for n, unit in windows:
        cmds += [["FG.UVEXPORT", "k", "LAST", n, unit], ["FG.UVCOUNT", "k", "LAST", n, unit]]
    now, replies = at_one_second(r, cmds)
    assert now >= t
    for i, (n, unit) in enumerate(windows):
        seconds = n * {"s": 1, "m": MINUTE, "h": HOUR, "d": DAY}[unit[0].lower()]
        want = items_since(events, now - seconds + 1)
        count = check_export(r, replies[2 * i], want, "LAST %d %s" % (n, unit))
        assert replies[2 * i + 1] == count == len(want), (n, unit, replies[2 * i + 1], len(want))
    # the brief's figures, whatever second it is now (within a minute)
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 1, "MINUTES") == 3
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 5, "MINUTES") == 10
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 2, "HOURS") == 15


def test_last_seconds_exact_to_the_second(r):
    t = server_second(r)
    events = [(t - k, "s%d" % k) for k in range(12)] + [(t - k, "again") for k in (3, 9)]
    rng = random.Random(3)
    rng.shuffle(events)
    add_events(r, "k", events)  # out of order: backfills
    cmds = [["FG.UVEXPORT", "k", "LAST", n, "SECONDS"] for n in range(1, 16)]
    now, replies = at_one_second(r, cmds)
    for n, export in zip(range(1, 16), replies):
        check_export(r, export, items_since(events, now - n + 1), "LAST %d SECONDS" % n)


def test_last_windows_of_an_idle_counter(r):
    """LAST ends at the server's clock, not at the counter's newest item."""
    now = server_second(r)
    events = [(now - 9 * DAY, "a"), (now - 5 * DAY, "b"), (now - 3 * DAY, "c"),
              (now - 3 * DAY - 100, "d"), (now - 3 * DAY + 1, "e")]
    add_events(r, "k", events)
    assert ok(r.execute_command("FG.UVCREATE", "h", "SPAN", 3600))
    add_events(r, "h", [(now - 7300, "x"), (now - 7200, "y")])
    windows = [(7, "DAYS"), (5, "DAYS"), (4, "DAYS"), (3, "DAYS"), (3 * DAY + 1, "SECONDS"),
               (3 * DAY - 1, "SECONDS"), (1, "DAYS"), (1, "HOURS")]
    now, replies = at_one_second(
        r, [["FG.UVEXPORT", "k", "LAST", n, unit] for n, unit in windows] +
        [["FG.UVEXPORT", "h", "LAST", 1, "HOURS"], ["FG.UVCOUNT", "h", "LAST", 3600, "SECONDS"]])
    for (n, unit), export in zip(windows, replies):
        seconds = n * (DAY if unit == "DAYS" else HOUR if unit == "HOURS" else 1)
        check_export(r, export, items_since(events, now - seconds + 1), "LAST %d %s" % (n, unit))
    check_export(r, replies[-2], [], "an idle SPAN 3600 counter")
    assert replies[-1] == 0


def test_years_of_history(r):
    """Adds at times years in the past, moving forward by ~3.7 days: the
    staircase prunes and rebases (every ~388 days) and the tiers roll, and
    every window stays exact (windows ending after the newest item need no
    clock; day-grid windows come from the day buckets)."""
    t0 = 1_000_000_000
    for key, span in (("h30", 30 * DAY), ("h180", 15552000)):
        assert ok(r.execute_command("FG.UVCREATE", key, "SPAN", span))
    events = []
    for i in range(320):
        t = t0 + i * 320_000 + (i * 7919) % HOUR
        step = [(t, "e%d:%d" % (i, j)) for j in range(3)] + [(t, "always"),
                                                             (t - 5, "re%d" % (i % 10))]
        events += step
        for key in ("h30", "h180"):
            add_events(r, key, step)
        if i % 3:
            continue
        dd = t // DAY * DAY
        for key, t1 in (("h30", t - 20 * DAY + 13), ("h180", t - 170 * DAY + 17)):
            check_window(r, [key], between(t1, t + 1), items_between(events, t1, t + 1),
                         "%s step %d" % (key, i))
        check_window(r, ["h30"], between(dd - 25 * DAY, dd - 5 * DAY),
                     items_between(events, dd - 25 * DAY, dd - 5 * DAY), "days, step %d" % i)
    assert uv_info(r, "h30")["newest_us"] == t * SEC
    for key in ("h30", "h180"):
        dump = r.dump(key)
        assert ok(r.execute_command("RESTORE", key + ":copy", 0, dump))
        assert r.dump(key + ":copy") == dump
        check_window(r, [key + ":copy"], between(t - 10 * DAY, t + 1),
                     items_between(events, t - 10 * DAY, t + 1))
    # then a jump of twenty years to now: the old history is gone at once
    now = server_second(r) - 100
    recent = [(now - 10, "late:0"), (now, "late:1"), (now, "e0:0")]
    for key in ("h30", "h180"):
        add_events(r, key, recent)
        check_window(r, [key], ["LAST", 30, "DAYS"], ["late:0", "late:1", "e0:0"], key)
        check_window(r, [key], between(now - 10, now + 1), ["late:0", "late:1", "e0:0"], key)
        assert add_at(r, key, t, ["e1:0", "never-seen"]) == 0
        dump = r.dump(key)
        r.delete(key + ":copy")
        assert ok(r.execute_command("RESTORE", key + ":copy", 0, dump))
        assert r.dump(key + ":copy") == dump


def test_near_the_epoch(r):
    """Seconds near 0 with the widest TZOFFSETs: negative bucket numbers."""
    for tz in (-86400, 86400, -60):
        key = "e%d" % tz
        assert ok(r.execute_command("FG.UVCREATE", key, "TZOFFSET", tz))
        events = [(0, "zero"), (59, "a"), (60, "b"), (1799, "c"), (1800, "d"), (3000, "e")]
        add_events(r, key, events)
        for t1, t2 in [(0, 60), (60, 1800), (0, 1800), (0, 3001), (1800, 3001), (1, 3600)]:
            check_window(r, [key], between(t1, t2), items_between(events, t1, t2),
                         "%s [%d, %d)" % (key, t1, t2))
        assert error_of(r, "FG.UVCOUNT", key, *between(0, 1)) == off_grid(SEC, key)
        dump = r.dump(key)
        assert ok(r.execute_command("RESTORE", key + ":copy", 0, dump))
        assert r.dump(key + ":copy") == dump
        assert uv_info(r, key + ":copy")["newest_us"] == 3000 * SEC


def test_last_longer_than_span_is_refused(r):
    assert ok(r.execute_command("FG.UVCREATE", "h", "SPAN", 3600))
    assert r.execute_command("FG.UVADD", "h", "x") == 1
    assert error_of(r, "FG.UVCOUNT", "h", "LAST", 2, "HOURS") == too_long(7200, "h", 3600)
    assert error_of(r, "FG.UVCOUNT", "h", "LAST", 3601, "SECONDS") == too_long(3601, "h", 3600)
    assert error_of(r, "FG.UVEXPORT", "h", "LAST", 61, "MINUTES") == too_long(3660, "h", 3600)
    assert r.execute_command("FG.UVCOUNT", "h", "LAST", 3600, "SECONDS") == 1
    assert r.execute_command("FG.UVCOUNT", "h", "LAST", 60, "MINUTES") == 1
    assert r.execute_command("FG.UVCOUNT", "h", "LAST", 1, "HOURS") == 1
    # the default span: 7 days
    assert r.execute_command("FG.UVADD", "d", "y") == 1
    assert r.execute_command("FG.UVCOUNT", "d", "LAST", 7, "DAYS") == 1
    assert r.execute_command("FG.UVCOUNT", "d", "LAST", 168, "HOURS") == 1
    assert error_of(r, "FG.UVCOUNT", "d", "LAST", 8, "DAYS") == too_long(691200, "d", 604800)
    assert error_of(r, "FG.UVCOUNT", "d", "LAST", 604801, "SECONDS") == \
        too_long(604801, "d", 604800)
    # in a union, the key whose span is too short is named
    assert error_of(r, "FG.UVCOUNT", "d", "LAST", 2, "HOURS", "h") == too_long(7200, "h", 3600)
    assert error_of(r, "FG.UVSTORE", "dst", "d", "LAST", 2, "HOURS", "nokey", "h") == \
        too_long(7200, "h", 3600)
    assert r.exists("dst") == 0
    # SPAN 1: the current second only
    assert ok(r.execute_command("FG.UVCREATE", "one", "SPAN", 1))
    assert r.execute_command("FG.UVADD", "one", "x") == 1
    assert r.execute_command("FG.UVCOUNT", "one", "LAST", 1, "SECONDS") in (0, 1)
    assert error_of(r, "FG.UVCOUNT", "one", "LAST", 2, "SECONDS") == too_long(2, "one", 1)


# -- BETWEEN windows: the grid ------------------------------------------------------


def grid_events(n):
    """Items in many minutes, hours and days before second n (the newest),
    at the edges of some, and one item seen in several of them."""
    m, hh, dd = n // MINUTE * MINUTE, n // HOUR * HOUR, n // DAY * DAY
    ev = []
    for k in range(1, 70):
        ev += [(m - k * MINUTE + (k * 7) % MINUTE, "m%d:%d" % (k, j)) for j in range(2)]
    for k in range(1, 52):
        ev += [(hh - k * HOUR + (k * 337) % HOUR, "h%d:%d" % (k, j)) for j in range(2)]
    for k in range(1, 36):
        ev += [(dd - k * DAY + (k * 7919) % DAY, "d%d:%d" % (k, j)) for j in range(2)]
    for name, sec in (("m20", m - 20 * MINUTE), ("h5", hh - 5 * HOUR), ("d2", dd - 2 * DAY)):
        ev += [(sec, "edge:" + name), (sec - 1, "edge:%s-1" % name)]
    ev += [(n, "n:0"), (n, "n:1"), (n - 1, "n:-1"), (n - 50, "n:-50"), (n - 51, "n:-51")]
    ev += [(sec, "shared") for sec in (m - 3 * MINUTE + 1, hh - 10 * HOUR + 5,
                                        dd - 5 * DAY + 7, n - 2)]
    return ev


@pytest.fixture
def grid(r):
    """'uv' (events shuffled), 'sorted' (in time order), 'odd' and 'even'
    (halves of the events): all with newest second n (13:17:23)."""
    n = fixed_second(r)
    events = grid_events(n)
    shuffled = list(events)
    random.Random(11).shuffle(shuffled)
    add_events(r, "uv", shuffled)
    add_events(r, "sorted", sorted(events))
    add_events(r, "odd", shuffled[1::2])
    add_events(r, "even", shuffled[0::2])
    assert uv_info(r, "uv")["newest_us"] == n * SEC
    return n, events


def answerable_windows(n, now):
    m, hh, dd = n // MINUTE * MINUTE, n // HOUR * HOUR, n // DAY * DAY
    return {
        "30 to 20 minutes ago": (m - 30 * MINUTE, m - 20 * MINUTE),
        "the last 59 whole minutes": (m - 59 * MINUTE, m),
        "one minute, starting on an item": (m - 20 * MINUTE, m - 19 * MINUTE),
        "40 to 30 hours ago": (hh - 40 * HOUR, hh - 30 * HOUR),
        "47 to 5 hours ago": (hh - 47 * HOUR, hh - 5 * HOUR),
        "5 hours to this hour": (hh - 5 * HOUR, hh),
        "30 to 2 days ago": (dd - 30 * DAY, dd - 2 * DAY),
        "the last 2 whole days": (dd - 2 * DAY, dd),
        "one day, 20 days ago": (dd - 20 * DAY, dd - 19 * DAY),
        "hours then minutes": (hh - 3 * HOUR, m),
        "days, hours, minutes": (dd - 2 * DAY, m),
        "days then hours": (dd - 10 * DAY, hh - 3 * HOUR),
        "staircase: the last 51 seconds": (n - 50, n + 1),
        "staircase: 3 days, off the grid": (n - 3 * DAY + 17, n + 1),
        "staircase: nearly the span": (n - 7 * DAY + 60, n + 100),
        "days, then the staircase": (dd - 10 * DAY, n + 1),
        "staircase from 45 minutes": (m - 45 * MINUTE, n + 1),
        "after the newest item": (n + 10, n + 20),
        "into the future": (n - 2, now + 3600),
    }


def test_between_windows_on_the_grid(r, grid):
    n, events = grid
    for name, (t1, t2) in answerable_windows(n, server_second(r)).items():
        want = items_between(events, t1, t2)
        for keys in (["uv"], ["sorted"], ["odd", "even"], ["even", "nokey", "odd"]):
            check_window(r, keys, between(t1, t2), want, "%s %r" % (name, keys))
    # edges are truncated to the second
    m = n // MINUTE * MINUTE
    want = items_between(events, m - 30 * MINUTE, m - 20 * MINUTE)
    check_window(r, ["uv"], ["BETWEEN", (m - 30 * MINUTE) * SEC + 999999,
                             (m - 20 * MINUTE) * SEC + 1], want, "sub-second edges")
    # the edge items: half-open windows
    assert "edge:m20" not in want and "edge:m20-1" in want
    assert "n:-50" in items_between(events, n - 50, n + 1)
    assert "n:-51" not in items_between(events, n - 50, n + 1)


def test_between_off_the_grid_is_refused(r, grid):
    n, events = grid
    m, hh, dd = n // MINUTE * MINUTE, n // HOUR * HOUR, n // DAY * DAY
    old_minute = m - 65 * MINUTE  # 12:12, beyond the 60 minutes kept
    early = n - 100  # 13:15:43
    ancient = n - 8 * DAY + 17
    cases = [  # (t1, t2, the edge named)
        (old_minute, old_minute + MINUTE, old_minute),       # minutes kept: 60
        (m - 30 * MINUTE, m - 20 * MINUTE + 17, m - 20 * MINUTE + 17),
        (m - 30 * MINUTE + 17, m - 20 * MINUTE, m - 30 * MINUTE + 17),
        (early, n - 50, early),                              # a past window, off the grid
        (hh - 50 * HOUR, hh - 49 * HOUR, hh - 50 * HOUR),    # hours kept: 48
        (dd - 33 * DAY, dd - 32 * DAY, dd - 33 * DAY),       # days kept: 31
        (0, 1, 0),
        (ancient, n + 1, ancient),                           # older than the span
        # the start on the grid, the end not: the end is named
        (m - 30 * MINUTE, m - 30 * MINUTE + 1, m - 30 * MINUTE + 1),
        (m - 30 * MINUTE, m - 30 * MINUTE + 59, m - 30 * MINUTE + 59),
        (hh - 5 * HOUR, hh - 5 * HOUR + 30 * MINUTE, hh - 5 * HOUR + 30 * MINUTE),
        (dd - 20 * DAY, dd - 20 * DAY + 3 * HOUR, dd - 20 * DAY + 3 * HOUR),
    ]
    for t1, t2, edge in cases:
        for cmd in (["FG.UVCOUNT", "uv"], ["FG.UVEXPORT", "uv"], ["FG.UVSTORE", "dst", "uv"]):
            assert error_of(r, *cmd, *between(t1, t2)) == refused_edge(edge, "uv", n), \
                (cmd, t1 - n, t2 - n)
        # in a union, the key off whose grid the edge is, is named
        assert error_of(r, "FG.UVCOUNT", "nokey", *between(t1, t2), "sorted") == \
            refused_edge(edge, "sorted", n)
    assert r.exists("dst") == 0
    # the same windows on missing keys: empty, nothing refused
    assert r.execute_command("FG.UVCOUNT", "nokey", *between(hh - 50 * HOUR, hh - 49 * HOUR),
                             "nokey2") == 0


def test_an_edge_older_than_what_is_kept_says_so(r, server):
    """A UTC midnight beyond the 31 days kept is on the day grid: the error
    says it is older than what the key keeps, and names the oldest time
    kept (the old example of docs/uv.md, 2025-11-21 to 2025-11-22, once a
    month had passed). One second later, the oldest time itself is
    answered; the midnight before it is refused."""
    n = server_second(r)
    r.execute_command("FG.UVADDAT", "page:home", n * SEC, "alice")
    oldest = oldest_kept(n)
    assert oldest == (n // DAY - 30) * DAY
    for t1, t2 in [(1763683200, 1763769600), (oldest - DAY, oldest), (oldest - DAY, n + 1)]:
        assert error_of(r, "FG.UVCOUNT", "page:home", *between(t1, t2)) == \
            out_of_retention(t1 * SEC, "page:home", oldest * SEC)
    assert r.execute_command("FG.UVCOUNT", "page:home", *between(oldest, oldest + DAY)) == 0
    # off the grid within what is kept is still "not on the grid"
    assert error_of(r, "FG.UVCOUNT", "page:home", *between(oldest + 1, oldest + DAY)) == \
        off_grid((oldest + 1) * SEC, "page:home")
    # no buckets: the oldest time is the SPAN's
    r.execute_command("FG.UVCREATE", "nob", "SPAN", 3600, "MINUTES", 0, "HOURS", 0, "DAYS", 0)
    r.execute_command("FG.UVADDAT", "nob", n * SEC, "x")
    assert error_of(r, "FG.UVCOUNT", "nob", *between(n - 3601, n + 1)) == \
        out_of_retention((n - 3601) * SEC, "nob", (n - 3600) * SEC, minutes=0, hours=0, days=0)


def test_the_documented_between_example_works_on_any_date(r, server):
    """docs/uv.md's shell example counts yesterday (UTC) by dates computed
    when it runs: run as written, on a counter with items yesterday and
    today."""
    today = server_second(r) // DAY * DAY
    r.execute_command("FG.UVADDAT", "page:home", (today - DAY) * SEC, "alice", "bob")
    r.execute_command("FG.UVADDAT", "page:home", (today - 1) * SEC, "carol")
    r.execute_command("FG.UVADDAT", "page:home", (today - DAY - 1) * SEC, "before")
    r.execute_command("FG.UVADD", "page:home", "today")
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "uv.md")) as f:
        lines = [x for x in f.read().splitlines()
                 if x.startswith("redis-cli FG.UVCOUNT page:home BETWEEN")]
    assert len(lines) == 1, lines
    command = lines[0].replace("redis-cli ", "redis-cli -p %d " % server.port, 1)
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    if server_second(r) // DAY * DAY != today:
        pytest.skip("the test ran across midnight UTC")
    assert out.returncode == 0 and out.stdout.strip() == "3", (out.stdout, out.stderr)


def test_grid_of_custom_counters(r):
    """MINUTES/HOURS/DAYS set what is kept, TZOFFSET where hours and days
    begin; the refusal names the counter's own figures. The newest item at
    13:17:23: 12:57 is off the hours of every counter, the :30 ones too."""
    n = fixed_second(r)
    assert ok(r.execute_command("FG.UVCREATE", "tz", "TZOFFSET", 1800))
    assert ok(r.execute_command("FG.UVCREATE", "ny", "TZOFFSET", -18000))
    assert ok(r.execute_command("FG.UVCREATE", "small", "MINUTES", 10, "HOURS", 5, "DAYS", 3,
                                "TZOFFSET", 1800))
    assert ok(r.execute_command("FG.UVCREATE", "nomin", "MINUTES", 0))
    assert ok(r.execute_command("FG.UVCREATE", "none", "MINUTES", 0, "HOURS", 0, "DAYS", 0))
    events = grid_events(n)
    for key in ("tz", "ny", "small", "nomin", "none"):
        add_events(r, key, events)
    hh30 = (n + 1800) // HOUR * HOUR - 1800       # hours begin at :30
    dd30 = (n + 1800) // DAY * DAY - 1800
    dd_ny = (n - 18000) // DAY * DAY + 18000      # days begin at 05:00 UTC
    hh, dd, m = n // HOUR * HOUR, n // DAY * DAY, n // MINUTE * MINUTE
    for key, t1, t2 in [("tz", hh30 - 5 * HOUR, hh30 - 2 * HOUR),
                        ("tz", dd30 - 3 * DAY, dd30 - DAY),
                        ("tz", dd30 - 3 * DAY, m),
                        ("ny", dd_ny - 3 * DAY, dd_ny - DAY),
                        ("ny", hh - 5 * HOUR, hh - 2 * HOUR),
                        ("small", m - 9 * MINUTE, m),
                        ("small", hh30 - 4 * HOUR, hh30),
                        ("small", dd30 - 2 * DAY, dd30),
                        ("nomin", hh - 5 * HOUR, hh),
                        ("none", n - 3 * DAY + 1, n + 1)]:
        check_window(r, [key], between(t1, t2), items_between(events, t1, t2),
                     "%s [%d, %d)" % (key, t1 - n, t2 - n))
    small = {"minutes": 10, "hours": 5, "days": 3}
    for key, t1, t2, edge, grid in [
            ("tz", hh - 5 * HOUR, hh - 2 * HOUR, hh - 5 * HOUR, {}),  # hours begin at :30
            ("ny", dd - 3 * DAY, dd - DAY, dd - 3 * DAY, {}),         # days at 05:00 UTC
            ("small", m - 20 * MINUTE, m - 19 * MINUTE, m - 20 * MINUTE, small),
            ("small", hh30 - 6 * HOUR, hh30 - 5 * HOUR, hh30 - 6 * HOUR, small),
            ("small", dd30 - 4 * DAY, dd30 - 3 * DAY, dd30 - 4 * DAY, small),
            ("nomin", m - 20 * MINUTE, m - 19 * MINUTE, m - 20 * MINUTE,
             {"minutes": 0}),
            ("none", hh - 5 * HOUR, hh - 2 * HOUR, hh - 5 * HOUR,
             {"minutes": 0, "hours": 0, "days": 0})]:
        assert error_of(r, "FG.UVCOUNT", key, *between(t1, t2)) == \
            off_grid(edge * SEC, key, **grid), (key, t1 - n, t2 - n)


def test_staircase_and_buckets_meet(r):
    """SPAN 60: a window that starts a few minutes back takes minute
    buckets up to the span, then the staircase, exact to the second (the
    newest item at 13:17:23)."""
    n = fixed_second(r)
    m = n // MINUTE * MINUTE
    assert ok(r.execute_command("FG.UVCREATE", "k", "SPAN", 60))
    events = [(m - 2 * MINUTE + 5, "x"), (m - MINUTE - 1, "y"), (n - 30, "z"), (n, "w")]
    add_events(r, "k", events)
    for t1, t2 in [(m - 2 * MINUTE, n + 1), (m - MINUTE, n + 1), (n - 30, n + 1),
                   (n - 29, n + 1), (m - 3 * MINUTE, m - MINUTE)]:
        check_window(r, ["k"], between(t1, t2), items_between(events, t1, t2),
                     "[%d, %d)" % (t1 - n, t2 - n))
    assert error_of(r, "FG.UVCOUNT", "k", *between(n - 100, n + 1)) == \
        off_grid((n - 100) * SEC, "k")
    # SPAN 3600: a window from exactly newest - SPAN is exact; the item one
    # second older, added first, stays in the staircase but must not show
    assert ok(r.execute_command("FG.UVCREATE", "h", "SPAN", 3600))
    events = [(n - 3601, "old"), (n - 3600, "edge"), (n - 1800, "mid"), (n, "new")]
    add_events(r, "h", events)
    check_window(r, ["h"], between(n - 3600, n + 1), ["edge", "mid", "new"])
    assert error_of(r, "FG.UVCOUNT", "h", *between(n - 3601, n + 1)) == \
        off_grid((n - 3601) * SEC, "h")


# -- the future and the clock --------------------------------------------------------


def test_future(r):
    now_us = server_us(r)
    assert error_of(r, "FG.UVADDAT", "k", now_us + 90 * SEC, "x") == \
        "ERR unix_us is more than 60 seconds in the future"
    assert error_of(r, "FG.UVADDAT", "k", now_us + 3600 * SEC, "x") == \
        "ERR unix_us is more than 60 seconds in the future"
    assert r.exists("k") == 0
    future = now_us // SEC + 30
    assert r.execute_command("FG.UVADDAT", "k", future * SEC + 7, "x") == 1
    assert uv_info(r, "k")["newest_us"] == future * SEC
    # items stamped after "now" count in LAST windows
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 1, "SECONDS") == 1
    _, (added, export) = at_one_second(r, [["FG.UVADD", "k", "y"],
                                           ["FG.UVEXPORT", "k", "LAST", 1, "SECONDS"]])
    assert added == 1  # a new item, or (on a retry) a newer second
    check_export(r, export, ["x", "y"], "LAST 1 SECONDS with an item in the future")
    assert uv_info(r, "k")["newest_us"] == future * SEC
    # and in BETWEEN windows that contain them
    check_window(r, ["k"], between(future, future + 1), ["x"])
    check_window(r, ["k"], between(future + 1, future + 100), [])


# -- unions, FG.UVSTORE ----------------------------------------------------------------


def test_multi_key_union(r):
    t = server_second(r) - 3
    a = ["a%d" % i for i in range(500)] + ["ab%d" % i for i in range(100)]
    b = ["b%d" % i for i in range(200)] + ["ab%d" % i for i in range(100)]
    c = ["c%d" % i for i in range(50)] + ["a%d" % i for i in range(50)]
    for key, items in (("a", a), ("b", b), ("c", c)):
        assert add_at(r, key, t, items) == 1
    union = set(a) | set(b) | set(c)
    count = check_window(r, ["a", "b", "c"], ["LAST", 1, "HOURS"], union)
    _, want = pf_reference(r, union)
    assert count == want
    check_window(r, ["a", "nokey", "b", "c", "nokey2"], ["LAST", 1, "HOURS"], union)
    check_window(r, ["a", "a", "a"], ["LAST", 1, "HOURS"], a)
    check_window(r, ["nokey", "c"], between(t, t + 1), c)
    # all missing: an empty HyperLogLog
    for window in (["LAST", 1, "HOURS"], between(t, t + 1), between(1, 2)):
        assert check_window(r, ["x", "y", "z"], window, []) == 0
        assert check_window(r, ["x"], window, []) == 0
    assert r.exists("x", "y", "z") == 0


def test_store(r):
    t = server_second(r) - 3
    assert add_at(r, "a", t, ["x%d" % i for i in range(100)]) == 1
    assert add_at(r, "b", t, ["y%d" % i for i in range(50)] + ["x1"]) == 1
    r.set("dst", "old", ex=1000)
    n = r.execute_command("FG.UVSTORE", "dst", "a", "LAST", 1, "HOURS", "b")
    assert n == r.execute_command("FG.UVCOUNT", "a", "LAST", 1, "HOURS", "b")
    assert r.type("dst") == b"string" and r.ttl("dst") == -1
    stored = r.get("dst")
    assert stored == r.execute_command("FG.UVEXPORT", "a", "LAST", 1, "HOURS", "b")
    assert n == check_export(r, stored, ["x%d" % i for i in range(100)] +
                             ["y%d" % i for i in range(50)], "FG.UVSTORE")
    assert r.pfcount("dst") == n
    # another type, with a TTL: replaced, TTL dropped
    r.rpush("lst", "a", "b")
    r.expire("lst", 1000)
    _, want = pf_reference(r, ["y%d" % i for i in range(50)] + ["x1"])
    assert r.execute_command("FG.UVSTORE", "lst", "b", *between(t, t + 1)) == want
    assert r.type("lst") == b"string" and r.ttl("lst") == -1 and r.pfcount("lst") == want
    # a counter as the destination, even one of the sources
    assert r.execute_command("FG.UVSTORE", "a", "a", "LAST", 1, "HOURS", "b") == n
    assert r.type("a") == b"string" and r.pfcount("a") == n
    # nothing to count: an empty HyperLogLog
    assert r.execute_command("FG.UVSTORE", "e", "nokey", "LAST", 1, "HOURS") == 0
    check_export(r, r.get("e"), [], "empty store")
    assert r.exists("nokey") == 0


# -- FG.UVCREATE, FG.UVINFO ----------------------------------------------------------


def test_create_and_info(r):
    assert ok(r.execute_command("FG.UVCREATE", "c"))
    info = uv_info(r, "c")
    assert info == dict(DEFAULTS, newest_us=0, entries=0, buckets=0, bytes=info["bytes"])
    assert info["bytes"] > 0
    assert error_of(r, "FG.UVCREATE", "c") == "ERR key exists"
    assert error_of(r, "FG.UVCREATE", "c", "SPAN", 10) == "ERR key exists"
    r.set("str", "v")
    assert error_of(r, "FG.UVCREATE", "str") == "ERR key exists"
    assert r.get("str") == b"v" and uv_info(r, "c") == info
    assert r.execute_command("FG.UVCOUNT", "c", "LAST", 1, "HOURS") == 0
    assert r.execute_command("FG.UVCOUNT", "c", "LAST", 7, "DAYS") == 0
    for key, opts, want in [
            ("c1", ["TZOFFSET", -3600, "DAYS", 0, "HOURS", 744, "MINUTES", 1440, "SPAN", 15552000],
             {"span": 15552000, "minutes": 1440, "hours": 744, "days": 0, "tzoffset": -3600}),
            ("c2", ["SPAN", 1, "MINUTES", 0, "HOURS", 0, "DAYS", 1100, "TZOFFSET", 86400],
             {"span": 1, "minutes": 0, "hours": 0, "days": 1100, "tzoffset": 86400}),
            ("c3", ["TZOFFSET", -86400], dict(DEFAULTS, tzoffset=-86400)),
            ("c4", ["HOURS", 1], dict(DEFAULTS, hours=1)),
            ("c5", ["TZOFFSET", 19800, "SPAN", 86400],
             dict(DEFAULTS, tzoffset=19800, span=86400))]:
        assert ok(r.execute_command("FG.UVCREATE", key, *opts)), key
        got = uv_info(r, key)
        assert {f: got[f] for f in DEFAULTS} == want, (key, got)
        assert r.execute_command("FG.UVADD", key, "x") == 1
        assert {f: uv_info(r, key)[f] for f in DEFAULTS} == want, key


def test_info_figures(r):
    assert ok(r.execute_command("FG.UVCREATE", "c"))
    empty_bytes = uv_info(r, "c")["bytes"]
    t = server_second(r) - 120
    items = ["a%d" % i for i in range(50)]
    assert add_at(r, "c", t, items, us=123456) == 1
    info = uv_info(r, "c")
    regs = decode_registers(pf_reference(r, items)[0])
    # one second: one entry (its highest rank) per register hit
    assert info["newest_us"] == t * SEC
    assert info["entries"] == sum(1 for v in regs if v), info
    assert info["buckets"] == 3, info  # a minute, an hour and a day
    assert info["bytes"] > empty_bytes
    usage = r.memory_usage("c")
    assert info["bytes"] <= usage <= info["bytes"] + 1024, (info, usage)
    # a second minute (and maybe hour, day) bucket
    t2 = t - 61
    assert add_at(r, "c", t2, ["b"]) == 1
    buckets = 2 + len({t // HOUR, t2 // HOUR}) + len({t // DAY, t2 // DAY})
    info2 = uv_info(r, "c")
    assert info2["buckets"] == buckets, info2
    assert info2["newest_us"] == t * SEC and info2["entries"] >= info["entries"]
    # no tiers: no buckets
    assert ok(r.execute_command("FG.UVCREATE", "n", "MINUTES", 0, "HOURS", 0, "DAYS", 0))
    assert add_at(r, "n", t, items) == 1
    assert uv_info(r, "n")["buckets"] == 0
    assert uv_info(r, "n")["entries"] == info["entries"]
    assert error_of(r, "FG.UVINFO", "nokey") == "ERR no such key"


# -- FG.UVLOAD ---------------------------------------------------------------------------


@pytest.mark.usefixtures("effect_commands")  # FG.UVLOAD
def test_load_the_aof_payloads(r, payloads):
    """The payloads an AOF rewrite wrote restore the very counters: the same
    DUMP as the originals and as counters rebuilt here by the same adds."""
    script, loads, dumps = payloads
    for key, payload in loads.items():
        assert ok(r.execute_command("FG.UVLOAD", "copy:" + key, payload)), key
        assert r.dump("copy:" + key) == dumps[key], key
        assert error_of(r, "FG.UVLOAD", "copy:" + key, payload) == "ERR key exists"
    p = r.pipeline(transaction=False)
    for argv in script:
        p.execute_command(*argv)
    p.execute()
    for key in loads:
        assert r.dump(key) == dumps[key], key
        # the same memory too: blocks get room by what they hold, not by
        # how they came to hold it
        assert uv_info(r, key) == uv_info(r, "copy:" + key)
        windows = {"big": [["LAST", 1, "HOURS"], ["LAST", 7, "DAYS"]],
                   "src": [["LAST", 1, "HOURS"], ["LAST", 10, "SECONDS"]],
                   "empty": [["LAST", 10, "SECONDS"]]}[key]
        for window in windows:
            _, (mine, copy) = at_one_second(r, [["FG.UVEXPORT", key, *window],
                                                ["FG.UVEXPORT", "copy:" + key, *window]])
            assert mine == copy, (key, window)
    assert uv_info(r, "copy:empty")["entries"] == 0
    assert uv_info(r, "copy:src")["tzoffset"] == 1800
    r.set("str", "v")
    assert error_of(r, "FG.UVLOAD", "str", loads["src"]) == "ERR key exists"
    assert r.get("str") == b"v"


# -- WATCH, keyspace events, INFO ------------------------------------------------------


class Events:
    """Module keyspace events (class d) under a key prefix; each drain ends
    with a marker write, so it holds every event sent before it."""

    MARKER = "ev:marker"

    def __init__(self, c, flags="Kd"):
        self.c = c
        self.old = c.config_get("notify-keyspace-events")["notify-keyspace-events"]
        c.config_set("notify-keyspace-events", flags)
        self.ps = c.pubsub(ignore_subscribe_messages=True)
        self.ps.psubscribe("__keyspace@0__:ev:*")
        self.drain()

    def drain(self):
        assert self.c.execute_command("FG.UVADD", self.MARKER, time.monotonic_ns()) == 1
        out = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self.ps.get_message(timeout=0.1)
            if m is None or m.get("type") != "pmessage":
                continue
            key = s(m["channel"]).split(":", 1)[1]
            if key == self.MARKER:
                return out
            out.append((key, s(m["data"])))
        raise AssertionError("the marker's event never came (events so far: %r)" % out)

    def close(self):
        self.ps.close()
        self.c.delete(self.MARKER)
        self.c.config_set("notify-keyspace-events", self.old)


@pytest.mark.usefixtures("effect_commands")  # FG.UVLOAD
def test_keyspace_events(r, payloads):
    _, loads, _ = payloads
    t = server_second(r) - 10
    ev = Events(r)
    try:
        assert ok(r.execute_command("FG.UVCREATE", "ev:a"))
        assert r.execute_command("FG.UVADD", "ev:a", "x") == 1
        assert add_at(r, "ev:a", t, ["y"]) == 1
        assert r.execute_command("FG.UVADD", "ev:b", "x") == 1
        assert ev.drain() == [("ev:a", "fg.uvcreate"), ("ev:a", "fg.uvadd"),
                              ("ev:a", "fg.uvadd"), ("ev:b", "fg.uvadd")]
        r.execute_command("FG.UVSTORE", "ev:d", "ev:a", "LAST", 1, "HOURS")
        assert ok(r.execute_command("FG.UVLOAD", "ev:l", loads["src"]))
        assert ev.drain() == [("ev:d", "fg.uvstore"), ("ev:l", "fg.uvload")]
        # reads and refusals: none
        r.execute_command("FG.UVCOUNT", "ev:a", "LAST", 1, "HOURS", "ev:b")
        r.execute_command("FG.UVEXPORT", "ev:a", *between(t, t + 100))
        uv_info(r, "ev:a")
        error_of(r, "FG.UVCREATE", "ev:a")
        error_of(r, "FG.UVLOAD", "ev:a", loads["src"])
        error_of(r, "FG.UVADDAT", "ev:a", server_us(r) + 600 * SEC, "z")
        error_of(r, "FG.UVCOUNT", "ev:a", "LAST", 8, "DAYS")
        error_of(r, "FG.UVSTORE", "ev:e", "ev:a", "LAST", 8, "DAYS")
        assert ev.drain() == []
    finally:
        ev.close()


@pytest.mark.usefixtures("effect_commands")  # FG.UVLOAD
def test_watch(r, server, payloads):
    _, loads, _ = payloads
    t = server_second(r) - 10
    other = server.client(socket_timeout=60)
    try:
        def aborted(key, argv):
            p = other.pipeline(transaction=True)
            p.watch(key)
            p.multi()
            p.ping()
            r.execute_command(*argv)
            try:
                p.execute()
                return False
            except redis.WatchError:
                return True

        assert r.execute_command("FG.UVADD", "w", "a") == 1
        assert aborted("w", ["FG.UVADD", "w", "b"])
        assert aborted("w", ["FG.UVADDAT", "w", t * SEC, "c"])
        assert aborted("w2", ["FG.UVCREATE", "w2"])
        assert aborted("w3", ["FG.UVLOAD", "w3", loads["src"]])
        assert aborted("w4", ["FG.UVSTORE", "w4", "w", "LAST", 1, "HOURS"])
        assert not aborted("w", ["FG.UVCOUNT", "w", "LAST", 1, "HOURS"])
        assert not aborted("w", ["FG.UVEXPORT", "w", "LAST", 1, "HOURS"])
        assert not aborted("w", ["FG.UVINFO", "w"])
        assert not aborted("w", ["FG.UVSTORE", "w5", "w", "LAST", 1, "HOURS"])
    finally:
        other.close()


def uv_stats(c):
    info = c.info("floodgate_uv")
    out = {}
    for name in ("uv_items_added", "uv_windows_counted"):
        # Redis prefixes a module's INFO fields with the module's name
        hits = [v for k, v in info.items() if k in (name, "floodgate_" + name)]
        assert len(hits) == 1, (name, info)
        out[name] = int(hits[0])
    return out


def test_info_counters(r):
    before = uv_stats(r)
    assert r.execute_command("FG.UVADD", "k", "a", "b", "c") == 1
    mid = uv_stats(r)
    assert mid["uv_items_added"] - before["uv_items_added"] == 3, (before, mid)
    assert mid["uv_windows_counted"] == before["uv_windows_counted"]
    assert r.execute_command("FG.UVCOUNT", "k", "LAST", 1, "HOURS") == 3
    after = uv_stats(r)
    assert after["uv_windows_counted"] - mid["uv_windows_counted"] == 1, (mid, after)
    assert after["uv_items_added"] == mid["uv_items_added"]


# -- COMMAND --------------------------------------------------------------------------


def test_command_getkeys(r):
    def keys(*argv):
        return s(raw(r, "COMMAND", "GETKEYS", *argv))
    assert keys("FG.UVCOUNT", "a", "LAST", "1", "HOURS", "b", "c") == ["a", "b", "c"]
    assert keys("FG.UVCOUNT", "a", "BETWEEN", "1", "2") == ["a"]
    assert keys("FG.UVEXPORT", "a", "BETWEEN", "1", "2", "b") == ["a", "b"]
    assert keys("FG.UVSTORE", "d", "a", "BETWEEN", "1", "2", "b") == ["d", "a", "b"]
    assert keys("FG.UVSTORE", "d", "a", "LAST", "1", "DAYS") == ["d", "a"]
    assert keys("FG.UVADD", "k", "x", "y") == ["k"]
    assert keys("FG.UVADDAT", "k", "1", "x", "y") == ["k"]
    assert keys("FG.UVCREATE", "k", "SPAN", "10") == ["k"]
    assert keys("FG.UVINFO", "k") == ["k"]
    assert keys("FG.UVLOAD", "k", "payload") == ["k"]
    # read keys are read-only; FG.UVSTORE's destination is written
    flags = {s(k): set(s(f)) for k, f in raw(r, "COMMAND", "GETKEYSANDFLAGS", "FG.UVSTORE", "d",
                                             "a", "LAST", "1", "HOURS", "b")}
    assert "RO" in flags["a"] and "RO" in flags["b"] and "RO" not in flags["d"], flags
    assert flags["d"] & {"OW", "RW"}, flags
    for argv in (["FG.UVCOUNT", "a", "LAST", "1", "HOURS", "b"],
                 ["FG.UVEXPORT", "a", "BETWEEN", "1", "2", "b"], ["FG.UVINFO", "a"]):
        for key, f in raw(r, "COMMAND", "GETKEYSANDFLAGS", *argv):
            assert "RO" in s(f), (argv, key, f)


# argument names of docs/uv.md that COMMAND DOCS must show
DOC_ARGS = {"fg.uvcreate": ["key"], "fg.uvadd": ["key", "item"],
            "fg.uvaddat": ["key", "unix_us", "item"], "fg.uvcount": ["key"],
            "fg.uvexport": ["key"], "fg.uvstore": ["destination", "key"],
            "fg.uvinfo": ["key"], "fg.uvload": ["key", "payload"]}


def arg_names(args):
    out = []
    for a in args:
        d = dict(zip(s(a[0::2]), a[1::2]))
        out.append(s(d.get("name", "")).lower())
        out.extend(arg_names(d.get("arguments", [])))
    return out


def test_command_info_and_docs(r):
    for name in UV_COMMANDS:
        info = raw(r, "COMMAND", "INFO", name)[0]
        assert info is not None, name
        flags = set(s(info[2]))
        if name in ("fg.uvcount", "fg.uvexport", "fg.uvinfo"):
            assert "readonly" in flags and "write" not in flags, (name, flags)
        else:
            assert "write" in flags, (name, flags)
        docs = raw(r, "COMMAND", "DOCS", name)
        assert len(docs) == 2 and s(docs[0]).lower() == name, docs
        fields = dict(zip(s(docs[1][0::2]), docs[1][1::2]))
        assert len(s(fields.get("summary", ""))) > 10, (name, fields)
        names = arg_names(fields.get("arguments", []))
        assert set(DOC_ARGS[name]) <= set(names), (name, names)
