"""Persistence of every floodgate family: DEBUG RELOAD, RDB, AOF (with and
without RDB preamble, rewritten or not), DUMP/RESTORE, COPY, and corrupted
RESTORE payloads that must be refused without crashing the server."""

import os
import random
import time

import pytest
import redis

import rdbpayload
from harness import Server, wait_for
from topology import (assert_no_crash, assert_same_snapshot, aof_files, digest,
                      digest_value, inspect, read_aof_commands, s, snapshot,
                      wait_aof_rewrite_done)

# make fuzz-server multiplies the random corrupted payloads.
FUZZ_SCALE = int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))
LONG_MS = 600000  # 10 minutes: no state built here expires during a test

CHECK_COMMANDS = {b"FG.TOKEN", b"FG.LEAKY", b"FG.GCRA", b"CL.THROTTLE", b"FG.FIXED",
                  b"FG.SLIDING", b"FG.SLIDELOG", b"FG.PEEK"}


def allowed(cmd, reply):
    if s(cmd).upper() == "CL.THROTTLE":
        return reply[0] == 0
    return reply[0] == 1


def build_states(c, rnd=None):
    """Create states of every family with long windows. Returns
    {key: family} for the module keys, plus a few plain keys."""
    rnd = rnd or random.Random(1234)
    keys = {}

    def run(key, family, *cmd):
        r = c.execute_command(*cmd)
        assert isinstance(r, list) and len(r) == 5, (cmd, r)
        assert allowed(cmd[0], r), "setup request refused: %r -> %r" % (cmd, r)
        keys[key] = family

    # bucket family, through each of its four commands, and mixed on one key
    run("b:token", "bucket", "FG.TOKEN", "b:token", 100, "0.5", "COST", 40)
    run("b:leaky", "bucket", "FG.LEAKY", "b:leaky", 100, "0.25", "COST", 30)
    run("b:gcra", "bucket", "FG.GCRA", "b:gcra", 200, 1, 1000, "COST", 100)
    run("b:gcrafrac", "bucket", "FG.GCRA", "b:gcrafrac", 1000, 3, "70000.5", "COST", 10)
    run("b:cl", "bucket", "CL.THROTTLE", "b:cl", 99, 1, 60, 5)
    run("b:mixed", "bucket", "FG.TOKEN", "b:mixed", 50, "0.1", "COST", 3)
    run("b:mixed", "bucket", "FG.GCRA", "b:mixed", 50, 1, 10000, "COST", 2)
    run("b:mixed", "bucket", "FG.LEAKY", "b:mixed", 50, "0.1")
    run("b:mixed", "bucket", "CL.THROTTLE", "b:mixed", 49, 1, 10, 1)
    # fixed windows (aligned to the epoch), each decided 1 s into its
    # current window (AT), so that it has nearly a whole window to run
    # whenever the tests run
    now_ms = int(time.time() * 1000)
    c.config_set("floodgate.explicit-time", "yes")
    for i, w in enumerate((10 ** 12, 10 ** 11, 7 * 86400000, 86400000, 3600000 * 5, 3600000)):
        at_us = (now_ms - now_ms % w + 1000) * 1000
        for _ in range(i + 1):
            run("f:%d" % w, "fixed", "FG.FIXED", "f:%d" % w, 1000, w, "COST", 7, "AT", at_us)
    c.config_set("floodgate.explicit-time", "no")
    run("f:frac", "fixed", "FG.FIXED", "f:frac", 50, "100000000000.5", "COST", 3)
    # sliding windows
    for _ in range(6):
        run("s:10min", "sliding", "FG.SLIDING", "s:10min", 100, LONG_MS, "COST", 9)
    run("s:frac", "sliding", "FG.SLIDING", "s:frac", 10, "123456.789", "COST", 3)
    # a sliding state with a previous window, and states set directly, as a
    # repair tool may (restarts and replays then run with the default: off)
    now_us = int(time.time() * 1e6)
    ws = now_us - now_us % (LONG_MS * 1000)
    pxat = now_ms + 2 * LONG_MS
    c.config_set("floodgate.enable-effect-commands", "yes")
    assert c.execute_command("FG.SETSTATE", "s:prev", "sliding", ws, 5, 7, "PXAT", pxat) in (b"OK", "OK")
    keys["s:prev"] = "sliding"
    assert c.execute_command("FG.SETSTATE", "x:bucket", "bucket", (now_ms + LONG_MS) * 10 ** 6,
                             "PXAT", now_ms + LONG_MS) in (b"OK", "OK")
    keys["x:bucket"] = "bucket"
    assert c.execute_command("FG.SETSTATE", "x:fixed", "fixed", ws, 3, "PXAT", pxat) in (b"OK", "OK")
    keys["x:fixed"] = "fixed"
    c.config_set("floodgate.enable-effect-commands", "no")
    # sliding logs: many entries over many timestamps, one big run, a small one
    p = c.pipeline(transaction=False)
    for _ in range(3000):
        p.execute_command("FG.SLIDELOG", "l:many", 100000, LONG_MS, "COST", rnd.randint(1, 3))
    for r in p.execute():
        assert r[0] == 1, r
    keys["l:many"] = "slidelog"
    run("l:bulk", "slidelog", "FG.SLIDELOG", "l:bulk", 100000, LONG_MS, "COST", 50000)
    for _ in range(3):
        run("l:small", "slidelog", "FG.SLIDELOG", "l:small", 10, LONG_MS)
    # plain keys, so the digest covers more than the module
    c.set("plain:str", "v")
    c.hset("plain:hash", mapping={"a": 1, "b": 2})
    c.set("plain:ttl", "w", px=LONG_MS)
    # every module key carries a TTL, long enough for these tests
    for k in keys:
        pttl = c.pttl(k)
        assert pttl > 60000, "%s: PTTL %d, expected a TTL > 60 s" % (k, pttl)
    return keys


