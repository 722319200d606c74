"""Command families (src/module/families.c, docs/commands.md "Command
families"): each registers on its own, and a family with a name already
taken is left out whole, logged and shown in INFO, while floodgate loads;
floodgate.bf-commands decides BF.*.

The clashes here are made with `rename-command` (a server command renamed
onto a floodgate name before the module loads), so these tests need no
other module. test_bf_clash.py loads RedisBloom itself."""

import re

import pytest
import redis

from harness import MODULE, RawClient, Server, s, wait_for
from topology import assert_no_crash, read_log

# The families and their commands, in the module's order.
FAMILIES = {
    "ratelimit": ["CL.THROTTLE", "FG.GCRA", "FG.TOKEN", "FG.LEAKY", "FG.FIXED", "FG.SLIDING",
                  "FG.SLIDELOG", "FG.PEEK", "FG.REFUND", "FG.RESET", "FG.INSPECT",
                  "FG.SETSTATE", "FG.LOGAPPEND"],
    "locks": ["FG.LOCK", "FG.UNLOCK", "FG.ACQUIRE", "FG.RELEASE", "FG.MLOCK", "FG.MUNLOCK",
              "FG.EXTEND", "FG.FORCEUNLOCK", "FG.LOCKINFO", "FG.FENCE", "FG.FSET", "FG.FGET",
              "FG.HOLD", "FG.UNHOLD"],
    "bloom": ["BF.RESERVE", "BF.ADD", "BF.MADD", "BF.INSERT", "BF.EXISTS", "BF.MEXISTS",
              "BF.INFO", "BF.CARD", "BF.DEBUG", "BF.SCANDUMP", "BF.LOADCHUNK"],
    "uv": ["FG.UVCREATE", "FG.UVADD", "FG.UVADDAT", "FG.UVCOUNT", "FG.UVEXPORT", "FG.UVSTORE",
           "FG.UVINFO", "FG.UVLOAD"],
    "policies": ["FG.CHECK", "FG.PLSTATE", "FG.POLICY"],
    "gcra": ["GCRA"],
}


def raw(c, *args):
    """The reply unparsed (redis-py parses INFO and COMMAND its own way)."""
    with RawClient(c.connection_pool.connection_kwargs["port"]) as rc:
        return rc.execute(*args)


def family_fields(c):
    """INFO floodgate_command_families as {family: {key: value}}."""
    text = s(raw(c, "INFO", "floodgate_command_families"))
    out = {}
    for line in text.splitlines():
        m = re.match(r"floodgate_(\w+):(.*)$", line.strip())
        if m:
            out[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split(","))
    return out


def log_lines(srv, text):
    """The log lines holding text, in any case (a level marker in each: '#'
    warning, '*' notice)."""
    return [ln for ln in read_log(srv).splitlines() if text.lower() in ln.lower()]


def level_of(line):
    return re.search(r"\d\d:\d\d:\d\d\.\d+ (.) ", line).group(1)


def commands_present(c, names):
    """{name: whether a command of that name exists}."""
    return {n: info is not None for n, info in zip(names, raw(c, "COMMAND", "INFO", *names))}


def works(c, family):
    """One command of the family answers as floodgate's does."""
    if family == "ratelimit":
        return [int(x) for x in c.execute_command("FG.TOKEN", "rl", 5, 1)][:3] == [1, 5, 4]
    if family == "locks":
        return int(c.execute_command("FG.LOCK", "lk", "me", 60000)[0]) == 1
    if family == "bloom":
        ok = int(c.execute_command("BF.ADD", "bf", "x")) == 1
        return ok and s(c.execute_command("TYPE", "bf")) == "fg-bloomf"
    if family == "uv":
        return int(c.execute_command("FG.UVADD", "uv", "a", "b")) == 1
    if family == "policies":
        c.execute_command("FG.POLICY", "SET", "works", "LIMIT", "TOKEN", 5, 1)
        return int(c.execute_command("FG.CHECK", "works", "pk")[0]) == 1
    if family == "gcra":
        return [int(x) for x in c.execute_command("GCRA", "gk", 4, 1, 1)][:3] == [0, 5, 4]
    raise AssertionError(family)


