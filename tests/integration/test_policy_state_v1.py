"""Policy states written before the packed format still load.

The release before issue 16 serialized a policy state in the core's version
1, with the penalty's three integers always there; version 2 packs them
away while they are all 0 and is what memory, RDB, AOF and FG.PLSTATE now
hold. fixtures/policy_v1.* were made by that release (how: the JSON's
made_by): an RDB file with two policies and three keys, one of them with a
denial counted by its penalty, each key's FG.PLSTATE payload, and the
answer that release gave to one more check of each key. Loaded from the
file, or applied as FG.PLSTATE effects (an AOF, or an older master), each
key holds the same state, saved again as version 2, and answers as before.
"""

import json
import os
import shutil
import struct

import rdbpayload
from harness import Server

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
with open(os.path.join(FIXTURES, "policy_v1.json")) as _f:
    FX = json.load(_f)

WORDS = {0: 1, 1: 1, 2: 1, 3: 2, 4: 3}  # state integers per algorithm


def decode(payload):
    """(name, [(algorithm, params and state)], (ban, denials, start)) of an
    FG.PLSTATE payload of either version (src/module/policy_types.c,
    src/core/policy.c)."""
    assert payload[0] == 1, payload
    name_len = payload[1]
    name, state = payload[2:2 + name_len], payload[2 + name_len:]
    version, count = state[0], state[1]
    assert version in (1, 2), state
    penalty = version == 1 or count & 0x80
    limits, pos = [], 2
    for _ in range(count & 0x7F):
        n = 2 + WORDS[state[pos]]
        limits.append((state[pos], struct.unpack_from("<%dq" % n, state, pos + 1)))
        pos += 1 + 8 * n
    pen = struct.unpack_from("<3q", state, pos) if penalty else (0, 0, 0)
    assert pos + (24 if penalty else 0) == len(state), state
    return name, limits, pen


def payload_of(c, key):
    body, _, _ = rdbpayload.split(c.execute_command("DUMP", key))
    strings = [f for f in rdbpayload.parse_module_value(body) if f.kind == "string"]
    assert len(strings) == 1
    return strings[0].value


def answer(c, check):
    return [x.decode() if isinstance(x, bytes) else x for x in c.execute_command(*check)]


def assert_loaded_as_before(c):
    for key, k in FX["keys"].items():
        now = payload_of(c, key)
        assert decode(now) == decode(bytes.fromhex(k["payload"])), key
        assert now[2 + now[1]] == 2, key  # held as version 2


def test_a_version_1_rdb_file_loads_and_answers_as_before():
    srv = Server(["--rdbcompression", "no"])
    try:
        shutil.copy(os.path.join(FIXTURES, "policy_v1.rdb"), os.path.join(srv.dir, "dump.rdb"))
        srv.start()
        c = srv.client()
        assert sorted(FX["keys"]) == sorted(k.decode() for k in c.keys("*"))
        assert_loaded_as_before(c)
        c.execute_command("DEBUG", "RELOAD")  # saved as version 2, loaded again
        assert_loaded_as_before(c)
        c.config_set("floodgate.explicit-time", "yes")
        for key, k in FX["keys"].items():
            assert answer(c, k["check"]) == k["answer"], key
    finally:
        srv.cleanup()


def test_version_1_effects_still_load():
    with Server(["--rdbcompression", "no"]) as srv:
        c = srv.client()
        c.config_set("floodgate.enable-effect-commands", "yes")
        c.config_set("floodgate.explicit-time", "yes")
        for name, rules in FX["policies"].items():
            c.execute_command("FG.POLICY", "SET", name, *rules)
        for key, k in FX["keys"].items():
            assert c.execute_command("FG.PLSTATE", key, bytes.fromhex(k["payload"])) == b"OK"
        assert_loaded_as_before(c)
        for key, k in FX["keys"].items():
            assert answer(c, k["check"]) == k["answer"], key
