"""Loading, command metadata, INFO, keyspace notifications, MEMORY USAGE,
COPY, TTLs."""

import time

import pytest
import redis

from harness import MODULE, T0, RawClient, Server, digest_value, s, state

ALL_COMMANDS = ["CL.THROTTLE", "FG.FIXED", "FG.SLIDING", "FG.SLIDELOG", "FG.TOKEN",
                "FG.LEAKY", "FG.GCRA", "FG.PEEK", "FG.RESET", "FG.INSPECT",
                "FG.SETSTATE", "FG.LOGAPPEND"]

# argument names of docs/commands.md, per command
DOC_ARGS = {
    "CL.THROTTLE": ["key", "max_burst", "count", "period", "quantity"],
    "FG.FIXED": ["key", "limit", "window_ms", "cost"],
    "FG.SLIDING": ["key", "limit", "window_ms", "cost"],
    "FG.SLIDELOG": ["key", "limit", "window_ms", "cost"],
    "FG.TOKEN": ["key", "capacity", "refill_per_sec", "cost"],
    "FG.LEAKY": ["key", "capacity", "leak_per_sec", "cost"],
    "FG.GCRA": ["key", "capacity", "count", "period_ms", "cost"],
    "FG.PEEK": ["key", "cost"],
    "FG.RESET": ["key"],
    "FG.INSPECT": ["key"],
    "FG.SETSTATE": ["key"],
    "FG.LOGAPPEND": ["key", "drop_through_us", "at_us", "count"],
}

# a valid call of each command on key "k" (allowed on a fresh key)
CALLS = {
    "CL": ["CL.THROTTLE", "k", 4, 5, 50],
    "FIXED": ["FG.FIXED", "k", 5, 60000],
    "SLIDING": ["FG.SLIDING", "k", 5, 60000],
    "SLIDELOG": ["FG.SLIDELOG", "k", 5, 60000],
    "TOKEN": ["FG.TOKEN", "k", 5, 0.1],
    "LEAKY": ["FG.LEAKY", "k", 5, 0.1],
    "GCRA": ["FG.GCRA", "k", 5, 5, 50000],
}
FAMS = list(CALLS)


@pytest.fixture
def r(t):
    """This file's client is on the explicit-time server: the FG.* calls
    decide at T0, 20 s into a 60 s window (CL.THROTTLE, which takes no AT,
    has a 10 s interval), so no window rolls over during a test."""
    return t


def call(c, fam, key="k", *extra):
    argv = list(CALLS[fam])
    argv[1] = key
    at = [] if fam == "CL" else ["AT", T0]
    return [int(x) for x in c.execute_command(*argv, *extra, *at)]


def allowed(fam, rep):
    return rep[0] == (0 if fam == "CL" else 1)


def fill(c, fam, key="k"):
    """Takes the whole capacity (5) of a fresh key in one allowed call."""
    if fam == "CL":
        rep = [int(x) for x in c.execute_command("CL.THROTTLE", key, 4, 5, 50, 5)]
    else:
        rep = call(c, fam, key, "COST", 5)
    assert allowed(fam, rep), rep


def exhaust(c, fam, key="k"):
    """Takes single units until the key refuses one."""
    for _ in range(20):
        if not allowed(fam, call(c, fam, key)):
            return
    raise AssertionError("never denied")


def pairs(lst):
    it = iter(lst)
    return {s(k): v for k, v in zip(it, it)}


def raw(server):
    return RawClient(server.port)


# --------------------------------------------------------------------------
# loading

def test_loaded_with_loadmodule(r):
    mods = r.execute_command("MODULE", "LIST")
    names = [s(pairs(m)["name"]) for m in mods]
    assert "floodgate" in names, mods
    info = s(r.execute_command("INFO", "modules"))
    assert "floodgate" in str(info)