def decided(c, policy, key, *opts):
    """FG.CHECK's (allowed, decided_by)."""
    rep = c.execute_command("FG.CHECK", policy, key, *opts)
    return int(rep[0]), s(rep[5])


def assert_bloom_lists_work(c):
    """A policy whose allow and deny lists are Bloom filters decides by them
    (they are floodgate's own filters, not keys nor BF.* commands), also
    after the policies are saved and loaded again."""
    c.execute_command("FG.POLICY", "SET", "bl", "LIMIT", "TOKEN", 5, 1,
                      "ALLOWLIST", "BLOOM", "0.001", 100, "DENYLIST", "BLOOM", "0.001", 100)
    assert int(c.execute_command("FG.POLICY", "DENY", "bl", "bad", "worse")) == 2
    assert int(c.execute_command("FG.POLICY", "ALLOW", "bl", "vip")) == 1
    for _ in range(2):
        assert decided(c, "bl", "bad") == (0, "denylist")
        assert decided(c, "bl", "k", "ID", "vip") == (1, "allowlist")
        assert decided(c, "bl", "k") == (1, "limit:1")
        c.execute_command("DEBUG", "RELOAD")


# --------------------------------------------------------------------------
# the default: everything registered

def test_every_family_registered_by_default(r):
    assert family_fields(r) == {f: {"status": "registered"} for f in FAMILIES}
    for family in FAMILIES:
        assert all(commands_present(r, FAMILIES[family]).values()), family


def test_bf_commands_is_auto_by_default_and_set_only_at_load(r):
    assert s(r.execute_command("CONFIG", "GET", "floodgate.bf-commands")) == [
        "floodgate.bf-commands", "auto"]
    with pytest.raises(redis.ResponseError, match="immutable"):
        r.execute_command("CONFIG", "SET", "floodgate.bf-commands", "no")
    assert s(r.execute_command("CONFIG", "GET", "floodgate.bf-commands"))[1] == "auto"


# --------------------------------------------------------------------------
# a name taken: its family is left out, whole