def all_keys(keys):
    return sorted(keys) + ["plain:str", "plain:hash", "plain:ttl"]


def check_states_present(c, keys):
    """Every module key answers FG.INSPECT with its family's type."""
    for k, fam in keys.items():
        ins = c.execute_command("FG.INSPECT", k)
        assert ins is not None, "%s vanished" % k
        assert s(ins[0]) == "type" and s(ins[1]) == fam, (k, ins)


# ---------------------------------------------------------------------------
# (a)-(e): reload, RDB restart, AOF with/without preamble, AOF incremental


def _start(extra=()):
    srv = Server(list(extra))
    srv.start()
    return srv


def test_digest_covers_the_state():
    """DEBUG DIGEST-VALUE depends on each state's fields (otherwise the digest
    comparisons below prove nothing)."""
    with Server() as srv:
        c = srv.client()
        keys = build_states(c)
        dvs = {k: digest_value(c, k) for k in keys}
        for k, v in dvs.items():
            assert v != "0" * 40, "%s: DEBUG DIGEST-VALUE is all zeros (no digest callback?)" % k
        assert len(set(dvs.values())) == len(dvs), "distinct states share a digest: %r" % dvs
        d0 = digest(c)
        # one more unit in one key changes the dataset digest
        c.execute_command("FG.SLIDELOG", "l:small", 10, LONG_MS)
        assert digest(c) != d0


def test_debug_reload():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c)
        before = snapshot(c, all_keys(keys))
        assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
        after = snapshot(c, all_keys(keys))
        assert_same_snapshot(before, after, "DEBUG RELOAD")
        check_states_present(c, keys)
        assert_no_crash(srv)


def test_save_and_restart():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c)
        assert c.save()
        before = snapshot(c, all_keys(keys))
        c.close()
        srv.restart()
        c = srv.client()
        assert "Done loading RDB" in open(srv.logfile, errors="replace").read()
        after = snapshot(c, all_keys(keys))
        assert_same_snapshot(before, after, "SAVE + restart")
        check_states_present(c, keys)
        assert_no_crash(srv)


@pytest.mark.parametrize("preamble", ["yes", "no"])
def test_aof_rewrite_and_restart(preamble):
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]) as srv:
        c = srv.client()
        keys = build_states(c)
        c.bgrewriteaof()
        wait_aof_rewrite_done(c)
        before = snapshot(c, all_keys(keys))
        files = aof_files(srv)
        base = [f for f in files if ".base." in f]
        incr = [f for f in files if ".incr." in f]
        assert len(base) == 1 and len(incr) == 1, files
        if preamble == "yes":
            assert base[0].endswith(".base.rdb"), files
            assert open(base[0], "rb").read(5) == b"REDIS"
        else:
            assert base[0].endswith(".base.aof"), files
            cmds = read_aof_commands(base[0])
            names = [a[0].upper() for a in cmds]
            # the module's aof_rewrite writes its states as FG.SETSTATE
            setstates = [a for a in cmds if a[0].upper() == b"FG.SETSTATE"]
            assert {a[1].decode() for a in setstates} == set(keys), names[:50]
            assert not CHECK_COMMANDS & set(names), "rate-limit checks in the rewritten AOF"
        # everything is in the base: the new incremental file is empty
        assert os.path.getsize(incr[0]) == 0, open(incr[0], "rb").read()[:500]
        c.close()
        srv.restart()
        c = srv.client()
        after = snapshot(c, all_keys(keys))
        assert_same_snapshot(before, after, "BGREWRITEAOF (preamble %s) + restart" % preamble)
        check_states_present(c, keys)
        assert_no_crash(srv)


