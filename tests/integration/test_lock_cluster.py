"""Lock commands on a 3-master Redis Cluster (docs/locks.md, "Multi-key
locks"): each is served by the owner of its key's slot and redirected with
MOVED elsewhere, declares exactly its keys to COMMAND GETKEYS (FG.MLOCK and
FG.MUNLOCK through numkeys), FG.MLOCK over several slots is CROSSSLOT, and a
waiting FG.LOCK on the owner is granted when the lock is released.

One cluster serves the whole file (a cluster takes seconds to form).
"""

import threading
import time

import pytest

from harness import RawClient, RespError, wait_for
from test_lock_replication import lockinfo
from topology import s

LEASE_MS = 60000


def lock_commands():
    """(name, argv) with "{k}" for the key; "{k}:a" style keys share its slot."""
    expires_us = time.time_ns() // 1000 + LEASE_MS * 1000
    return [
        ("FG.LOCK", ["FG.LOCK", "{k}", "o", LEASE_MS]),
        ("FG.LOCK/options", ["FG.LOCK", "{k}", "o", LEASE_MS, "SHARED", "REENTRANT", "WAIT", 10]),
        ("FG.UNLOCK", ["FG.UNLOCK", "{k}", "o"]),
        ("FG.ACQUIRE", ["FG.ACQUIRE", "{k}", 3, "o", 1, LEASE_MS]),
        ("FG.ACQUIRE/WAIT", ["FG.ACQUIRE", "{k}", 3, "o", 1, LEASE_MS, "WAIT", 10]),
        ("FG.RELEASE", ["FG.RELEASE", "{k}", "o"]),
        ("FG.RELEASE/permits", ["FG.RELEASE", "{k}", "o", 1]),
        ("FG.MLOCK/1", ["FG.MLOCK", 1, "{k}", "o", LEASE_MS]),
        ("FG.MLOCK/3", ["FG.MLOCK", 3, "{k}:a", "{k}:b", "{k}:c", "o", LEASE_MS, "WAIT", 10]),
        ("FG.MUNLOCK/1", ["FG.MUNLOCK", 1, "{k}", "o"]),
        ("FG.MUNLOCK/2", ["FG.MUNLOCK", 2, "{k}:a", "{k}:b", "o"]),
        ("FG.EXTEND", ["FG.EXTEND", "{k}", "o", LEASE_MS]),
        ("FG.FORCEUNLOCK", ["FG.FORCEUNLOCK", "{k}"]),
        ("FG.LOCKINFO", ["FG.LOCKINFO", "{k}"]),
        ("FG.FENCE", ["FG.FENCE", "{k}", 5]),
        ("FG.FSET", ["FG.FSET", "{k}", 5, "v"]),
        ("FG.FGET", ["FG.FGET", "{k}"]),
        ("FG.FGET/token", ["FG.FGET", "{k}", 5]),
        ("FG.HOLD", ["FG.HOLD", "{k}", "lock", 0, "o", "exclusive", 1, expires_us, 5]),
        ("FG.UNHOLD", ["FG.UNHOLD", "{k}", "o"]),
    ]


def fmt(argv, key):
    """Puts the key in: "{k}" becomes the key, "{k}:a" a key of its slot."""
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
    """The keys of a formatted call, as a client knows them."""
    return [a for a in fmt(argv, key) if isinstance(a, str) and
            (a == key or a.startswith("{%s}" % key))]


def other_nodes(cluster, owner):
    return [n for n in cluster.nodes if n.port != owner.port]


@pytest.mark.usefixtures("cluster_effect_commands")  # FG.HOLD, FG.UNHOLD
def test_each_lock_command_is_served_by_the_slot_owner(cluster):
    for name, argv in lock_commands():
        for i in range(6):
            key = "mv:%s:%d" % (name, i)
            slot, owner = cluster.owner_of(key)
            args = fmt(argv, key)
            with RawClient(owner.port) as raw:
                try:
                    raw.execute(*args)
                except RespError as e:
                    pytest.fail("%r on the owner of slot %d: %s" % (args, slot, e))
            sizes = dbsizes(cluster)
            for node in other_nodes(cluster, owner):
                with RawClient(node.port) as raw:
                    msg = raw.error_of(*args)
                assert msg == "MOVED %d 127.0.0.1:%d" % (slot, owner.port), (args, node.port, msg)
            assert dbsizes(cluster) == sizes, "a redirected %s wrote something" % name


