"""Persistence of Bloom filters (type fg-bloomf, docs/bloom.md "Persistence
and replication").

Every shape of filter (the default one, chains grown with expansions 1, 2
and 5, full and partly full non-scaling filters, an empty one, binary items,
a TTL, one of more than 16 MiB) must survive DEBUG RELOAD, SAVE + restart,
AOF (rewritten with an RDB preamble, or without one, where the rewrite
emits BF.LOADCHUNK, and incremental), DUMP/RESTORE into this and another
server, COPY, and BF.SCANDUMP/BF.LOADCHUNK into this and another server. The
strongest comparison is DUMP itself: equal bytes mean an identical value.
Every item added stays present, and a restored filter goes on growing as
the original does.

The loaders also face bytes nobody wrote: corrupted RESTORE payloads
(truncations, flips, huge lengths, with the CRC recomputed) and corrupted
BF.LOADCHUNK headers and chunks. Each is refused with an error or gives a
filter that every command serves and that the server can save and load
again; the server stays up and refusals leak nothing.

FLOODGATE_FUZZ_SCALE multiplies the random corrupted payloads.
"""

import os
import random

import pytest
import redis

import rdbpayload
from harness import Server, wait_for
from test_bloom import (CHUNK_MAX, bf_info, items, loadchunks, madd, mexists, scandump)
from topology import (assert_no_crash, aof_files, digest, read_aof_commands, s,
                      wait_aof_rewrite_done)

FUZZ_SCALE = int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))
HOUR_MS = 3_600_000
LOADING = "filter is still being loaded by BF.LOADCHUNK"  # lookups and adds until complete
BINARY = [b"", b"\x00", b"\xff" * 3, b"\r\n*1\r\n$3\r\nbad\r\n", bytes(range(256))]


def ok(reply):
    return reply in (True, b"OK", "OK")


def plain_server(*extra):
    """DUMP writes strings raw (no LZF), so corruptions can parse the value."""
    return Server(["--rdbcompression", "no"] + list(extra))


def build_filters(c, huge=False):
    """Filters of every shape; returns {key: items added}."""
    added = {}

    def fill(key, values):
        madd(c, key, values)
        added[key] = list(values)

    assert c.execute_command("BF.ADD", "b:default", "first") == 1
    fill("b:default", ["first"] + items("d", 60))
    assert ok(c.execute_command("BF.RESERVE", "b:grown", "0.01", 100, "EXPANSION", 2))
    fill("b:grown", items("g", 2500))
    assert ok(c.execute_command("BF.RESERVE", "b:exp1", "0.001", 40, "EXPANSION", 1))
    fill("b:exp1", items("e", 400))
    assert ok(c.execute_command("BF.RESERVE", "b:exp5", "0.05", 10, "EXPANSION", 5))
    fill("b:exp5", items("f", 1000))
    assert c.execute_command("BF.INSERT", "b:full", "CAPACITY", 3, "NONSCALING", "ITEMS",
                             "a", "b", "c") == [1, 1, 1]
    added["b:full"] = ["a", "b", "c"]
    assert ok(c.execute_command("BF.RESERVE", "b:nonscaling", "0.0001", 5000, "NONSCALING"))
    fill("b:nonscaling", items("n", 1000))
    assert ok(c.execute_command("BF.RESERVE", "b:empty", "0.1", 1000))
    added["b:empty"] = []
    assert ok(c.execute_command("BF.RESERVE", "b:big", "0.001", 300000))
    fill("b:big", items("b", 20000))
    fill("b:bin", BINARY)
    fill("b:ttl", items("t", 10))
    assert c.pexpire("b:ttl", HOUR_MS)
    if huge:  # more than one 16 MiB chunk
        assert ok(c.execute_command("BF.RESERVE", "b:huge", "0.01", 15_000_000))
        fill("b:huge", items("h", 5000))
        assert bf_info(c, "b:huge")["Size"] > CHUNK_MAX
    for k in ("b:grown", "b:exp1", "b:exp5"):
        assert bf_info(c, k)["Number of filters"] >= 3, k
    c.set("plain:str", "v")
    return added