def test_aof_incremental_only_and_restart():
    with Server(["--appendonly", "yes"]) as srv:
        c = srv.client()
        keys = build_states(c)
        wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, timeout=20)
        before = snapshot(c, all_keys(keys))
        files = aof_files(srv)
        incr = [f for f in files if ".incr." in f]
        assert len(incr) == 1, files
        cmds = read_aof_commands(incr[0])
        names = [a[0].upper() for a in cmds]
        # the AOF holds the resulting states with absolute times, never the checks
        assert not CHECK_COMMANDS & set(names), sorted(set(names))
        assert b"FG.SETSTATE" in names and b"FG.LOGAPPEND" in names, sorted(set(names))
        assert names.count(b"FG.LOGAPPEND") >= 3000
        c.close()
        srv.restart()
        c = srv.client()
        assert "DB loaded from append only file" in open(srv.logfile, errors="replace").read()
        after = snapshot(c, all_keys(keys))
        assert_same_snapshot(before, after, "AOF (incremental only) + restart")
        check_states_present(c, keys)
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# DUMP / RESTORE / COPY

PEEK = {
    "bucket": [("FG.PEEK", "TOKEN", "{k}", 100, "0.01"), ("FG.PEEK", "GCRA", "{k}", 100, 1, 100000)],
    "fixed": [("FG.PEEK", "FIXED", "{k}", 1000, 10 ** 12)],
    "sliding": [("FG.PEEK", "SLIDING", "{k}", 1000, LONG_MS)],
    "slidelog": [("FG.PEEK", "SLIDELOG", "{k}", 100000, LONG_MS)],
}
USE = {
    "bucket": ("FG.TOKEN", "{k}", 1000, "0.01"),
    "fixed": ("FG.FIXED", "{k}", 100000, 10 ** 12),
    "sliding": ("FG.SLIDING", "{k}", 100000, LONG_MS),
    "slidelog": ("FG.SLIDELOG", "{k}", 100000, LONG_MS),
}


def fmt(cmd, k):
    return [a.replace("{k}", k) if isinstance(a, str) else a for a in cmd]


def pexpiretime(c, k):
    return c.execute_command("PEXPIRETIME", k)


def test_dump_restore_same_server_and_other_server():
    with Server() as a, Server() as b:
        ca, cb = a.client(), b.client()
        keys = build_states(ca)
        for k, fam in sorted(keys.items()):
            payload = ca.dump(k)
            assert payload, k
            body, version, crc = rdbpayload.split(payload)
            assert rdbpayload.footer_ok(payload)
            assert body[0] == rdbpayload.RDB_TYPE_MODULE_2, (k, body[:1])
            at = pexpiretime(ca, k)
            assert at > 0
            # into another key of the same server, with the same absolute TTL
            assert ca.restore(k + ":copy", at, payload, absttl=True)
            # into another server
            assert cb.restore(k, at, payload, absttl=True)
            for c, dst in ((ca, k + ":copy"), (cb, k)):
                assert inspect(c, dst) == inspect(ca, k), (k, dst)
                assert digest_value(c, dst) == digest_value(ca, k), (k, dst)
                assert pexpiretime(c, dst) == at
                for pk in PEEK[fam]:
                    ra = ca.execute_command(*fmt(pk, k))
                    rb = c.execute_command(*fmt(pk, dst))
                    assert ra[:3] == rb[:3], (pk, ra, rb)
            # RESTORE REPLACE over an existing key of another family
            other = "b:token" if fam != "bucket" else "f:frac"
            if other in keys:
                ca.execute_command("COPY", other, k + ":repl")
                assert ca.restore(k + ":repl", 0, payload, replace=True)
                assert inspect(ca, k + ":repl") == inspect(ca, k)
                assert ca.pttl(k + ":repl") == -1
            # the restored key is usable by its family
            r = cb.execute_command(*fmt(USE[fam], k))
            assert isinstance(r, list) and len(r) == 5, r
        # the plain keys too, then the two servers hold the same dataset
        for k in ("plain:str", "plain:hash", "plain:ttl"):
            at = pexpiretime(ca, k)
            cb.restore(k, at if at > 0 else 0, ca.dump(k), absttl=at > 0)
        for k, fam in keys.items():
            ca.delete(k + ":copy", k + ":repl")
        # b was changed by USE above: compare with a fresh copy of each key
        for k in keys:
            cb.restore(k, pexpiretime(ca, k), ca.dump(k), absttl=True, replace=True)
        assert digest(ca) == digest(cb)
        assert_no_crash(a)
        assert_no_crash(b)