def test_module_load_command():
    with Server(module=False) as srv:
        c = srv.client()
        with pytest.raises(redis.ResponseError):
            c.execute_command("FG.TOKEN", "k", 5, 1)
        assert c.execute_command("MODULE", "LOAD", MODULE) in (b"OK", "OK", True)
        names = [s(pairs(m)["name"]) for m in c.execute_command("MODULE", "LIST")]
        assert "floodgate" in names
        rep = [int(x) for x in c.execute_command("FG.TOKEN", "k", 5, 1)]
        assert rep[:4] == [1, 5, 4, -1]
        rep = [int(x) for x in c.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1)]
        assert rep == [0, 16, 15, -1, 2]
        with raw(srv) as rc:
            docs = rc.execute("COMMAND", "DOCS", "FG.TOKEN")
        assert docs and s(docs[0]).upper() == "FG.TOKEN"
        assert c.ping()


# --------------------------------------------------------------------------
# command metadata

def _flat_arg_names(args):
    out = []
    for a in args:
        d = pairs(a)
        out.append(s(d.get("name", b"")).lower())
        if "token" in d:
            out.append(s(d["token"]).lower())
        if "arguments" in d:
            out.extend(_flat_arg_names(d["arguments"]))
    return out


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_command_docs(server, cmd):
    with raw(server) as rc:
        reply = rc.execute("COMMAND", "DOCS", cmd)
    assert reply and len(reply) == 2, reply
    assert s(reply[0]).upper() == cmd
    doc = pairs(reply[1])
    assert s(doc.get("summary", b"")).strip(), doc
    assert "arguments" in doc and doc["arguments"], doc
    names = _flat_arg_names(doc["arguments"])
    for a in DOC_ARGS[cmd]:
        assert a in names, (cmd, a, names)


def test_command_docs_all_at_once(server):
    with raw(server) as rc:
        reply = rc.execute("COMMAND", "DOCS", *ALL_COMMANDS)
    got = {s(n).upper() for n in reply[0::2]}
    assert got == set(ALL_COMMANDS)


# the key position of each command (1-based argv index)
KEY_POS = {c: 1 for c in ALL_COMMANDS}
KEY_POS["FG.PEEK"] = 2

GETKEYS_CALLS = {
    "CL.THROTTLE": ["CL.THROTTLE", "thekey", 15, 30, 60, 1],
    "FG.FIXED": ["FG.FIXED", "thekey", 5, 60000],
    "FG.SLIDING": ["FG.SLIDING", "thekey", 5, 60000, "COST", 2],
    "FG.SLIDELOG": ["FG.SLIDELOG", "thekey", 5, 60000],
    "FG.TOKEN": ["FG.TOKEN", "thekey", 5, 0.1],
    "FG.LEAKY": ["FG.LEAKY", "thekey", 5, 0.1],
    "FG.GCRA": ["FG.GCRA", "thekey", 5, 5, 50000],
    "FG.PEEK": ["FG.PEEK", "TOKEN", "thekey", 5, 0.1],
    "FG.RESET": ["FG.RESET", "thekey"],
    "FG.INSPECT": ["FG.INSPECT", "thekey"],
    "FG.SETSTATE": ["FG.SETSTATE", "thekey", "bucket", "1", "PXAT", "1"],
    "FG.LOGAPPEND": ["FG.LOGAPPEND", "thekey", "0", "1", "1"],
}

READONLY = {"FG.PEEK", "FG.INSPECT"}


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_command_info_and_getkeys(server, cmd):
    with raw(server) as rc:
        info = rc.execute("COMMAND", "INFO", cmd)[0]
        keys = rc.execute("COMMAND", "GETKEYS", *GETKEYS_CALLS[cmd])
        keys_full = rc.execute("COMMAND", "GETKEYSANDFLAGS", *GETKEYS_CALLS[cmd])
    assert info is not None, cmd
    assert s(info[0]).upper() == cmd
    first, last, step = info[3], info[4], info[5]
    assert (first, last, step) == (KEY_POS[cmd], KEY_POS[cmd], 1), info
    flags = {s(f) for f in info[2]}
    if cmd in READONLY:
        assert "readonly" in flags and "write" not in flags, flags
    else:
        assert "write" in flags, flags
    assert [s(k) for k in keys] == ["thekey"]
    assert s(keys_full[0][0]) == "thekey"


