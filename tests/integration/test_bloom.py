"""BF.* semantics and RedisBloom 2.4 compatibility (docs/bloom.md).

Replies are checked as RedisBloom 2.4.23 gives them in RESP2, down to the
wire where a client could tell the difference (BF.INFO's names are status
replies, its nil a null bulk string), and errors verbatim through a raw
connection (redis-py strips "ERR "). The figures of "Better than
RedisBloom" are measured on deterministic items, so a test that passes once
passes always: no false negatives, the false-positive rate at capacity, BF.CARD
against the true count, and MEMORY USAGE against the classic optimum.

Also here: WATCH and keyspace events (only writes that changed something),
the INFO counters, COMMAND GETKEYS, redis-py's RedisBloom client, and each
command on a 3-master cluster (served by the slot owner, MOVED elsewhere).
The other files (test_bloom_bad_input.py, test_bloom_persistence.py,
test_bloom_replication.py) import the helpers defined here.
"""

import math
import time

import pytest
import redis

from harness import RawClient, RespError, digest, s
from topology import assert_no_crash

INFO_FIELDS = ["Capacity", "Size", "Number of filters", "Number of items inserted",
               "Expansion rate"]
MAX_CAPACITY = 1 << 40
CHUNK_MAX = 16 << 20


def optimum_bits(p):
    """Bits per item of the classic optimum at error rate p."""
    return -math.log(p) / math.log(2) ** 2


# -- helpers (imported by the other test_bloom_* files) --------------------------


def fresh_client(server):
    """conftest's `r` with a socket timeout: a command that never answers
    fails its test instead of hanging the run."""
    if not server.alive():
        server.start()
    c = server.client(socket_timeout=60)
    c.execute_command("FLUSHALL")
    yield c
    c.close()


@pytest.fixture
def r(server):
    yield from fresh_client(server)


def port_of(c):
    return c.connection_pool.connection_kwargs["port"]


def raw(c, *argv):
    """The reply as the wire gives it: errors as RespError objects (also
    inside arrays), integers as int, strings as bytes, nil as None."""
    with RawClient(port_of(c), timeout=20) as rc:
        rc.sock.sendall(rc.encode(argv))
        return rc.read_reply()


def error_of(c, *argv):
    """The full text of the error a command must answer."""
    rep = raw(c, *argv)
    assert isinstance(rep, RespError), "expected an error from %r, got %r" % (argv, rep)
    return str(rep)


class WireClient(RawClient):
    """A raw client that keeps the bytes of the last reply."""

    def __init__(self, port):
        super().__init__(port)
        self.seen = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by server")
        self.seen += data
        self.buf += data

    def wire(self, *argv):
        self.seen = self.buf = b""
        self.sock.sendall(self.encode(argv))
        self.read_reply()
        return self.seen[:len(self.seen) - len(self.buf)]


def bf_info(c, key):
    """BF.INFO as a dict {name: value}, checking the names and their order."""
    rep = c.execute_command("BF.INFO", key)
    assert isinstance(rep, list) and len(rep) == 10, rep
    assert s(rep[0::2]) == INFO_FIELDS, rep
    return dict(zip(INFO_FIELDS, rep[1::2]))


def items(prefix, n, start=0):
    return ["%s:%d" % (prefix, i) for i in range(start, start + n)]


def madd(c, key, values, batch=1000):
    """BF.MADD in batches: the answers, flattened."""
    p = c.pipeline(transaction=False)
    for i in range(0, len(values), batch):
        p.execute_command("BF.MADD", key, *values[i:i + batch])
    return [int(x) for rep in p.execute() for x in rep]


def mexists(c, key, values, batch=1000):
    p = c.pipeline(transaction=False)
    for i in range(0, len(values), batch):
        p.execute_command("BF.MEXISTS", key, *values[i:i + batch])
    return [int(x) for rep in p.execute() for x in rep]


def scandump(c, key):
    """The chunks of BF.SCANDUMP, as a RedisBloom client iterates: start at
    0, pass each returned iterator back, stop at [0, ""]."""
    chunks = []
    it = 0
    while True:
        rep = c.execute_command("BF.SCANDUMP", key, it)
        assert isinstance(rep, list) and len(rep) == 2, rep
        it, data = int(rep[0]), rep[1]
        if it == 0:
            assert data == b"", "the last reply of BF.SCANDUMP carries data: %r" % data[:40]
            return chunks
        assert isinstance(data, bytes), rep
        chunks.append((it, data))
        assert len(chunks) < 100000, "BF.SCANDUMP does not end"


def loadchunks(c, key, chunks):
    for it, data in chunks:
        assert c.execute_command("BF.LOADCHUNK", key, it, data) in (b"OK", "OK")


def expected_chain(inserted, capacity0, expansion):
    """(levels, capacity sum) of a scaling chain whose levels fill to their
    capacity before the next one is added."""
    levels, cap, total = 1, capacity0, capacity0
    while inserted > total:
        cap *= expansion
        total += cap
        levels += 1
    return levels, total


# -- replies and defaults ---------------------------------------------------------


def test_add_exists_and_their_reply_types(r):
    assert raw(r, "BF.ADD", "k", "foo") == 1
    assert raw(r, "BF.ADD", "k", "foo") == 0
    assert raw(r, "BF.EXISTS", "k", "foo") == 1
    assert raw(r, "BF.MADD", "k", "foo", "bar", "baz") == [0, 1, 1]
    assert raw(r, "BF.MADD", "k", "foo", "new1", "bar") == [0, 1, 0]
    assert raw(r, "BF.MEXISTS", "k", "foo", "new1", "baz") == [1, 1, 1]
    # binary and empty items are items
    for item in (b"", b"\x00", b"\xff\x00\r\n", b"x" * 100000):
        assert raw(r, "BF.ADD", "k", item) == 1, item[:10]
        assert raw(r, "BF.EXISTS", "k", item) == 1
        assert raw(r, "BF.ADD", "k", item) == 0
    # a filter big enough that absent items are absent
    assert raw(r, "BF.RESERVE", "big", "0.0001", "10000") == b"OK"
    assert raw(r, "BF.MADD", "big", "a", "b") == [1, 1]
    assert raw(r, "BF.MEXISTS", "big", "a", "nonexist", "b", "other") == [1, 0, 1, 0]
    assert raw(r, "BF.EXISTS", "big", "nonexist") == 0


