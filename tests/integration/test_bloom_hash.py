"""The Bloom filter's hash (docs/bloom.md "Hash"): XXH3 for every filter made
now, the legacy hash for filters stored before.

The legacy hash put the length of items of 4 to 7 bytes into the same word
as their last 4 bytes, so such items collided: decimal IDs missed the
configured rate 90 times. Decimal IDs, short binary keys and keys sharing a
long prefix must now stay within 2 x the rate.

Filters stored by the version before XXH3 (RDB encoding version 1, dump
header version 1) must still load and answer exactly as they did: the
fixtures in fixtures/bloom_v1.* were made by that version (commit in the
JSON): DUMP payloads, BF.SCANDUMP chunks, an RDB file with the same filters
and a policy with a Bloom deny list, and the answers that version gave to
lookups of its members and of 2,005 other items (false positives
included, which only the legacy hash reproduces).
"""

import json
import os
import shutil

import pytest

import rdbpayload
from harness import Server
from test_bloom import scandump

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
BATCH = 2000


def fixture():
    with open(os.path.join(FIXTURES, "bloom_v1.json")) as f:
        return json.load(f)


def ok(reply):
    return reply in (True, b"OK", "OK")


def add_all(c, key, items):
    p = c.pipeline(transaction=False)
    for i in range(0, len(items), BATCH):
        p.execute_command("BF.MADD", key, *items[i:i + BATCH])
    p.execute()


def exists_all(c, key, items):
    """BF.MEXISTS of every item, as a string of 0s and 1s."""
    p = c.pipeline(transaction=False)
    for i in range(0, len(items), BATCH):
        p.execute_command("BF.MEXISTS", key, *items[i:i + BATCH])
    return "".join(str(a) for rep in p.execute() for a in rep)


# -- the rate on the inputs the legacy hash failed ------------------------------

def decimal(i):
    return str(i)


def short_key(i):
    return i.to_bytes(3, "little")


def prefixed(i):
    return "tenant:acme:region:eu-west-1:session:%d" % i


@pytest.mark.parametrize("name", [decimal, short_key, prefixed], ids=lambda f: f.__name__)
def test_rate_within_twice_the_target(r, name):
    """100,000 items in a filter reserved for them at 1e-5 (BF.RESERVE's
    scaling default), 1M lookups of other items of the same kind: at most
    20 false positives. The legacy hash gave 908 on decimal IDs."""
    assert ok(r.execute_command("BF.RESERVE", "ids", "0.00001", 100000))
    add_all(r, "ids", [name(i) for i in range(100000)])
    hits = exists_all(r, "ids", [name(i) for i in range(100000, 1100000)]).count("1")
    print("%s: %d false positives in 1M lookups" % (name.__name__, hits))
    assert hits <= 20, "%d false positives in 1M lookups at 1e-5" % hits


def test_the_collision_of_the_issue(r):
    assert ok(r.execute_command("BF.RESERVE", "hk", "0.000001", 1000000))
    assert r.execute_command("BF.ADD", "hk", "10330") == 1
    assert r.execute_command("BF.EXISTS", "hk", "103330") == 0


# -- filters stored by the version before XXH3 ---------------------------------

def encoding_version(payload):
    """The module type's encoding version in a DUMP payload."""
    body = rdbpayload.split(payload)[0]
    assert body[0] == rdbpayload.RDB_TYPE_MODULE_2
    return rdbpayload.dec_len(body, 1)[0] & 1023


def header_of(c, key):
    """(version, hash id) of a filter's dump header."""
    header = c.execute_command("BF.SCANDUMP", key, 0)[1]
    return header[4], header[5]


def assert_answers_as_before(c, key, f):
    assert exists_all(c, key, f["members"] + FX["probes"]) == f["answers"], key
    assert c.execute_command("BF.CARD", key) == f["card"]
    info = [v.decode() if isinstance(v, bytes) else v for v in c.execute_command("BF.INFO", key)]
    assert info == f["info"], key


FX = fixture()
COMPLETE = [k for k, f in FX["filters"].items() if "members" in f]