def test_getkeys_peek_each_family(server):
    with raw(server) as rc:
        for fam, argv in CALLS.items():
            if fam == "CL":
                continue
            keys = rc.execute("COMMAND", "GETKEYS", "FG.PEEK", fam, "kk:" + fam, *argv[2:])
            assert [s(k) for k in keys] == ["kk:" + fam]


def test_peek_and_inspect_run_on_a_replica(server):
    """FG.PEEK is read-only, so it runs on replicas (a write command does not)."""
    c = server.client()
    c.execute_command("FLUSHALL")
    c.config_set("repl-diskless-sync-delay", 0)
    with Server(extra_args=["--replicaof", "127.0.0.1", str(server.port)]) as rep:
        rc = rep.client()
        c.execute_command("FG.TOKEN", "k", 5, 0.1, "COST", 2)
        from harness import wait_replica_synced
        wait_replica_synced(c, rc)
        reply = [int(x) for x in rc.execute_command("FG.PEEK", "TOKEN", "k", 5, 0.1)]
        assert reply[:3] == [1, 5, 2]
        assert state(rc, "k") == state(c, "k")
        with pytest.raises(redis.ResponseError) as ei:
            rc.execute_command("FG.TOKEN", "k", 5, 0.1)
        assert "READONLY" in str(ei.value) or "read only" in str(ei.value).lower()
    c.execute_command("FLUSHALL")


# --------------------------------------------------------------------------
# INFO

INFO_NAMES = {
    "CL": ["throttle", "cl_throttle", "cl.throttle", "cl"],
    "FIXED": ["fixed"],
    "SLIDING": ["sliding"],
    "SLIDELOG": ["slidelog"],
    "TOKEN": ["token"],
    "LEAKY": ["leaky"],
    "GCRA": ["gcra"],
}


def floodgate_info(c):
    with RawClient(c.connection_pool.connection_kwargs["port"]) as rc:
        text = s(rc.execute("INFO", "floodgate"))
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
    return out


def counter_fields(info, fam):
    """The allowed/denied field names of a family in INFO floodgate."""
    found = {}
    for kind in ("allowed", "denied"):
        for name in INFO_NAMES[fam]:
            for prefix in ("floodgate_", ""):
                f = "%s%s_%s" % (prefix, name, kind)
                if f in info:
                    found[kind] = f
                    break
            if kind in found:
                break
    return found.get("allowed"), found.get("denied")


def test_info_section_lists_every_family(r):
    info = floodgate_info(r)
    assert info, "INFO floodgate is empty"
    for fam in FAMS:
        a, d = counter_fields(info, fam)
        assert a and d, (fam, sorted(info))


@pytest.mark.parametrize("fam", FAMS)
def test_info_counters_move(r, fam):
    before = floodgate_info(r)
    a, d = counter_fields(before, fam)
    assert a and d, sorted(before)
    for _ in range(3):
        assert allowed(fam, call(r, fam))
    fill(r, fam, "k2")
    for _ in range(2):
        assert not allowed(fam, call(r, fam, "k2"))
    after = floodgate_info(r)
    assert after[a] - before[a] == 4, (a, before[a], after[a])
    assert after[d] - before[d] == 2, (d, before[d], after[d])
    # the other families' counters did not move
    for other in FAMS:
        if other == fam:
            continue
        oa, od = counter_fields(after, other)
        assert after[oa] == before[oa] and after[od] == before[od], other


# --------------------------------------------------------------------------
# keyspace notifications

class Notifications:
    def __init__(self, c, flags, key="k"):
        self.c = c
        self.old = c.config_get("notify-keyspace-events")["notify-keyspace-events"]
        c.config_set("notify-keyspace-events", flags)
        self.ps = c.pubsub(ignore_subscribe_messages=True)
        self.ps.subscribe("__keyspace@0__:" + key)
        # wait for the subscription to be active
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            m = self.ps.get_message(timeout=0.05)
            if self.ps.subscribed and m is None:
                break

    def drain(self, wait=0.15):
        msgs = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            m = self.ps.get_message(timeout=0.02)
            if m is not None and m.get("type") == "message":
                msgs.append(s(m["data"]))
        return msgs

    def close(self):
        try:
            self.ps.close()
        finally:
            self.c.config_set("notify-keyspace-events", self.old)