def test_missing_key_reads_answer_zero_and_create_nothing(r):
    assert raw(r, "BF.EXISTS", "nokey", "foo") == 0
    assert raw(r, "BF.MEXISTS", "nokey", "foo", "bar", "baz") == [0, 0, 0]
    assert raw(r, "BF.CARD", "nokey") == 0
    assert error_of(r, "BF.INFO", "nokey") == "ERR not found"
    assert error_of(r, "BF.INFO", "nokey", "CAPACITY") == "ERR not found"
    assert error_of(r, "BF.SCANDUMP", "nokey", 0) == "ERR not found"
    assert error_of(r, "BF.INSERT", "nokey", "NOCREATE", "ITEMS", "foo", "bar") == "ERR not found"
    assert error_of(r, "BF.LOADCHUNK", "nokey", 2, "data") == "ERR not found"
    assert r.dbsize() == 0


@pytest.mark.parametrize("how", ["BF.ADD", "BF.MADD", "BF.INSERT", "BF.INSERT-ERROR-only"])
def test_default_filter(r, how):
    """BF.ADD, BF.MADD and BF.INSERT create (0.01, 100, expansion 2): the
    same value, byte for byte, as BF.RESERVE k 0.01 100 EXPANSION 2."""
    error = "0.01"
    if how == "BF.ADD":
        assert r.execute_command("BF.ADD", "k", "a") == 1
    elif how == "BF.MADD":
        assert r.execute_command("BF.MADD", "k", "a") == [1]
    elif how == "BF.INSERT":
        assert r.execute_command("BF.INSERT", "k", "ITEMS", "a") == [1]
    else:
        error = "0.001"
        assert r.execute_command("BF.INSERT", "k", "ERROR", error, "ITEMS", "a") == [1]
    assert r.execute_command("BF.RESERVE", "ref", error, 100, "EXPANSION", 2) in (b"OK", "OK")
    assert r.execute_command("BF.ADD", "ref", "a") == 1
    info = bf_info(r, "k")
    assert info == bf_info(r, "ref")
    assert (info["Capacity"], info["Number of filters"], info["Number of items inserted"],
            info["Expansion rate"]) == (100, 1, 1, 2), info
    bits = optimum_bits(float(error)) * 100
    assert bits / 8 <= info["Size"] <= 1.1 * bits / 8 + 1024, info
    assert r.dump("k") == r.dump("ref")
    assert s(r.execute_command("DEBUG", "DIGEST-VALUE", "k", "ref")) == \
        [s(r.execute_command("DEBUG", "DIGEST-VALUE", "k")[0])] * 2


def test_info_reply_on_the_wire(r):
    """RedisBloom's exact RESP2: status replies for the names, integers,
    a null bulk string for a non-scaling filter's expansion."""
    assert r.execute_command("BF.INSERT", "ns", "CAPACITY", 3, "NONSCALING", "ITEMS",
                             "a", "b", "c") == [1, 1, 1]
    assert r.execute_command("BF.RESERVE", "sc", "0.001", 100) in (b"OK", "OK")
    with WireClient(port_of(r)) as w:
        for key, cap, items_in, expansion in (("ns", 3, 3, b"$-1\r\n"), ("sc", 100, 0, b":2\r\n")):
            size = bf_info(r, key)["Size"]
            assert w.wire("BF.INFO", key) == (
                b"*10\r\n+Capacity\r\n:%d\r\n+Size\r\n:%d\r\n+Number of filters\r\n:1\r\n"
                b"+Number of items inserted\r\n:%d\r\n+Expansion rate\r\n%s"
                % (cap, size, items_in, expansion))
            assert w.wire("BF.INFO", key, "CAPACITY") == b"*1\r\n:%d\r\n" % cap
            assert w.wire("BF.INFO", key, "EXPANSION") == b"*1\r\n" + expansion
        assert w.wire("BF.ADD", "ns", "a") == b":0\r\n"
        assert w.wire("BF.MEXISTS", "ns", "a", "b") == b"*2\r\n:1\r\n:1\r\n"
        assert w.wire("BF.RESERVE", "x", "0.1", 10) == b"+OK\r\n"
        assert w.wire("BF.SCANDUMP", "x", 0)[:4] == b"*2\r\n"
        assert w.wire("BF.CARD", "ns") == b":3\r\n"


@pytest.mark.parametrize("scaling", [True, False], ids=["scaling", "nonscaling"])
def test_info_single_fields(r, scaling):
    args = ["BF.RESERVE", "k", "0.001", 500] + ([] if scaling else ["NONSCALING"])
    assert r.execute_command(*args) in (b"OK", "OK")
    assert r.execute_command("BF.MADD", "k", "a", "b", "c") == [1, 1, 1]
    info = bf_info(r, "k")
    assert info["Capacity"] == 500 and info["Number of filters"] == 1
    assert info["Number of items inserted"] == 3
    assert info["Expansion rate"] == (2 if scaling else None)
    for field, name in (("CAPACITY", "Capacity"), ("SIZE", "Size"),
                        ("FILTERS", "Number of filters"),
                        ("ITEMS", "Number of items inserted"), ("EXPANSION", "Expansion rate")):
        for spelled in (field, field.lower(), field.capitalize()):
            assert raw(r, "BF.INFO", "k", spelled) == [info[name]], spelled
    for bad in ("CAPACITYX", "CAP", "", "Number of filters", "SIZE "):
        assert error_of(r, "BF.INFO", "k", bad) == "Invalid information value", bad
    assert error_of(r, "bf.info", "k", "capacity", "size") == \
        "ERR wrong number of arguments for 'bf.info' command"


