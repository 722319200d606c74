"""Bloom filters under replication and AOF (docs/bloom.md, "Persistence and
replication"): every BF.* command is deterministic, so writes are
replicated as sent, and only when they changed something.

Random traffic from a few threads (auto-created, reserved, grown and full
non-scaling filters, copies through BF.SCANDUMP/BF.LOADCHUNK, DEL, some
calls in MULTI/EXEC or a script) on a master with a replica and an AOF in
plain commands, rewritten in the middle (the rewrite emits BF.LOADCHUNK).
Then the replica, the replica restarted (a full sync), and the AOF replayed
in a fresh server all hold the master's values, byte for byte.

Separately: commands that change nothing (adds that answered 0, reads,
refusals) add nothing to the replication stream nor to the AOF; and a
replica serves the reads and refuses the writes.
"""

import os
import random
import shutil
import threading

import pytest
import redis

from harness import RawClient, Server, expiry_command, wait_for, wait_replica_synced
from topology import aof_command_names, assert_no_crash, digest, replicated_pair, stream_position

CALLS = 800 * int(os.environ.get("FLOODGATE_FUZZ_SCALE", "1"))  # per thread and round
THREADS = 3
AUTO_KEYS = ["bf:%d" % i for i in range(4)]
RESERVED_KEYS = ["rs:%d" % i for i in range(3)]
NONSCALING_KEYS = ["ns:%d" % i for i in range(3)]
COPY_KEYS = ["cp:%d" % i for i in range(2)]
ALL_KEYS = AUTO_KEYS + RESERVED_KEYS + NONSCALING_KEYS + COPY_KEYS
WRITES = {b"BF.ADD", b"BF.MADD", b"BF.INSERT", b"BF.RESERVE", b"BF.LOADCHUNK"}
AOF_OTHERS = {b"DEL", b"MULTI", b"EXEC", b"SELECT"}
# what the traffic may be refused for
EXPECTED_ERRORS = ("non scaling filter is full", "item exists", "not found", "received bad data",
                   "filter is still being loaded by BF.LOADCHUNK")  # a copy that failed half way


@pytest.fixture
def pair():
    """A master (AOF in plain commands; no PING to the replica, so the
    replication offset moves only with writes) and its replica."""
    yield from replicated_pair(["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                     "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "3600"], socket_timeout=60)


# -- random traffic -----------------------------------------------------------


def some_items(rnd, n):
    """Items from a small universe, so that many adds answer 0."""
    return ["i%d" % rnd.randrange(3000) for _ in range(n)]


def gen_call(rnd):
    op = rnd.random()
    key = rnd.choice(ALL_KEYS)
    if op < 0.25:
        return ["BF.ADD", key, some_items(rnd, 1)[0]]
    if op < 0.45:
        return ["BF.MADD", key] + some_items(rnd, rnd.randint(1, 30))
    if op < 0.58:
        opts = []
        if rnd.random() < 0.5:
            opts += ["CAPACITY", rnd.randint(5, 60)]
        if rnd.random() < 0.4:
            opts += ["ERROR", rnd.choice(["0.1", "0.01", "0.001"])]
        if rnd.random() < 0.3:
            opts += ["EXPANSION", rnd.randint(1, 4)]
        elif rnd.random() < 0.2:
            opts += ["NONSCALING"]
        if rnd.random() < 0.2:
            opts += ["NOCREATE"]
        rnd.shuffle(opts)  # pairs may split: a refusal, which is fine too
        return ["BF.INSERT", key] + opts + ["ITEMS"] + some_items(rnd, rnd.randint(1, 8))
    if op < 0.63:
        key = rnd.choice(RESERVED_KEYS + NONSCALING_KEYS)
        argv = ["BF.RESERVE", key, rnd.choice(["0.05", "0.01", "0.001"]), rnd.randint(10, 80)]
        if key in NONSCALING_KEYS:
            return argv + ["NONSCALING"]
        return argv + (["EXPANSION", rnd.randint(1, 3)] if rnd.random() < 0.5 else [])
    if op < 0.70:
        return ["BF.EXISTS", key, some_items(rnd, 1)[0]]
    if op < 0.76:
        return ["BF.MEXISTS", key] + some_items(rnd, 5)
    if op < 0.80:
        return ["BF.INFO", key] + ([rnd.choice(["CAPACITY", "ITEMS", "FILTERS"])]
                                   if rnd.random() < 0.5 else [])
    if op < 0.84:
        return ["BF.CARD", key]
    if op < 0.93:
        return ["BF.SCANDUMP", key, rnd.choice([0, 1])]
    if op < 0.94:
        return ["DEL", rnd.choice(ALL_KEYS)]
    return ["COPY-BY-CHUNKS", rnd.choice(AUTO_KEYS + RESERVED_KEYS), rnd.choice(COPY_KEYS)]