def test_copy_is_deep():
    with Server() as srv:
        c = srv.client()
        keys = build_states(c)
        for k, fam in sorted(keys.items()):
            before = inspect(c, k)
            assert c.execute_command("COPY", k, k + ":cp") == 1
            assert inspect(c, k + ":cp") == before
            assert digest_value(c, k + ":cp") == digest_value(c, k)
            assert pexpiretime(c, k + ":cp") == pexpiretime(c, k)
            # changing the copy leaves the original alone (and vice versa)
            r = c.execute_command(*fmt(USE[fam], k + ":cp"))
            assert r[0] == 1, (k, r)
            assert inspect(c, k) == before, "%s changed when its copy was used" % k
            assert inspect(c, k + ":cp") != before, "%s: the copy did not change" % k
            copy_state = inspect(c, k + ":cp")
            assert c.execute_command("FG.RESET", k) == 1
            assert inspect(c, k + ":cp") == copy_state
            # COPY onto an existing key needs REPLACE
            assert c.execute_command("COPY", k + ":cp", "plain:str") == 0
        assert c.execute_command("COPY", "l:many:cp", "l:many2", "REPLACE") == 1
        c.execute_command("DEBUG", "RELOAD")
        assert_no_crash(srv)


# ---------------------------------------------------------------------------
# corrupted RESTORE payloads

FAMILY_CALLS = [
    ("FG.INSPECT", "{k}"),
    ("DEBUG", "DIGEST-VALUE", "{k}"),
    ("DUMP", "{k}"),
    ("MEMORY", "USAGE", "{k}"),
    ("FG.PEEK", "TOKEN", "{k}", 10, 1),
    ("FG.PEEK", "GCRA", "{k}", 10, 1, 1000),
    ("FG.PEEK", "FIXED", "{k}", 10, 1000),
    ("FG.PEEK", "SLIDING", "{k}", 10, 1000),
    ("FG.PEEK", "SLIDELOG", "{k}", 10, 1000),
    ("FG.PEEK", "LEAKY", "{k}", 10, 1, "COST", 5),
    ("FG.TOKEN", "{k}", 10, 1),
    ("FG.LEAKY", "{k}", 10, 1, "COST", 3),
    ("FG.GCRA", "{k}", 10, "0.5", "1000.5"),
    ("CL.THROTTLE", "{k}", 9, 1, 1),
    ("FG.FIXED", "{k}", 10, 1000),
    ("FG.FIXED", "{k}", 1000000000, 10 ** 12, "COST", 999999999),
    ("FG.SLIDING", "{k}", 10, 1000),
    ("FG.SLIDING", "{k}", 1000000000, 10 ** 12, "COST", 999999999),
    ("FG.SLIDELOG", "{k}", 10, 1000),
    ("FG.SLIDELOG", "{k}", 100000, 10 ** 12, "COST", 7),
    ("COPY", "{k}", "{k}:copy"),
    ("FG.INSPECT", "{k}:copy"),
]


def base_payloads(c):
    """Real DUMPs of each family, small enough to corrupt at every byte."""
    now_ms = int(time.time() * 1000)
    now_us = now_ms * 1000
    c.execute_command("FG.TOKEN", "z:bucket", 100, 1, "COST", 50)
    c.execute_command("FG.FIXED", "z:fixed", 100, 10 ** 12, "COST", 3)
    c.execute_command("FG.SETSTATE", "z:sliding", "sliding", now_us - now_us % 60000000, 4, 9,
                      "PXAT", now_ms + 120000)
    for cost in (1, 2, 3, 1, 5):
        c.execute_command("FG.SLIDELOG", "z:slidelog", 100, 60000, "COST", cost)
    c.execute_command("FG.SLIDELOG", "z:slidelog1", 100, 60000, "COST", 4)
    out = []
    for k in ("z:bucket", "z:fixed", "z:sliding", "z:slidelog", "z:slidelog1"):
        payload = c.dump(k)
        assert payload, k
        # the footer check implemented here matches Redis's on real payloads
        assert rdbpayload.footer_ok(payload), k
        body, version, _ = rdbpayload.split(payload)
        assert rdbpayload.make(body, version) == payload
        out.append((k, body, version))
    return out