def snapshot(c, keys):
    """Every value's DUMP, PEXPIRETIME, BF.INFO and BF.CARD, and the digest."""
    p = c.pipeline(transaction=False)
    for k in keys:
        p.dump(k)
        p.execute_command("PEXPIRETIME", k)
        p.execute_command("BF.INFO", k)
        p.execute_command("BF.CARD", k)
    res = p.execute()
    return {"digest": digest(c),
            "values": {k: tuple(res[4 * n:4 * n + 4]) for n, k in enumerate(keys)}}


def assert_same(before, after, what, dataset=True):
    problems = []
    for k, (dump0, at0, info0, card0) in before["values"].items():
        dump1, at1, info1, card1 = after["values"][k]
        if dump1 != dump0:
            problems.append("%s: DUMP changed (%s -> %s)" % (k, info0, info1))
        if (at1, info1, card1) != (at0, info0, card0):
            problems.append("%s: %r -> %r" % (k, (at0, info0, card0), (at1, info1, card1)))
    if dataset and before["digest"] != after["digest"]:
        problems.append("DEBUG DIGEST %s -> %s" % (before["digest"], after["digest"]))
    assert not problems, "%s changed the dataset:\n  %s" % (what, "\n  ".join(problems[:20]))


def check_members(c, added, rename=lambda k: k):
    for k, values in added.items():
        if values:
            assert mexists(c, rename(k), values) == [1] * len(values), "false negatives in " + k


def grow_alike(c1, k1, c2, k2, n=1500):
    """The same new items into two equal filters give the same values (into
    a filter that has them already, nothing changes)."""
    new = items("later", n)
    madd(c1, k1, new)
    madd(c2, k2, new)
    assert c1.dump(k1) == c2.dump(k2), (k1, k2)


# ---------------------------------------------------------------------------
# Reload, restart, AOF


def test_debug_reload():
    with Server() as srv:
        c = srv.client(socket_timeout=60)
        added = build_filters(c)
        before = snapshot(c, list(added))
        assert ok(c.execute_command("DEBUG", "RELOAD"))
        assert_same(before, snapshot(c, list(added)), "DEBUG RELOAD")
        check_members(c, added)
        assert_no_crash(srv)


def test_save_and_restart():
    with Server() as srv:
        c = srv.client(socket_timeout=60)
        added = build_filters(c)
        before = snapshot(c, list(added))
        assert c.save()
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert "Done loading RDB" in open(srv.logfile, errors="replace").read()
        assert_same(before, snapshot(c, list(added)), "SAVE + restart")
        check_members(c, added)
        assert_no_crash(srv)


def loadchunk_commands(cmds):
    """{key: [(iterator, data)]} of the BF.LOADCHUNK commands, and the set of
    other command names per key."""
    loads, others = {}, {}
    for a in cmds:
        name = a[0].upper()
        if name in (b"SELECT", b"MULTI", b"EXEC"):
            continue
        key = a[1].decode()
        if name == b"BF.LOADCHUNK":
            assert len(a) == 4, a[:3]
            loads.setdefault(key, []).append((int(a[2]), a[3]))
        else:
            others.setdefault(key, set()).add(name)
    return loads, others


@pytest.mark.parametrize("preamble", ["yes", "no"])
def test_aof_rewrite_and_restart(preamble):
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]) as srv:
        c = srv.client(socket_timeout=60)
        added = build_filters(c, huge=preamble == "no")
        c.bgrewriteaof()
        wait_aof_rewrite_done(c, timeout=60)
        before = snapshot(c, list(added))
        base = [f for f in aof_files(srv) if ".base." in f]
        assert len(base) == 1, aof_files(srv)
        if preamble == "no":
            loads, others = loadchunk_commands(read_aof_commands(base[0]))
            assert set(loads) == set(added), sorted(loads)
            for k in added:
                chunks = loads[k]
                assert chunks[0][0] == 1, "%s: the first BF.LOADCHUNK is not the header" % k
                assert all(len(d) <= CHUNK_MAX for _, d in chunks), k
                assert chunks == scandump(c, k), "%s: the AOF's chunks are not SCANDUMP's" % k
                assert others.get(k, set()) <= {b"PEXPIREAT"}, (k, others.get(k))
            assert len(loads["b:huge"]) >= 3, [len(d) for _, d in loads["b:huge"]]
            assert others["b:ttl"] == {b"PEXPIREAT"}
        srv.restart(timeout=60)
        c = srv.client(socket_timeout=60)
        assert "DB loaded from" in open(srv.logfile, errors="replace").read()
        assert_same(before, snapshot(c, list(added)), "BGREWRITEAOF (preamble %s) + restart"
                    % preamble)
        check_members(c, added)
        assert_no_crash(srv)