def dbsizes(cluster):
    return [n.client().dbsize() for n in cluster.nodes]


def key_in_another_slot(cluster, key, same_node):
    """A key in another slot than key's, owned by the same node or not."""
    slot, owner = cluster.owner_of(key)
    for i in range(10000):
        candidate = "%s:x%d" % (key, i)
        cslot, cowner = cluster.owner_of(candidate)
        if cslot != slot and (cowner.port == owner.port) == same_node:
            return candidate
    raise AssertionError("no key found")


@pytest.mark.parametrize("same_node", [True, False], ids=["same-node", "other-node"])
def test_keys_in_different_slots_are_crossslot(cluster, same_node):
    """CROSSSLOT is about slots, not nodes: two slots of one node are refused too."""
    a = "cross:%s" % same_node
    b = key_in_another_slot(cluster, a, same_node)
    calls = [["FG.MLOCK", 2, a, b, "o", LEASE_MS],
             ["FG.MLOCK", 2, a, b, "o", LEASE_MS, "WAIT", 100],
             ["FG.MLOCK", 3, a, "{%s}:2" % a, b, "o", LEASE_MS],
             ["FG.MUNLOCK", 2, a, b, "o"]]
    sizes = dbsizes(cluster)
    for node in cluster.nodes:
        with RawClient(node.port) as raw:
            for argv in calls:
                msg = raw.error_of(*argv)
                assert msg.startswith("CROSSSLOT "), (argv, node.port, msg)
    assert dbsizes(cluster) == sizes


def test_hash_tag_mlock_on_the_owner(cluster):
    keys = ["{order:7}:stock", "{order:7}:payment", "{order:7}:mail"]
    slot, owner = cluster.owner_of(keys[0])
    c = owner.client()
    rep = [int(x) for x in c.execute_command("FG.MLOCK", 3, *keys, "alice", LEASE_MS)]
    assert rep[0] == 1 and rep[1] >= 1 and rep[3] == 3, rep
    for k in keys:
        info = lockinfo(c, k)
        assert [h[0] for h in info["holders"]] == ["alice"], info
        assert info["holders"][0][4] == rep[1], info  # one token for all
    # another owner's multi-key request waits, and gets the keys on release
    out = []
    t = threading.Thread(target=lambda: out.append(
        [int(x) for x in owner.client(socket_timeout=30).execute_command(
            "FG.MLOCK", 2, keys[0], keys[1], "bob", LEASE_MS, "WAIT", 20000)]))
    t.start()
    wait_for(lambda: lockinfo(c, keys[0])["waiters"], timeout=10)
    assert int(c.execute_command("FG.MUNLOCK", 3, *keys, "alice")) == 3
    t.join(timeout=15)
    assert out and out[0][0] == 1 and out[0][1] > rep[1] and out[0][3] == 2, out
    assert int(c.execute_command("FG.MUNLOCK", 2, keys[0], keys[1], "bob")) == 2
    assert c.exists(*keys) == 0
    for node in other_nodes(cluster, owner):
        with RawClient(node.port) as raw:
            assert raw.error_of("FG.MLOCK", 3, *keys, "alice", LEASE_MS) == \
                "MOVED %d 127.0.0.1:%d" % (slot, owner.port)


def test_command_getkeys_is_exactly_the_keys(cluster):
    c = cluster.nodes[0].client()
    for name, argv in lock_commands():
        key = "gk:%s" % name
        got = [s(k) for k in c.command_getkeys(*fmt(argv, key))]
        assert got == keys_of(argv, key), (name, got)
    # numkeys decides, whatever the keys look like
    for n in (1, 2, 5, 64):
        keys = ["n%d:%d" % (n, i) for i in range(n)]
        for argv in (["FG.MLOCK", n] + keys + ["owner", LEASE_MS],
                     ["FG.MLOCK", n] + keys + ["owner", LEASE_MS, "WAIT", 0],
                     ["FG.MUNLOCK", n] + keys + ["owner"]):
            got = [s(k) for k in c.command_getkeys(*argv)]
            assert got == keys, (argv[:3], got)
    # the owner and the lease are never keys, even when they look like them
    got = [s(k) for k in c.command_getkeys("FG.MLOCK", 1, "k1", "k2", "3")]
    assert got == ["k1"], got


