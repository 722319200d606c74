"""Eviction and floodgate's guarantees (docs/security.md, "Eviction breaks
locks and fencing").

No module API keeps a key from eviction, so the module warns instead: a
warning in the log at load and whenever CONFIG SET maxmemory-policy sets a
policy that can evict, and INFO fields (floodgate_eviction_policy,
floodgate_eviction_unsafe in section floodgate_locks) that follow the
policy.

The hazard itself is shown, as the page documents it, not fixed: under
volatile-ttl a held lock is the first key evicted and its waiter is granted
the lock while the evicted holder never released it; under allkeys-lru an
evicted fenced value lets a stale token write again. Under noeviction the
same memory pressure refuses writes and keeps both.
"""

import threading

import redis

from harness import Server, wait_for

WARNING = "floodgate: maxmemory-policy"
FILLER = b"x" * 10000


def warnings(server):
    with open(server.logfile, errors="replace") as f:
        return [line for line in f if WARNING in line]


def eviction_info(c):
    info = c.info("floodgate")
    return info["floodgate_eviction_policy"], int(info["floodgate_eviction_unsafe"])


def test_warning_and_info_follow_the_policy():
    with Server() as quiet:
        assert warnings(quiet) == []
        assert eviction_info(quiet.client()) == ("noeviction", 0)
    with Server(["--maxmemory-policy", "allkeys-lru"]) as srv:
        c = srv.client()
        logged = warnings(srv)
        assert len(logged) == 1 and "allkeys-lru can evict held locks" in logged[0], logged
        assert "fenced values" in logged[0] and "docs/security.md" in logged[0]
        assert eviction_info(c) == ("allkeys-lru", 1)
        c.config_set("maxmemory-policy", "noeviction")
        assert eviction_info(c) == ("noeviction", 0)
        c.config_set("maxmemory", "100mb")  # another config: no word
        assert len(warnings(srv)) == 1
        c.config_set("maxmemory-policy", "volatile-ttl")
        logged = warnings(srv)
        assert len(logged) == 2 and "volatile-ttl can evict held locks and rate-limit states " \
            "before any key without a TTL" in logged[1], logged
        assert eviction_info(c) == ("volatile-ttl", 1)
        c.config_set("maxmemory-policy", "volatile-lfu")
        assert eviction_info(c) == ("volatile-lfu", 1) and len(warnings(srv)) == 3


def fill_until(c, done, limit=5000):
    """Writes 10 KB strings without a TTL until done() ("done") or an OOM
    refusal ("oom")."""
    for i in range(limit):
        if done():
            return "done"
        try:
            c.set("filler:%d" % i, FILLER)
        except redis.ResponseError as e:
            assert str(e).startswith("OOM "), e
            return "done" if done() else "oom"
    return "done" if done() else "neither"


def squeeze(c):
    """maxmemory a little above what is used now."""
    used = int(c.info("memory")["used_memory"])
    c.config_set("maxmemory", used + 256 * 1024)


def lock(c, key, owner, *opts):
    return [int(x) for x in c.execute_command("FG.LOCK", key, owner, 600000, *opts)]


def test_volatile_ttl_evicts_a_held_lock_and_grants_it_to_the_waiter():
    with Server(["--maxmemory-policy", "volatile-ttl"]) as srv:
        c = srv.client()
        assert lock(c, "L", "alice")[0] == 1
        waiter = {}

        def wait():
            waiter["reply"] = lock(srv.client(), "L", "bob", "WAIT", 30000)
        t = threading.Thread(target=wait)
        t.start()
        wait_for(lambda: int(c.info("floodgate")["floodgate_lock_waiters"]) == 1)
        squeeze(c)
        # the lock is the only key with a TTL: the first one evicted
        assert fill_until(c, lambda: int(c.info("stats")["evicted_keys"]) >= 1) == "done"
        c.config_set("maxmemory", 0)
        t.join(30)
        assert waiter["reply"][0] == 1, waiter  # bob was granted the lock...
        assert c.execute_command("FG.UNLOCK", "L", "alice") == -1  # ...alice never let go


def test_allkeys_lru_evicts_a_fenced_value_and_a_stale_token_writes_again():
    with Server(["--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10"]) as srv:
        c = srv.client()
        assert c.execute_command("FG.FSET", "F", 100, "new") == 1
        assert c.execute_command("FG.FSET", "F", 5, "stale") == 0
        squeeze(c)
        assert fill_until(c, lambda: c.exists("F") == 0) == "done"
        assert c.execute_command("FG.FSET", "F", 5, "stale") == 1


def test_noeviction_keeps_locks_and_fenced_values():
    with Server(["--maxmemory-policy", "noeviction"]) as srv:
        c = srv.client()
        assert lock(c, "L", "alice")[0] == 1
        assert c.execute_command("FG.FSET", "F", 100, "new") == 1
        squeeze(c)
        assert fill_until(c, lambda: c.exists("L", "F") < 2) == "oom"
        c.config_set("maxmemory", 0)
        assert lock(c, "L", "bob")[0] == 0
        assert c.execute_command("FG.FSET", "F", 5, "stale") == 0
        assert int(c.info("stats")["evicted_keys"]) == 0
