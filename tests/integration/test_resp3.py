"""RESP3 reply shapes: every field/value reply is a map (FG.LOCKINFO,
FG.UVINFO, FG.INSPECT, FG.POLICY GET), and each is the same flat array as
before under RESP2 (the server flattens a map for RESP2 clients). BF.INFO
keeps RedisBloom 2.4's flat array under RESP3 as well. Positional tuples
(holders, waiters, a policy's limits and lists) stay arrays under both.

redis-py 4.3 speaks only RESP2, so these use harness.RawClient, which sends
HELLO 3 and reads RESP3's `%` maps."""

import pytest

from harness import RawClient, RespMap

LOCKINFO_KEYS = [b"kind", b"capacity", b"used", b"holders", b"waiters", b"next_token"]
UVINFO_KEYS = [b"span", b"minutes", b"hours", b"days", b"tzoffset", b"newest_us", b"entries",
               b"buckets", b"bytes"]
POLICY_KEYS = [b"name", b"limits", b"penalty", b"shadow", b"allowlist", b"denylist", b"allowed",
               b"denied", b"banned", b"shadow_denied", b"waited"]
BF_INFO_FIELDS = [b"Capacity", b"Size", b"Number of filters", b"Number of items inserted",
                  b"Expansion rate"]


@pytest.fixture
def both(server):
    """A RESP2 and a RESP3 connection to one flushed server."""
    if not server.alive():
        server.start()
    with RawClient(server.port) as two, RawClient(server.port, protocol=3) as three:
        two.execute("FLUSHALL")
        yield two, three


def flat(m):
    """What a map becomes under RESP2: its keys and values in turn."""
    return [x for pair in m.items() for x in pair]


def assert_map(rep, keys):
    assert isinstance(rep, RespMap), rep
    assert list(rep) == keys, rep


def assert_flattened(rep2, rep3):
    """The RESP2 reply is the RESP3 map flattened, with the same nested
    values (times that move between the two calls aside)."""
    assert isinstance(rep2, list) and not isinstance(rep2, RespMap), rep2
    assert rep2[0::2] == list(rep3), rep2


def test_lockinfo_is_a_map(server, both):
    two, three = both
    assert three.execute("FG.LOCK", "L", "holder", 60000)[0] == 1
    waiter = RawClient(server.port)
    try:
        waiter.sock.sendall(waiter.encode(["FG.LOCK", "L", "waiter", 60000, "WAIT", 60000]))
        info = three.execute("FG.LOCKINFO", "L")
        assert_map(info, LOCKINFO_KEYS)
        while len(info[b"waiters"]) == 0:  # the WAIT has not reached the server yet
            info = three.execute("FG.LOCKINFO", "L")
        assert info[b"kind"] == b"lock" and info[b"used"] == 1
        [holder] = info[b"holders"]
        assert isinstance(holder, list) and holder[:3] == [b"holder", b"exclusive", 1]
        [queued] = info[b"waiters"]
        assert isinstance(queued, list) and queued[:3] == [b"waiter", b"exclusive", 1]
        assert_flattened(two.execute("FG.LOCKINFO", "L"), info)
        assert three.execute("FG.UNLOCK", "L", "holder") == 0  # released
        assert waiter.read_reply()[0] == 1
    finally:
        waiter.close()
    assert three.execute("FG.LOCKINFO", "nobody") is None


def test_semaphore_lockinfo_is_a_map(both):
    two, three = both
    three.execute("FG.ACQUIRE", "S", 3, "a", 2, 60000)
    info = three.execute("FG.LOCKINFO", "S")
    assert_map(info, LOCKINFO_KEYS)
    assert (info[b"kind"], info[b"capacity"], info[b"used"]) == (b"semaphore", 3, 2)
    assert_flattened(two.execute("FG.LOCKINFO", "S"), info)


def test_uvinfo_is_a_map(both):
    two, three = both
    three.execute("FG.UVCREATE", "u", "MINUTES", 5, "HOURS", 6, "DAYS", 7, "TZOFFSET", 3600)
    three.execute("FG.UVADD", "u", "a", "b", "c")
    info = three.execute("FG.UVINFO", "u")
    assert_map(info, UVINFO_KEYS)
    assert [info[k] for k in UVINFO_KEYS[:5]] == [604800, 5, 6, 7, 3600]
    assert two.execute("FG.UVINFO", "u") == flat(info)


def test_inspect_is_a_map(both):
    two, three = both
    for argv, fields in ((["FG.GCRA", "g", 5, 5, 1000], [b"tat_ns"]),
                         (["FG.FIXED", "f", 5, 60000], [b"window_start_us", b"count"]),
                         (["FG.SLIDING", "s", 5, 60000],
                          [b"window_start_us", b"count", b"prev_count"]),
                         (["FG.SLIDELOG", "l", 5, 60000], [b"entries"])):
        three.execute(*argv)
        info = three.execute("FG.INSPECT", argv[1])
        assert_map(info, [b"type"] + fields + [b"pttl"])
        assert two.execute("FG.INSPECT", argv[1])[0::2] == list(info)
    assert isinstance(three.execute("FG.INSPECT", "l")[b"entries"], list)


def test_policy_get_is_a_map(both):
    two, three = both
    three.execute("FG.POLICY", "SET", "p", "LIMIT", "FIXED", 10, 60000, "PENALTY", 1000,
                  "DENYLIST", "EXACT")
    info = three.execute("FG.POLICY", "GET", "p")
    assert_map(info, POLICY_KEYS)
    assert info[b"limits"] == [[b"FIXED", b"10", b"60000"]]
    assert info[b"denylist"] == [b"exact", 0]
    assert two.execute("FG.POLICY", "GET", "p") == flat(info)
    three.execute("FG.POLICY", "DEL", "p")


def test_bf_info_keeps_redisbloom_flat_array(both):
    """RedisBloom 2.4 answers integers and a flat BF.INFO under RESP3 too."""
    two, three = both
    assert type(three.execute("BF.ADD", "bf", "x")) is int  # not a RESP3 boolean
    info = three.execute("BF.INFO", "bf")
    assert not isinstance(info, RespMap) and info[0::2] == BF_INFO_FIELDS, info
    assert two.execute("BF.INFO", "bf") == info
    assert three.execute("BF.INFO", "bf", "ITEMS") == [1]