@pytest.mark.parametrize("flags", ["KEA", "Kd"])
@pytest.mark.parametrize("fam", FAMS)
def test_keyspace_notifications(r, fam, flags):
    n = Notifications(r, flags)
    try:
        assert n.drain(0.05) == []
        # allowed: an event
        assert allowed(fam, call(r, fam))
        got = n.drain()
        assert len(got) >= 1, (fam, flags, got)
        # denied: nothing
        exhaust(r, fam)
        n.drain()
        assert not allowed(fam, call(r, fam))
        assert n.drain() == []
        # peeks and cost 0: nothing
        if fam == "CL":
            r.execute_command("CL.THROTTLE", "k", 4, 5, 50, 0)
        else:
            call(r, fam, "k", "COST", 0)
            r.execute_command("FG.PEEK", fam, "k", *CALLS[fam][2:])
        r.execute_command("FG.INSPECT", "k")
        assert n.drain() == []
    finally:
        n.close()


def test_keyspace_event_names(r):
    """Every family's event names the command (recorded for the report)."""
    n = Notifications(r, "Kd")
    seen = {}
    try:
        for fam in FAMS:
            r.execute_command("DEL", "k")
            n.drain(0.02)
            call(r, fam)
            seen[fam] = n.drain(0.1)
        for fam, ev in seen.items():
            assert len(ev) >= 1, seen
    finally:
        n.close()


def test_reset_notifies(r):
    call(r, "TOKEN")
    n = Notifications(r, "Kd")
    try:
        assert r.execute_command("FG.RESET", "k") == 1
        assert len(n.drain()) >= 1
        assert r.execute_command("FG.RESET", "k") == 0
        assert n.drain() == []
    finally:
        n.close()


# --------------------------------------------------------------------------
# MEMORY USAGE, COPY, TTL, generic key commands

@pytest.mark.parametrize("fam", FAMS)
def test_memory_usage(r, fam):
    call(r, fam)
    m = r.execute_command("MEMORY", "USAGE", "k")
    assert isinstance(m, int) and 0 < m < 1024, m


def test_memory_usage_grows_with_the_state(r):
    call(r, "TOKEN", "b")
    call(r, "FIXED", "f")
    call(r, "SLIDING", "s")
    mb, mf, ms = (r.execute_command("MEMORY", "USAGE", k) for k in ("b", "f", "s"))
    # bucket: 8 bytes in the value slot; fixed: 16 bytes; sliding: 24 bytes
    assert mb < mf < ms, (mb, mf, ms)


def test_memory_usage_slidelog_bounded_by_limit(r):
    r.execute_command("FG.SLIDELOG", "small", 1000, 60000)
    small = r.execute_command("MEMORY", "USAGE", "small")
    for i in range(10):
        r.execute_command("FG.SLIDELOG", "big", 1000, 60000, "COST", 100)
        time.sleep(0.001)
    big = r.execute_command("MEMORY", "USAGE", "big")
    assert big >= 8 * 1000 and big > small, (small, big)
    # docs: 8 bytes per unit in the window, in a buffer that grows by doubling,
    # so at most 16 * limit bytes (plus the key itself)
    assert big <= 16 * 1000 + 512, big


@pytest.mark.parametrize("fam", FAMS)
def test_ttl_is_set(r, fam):
    start = time.time_ns()
    rep = call(r, fam)
    pttl = r.pttl("k")
    elapsed_ms = (time.time_ns() - start) / 1e6  # the TTL runs on the server's clock
    ttl = r.ttl("k")
    assert ttl > 0 and pttl > 0, (ttl, pttl)
    if fam == "CL":
        assert pttl <= rep[4] * 1000 + 1
    else:
        assert rep[4] - elapsed_ms - 1 <= pttl <= rep[4] + 1, (rep, pttl, elapsed_ms)


