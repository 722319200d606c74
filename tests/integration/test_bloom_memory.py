"""Memory bounds of Bloom filters and policy Bloom lists (docs/bloom.md
"Memory bounds", src/module/memory_limits.c).

Under `maxmemory 100mb`, a filter of 1.3 GB used to be allocated and zeroed
(16 s, past maxmemory), and a policy's Bloom list of that size held it
outside the keyspace. Every allocation of bits now passes two bounds first:
floodgate.max-structure-size for the whole structure (default 512mb), and
used_memory + the request <= maxmemory. A refusal is an "ERR ..." reply,
nothing changes, and used_memory does not move: what is asserted here,
never a duration. Each allocating path is covered: BF.RESERVE, BF.INSERT's
creation, a new level of a scaling filter, BF.LOADCHUNK's header and a
level's first chunk, RESTORE, COPY, FG.POLICY SET and the growth of its
list. Loading a file or a master's writes is not bounded: an RDB with a
filter above the ceiling loads, and a replica applies what its master did.
"""

import shutil

import pytest

from harness import RawClient, Server, wait_for, wait_replica_synced
from test_bloom import scandump

MB = 1024 * 1024
TOO_LARGE = "ERR too large: the structure would take "
NO_MEMORY = "ERR not enough memory: "


@pytest.fixture(scope="module")
def limited(request):
    """A server with maxmemory 100mb (floodgate.max-structure-size at its
    default)."""
    s = Server(["--maxmemory", "100mb"])
    request.addfinalizer(s.cleanup)
    return s.start()


@pytest.fixture(scope="module")
def unlimited(request):
    """A server without bounds, to make what the limited one refuses."""
    s = Server(["--floodgate.max-structure-size", "0"])
    request.addfinalizer(s.cleanup)
    return s.start()


@pytest.fixture
def c(limited):
    cl = limited.client()
    cl.flushall()
    cl.config_set("floodgate.max-structure-size", "512mb")
    for name in cl.execute_command("FG.POLICY", "LIST"):
        cl.execute_command("FG.POLICY", "DEL", name)
    yield cl
    cl.close()


def used(c):
    return c.info("memory")["used_memory"]


def state(c):
    """Everything a refused command must leave as it was."""
    return (c.execute_command("DEBUG", "DIGEST"), c.dbsize(),
            c.execute_command("FG.POLICY", "LIST"))


def refused(c, port, *args):
    """The full error of a command that must change nothing and take no
    memory (used_memory within 1 MB of what it was)."""
    before, mem = state(c), used(c)
    with RawClient(port) as raw:
        msg = raw.error_of(*args)
    assert state(c) == before, (args, msg)
    assert used(c) - mem < MB, (args, msg, used(c) - mem)
    assert c.ping()
    return msg


def fill(c, key, items, command="BF.MADD"):
    p = c.pipeline(transaction=False)
    for i in range(0, len(items), 5000):
        p.execute_command(command, key, *items[i:i + 5000])
    return p.execute()


# -- the commands of the issue ---------------------------------------------------

def test_a_filter_past_the_ceiling_is_refused(c, limited):
    msg = refused(c, limited.port, "BF.RESERVE", "big", "0.01", 1000000000)
    assert msg == TOO_LARGE + "1314007168 bytes, above floodgate.max-structure-size (536870912)"
    msg = refused(c, limited.port, "BF.INSERT", "big", "CAPACITY", 1000000000, "ITEMS", "x")
    assert msg.startswith(TOO_LARGE), msg


def test_a_filter_past_maxmemory_is_refused(c, limited):
    c.config_set("floodgate.max-structure-size", "4gb")
    msg = refused(c, limited.port, "BF.RESERVE", "big", "0.01", 1000000000)
    assert msg.startswith(NO_MEMORY) and " more bytes would pass maxmemory (" in msg, msg
    assert msg.endswith(" of 104857600 used)"), msg
    # under the ceiling but past maxmemory: 118 MB
    msg = refused(c, limited.port, "BF.RESERVE", "mid", "0.01", 90000000)
    assert msg.startswith(NO_MEMORY), msg


def test_a_policy_bloom_list_past_the_bounds_is_refused(c, limited):
    rules = ["LIMIT", "TOKEN", 10, 1, "DENYLIST", "BLOOM", "0.01", 1000000000]
    msg = refused(c, limited.port, "FG.POLICY", "SET", "p", *rules)
    assert msg == ("ERR the Bloom list cannot be made: too large: the structure would take "
                   "1314007168 bytes, above floodgate.max-structure-size (536870912)")
    c.config_set("floodgate.max-structure-size", "4gb")
    msg = refused(c, limited.port, "FG.POLICY", "SET", "p", *rules)
    assert msg.startswith("ERR the Bloom list cannot be made: not enough memory: "), msg
    # replacing a policy: the old one stays as it was
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1)
    c.execute_command("FG.POLICY", "DENY", "p", "bad")
    got = c.execute_command("FG.POLICY", "GET", "p")
    refused(c, limited.port, "FG.POLICY", "SET", "p", *rules)
    assert c.execute_command("FG.POLICY", "GET", "p") == got


