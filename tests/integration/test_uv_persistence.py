"""Persistence of unique counters (type fg-uvcntr, docs/uv.md "Replication,
persistence, cluster").

A counter with a staircase and buckets in every tier (items spread over
days, hours and minutes with FG.UVADDAT, created with non-default
parameters and a time zone offset), a default one, an empty one and one with
a TTL must survive DEBUG RELOAD, SAVE + restart (in the same server and in a
fresh one), the AOF (incremental with appendfsync always and a kill -9, and
rewritten with and without the RDB preamble: without it the rewrite emits
FG.UVLOAD), DUMP/RESTORE and COPY. Equality is checked on every level: DUMP
bytes, DEBUG DIGEST-VALUE, FG.UVINFO, PEXPIRETIME, and FG.UVCOUNT and
FG.UVEXPORT of LAST windows and of BETWEEN windows on each tier's grid.

The LAST windows are chosen so that no item is within minutes of their
edges: they give the same answer for as long as a test runs. BETWEEN
windows depend only on the stored state (the retention follows the newest
item, not the clock).

The loaders also face bytes nobody wrote: valid payloads mutated field by
field (every header field, entry, tier parameter and bucket of the
serialized form set to edge values, records dropped, duplicated and
swapped, truncations, bit flips, garbage), through RESTORE (with the CRC
recomputed, so the module's loader sees the bytes) and through FG.UVLOAD.
Each is refused (RESTORE: an error; FG.UVLOAD: "ERR bad payload" and no
key) or loads as a counter that every command serves, that saves again to
the very bytes it was loaded from, and that the server can reload. The
server answers PING after every case and its memory does not grow over
refusals. Payloads whose parts are each valid but disagree (a staircase
entry without its bucket, a bucket above the staircase) are refused too.

FLOODGATE_FUZZ_SCALE multiplies the random corrupted payloads.
"""

import os
import random
import shutil
import struct
import time

import pytest
import redis

import rdbpayload
from harness import Server, wait_for
from topology import (assert_no_crash, aof_files, digest, read_aof_commands, s,
                      wait_aof_rewrite_done)

FUZZ_SCALE = int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))
US = 1_000_000
MINUTE, HOUR, DAY = 60, 3600, 86400
TYPE = b"fg-uvcntr"
HLL_BYTES = 12304
MAX_SECOND = (1 << 32) - 1
# Counters are built at chosen seconds with FG.UVADDAT, as clients backfill
# with floodgate.explicit-time; FG.UVLOAD is sent as a repair tool would,
# with floodgate.enable-effect-commands.
TIMED = ["--floodgate.explicit-time", "yes"]
REPAIR = ["--floodgate.enable-effect-commands", "yes"]


def ok(reply):
    return reply in (True, b"OK", "OK")


def plain_server(*extra):
    """DUMP writes strings raw (no LZF), so the payload can be parsed."""
    return Server(TIMED + ["--rdbcompression", "no"] + list(extra))


def uvinfo(c, key):
    """FG.UVINFO as {field: int}."""
    raw = c.execute_command("FG.UVINFO", key)
    if isinstance(raw, dict):
        return {s(k): int(v) for k, v in raw.items()}
    assert isinstance(raw, list) and len(raw) % 2 == 0, raw
    return {s(k): int(v) for k, v in zip(raw[0::2], raw[1::2])}


def minute_start(sec):
    return sec - sec % MINUTE


def hour_start(sec, tz=0):
    return (sec + tz) // HOUR * HOUR - tz


def day_start(sec, tz=0):
    return (sec + tz) // DAY * DAY - tz


_M64, _MASK64 = 0xC6A4A7935BD1E995, (1 << 64) - 1


def murmur64a(data, seed=0xADC83B19):
    """Redis's HyperLogLog hash (MurmurHash64A)."""
    n = len(data)
    h = (seed ^ (n * _M64)) & _MASK64
    end = n - (n & 7)
    for i in range(0, end, 8):
        (k,) = struct.unpack_from("<Q", data, i)
        k = (k * _M64) & _MASK64
        k ^= k >> 47
        h = ((h ^ ((k * _M64) & _MASK64)) * _M64) & _MASK64
    if n & 7:
        for i in range((n & 7) - 1, -1, -1):
            h ^= data[end + i] << (8 * i)
        h = (h * _M64) & _MASK64
    h ^= h >> 47
    h = (h * _M64) & _MASK64
    return h ^ (h >> 47)


def register_rank(item):
    """The register and rank PFADD gives an item."""
    h = murmur64a(item.encode() if isinstance(item, str) else item)
    x = (h >> 14) | (1 << 50)
    return h & 16383, (x & -x).bit_length()


def hll_registers(export):
    """The 16384 registers of a dense HLL string (FG.UVEXPORT's reply)."""
    assert len(export) == HLL_BYTES and export[:5] == b"HYLL\x00", export[:16]
    bits = int.from_bytes(export[16:], "little")
    return [(bits >> (6 * i)) & 63 for i in range(16384)]


def between(t1, t2):
    return ["BETWEEN", t1 * US, t2 * US]


def group(prefix, n, first=0):
    return ["%s%d" % (prefix, i) for i in range(first, first + n)]


# ---------------------------------------------------------------------------
# The counters and their windows

TIERED = ["SPAN", 7200, "MINUTES", 90, "HOURS", 30, "DAYS", 10, "TZOFFSET", 19800]
TZ = 19800  # +05:30: hours and days start at half past a UTC hour