@pytest.mark.parametrize("fam", FAMS)
def test_copy(r, fam):
    call(r, fam, "k", *(["1"] if fam == "CL" else []))
    call(r, fam, "k", *(["2"] if fam == "CL" else ["COST", 2]))
    assert r.execute_command("COPY", "k", "k2") == 1
    assert state(r, "k2") == state(r, "k")
    assert digest_value(r, "k2") == digest_value(r, "k")
    assert r.execute_command("PEXPIRETIME", "k2") == r.execute_command("PEXPIRETIME", "k")
    assert s(r.type("k2")) == s(r.type("k"))
    # independent from now on
    st = state(r, "k")
    exhaust(r, fam, "k2")
    assert not allowed(fam, call(r, fam, "k2"))
    assert state(r, "k") == st
    assert allowed(fam, call(r, fam, "k"))
    # COPY onto an existing key needs REPLACE
    assert r.execute_command("COPY", "k", "k2") == 0
    assert r.execute_command("COPY", "k", "k2", "REPLACE") == 1
    assert state(r, "k2") == state(r, "k")


@pytest.mark.parametrize("fam", FAMS)
def test_rename_keeps_state_and_ttl(r, fam):
    call(r, fam)
    st = state(r, "k")
    pttl = r.pttl("k")
    r.rename("k", "k3")
    assert r.exists("k") == 0
    assert state(r, "k3") == st
    assert 0 < r.pttl("k3") <= pttl


@pytest.mark.parametrize("fam", FAMS)
def test_del_and_unlink(r, fam):
    call(r, fam)
    call(r, fam, "k2")
    assert r.delete("k") == 1
    assert r.unlink("k2") == 1
    assert r.exists("k", "k2") == 0


@pytest.mark.parametrize("fam", FAMS)
def test_type_is_reported(r, fam):
    call(r, fam)
    t = s(r.type("k"))
    assert t not in ("none", "string", "list", "hash", "set", "zset", "stream"), t


def test_families_have_distinct_types(r):
    for fam in ("TOKEN", "FIXED", "SLIDING", "SLIDELOG"):
        call(r, fam, "k:" + fam)
    types = {fam: s(r.type("k:" + fam)) for fam in ("TOKEN", "FIXED", "SLIDING", "SLIDELOG")}
    assert len(set(types.values())) == 4, types
    call(r, "GCRA", "k:GCRA")
    call(r, "LEAKY", "k:LEAKY")
    assert s(r.type("k:GCRA")) == s(r.type("k:LEAKY")) == types["TOKEN"]


def test_scan_type_filter(r):
    call(r, "TOKEN", "a")
    call(r, "FIXED", "b")
    r.set("c", "x")
    t = s(r.type("a"))
    found = set()
    cur = 0
    while True:
        cur, keys = r.scan(cur, _type=t)
        found.update(s(k) for k in keys)
        if cur == 0:
            break
    assert found == {"a"}


@pytest.mark.parametrize("fam", FAMS)
def test_object_and_debug_object(r, timed, fam):
    call(r, fam)
    with raw(timed) as rc:
        assert rc.execute("OBJECT", "REFCOUNT", "k") >= 1
        assert rc.execute("DEBUG", "OBJECT", "k")
    assert r.ping()


def _args_of(doc):
    for a in doc.get("arguments", []):
        d = pairs(a)
        yield d
        yield from _args_of(d)


def test_command_docs_display_texts_are_the_argument_names(server):
    """Redis 7.2 appended display_text to the module argument struct (the
    hint redis-cli shows while typing). Declared with the 7.0 layout, every
    argument's display text was the next argument's name on 7.2+ (the server
    shows the name when the field is NULL); 7.0 has no such field. The
    server's own GET tells which kind this server is."""
    with raw(server) as rc:
        get_key = next(_args_of(pairs(rc.execute("COMMAND", "DOCS", "GET")[1])))
        shows_display = "display_text" in get_key
        names = [s(n) for n in rc.execute("COMMAND", "LIST", "FILTERBY", "MODULE", "floodgate")]
        reply = rc.execute("COMMAND", "DOCS", *names)
    checked = 0
    for name, doc in zip(reply[0::2], reply[1::2]):
        for arg in _args_of(pairs(doc)):
            if shows_display and s(arg["type"]) not in ("oneof", "block"):
                assert s(arg.get("display_text", b"")) == s(arg["name"]), (s(name), arg)
                checked += 1
            else:
                assert "display_text" not in arg, (s(name), arg)
    assert checked or not shows_display
