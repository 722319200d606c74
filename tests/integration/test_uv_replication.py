"""Unique counters under replication and AOF (docs/uv.md "Replication,
persistence, cluster"): FG.UVADD reads the master's clock, so it is
replicated as FG.UVADDAT with the master's time and only the items that
changed the counter; FG.UVSTORE as SET of the exported string. Replicas and
AOF replay never read their own clocks.

A master with a replica, both with an AOF in plain commands (appendfsync
always): the replication stream and the AOF hold no FG.UVADD and no
FG.UVSTORE; an add that changes nothing adds nothing to either; after a
mixed workload (adds now, in the past and in the near future, creations,
stores, DEL, EXPIRE, transactions and scripts, an AOF rewrite in the middle,
and a replica that lags by more than a second behind a DEBUG SLEEP) the
master, the replica, the replica after a full sync and a server started on
the master's AOF hold the same dataset. Reads run on the read-only replica;
writes are refused there. An AOF with an add far in the future loads (the
future check is for clients only).
"""

import os
import random
import shutil
import time

import pytest
import redis

from harness import RawClient, Server, wait_for, wait_replica_synced
from topology import aof_files, assert_no_crash, digest, read_aof_commands, stream_position
from test_uv_persistence import (DAY, HOUR, HLL_BYTES, MINUTE, TYPE, US, group, ok,
                                 rewrite_payloads, uvinfo)

# The test backfills the master (FG.UVADDAT) and restores counters on it
# (FG.UVLOAD) as a client may with these configs; the replica and the AOF
# replays keep the defaults, so what the master sends passes as effects.
MASTER_ARGS = ["--appendonly", "yes", "--appendfsync", "always", "--aof-use-rdb-preamble", "no",
               "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "3600",
               "--floodgate.explicit-time", "yes", "--floodgate.enable-effect-commands", "yes"]


@pytest.fixture
def pair():
    """A master and its replica, each with an AOF in plain commands; no
    PING to the replica, so the replication offset moves only with writes."""
    master = Server(MASTER_ARGS)
    master.start()
    replica = Server(["--replicaof", "127.0.0.1", master.port, "--appendonly", "yes",
                      "--aof-use-rdb-preamble", "no"])
    replica.start()
    m, r = master.client(socket_timeout=60), replica.client(socket_timeout=60)
    wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
    # after the sync the replica rewrites its AOF; until that ends, what it
    # applies goes to a temporary file
    wait_for(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0 and
             r.info("persistence")["aof_rewrite_scheduled"] == 0 and
             r.info("persistence")["aof_rewrites"] >= 1, timeout=20)
    yield master, replica, m, r
    m.close()
    r.close()
    replica.cleanup()
    master.cleanup()


def incr_commands(server):
    """The commands of a server's incremental AOF files, as lists of str."""
    cmds = []
    for f in aof_files(server):
        if ".incr." in f:
            cmds += [[x.decode("latin-1") for x in a] for a in read_aof_commands(f) or []]
    return cmds


def aof_names(server):
    names = set()
    for f in aof_files(server):
        if f.endswith(".aof"):
            names |= {a[0].upper().decode() for a in read_aof_commands(f) or []}
    return names


def of_key(cmds, key):
    return [a for a in cmds if len(a) > 1 and a[1] == key]


def in_one_second(clock, reads, tries=8):
    """The replies of reads [(client, argv)], all made within one second of
    clock's TIME (the servers share the machine's clock): LAST windows move
    with the second, so two servers agree only when asked in the same one."""
    for _ in range(tries):
        start = clock.time()[0]
        replies = [c.execute_command(*argv) for c, argv in reads]
        if clock.time()[0] == start:
            return replies
    raise AssertionError("the clock never stayed on one second")


# ---------------------------------------------------------------------------
# What the stream carries