def test_card(r):
    assert r.execute_command("BF.CARD", "k") == 0
    assert r.execute_command("BF.RESERVE", "k", "0.001", 100) in (b"OK", "OK")
    assert r.execute_command("BF.CARD", "k") == 0
    assert r.execute_command("BF.ADD", "k", "foo") == 1
    assert r.execute_command("BF.CARD", "k") == 1
    assert r.execute_command("BF.ADD", "k", "foo") == 0
    assert r.execute_command("BF.CARD", "k") == 1
    assert r.execute_command("BF.MADD", "k", *items("c", 50)) == [1] * 50
    assert 51 <= r.execute_command("BF.CARD", "k") <= 52
    assert error_of(r, "bf.card") == "ERR wrong number of arguments for 'bf.card' command"


# -- scaling and non-scaling ------------------------------------------------------


@pytest.mark.parametrize("capacity0,expansion", [(100, 2), (100, 1), (50, 4), (7, 3)])
def test_scaling_adds_levels_and_capacity_sums(r, capacity0, expansion):
    assert r.execute_command("BF.RESERVE", "k", "0.01", capacity0, "EXPANSION",
                             expansion) in (b"OK", "OK")
    added = 0
    seen_levels = {1}
    for step in range(6):
        replies = madd(r, "k", items("s", 300, 300 * step))
        added += sum(replies)
        info = bf_info(r, "k")
        assert info["Number of items inserted"] == added
        levels, capacity = expected_chain(added, capacity0, expansion)
        assert (info["Number of filters"], info["Capacity"]) == (levels, capacity), (added, info)
        assert info["Expansion rate"] == expansion
        seen_levels.add(levels)
    assert len(seen_levels) >= 3, seen_levels
    assert mexists(r, "k", items("s", 1800)) == [1] * 1800


def test_nonscaling_full(r):
    """RedisBloom's test_no_scaling and test_nonscaling_err: a full
    non-scaling filter refuses new items, and BF.MADD/BF.INSERT stop at the
    first one: the array ends with the error in its place."""
    full = "ERR non scaling filter is full"
    assert raw(r, "BF.RESERVE", "bf", "0.01", 3, "NONSCALING") == b"OK"
    assert [raw(r, "BF.ADD", "bf", i) for i in range(3)] == [1, 1, 1]
    assert error_of(r, "BF.ADD", "bf", "extra") == full
    assert raw(r, "BF.ADD", "bf", 1) == 0  # present items still answer 0

    assert raw(r, "BF.INSERT", "nonscaling_err", "CAPACITY", 3, "NONSCALING", "ITEMS",
               "a", "b", "c") == [1, 1, 1]
    before = r.dump("nonscaling_err")
    rep = raw(r, "BF.INSERT", "nonscaling_err", "ITEMS", "a", "b", "c", "d", "d")
    assert len(rep) == 4 and rep[:3] == [0, 0, 0], rep
    assert isinstance(rep[3], RespError) and str(rep[3]) == full, rep
    rep = raw(r, "BF.MADD", "nonscaling_err", "d", "e", "a")
    assert len(rep) == 1 and str(rep[0]) == full, rep
    assert r.dump("nonscaling_err") == before
    assert raw(r, "BF.MEXISTS", "nonscaling_err", "a", "b", "c") == [1, 1, 1]
    info = bf_info(r, "nonscaling_err")
    assert info == {"Capacity": 3, "Size": info["Size"], "Number of filters": 1,
                    "Number of items inserted": 3, "Expansion rate": None}, info

    # a batch that fills the filter half way through
    assert raw(r, "BF.RESERVE", "half", "0.001", 4, "NONSCALING") == b"OK"
    rep = raw(r, "BF.MADD", "half", "a", "b", "c", "d", "e", "f")
    assert rep[:4] == [1, 1, 1, 1] and len(rep) == 5 and str(rep[4]) == full, rep
    assert bf_info(r, "half")["Number of items inserted"] == 4


def test_reserve_options(r):
    for argv, cap, expansion in (
            (["BF.RESERVE", "a", "0.01", 10, "NONSCALING"], 10, None),
            (["BF.RESERVE", "b", "0.01", 10, "nonscaling"], 10, None),
            (["BF.RESERVE", "c", "0.01", 10, "EXPANSION", 5], 10, 5),
            (["BF.RESERVE", "d", "0.01", 10, "expansion", 1], 10, 1),
            (["BF.RESERVE", "e", "0.5", 1, "EXPANSION", 32768], 1, 32768),
            (["BF.RESERVE", "f", "1e-6", 1], 1, 2),
            (["BF.RESERVE", "g", "0.999", 1000], 1000, 2)):
        assert raw(r, *argv) == b"OK", argv
        info = bf_info(r, argv[1])
        assert (info["Capacity"], info["Expansion rate"]) == (cap, expansion), (argv, info)
        assert raw(r, "BF.ADD", argv[1], "x") == 1
    assert raw(r, "BF.ADD", "e", "y") in (0, 1)
    assert bf_info(r, "e")["Capacity"] in (1, 1 + 32768)