def test_aof_incremental_and_restart():
    """Without a rewrite the AOF holds the writes as sent, and only those
    that changed something: no add that answered 0, no refused command."""
    with Server(["--appendonly", "yes"]) as srv:
        c = srv.client(socket_timeout=60)
        added = build_filters(c)
        # changes nothing: all present, refused, or reads
        assert c.execute_command("BF.ADD", "b:default", "first") == 0
        assert c.execute_command("BF.MADD", "b:grown", "g:1", "g:2") == [0, 0]
        assert c.execute_command("BF.INSERT", "b:full", "ITEMS", "a", "b") == [0, 0]
        assert c.execute_command("BF.INSERT", "b:exp1", "CAPACITY", 5, "ITEMS", "e:3") == [0]
        for argv in (["BF.ADD", "b:full", "zzz"], ["BF.RESERVE", "b:empty", "0.1", 10],
                     ["BF.INSERT", "missing", "NOCREATE", "ITEMS", "x"],
                     ["BF.RESERVE", "bad", "2", 10]):
            with pytest.raises(redis.ResponseError):
                c.execute_command(*argv)
        c.execute_command("BF.EXISTS", "b:grown", "g:1")
        c.execute_command("BF.SCANDUMP", "b:grown", 0)
        # changes something: a partly new batch
        assert c.execute_command("BF.MADD", "b:default", "first", "brand-new") == [0, 1]
        added["b:default"].append("brand-new")
        wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, timeout=20)
        before = snapshot(c, list(added))
        incr = [f for f in aof_files(srv) if ".incr." in f]
        cmds = [a for f in incr for a in read_aof_commands(f) or []]
        sent = [[x.decode("latin-1") for x in a] for a in cmds
                if a[0].upper().startswith(b"BF.")]
        assert sent.count(["BF.ADD", "b:default", "first"]) == 1  # the one that created it
        for unchanged in (["BF.MADD", "b:grown", "g:1", "g:2"],
                          ["BF.INSERT", "b:full", "ITEMS", "a", "b"],
                          ["BF.INSERT", "b:exp1", "CAPACITY", "5", "ITEMS", "e:3"]):
            assert unchanged not in sent, "%r is in the AOF" % unchanged
        assert ["BF.MADD", "b:default", "first", "brand-new"] in sent
        names = {a[0] for a in sent}
        assert names <= {"BF.ADD", "BF.MADD", "BF.INSERT", "BF.RESERVE"}, names
        assert not any(a[1] in ("missing", "bad") for a in sent)
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert_same(before, snapshot(c, list(added)), "AOF + restart")
        check_members(c, added)
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# DUMP/RESTORE, COPY, SCANDUMP/LOADCHUNK