def build_counters(c, now=None):
    """Counters of every shape; returns {key: [windows]} (each window the
    arguments after the key) and the newest second of the tiered one."""
    n = int(time.time()) if now is None else now
    assert ok(c.execute_command("FG.UVCREATE", "uv:tiered", *TIERED))
    # (seconds before now, items): the days tier only, hours and days,
    # minutes + hours + days + staircase; groups overlap by 40 items
    spread = [(6 * DAY, group("u", 200, 0)), (3 * DAY + 1234, group("u", 200, 160)),
              (26 * HOUR, group("u", 200, 320)), (5 * HOUR + 17, group("u", 200, 480)),
              (80 * MINUTE, group("u", 200, 640)), (30 * MINUTE, group("u", 200, 800)),
              (10, group("u", 200, 960)), (0, group("u", 50, 1120))]
    for ago, items in spread:
        assert c.execute_command("FG.UVADDAT", "uv:tiered", (n - ago) * US, *items) == 1, ago
    # older than SPAN and than every tier's retention: changes nothing
    assert c.execute_command("FG.UVADDAT", "uv:tiered", (n - 12 * DAY) * US, *group("old", 50)) == 0
    info = uvinfo(c, "uv:tiered")
    assert info["newest_us"] == n * US, info
    assert info["entries"] > 0 and info["buckets"] >= 8, info

    assert c.execute_command("FG.UVADD", "uv:default", *group("d", 300)) == 1
    # FG.UVADD stamps the server's second, which may be past n by now
    nd = uvinfo(c, "uv:default")["newest_us"] // US
    for ago, items in ((10 * DAY, group("d", 100, 200)), (3 * DAY, group("d", 100, 400)),
                       (20 * HOUR, group("d", 100, 600)), (25 * MINUTE, group("d", 100, 800))):
        assert c.execute_command("FG.UVADDAT", "uv:default", (n - ago) * US, *items) == 1
    assert ok(c.execute_command("FG.UVCREATE", "uv:empty", "DAYS", 0, "SPAN", 60))
    assert c.execute_command("FG.UVADD", "uv:ttl", "a", "b", "c") == 1
    assert c.pexpire("uv:ttl", 3_600_000)
    c.set("plain:str", "v")

    windows = {
        "uv:tiered": [
            ["LAST", 2, "HOURS"], ["LAST", 100, "minutes"], ["LAST", 45, "MINUTE"],
            ["LAST", 7200, "SECONDS"],
            between(minute_start(n - 40 * MINUTE), minute_start(n - 20 * MINUTE)),
            between(minute_start(n - 85 * MINUTE), minute_start(n - 75 * MINUTE)),
            between(hour_start(n - 28 * HOUR, TZ), hour_start(n - 3 * HOUR, TZ)),
            between(hour_start(n - 6 * HOUR, TZ), hour_start(n - 4 * HOUR, TZ)),
            between(day_start(n - 7 * DAY, TZ), day_start(n - 2 * DAY, TZ)),
            between(day_start(n - 7 * DAY, TZ), n + 1),
            between(hour_start(n - 6 * HOUR, TZ), n + 1),
            ["LAST", 1, "HOURS", "uv:default", "uv:missing"],
        ],
        "uv:default": [
            ["LAST", 24, "HOURS"], ["LAST", 7, "DAYS"], ["LAST", 1, "HOURS"],
            between(day_start(nd - 12 * DAY), day_start(nd - 8 * DAY)),
            between(hour_start(nd - 22 * HOUR), hour_start(nd - 18 * HOUR)),
            between(day_start(nd - 12 * DAY), nd + 1),
        ],
        "uv:empty": [["LAST", 60, "SECONDS"], between(0, n + 1)],
        "uv:ttl": [["LAST", 1, "HOURS"]],
    }
    return windows, n


def expected_counts_are_plausible(c, windows):
    """A few counts against what was added (HyperLogLog: within 3%)."""
    def near(got, want):
        return abs(got - want) <= max(2, want * 0.03)
    w = windows["uv:tiered"]
    counts = [c.execute_command("FG.UVCOUNT", "uv:tiered", *x) for x in w]
    assert near(counts[0], 530), counts    # 80 min .. now: u640 .. u1169
    assert near(counts[4], 200), counts    # the 30 minutes group
    assert near(counts[6], 360), counts    # the 26 h and 5 h groups
    assert near(counts[8], 360), counts    # the 6 d and 3 d groups
    assert near(counts[9], 1170), counts   # all of it
    assert c.execute_command("FG.UVCOUNT", "uv:empty", "LAST", 60, "SECONDS") == 0


def snapshot(c, windows):
    """Per key: DUMP, DIGEST-VALUE, FG.UVINFO, PEXPIRETIME, TYPE, and every
    window's count and export; and the dataset digest."""
    out = {}
    for k, ws in windows.items():
        p = c.pipeline(transaction=False)
        p.dump(k)
        p.execute_command("DEBUG", "DIGEST-VALUE", k)
        p.execute_command("PEXPIRETIME", k)
        p.type(k)
        for w in ws:
            p.execute_command("FG.UVCOUNT", k, *w)
            p.execute_command("FG.UVEXPORT", k, *w)
        res = p.execute()
        out[k] = {"dump": res[0], "digest": s(res[1]), "pexpiretime": res[2], "type": res[3],
                  "info": uvinfo(c, k),
                  "windows": [(w, res[4 + 2 * i], res[5 + 2 * i]) for i, w in enumerate(ws)]}
        for w, count, export in out[k]["windows"]:
            assert isinstance(count, int) and len(export) == HLL_BYTES, (k, w, count)
    return {"digest": digest(c), "keys": out}


def assert_same(before, after, what, dataset=True):
    problems = []
    for k, b in before["keys"].items():
        a = after["keys"][k]
        for field in ("type", "digest", "pexpiretime", "info"):
            if a[field] != b[field]:
                problems.append("%s: %s %r -> %r" % (k, field, b[field], a[field]))
        if a["dump"] != b["dump"]:
            problems.append("%s: DUMP changed (%d -> %d bytes)" % (k, len(b["dump"]), len(a["dump"])))
        for (w, c0, e0), (_, c1, e1) in zip(b["windows"], a["windows"]):
            if c0 != c1:
                problems.append("%s %r: FG.UVCOUNT %d -> %d" % (k, w, c0, c1))
            if e0 != e1:
                problems.append("%s %r: FG.UVEXPORT changed" % (k, w))
    if dataset and before["digest"] != after["digest"]:
        problems.append("DEBUG DIGEST %s -> %s" % (before["digest"], after["digest"]))
    assert not problems, "%s changed the counters:\n  %s" % (what, "\n  ".join(problems[:30]))


def assert_types(c, windows):
    for k in windows:
        assert c.type(k) == TYPE, k


# ---------------------------------------------------------------------------
# Reload, restart, AOF


def test_debug_reload():
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        expected_counts_are_plausible(c, windows)
        before = snapshot(c, windows)
        assert ok(c.execute_command("DEBUG", "RELOAD"))
        assert_same(before, snapshot(c, windows), "DEBUG RELOAD")
        assert_no_crash(srv)


def test_save_restart_and_a_fresh_server_on_the_rdb_file(tmp_path):
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        before = snapshot(c, windows)
        assert c.save()
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert "Done loading RDB" in open(srv.logfile, errors="replace").read()
        assert_types(c, windows)
        assert_same(before, snapshot(c, windows), "SAVE + restart")
        assert_no_crash(srv)
        # the RDB file alone, in a new directory, for a server that never saw it
        fresh_dir = str(tmp_path / "fresh")
        os.makedirs(fresh_dir)
        shutil.copy(os.path.join(srv.dir, "dump.rdb"), fresh_dir)
    with Server(dir=fresh_dir) as fresh:
        c = fresh.client(socket_timeout=60)
        assert_types(c, windows)
        assert_same(before, snapshot(c, windows), "the RDB file in a fresh server")
        assert_no_crash(fresh)