def check_reply(argv, reply, problems):
    name = argv[0]
    if isinstance(reply, Exception):
        if not str(reply).startswith(EXPECTED_ERRORS) and name != "BF.INSERT":
            problems.append("%r -> %r" % (argv, reply))
        return
    if name in ("BF.ADD", "BF.EXISTS"):
        ok = reply in (0, 1)
    elif name in ("BF.MADD", "BF.INSERT", "BF.MEXISTS"):
        ok = isinstance(reply, list) and 1 <= len(reply) <= len(argv) and all(
            x in (0, 1) for x in reply[:-1]) and (
            reply[-1] in (0, 1) or str(reply[-1]).startswith("non scaling filter is full"))
    elif name == "BF.CARD":
        ok = isinstance(reply, int) and reply >= 0
    else:
        ok = True
    if not ok:
        problems.append("%r -> %r" % (argv, reply))


def copy_by_chunks(c, src, dst):
    """BF.SCANDUMP src, then DEL dst and BF.LOADCHUNK each chunk into dst:
    other clients may write in between, so the chunks may not fit."""
    chunks, it = [], 0
    while True:
        try:
            it, data = c.execute_command("BF.SCANDUMP", src, it)
        except redis.ResponseError:
            return
        it = int(it)
        if it == 0:
            break
        chunks.append((it, data))
        if len(chunks) > 1000:
            break
    c.delete(dst)
    for it, data in chunks:
        try:
            c.execute_command("BF.LOADCHUNK", dst, it, data)
        except redis.ResponseError:
            return


def run_traffic(port, calls, seed, problems):
    rnd = random.Random(seed)
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    try:
        for _ in range(calls):
            how = rnd.random()
            if how < 0.06:
                batch = [gen_call(rnd) for _ in range(rnd.randint(2, 4))]
                batch = [a for a in batch if a[0] != "COPY-BY-CHUNKS"]
                p = c.pipeline(transaction=True)
                for argv in batch:
                    p.execute_command(*argv)
                replies = p.execute(raise_on_error=False)
            elif how < 0.10:
                argv = gen_call(rnd)
                if argv[0] == "COPY-BY-CHUNKS":
                    continue
                batch = [argv]
                try:
                    replies = [c.execute_command("EVAL", "return redis.pcall(unpack(ARGV))", 1,
                                                 argv[1], *argv)]
                except redis.ResponseError as e:
                    replies = [e]
            else:
                argv = gen_call(rnd)
                if argv[0] == "COPY-BY-CHUNKS":
                    copy_by_chunks(c, argv[1], argv[2])
                    continue
                batch = [argv]
                try:
                    replies = [c.execute_command(*argv)]
                except redis.ResponseError as e:
                    replies = [e]
            for argv, reply in zip(batch, replies):
                check_reply(argv, reply, problems)
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        problems.append("traffic client %d: %r" % (seed, e))
    finally:
        c.close()