def test_insert_options_in_any_order(r):
    ref = ["BF.RESERVE", "ref", "0.05", 50, "EXPANSION", 4]
    assert raw(r, *ref) == b"OK"
    assert raw(r, "BF.MADD", "ref", "a", "b") == [1, 1]
    for key, opts in (("o1", ["EXPANSION", 4, "ERROR", "0.05", "CAPACITY", 50]),
                      ("o2", ["CAPACITY", 50, "EXPANSION", 4, "ERROR", "0.05"]),
                      ("o3", ["error", "0.05", "capacity", 50, "expansion", 4])):
        assert raw(r, "BF.INSERT", key, *opts, "ITEMS", "a", "b") == [1, 1], opts
        assert r.dump(key) == r.dump("ref"), opts
    # NONSCALING anywhere before ITEMS; lower case
    assert raw(r, "bf.insert", "o4", "nonscaling", "capacity", 10, "error", "0.1",
               "items", "a") == [1]
    info = bf_info(r, "o4")
    assert (info["Capacity"], info["Expansion rate"]) == (10, None), info
    # after ITEMS everything is an item
    assert raw(r, "BF.INSERT", "o5", "ITEMS", "CAPACITY", "5", "NOCREATE", "ITEMS",
               "NONSCALING") == [1, 1, 1, 1, 1]
    info = bf_info(r, "o5")
    assert (info["Capacity"], info["Expansion rate"]) == (100, 2), info
    assert raw(r, "BF.MEXISTS", "o5", "CAPACITY", "NOCREATE", "ITEMS") == [1, 1, 1]
    # RedisBloom's BF.INSERT takes NONSCALING with EXPANSION: non-scaling wins
    assert raw(r, "BF.INSERT", "o6", "NONSCALING", "EXPANSION", 4, "ITEMS", "a") == [1]
    assert bf_info(r, "o6")["Expansion rate"] is None


def test_insert_reads_options_by_their_first_letters(r):
    """RedisBloom 2.4's BF.INSERT parser: "i..." begins the items, "er..."
    is ERROR, any other "e..." EXPANSION, "c..." CAPACITY, "n.c..." NOCREATE,
    any other "n..." NONSCALING."""
    assert raw(r, "BF.INSERT", "a1", "CAP", 50, "ER", "0.1", "EXP", 3, "I", "x") == [1]
    info = bf_info(r, "a1")
    assert (info["Capacity"], info["Expansion rate"]) == (50, 3), info
    assert raw(r, "BF.INSERT", "a2", "c", 7, "n", "it", "x") == [1]
    info = bf_info(r, "a2")
    assert (info["Capacity"], info["Expansion rate"]) == (7, None), info
    assert error_of(r, "BF.INSERT", "a3", "NOC", "ITEMS", "x") == "ERR not found"
    assert error_of(r, "BF.INSERT", "a3", "nocreatex", "ITEMS", "x") == "ERR not found"
    assert error_of(r, "BF.INSERT", "a3", "E", "x", "ITEMS", "x") == "Bad expansion"
    assert error_of(r, "BF.INSERT", "a3", "Err", "x", "ITEMS", "x") == "Bad error rate"
    assert r.exists("a3") == 0
    assert raw(r, "BF.INSERT", "a4", "items", "x") == [1]
    assert bf_info(r, "a4")["Capacity"] == 100


def test_insert_options_apply_only_on_creation(r):
    assert raw(r, "BF.RESERVE", "k", "0.001", 1000) == b"OK"
    before = bf_info(r, "k")
    assert raw(r, "BF.INSERT", "k", "CAPACITY", 5, "ERROR", "0.5", "NONSCALING", "ITEMS",
               "foo") == [1]
    assert raw(r, "BF.INSERT", "k", "NOCREATE", "EXPANSION", 9, "ITEMS", "foo", "bar") == [0, 1]
    after = bf_info(r, "k")
    assert after == dict(before, **{"Number of items inserted": 2}), (before, after)


def test_insert_requires_items_and_nocreate_creates_nothing(r):
    arity = "ERR wrong number of arguments for 'bf.insert' command"
    for argv in (["bf.insert", "k"], ["bf.insert", "k", "ITEMS"],
                 ["bf.insert", "k", "CAPACITY", 10],
                 ["bf.insert", "k", "NOCREATE", "ITEMS"],
                 ["bf.insert", "k", "NOCREATE", "CAPACITY"],
                 ["bf.insert", "k", "ERROR", "0.1", "CAPACITY", 10, "NONSCALING"],
                 ["bf.insert", "k", "CAPACITY"], ["bf.insert", "k", "ERROR"]):
        assert error_of(r, *argv) == arity, argv
    assert error_of(r, "BF.INSERT", "k", "NOCREATE", "ITEMS", "foo") == "ERR not found"
    assert error_of(r, "BF.INSERT", "k", "CAPACITY", 10, "NOCREATE", "ITEMS", "foo") == \
        "ERR not found"
    assert error_of(r, "BF.INSERT", "k", "FOO", "ITEMS", "a") == "Unknown argument received"
    assert r.dbsize() == 0
    assert raw(r, "BF.ADD", "k", "foo") == 1
    assert raw(r, "BF.INSERT", "k", "NOCREATE", "ITEMS", "foo", "bar") == [0, 1]


# -- the documented errors, verbatim ------------------------------------------------