def test_dump_restore_to_this_and_another_server():
    with Server() as a, Server() as b:
        ca, cb = a.client(socket_timeout=60), b.client(socket_timeout=60)
        added = build_filters(ca)
        for k in added:
            dumped = ca.dump(k)
            at = ca.execute_command("PEXPIRETIME", k)
            assert ca.restore(k + ":r", max(at, 0), dumped, absttl=at > 0)
            assert cb.restore(k, max(at, 0), dumped, absttl=at > 0)
            for c, dst in ((ca, k + ":r"), (cb, k)):
                assert c.dump(dst) == dumped, dst
                assert c.execute_command("PEXPIRETIME", dst) == at, dst
                assert s(c.execute_command("DEBUG", "DIGEST-VALUE", dst)) == \
                    s(ca.execute_command("DEBUG", "DIGEST-VALUE", k))
                assert bf_info(c, dst) == bf_info(ca, k)
        check_members(cb, added)
        for k in ("b:default", "b:grown", "b:exp1", "b:nonscaling", "b:empty"):
            grow_alike(ca, k, cb, k)
            grow_alike(ca, k + ":r", ca, k)
        assert_no_crash(a)
        assert_no_crash(b)


def test_copy_is_deep():
    with Server() as srv:
        c = srv.client(socket_timeout=60)
        added = build_filters(c)
        before = snapshot(c, list(added))
        for k in added:
            assert c.execute_command("COPY", k, k + ":cp") == 1
            assert c.dump(k + ":cp") == c.dump(k)
            assert c.execute_command("PEXPIRETIME", k + ":cp") == \
                c.execute_command("PEXPIRETIME", k)
        for k in added:
            if k != "b:full":
                assert sum(madd(c, k + ":cp", items("copy-only", 500))) > 0, k
        assert_same(before, snapshot(c, list(added)), "changing the copies", dataset=False)
        c.delete(*[k + ":cp" for k in added])
        assert_same(before, snapshot(c, list(added)), "deleting the copies")
        assert_no_crash(srv)


def test_scandump_loadchunk_to_this_and_another_server():
    """The RedisBloom client loop: the same value on either server, and it
    grows as the original does. Chunks are at most 16 MiB."""
    with Server() as a, Server() as b:
        ca, cb = a.client(socket_timeout=60), b.client(socket_timeout=60)
        added = build_filters(ca, huge=True)
        for k in added:
            chunks = scandump(ca, k)
            assert chunks and chunks[0][0] == 1, k
            assert all(len(d) <= CHUNK_MAX for _, d in chunks), k
            if k == "b:huge":
                assert len(chunks) >= 3, [len(d) for _, d in chunks]
            assert scandump(ca, k) == chunks, "SCANDUMP is not repeatable"
            loadchunks(ca, k + ":ld", chunks)
            loadchunks(cb, k, chunks)
            for c, dst in ((ca, k + ":ld"), (cb, k)):
                assert c.dump(dst) == ca.dump(k), dst
                assert bf_info(c, dst) == bf_info(ca, k)
                assert c.execute_command("BF.CARD", dst) == ca.execute_command("BF.CARD", k)
        check_members(cb, added)
        for k in ("b:default", "b:grown", "b:exp5", "b:nonscaling"):
            grow_alike(ca, k, cb, k)
            grow_alike(ca, k + ":ld", ca, k)
        assert_no_crash(a)
        assert_no_crash(b)


def test_half_loaded_filter_survives_persistence():
    """A DEBUG RELOAD (RDB), an AOF rewrite (without preamble: BF.LOADCHUNK
    of what has arrived) and restarts between BF.LOADCHUNK's header and its
    chunks: the half-loaded filter saves and loads, and the chunks still
    complete it afterwards."""
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client(socket_timeout=60)
        assert ok(c.execute_command("BF.RESERVE", "src", "0.01", 100, "EXPANSION", 2))
        values = items("x", 1000)
        madd(c, "src", values)
        chunks = scandump(c, "src")
        assert len(chunks) >= 4, len(chunks)
        loadchunks(c, "dst", chunks[:1])
        before = c.dump("dst")
        assert ok(c.execute_command("DEBUG", "RELOAD"))
        assert c.dump("dst") == before
        loadchunks(c, "dst", chunks[1:2])
        c.bgrewriteaof()
        wait_aof_rewrite_done(c)
        before = c.dump("dst")
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert c.dump("dst") == before
        loadchunks(c, "dst", chunks[2:3])  # into the AOF as sent, after the rewrite
        before = c.dump("dst")
        srv.restart()
        c = srv.client(socket_timeout=60)
        assert c.dump("dst") == before
        loadchunks(c, "dst", chunks[3:])
        assert c.dump("dst") == c.dump("src")
        assert mexists(c, "dst", values) == [1] * len(values)
        assert_no_crash(srv)


