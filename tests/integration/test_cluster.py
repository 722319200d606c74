"""A 3-master Redis Cluster on loopback: every floodgate command is served by
the node that owns its key's slot, redirects with MOVED elsewhere, declares
its key to COMMAND GETKEYS, and runs through redis-py's RedisCluster."""

import time

import pytest
import redis
from redis.cluster import RedisCluster

from topology import s


def now_ms():
    return int(time.time() * 1000)


def commands():
    """(name, argument template, reply check). '{k}' is the key."""
    t = now_ms()

    def five(r):
        return isinstance(r, list) and len(r) == 5 and all(isinstance(x, int) for x in r)

    def ok(r):
        return r in (b"OK", "OK", True)

    return [
        ("CL.THROTTLE", ["CL.THROTTLE", "{k}", 9, 1, 60], five),
        ("CL.THROTTLE/quantity", ["CL.THROTTLE", "{k}", 9, 1, 60, 2], five),
        ("FG.FIXED", ["FG.FIXED", "{k}", 10, 60000], five),
        ("FG.SLIDING", ["FG.SLIDING", "{k}", 10, 60000, "COST", 2], five),
        ("FG.SLIDELOG", ["FG.SLIDELOG", "{k}", 10, 60000], five),
        ("FG.TOKEN", ["FG.TOKEN", "{k}", 10, 1], five),
        ("FG.LEAKY", ["FG.LEAKY", "{k}", 10, 1, "COST", 3], five),
        ("FG.GCRA", ["FG.GCRA", "{k}", 10, 1, 1000], five),
        ("FG.PEEK/TOKEN", ["FG.PEEK", "TOKEN", "{k}", 10, 1], five),
        ("FG.PEEK/LEAKY", ["FG.PEEK", "LEAKY", "{k}", 10, 1], five),
        ("FG.PEEK/GCRA", ["FG.PEEK", "GCRA", "{k}", 10, 1, 1000], five),
        ("FG.PEEK/FIXED", ["FG.PEEK", "FIXED", "{k}", 10, 60000], five),
        ("FG.PEEK/SLIDING", ["FG.PEEK", "SLIDING", "{k}", 10, 60000, "COST", 2], five),
        ("FG.PEEK/SLIDELOG", ["FG.PEEK", "SLIDELOG", "{k}", 10, 60000], five),
        ("FG.RESET", ["FG.RESET", "{k}"], lambda r: r in (0, 1)),
        ("FG.INSPECT", ["FG.INSPECT", "{k}"], lambda r: r is None or isinstance(r, list)),
        ("FG.SETSTATE/bucket", ["FG.SETSTATE", "{k}", "bucket", (t + 60000) * 10 ** 6, "PXAT", t + 60000], ok),
        ("FG.SETSTATE/fixed", ["FG.SETSTATE", "{k}", "fixed", t * 1000, 3, "PXAT", t + 60000], ok),
        ("FG.SETSTATE/sliding", ["FG.SETSTATE", "{k}", "sliding", t * 1000, 3, 1, "PXAT", t + 60000], ok),
        ("FG.LOGAPPEND", ["FG.LOGAPPEND", "{k}", 0, t * 1000, 2, "PXAT", t + 60000], ok),
    ]


def fmt(cmd, k):
    return [a.replace("{k}", k) if isinstance(a, str) else a for a in cmd]


def written(name):
    return not name.startswith(("FG.PEEK", "FG.RESET", "FG.INSPECT"))


def test_cluster_is_up(cluster):
    owners = set(cluster.slot_owner.values())
    assert owners == {n.port for n in cluster.nodes}
    for n in cluster.nodes:
        c = n.client()
        assert "cluster_state:ok" in s(c.execute_command("CLUSTER", "INFO"))
        assert any(s(m.get(b"name", m.get("name"))) == "floodgate"
                   for m in c.module_list()), c.module_list()


@pytest.mark.usefixtures("cluster_effect_commands")  # FG.SETSTATE, FG.LOGAPPEND
def test_each_command_is_served_by_the_slot_owner(cluster):
    clients = {n.port: n.client() for n in cluster.nodes}
    moved_before = moved_count(cluster)
    covered = {}
    for name, cmd, check in commands():
        for i in range(12):
            key = "mv:%s:%d" % (name, i)
            slot, owner = cluster.owner_of(key)
            args = fmt(cmd, key)
            for port, c in clients.items():
                if port == owner.port:
                    r = c.execute_command(*args)
                    assert check(r), (args, r)
                    continue
                with pytest.raises(redis.ResponseError) as ei:
                    c.execute_command(*args)
                msg = str(ei.value)
                assert msg == "MOVED %d 127.0.0.1:%d" % (slot, owner.port), (
                    "%s sent to port %d: expected MOVED %d 127.0.0.1:%d (CLUSTER KEYSLOT %s), got %r"
                    % (name, port, slot, owner.port, key, msg))
                covered[name] = covered.get(name, 0) + 1
            # the key exists only on its owner (for commands that write)
            if written(name):
                assert clients[owner.port].execute_command("EXISTS", key) == 1, (name, key)
    assert set(covered) == {n for n, _, _ in commands()}
    assert moved_count(cluster) - moved_before == sum(covered.values())