def corrupted_cases(bases):
    cases = []
    for i, (k, body, version) in enumerate(bases):
        for label, vb in rdbpayload.variants(body, seed=1000 + i, random_cases=300 * FUZZ_SCALE):
            cases.append(("%s/%s" % (k, label), vb, version))
    # type confusion: one family's fields under another family's type id
    parsed = []
    for k, body, version in bases:
        f = rdbpayload.parse_module_value(body)
        parsed.append((k, body, f))
    for ka, a, fa in parsed:
        for kb, b, fb in parsed:
            if ka != kb:
                vb = b[:fb[0].end] + a[fa[0].end:]
                cases.append(("%s-as-%s" % (ka, kb), vb, bases[0][2]))
    return cases


def test_corrupted_restore_payloads_never_crash():
    # sanitize-dump-payload: Redis validates its own encodings deeply, so only
    # the module's loaders are on trial here; FG.SETSTATE (sent as a repair
    # tool would) checks the states they accept
    srv = Server(["--sanitize-dump-payload", "yes", "--floodgate.enable-effect-commands", "yes"])
    try:
        srv.start()
        c = srv.client(socket_timeout=20)
        bases = base_payloads(c)
        names = {rdbpayload.module_type_name(rdbpayload.parse_module_value(b)[0].value)
                 for _, b, _ in bases}
        assert len(names) >= 4, names  # one module type per family
        cases = corrupted_cases(bases)
        assert len(cases) >= 2000, len(cases)
        crashes, accepted, refused = [], [], 0
        unexpected = []

        def crashed(label, payload, stage):
            why = [ln for ln in srv.log_tail(300).splitlines()
                   if any(m in ln for m in ("Guru Meditation", "crashed by signal", "ASSERTION",
                                            "Error loading data", "Terminating"))]
            crashes.append("%s (%s): redis.Redis(port=P).restore('k', 0, bytes.fromhex('%s'))\n    %s"
                           % (label, stage, payload.hex(), "\n    ".join(why[:3])))
            if len(crashes) >= 25:
                raise AssertionError("%d corrupted payloads crashed the server (stopped there):\n%s"
                                     % (len(crashes), "\n".join(crashes[:8])))
            srv.kill9()
            srv.start()
            return srv.client(socket_timeout=20)

        for n, (label, body, version) in enumerate(cases):
            payload = rdbpayload.make(body, version)
            key = "fz:%d" % n
            try:
                r = c.restore(key, 0, payload)
                assert r in (True, b"OK", "OK"), r
                accepted.append((key, label, payload))
            except redis.ResponseError as e:
                refused += 1
                if "payload version or checksum" in str(e):
                    unexpected.append("%s: footer refused: %s" % (label, e))
            except (redis.ConnectionError, redis.TimeoutError):
                c = crashed(label, payload, "RESTORE")
                continue
            try:
                assert c.ping()
            except (redis.ConnectionError, redis.TimeoutError):
                c = crashed(label, payload, "PING after RESTORE")
        # an accepted state is a valid state: FG.SETSTATE takes the same fields
        invalid = []
        for key, label, payload in accepted:
            try:
                ins = c.execute_command("FG.INSPECT", key)
            except redis.ResponseError:
                continue  # not a floodgate type (the type byte was changed)
            except (redis.ConnectionError, redis.TimeoutError):
                c = crashed(label, payload, "FG.INSPECT")
                continue
            if ins is None:
                continue
            typ = s(ins[1])
            fields = ins[3] if typ == "slidelog" else [ins[i] for i in range(3, len(ins) - 2, 2)]
            try:
                c.execute_command("FG.SETSTATE", "fz:check", typ, *fields)
            except redis.ResponseError as e:
                invalid.append("%s: RESTORE accepted %r, which FG.SETSTATE refuses (%s); payload %s"
                               % (label, ins, e, payload.hex()))
            except (redis.ConnectionError, redis.TimeoutError):
                c = crashed(label, payload, "FG.SETSTATE of the accepted state")
        # every accepted key must be usable without crashing
        for key, label, payload in accepted:
            p = c.pipeline(transaction=False)
            for cmd in FAMILY_CALLS:
                p.execute_command(*fmt(cmd, key))
            p.ping()
            try:
                res = p.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError):
                c = crashed(label, payload, "commands on the accepted key")
                continue
            if res[-1] is not True:
                unexpected.append("%s: %r" % (label, res))
        # the accepted states survive a save and a load
        if accepted and srv.alive():
            try:
                assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
            except (redis.ConnectionError, redis.TimeoutError):
                crashes.append("DEBUG RELOAD with %d accepted corrupted keys: %s" %
                               (len(accepted), srv.log_tail(25)))
                srv.kill9()
                srv.start()
        print("corrupted payloads: %d cases, %d refused, %d accepted, %d crashes"
              % (len(cases), refused, len(accepted), len(crashes)))
        assert not crashes, "%d of %d corrupted payloads crashed the server; first ones:\n%s" % (
            len(crashes), len(cases), "\n".join(crashes[:5]))
        assert not unexpected, unexpected[:10]
        assert not invalid, "%d accepted states are invalid:\n%s" % (len(invalid), "\n".join(invalid[:5]))
        assert refused > len(cases) // 2, (refused, len(accepted))
        assert_no_crash(srv)
    finally:
        srv.cleanup()