def test_waiting_lock_is_granted_on_unlock(cluster):
    key = "wait:lock"
    slot, owner = cluster.owner_of(key)
    c = owner.client()
    first = [int(x) for x in c.execute_command("FG.LOCK", key, "alice", LEASE_MS)]
    assert first[0] == 1, first
    out = []

    def waiter():
        rep = owner.client(socket_timeout=30).execute_command(
            "FG.LOCK", key, "bob", LEASE_MS, "WAIT", 20000)
        out.append([int(x) for x in rep])
    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: c.info("floodgate")["floodgate_lock_waiters"] == 1, timeout=10)
    info = lockinfo(c, key)
    assert [w[0] for w in info["waiters"]] == ["bob"], info
    assert any("b" in cl["flags"] for cl in c.client_list()), c.client_list()
    assert int(c.execute_command("FG.UNLOCK", key, "alice")) == 0
    t.join(timeout=15)
    assert not t.is_alive(), "the waiter was not granted"
    got = out[0]
    assert got[0] == 1 and got[1] > first[1] and 0 < got[2] <= LEASE_MS and got[3] == 1, got
    assert [h[0] for h in lockinfo(c, key)["holders"]] == ["bob"]
    assert int(c.execute_command("FG.UNLOCK", key, "bob")) == 0
    assert c.info("floodgate")["floodgate_lock_waiters"] == 0
    # the other nodes redirect a waiting request before it waits
    for node in other_nodes(cluster, owner):
        with RawClient(node.port) as raw:
            assert raw.error_of("FG.LOCK", key, "carol", LEASE_MS, "WAIT", 0) == \
                "MOVED %d 127.0.0.1:%d" % (slot, owner.port)


def test_waiters_of_a_migrated_key_are_told_to_try_again(cluster):
    """Regression: MIGRATE deletes the key on the source node, which woke the
    source's waiters and granted one of them there, while the holder's state
    had moved to the target: two holders of one exclusive lock. The waiters
    must be refused (TRYAGAIN) and nothing recreated on the source."""
    key = "migrating:lock"
    slot, source = cluster.owner_of(key)
    target = other_nodes(cluster, source)[0]
    src, dst = source.client(), target.client()
    src_id, dst_id = s(src.execute_command("CLUSTER", "MYID")), s(dst.execute_command("CLUSTER", "MYID"))
    assert int(src.execute_command("FG.LOCK", key, "holder", LEASE_MS)[0]) == 1
    out = []

    def waiter():
        try:
            out.append(source.client(socket_timeout=30).execute_command(
                "FG.LOCK", key, "waiter", LEASE_MS, "WAIT", 20000))
        except Exception as e:  # the expected refusal
            out.append(e)
    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: src.info("floodgate")["floodgate_lock_waiters"] == 1, timeout=10)
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        assert s(src.execute_command("MIGRATE", "127.0.0.1", target.port, key, 0, 5000)) == "OK"
        t.join(timeout=15)
        assert len(out) == 1 and isinstance(out[0], Exception), out
        assert str(out[0]).startswith("TRYAGAIN"), out[0]
        assert src.info("floodgate")["floodgate_lock_waiters"] == 0
        with RawClient(target.port) as raw:
            raw.execute("ASKING")
            info = raw.execute("FG.LOCKINFO", key)
            assert [s(h[0]) for h in info[7]] == ["holder"], info
            raw.execute("ASKING")
            assert raw.execute("FG.FORCEUNLOCK", key) == 1
        assert src.keys(key) == []  # nothing recreated on the source
    finally:
        for c in (src, dst):
            c.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
