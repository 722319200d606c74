"""Unique counters on a 3-master Redis Cluster (docs/uv.md "Replication,
persistence, cluster"): every FG.UV* command is served by the owner of its
keys' slot and redirected with MOVED elsewhere; the multi-key ones
(FG.UVCOUNT and FG.UVEXPORT over several keys, FG.UVSTORE's destination and
sources) declare every key to COMMAND GETKEYS, work on {tag} keys of one
slot and are refused with CROSSSLOT over several slots, even of one node.

One cluster serves the whole file (the shared fixture of conftest.py).
"""

import time

import pytest

import rdbpayload
from harness import RawClient, RespError
from test_uv_persistence import HLL_BYTES, US, group, uvinfo
from topology import s

LAST = ["LAST", 1, "HOURS"]


def uv_commands(payload):
    """(name, setup, argv): "{k}" is the key, "{k}:a" a key of its slot."""
    now = int(time.time()) * US
    between = ["BETWEEN", now - 3600 * US, now + US]
    return [
        ("FG.UVCREATE", [], ["FG.UVCREATE", "{k}", "SPAN", 3600, "TZOFFSET", 60]),
        ("FG.UVADD", [], ["FG.UVADD", "{k}", "a", "b"]),
        ("FG.UVADDAT", [], ["FG.UVADDAT", "{k}", now - 60 * US, "a"]),
        ("FG.UVCOUNT", [], ["FG.UVCOUNT", "{k}"] + LAST),
        ("FG.UVCOUNT/3", [], ["FG.UVCOUNT", "{k}"] + LAST + ["{k}:a", "{k}:b"]),
        ("FG.UVCOUNT/between", [], ["FG.UVCOUNT", "{k}"] + between + ["{k}:a"]),
        ("FG.UVEXPORT", [], ["FG.UVEXPORT", "{k}"] + LAST),
        ("FG.UVEXPORT/2", [], ["FG.UVEXPORT", "{k}"] + between + ["{k}:a"]),
        ("FG.UVSTORE", [], ["FG.UVSTORE", "{k}", "{k}:a"] + LAST),
        ("FG.UVSTORE/3", [], ["FG.UVSTORE", "{k}:d", "{k}"] + LAST + ["{k}:a", "{k}:b"]),
        ("FG.UVINFO", [["FG.UVADD", "{k}", "x"]], ["FG.UVINFO", "{k}"]),
        ("FG.UVLOAD", [], ["FG.UVLOAD", "{k}", payload]),
    ]


def fmt(argv, key):
    out = []
    for a in argv:
        if a == "{k}":
            out.append(key)
        elif isinstance(a, str) and a.startswith("{k}:"):
            out.append("{%s}%s" % (key, a[3:]))
        else:
            out.append(a)
    return out


def keys_of(argv, key):
    return [a for a in fmt(argv, key) if isinstance(a, str) and
            (a == key or a.startswith("{%s}" % key))]


def other_nodes(cluster, owner):
    return [n for n in cluster.nodes if n.port != owner.port]


def dbsizes(cluster):
    return [n.client().dbsize() for n in cluster.nodes]


def a_payload(cluster):
    """A serialized counter (FG.UVLOAD's argument), out of a DUMP."""
    key = "{payload}:src"
    _, owner = cluster.owner_of(key)
    c = owner.client()
    old = c.config_get("rdbcompression")["rdbcompression"]
    c.config_set("rdbcompression", "no")
    try:
        c.execute_command("FG.UVADD", key, *group("p", 20))
        body, _, _ = rdbpayload.split(c.dump(key))
        f = [f for f in rdbpayload.parse_module_value(body) if f.kind == "string"][0]
        data = body[f.value_start:f.end]
        assert c.execute_command("FG.UVLOAD", key + ":check", data) == b"OK"
        assert c.dump(key + ":check") == c.dump(key)
        c.delete(key, key + ":check")
        return data
    finally:
        c.config_set("rdbcompression", old)


@pytest.mark.usefixtures("cluster_effect_commands")  # FG.UVADDAT, FG.UVLOAD
def test_each_uv_command_is_served_by_the_slot_owner(cluster):
    payload = a_payload(cluster)
    for name, setup, argv in uv_commands(payload):
        for i in range(4):
            key = "mv:%s:%d" % (name, i)
            slot, owner = cluster.owner_of(key)
            with RawClient(owner.port) as raw:
                for pre in setup:
                    raw.execute(*fmt(pre, key))
                args = fmt(argv, key)
                try:
                    raw.execute(*args)
                except RespError as e:
                    pytest.fail("%r on the owner of slot %d: %s" % (args[:6], slot, e))
            sizes = dbsizes(cluster)
            for node in other_nodes(cluster, owner):
                with RawClient(node.port) as raw:
                    msg = raw.error_of(*args)
                assert msg == "MOVED %d 127.0.0.1:%d" % (slot, owner.port), (args[:6], node.port, msg)
            assert dbsizes(cluster) == sizes, "a redirected %s wrote something" % name


