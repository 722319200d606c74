"""libfloodgate on a 3-master Redis Cluster (redis+cluster:// URLs): every
command lands on the master of its key's slot, a batch costs one round trip
per node, and a slot holding live limiter keys moves to another master
while tests/client/cluster_load.c keeps checking them, without an error and
without losing their state.

Every test runs on a cluster with the module and on a stock one
(backends.py), where each node runs the library's server scripts (the
shared stock cluster gets its slot back after the resharding).
"""

import subprocess
import threading
import time

import pytest

from backends import target
from test_client import Driver, program
from topology import Cluster, s


@pytest.fixture(scope="module")
def module_cluster():
    c = Cluster().start()
    yield c
    c.stop()


@pytest.fixture(params=["module", "stock"])
def cluster(request):
    """The file's cluster with the module, or the shared stock one (flushed)."""
    if request.param == "module":
        return request.getfixturevalue("module_cluster")
    return target("stock-cluster").cluster


def cluster_url(cluster, nodes=None):
    nodes = nodes or cluster.nodes
    return "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in nodes)


def owner(cluster, key):
    """The node serving `key` now, from the cluster's own view."""
    c = cluster.nodes[0].client()
    try:
        slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
        view = Cluster._slot_view(c)
    finally:
        c.close()
    return cluster.node_by_port(view[slot])


def holders(cluster, keys):
    """{key: [ports of the nodes that store it]} (KEYS lists a node's own
    keys; EXISTS would redirect)."""
    out = {k: [] for k in keys}
    for n in cluster.nodes:
        c = n.client()
        try:
            local = {s(k) for k in c.keys("*")}
        finally:
            c.close()
        for k in keys:
            if k in local:
                out[k].append(n.port)
    return out


def assert_on_owners(cluster, keys):
    where = holders(cluster, keys)
    wrong = {k: p for k, p in where.items() if p != [owner(cluster, k).port]}
    assert not wrong, "keys not (only) on their slot's owner: %r" % wrong


def test_every_command_on_its_owner(cluster):
    # One seed is enough: the others are learned from CLUSTER SLOTS.
    d = Driver(cluster_url(cluster, cluster.nodes[1:2]))
    assert d.opened == "open ok"
    keys = ["route:%d" % i for i in range(30)] + ["{user1}.a", "{user1}.b", "foo"]
    for k in keys:  # 1000 s per token: no key expires before it is looked for
        assert d("check %s token 5 0.001" % k) == "ok 1 5 4 -1 1000000 server"
        assert d("peek %s token 5 0.001" % k).startswith("ok 1 5 3 -1 ")
        assert d("inspect %s" % k).startswith("ok type=bucket tat_ns=")
    assert_on_owners(cluster, keys)
    # The hash tag puts both keys on one node.
    assert owner(cluster, "{user1}.a").port == owner(cluster, "{user1}.b").port
    for k in keys:
        assert d("reset %s" % k) == "ok 1"
    assert holders(cluster, keys) == {k: [] for k in keys}
    assert d("inspect route:0") == "ok"  # no state (the driver strips the space)
    # Each call is one round trip to one node: no redirects with a fresh map.
    st = d.stats()
    assert st["round_trips"] == 4 * len(keys) + 1 and st["failures"] == 0
    d.close()


def test_batch_one_round_trip_per_node(cluster):
    d = Driver(cluster_url(cluster))
    n = 200
    keys = ["many:%d" % i for i in range(n)]
    owners = {owner(cluster, k).port for k in keys}
    assert len(owners) == 3
    before = d.stats()["round_trips"]
    assert d("mbatch %d many: gcra 2 1 1000000" % n) == "ok %d server" % n
    assert d.stats()["round_trips"] - before == len(owners)
    assert d("mbatch %d many: gcra 2 1 1000000" % n) == "ok %d server" % n
    assert d("mbatch %d many: gcra 2 1 1000000" % n) == "ok 0 server"
    assert_on_owners(cluster, keys)
    d.close()


def test_failure_policy_and_denial_cache(cluster):
    d = Driver(cluster_url(cluster), "cache")
    assert d("check cached token 1 0.001") == "ok 1 1 0 -1 1000000 server"
    assert d("check cached token 1 0.001").endswith("server")
    assert d("check cached token 1 0.001").endswith("denial_cache")
    d.close()
    # No node listening: the policy answers.
    d = Driver("redis+cluster://127.0.0.1:1", "policy=closed")
    assert d.opened == "open ok"
    assert d("check k token 5 5") == "ok 0 5 0 1000 1000 failed_closed"
    assert d("reset k").startswith("err io")
    d.close()


def migrate_slot(cluster, key, dst):
    """Moves the slot of `key` to dst as redis-cli --cluster reshard does,
    two keys at a time with a pause, so that traffic meets ASK redirects."""
    src = owner(cluster, key)
    sc, dc = src.client(), dst.client()
    try:
        slot = int(sc.execute_command("CLUSTER", "KEYSLOT", key))
        src_id = s(sc.execute_command("CLUSTER", "MYID"))
        dst_id = s(dc.execute_command("CLUSTER", "MYID"))
        dc.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        sc.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        while True:
            keys = sc.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 2)
            if not keys:
                break
            sc.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(0.05)
        for n in [dst, src] + [n for n in cluster.nodes if n not in (src, dst)]:
            c = n.client()
            try:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            finally:
                c.close()
        return src, moved
    finally:
        sc.close()
        dc.close()


def test_resharding_under_traffic(cluster):
    n = 20
    proc = subprocess.Popen([program("cluster_load"), cluster_url(cluster), str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()))
        reader.start()
        reader.join(timeout=20)
        assert ready == ["ready\n"], "the load did not start: %r" % proc.stderr.read()
        mig = ["{mig}:%d" % i for i in range(n)]
        src = owner(cluster, mig[0])
        dst = next(node for node in cluster.nodes if node is not src)
        src_back, moved = migrate_slot(cluster, mig[0], dst)
        assert src_back is src and moved == n
        time.sleep(0.5)  # traffic meets the new owner (MOVED) too
        out, err = proc.communicate(input="", timeout=20)  # closes stdin: stop
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = out.splitlines()
    done = lines[0].split()
    assert done[0] == "done" and int(done[1]) > 0, out
    assert int(done[2]) == 0, "errors during the resharding:\n" + err
    allowed = dict(line.split() for line in lines[1:])
    # Used up before the move and still denied after it: 5 in the whole run.
    assert allowed == {k: "5" for k in allowed}, allowed
    assert owner(cluster, mig[0]) is dst
    # The traffic did meet the migration: the old owner sent ASK, then MOVED.
    c = src.client()
    try:
        stats = c.info("errorstats")
    finally:
        c.close()
    assert "errorstat_ASK" in stats and "errorstat_MOVED" in stats, stats
    assert holders(cluster, mig) == {k: [dst.port] for k in mig}
    spread = ["spread:%d" % i for i in range(n)]
    assert_on_owners(cluster, spread)
    d = Driver(cluster_url(cluster))
    assert d("check {mig}:0 token 5 0.001").startswith("ok 0 5 0 ")
    d.close()
    migrate_slot(cluster, mig[0], src)  # as it was, for the tests after this one