def test_fixtures_are_the_legacy_format(r):
    assert ok(r.execute_command("BF.RESERVE", "new", "0.01", 100))
    assert encoding_version(r.dump("new")) == 2
    assert header_of(r, "new") == (2, 2)  # version 2, XXH3
    for f in FX["filters"].values():
        assert encoding_version(bytes.fromhex(f["dump"])) == 1
        assert bytes.fromhex(f["scandump"][0][1])[4:8] == b"\x01\x00\x00\x00"


@pytest.mark.parametrize("key", COMPLETE)
def test_a_legacy_dump_restores_and_answers_as_before(r, key):
    f = FX["filters"][key]
    assert ok(r.restore(key, 0, bytes.fromhex(f["dump"])))
    assert_answers_as_before(r, key, f)
    # written back as version 2, naming the legacy hash, with the same bits
    assert encoding_version(r.dump(key)) == 2
    assert header_of(r, key) == (2, 1)
    assert [pair[1] for pair in scandump(r, key)[1:]] == [
        bytes.fromhex(h) for _, h in f["scandump"][1:]]
    r.execute_command("DEBUG", "RELOAD")
    assert_answers_as_before(r, key, f)
    # it goes on with the legacy hash: old and new members stay members as
    # it grows (a full non-scaling filter takes none)
    if "nonscaling" not in key:
        more = ["more:%d" % i for i in range(2000)]
        add_all(r, key, more)
        assert exists_all(r, key, f["members"] + more) == "1" * (len(f["members"]) + 2000)
        assert r.execute_command("BF.INFO", key, "FILTERS")[0] > f["info"][5]


@pytest.mark.parametrize("key", COMPLETE)
def test_legacy_chunks_load_and_answer_as_before(r, key):
    f = FX["filters"][key]
    for it, data in f["scandump"]:
        assert ok(r.execute_command("BF.LOADCHUNK", key, it, bytes.fromhex(data)))
    assert_answers_as_before(r, key, f)
    assert ok(r.restore("twin", 0, bytes.fromhex(f["dump"])))
    assert r.dump(key) == r.dump("twin")


def test_a_legacy_filter_being_loaded_completes(r):
    """A filter stored halfway through BF.LOADCHUNK completes with the rest
    of its chunks and is then the filter it was loaded from."""
    f = FX["filters"]["v1:loading"]
    whole = FX["filters"]["v1:reserved"]
    assert ok(r.restore("k", 0, bytes.fromhex(f["dump"])))
    info = [v.decode() if isinstance(v, bytes) else v for v in r.execute_command("BF.INFO", "k")]
    assert info == f["info"]
    assert header_of(r, "k") == (2, 1)
    for it, data in whole["scandump"][len(f["scandump"]):]:
        assert ok(r.execute_command("BF.LOADCHUNK", "k", it, bytes.fromhex(data)))
    assert_answers_as_before(r, "k", whole)


def test_a_legacy_rdb_file_loads_and_answers_as_before():
    """The RDB file: every filter, and the policy's Bloom deny list."""
    srv = Server()
    try:
        shutil.copy(os.path.join(FIXTURES, "bloom_v1.rdb"), os.path.join(srv.dir, "dump.rdb"))
        srv.start()
        c = srv.client()
        for key in COMPLETE:
            assert_answers_as_before(c, key, FX["filters"][key])
        assert header_of(c, "v1:loading") == (2, 1)
        pol = FX["policy"]
        got = "".join(str(c.execute_command("FG.CHECK", pol["name"], "k", "COST", 0, "ID", i)[0])
                      for i in pol["denied"] + FX["probes"])
        assert got == pol["allowed"]
        # the deny list is saved again as version 2 and still answers so
        c.execute_command("DEBUG", "RELOAD")
        again = "".join(str(c.execute_command("FG.CHECK", pol["name"], "k", "COST", 0, "ID", i)[0])
                        for i in pol["denied"] + FX["probes"])
        assert again == pol["allowed"]
    finally:
        srv.cleanup()