ERROR_CASES = [
    # (setup, argv, the exact reply)
    ("bloom", ["BF.RESERVE", "bf", "0.01", 100], "ERR item exists"),
    ("bloom", ["BF.RESERVE", "bf", "0.01", 100, "NONSCALING"], "ERR item exists"),
    (None, ["BF.RESERVE", "k", "abc", 100], "ERR bad error rate"),
    (None, ["BF.RESERVE", "k", "", 100], "ERR bad error rate"),
    (None, ["BF.RESERVE", "k", "nan", 100], "ERR bad error rate"),
    (None, ["BF.RESERVE", "k", "0", 100], "ERR (0 < error rate range < 1) "),
    (None, ["BF.RESERVE", "k", "1", 100], "ERR (0 < error rate range < 1) "),
    (None, ["BF.RESERVE", "k", "7.7", 1000], "ERR (0 < error rate range < 1) "),
    (None, ["BF.RESERVE", "k", "-0.01", 100], "ERR (0 < error rate range < 1) "),
    # Regression: 1e-80 took 21 s and 17.5 GB (two blocks per item cannot
    # reach such rates near the optimum); 1e-9 is the floor.
    (None, ["BF.RESERVE", "k", "1e-80", 1000], "ERR error rate must be at least 1e-09"),
    (None, ["BF.RESERVE", "k", "9.9e-10", 1000], "ERR error rate must be at least 1e-09"),
    (None, ["BF.INSERT", "k", "ERROR", "1e-30", "ITEMS", "a"], "Bad argument received"),
    (None, ["BF.RESERVE", "k", "0.01", "abc"], "ERR bad capacity"),
    (None, ["BF.RESERVE", "k", "0.01", "1.5"], "ERR bad capacity"),
    (None, ["BF.RESERVE", "k", "0.01", "blah"], "ERR bad capacity"),
    (None, ["BF.RESERVE", "k", "0.01", 0], "ERR (capacity should be larger than 0)"),
    (None, ["BF.RESERVE", "k", "0.01", -5], "ERR (capacity should be larger than 0)"),
    (None, ["BF.RESERVE", "k", "0.01", MAX_CAPACITY + 1],
     "ERR capacity must be at most 1099511627776"),
    (None, ["BF.RESERVE", "k", "0.01", 1 << 62], "ERR capacity must be at most 1099511627776"),
    (None, ["BF.RESERVE", "k", "0.01", 4294967296 * 4294967296], "ERR bad capacity"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION"], "ERR no expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "NONSCALING", "EXPANSION"], "ERR no expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION", "str"], "ERR bad expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION", "1.5"], "ERR bad expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION", 32769], "ERR bad expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION", -1], "ERR bad expansion"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "NONSCALING", "EXPANSION", 2],
     "Nonscaling filters cannot expand"),
    (None, ["BF.RESERVE", "k", "0.01", 100, "EXPANSION", 2, "NONSCALING"],
     "Nonscaling filters cannot expand"),
    # the arguments are checked in RedisBloom's order, before the key
    (None, ["BF.RESERVE", "k", "abc", "abc"], "ERR bad error rate"),
    (None, ["BF.RESERVE", "k", "2", "abc"], "ERR (0 < error rate range < 1) "),
    (None, ["BF.RESERVE", "k", "0.01", "0", "EXPANSION", "x"],
     "ERR (capacity should be larger than 0)"),
    ("bloom", ["BF.RESERVE", "bf", "abc", 100], "ERR bad error rate"),
    ("string", ["BF.RESERVE", "str", "0.01", 0], "ERR (capacity should be larger than 0)"),
    ("full", ["BF.ADD", "full", "new-item"], "ERR non scaling filter is full"),
    (None, ["BF.INSERT", "k", "ERROR", "big", "ITEMS", "a"], "Bad error rate"),
    (None, ["BF.INSERT", "k", "EXPANSION", "big", "ITEMS", "a"], "Bad expansion"),
    (None, ["BF.INSERT", "k", "CAPACITY", "0.3", "ITEMS", "a"], "Bad capacity"),
    (None, ["BF.INSERT", "k", "CAPACITY", "big", "ITEMS", "a"], "Bad capacity"),
    (None, ["BF.INSERT", "k", "DONTEXIST", "ITEMS", "a"], "Unknown argument received"),
    (None, ["BF.INSERT", "k", "NOCREATE", "ITEMS", "a"], "ERR not found"),
    ("bloom", ["BF.INFO", "bf", "wrong_value"], "Invalid information value"),
    (None, ["BF.INFO", "k"], "ERR not found"),
    ("bloom", ["BF.SCANDUMP", "bf", "str"], "Second argument must be numeric"),
    (None, ["BF.SCANDUMP", "k", 0], "ERR not found"),
    ("bloom", ["BF.LOADCHUNK", "bf", "str", "data"], "ERR Second argument must be numeric"),
    (None, ["BF.LOADCHUNK", "k", 1, "not a header"], "ERR received bad data"),
    (None, ["BF.LOADCHUNK", "k", 1, ""], "ERR received bad data"),
    (None, ["BF.LOADCHUNK", "k", 5, "data"], "ERR not found"),
    (None, ["BF.LOADCHUNK", "k", 0, "data"], "ERR not found"),
    ("string", ["BF.ADD", "str", "a"], "WRONGTYPE Operation against a key holding the wrong "
                                       "kind of value"),
]
ARITY = {  # command: argument lists too short or too long
    "bf.reserve": [[], ["k"], ["k", "0.01"], ["k", "0.01", 100, "EXPANSION", 2, "NONSCALING",
                                                "x"]],
    "bf.add": [[], ["k"], ["k", "a", "b"]],
    "bf.madd": [[], ["k"]],
    "bf.insert": [[], ["k"]],
    "bf.exists": [[], ["k"], ["k", "a", "b"]],
    "bf.mexists": [[], ["k"]],
    "bf.info": [[], ["k", "CAPACITY", "SIZE"]],
    "bf.card": [[], ["k", "x"]],
    "bf.scandump": [[], ["k"], ["k", 0, 0]],
    "bf.loadchunk": [[], ["k"], ["k", 1], ["k", 1, "d", "x"]],
}
for _cmd, _lists in ARITY.items():
    for _args in _lists:
        ERROR_CASES.append((None, [_cmd] + _args,
                            "ERR wrong number of arguments for '%s' command" % _cmd))


def setup_keys(c, which):
    if which == "bloom":
        assert c.execute_command("BF.MADD", "bf", "a", "b") == [1, 1]
    elif which == "string":
        c.set("str", "v")
    elif which == "full":
        c.execute_command("BF.INSERT", "full", "CAPACITY", 2, "NONSCALING", "ITEMS", "a", "b")


@pytest.mark.parametrize("setup,argv,expected", ERROR_CASES,
                         ids=["%d-%s" % (n, " ".join(str(a) for a in c[1])[:60])
                              for n, c in enumerate(ERROR_CASES)])