def test_digest_covers_every_field():
    """DEBUG DIGEST-VALUE, which the replication tests compare, changes with
    each parameter and with the bits."""
    with Server() as srv:
        c = srv.client(socket_timeout=60)
        for key, argv in (("base", ["0.01", 100, "EXPANSION", 2]),
                          ("same", ["0.01", 100, "EXPANSION", 2]),
                          ("expansion", ["0.01", 100, "EXPANSION", 3]),
                          ("error", ["0.011", 100, "EXPANSION", 2]),
                          ("capacity", ["0.01", 101, "EXPANSION", 2]),
                          ("nonscaling", ["0.01", 100, "NONSCALING"])):
            assert ok(c.execute_command("BF.RESERVE", key, *argv))
            madd(c, key, items("d", 20))
        assert ok(c.execute_command("BF.RESERVE", "items", "0.01", 100, "EXPANSION", 2))
        madd(c, "items", items("d", 19) + ["other"])
        assert ok(c.execute_command("BF.RESERVE", "empty", "0.01", 100, "EXPANSION", 2))
        names = ["base", "same", "expansion", "error", "capacity", "nonscaling", "items", "empty"]
        dv = dict(zip(names, s(c.execute_command("DEBUG", "DIGEST-VALUE", *names))))
        assert dv["same"] == dv["base"]
        assert len(set(dv.values())) == len(names) - 1, dv
        # a filter being loaded differs from the complete one, and by how much arrived
        chunks = scandump(c, "base")
        loadchunks(c, "half", chunks[:1])
        half = s(c.execute_command("DEBUG", "DIGEST-VALUE", "half"))[0]
        loadchunks(c, "half", chunks[1:])
        assert half not in dv.values()
        assert s(c.execute_command("DEBUG", "DIGEST-VALUE", "half"))[0] == dv["base"]


# ---------------------------------------------------------------------------
# Corrupted RESTORE payloads and BF.LOADCHUNK data


def used_memory(c):
    return int(c.info("memory")["used_memory"])


def small_filters(c):
    """Small values of each shape (their bit arrays are short enough for
    every byte to be corrupted)."""
    assert c.execute_command("BF.MADD", "z:default", *items("z", 5)) == [1] * 5
    assert c.execute_command("BF.INSERT", "z:full", "CAPACITY", 3, "NONSCALING", "ITEMS",
                             "a", "b", "c") == [1, 1, 1]
    assert ok(c.execute_command("BF.RESERVE", "z:chain", "0.1", 2, "EXPANSION", 2))
    madd(c, "z:chain", items("c", 12))
    assert bf_info(c, "z:chain")["Number of filters"] >= 3
    assert ok(c.execute_command("BF.RESERVE", "z:empty", "0.25", 3))
    return ["z:default", "z:full", "z:chain", "z:empty"]


KEY_CALLS = [
    ("BF.INFO", "{k}"),
    ("BF.CARD", "{k}"),
    ("BF.EXISTS", "{k}", "z:1"),
    ("BF.MEXISTS", "{k}", "a", "c:3", "zz"),
    ("BF.SCANDUMP", "{k}", 0),
    ("BF.SCANDUMP", "{k}", 1),
    ("DEBUG", "DIGEST-VALUE", "{k}"),
    ("MEMORY", "USAGE", "{k}"),
    ("DUMP", "{k}"),
    ("COPY", "{k}", "{k}:copy"),
    ("BF.ADD", "{k}", "new-1"),
    ("BF.MADD", "{k}", "new-2", "new-3", "a"),
    ("BF.INSERT", "{k}", "ITEMS", "n4", "n5", "n6", "n7", "n8", "n9", "n10"),
    ("BF.ADD", "{k}:copy", "other"),
]