# the first, a middle and the last name of each family
TAKEN = [(f, names[i]) for f, names in FAMILIES.items()
         for i in sorted({0, len(names) // 2, len(names) - 1})]


@pytest.mark.parametrize("family,name", TAKEN, ids=["%s-%s" % t for t in TAKEN])
def test_a_taken_name_leaves_its_family_out(family, name):
    with Server(["--rename-command", "ECHO", name]) as srv:
        c = srv.client()
        # the name is ECHO's
        assert c.execute_command(name, "hello") == b"hello"
        others = [n for n in FAMILIES[family] if n != name]
        assert not any(commands_present(c, others).values()), "half registered"
        for n in others:
            with pytest.raises(redis.ResponseError, match="unknown command"):
                c.execute_command(n, "k")
        fields = family_fields(c)
        assert fields[family]["status"] == "left_out"
        assert fields[family]["reason"] == "name_taken"
        assert fields[family]["command"].upper() == name
        lines = log_lines(srv, "the %s commands are left out: " % family)
        assert len(lines) == 1 and "%s is already a command" % name.lower() in lines[0].lower()
        # BF.* are left to whoever has them by default (auto), GCRA to the
        # server (8.8 has its own): a notice
        assert level_of(lines[0]) == ("*" if family in ("bloom", "gcra") else "#")
        for other in FAMILIES:
            if other == family:
                continue
            assert fields[other] == {"status": "registered"}, other
            assert all(commands_present(c, FAMILIES[other]).values()), other
            assert works(c, other), other
            docs = raw(c, "COMMAND", "DOCS", FAMILIES[other][0])
            assert docs, other   # the metadata of the families left in is set
        assert_no_crash(srv)


@pytest.mark.parametrize("mode,level", [("auto", "*"), ("yes", "#")])
def test_taken_bf_names_are_a_notice_under_auto_and_a_warning_under_yes(mode, level):
    with Server(["--rename-command", "ECHO", "BF.EXISTS",
                 "--floodgate.bf-commands", mode]) as srv:
        c = srv.client()
        assert family_fields(c)["bloom"] == {
            "status": "left_out", "reason": "name_taken", "command": "bf.exists"}
        assert not any(commands_present(c, [n for n in FAMILIES["bloom"]
                                            if n != "BF.EXISTS"]).values())
        lines = log_lines(srv, "the bloom commands are left out: bf.exists is already")
        assert len(lines) == 1 and level_of(lines[0]) == level
        assert works(c, "ratelimit") and works(c, "policies")
        assert_bloom_lists_work(c)


def test_names_are_checked_when_command_itself_is_renamed_away():
    # The check does not rely on COMMAND INFO.
    with Server(["--rename-command", "COMMAND", "",
                 "--rename-command", "ECHO", "FG.UNHOLD"]) as srv:
        c = srv.client()
        fields = family_fields(c)
        assert fields["locks"] == {"status": "left_out", "reason": "name_taken",
                                   "command": "FG.UNHOLD"}
        with pytest.raises(redis.ResponseError, match="unknown command"):
            c.execute_command("FG.LOCK", "k", "me", 1000)
        assert works(c, "ratelimit") and works(c, "bloom")


def test_families_left_out_ignore_key_events():
    # The locks and the policies watch keyspace events, FLUSHDB and SWAPDB
    # for their waiters; left out, they have none.
    with Server(["--rename-command", "ECHO", "FG.LOCK",
                 "--rename-command", "LOLWUT", "FG.CHECK"]) as srv:
        c = srv.client()
        fields = family_fields(c)
        assert fields["locks"]["status"] == fields["policies"]["status"] == "left_out"
        c.set("k", "v")
        c.delete("k")
        c.set("gone", "v", px=1)
        c.execute_command("FG.TOKEN", "rl", 5, 1)
        c.execute_command("FG.RESET", "rl")
        wait_for(lambda: c.execute_command("DBSIZE") == 0)
        c.set("k", "v")
        c.execute_command("SWAPDB", 0, 1)
        c.execute_command("FLUSHDB")
        c.execute_command("FLUSHALL")
        assert_no_crash(srv)


def test_keys_and_policies_of_families_left_out_still_load():
    """The data types register whatever happens to the commands: a file
    written with every family loads with BF.* and the locks left out, is
    saved again, and answers as before once they are back."""
    with Server() as full:
        c = full.client()
        c.execute_command("BF.ADD", "bf", "x")
        c.execute_command("FG.LOCK", "lk", "me", 600000)
        c.execute_command("FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 5, 1,
                          "DENYLIST", "BLOOM", "0.01", 100)
        c.execute_command("FG.POLICY", "DENY", "p", "bad")
        digests = {k: s(c.execute_command("DEBUG", "DIGEST-VALUE", k)) for k in ("bf", "lk")}
        c.execute_command("SAVE")
        full.stop()
        with Server(["--floodgate.bf-commands", "no", "--rename-command", "ECHO", "FG.LOCK"],
                    dir=full.dir) as partial:
            p = partial.client()
            fields = family_fields(p)
            assert fields["bloom"]["status"] == fields["locks"]["status"] == "left_out"
            assert s(p.execute_command("TYPE", "bf")) == "fg-bloomf"
            assert s(p.execute_command("TYPE", "lk")) == "fg-lockst"
            p.execute_command("DEBUG", "RELOAD")
            assert {k: s(p.execute_command("DEBUG", "DIGEST-VALUE", k))
                    for k in digests} == digests
            assert decided(p, "p", "bad") == (0, "denylist")
            p.execute_command("SAVE")
        full.start()
        c = full.client()
        assert family_fields(c)["bloom"] == {"status": "registered"}
        assert int(c.execute_command("BF.EXISTS", "bf", "x")) == 1
        holders = dict(zip(*[iter(s(c.execute_command("FG.LOCKINFO", "lk")))] * 2))["holders"]
        assert [h[0] for h in holders] == ["me"]
        assert decided(c, "p", "bad") == (0, "denylist")


# --------------------------------------------------------------------------
# floodgate.bf-commands no

def test_bf_commands_no_leaves_bloom_out_and_policies_bloom_lists_work():
    with Server(["--floodgate.bf-commands", "no"]) as srv:
        c = srv.client()
        assert s(c.execute_command("CONFIG", "GET", "floodgate.bf-commands"))[1] == "no"
        assert not any(commands_present(c, FAMILIES["bloom"]).values())
        with pytest.raises(redis.ResponseError, match="unknown command"):
            c.execute_command("BF.ADD", "bf", "x")
        fields = family_fields(c)
        assert fields["bloom"] == {"status": "left_out", "reason": "configured"}
        assert all(fields[f] == {"status": "registered"} for f in FAMILIES if f != "bloom")
        lines = log_lines(srv, "the bloom commands are left out, as configured")
        assert len(lines) == 1 and level_of(lines[0]) == "*"
        for family in FAMILIES:
            if family != "bloom":
                assert works(c, family), family
        assert_bloom_lists_work(c)
        assert_no_crash(srv)


def acl_categories_supported(c):
    """Whether the server lets modules add ACL categories (Redis 7.4+)."""
    try:
        c.execute_command("ACL", "CAT", "floodgate")
        return True
    except redis.ResponseError:
        return False


def acl_categories(c, command):
    """The categories COMMAND INFO gives (ACL CAT leaves module commands out)."""
    return s(raw(c, "COMMAND", "INFO", command)[0][6])


def test_no_bloom_acl_category_without_bf_commands():
    # RedisBloom 8 fails to load when @bloom exists: floodgate adds it only
    # with its BF.* commands.
    with Server(["--floodgate.bf-commands", "no"]) as srv:
        c = srv.client()
        if not acl_categories_supported(c):
            pytest.skip("this server has no module ACL categories (Redis 7.4 added them)")
        with pytest.raises(redis.ResponseError, match="(?i)unknown category"):
            c.execute_command("ACL", "CAT", "bloom")
        assert "@floodgate" in acl_categories(c, "FG.TOKEN")
    with Server() as srv:
        assert "@bloom" in acl_categories(srv.client(), "BF.ADD")


# --------------------------------------------------------------------------
# MODULE LOAD at runtime

def test_module_load_at_runtime_leaves_the_taken_family_out():
    with Server(["--rename-command", "ECHO", "FG.FENCE"], module=False) as srv:
        c = srv.client()
        assert c.execute_command("MODULE", "LOAD", MODULE) in (b"OK", True)
        assert family_fields(c)["locks"] == {"status": "left_out", "reason": "name_taken",
                                             "command": "FG.FENCE"}
        assert not any(commands_present(c, [n for n in FAMILIES["locks"]
                                            if n != "FG.FENCE"]).values())
        assert works(c, "ratelimit") and works(c, "bloom") and works(c, "policies")
        assert len(log_lines(srv, "the locks commands are left out: fg.fence is already")) == 1


def test_module_loadex_with_bf_commands_no():
    with Server(module=False) as srv:
        c = srv.client()
        assert c.execute_command("MODULE", "LOADEX", MODULE, "CONFIG", "floodgate.bf-commands",
                                 "no") in (b"OK", True)
        assert family_fields(c)["bloom"] == {"status": "left_out", "reason": "configured"}
        assert not any(commands_present(c, FAMILIES["bloom"]).values())
        assert works(c, "locks") and works(c, "uv")
        assert_bloom_lists_work(c)