def test_documented_errors_verbatim(r, setup, argv, expected):
    setup_keys(r, setup)
    before = digest(r)
    assert error_of(r, *argv) == expected
    assert digest(r) == before
    assert r.exists("k") == 0


# -- accuracy, cardinality, memory ------------------------------------------------

N = 100_000
PROBES = 200_000


def fp_rate(c, key, n=PROBES):
    """The share of absent items (never added anywhere) that the filter
    answers 1 for."""
    return sum(mexists(c, key, items("absent", n))) / n


def fill_to_capacity(c, key, capacity):
    """Offers new items until exactly `capacity` adds answered 1 (a batch
    never offers more than are missing, so a scaling filter stays one level).
    Returns the items offered."""
    offered = []
    while True:
        missing = capacity - bf_info(c, key)["Number of items inserted"]
        if missing == 0:
            return offered
        batch = items("item", missing, len(offered))
        assert set(madd(c, key, batch)) <= {0, 1}
        offered += batch


ACCURACY = [
    # (id, BF.RESERVE arguments or None for the default filter, p, filled to capacity)
    ("reserved-1%", ["0.01", N], 0.01, True),
    ("nonscaling-0.1%", ["0.001", N, "NONSCALING"], 0.001, True),
    ("nonscaling-10%", ["0.1", 20000, "NONSCALING"], 0.1, True),
    ("nonscaling-25%", ["0.25", 20000, "NONSCALING"], 0.25, True),
    ("reserved-5%", ["0.05", 20000], 0.05, True),
    ("default-grown", None, 0.01, False),  # capacity 100, grown to 100k items
    ("grown-10%", ["0.1", 100, "EXPANSION", 2], 0.1, False),
]


@pytest.mark.parametrize("argv,p,at_capacity", [a[1:] for a in ACCURACY],
                         ids=[a[0] for a in ACCURACY])
def test_accuracy_at_capacity(r, argv, p, at_capacity):
    """docs/bloom.md: no false negatives; a reserved filter's measured
    false-positive rate at capacity (exactly `capacity` adds answered 1) is
    at most p, and so is a chain's however far it grew; BF.CARD estimates the
    distinct items, counting those that a false positive hid (within 2% of
    them), and is at least BF.INFO ITEMS, the adds that answered 1."""
    if argv:
        assert r.execute_command("BF.RESERVE", "k", *argv) in (b"OK", "OK")
    if at_capacity:
        offered = fill_to_capacity(r, "k", argv[1])
    else:
        offered = items("item", N)
        madd(r, "k", offered)
    info = bf_info(r, "k")
    assert mexists(r, "k", offered) == [1] * len(offered), "false negatives"
    rate = fp_rate(r, "k")
    assert rate <= p, "false-positive rate %.5f above %g (%s)" % (rate, p, info)
    card = r.execute_command("BF.CARD", "k")
    assert card >= info["Number of items inserted"], (card, info)
    assert abs(card - len(offered)) <= 0.02 * len(offered), (
        "BF.CARD %d for %d distinct items (%d answered 1)" % (
            card, len(offered), info["Number of items inserted"]))
    # the same items again: nothing changes
    before = r.dump("k")
    assert madd(r, "k", offered[:5000]) == [0] * 5000
    assert r.dump("k") == before and r.execute_command("BF.CARD", "k") == card
    if at_capacity:
        assert info["Number of filters"] == 1 and info["Capacity"] == argv[1], info
    else:
        assert info["Number of filters"] > 5 and info["Capacity"] >= N, info


def test_card_of_a_small_filter_is_exact_enough(r):
    """A filter far below capacity: BF.CARD equals the distinct adds."""
    assert r.execute_command("BF.RESERVE", "k", "0.001", 100000) in (b"OK", "OK")
    for n in (1, 10, 100, 1000):
        madd(r, "k", items("e", n))
        card = r.execute_command("BF.CARD", "k")
        assert abs(card - n) <= max(1, 0.01 * n), (n, card)


@pytest.mark.parametrize("p", [0.01, 0.001, 1e-6])
@pytest.mark.parametrize("nonscaling", [False, True], ids=["scaling", "nonscaling"])
def test_memory_of_a_reserved_filter(r, p, nonscaling):
    """MEMORY USAGE of BF.RESERVE k p 1M: at most 1.1 x the classic optimum
    -ln p / ln^2 2 bits per item (9.585 at 1%) plus a small overhead, and
    BF.INFO Size agrees with it. The one exception docs/bloom.md states: a
    scaling filter at 1e-6 (its first level is built for 0.8 p) takes 1.11 x."""
    n = 1_000_000
    assert r.execute_command("BF.RESERVE", "k", repr(p), n,
                             *(["NONSCALING"] if nonscaling else [])) in (b"OK", "OK")
    usage = r.execute_command("MEMORY", "USAGE", "k")
    size = bf_info(r, "k")["Size"]
    ratio = 1.11 if (p < 1e-5 and not nonscaling) else 1.1
    limit = ratio * optimum_bits(p) * n / 8 + 4096
    assert usage <= limit, "%d bytes, %.2f bits per item (limit %.2f)" % (
        usage, usage * 8 / n, ratio * optimum_bits(p))
    assert usage >= math.log2(1 / p) * n / 8, usage  # not below information theory
    assert size <= usage <= size + 1024, (size, usage)


# -- WATCH, keyspace events, INFO ---------------------------------------------------


