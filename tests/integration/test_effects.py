"""Effect commands (docs/security.md): FG.SETSTATE, FG.LOGAPPEND, FG.HOLD,
FG.UNHOLD, FG.PLSTATE, FG.UVADDAT and FG.UVLOAD write a state as given, past
the algorithms. They run for the replication link and AOF loading; clients
get them only while floodgate.enable-effect-commands is on (FG.UVADDAT, the
clients' backfill, also with floodgate.explicit-time).

Refused: each command, with arguments that would change the dataset, from a
client whose ACL allows it, directly, in MULTI and in a script: an ERR that
names the config, DEBUG DIGEST unchanged, the fencing counter not raised.
Issue 11's forged holder (a token at 2^63-1 from a `+@all -@dangerous`
user) is among them. Allowed: the same commands with the config on do what
the replication stream would.

The module's own streams still pass: a master and a replica, both with the
defaults and an AOF in plain commands, run traffic of every family (plain,
in MULTI and in a script, whose effects are what is replicated); the replica
and the master's AOF replayed -- its effects, then a rewrite, which emits
FG.SETSTATE, FG.HOLD, FG.PLSTATE, FG.UVLOAD -- hold the master's dataset,
and no replica refuses what its master sent.
"""

import time

import pytest
import redis

import rdbpayload
from harness import RawClient, Server, digest, wait_for, wait_replica_synced
from topology import (aof_command_names, aof_files, assert_no_crash, read_aof_commands,
                      wait_aof_rewrite_done)

CONFIG = "floodgate.enable-effect-commands"
TIMED = "floodgate.explicit-time"
EFFECTS = ["FG.SETSTATE", "FG.LOGAPPEND", "FG.HOLD", "FG.UNHOLD", "FG.PLSTATE", "FG.UVADDAT",
           "FG.UVLOAD"]


def now_us():
    return time.time_ns() // 1000


def string_of_dump(c, key):
    """The serialized state in a key's DUMP: what FG.PLSTATE and FG.UVLOAD take."""
    body, _, _ = rdbpayload.split(c.dump(key))
    return [f for f in rdbpayload.parse_module_value(body) if f.kind == "string"][0].value


@pytest.fixture(scope="module")
def srv():
    """DUMP writes strings raw (no LZF), so payloads can be taken out."""
    with Server(["--rdbcompression", "no"]) as server:
        yield server
        assert_no_crash(server)


@pytest.fixture
def c(srv):
    c = srv.client()
    c.flushall()
    c.config_set(CONFIG, "no")
    c.config_set(TIMED, "no")
    c.execute_command("FG.LOCK", "held", "alice", 600000)
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, "0.01")
    c.execute_command("FG.CHECK", "p", "checked")
    c.execute_command("FG.UVADD", "counted", "a", "b", "c")
    yield c
    c.config_set(CONFIG, "no")
    c.close()