def test_aof_always_fsync_survives_kill9():
    """No rewrite: the AOF holds the writes (FG.UVADD as FG.UVADDAT), and a
    kill -9 loses nothing with appendfsync always."""
    with Server(TIMED + ["--appendonly", "yes", "--appendfsync", "always",
                 "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        before = snapshot(c, windows)
        names = {a[0].upper() for f in aof_files(srv) if ".incr." in f
                 for a in read_aof_commands(f) or []}
        assert b"FG.UVADDAT" in names and b"FG.UVCREATE" in names, sorted(names)
        assert b"FG.UVADD" not in names, sorted(names)
        srv.kill9()
        srv.start()
        c = srv.client(socket_timeout=60)
        assert_types(c, windows)
        assert_same(before, snapshot(c, windows), "AOF (appendfsync always) + kill -9")
        assert_no_crash(srv)


def uvload_commands(path):
    """{key: [payload]} of the FG.UVLOAD commands in an AOF file, and the
    set of other command names per key."""
    loads, others = {}, {}
    for a in read_aof_commands(path) or []:
        name = a[0].upper()
        if name in (b"SELECT", b"MULTI", b"EXEC"):
            continue
        key = a[1].decode()
        if name == b"FG.UVLOAD":
            assert len(a) == 3, a[:2]
            loads.setdefault(key, []).append(a[2])
        else:
            others.setdefault(key, set()).add(name)
    return loads, others


@pytest.mark.parametrize("preamble", ["yes", "no"])
def test_aof_rewrite_and_restart(preamble):
    with Server(TIMED + ["--appendonly", "yes", "--aof-use-rdb-preamble", preamble,
                 "--rdbcompression", "no"]) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        c.bgrewriteaof()
        wait_aof_rewrite_done(c, timeout=60)
        before = snapshot(c, windows)
        base = [f for f in aof_files(srv) if ".base." in f]
        assert len(base) == 1, aof_files(srv)
        if preamble == "no":
            loads, others = uvload_commands(base[0])
            assert set(loads) == set(windows), sorted(loads)
            for k in windows:
                assert len(loads[k]) == 1, (k, len(loads[k]))
                assert others.get(k, set()) <= {b"PEXPIREAT"}, (k, others.get(k))
                # the rewrite's payload is the serialized counter that DUMP holds too
                body, _, _ = rdbpayload.split(before["keys"][k]["dump"])
                assert loads[k][0] in body, "%s: FG.UVLOAD's payload is not in the DUMP" % k
            assert others["uv:ttl"] == {b"PEXPIREAT"}
        else:
            with open(base[0], "rb") as f:
                assert f.read(5) == b"REDIS"
        srv.restart(timeout=60)
        c = srv.client(socket_timeout=60)
        assert "DB loaded from" in open(srv.logfile, errors="replace").read()
        assert_types(c, windows)
        assert_same(before, snapshot(c, windows), "BGREWRITEAOF (preamble %s) + restart" % preamble)
        assert_no_crash(srv)


def test_digest_covers_every_field():
    """DEBUG DIGEST-VALUE, which the replication tests compare, tells apart
    counters that differ in any parameter, item or second."""
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        n = int(time.time())
        base = ["SPAN", 3600, "MINUTES", 10, "HOURS", 5, "DAYS", 3, "TZOFFSET", 600]
        variants = {"base": base, "same": base,
                    "span": ["SPAN", 3601] + base[2:],
                    "minutes": base[:2] + ["MINUTES", 11] + base[4:],
                    "hours": base[:4] + ["HOURS", 4] + base[6:],
                    "days": base[:6] + ["DAYS", 0] + base[8:],
                    "tzoffset": base[:8] + ["TZOFFSET", -600]}
        for key, params in variants.items():
            assert ok(c.execute_command("FG.UVCREATE", key, *params))
            c.execute_command("FG.UVADDAT", key, (n - 2 * HOUR) * US, *group("i", 20))
            c.execute_command("FG.UVADDAT", key, n * US, *group("j", 20))
        assert ok(c.execute_command("FG.UVCREATE", "item", *base))
        c.execute_command("FG.UVADDAT", "item", (n - 2 * HOUR) * US, *group("i", 20))
        c.execute_command("FG.UVADDAT", "item", n * US, *(group("j", 19) + ["other"]))
        assert ok(c.execute_command("FG.UVCREATE", "second", *base))
        c.execute_command("FG.UVADDAT", "second", (n - 2 * HOUR + 1) * US, *group("i", 20))
        c.execute_command("FG.UVADDAT", "second", n * US, *group("j", 20))
        assert ok(c.execute_command("FG.UVCREATE", "empty", *base))
        names = list(variants) + ["item", "second", "empty"]
        dv = dict(zip(names, s(c.execute_command("DEBUG", "DIGEST-VALUE", *names))))
        assert dv["same"] == dv["base"]
        assert len(set(dv.values())) == len(names) - 1, dv


def serial_of(c, key):
    body, _, _ = rdbpayload.split(c.dump(key))
    f = string_field(body)
    return Serial(body[f.value_start:f.end])


def test_masked_entries_and_a_rebase_survive_reload_and_aof():
    """Two states only a history of adds makes: entries older than
    newest - SPAN left in registers no later add touched (queries mask
    them), and a base moved forward after more than 2^25 seconds. Both
    save, load and replay as they are."""
    with Server(TIMED + ["--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "always",
                 "--rdbcompression", "no"]) as srv:
        c = srv.client(socket_timeout=60)
        n = int(time.time())
        assert register_rank("A")[0] != register_rank("B")[0]
        assert ok(c.execute_command("FG.UVCREATE", "masked", "SPAN", 60))
        assert c.execute_command("FG.UVADDAT", "masked", (n - 100) * US, "A") == 1
        assert c.execute_command("FG.UVADDAT", "masked", n * US, "B") == 1
        assert uvinfo(c, "masked")["entries"] == 2  # A stays, masked
        assert c.execute_command("FG.UVCOUNT", "masked", "LAST", 60, "SECONDS") == 1
        assert ok(c.execute_command("FG.UVCREATE", "rebased", "SPAN", 180 * DAY, "DAYS", 1100,
                                    "HOURS", 744, "MINUTES", 1440))
        for ago in (800, 500, 400, 200, 100, 1, 0):
            assert c.execute_command("FG.UVADDAT", "rebased", (n - ago * DAY) * US,
                                     *group("r%d-" % ago, 50)) == 1
        sp = serial_of(c, "rebased")
        assert sp.base > n - 800 * DAY and sp.newest - sp.base < 1 << 25, (sp.base, sp.newest)
        windows = {"masked": [["LAST", 60, "SECONDS"], ["LAST", 1, "MINUTES"]],
                   "rebased": [["LAST", 180, "DAYS"], ["LAST", 150, "DAYS"],
                               between(day_start(n - 500 * DAY), day_start(n - 300 * DAY)),
                               between(day_start(n - 900 * DAY), n + 1)]}
        before = snapshot(c, windows)
        assert ok(c.execute_command("DEBUG", "RELOAD"))
        assert_same(before, snapshot(c, windows), "DEBUG RELOAD")
        srv.kill9()
        srv.start()
        c = srv.client(socket_timeout=60)
        assert_same(before, snapshot(c, windows), "AOF replay of the adds")
        c.bgrewriteaof()
        wait_aof_rewrite_done(c, timeout=60)
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert_same(before, snapshot(c, windows), "AOF rewrite + restart")
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# DUMP/RESTORE, COPY, FG.UVLOAD, MEMORY USAGE


def test_dump_restore_to_this_and_another_server():
    with Server(TIMED) as a, Server(TIMED) as b:
        ca, cb = a.client(socket_timeout=60), b.client(socket_timeout=60)
        windows, _ = build_counters(ca)
        before = snapshot(ca, windows)
        for k in windows:
            dumped = ca.dump(k)
            at = ca.execute_command("PEXPIRETIME", k)
            assert ca.restore(k + ":r", max(at, 0), dumped, absttl=at > 0)
            assert cb.restore(k, max(at, 0), dumped, absttl=at > 0)
            with pytest.raises(redis.ResponseError, match="BUSYKEY"):
                cb.restore(k, 0, dumped)
            assert ca.dump(k + ":r") == dumped
            assert s(ca.execute_command("DEBUG", "DIGEST-VALUE", k + ":r")) == \
                s(ca.execute_command("DEBUG", "DIGEST-VALUE", k))
            assert uvinfo(ca, k + ":r") == uvinfo(ca, k)
        assert_same(before, snapshot(cb, windows), "DUMP/RESTORE into another server",
                    dataset=False)  # the other server has no plain:str
        # restored counters go on counting as the original does
        for c, k in ((ca, "uv:tiered"), (ca, "uv:tiered:r"), (cb, "uv:tiered")):
            c.execute_command("FG.UVADDAT", k, int(time.time()) * US - 600 * US, *group("later", 300))
        assert ca.dump("uv:tiered:r") == ca.dump("uv:tiered") == cb.dump("uv:tiered")
        assert_no_crash(a)
        assert_no_crash(b)


def test_copy_is_deep():
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        before = snapshot(c, windows)
        for k in windows:
            assert c.execute_command("COPY", k, k + ":cp") == 1
            assert c.dump(k + ":cp") == c.dump(k)
            assert c.type(k + ":cp") == TYPE
            assert c.execute_command("PEXPIRETIME", k + ":cp") == c.execute_command("PEXPIRETIME", k)
        now = int(time.time())
        for k in windows:
            # new items in each tier of the copies only
            for ago in (0, 20 * MINUTE, 4 * HOUR, 4 * DAY):
                c.execute_command("FG.UVADDAT", k + ":cp", (now - ago) * US, *group("copy-only", 100))
            assert c.dump(k + ":cp") != c.dump(k), k
        assert_same(before, snapshot(c, windows), "changing the copies", dataset=False)
        c.delete(*[k + ":cp" for k in windows])
        assert_same(before, snapshot(c, windows), "deleting the copies")
        assert_no_crash(srv)


def test_uvload_of_the_rewrite_payload():
    """The payload the AOF rewrite writes loads into a new key as the same
    counter; onto an existing key it is refused."""
    with Server(TIMED + REPAIR + ["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client(socket_timeout=60)
        windows, _ = build_counters(c)
        c.bgrewriteaof()
        wait_aof_rewrite_done(c, timeout=60)
        loads, _ = uvload_commands([f for f in aof_files(srv) if ".base." in f][0])
        for k in windows:
            payload = loads[k][0]
            assert ok(c.execute_command("FG.UVLOAD", k + ":ld", payload))
            assert c.dump(k + ":ld")[:-10] == c.dump(k)[:-10]  # same value, same RDB version
            assert uvinfo(c, k + ":ld") == uvinfo(c, k)
            for target in (k, "plain:str"):
                before = c.dump(target)
                with pytest.raises(redis.ResponseError, match="^key exists$"):
                    c.execute_command("FG.UVLOAD", target, payload)
                assert c.dump(target) == before
        assert_no_crash(srv)


def memory_usage(c, key):
    return int(c.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0))


def test_memory_usage_grows_with_content_and_covers_bytes():
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        now = int(time.time())
        assert ok(c.execute_command("FG.UVCREATE", "m", "MINUTES", 120, "HOURS", 72))
        sizes = []

        def measure():
            mem, info = memory_usage(c, "m"), uvinfo(c, "m")
            assert mem >= info["bytes"] > 0, (mem, info)
            sizes.append((mem, info["bytes"]))

        measure()
        c.execute_command("FG.UVADDAT", "m", now * US, *group("a", 10))
        measure()
        c.execute_command("FG.UVADDAT", "m", now * US, *group("b", 3000))
        measure()
        for h in range(1, 30):  # more hour and minute buckets, longer staircases
            c.execute_command("FG.UVADDAT", "m", (now - h * HOUR - h * 61) * US, *group("h%d-" % h, 2000))
        measure()
        for d in range(1, 20):
            c.execute_command("FG.UVADDAT", "m", (now - d * DAY) * US, *group("d%d-" % d, 500))
        measure()
        for (m0, b0), (m1, b1) in zip(sizes, sizes[1:]):
            assert m1 > m0 and b1 > b0, sizes
        # the default counter, too, and a DEBUG RELOAD keeps what it holds
        c.execute_command("FG.UVADD", "d", *group("x", 5000))
        assert memory_usage(c, "d") >= uvinfo(c, "d")["bytes"]
        before = uvinfo(c, "m")["bytes"]
        assert ok(c.execute_command("DEBUG", "RELOAD"))
        assert memory_usage(c, "m") >= uvinfo(c, "m")["bytes"] == before
        assert_no_crash(srv)


def test_unlink_frees_a_big_counter_in_the_background():
    """Lazy free: a counter of more than 4 MiB (Redis's threshold of 64
    effort units, one per 64 KiB here) goes to the background thread; a
    small one is freed at once."""
    with Server(TIMED) as srv:
        c = srv.client(socket_timeout=60)
        now = int(time.time())
        assert ok(c.execute_command("FG.UVCREATE", "big", "MINUTES", 400))
        # 260 minute buckets of 5,500 items: about 4,670 registers each, so
        # dense (16 KiB; a bucket is sparse up to 4,096), and the rest
        for start in range(0, 260, 20):
            p = c.pipeline(transaction=False)
            for i in range(start, start + 20):
                p.execute_command("FG.UVADDAT", "big", (now - 60 * i) * US, *group("m%d-" % i, 5500))
            p.execute()
        assert uvinfo(c, "big")["bytes"] > 4 * 1024 * 1024
        c.execute_command("FG.UVADD", "small", "a")
        mem0 = used_memory(c)
        freed0 = c.info("memory")["lazyfreed_objects"]
        assert c.unlink("small") == 1
        assert c.info("memory")["lazyfreed_objects"] == freed0
        assert c.unlink("big") == 1
        wait_for(lambda: c.info("memory")["lazyfreed_objects"] == freed0 + 1, timeout=10)
        wait_for(lambda: c.info("memory")["lazyfree_pending_objects"] == 0, timeout=10)
        assert used_memory(c) < mem0 - 4 * 1024 * 1024
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# Corrupted payloads: the serialized form, field by field

class Serial:
    """The serialized counter (src/core/uv.h): u8 version, u32 span, i64
    newest, i64 base, u32 count, count x (u16 register, u32 second, u8 rank);
    u16 minutes, hours, days, i32 tzoffset; per tier u16 buckets, each i64
    number, u16 pairs, pairs x (u16 register, u8 rank). Little-endian.

    fields: (name, offset, width, signed, value); records: (kind, start, end)
    for each entry, bucket and pair, to drop, repeat and swap."""

    def __init__(self, data):
        self.data = data
        self.fields, self.records = [], []
        self.pos = 0
        self._get("version", 1)
        self.span = self._get("span", 4)
        self.newest = self._get("newest", 8, True)
        self.base = self._get("base", 8, True)
        count = self._get("count", 4)
        for i in range(count):
            start = self.pos
            self._get("entry%d.register" % i, 2)
            self._get("entry%d.second" % i, 4)
            self._get("entry%d.rank" % i, 1)
            self.records.append(("entry", start, self.pos))
        self.tiers = [self._get("minutes", 2), self._get("hours", 2), self._get("days", 2)]
        self._get("tzoffset", 4, True)
        for t in range(3):
            for b in range(self._get("tier%d.buckets" % t, 2)):
                start = self.pos
                self._get("tier%d.bucket%d.number" % (t, b), 8, True)
                for p in range(self._get("tier%d.bucket%d.pairs" % (t, b), 2)):
                    pstart = self.pos
                    self._get("tier%d.bucket%d.pair%d.register" % (t, b, p), 2)
                    self._get("tier%d.bucket%d.pair%d.rank" % (t, b, p), 1)
                    self.records.append(("pair", pstart, self.pos))
                self.records.append(("bucket", start, self.pos))
        assert self.pos == len(data), (self.pos, len(data))

    def _get(self, name, width, signed=False):
        fmt = {1: "b", 2: "h", 4: "i", 8: "q"}[width]
        fmt = "<" + (fmt if signed else fmt.upper())
        (v,) = struct.unpack(fmt, self.data[self.pos:self.pos + width])
        self.fields.append((name, self.pos, width, signed, v))
        self.pos += width
        return v


def edge_values(name, width, signed, v, serial):
    """Values worth trying in one field."""
    bits = 8 * width
    out = {0, 1, v + 1, v - 1, v ^ 1, v ^ (1 << (bits - 1)), (1 << bits) - 1, (1 << (bits - 1)) - 1,
           1 << (bits - 1), -1, 2 * v}
    if name == "version":
        out |= {1, 2, 3, 255}
    elif name == "span":
        out |= {15552000, 15552001, 86400}
    elif name in ("newest", "base") or name.endswith(".second"):
        out |= {serial.newest, serial.newest + 1, serial.newest - serial.span,
                serial.newest - serial.span - 1, serial.base, serial.base - 1, MAX_SECOND,
                MAX_SECOND + 1, v + (1 << 25), v - (1 << 25), v + 86400}
    elif name == "count" or name.endswith((".buckets", ".pairs")):
        out |= {v + 2, v * 16, 4096, 16384, 16385, 65535}
    elif name.endswith(".register"):
        out |= {16383, 16384, 65535}
    elif name.endswith(".rank"):
        out |= {51, 52, 63, 64, 127, 128, 255}
    elif name in ("minutes", "hours", "days"):
        out |= {1440, 1441, 744, 745, 1100, 1101}
    elif name == "tzoffset":
        out |= {86400, 86401, -86400, -86401, v + 30, 60, -60}
    elif name.endswith(".number"):
        out |= {v + n for n in (-200, -100, -11, -10, -9, -3, -2, 2, 3, 9, 10, 11, 1000)}
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return sorted(x for x in out if lo <= x <= hi and x != v)


def serial_variants(data, seed, random_cases):
    """(label, mutated serialized form), deterministic in seed."""
    rnd = random.Random(seed)
    sp = Serial(data)
    out, seen = [], {data}

    def emit(label, b):
        b = bytes(b)
        if b not in seen:
            seen.add(b)
            out.append((label, b))

    fmt = {1: "b", 2: "h", 4: "i", 8: "q"}
    for name, off, width, signed, v in sp.fields:
        f = "<" + (fmt[width] if signed else fmt[width].upper())
        for x in edge_values(name, width, signed, v, sp):
            emit("%s=%d" % (name, x), data[:off] + struct.pack(f, x) + data[off + width:])
    count_off = 21
    for i, (kind, a, b) in enumerate(sp.records):
        rec = data[a:b]
        emit("drop-%s%d" % (kind, i), data[:a] + data[b:])
        emit("repeat-%s%d" % (kind, i), data[:b] + rec + data[b:])
        if kind == "entry":  # the same, with the count fixed
            n = struct.unpack_from("<I", data, count_off)[0]
            d = data[:a] + data[b:]
            emit("drop-entry%d-fixed" % i, d[:count_off] + struct.pack("<I", n - 1) + d[count_off + 4:])
            d = data[:b] + rec + data[b:]
            emit("repeat-entry%d-fixed" % i, d[:count_off] + struct.pack("<I", n + 1) + d[count_off + 4:])
        for kind2, a2, b2 in sp.records[i + 1:i + 2]:
            if kind2 == kind and a2 == b:  # adjacent records of one kind: swap
                emit("swap-%s%d" % (kind, i), data[:a] + data[a2:b2] + rec + data[b2:])
    for i in range(len(data)):
        emit("trunc%d" % i, data[:i])
    for extra in (b"\x00", b"\x00" * 7, b"\xff" * 3, bytes(rnd.randrange(256) for _ in range(100))):
        emit("append%d" % len(extra), data + extra)
    for i in range(len(data)):
        for bit in range(8):
            b = bytearray(data)
            b[i] ^= 1 << bit
            emit("bit%d.%d" % (i, bit), b)
        b = bytearray(data)
        b[i] = rnd.randrange(256)
        emit("byte%d" % i, b)
    for k in range(random_cases):
        b = bytearray(data)
        for _ in range(rnd.randrange(2, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        emit("rand%d" % k, b)
    for k in range(random_cases // 4):
        n = rnd.choice([rnd.randrange(0, 40), rnd.randrange(0, 2 * len(data))])
        emit("garbage%d" % k, bytes([2]) + bytes(rnd.randrange(256) for _ in range(n)))
    return out


def small_counters(c):
    """Small counters (a few dozen bytes serialized) with entries and a
    bucket or two in every tier; returns their keys."""
    n = int(time.time())
    assert ok(c.execute_command("FG.UVCREATE", "z:tiers", "SPAN", 600, "MINUTES", 3, "HOURS", 2,
                                "DAYS", 2, "TZOFFSET", -3600))
    for ago, items in ((DAY + 7, ["d1", "d2"]), (2 * HOUR, ["h1", "h2"]), (HOUR + 59, ["h3"]),
                       (5 * MINUTE, ["m1", "m2"]), (61, ["m3"]), (1, ["s1", "s2", "s3"]), (0, ["s4", "s5"])):
        assert c.execute_command("FG.UVADDAT", "z:tiers", (n - ago) * US, *items) == 1
    assert ok(c.execute_command("FG.UVCREATE", "z:stair", "SPAN", 100, "MINUTES", 0, "HOURS", 0, "DAYS", 0))
    assert c.execute_command("FG.UVADDAT", "z:stair", (n - 50) * US, *group("q", 6)) == 1
    assert c.execute_command("FG.UVADDAT", "z:stair", n * US, *group("q", 4, 3)) == 1
    assert ok(c.execute_command("FG.UVCREATE", "z:empty", "TZOFFSET", 600))
    assert c.execute_command("FG.UVADDAT", "z:default", (n - 3 * DAY) * US, "x", "y") == 1
    staircases(c, "z:steps", n)
    return ["z:tiers", "z:stair", "z:empty", "z:default", "z:steps"]


def staircases(c, key, n):
    """A counter whose staircases are 4 entries long in 3 registers: items
    of ranks 4, 3, 2, 1 of one register at 4, 3, 2 and 1 seconds before
    now (each dominates none of the others), one more at now, and a few in
    the buckets only."""
    by_register = {}
    for i in range(30000):
        reg, rank = register_rank("r%d" % i)
        by_register.setdefault(reg, {}).setdefault(rank, "r%d" % i)
    chosen = [reg for reg, ranks in sorted(by_register.items()) if all(r in ranks for r in (1, 2, 3, 4))]
    assert len(chosen) >= 4, len(chosen)
    assert ok(c.execute_command("FG.UVCREATE", key, "SPAN", 600, "MINUTES", 4, "HOURS", 3, "DAYS", 2,
                                "TZOFFSET", 1800))
    expected = [0] * 16384
    for reg in chosen[:3]:
        for rank in (4, 3, 2, 1):
            assert c.execute_command("FG.UVADDAT", key, (n - rank) * US, by_register[reg][rank]) == 1
            expected[reg] = max(expected[reg], rank)
    newest = by_register[chosen[3]][1]
    assert c.execute_command("FG.UVADDAT", key, n * US, newest) == 1
    expected[chosen[3]] = 1
    assert c.execute_command("FG.UVADDAT", key, (n - 2 * HOUR) * US, "h1", "h2") == 1
    assert c.execute_command("FG.UVADDAT", key, (n - 20 * HOUR) * US, "d1") == 1
    info = uvinfo(c, key)
    assert info["entries"] == 13 and info["newest_us"] == n * US, info
    regs = hll_registers(c.execute_command("FG.UVEXPORT", key, "BETWEEN", (n - 4) * US, (n + 1) * US))
    assert regs == expected, "the staircase registers are not the ones PFADD gives"
    for since, want in ((1, 1), (2, 2), (3, 3), (4, 4)):  # each window sees its own step
        regs = hll_registers(c.execute_command("FG.UVEXPORT", key, "BETWEEN", (n - since) * US, (n + 1) * US))
        assert [regs[r] for r in chosen[:3]] == [want] * 3, (since, [regs[r] for r in chosen[:3]])


def string_field(body):
    """The one string of a module value (the serialized counter)."""
    strings = [f for f in rdbpayload.parse_module_value(body) if f.kind == "string"]
    assert len(strings) == 1, strings
    return strings[0]


def with_string(body, field, data):
    return body[:field.start] + rdbpayload.enc_len(len(data)) + data + body[field.end:]


def used_memory(c):
    return int(c.info("memory")["used_memory"])


class Fuzz:
    """Runs cases against one server, restarting it after a crash and
    collecting what went wrong."""

    BATCH = 200

    def __init__(self, srv):
        self.srv = srv
        self.c = srv.client(socket_timeout=20)
        self.crashes, self.problems, self.accepted, self.refused = [], [], [], []

    def run(self, cases, send):
        """cases: (label, argument); send(pipeline, key, argument) queues one
        call. A PING follows every case."""
        for start in range(0, len(cases), self.BATCH):
            batch = cases[start:start + self.BATCH]
            keys = ["fz:%d" % (start + i) for i in range(len(batch))]
            try:
                p = self.c.pipeline(transaction=False)
                for key, (_, arg) in zip(keys, batch):
                    send(p, key, arg)
                    p.ping()
                res = p.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError):
                self._find_crash(batch, keys, send)
                continue
            for key, (label, arg), rep, pong in zip(keys, batch, res[0::2], res[1::2]):
                self._record(key, label, arg, rep, pong)

    def _record(self, key, label, arg, rep, pong):
        if pong is not True:
            self.problems.append("%s: PING after it answered %r" % (label, pong))
        if isinstance(rep, redis.ResponseError):
            self.refused.append((key, label, arg, str(rep)))
        else:
            self.accepted.append((key, label, arg))

    def _find_crash(self, batch, keys, send):
        """One by one, after a restart, to name the case that crashes."""
        self._restart()
        for key, (label, arg) in zip(keys, batch):
            try:
                p = self.c.pipeline(transaction=False)
                send(p, key, arg)
                p.ping()
                rep, pong = p.execute(raise_on_error=False)
                self._record(key, label, arg, rep, pong)
            except (redis.ConnectionError, redis.TimeoutError):
                self.crashes.append("%s: %r...\n    %s" % (
                    label, arg[:120], self.srv.log_tail(8).replace("\n", "\n    ")))
                if len(self.crashes) >= 5:
                    raise AssertionError("crashes:\n" + "\n".join(self.crashes))
                self._restart()

    def _restart(self):
        self.srv.kill9()
        self.srv.start()
        self.c = self.srv.client(socket_timeout=20)
        # the keys of earlier cases are gone with the restart
        self.accepted = [a for a in self.accepted if self.c.exists(a[0])]

    def serve_accepted(self, payload_of):
        """Every command on every accepted counter; its DUMP holds the bytes
        it was loaded from (payload_of(dump) gives them) and RESTOREs."""
        now_us = int(time.time()) * US
        for key, label, arg in self.accepted:
            try:
                if self.c.type(key) != TYPE:
                    continue  # damage to the module id made another type's value
                info = uvinfo(self.c, key)
                newest = info["newest_us"]
                calls = [["FG.UVCOUNT", key, "LAST", 1, "SECONDS"],
                         ["FG.UVEXPORT", key, "LAST", 1, "SECONDS"],
                         ["FG.UVCOUNT", key, "LAST", min(info["span"], 600), "SECONDS", "z:tiers"],
                         ["FG.UVCOUNT", key, "BETWEEN", newest, newest + US],
                         ["FG.UVEXPORT", key, "BETWEEN", max(0, newest - 3 * DAY * US), newest + US],
                         ["FG.UVCOUNT", key, "BETWEEN", 0, (MAX_SECOND + 1) * US],
                         ["DEBUG", "DIGEST-VALUE", key], ["MEMORY", "USAGE", key],
                         ["COPY", key, key + ":copy"]]
                p = self.c.pipeline(transaction=False)
                for argv in calls:
                    p.execute_command(*argv)
                p.dump(key)
                res = p.execute(raise_on_error=False)
                for argv, rep in zip(calls, res):
                    if isinstance(rep, redis.ResponseError) and not (
                            argv[2] == "BETWEEN" and ("not on the grid" in str(rep) or
                                                      "older than what" in str(rep))):
                        self.problems.append("%s: %r -> %s" % (label, argv, rep))
                if "/value-" not in label and payload_of(res[-1]) != arg:
                    self.problems.append("%s: accepted, but saves other bytes than it was given" % label)
                self.c.restore(key + ":again", 0, res[-1])
                # and it takes writes: old, current and newest items
                p = self.c.pipeline(transaction=False)
                for t in (max(0, newest - 2 * HOUR * US), now_us, newest):
                    p.execute_command("FG.UVADDAT", key, t, "w1", "w2", "w3")
                p.execute_command("FG.UVADD", key + ":copy", "w4")
                p.execute_command("FG.UVCOUNT", key, "LAST", 1, "SECONDS", key + ":copy")
                for argv, rep in zip(["UVADDAT-old", "UVADDAT-now", "UVADDAT-newest", "UVADD", "count"],
                                     p.execute(raise_on_error=False)):
                    if isinstance(rep, redis.ResponseError) and "in the future" not in str(rep):
                        self.problems.append("%s: %s -> %s" % (label, argv, rep))
                uvinfo(self.c, key)
            except (redis.ConnectionError, redis.TimeoutError):
                self.crashes.append("%s: serving the accepted counter\n    %s" % (
                    label, self.srv.log_tail(8).replace("\n", "\n    ")))
                self._restart()
            except redis.ResponseError as e:
                self.problems.append("%s: %s" % (label, e))
        try:
            assert ok(self.c.execute_command("DEBUG", "RELOAD"))
        except (redis.ConnectionError, redis.TimeoutError):
            self.crashes.append("DEBUG RELOAD of the accepted counters\n    " + self.srv.log_tail(8))
            self._restart()

    def refusals_hold_no_memory(self, send, sample=1500):
        """The same refused cases, four rounds: after the first (which may
        grow buffers) used_memory stays put."""
        cases = [(label, arg) for _, label, arg, _ in self.refused[:sample]]
        self.c.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0")
        mem = []
        for _ in range(4):
            p = self.c.pipeline(transaction=False)
            for _, arg in cases:
                send(p, "victim", arg)
            assert all(isinstance(x, redis.ResponseError) for x in p.execute(raise_on_error=False))
            assert self.c.exists("victim") == 0
            mem.append(used_memory(self.c))
        assert mem[3] - mem[1] < 1024, "used_memory %r over rounds of %d refusals" % (mem, len(cases))


def test_corrupted_restore_payloads_never_crash():
    srv = plain_server("--slowlog-log-slower-than", "-1")
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        cases = []
        version = None
        for n, k in enumerate(small_counters(c)):
            body, version, _ = rdbpayload.split(c.dump(k))
            field = string_field(body)
            data = body[field.value_start:field.end]
            Serial(data)  # the layout this test knows
            for label, d in serial_variants(data, 7100 + n, 200 * FUZZ_SCALE):
                cases.append(("%s/%s" % (k, label), with_string(body, field, d)))
            # damage to the module value around it, too
            for label, vb in rdbpayload.variants(body, seed=7200 + n, random_cases=60 * FUZZ_SCALE,
                                                 flips_per_byte=1):
                cases.append(("%s/value-%s" % (k, label), vb))
        assert len(cases) >= 4000, len(cases)
        cases = [(label, rdbpayload.make(b, version)) for label, b in cases]

        def send(p, key, payload):
            p.restore(key, 0, payload)

        fz = Fuzz(srv)
        fz.run(cases, send)
        for key, label, payload, err in fz.refused:
            if "payload version or checksum" in err:
                fz.problems.append("%s: the footer was refused (%s)" % (label, err))
        fz.refusals_hold_no_memory(send)

        fz.serve_accepted(lambda dumped: dumped)  # DUMP gives back the RESTORE payload
        print("corrupted RESTORE payloads: %d cases, %d refused, %d accepted, %d crashes"
              % (len(cases), len(fz.refused), len(fz.accepted), len(fz.crashes)))
        assert not fz.crashes, "\n".join(fz.crashes[:5])
        assert not fz.problems, "\n".join(fz.problems[:15])
        assert len(fz.refused) > len(cases) * 3 // 4, (len(fz.refused), len(fz.accepted))
        assert_no_crash(srv)
    finally:
        srv.cleanup()


def rewrite_payloads(c, srv, keys):
    c.bgrewriteaof()
    wait_aof_rewrite_done(c, timeout=60)
    loads, _ = uvload_commands([f for f in aof_files(srv) if ".base." in f][0])
    return {k: loads[k][0] for k in keys}


def test_corrupted_uvload_payloads_never_crash():
    srv = Server(TIMED + REPAIR + ["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                  "--slowlog-log-slower-than", "-1", "--rdbcompression", "no"])
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        keys = small_counters(c)
        payloads = rewrite_payloads(c, srv, keys)
        c.config_set("appendonly", "no")  # the cases need not be written
        cases = []
        for n, k in enumerate(keys):
            Serial(payloads[k])
            for label, d in serial_variants(payloads[k], 7300 + n, 200 * FUZZ_SCALE):
                cases.append(("%s/%s" % (k, label), d))
        assert len(cases) >= 3000, len(cases)

        def send(p, key, payload):
            p.execute_command("FG.UVLOAD", key, payload)

        fz = Fuzz(srv)
        fz.run(cases, send)
        for key, label, payload, err in fz.refused:
            if err != "bad payload":
                fz.problems.append("%s: refused with %r, not 'bad payload'" % (label, err))
        if fz.refused:
            p = fz.c.pipeline(transaction=False)
            for key, _, _, _ in fz.refused:
                p.exists(key)
            left = [r[1] for r, e in zip(fz.refused, p.execute()) if e]
            assert not left, "refused loads left keys: %r" % left[:10]
        fz.refusals_hold_no_memory(send)

        def stored_payload(dumped):
            body, _, _ = rdbpayload.split(dumped)
            f = string_field(body)
            return body[f.value_start:f.end]

        fz.serve_accepted(stored_payload)
        print("corrupted FG.UVLOAD payloads: %d cases, %d refused, %d accepted, %d crashes"
              % (len(cases), len(fz.refused), len(fz.accepted), len(fz.crashes)))
        assert not fz.crashes, "\n".join(fz.crashes[:5])
        assert not fz.problems, "\n".join(fz.problems[:15])
        assert len(fz.refused) > len(cases) * 3 // 4, (len(fz.refused), len(fz.accepted))
        # the good payloads still load
        for k in keys:
            assert ok(fz.c.execute_command("FG.UVLOAD", k + ":good", payloads[k]))
        assert_no_crash(srv)
    finally:
        srv.cleanup()


def test_staircase_and_buckets_that_disagree_are_refused():
    """Each add raises the bucket of its second in every tier that retains
    it, and a retained bucket is never lowered: a payload whose staircase
    holds a rank that the item's retained bucket lacks (the bucket dropped,
    or its register lowered) describes a counter no adds build. So does a
    bucket within the SPAN whose register exceeds every staircase entry
    since the bucket's start (the staircase keeps the maximum of every
    window ending now). Such counters answer windows that contradict each
    other; docs/uv.md, FG.UVLOAD: anything a counter could not hold is
    refused."""
    srv = plain_server(*REPAIR)
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        n = int(time.time())
        item = next(x for x in ("e%d" % i for i in range(1000)) if register_rank(x)[1] >= 2)
        reg, rank = register_rank(item)
        assert register_rank("now")[0] != reg
        assert ok(c.execute_command("FG.UVCREATE", "k", "SPAN", 3600, "MINUTES", 10, "HOURS", 3, "DAYS", 2))
        assert c.execute_command("FG.UVADDAT", "k", (n - 120) * US, item) == 1
        assert c.execute_command("FG.UVADDAT", "k", n * US, "now") == 1
        body, version, _ = rdbpayload.split(c.dump("k"))
        field = string_field(body)
        data = body[field.value_start:field.end]
        sp = Serial(data)
        fields = {name: (off, v) for name, off, _, _, v in sp.fields}
        cases = {}
        for t, width in enumerate((MINUTE, HOUR, DAY)):
            number = (n - 120) // width
            b = next(b for b in range(3) if fields.get("tier%d.bucket%d.number" % (t, b), (0, None))[1] == number)
            start = fields["tier%d.bucket%d.number" % (t, b)][0]
            end = next(e for kind, s_, e in sp.records if kind == "bucket" and s_ == start)
            held_off, held = fields["tier%d.buckets" % t]
            dropped = bytearray(data[:start] + data[end:])
            struct.pack_into("<H", dropped, held_off, held - 1)
            cases["tier %d: the bucket dropped" % t] = bytes(dropped)
            p = next(p for p in range(16384) if fields["tier%d.bucket%d.pair%d.register" % (t, b, p)][1] == reg)
            rank_off, stored = fields["tier%d.bucket%d.pair%d.rank" % (t, b, p)]
            assert stored == rank
            lowered = bytearray(data)
            lowered[rank_off] = rank - 1
            cases["tier %d: the register lowered" % t] = bytes(lowered)
        # the minute of "now" (within the SPAN): its register raised above the staircase's
        now_reg, now_rank = register_rank("now")
        b = next(b for b in range(3) if fields["tier0.bucket%d.number" % b][1] == n // MINUTE)
        p = next(p for p in range(16384) if fields["tier0.bucket%d.pair%d.register" % (b, p)][1] == now_reg)
        raised = bytearray(data)
        raised[fields["tier0.bucket%d.pair%d.rank" % (b, p)][0]] = now_rank + 5
        cases["tier 0: a register raised above the staircase"] = bytes(raised)
        accepted = []
        for label, payload in cases.items():
            try:
                c.execute_command("FG.UVLOAD", "bad", payload)
                # e.g. the minute of the item counts 0 while the staircase has it
                minute = between(minute_start(n - 120), minute_start(n - 120) + MINUTE)
                accepted.append("FG.UVLOAD, %s (its minute counts %d, the original's 1)" % (
                    label, c.execute_command("FG.UVCOUNT", "bad", *minute)))
                c.delete("bad")
            except redis.ResponseError as e:
                assert str(e) == "bad payload", (label, e)
            try:
                c.restore("bad", 0, rdbpayload.make(with_string(body, field, payload), version))
                accepted.append("RESTORE, " + label)
                c.delete("bad")
            except redis.ResponseError:
                pass
        assert not accepted, "accepted:\n  " + "\n  ".join(accepted)
        assert_no_crash(srv)
    finally:
        srv.cleanup()