class Events:
    """Keyspace events on one key, with notify-keyspace-events set. Each
    read ends with a marker (SET on another key): the events before it are
    all those of the commands sent before, however slow the machine."""

    MARKER = "bloom:event-marker"

    def __init__(self, c, key, flags="KEA"):
        self.c = c
        self.key = key
        self.old = c.config_get("notify-keyspace-events")["notify-keyspace-events"]
        c.config_set("notify-keyspace-events", flags)
        self.ps = c.pubsub(ignore_subscribe_messages=True)
        self.ps.subscribe("__keyspace@0__:" + key, "__keyspace@0__:" + self.MARKER)
        self.drain()

    def drain(self):
        """The events of `key` since the last drain."""
        self.c.set(self.MARKER, 1)
        out = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = self.ps.get_message(timeout=0.1)
            if m is None or m.get("type") != "message":
                continue
            if s(m["channel"]).endswith(self.MARKER):
                return out
            out.append(s(m["data"]))
        raise AssertionError("the marker's event never came (events so far: %r)" % out)

    def close(self):
        self.ps.close()
        self.c.delete(self.MARKER)
        self.c.config_set("notify-keyspace-events", self.old)


# (argv, whether it changes a filter (0.001, 100) holding "a")
WRITES = [
    (["BF.ADD", "k", "new"], True),
    (["BF.MADD", "k", "a", "new"], True),
    (["BF.INSERT", "k", "ITEMS", "a", "new"], True),
    (["BF.ADD", "k", "a"], False),
    (["BF.MADD", "k", "a", "a"], False),
    (["BF.INSERT", "k", "CAPACITY", 9, "ITEMS", "a"], False),
    (["BF.EXISTS", "k", "a"], False),
    (["BF.MEXISTS", "k", "a", "new"], False),
    (["BF.INFO", "k"], False),
    (["BF.CARD", "k"], False),
    (["BF.SCANDUMP", "k", 0], False),
    (["BF.RESERVE", "k", "0.1", 10], False),  # refused: it exists
]


@pytest.mark.parametrize("argv,changes", WRITES, ids=[" ".join(map(str, w[0])) for w in WRITES])
def test_watch_and_events_follow_changes(r, server, argv, changes):
    """A command that changed the filter fires a keyspace event and aborts a
    transaction WATCHing the key; one that changed nothing does neither."""
    assert r.execute_command("BF.RESERVE", "k", "0.001", 100) in (b"OK", "OK")
    assert r.execute_command("BF.ADD", "k", "a") == 1
    ev = Events(r, "k")
    other = server.client(socket_timeout=60)
    try:
        p = other.pipeline(transaction=True)
        p.watch("k")
        p.multi()
        p.set("marker", 1)
        try:
            r.execute_command(*argv)
        except redis.ResponseError:
            assert argv[0] == "BF.RESERVE", argv
        try:
            p.execute()
            aborted = False
        except redis.WatchError:
            aborted = True
        assert aborted == changes, "WATCH %s by %r" % ("kept" if changes else "broken", argv)
        got = ev.drain()
        assert len(got) == (1 if changes else 0), (argv, got)  # one event per change
    finally:
        ev.close()
        other.close()


@pytest.mark.parametrize("argv", [
    ["BF.RESERVE", "n", "0.01", 10], ["BF.ADD", "n", "a"], ["BF.MADD", "n", "a"],
    ["BF.INSERT", "n", "ITEMS", "a"]])
def test_creating_a_filter_fires_an_event(r, argv):
    ev = Events(r, "n")
    try:
        r.execute_command(*argv)
        assert len(ev.drain()) >= 1
        r.delete("n")
        ev.drain()
        assert error_of(r, "BF.INSERT", "n", "NOCREATE", "ITEMS", "a") == "ERR not found"
        assert error_of(r, "BF.RESERVE", "n", "2", 10) == "ERR (0 < error rate range < 1) "
        assert r.execute_command("BF.EXISTS", "n", "a") == 0
        assert ev.drain() == [] and r.exists("n") == 0
    finally:
        ev.close()


def bloom_counters(c):
    info = c.info("floodgate")
    return {k: v for k, v in info.items() if k.startswith("floodgate_bloom")}


def test_info_counters(r):
    """floodgate_bloom_adds counts the items offered to an add,
    floodgate_bloom_checks the items looked up."""
    before = bloom_counters(r)
    assert set(before) >= {"floodgate_bloom_adds", "floodgate_bloom_checks"}, \
        sorted(r.info("floodgate"))
    madd(r, "k", items("i", 100))
    r.execute_command("BF.ADD", "k", "i:1")
    mexists(r, "k", items("i", 50))
    r.execute_command("BF.EXISTS", "k", "zzz")
    r.execute_command("BF.INFO", "k")
    r.execute_command("BF.CARD", "k")
    after = bloom_counters(r)
    assert after["floodgate_bloom_adds"] - before["floodgate_bloom_adds"] == 101, (before, after)
    assert after["floodgate_bloom_checks"] - before["floodgate_bloom_checks"] == 51, (
        before, after)


def test_a_filter_being_loaded(r):
    """Between BF.LOADCHUNK's header and its last chunk, BF.INFO and BF.CARD
    give the figures of the whole filter, and lookups and adds are refused
    (the bits not yet arrived would make them answer wrongly); chunks must
    come in order, each once."""
    assert r.execute_command("BF.RESERVE", "src", "0.01", 100, "EXPANSION", 2) in (b"OK", "OK")
    values = items("x", 1000)
    madd(r, "src", values)
    chunks = scandump(r, "src")
    assert len(chunks) >= 4, [len(d) for _, d in chunks]
    loadchunks(r, "dst", chunks[:2])
    assert bf_info(r, "dst") == bf_info(r, "src")
    assert r.execute_command("BF.CARD", "dst") == r.execute_command("BF.CARD", "src")
    for argv in (["BF.EXISTS", "dst", "x:999"], ["BF.MEXISTS", "dst", "x:1", "x:999"],
                 ["BF.ADD", "dst", "new"], ["BF.MADD", "dst", "new"],
                 ["BF.INSERT", "dst", "ITEMS", "new"]):
        msg = error_of(r, *argv)
        assert msg.startswith("ERR "), (argv, msg)
    for it, data in (chunks[3], chunks[1], chunks[0]):  # ahead, again, a header again
        assert error_of(r, "BF.LOADCHUNK", "dst", it, data) == "ERR received bad data"
    assert scandump(r, "dst") == chunks[:2]  # what has arrived
    loadchunks(r, "dst", chunks[2:])
    assert r.dump("dst") == r.dump("src")
    assert mexists(r, "dst", values) == [1] * len(values)
    assert error_of(r, "BF.LOADCHUNK", "dst", *chunks[-1]) == "ERR received bad data"