def test_large_sliding_log_persists():
    """A log with tens of thousands of distinct timestamps survives an AOF
    rewrite without preamble (one FG.SETSTATE with all of them), the
    incremental AOF after it, a restart, DUMP/RESTORE and DEBUG RELOAD."""
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client(socket_timeout=30)
        p = c.pipeline(transaction=False)
        for _ in range(30000):
            p.execute_command("FG.SLIDELOG", "big", 100000, LONG_MS)
        assert all(r[0] == 1 for r in p.execute())
        runs = len(inspect(c, "big")[3]) // 2
        assert runs > 10000, runs  # many distinct microsecond timestamps
        c.bgrewriteaof()
        wait_aof_rewrite_done(c)
        for _ in range(10):
            c.execute_command("FG.SLIDELOG", "big", 100000, LONG_MS, "COST", 3)
        before = snapshot(c, ["big"])
        srv.restart(timeout=30)
        c = srv.client(socket_timeout=30)
        after = snapshot(c, ["big"])
        assert_same_snapshot(before, after, "AOF rewrite + increments + restart of a large log")
        payload = c.dump("big")
        assert c.restore("big:copy", 0, payload)
        assert inspect(c, "big:copy") == inspect(c, "big")
        assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK")
        assert inspect(c, "big:copy") == inspect(c, "big") == before[1]["big"][1]
        assert_no_crash(srv)


def test_aof_replayed_after_the_ttls_passed():
    """States whose TTL has passed by the time the AOF is loaded are gone
    after loading (as the master would have deleted them), the others are
    intact, and loading does not fail."""
    with Server(["--appendonly", "yes"]) as srv:
        c = srv.client()
        keys = build_states(c)
        for k, cmd in (("short:token", ["FG.TOKEN", "short:token", 10, 10, "COST", 3]),
                       ("short:fixed", ["FG.FIXED", "short:fixed", 10, 300]),
                       ("short:sliding", ["FG.SLIDING", "short:sliding", 10, 150]),
                       ("short:log", ["FG.SLIDELOG", "short:log", 10, 300, "COST", 2]),
                       ("short:cl", ["CL.THROTTLE", "short:cl", 9, 10, 1, 2])):
            r = c.execute_command(*cmd)
            assert allowed(cmd[0], r), (cmd, r)
            pttl = c.pttl(k)
            assert pttl == -2 or 0 < pttl <= 600, (k, pttl)  # a 300 ms window may end at once
        before = snapshot(c, all_keys(keys))
        srv.stop()  # the short states are still alive in the AOF: no DEL was written
        time.sleep(0.8)
        srv.start()
        c = srv.client()
        for k in ("short:token", "short:fixed", "short:sliding", "short:log", "short:cl"):
            assert c.exists(k) == 0, "%s outlived its TTL through the AOF" % k
        after = snapshot(c, all_keys(keys))
        # (the dataset digest differs by the short states: compare key by key)
        for k in all_keys(keys):
            assert after[1][k][:2] == before[1][k][:2], k
        assert_no_crash(srv)