def serve_accepted(c, keys, problems):
    """Every command on every accepted key; then each value's DUMP must
    RESTORE (the loader takes back what the server holds) and its chunks
    must load into a new key."""
    for key, label in keys:
        if c.type(key) != b"fg-bloomf":
            continue  # the damage made another type's value
        p = c.pipeline(transaction=False)
        for cmd in KEY_CALLS:
            p.execute_command(*[a.replace("{k}", key) if isinstance(a, str) else a for a in cmd])
        p.ping()
        res = p.execute(raise_on_error=False)
        assert res[-1] is True, (label, res)
        for cmd, rep in zip(KEY_CALLS, res):
            if isinstance(rep, redis.ResponseError) and not str(rep).startswith(
                    ("non scaling filter is full", LOADING)):
                problems.append("%s: %r on the accepted value: %s" % (label, cmd, rep))
        dumped = c.dump(key)
        try:
            c.restore(key + ":again", 0, dumped)
        except redis.ResponseError as e:
            problems.append("%s: the server holds a value it cannot RESTORE: %s" % (label, e))
            continue
        try:
            loadchunks(c, key + ":chunks", scandump(c, key))
            if c.dump(key + ":chunks") != dumped:
                problems.append("%s: SCANDUMP/LOADCHUNK gives another value" % label)
        except redis.ResponseError as e:
            problems.append("%s: its own chunks do not load: %s" % (label, e))
        c.delete(key + ":again", key + ":chunks", key + ":copy")


def test_corrupted_restore_payloads_never_crash():
    srv = plain_server("--sanitize-dump-payload", "yes", "--slowlog-log-slower-than", "-1")
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        cases = []
        for n, k in enumerate(small_filters(c)):
            body, _, _ = rdbpayload.split(c.dump(k))
            rdbpayload.parse_module_value(body)
            for label, vb in rdbpayload.variants(body, seed=9100 + n,
                                                 random_cases=150 * FUZZ_SCALE):
                cases.append(("%s/%s" % (k, label), vb))
        assert len(cases) >= 2000, len(cases)
        version = rdbpayload.split(c.dump("z:default"))[1]
        crashes, accepted, refused_bodies, problems = [], [], [], []

        def restart(label, body, stage):
            crashes.append("%s (%s): RESTORE k 0 %s\n    %s" % (
                label, stage, rdbpayload.make(body, version).hex()[:400],
                srv.log_tail(5).replace("\n", "\n    ")))
            if len(crashes) >= 10:
                raise AssertionError("crashes:\n" + "\n".join(crashes))
            srv.kill9()
            srv.start()
            return srv.client(socket_timeout=20)

        for n, (label, body) in enumerate(cases):
            key = "fz:%d" % n
            try:
                c.restore(key, 0, rdbpayload.make(body, version))
                accepted.append((key, label))
            except redis.ResponseError as e:
                assert "payload version or checksum" not in str(e), label
                refused_bodies.append(body)
            except (redis.ConnectionError, redis.TimeoutError):
                c = restart(label, body, "RESTORE")
        # refusing again and again holds on to nothing
        c.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0")
        used_memory(c)
        mem = []
        for _ in range(3):
            p = c.pipeline(transaction=False)
            for body in refused_bodies:
                p.restore("victim", 0, rdbpayload.make(body, version))
            assert all(isinstance(x, redis.ResponseError) for x in p.execute(raise_on_error=False))
            mem.append(used_memory(c))
        assert mem[2] - mem[0] < 1024, "used_memory %r over rounds of %d refused payloads" % (
            mem, len(refused_bodies))
        try:
            serve_accepted(c, accepted, problems)
            assert ok(c.execute_command("DEBUG", "RELOAD"))
        except (redis.ConnectionError, redis.TimeoutError):
            crashes.append("serving the accepted values: " + srv.log_tail(20))
        print("corrupted bloom payloads: %d cases, %d refused, %d accepted, %d crashes"
              % (len(cases), len(refused_bodies), len(accepted), len(crashes)))
        assert not crashes, "\n".join(crashes[:5])
        assert not problems, "\n".join(problems[:10])
        assert len(refused_bodies) > len(cases) // 2, (len(refused_bodies), len(accepted))
        assert_no_crash(srv)
    finally:
        srv.cleanup()