# -- key specs, redis-py, cluster ---------------------------------------------------

COMMANDS = {
    # name: (a valid call on key {k}, on an existing filter, write)
    "BF.RESERVE": (["BF.RESERVE", "{k}", "0.01", 100], False, True),
    "BF.ADD": (["BF.ADD", "{k}", "a"], False, True),
    "BF.MADD": (["BF.MADD", "{k}", "a", "b"], False, True),
    "BF.INSERT": (["BF.INSERT", "{k}", "CAPACITY", 50, "ERROR", "0.1", "ITEMS", "a"], False, True),
    "BF.EXISTS": (["BF.EXISTS", "{k}", "a"], True, False),
    "BF.MEXISTS": (["BF.MEXISTS", "{k}", "a", "b"], True, False),
    "BF.INFO": (["BF.INFO", "{k}"], True, False),
    "BF.CARD": (["BF.CARD", "{k}"], True, False),
    "BF.DEBUG": (["BF.DEBUG", "{k}"], True, False),
    "BF.SCANDUMP": (["BF.SCANDUMP", "{k}", 0], True, False),
    "BF.LOADCHUNK": (["BF.LOADCHUNK", "{k}", 1, "{header}"], False, True),
}


def header_of(c, key="hdr:src"):
    """The first chunk of a small filter's BF.SCANDUMP (for BF.LOADCHUNK)."""
    c.execute_command("BF.RESERVE", key, "0.01", 10)
    it, data = scandump(c, key)[0]
    assert it == 1, it
    c.delete(key)
    return data


def fmt(argv, key, header=b""):
    return [key if a == "{k}" else header if a == "{header}" else a for a in argv]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_info_and_getkeys(r, name):
    argv, _, write = COMMANDS[name]
    info = raw(r, "COMMAND", "INFO", name)[0]
    assert info is not None, name
    flags = set(s(info[2]))
    assert ("write" in flags) == write and ("readonly" in flags) == (not write), (name, flags)
    assert (info[3], info[4], info[5]) == (1, 1, 1), info
    got = raw(r, "COMMAND", "GETKEYS", *fmt(argv, "the-key", b"h"))
    assert s(got) == ["the-key"], got


def test_redis_py_bloom_client(server):
    """redis-py's RedisBloom client, unchanged, against the module."""
    c = server.client(socket_timeout=60)
    try:
        c.flushall()
        bf = c.bf()
        assert bf.create("bf", 0.01, 1000) is True
        assert bf.add("bf", "foo") == 1
        assert bf.madd("bf", "foo", "bar") == [0, 1]
        assert bf.exists("bf", "bar") == 1
        assert bf.mexists("bf", "bar", "nothere") == [1, 0]
        assert bf.insert("ins", ["a", "b"], capacity=50, error=0.1, noScale=True) == [1, 1]
        info = bf.info("bf")
        assert (info.capacity, info.filterNum, info.insertedNum, info.expansionRate) == (
            1000, 1, 2, 2)
        assert bf.info("ins").expansionRate is None
        chunks = []
        it = 0
        while True:
            it, data = bf.scandump("bf", it)
            if it == 0:
                break
            chunks.append((it, data))
        for it, data in chunks:
            assert bf.loadchunk("copy", it, data) in (b"OK", "OK", True)
        assert c.dump("copy") == c.dump("bf")
    finally:
        c.close()


def dbsizes(cluster):
    out = []
    for n in cluster.nodes:
        c = n.client(socket_timeout=60)
        out.append(c.dbsize())
        c.close()
    return out


def test_each_command_is_served_by_the_slot_owner(cluster):
    header = header_of(cluster.owner_of("hdr:src")[1].client(socket_timeout=60))
    for name, (argv, existing, _) in sorted(COMMANDS.items()):
        for i in range(4):
            key = "mv:%s:%d" % (name, i)
            slot, owner = cluster.owner_of(key)
            args = fmt(argv, key, header)
            with RawClient(owner.port) as rc:
                if existing:
                    assert rc.execute("BF.ADD", key, "a") == 1
                try:
                    rc.execute(*args)
                except RespError as e:
                    pytest.fail("%r on the owner of slot %d: %s" % (args, slot, e))
            sizes = dbsizes(cluster)
            for node in cluster.nodes:
                if node.port == owner.port:
                    continue
                with RawClient(node.port) as rc:
                    msg = rc.error_of(*args)
                assert msg == "MOVED %d 127.0.0.1:%d" % (slot, owner.port), (args, msg)
            assert dbsizes(cluster) == sizes, "a redirected %s wrote something" % name


def test_scandump_moves_a_filter_between_nodes(cluster):
    """BF.SCANDUMP on one node, BF.LOADCHUNK on another: the same value."""
    src, dst = "move:src", None
    _, src_owner = cluster.owner_of(src)
    for i in range(100):
        cand = "move:dst:%d" % i
        if cluster.owner_of(cand)[1].port != src_owner.port:
            dst = cand
            break
    _, dst_owner = cluster.owner_of(dst)
    a, b = src_owner.client(socket_timeout=60), dst_owner.client(socket_timeout=60)
    try:
        assert a.execute_command("BF.RESERVE", src, "0.01", 200, "EXPANSION", 3) in (b"OK", "OK")
        madd(a, src, items("m", 2000))
        loadchunks(b, dst, scandump(a, src))
        assert b.dump(dst) == a.dump(src)
        assert mexists(b, dst, items("m", 2000)) == [1] * 2000
    finally:
        a.close()
        b.close()


def test_server_survives(server, r):
    assert_no_crash(server)