def key_in_another_slot(cluster, key, same_node):
    slot, owner = cluster.owner_of(key)
    for i in range(10000):
        candidate = "%s:x%d" % (key, i)
        cslot, cowner = cluster.owner_of(candidate)
        if cslot != slot and (cowner.port == owner.port) == same_node:
            return candidate
    raise AssertionError("no key found")


@pytest.mark.parametrize("same_node", [True, False], ids=["same-node", "other-node"])
def test_keys_in_different_slots_are_crossslot(cluster, same_node):
    a = "cross:%s" % same_node
    b = key_in_another_slot(cluster, a, same_node)
    tag_a = "{%s}:2" % a  # a's slot
    now = int(time.time()) * US
    calls = [["FG.UVCOUNT", a] + LAST + [b],
             ["FG.UVCOUNT", a, "BETWEEN", now - 60 * US, now + US, tag_a, b],
             ["FG.UVEXPORT", a] + LAST + [b],
             ["FG.UVEXPORT", a, "BETWEEN", now - 60 * US, now + US, b],
             ["FG.UVSTORE", b, a] + LAST,          # the destination in another slot
             ["FG.UVSTORE", tag_a, a] + LAST + [b],  # a source in another slot
             ["FG.UVSTORE", tag_a, a] + LAST + [tag_a, b]]
    _, owner = cluster.owner_of(a)
    owner.client().execute_command("FG.UVADD", a, "x")
    sizes = dbsizes(cluster)
    for node in cluster.nodes:
        with RawClient(node.port) as raw:
            for argv in calls:
                msg = raw.error_of(*argv)
                assert msg.startswith("CROSSSLOT "), (argv, node.port, msg)
    assert dbsizes(cluster) == sizes


def test_hash_tag_keys_on_one_slot_work(cluster):
    a, b, dest = "{uv:7}:home", "{uv:7}:about", "{uv:7}:union"
    slot, owner = cluster.owner_of(a)
    assert cluster.owner_of(b)[0] == cluster.owner_of(dest)[0] == slot
    c = owner.client()
    assert c.execute_command("FG.UVADD", a, *group("v", 300)) == 1
    assert c.execute_command("FG.UVADD", b, *group("v", 300, 200)) == 1
    count = c.execute_command("FG.UVCOUNT", a, *LAST, b)
    assert abs(count - 500) <= 15, count
    export = c.execute_command("FG.UVEXPORT", a, *LAST, b)
    assert len(export) == HLL_BYTES and export[:4] == b"HYLL"
    assert c.execute_command("FG.UVSTORE", dest, a, *LAST, b) == count
    assert c.get(dest) == export
    assert c.execute_command("PFCOUNT", dest) == count
    now = int(time.time()) * US
    assert c.execute_command("FG.UVCOUNT", a, "BETWEEN", now - 600 * US, now + US, b) == count
    assert uvinfo(c, a)["span"] == 604800
    for node in other_nodes(cluster, owner):
        with RawClient(node.port) as raw:
            assert raw.error_of("FG.UVCOUNT", a, *LAST, b) == \
                "MOVED %d 127.0.0.1:%d" % (slot, owner.port)


def test_command_getkeys_is_exactly_the_keys(cluster):
    c = cluster.nodes[0].client()
    for name, _, argv in uv_commands(b"payload"):
        key = "gk:%s" % name
        got = [s(k) for k in c.command_getkeys(*fmt(argv, key))]
        assert got == keys_of(argv, key), (name, got)
    # many keys; items, times and window words are never keys
    keys = ["k%d" % i for i in range(20)]
    for argv, want in (
            (["FG.UVCOUNT", "a"] + LAST + keys, ["a"] + keys),
            (["FG.UVEXPORT", "a", "BETWEEN", 1, 2] + keys, ["a"] + keys),
            (["FG.UVSTORE", "d", "a", "last", 7, "days"] + keys, ["d", "a"] + keys),
            (["FG.UVADD", "a", "b", "c", "d"], ["a"]),
            (["FG.UVADDAT", "a", 1, "b"], ["a"]),
            (["FG.UVCREATE", "a", "DAYS", 3], ["a"])):
        got = [s(k) for k in c.command_getkeys(*argv)]
        assert got == want, (argv[:4], got)