def corrupted(data, rnd, n_random):
    """Truncations, flips at every byte, growth, random damage."""
    out = {}
    for i in range(len(data)):
        out["trunc%d" % i] = data[:i]
        b = bytearray(data)
        b[i] ^= 0xFF
        out["flip%d" % i] = bytes(b)
        b = bytearray(data)
        b[i] ^= 1 << rnd.randrange(8)
        out["bit%d" % i] = bytes(b)
    for extra in (b"\x00", b"\xff" * 8, bytes(rnd.randrange(256) for _ in range(100))):
        out["grow%d" % len(extra)] = data + extra
    for k in range(n_random):
        b = bytearray(data)
        for _ in range(rnd.randrange(1, 6)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        out["rand%d" % k] = bytes(b)
    return [(label, d) for label, d in out.items() if d != data]


def test_corrupted_loadchunk_never_crashes():
    """Corrupted headers: "ERR received bad data" and no key, or a filter
    that every command serves and that saves and loads. Corrupted chunks
    after a good header: refused, or the same."""
    srv = Server(["--slowlog-log-slower-than", "-1"])
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        rnd = random.Random(9200)
        problems, accepted, refused = [], [], []
        n = 0

        def crashed(what):
            raise AssertionError("%s crashed the server:\n%s" % (what, srv.log_tail(20)))

        for k in small_filters(c):
            chunks = scandump(c, k)
            for label, data in corrupted(chunks[0][1], rnd, 100 * FUZZ_SCALE):
                n += 1
                key = "lh:%d" % n
                what = "%s header %s" % (k, label)
                try:
                    c.execute_command("BF.LOADCHUNK", key, 1, data)
                except redis.ResponseError as e:
                    if str(e) != "received bad data" or c.exists(key):
                        problems.append("%s: %s (the key %s)" % (
                            what, e, "exists" if c.exists(key) else "is absent"))
                    refused.append(data)
                    continue
                except (redis.ConnectionError, redis.TimeoutError):
                    crashed(what)
                try:
                    loadchunks(c, key, chunks[1:])
                except redis.ResponseError:
                    pass
                except (redis.ConnectionError, redis.TimeoutError):
                    crashed(what + " then its chunks")
                accepted.append((key, what))
            for ci in range(1, len(chunks)):
                it, data = chunks[ci]
                for label, bad in corrupted(data, rnd, 20 * FUZZ_SCALE)[:150]:
                    n += 1
                    key = "lc:%d" % n
                    what = "%s chunk %d %s" % (k, it, label)
                    loadchunks(c, key, chunks[:ci])
                    try:
                        c.execute_command("BF.LOADCHUNK", key, it, bad)
                        loadchunks(c, key, chunks[ci + 1:])
                    except redis.ResponseError:
                        pass
                    except (redis.ConnectionError, redis.TimeoutError):
                        crashed(what)
                    accepted.append((key, what))
        assert refused, "no corrupted header was refused"
        # refusing again and again holds on to nothing
        c.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0")
        used_memory(c)
        mem = []
        for _ in range(3):
            p = c.pipeline(transaction=False)
            for data in refused:
                p.execute_command("BF.LOADCHUNK", "victim", 1, data)
            p.execute(raise_on_error=False)
            assert c.exists("victim") == 0
            mem.append(used_memory(c))
        assert mem[2] - mem[0] < 1024, "used_memory %r over rounds of %d refused headers" % (
            mem, len(refused))
        try:
            serve_accepted(c, accepted, problems)
            assert ok(c.execute_command("DEBUG", "RELOAD"))
        except (redis.ConnectionError, redis.TimeoutError):
            crashed("serving the accepted filters")
        print("corrupted LOADCHUNK: %d cases, %d headers refused, %d keys accepted"
              % (n, len(refused), len(accepted)))
        assert not problems, "\n".join(problems[:10])
        assert_no_crash(srv)
    finally:
        srv.cleanup()