# -- growth -------------------------------------------------------------------------

def full_filter(c, key, capacity, *options):
    """A filter whose first level is full (its next add of a new item opens
    a level)."""
    assert c.execute_command("BF.RESERVE", key, "0.01", capacity, *options) == b"OK"
    n = 0
    while int(c.execute_command("BF.INFO", key, "ITEMS")[0]) < capacity:
        need = capacity - int(c.execute_command("BF.INFO", key, "ITEMS")[0])
        fill(c, key, ["m%d" % i for i in range(n, n + need)])
        n += need
    assert c.execute_command("BF.INFO", key, "FILTERS") == [1]
    return ["m%d" % i for i in range(n)]


def test_a_new_level_past_maxmemory_is_refused(c, limited):
    """10,000 items, then a level of 327M items (410 MB): under the ceiling
    raised to 1gb, past maxmemory."""
    c.config_set("floodgate.max-structure-size", "1gb")
    members = full_filter(c, "g", 10000, "EXPANSION", 32768)
    new = next("new%d" % i for i in range(1000)
               if not c.execute_command("BF.EXISTS", "g", "new%d" % i))
    msg = refused(c, limited.port, "BF.ADD", "g", new)
    assert msg.startswith(NO_MEMORY), msg
    # items it holds are still answered (no level needed), a new one refused
    with RawClient(limited.port) as raw:
        rep = raw.execute("BF.MADD", "g", members[0], new, members[1])
    assert rep[0] == 0 and str(rep[1]).startswith(NO_MEMORY) and len(rep) == 2, rep
    assert c.execute_command("BF.EXISTS", "g", new) == 0
    assert c.execute_command("BF.INFO", "g", "FILTERS") == [1]


def test_a_new_level_past_the_ceiling_is_refused(c, limited):
    members = full_filter(c, "g", 10000)
    size = c.execute_command("BF.INFO", "g", "SIZE")[0]
    c.config_set("floodgate.max-structure-size", size + 1000)
    new = next("new%d" % i for i in range(1000)
               if not c.execute_command("BF.EXISTS", "g", "new%d" % i))
    msg = refused(c, limited.port, "BF.ADD", "g", new)
    assert msg.startswith(TOO_LARGE), msg
    with RawClient(limited.port) as raw:
        rep = raw.execute("BF.INSERT", "g", "ITEMS", members[5], new)
    assert rep[0] == 0 and str(rep[1]).startswith(TOO_LARGE) and len(rep) == 2, rep
    # with the ceiling raised, it grows
    c.config_set("floodgate.max-structure-size", "512mb")
    assert c.execute_command("BF.ADD", "g", new) == 1
    assert c.execute_command("BF.INFO", "g", "FILTERS") == [2]


def deny_all(c, name, items):
    """FG.POLICY DENY of every item: how many were new."""
    return sum(int(c.execute_command("FG.POLICY", "DENY", name, *items[i:i + 5000]))
               for i in range(0, len(items), 5000))


def deny_entries(c, name):
    got = c.execute_command("FG.POLICY", "GET", name)
    return got[got.index(b"denylist") + 1][1]


def test_a_policy_bloom_list_grows_within_the_ceiling_only(c, limited):
    """A list for 40,000 items (52 KB) filled up, then a ceiling of 64 KB:
    its next level (80,000 items) is refused."""
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1,
                      "DENYLIST", "BLOOM", "0.01", 40000)
    n = 0
    while deny_entries(c, "p") < 40000:
        need = 40000 - deny_entries(c, "p")
        deny_all(c, "p", ["10.0.%d" % i for i in range(n, n + need)])
        n += need
    c.config_set("floodgate.max-structure-size", "64kb")
    fresh = ["172.16.%d" % i for i in range(100)]
    msg = refused(c, limited.port, "FG.POLICY", "DENY", "p", *fresh)
    assert msg.startswith("ERR the Bloom list cannot grow: too large: the structure would "
                          "take "), msg
    assert msg.endswith("above floodgate.max-structure-size (65536)"), msg
    assert deny_entries(c, "p") == 40000
    c.config_set("floodgate.max-structure-size", "512mb")
    assert deny_all(c, "p", fresh) > 90


def test_policy_bloom_lists_count_in_used_memory(c):
    """A policy's Bloom list is the server's memory like a key's: it shows
    in used_memory while it exists."""
    before = used(c)
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1,
                      "DENYLIST", "BLOOM", "0.01", 10000000)
    held = used(c) - before
    assert 12 * MB < held < 15 * MB, held
    c.execute_command("FG.POLICY", "DEL", "p")
    assert used(c) - before < MB


# -- loading ------------------------------------------------------------------------

def big_filter(unlimited, key, capacity):
    """A filter made where nothing bounds it: its DUMP and its chunks."""
    u = unlimited.client()
    u.delete(key)
    assert u.execute_command("BF.RESERVE", key, "0.01", capacity) == b"OK"
    u.execute_command("BF.MADD", key, "a", "b", "c")
    dump, chunks = u.dump(key), scandump(u, key)
    u.delete(key)
    return dump, chunks