def test_family_word_of_peek_is_not_the_key(cluster):
    """FG.PEEK's key is its 2nd argument: a node that owns the slot of the
    key (and not the slot of the family word) serves it."""
    c0 = cluster.nodes[0].client()
    for fam in ("TOKEN", "LEAKY", "GCRA", "FIXED", "SLIDING", "SLIDELOG"):
        fam_slot = int(c0.execute_command("CLUSTER", "KEYSLOT", fam))
        fam_owner = cluster.slot_owner[fam_slot]
        # find a key owned by a different node than the family word
        for i in range(1000):
            key = "pk:%s:%d" % (fam, i)
            slot, owner = cluster.owner_of(key)
            if owner.port != fam_owner:
                break
        else:
            pytest.fail("no key found on another node")
        args = ["FG.PEEK", fam, key, 10, 1000] if fam in ("FIXED", "SLIDING", "SLIDELOG") else \
               ["FG.PEEK", fam, key, 10, 1] if fam != "GCRA" else ["FG.PEEK", fam, key, 10, 1, 1000]
        r = owner.client().execute_command(*args)
        assert isinstance(r, list) and len(r) == 5 and r[0] == 1, r
        with pytest.raises(redis.ResponseError, match="MOVED %d " % slot):
            cluster.node_by_port(fam_owner).client().execute_command(*args)


def test_command_getkeys_and_flags(cluster):
    c = cluster.nodes[0].client()
    for name, cmd, _ in commands():
        key = "gk:%s" % name
        keys = c.command_getkeys(*fmt(cmd, key))
        assert [s(k) for k in keys] == [key], (name, keys)
    info = c.execute_command("COMMAND", "INFO", "FG.PEEK", "FG.INSPECT", "FG.SETSTATE",
                             "FG.LOGAPPEND", "FG.TOKEN", "CL.THROTTLE", "FG.RESET")
    flags = {n: set(v["flags"]) for n, v in info.items()}
    for n in ("FG.PEEK", "FG.INSPECT"):
        assert "readonly" in flags[n] and "write" not in flags[n], (n, flags[n])
    for n in ("FG.SETSTATE", "FG.LOGAPPEND", "FG.TOKEN", "CL.THROTTLE", "FG.RESET"):
        assert "write" in flags[n], (n, flags[n])
    assert info["FG.PEEK"]["first_key_pos"] == 2 and info["FG.PEEK"]["last_key_pos"] == 2
    for n in ("FG.SETSTATE", "FG.LOGAPPEND", "FG.TOKEN", "CL.THROTTLE", "FG.RESET", "FG.INSPECT"):
        assert (info[n]["first_key_pos"], info[n]["last_key_pos"], info[n]["step_count"]) == (1, 1, 1), (n, info[n])


def moved_count(cluster):
    total = 0
    for n in cluster.nodes:
        raw = s(n.client().execute_command("INFO", "errorstats"))
        if not isinstance(raw, str):
            raw = "\n".join("%s:%s" % kv for kv in raw.items())
        for line in raw.splitlines():
            if line.startswith("errorstat_MOVED:"):
                total += int(line.split("count=")[1].split(",")[0])
    return total


@pytest.mark.usefixtures("cluster_effect_commands")  # FG.SETSTATE, FG.LOGAPPEND
def test_redis_cluster_client_runs_every_command(cluster):
    rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    clients = {n.port: n.client() for n in cluster.nodes}
    try:
        moved_before = moved_count(cluster)
        cmds = commands()
        per_node = {}
        for i in range(240):
            name, cmd, check = cmds[i % len(cmds)]
            key = "rc:%d:%s" % (i, name)
            args = fmt(cmd, key)
            slot, owner = cluster.owner_of(key)
            # redis-py computes the slot from the command's key position
            assert rc.determine_slot(*args) == slot, (name, rc.determine_slot(*args), slot)
            r = rc.execute_command(*args)
            assert check(r), (args, r)
            if name.startswith(("FG.TOKEN", "FG.LEAKY", "FG.GCRA", "FG.FIXED", "FG.SLIDING", "FG.SLIDELOG")):
                assert r[0] == 1, (args, r)
            if name.startswith("CL.THROTTLE"):
                assert r[0] == 0, (args, r)
            if written(name):
                ins = rc.execute_command("FG.INSPECT", key)
                assert ins is not None and s(ins[0]) == "type", (key, ins)
                # the key lives on its slot's node and nowhere else
                for port, c in clients.items():
                    n = c.execute_command("DEBUG", "DIGEST-VALUE", key)[0]
                    has = s(n) != "0" * 40
                    assert has == (port == owner.port), (key, port, owner.port)
                per_node[owner.port] = per_node.get(owner.port, 0) + 1
                assert rc.execute_command("FG.RESET", key) == 1
                assert rc.execute_command("FG.INSPECT", key) is None
        # the keys were spread over all three nodes, and no request needed a redirection
        assert set(per_node) == set(clients), per_node
        assert moved_count(cluster) == moved_before, "RedisCluster was redirected with MOVED"
    finally:
        rc.close()