def test_uvadd_replicates_as_uvaddat_at_the_masters_time(pair):
    master, replica, m, r = pair
    t0 = time.time_ns() // 1000
    assert m.execute_command("FG.UVADD", "k", "a", "b", "c") == 1
    t1 = time.time_ns() // 1000
    wait_replica_synced(m, r)
    for server in (master, replica):
        cmds = of_key(incr_commands(server), "k")
        assert len(cmds) == 1 and cmds[0][0].upper() == "FG.UVADDAT", (server, cmds)
        name, key, us, *items = cmds[0]
        assert items == ["a", "b", "c"], cmds
        assert t0 // US * US <= int(us) <= t1, (t0, us, t1)
        assert "FG.UVADD" not in aof_names(server), aof_names(server)
    stamped = int(of_key(incr_commands(master), "k")[0][2])
    assert uvinfo(r, "k")["newest_us"] == stamped // US * US
    assert r.dump("k") == m.dump("k")
    assert r.type("k") == TYPE
    assert_no_crash(replica)


def test_only_changed_items_are_replicated(pair):
    master, replica, m, r = pair
    t = (int(time.time()) - HOUR) * US + 250_000  # an hour ago, not on a whole second
    assert m.execute_command("FG.UVADDAT", "k", t, "a", "b", "a", "c", "b") == 1
    assert m.execute_command("FG.UVADDAT", "k", t, "a", "b", "d") == 1
    # binary items, as they are
    assert m.execute_command("FG.UVADDAT", "k", t, "", b"\x00\xff", "\r\n*1\r\n", "a") == 1
    wait_replica_synced(m, r)
    start = stream_position(m)
    # all present at that second: nothing replicated, nothing in the AOF
    assert m.execute_command("FG.UVADDAT", "k", t, "c", "a", "d", "b") == 0
    assert m.execute_command("FG.UVADDAT", "k", t - 250_000, "d") == 0
    # older than SPAN and every tier's retention: nothing either
    assert m.execute_command("FG.UVADDAT", "k", t - 40 * DAY * US, "zz") == 0
    assert stream_position(m) == start, "an add that changed nothing was replicated"
    cmds = of_key(incr_commands(master), "k")
    assert [a[3:] for a in cmds] == [["a", "b", "c"], ["d"], ["", "\x00\xff", "\r\n*1\r\n"]], cmds
    assert all(a[0].upper() == "FG.UVADDAT" and int(a[2]) // US == t // US for a in cmds), cmds
    # FG.UVADD twice in one second (a MULTI between two TIMEs that agree;
    # a fresh key for each try): the second changes nothing
    for attempt in range(8):
        n = "n%d" % attempt
        p = m.pipeline(transaction=True)
        p.time()
        p.execute_command("FG.UVADD", n, "p", "q")
        p.execute_command("FG.UVADD", n, "q", "p")
        p.time()
        replies = p.execute()
        if replies[0][0] == replies[-1][0]:
            break
    assert replies[1:3] == [1, 0], (attempt, replies)
    cmds = of_key(incr_commands(master), n)
    assert len(cmds) == 1 and cmds[0][3:] == ["p", "q"], cmds
    wait_replica_synced(m, r)
    assert m.dump("k") == r.dump("k") and m.dump(n) == r.dump(n)
    assert_no_crash(replica)


def test_uvstore_replicates_as_set(pair):
    master, replica, m, r = pair
    m.execute_command("FG.UVADD", "{s}a", *group("a", 500))
    m.execute_command("FG.UVADD", "{s}b", *group("a", 200, 400))
    m.set("dest", "old")
    m.expire("dest", 1000)
    count = m.execute_command("FG.UVSTORE", "dest", "{s}a", "LAST", 1, "HOURS", "{s}b")
    assert abs(count - 600) <= 18, count
    assert m.ttl("dest") == -1  # as SET, the TTL is dropped
    stored = m.get("dest")
    assert len(stored) == HLL_BYTES and stored[:4] == b"HYLL"
    assert m.execute_command("PFCOUNT", "dest") == count
    # over a counter, too
    assert m.execute_command("FG.UVSTORE", "{s}b", "{s}a", "LAST", 1, "HOURS") == \
        m.execute_command("FG.UVCOUNT", "{s}a", "LAST", 1, "HOURS")
    assert m.type("{s}b") == b"string"
    wait_replica_synced(m, r)
    for server in (master, replica):
        names = aof_names(server)
        assert "SET" in names and "FG.UVSTORE" not in names, (server, names)
        sets = [a for a in incr_commands(server) if a[0].upper() == "SET" and a[1] == "dest"]
        assert sets and sets[-1][2].encode("latin-1") == stored, server
    # (PFCOUNT above wrote its cached count into the master's string, and
    # was replicated as such)
    assert r.get("dest") == m.get("dest") and r.ttl("dest") == -1
    assert r.get("{s}b") == m.get("{s}b")
    assert digest(m) == digest(r)
    assert_no_crash(replica)


def test_uvcreate_and_uvload_replicate_as_sent(pair):
    """Deterministic writes go as sent; refused ones not at all."""
    master, replica, m, r = pair
    create = ["FG.UVCREATE", "c", "TZOFFSET", "-3600", "SPAN", "86400", "MINUTES", "0", "DAYS", "9"]
    assert ok(m.execute_command(*create))
    m.execute_command("FG.UVADDAT", "c", (int(time.time()) - 5 * HOUR) * US, *group("c", 100))
    payload = rewrite_payloads(m, master, ["c"])["c"]
    assert ok(m.execute_command("FG.UVLOAD", "l", payload))
    wait_replica_synced(m, r)
    start = stream_position(m)
    for argv in (create, ["FG.UVCREATE", "n", "SPAN", 0], ["FG.UVCREATE", "n", "TZOFFSET", 30],
                 ["FG.UVLOAD", "l", payload], ["FG.UVLOAD", "n", payload[:-1]],
                 ["FG.UVLOAD", "n", b"\x02" + payload[1:3]], ["FG.UVADDAT", "n", -1, "a"],
                 ["FG.UVADDAT", "n", (int(time.time()) + 3600) * US, "a"]):
        with pytest.raises(redis.ResponseError):
            m.execute_command(*argv)
    assert stream_position(m) == start, "a refused write was replicated"
    assert m.exists("n") == 0
    wait_replica_synced(m, r)
    # (the master's rewrite folded its FG.UVCREATE into an FG.UVLOAD)
    assert create in incr_commands(replica)
    for server in (master, replica):
        cmds = incr_commands(server)
        loads = of_key(cmds, "l")
        assert loads == [["FG.UVLOAD", "l", payload.decode("latin-1")]], (server, [a[:2] for a in loads])
    for k in ("c", "l"):
        assert r.dump(k) == m.dump(k)
    assert r.dump("l") == m.dump("c")
    assert uvinfo(r, "c")["tzoffset"] == -3600 and uvinfo(r, "c")["days"] == 9
    assert_no_crash(replica)


# ---------------------------------------------------------------------------
# A mixed workload

KEYS = ["c:%d" % i for i in range(4)] + ["c:tiered", "c:small"]
STORES = ["st:%d" % i for i in range(2)]
WINDOWS = [["LAST", 1, "MINUTES"], ["LAST", 30, "SECONDS"], ["LAST", 60, "SECONDS"]]


def gen_call(rnd, now):
    key = rnd.choice(KEYS)
    items = ["i%d" % rnd.randrange(4000) for _ in range(rnd.randint(1, 25))]
    op = rnd.random()
    if op < 0.30:
        return ["FG.UVADD", key] + items
    if op < 0.55:  # the past: seconds, minutes, hours, days
        ago = rnd.choice([rnd.randrange(60), rnd.randrange(3 * HOUR), rnd.randrange(40 * DAY)])
        return ["FG.UVADDAT", key, (now - ago) * US + rnd.randrange(US)] + items
    if op < 0.62:  # the near future
        return ["FG.UVADDAT", key, (now + rnd.randint(1, 45)) * US] + items
    if op < 0.70:
        return ["FG.UVSTORE", rnd.choice(STORES), key] + rnd.choice(WINDOWS) + \
            ([rnd.choice(KEYS)] if rnd.random() < 0.5 else [])
    if op < 0.74:
        return ["FG.UVCREATE", key, "SPAN", rnd.choice([60, 3600, 86400]), "MINUTES",
                rnd.randint(0, 90), "TZOFFSET", rnd.choice([-3600, 0, 19800])]
    if op < 0.77:
        return ["DEL", key]
    if op < 0.81:
        return ["EXPIRE", key, rnd.randint(500, 5000)]
    if op < 0.90:
        return ["FG.UVCOUNT", key] + rnd.choice(WINDOWS)
    return ["FG.UVEXPORT", key] + rnd.choice(WINDOWS)


def run_workload(c, rnd, calls):
    """Pipelined batches, some as transactions and scripts. Refusals are
    only FG.UVCREATE's on existing keys and windows longer than a SPAN."""
    done = 0
    while done < calls:
        now = int(time.time())
        batch = [gen_call(rnd, now) for _ in range(rnd.randint(1, 30))]
        how = rnd.random()
        if how < 0.15:
            p = c.pipeline(transaction=True)
            for argv in batch:
                p.execute_command(*argv)
            replies = p.execute(raise_on_error=False)
        elif how < 0.25:
            p = c.pipeline(transaction=False)
            for argv in batch:
                p.execute_command("EVAL", "return redis.pcall(unpack(ARGV))", 1, argv[1], *argv)
            replies = p.execute(raise_on_error=False)
        else:
            p = c.pipeline(transaction=False)
            for argv in batch:
                p.execute_command(*argv)
            replies = p.execute(raise_on_error=False)
        for argv, rep in zip(batch, replies):
            if isinstance(rep, redis.ResponseError):
                msg = str(rep)
                assert msg == "key exists" or "is longer than the SPAN" in msg or \
                    msg.startswith("WRONGTYPE"), (argv[:4], msg)
        done += len(batch)


def values(c, keys):
    p = c.pipeline(transaction=False)
    for k in keys:
        p.dump(k)
        p.execute_command("PEXPIRETIME", k)
    res = p.execute()
    return digest(c), dict(zip(keys, zip(res[0::2], res[1::2])))


def assert_same_values(expected, got, what):
    diff = [k for k in expected[1] if expected[1][k] != got[1][k]]
    assert not diff, "%s: the values of %s differ" % (what, diff)
    assert expected[0] == got[0], "%s: DEBUG DIGEST differs" % what


def lag_replica(replica, seconds):
    """The replica sleeps: what the master sends meanwhile is applied
    `seconds` later, by the replica's clock. Returns a join function."""
    rc = RawClient(replica.port, timeout=30)
    rc.sock.sendall(rc.encode(["DEBUG", "SLEEP", seconds]))

    def join():
        assert rc.read_reply() == b"OK"
        rc.close()
    return join


def test_mixed_workload_master_replica_and_aof_agree(pair, tmp_path):
    master, replica, m, r = pair
    rnd = random.Random(4242)
    assert ok(m.execute_command("FG.UVCREATE", "c:tiered", "SPAN", 3600, "MINUTES", 30, "HOURS", 10,
                                "DAYS", 20, "TZOFFSET", -18000))
    assert ok(m.execute_command("FG.UVCREATE", "c:small", "SPAN", 60, "MINUTES", 2, "HOURS", 1,
                                "DAYS", 1, "TZOFFSET", 120))
    m.execute_command("FG.UVADD", "gone", "x")
    m.pexpire("gone", 200)
    run_workload(m, rnd, 600)
    m.bgrewriteaof()
    wait_for(lambda: m.info("persistence")["aof_rewrite_in_progress"] == 0 and
             m.info("persistence")["aof_rewrite_scheduled"] == 0, timeout=60, interval=0.05)
    assert m.info("persistence")["aof_last_bgrewrite_status"] == "ok"
    # adds reach a replica that applies them more than a second late
    join = lag_replica(replica, 1.5)
    time.sleep(0.1)
    run_workload(m, rnd, 300)
    join()
    run_workload(m, rnd, 300)
    time.sleep(1.2)  # the replica's clock is now well past the master's writes
    wait_for(lambda: m.exists("gone") == 0, timeout=10)
    wait_replica_synced(m, r)
    keys = KEYS + STORES + ["gone"]
    assert sum(m.type(k) == TYPE for k in KEYS) >= 3, [m.type(k) for k in KEYS]
    final = values(m, keys)
    assert_same_values(final, values(r, keys), "the replica")
    for k in KEYS:
        if m.type(k) == TYPE:
            assert uvinfo(r, k) == uvinfo(m, k), k
            for w in WINDOWS[:1] + [["LAST", 60, "SECONDS"]]:
                on_replica, on_master = in_one_second(m, [(r, ["FG.UVEXPORT", k, *w]),
                                                          (m, ["FG.UVEXPORT", k, *w])])
                assert on_replica == on_master, (k, w)

    # what the stream and the AOF carried
    # (the master's AOF was rewritten: FG.UVLOAD then what came after; the
    # replica's holds every write since its sync)
    for server, must in ((master, {"FG.UVADDAT", "FG.UVLOAD", "SET"}),
                         (replica, {"FG.UVADDAT", "FG.UVCREATE", "SET"})):
        names = aof_names(server)
        assert must <= names, (server, sorted(names))
        assert not names & {"FG.UVADD", "FG.UVSTORE", "FG.UVCOUNT", "FG.UVEXPORT", "EVAL"}, \
            (server, sorted(names))

    # a restarted replica (a full sync: the master's RDB)
    replica.restart(timeout=30)
    r = replica.client(socket_timeout=60)
    wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
    wait_replica_synced(m, r)
    assert_same_values(final, values(r, keys), "the replica after its restart")

    # the master's AOF replayed in a fresh server
    master.stop()
    copy_dir = str(tmp_path / "replay")
    os.makedirs(copy_dir)
    shutil.copytree(os.path.join(master.dir, "appendonlydir"), os.path.join(copy_dir, "appendonlydir"))
    with Server(["--appendonly", "yes"], dir=copy_dir) as replay:
        c = replay.client(socket_timeout=60)
        assert_same_values(final, values(c, keys), "the AOF replayed")
        assert_no_crash(replay)
        c.close()
    # the replica applied everything without an error
    assert_no_crash(replica)


# ---------------------------------------------------------------------------
# The replica serves reads; AOF loading skips the future check


def test_replica_serves_counts_and_refuses_writes(pair):
    master, replica, m, r = pair
    now = int(time.time())
    assert ok(m.execute_command("FG.UVCREATE", "k", "SPAN", 7200, "TZOFFSET", 3600))
    for ago, items in ((0, group("a", 300)), (20 * MINUTE, group("a", 300, 200)),
                       (5 * HOUR, group("a", 300, 400))):
        m.execute_command("FG.UVADDAT", "k", (now - ago) * US, *items)
    m.execute_command("FG.UVADD", "j", *group("a", 100, 900))
    payload = rewrite_payloads(m, master, ["k"])["k"]
    wait_replica_synced(m, r)
    hs = lambda t: (t + 3600) // HOUR * HOUR - 3600  # noqa: E731
    reads = [["FG.UVCOUNT", "k", "LAST", 1, "HOURS"], ["FG.UVCOUNT", "k", "LAST", 2, "HOURS", "j", "none"],
             ["FG.UVCOUNT", "k", "BETWEEN", hs(now - 6 * HOUR) * US, hs(now - 4 * HOUR) * US],
             ["FG.UVEXPORT", "k", "LAST", 1, "HOURS", "j"],
             ["FG.UVEXPORT", "k", "BETWEEN", hs(now - 6 * HOUR) * US, (now + 1) * US],
             ["FG.UVEXPORT", "none", "LAST", 5, "MINUTES"], ["FG.UVINFO", "k"]]
    for argv in reads:
        assert r.execute_command(*argv) == m.execute_command(*argv), argv
    assert abs(r.execute_command(*reads[0]) - 500) <= 15
    before = digest(r)
    with RawClient(replica.port) as rc:
        for argv in (["FG.UVADD", "k", "new"], ["FG.UVADDAT", "k", now * US, "new"],
                     ["FG.UVCREATE", "n"], ["FG.UVSTORE", "n", "k", "LAST", 1, "HOURS"],
                     ["FG.UVLOAD", "n", payload]):
            msg = rc.error_of(*argv)
            assert msg.startswith("READONLY "), (argv, msg)
    assert digest(r) == before
    assert_no_crash(replica)


def resp(*args):
    return RawClient.encode([str(a) if isinstance(a, int) else a for a in args])


def test_far_future_uvaddat_loads_from_an_aof(tmp_path):
    """A client may not add more than 60 s ahead; the AOF (as the master's
    stream) is replayed without that check."""
    now = int(time.time())
    future = (now + 30 * DAY) * US
    d = str(tmp_path / "future")
    os.makedirs(os.path.join(d, "appendonlydir"))
    with open(os.path.join(d, "appendonlydir", "appendonly.aof.1.base.aof"), "wb") as f:
        f.write(resp("SELECT", 0))
        f.write(resp("FG.UVADDAT", "k", now * US, "a", "b"))
        f.write(resp("FG.UVADDAT", "k", future, "c", "d", "e"))
        f.write(resp("FG.UVCREATE", "j", "SPAN", 86400, "DAYS", 100))
        f.write(resp("FG.UVADDAT", "j", future + 123_456, "x"))
    with open(os.path.join(d, "appendonlydir", "appendonly.aof.manifest"), "w") as f:
        f.write("file appendonly.aof.1.base.aof seq 1 type b\n")
    with Server(["--appendonly", "yes"], dir=d) as srv:
        c = srv.client(socket_timeout=60)
        assert "DB loaded from" in open(srv.logfile, errors="replace").read()
        assert uvinfo(c, "k")["newest_us"] == future
        assert uvinfo(c, "j")["newest_us"] == future
        assert uvinfo(c, "j")["days"] == 100
        # items stamped after now count in LAST windows
        assert c.execute_command("FG.UVCOUNT", "k", "LAST", 1, "SECONDS") == 3
        assert c.execute_command("FG.UVCOUNT", "j", "LAST", 1, "SECONDS") == 1
        # and a window containing them
        assert c.execute_command("FG.UVCOUNT", "k", "BETWEEN", future, future + US) == 3
        # a client allowed to give the time is refused the same, and nothing
        # changes
        c.config_set("floodgate.explicit-time", "yes")
        before = c.dump("k")
        with pytest.raises(redis.ResponseError, match="^unix_us is more than 60 seconds in the future$"):
            c.execute_command("FG.UVADDAT", "k", future + US, "f")
        with pytest.raises(redis.ResponseError, match="in the future"):
            c.execute_command("FG.UVADDAT", "new", (int(time.time()) + 62) * US, "f")
        assert c.dump("k") == before and c.exists("new") == 0
        assert not [a for a in incr_commands(srv) if a[0].upper().startswith("FG.")]
        assert_no_crash(srv)