def effect_calls(c):
    """{name: argv}: each effect command with arguments it accepts and that
    change the dataset."""
    t = now_us()
    return {
        "FG.SETSTATE": ["FG.SETSTATE", "bucket", "bucket", t * 1000, "PXAT", t // 1000 + 60000],
        "FG.LOGAPPEND": ["FG.LOGAPPEND", "log", 0, t, 3, "PXAT", t // 1000 + 60000],
        "FG.HOLD": ["FG.HOLD", "junk", "lock", 0, "evil", "exclusive", 1, t + 10 ** 9, 2 ** 52],
        "FG.UNHOLD": ["FG.UNHOLD", "held", "alice"],
        "FG.PLSTATE": ["FG.PLSTATE", "copy", string_of_dump(c, "checked")],
        "FG.UVADDAT": ["FG.UVADDAT", "counted", t - 3600 * 10 ** 6, "backfilled"],
        "FG.UVLOAD": ["FG.UVLOAD", "loaded", string_of_dump(c, "counted")],
    }


def next_token(c):
    info = c.execute_command("INFO", "floodgate")
    return int(info["floodgate_lock_next_token"])


def assert_refused(c, send, what):
    """Every effect command, sent by `send(argv)`, is refused: an error that
    names the config, nothing changed, the fencing counter not raised."""
    for name, argv in effect_calls(c).items():
        before = digest(c)
        reply = send(argv)
        assert isinstance(reply, Exception), (what, name, reply)
        config = TIMED if name == "FG.UVADDAT" else CONFIG
        assert name in str(reply) and config in str(reply), (what, name, reply)
        assert digest(c) == before, (what, name)
    assert next_token(c) < now_us() + 10 ** 12, what


def test_refused_from_a_client_allowed_everything_but_dangerous(c, srv):
    """Issue 11: the user below could forge a holder whose token every later
    grant then repeated. On Redis 7.0 -@dangerous leaves module commands in,
    so the module itself must refuse."""
    c.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-@dangerous",
                      "+fg.hold", "+fg.unhold", "+fg.setstate", "+fg.logappend", "+fg.plstate",
                      "+fg.uvaddat", "+fg.uvload")
    with RawClient(srv.port) as app:
        app.execute("AUTH", "app", "pw")

        def send(argv):
            try:
                return app.execute(*argv)
            except Exception as e:  # noqa: BLE001 - the refusal is the result
                return e
        assert_refused(c, send, "a client")
    grant = [int(x) for x in c.execute_command("FG.LOCK", "junk", "bob", 1000)]
    assert grant[0] == 1 and grant[1] < now_us() + 10 ** 12, grant
    assert "alice" in str(c.execute_command("FG.LOCKINFO", "held"))


def test_refused_in_multi_and_in_scripts(c):
    def in_multi(argv):
        p = c.pipeline(transaction=True)
        p.execute_command(*argv)
        return p.execute(raise_on_error=False)[0]

    def in_script(argv):
        try:
            return c.eval("return redis.call(unpack(ARGV))", 0, *argv)
        except redis.ResponseError as e:
            return e
    assert_refused(c, in_multi, "MULTI")
    assert_refused(c, in_script, "a script")


def test_allowed_with_the_config(c):
    c.config_set(CONFIG, "yes")
    calls = effect_calls(c)
    for name, argv in calls.items():
        before = digest(c)
        assert c.execute_command(*argv) in (b"OK", 1), name
        assert digest(c) != before, name
    assert c.execute_command("FG.INSPECT", "bucket") is not None
    assert c.exists("log", "copy", "loaded") == 3
    assert c.execute_command("FG.UVCOUNT", "loaded", "LAST", 1, "HOURS") == 3
    holders = str(c.execute_command("FG.LOCKINFO", "junk"))
    assert "evil" in holders, holders
    assert c.exists("held") == 0  # alice's only holder removed: the key went with it


def test_uvaddat_is_a_backfill_with_explicit_time(c):
    t = now_us() - 7200 * 10 ** 6
    assert "floodgate.explicit-time" in str(
        pytest.raises(redis.ResponseError, c.execute_command, "FG.UVADDAT", "u", t, "x").value)
    assert c.exists("u") == 0
    c.config_set(TIMED, "yes")
    assert c.execute_command("FG.UVADDAT", "u", t, "x") == 1
    # the other effect commands still need their own config
    with pytest.raises(redis.ResponseError, match=CONFIG):
        c.execute_command(*effect_calls(c)["FG.HOLD"])


def test_the_config_is_a_bool_off_by_default(c):
    assert c.config_get(CONFIG) == {CONFIG: "no"}
    with pytest.raises(redis.ResponseError):
        c.config_set(CONFIG, "maybe")


# ---------------------------------------------------------------------------
# The module's own streams: replication, AOF, AOF rewrite, AOF loading


def traffic(m):
    """Writes of every family whose effects are the effect commands: plain,
    in MULTI, in a script. Long windows and leases, so nothing expires
    during the test."""
    m.execute_command("FG.TOKEN", "tb", 10, "0.01", "COST", 3)           # FG.SETSTATE
    m.execute_command("FG.SLIDELOG", "sl", 10, 600000, "COST", 2)        # FG.LOGAPPEND
    m.execute_command("FG.LOCK", "lk", "alice", 600000)                   # FG.HOLD
    m.execute_command("FG.LOCK", "lk2", "bob", 600000)
    m.execute_command("FG.UNLOCK", "lk2", "bob")                           # FG.UNHOLD
    m.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, "0.01")
    m.execute_command("FG.CHECK", "p", "pk")                              # FG.PLSTATE
    m.execute_command("FG.UVADD", "uv", "a", "b", "c")                    # FG.UVADDAT
    m.execute_command("FG.UVCREATE", "uv2", "SPAN", 3600)
    m.execute_command("FG.UVADD", "uv2", "x")
    m.execute_command("BF.ADD", "bf", "x")
    m.execute_command("FG.FSET", "res", 7, "v")
    p = m.pipeline(transaction=True)
    p.execute_command("FG.GCRA", "mt", 5, 1, 600000)
    p.execute_command("FG.LOCK", "ml", "carol", 600000)
    p.execute_command("FG.SLIDELOG", "msl", 10, 600000)
    p.execute_command("FG.UVADD", "mu", "y")
    p.execute_command("FG.CHECK", "p", "mpk")
    assert all(not isinstance(r, Exception) for r in p.execute())
    script = """
redis.call('FG.LOCK', KEYS[1], 'dave', 600000)
redis.call('FG.ACQUIRE', KEYS[2], 3, 'erin', 2, 600000)
redis.call('FG.FIXED', KEYS[3], 10, 600000)
redis.call('FG.UVADD', KEYS[4], 'z')
redis.call('FG.LOCK', KEYS[5], 'frank', 600000)
redis.call('FG.UNLOCK', KEYS[5], 'frank')
return redis.call('FG.CHECK', 'p', KEYS[6])
"""
    m.eval(script, 6, "el", "es", "ef", "eu", "el2", "epk")