def traffic_round(port, seed):
    problems = []
    threads = [threading.Thread(target=run_traffic, args=(port, CALLS, seed + i, problems))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems, "bad replies:\n  " + "\n  ".join(problems[:30])


def values(c):
    """The dataset digest and every key's DUMP."""
    p = c.pipeline(transaction=False)
    for k in ALL_KEYS:
        p.dump(k)
    return digest(c), dict(zip(ALL_KEYS, p.execute()))


def assert_same_values(expected, got, what):
    diff = [k for k in ALL_KEYS if expected[1][k] != got[1][k]]
    assert not diff, "%s: the values of %s differ" % (what, diff)
    assert expected[0] == got[0], "%s: DEBUG DIGEST differs" % what


def test_random_traffic_replicates_and_aof_replays(pair, tmp_path):
    master, replica, m, r = pair
    for k in NONSCALING_KEYS:
        m.execute_command("BF.RESERVE", k, "0.01", 40, "NONSCALING")
    m.execute_command("BF.RESERVE", "big", "0.001", 200000)  # a bigger value to sync
    m.execute_command("BF.MADD", "big", *["b%d" % i for i in range(5000)])

    traffic_round(master.port, seed=101)
    m.execute_command("BGREWRITEAOF")
    wait_aof_rewrite_done_here(m)
    traffic_round(master.port, seed=201)
    assert sum(m.exists(k) for k in ALL_KEYS) >= 6
    assert any(m.execute_command("BF.INFO", k, "FILTERS")[0] > 1
               for k in AUTO_KEYS + RESERVED_KEYS if m.exists(k)), "no filter grew"

    wait_replica_synced(m, r)
    final = values(m)
    assert_same_values(final, values(r), "the replica")
    assert m.dump("big") == r.dump("big")

    # a restarted replica (a full sync: the master's RDB)
    replica.restart(timeout=30)
    r = replica.client(socket_timeout=60)
    wait_for(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
    wait_replica_synced(m, r)
    assert_same_values(final, values(r), "the replica after its restart")

    # the AOF: writes as sent, and the rewrite's BF.LOADCHUNK
    names = aof_command_names(master)
    assert b"BF.LOADCHUNK" in names and b"BF.MADD" in names, sorted(names)
    others = AOF_OTHERS | {expiry_command(m)}
    assert names <= WRITES | others, sorted(names - WRITES - others)

    # the AOF replayed in a fresh server
    master.stop()
    copy_dir = str(tmp_path / "replay")
    os.makedirs(copy_dir)
    shutil.copytree(os.path.join(master.dir, "appendonlydir"),
                    os.path.join(copy_dir, "appendonlydir"))
    with Server(["--appendonly", "yes"], dir=copy_dir) as replay:
        c = replay.client(socket_timeout=60)
        assert_same_values(final, values(c), "the AOF replayed")
        assert_no_crash(replay)
        c.close()
    # last, so that the comparisons above show first: the replica applied
    # everything without an error (see the test below)
    assert_no_crash(replica)


def wait_aof_rewrite_done_here(c):
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0 and
             c.info("persistence")["aof_rewrite_scheduled"] == 0, timeout=60, interval=0.05)
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"


def test_a_batch_that_fills_a_filter_replicates_without_an_error(pair):
    """BF.MADD and BF.INSERT on a non-scaling filter that fills half way:
    the items before the first that did not fit are added, on the master and
    on the replica alike, and the replica applies what it gets without an
    error (Redis logs "== CRITICAL == This replica is sending an error to
    its master" for every command that answers one on a replica)."""
    master, replica, m, r = pair
    m.execute_command("BF.RESERVE", "k", "0.001", 3, "NONSCALING")
    m.execute_command("BF.RESERVE", "j", "0.001", 2, "NONSCALING")
    rep = m.execute_command("BF.MADD", "k", "a", "b", "c", "d", "e")
    assert rep[:3] == [1, 1, 1] and len(rep) == 4, rep
    rep = m.execute_command("BF.INSERT", "j", "CAPACITY", 9, "ITEMS", "a", "b", "c")
    assert rep[:2] == [1, 1] and len(rep) == 3, rep
    wait_replica_synced(m, r)
    assert m.dump("k") == r.dump("k") and m.dump("j") == r.dump("j")
    errors = r.info("errorstats")
    assert not errors, "the replica answered its master with errors: %r" % errors
    assert_no_crash(replica)


# -- what changes nothing replicates nothing ---------------------------------------


NO_CHANGE = [
    ["BF.ADD", "k", "a"],
    ["BF.MADD", "k", "a", "b", "a"],
    ["BF.INSERT", "k", "ITEMS", "b"],
    ["BF.INSERT", "k", "CAPACITY", 1000, "ERROR", "0.5", "EXPANSION", 3, "ITEMS", "a", "b"],
    ["BF.INSERT", "k", "NOCREATE", "ITEMS", "a"],
    ["BF.EXISTS", "k", "a"], ["BF.MEXISTS", "k", "a", "zz"], ["BF.INFO", "k"],
    ["BF.INFO", "k", "ITEMS"], ["BF.CARD", "k"], ["BF.SCANDUMP", "k", 0],
    ["BF.SCANDUMP", "k", 1], ["BF.EXISTS", "missing", "a"], ["BF.CARD", "missing"],
    # refusals
    ["BF.RESERVE", "k", "0.01", 100], ["BF.RESERVE", "n", "2", 100],
    ["BF.RESERVE", "n", "0.01", 0], ["BF.INSERT", "n", "NOCREATE", "ITEMS", "a"],
    ["BF.INSERT", "n", "CAPACITY", "x", "ITEMS", "a"], ["BF.ADD", "full", "new"],
    ["BF.MADD", "full", "a", "new", "other"], ["BF.INSERT", "full", "ITEMS", "new"],
    ["BF.ADD", "str", "a"], ["BF.LOADCHUNK", "n", 1, "garbage"],
    ["BF.LOADCHUNK", "n", 7, "garbage"], ["BF.LOADCHUNK", "k", "x", "garbage"],
    ["BF.INFO", "n"], ["BF.ADD", "k"],
]


def test_commands_that_change_nothing_replicate_nothing(pair):
    master, replica, m, r = pair
    m.execute_command("BF.MADD", "k", "a", "b")
    m.execute_command("BF.INSERT", "full", "CAPACITY", 2, "NONSCALING", "ITEMS", "a", "b")
    m.set("str", "v")
    wait_replica_synced(m, r)
    start = stream_position(m)
    with RawClient(master.port) as rc:
        for argv in NO_CHANGE:
            rc.sock.sendall(rc.encode(argv))
            rc.read_reply()
            assert stream_position(m) == start, "%r went to the replica or the AOF" % (argv,)
    # in a transaction and in a script, too
    p = m.pipeline(transaction=True)
    p.execute_command("BF.ADD", "k", "a")
    p.execute_command("BF.MADD", "k", "b")
    p.execute()
    m.execute_command("EVAL", "redis.call('BF.ADD', KEYS[1], 'a') return 1", 1, "k")
    assert stream_position(m) == start, "a transaction or script of adds answering 0"

    # a change does move them, and reaches the replica
    assert m.execute_command("BF.MADD", "k", "a", "c") == [0, 1]
    assert stream_position(m)[0] > start[0] and stream_position(m)[1] > start[1]
    wait_replica_synced(m, r)
    assert r.execute_command("BF.EXISTS", "k", "c") == 1
    assert digest(m) == digest(r) and m.dump("k") == r.dump("k")


def test_replica_serves_reads_and_refuses_writes(pair):
    master, replica, m, r = pair
    m.execute_command("BF.RESERVE", "k", "0.01", 100)
    m.execute_command("BF.MADD", "k", "a", "b")
    wait_replica_synced(m, r)
    assert r.execute_command("BF.EXISTS", "k", "a") == 1
    assert r.execute_command("BF.MEXISTS", "k", "a", "b") == [1, 1]
    assert r.execute_command("BF.CARD", "k") == 2
    assert r.execute_command("BF.INFO", "k") == m.execute_command("BF.INFO", "k")
    chunks = []
    it = 0
    while True:
        it, data = r.execute_command("BF.SCANDUMP", "k", it)
        if it == 0:
            break
        chunks.append((it, data))
    before = digest(r)
    with RawClient(replica.port) as rc:
        for argv in (["BF.RESERVE", "n", "0.01", 100], ["BF.ADD", "k", "c"],
                     ["BF.MADD", "k", "c"], ["BF.INSERT", "k", "ITEMS", "c"],
                     ["BF.LOADCHUNK", "n", chunks[0][0], chunks[0][1]]):
            msg = rc.error_of(*argv)
            assert msg.startswith("READONLY "), (argv, msg)
    assert digest(r) == before
    # and the master's own copy through the replica's chunks
    for it, data in chunks:
        m.execute_command("BF.LOADCHUNK", "copy", it, data)
    assert m.dump("copy") == m.dump("k")