def test_loadchunk_of_a_filter_past_the_bounds_is_refused(c, limited, unlimited):
    _, chunks = big_filter(unlimited, "huge", 500000000)  # 657 MB
    msg = refused(c, limited.port, "BF.LOADCHUNK", "k", *chunks[0])
    assert msg.startswith(TOO_LARGE), msg
    _, chunks = big_filter(unlimited, "big", 90000000)    # 118 MB
    msg = refused(c, limited.port, "BF.LOADCHUNK", "k", *chunks[0])
    assert msg.startswith(NO_MEMORY), msg


def test_a_chunk_whose_level_passes_maxmemory_is_refused(c, limited, unlimited):
    """The header fits (a level of 39 MB, of 100); once other data took
    50 MB, the level its first chunk (16 MB) allocates does not."""
    _, chunks = big_filter(unlimited, "mid", 30000000)
    assert c.execute_command("BF.LOADCHUNK", "k", *chunks[0]) == b"OK"
    for i in range(40):
        c.set("ballast:%d" % i, b"x" * MB)
    msg = refused(c, limited.port, "BF.LOADCHUNK", "k", *chunks[1])
    assert msg.startswith(NO_MEMORY), msg
    c.delete(*["ballast:%d" % i for i in range(40)])
    assert c.execute_command("BF.LOADCHUNK", "k", *chunks[1]) == b"OK"


def test_restore_past_the_bounds_is_refused_and_logged(c, limited, unlimited):
    dump, _ = big_filter(unlimited, "big", 90000000)
    assert len(dump) < 10 * MB  # the zeros compress
    msg = refused(c, limited.port, "RESTORE", "k", 0, dump)
    assert msg == "ERR Bad data format", msg
    wait_for(lambda: "Bloom filter not loaded: ERR not enough memory" in limited.log_tail(50))


def test_copy_past_maxmemory_is_refused(c, limited):
    assert c.execute_command("BF.RESERVE", "k", "0.01", 40000000) == b"OK"  # 52 MB
    with RawClient(limited.port) as raw:
        assert raw.error_of("COPY", "k", "k2").startswith("ERR ")
    assert c.exists("k2") == 0
    c.config_set("maxmemory", "0")
    try:
        assert c.copy("k", "k2")
    finally:
        c.config_set("maxmemory", "100mb")


def test_under_the_bounds_everything_works(c):
    assert c.execute_command("BF.RESERVE", "k", "0.01", 1000000) == b"OK"
    assert c.execute_command("BF.ADD", "k", "x") == 1
    assert c.execute_command("BF.INSERT", "n", "CAPACITY", 100000, "ITEMS", "y") == [1]
    assert c.execute_command("BF.MEXISTS", "k", "x", "y") == [1, 0]
    c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1,
                      "DENYLIST", "BLOOM", "0.01", 100000)
    assert int(c.execute_command("FG.POLICY", "DENY", "p", "bad")) == 1
    assert c.config_get("floodgate.max-structure-size") == {
        "floodgate.max-structure-size": str(512 * MB)}


def test_a_file_with_a_filter_above_the_ceiling_loads(unlimited):
    """Loading is not bounded: what a file holds is what the server had."""
    u = unlimited.client()
    u.flushall()
    assert u.execute_command("BF.RESERVE", "k", "0.01", 2000000) == b"OK"  # 2.6 MB
    u.execute_command("BF.MADD", "k", "a", "b")
    u.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1,
                      "DENYLIST", "BLOOM", "0.01", 2000000)
    u.execute_command("FG.POLICY", "DENY", "p", "bad")
    u.execute_command("SAVE")
    s = Server(["--floodgate.max-structure-size", "1mb"])
    try:
        shutil.copy(unlimited.dir + "/dump.rdb", s.dir + "/dump.rdb")
        s.start()
        c2 = s.client()
        assert c2.execute_command("BF.MEXISTS", "k", "a", "b") == [1, 1]
        assert c2.execute_command("FG.CHECK", "p", "x", "ID", "bad")[0] == 0
        assert "above floodgate.max-structure-size (1048576)" in s.log_tail(50)
        # it cannot be copied past the ceiling, but it is served
        with RawClient(s.port) as raw:
            assert raw.error_of("COPY", "k", "k2").startswith("ERR ")
    finally:
        s.cleanup()
        u.execute_command("FG.POLICY", "DEL", "p")
        u.flushall()


def test_a_replica_applies_what_its_master_did():
    """The bounds are the master's: a replica with a lower ceiling still
    holds the filter its master made."""
    master = Server()
    replica = Server(["--floodgate.max-structure-size", "1mb"])
    try:
        master.start()
        replica.start()
        m, r = master.client(), replica.client()
        r.execute_command("REPLICAOF", "127.0.0.1", master.port)
        assert m.execute_command("BF.RESERVE", "k", "0.01", 2000000) == b"OK"
        m.execute_command("BF.MADD", "k", "a", "b")
        wait_replica_synced(m, r)
        assert r.execute_command("BF.MEXISTS", "k", "a", "b") == [1, 1]
        assert r.dump("k") == m.dump("k")
    finally:
        replica.cleanup()
        master.cleanup()