def test_replica_and_aof_replays_take_the_masters_effects():
    aof = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]
    with Server(aof + ["--repl-diskless-sync-delay", "0"]) as master:
        m = master.client(socket_timeout=60)
        with Server(aof + ["--replicaof", "127.0.0.1", master.port]) as replica:
            r = replica.client(socket_timeout=60)
            wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
            # after the sync the replica rewrites its AOF: wait, so that what
            # it applies next lands in its incremental file
            wait_for(lambda: r.info("persistence")["aof_rewrites"] >= 1, timeout=20)
            wait_aof_rewrite_done(r)
            traffic(m)
            wait_replica_synced(m, r)
            expected = digest(m)
            assert digest(r) == expected
            assert m.config_get(CONFIG)[CONFIG] == r.config_get(CONFIG)[CONFIG] == "no"
            effects = {b"FG.SETSTATE", b"FG.LOGAPPEND", b"FG.HOLD", b"FG.UNHOLD", b"FG.PLSTATE",
                       b"FG.UVADDAT"}
            for server in (master, replica):
                # (appendfsync everysec may hold a write back for a moment)
                names = wait_for(lambda: aof_command_names(server) >= effects and
                                 aof_command_names(server))
                assert not names & {b"FG.TOKEN", b"FG.LOCK", b"FG.UVADD", b"FG.CHECK", b"EVAL"}
            assert_no_crash(replica)  # no error sent back to the master
        # the effects replayed from the AOF
        master.restart(timeout=30)
        m = master.client(socket_timeout=60)
        assert digest(m) == expected
        # a rewrite in plain commands, replayed
        m.bgrewriteaof()
        wait_aof_rewrite_done(m)
        names = aof_command_names(master)
        assert names >= {b"FG.SETSTATE", b"FG.HOLD", b"FG.PLSTATE", b"FG.UVLOAD",
                         b"BF.LOADCHUNK", b"FG.FSET"}, sorted(names)
        master.restart(timeout=30)
        m = master.client(socket_timeout=60)
        assert digest(m) == expected
        assert_no_crash(master)


def setstates_in_aof(server):
    """{key: argv} of the last FG.SETSTATE per key in the server's AOF."""
    found = {}
    for f in aof_files(server):
        if f.endswith(".aof"):
            for argv in read_aof_commands(f) or []:
                if argv[0].upper() == b"FG.SETSTATE":
                    found[argv[1]] = argv
    return found


def test_a_bucket_replicates_its_tat_alone():
    """Issue 16: an admitted bucket check replicates `FG.SETSTATE key
    <tat_ns>`, two arguments, the key's expiry implied by the TAT (when the
    bucket is full again); a check at an explicit time, whose expiry counts
    from the server's clock instead, sends the long form with PXAT. The
    AOF replayed holds the same states and expiries."""
    with Server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]) as srv:
        c = srv.client()
        c.config_set(TIMED, "yes")
        c.execute_command("FG.TOKEN", "tb", 10, 1, "COST", 3)
        c.execute_command("CL.THROTTLE", "cl", 5, 1, 60)
        c.execute_command("FG.REFUND", "TOKEN", "tb", 10, 1, "COST", 1)
        c.execute_command("FG.TOKEN", "at", 10, 1, "AT", now_us() - 10 ** 6)
        keys = [b"tb", b"cl", b"at"]
        found = wait_for(lambda: set(keys) <= setstates_in_aof(srv).keys() and
                         setstates_in_aof(srv))
        for key in (b"tb", b"cl"):
            argv = found[key]
            assert len(argv) == 3, argv
            tat = int(argv[2])
            assert c.execute_command("PEXPIRETIME", key) == -(-tat // 10 ** 6), argv
        argv = found[b"at"]
        assert argv[2] == b"bucket" and argv[4] == b"PXAT", argv
        assert c.execute_command("PEXPIRETIME", "at") == int(argv[5])
        expected = digest(c), [c.execute_command("PEXPIRETIME", k) for k in keys]
        srv.restart()
        c = srv.client()
        assert (digest(c), [c.execute_command("PEXPIRETIME", k) for k in keys]) == expected
        assert_no_crash(srv)


def test_explicit_time_is_bounded_by_the_servers_clock(c):
    """docs/security.md, floodgate.explicit-time: off, AT is refused and
    writes nothing; on, a check a year ahead leaves a state from the future
    that denies the key's other clients, but its TTL counts from the
    server's clock, so it is gone when the same state from now would be."""
    year = now_us() + 365 * 86400 * 10 ** 6
    before = digest(c)
    with pytest.raises(redis.ResponseError, match=TIMED):
        c.execute_command("FG.TOKEN", "k", 10, 1, "COST", 10, "AT", year)
    assert digest(c) == before
    c.config_set(TIMED, "yes")
    assert c.execute_command("FG.TOKEN", "k", 10, 1, "COST", 10, "AT", year)[0] == 1
    assert c.execute_command("FG.FIXED", "f", 10, 60000, "COST", 10, "AT", year)[0] == 1
    assert c.execute_command("FG.TOKEN", "k", 10, 1)[0] == 0  # denied for now
    # (expiry instants are rounded up to the millisecond)
    assert 0 < c.pttl("k") <= 10001 and 0 < c.pttl("f") <= 60001
