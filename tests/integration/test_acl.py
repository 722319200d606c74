"""ACLs over floodgate's commands (docs/security.md, "ACLs").

The recipes are read from docs/security.md itself and applied as written,
so the page and the server cannot drift apart: the by-name recipes (Redis
7.0, and every later version) and, where the server has module categories
(7.2; @floodgate and @bloom from 7.4), the category recipes. What each user
may run is asked with ACL DRYRUN, which checks the command and its keys
without running it.

Where the server has categories, every command's categories are checked
against what the command is: @write or @read as its flags, @fast or @slow,
@blocking for those that may WAIT, @dangerous for the effect and repair
commands, @admin for FG.POLICY's writes, nothing else. On 7.0 the test
checks the opposite, which docs/security.md warns about: module commands in
no category at all.

Also: a read-only key pattern (%R~) runs the reads of a single key, as
FG.UVCOUNT and FG.UVEXPORT (their key specs fail for one key, so the
server asks their getkeys callback, which must not demand write access).

Set FLOODGATE_REDIS_SERVER to run against another redis-server (7.4, say).
"""

import os
import re

import pytest

from harness import REPO, RawClient, Server, has_module_acl_categories

DOC = os.path.join(REPO, "docs", "security.md")
WAITS = {"fg.lock", "fg.acquire", "fg.mlock", "fg.check"}
EFFECTS = {"fg.setstate", "fg.logappend", "fg.hold", "fg.unhold", "fg.plstate", "fg.uvaddat",
           "fg.uvload"}
POLICY_WRITES = {"fg.policy|set", "fg.policy|del", "fg.policy|allow", "fg.policy|deny",
                 "fg.policy|unlist"}
DANGEROUS = EFFECTS | POLICY_WRITES | {"fg.forceunlock", "fg.reset", "bf.loadchunk"}


@pytest.fixture(scope="module")
def srv():
    with Server() as server:
        yield server


@pytest.fixture
def raw(srv):
    with RawClient(srv.port) as c:
        for user in c.execute("ACL", "USERS"):
            if user != b"default":
                c.execute("ACL", "DELUSER", user)
        yield c


def version(raw):
    info = raw.execute("INFO", "server").decode()
    v = re.search(r"redis_version:(\d+)\.(\d+)", info)
    return int(v.group(1)), int(v.group(2))


def recipes(section):
    """{user: ACL SETUSER argv} of the code blocks under the heading that
    starts with `section` in docs/security.md."""
    text = open(DOC).read()
    body = re.split(r"\n##+ ", text.split("\n### " + section, 1)[1], 1)[0]
    out = {}
    for line in body.splitlines():
        if line.startswith("ACL SETUSER "):
            argv = line.split()
            out[argv[2]] = argv
    assert out, "no recipe under %r" % section
    return out


def may(raw, user, *argv):
    reply = raw.execute("ACL", "DRYRUN", user, *argv)
    return reply == b"OK"


# A call of each kind, on keys the recipes name.
CALLS = {
    "check": ["FG.TOKEN", "rl:1", 10, 1],
    "check-other-key": ["FG.TOKEN", "other:1", 10, 1],
    "throttle": ["CL.THROTTLE", "rl:2", 5, 1, 60],
    "policy-check": ["FG.CHECK", "p", "rl:3"],
    "peek": ["FG.PEEK", "TOKEN", "rl:1", 10, 1],
    "inspect": ["FG.INSPECT", "rl:1"],
    "reset": ["FG.RESET", "rl:1"],
    "setstate": ["FG.SETSTATE", "rl:1", "bucket", 1, "PXAT", 1],
    "lock": ["FG.LOCK", "lock:a", "o", 1000],
    "fset": ["FG.FSET", "res:a", 1, "v"],
    "fget": ["FG.FGET", "res:a"],
    "lockinfo": ["FG.LOCKINFO", "lock:a"],
    "forceunlock": ["FG.FORCEUNLOCK", "lock:a"],
    "hold": ["FG.HOLD", "lock:a", "lock", 0, "o", "exclusive", 1, 1, 1],
    "bf-exists": ["BF.EXISTS", "bf", "x"],
    "bf-add": ["BF.ADD", "bf", "x"],
    "uvcount": ["FG.UVCOUNT", "uv", "LAST", 1, "HOURS"],
    "uvadd": ["FG.UVADD", "uv", "x"],
    "policy-get": ["FG.POLICY", "GET", "p"],
    "policy-set": ["FG.POLICY", "SET", "p", "LIMIT", "TOKEN", 10, 1],
    "get": ["GET", "k"],
    "set": ["SET", "k", "v"],
}


def allowed(raw, user):
    return {name for name, argv in CALLS.items() if may(raw, user, *argv)}


def test_recipes_by_name(raw):
    """The 7.0 recipes, on any version."""
    for user, argv in recipes("Redis 7.0").items():
        assert raw.execute(*argv) == b"OK", argv
    assert allowed(raw, "limiter") == {"check", "throttle", "policy-check", "peek"}
    assert allowed(raw, "locker") == {"lock", "fset", "fget", "lockinfo"}
    assert allowed(raw, "reader") == {"peek", "inspect", "lockinfo", "bf-exists", "uvcount",
                                      "policy-get", "get"}
    assert allowed(raw, "policy-admin") == {"policy-get", "policy-set"}
    assert allowed(raw, "app") == set(CALLS) - {"reset", "setstate", "forceunlock", "hold",
                                                "policy-set"}


def test_recipes_by_category(raw):
    v = version(raw)
    if v < (7, 2):
        pytest.skip("Redis %d.%d has no module ACL categories (RedisModule_SetCommandACLCategories "
                    "is 7.2+)" % v)
    users = recipes("Redis 7.2")
    if not has_module_acl_categories(raw):
        del users["fgapp"]  # @floodgate: RedisModule_AddACLCategory is 7.4+ (Valkey 8+)
    for user, argv in users.items():
        assert raw.execute(*argv) == b"OK", argv
    assert allowed(raw, "app") == set(CALLS) - {"reset", "setstate", "forceunlock", "hold",
                                                "policy-set"}
    assert allowed(raw, "reader") == {"peek", "inspect", "lockinfo", "bf-exists", "uvcount",
                                      "policy-get", "get"}
    if "fgapp" in users:
        assert allowed(raw, "fgapp") == set(CALLS) - {"reset", "setstate", "forceunlock", "hold",
                                                      "policy-set", "get", "set"}


def test_write_and_read_categories_reach_module_commands_from_7_2(raw):
    """docs/security.md: on 7.0, +@write does not grant module commands and
    -@write does not revoke them; from 7.2 both do."""
    raw.execute("ACL", "SETUSER", "writer", "on", "nopass", "~*", "-@all", "+@write")
    raw.execute("ACL", "SETUSER", "nowrite", "on", "nopass", "~*", "+@all", "-@write")
    raw.execute("ACL", "SETUSER", "safe", "on", "nopass", "~*", "+@all", "-@dangerous")
    categories = version(raw) >= (7, 2)
    assert may(raw, "writer", *CALLS["check"]) == categories
    assert may(raw, "nowrite", *CALLS["check"]) == (not categories)
    assert may(raw, "safe", *CALLS["hold"]) == (not categories)
    assert may(raw, "safe", *CALLS["check"])


def command_entries(raw):
    """{name: (flags, categories)} of every floodgate command and FG.POLICY's
    subcommands, from COMMAND INFO."""
    names = raw.execute("COMMAND", "LIST", "FILTERBY", "MODULE", "floodgate")
    out = {}
    for entry in raw.execute("COMMAND", "INFO", *names):
        for e in [entry] + entry[9]:
            out[e[0].decode().lower()] = ({f.decode() for f in e[2]}, {c.decode() for c in e[6]})
    return out


def expected_categories(name, flags, module_categories):
    cats = {"@write" if "write" in flags else "@read", "@fast" if "fast" in flags else "@slow"}
    cats |= {"@blocking"} if name in WAITS else set()
    cats |= {"@dangerous"} if name in DANGEROUS else set()
    cats |= {"@admin"} if name in POLICY_WRITES else set()
    cats |= {"@keyspace"} if name == "fg.reset" else set()
    if module_categories:
        cats |= {"@floodgate"} | ({"@bloom"} if name.startswith("bf.") else set())
    return cats


def test_every_command_is_in_the_categories_it_calls_for(raw):
    entries = command_entries(raw)
    assert len(entries) >= 50 and "fg.policy|set" in entries and "bf.add" in entries
    v = version(raw)
    if v < (7, 2):
        # what docs/security.md warns about
        assert all(cats == set() for _, cats in entries.values()), entries
        pytest.skip("Redis %d.%d has no module ACL categories: checked that there are none" % v)
    wrong = {}
    for name, (flags, cats) in entries.items():
        if name == "fg.policy":
            continue  # a container: its subcommands carry the categories
        assert ("write" in flags) != ("readonly" in flags), (name, flags)
        want = expected_categories(name, flags, has_module_acl_categories(raw))
        if cats != want:
            wrong[name] = (sorted(cats), sorted(want))
    assert not wrong, wrong
    if has_module_acl_categories(raw):
        # (ACL CAT <category> leaves module commands out: COMMAND INFO shows them)
        assert {b"floodgate", b"bloom"} <= set(raw.execute("ACL", "CAT"))


def test_read_only_key_patterns_run_single_key_reads(raw, srv):
    """Regression: FG.UVCOUNT/FG.UVEXPORT of one key reported their key with
    full access, so a %R~* user got NOPERM for a read."""
    raw.execute("FG.UVADD", "uv", "a", "b")
    raw.execute("ACL", "SETUSER", "ro", "on", ">pw", "%R~*", "-@all", "+fg.uvcount",
                "+fg.uvexport", "+fg.uvstore")
    raw.execute("ACL", "SETUSER", "store", "on", ">pw", "%R~*", "%W~dest", "-@all",
                "+fg.uvstore")
    with RawClient(srv.port) as ro:
        ro.execute("AUTH", "ro", "pw")
        assert ro.execute("FG.UVCOUNT", "uv", "LAST", 1, "HOURS") == 2
        assert ro.execute("FG.UVCOUNT", "uv", "LAST", 1, "HOURS", "uv", "none") == 2
        assert len(ro.execute("FG.UVEXPORT", "uv", "LAST", 1, "HOURS")) == 12304
        # a store writes its destination: refused without write access there
        assert ro.error_of("FG.UVSTORE", "dest", "uv", "LAST", 1, "HOURS").startswith("NOPERM")
    with RawClient(srv.port) as store:
        store.execute("AUTH", "store", "pw")
        assert store.execute("FG.UVSTORE", "dest", "uv", "LAST", 1, "HOURS") == 2
        assert store.error_of("FG.UVSTORE", "uv", "dest", "LAST", 1, "HOURS").startswith("NOPERM")
    assert raw.execute("EXISTS", "dest") == 1


def test_key_patterns_of_policy_checks_and_policy_admin(raw):
    """FG.CHECK's key is its second argument, never the policy name;
    FG.POLICY has no key, so key patterns do not limit it."""
    raw.execute("ACL", "SETUSER", "keyed", "on", "nopass", "~rl:*", "-@all", "+fg.check",
                "+fg.policy")
    assert may(raw, "keyed", "FG.CHECK", "other", "rl:1")
    assert not may(raw, "keyed", "FG.CHECK", "rl:1", "other")
    assert may(raw, "keyed", "FG.POLICY", "SET", "anything", "LIMIT", "TOKEN", 1, 1)
    assert may(raw, "keyed", "FG.PEEK", "TOKEN", "rl:1", 1, 1) is False  # not granted
    raw.execute("ACL", "SETUSER", "keyed", "+fg.peek")
    assert may(raw, "keyed", "FG.PEEK", "TOKEN", "rl:1", 1, 1)
    assert not may(raw, "keyed", "FG.PEEK", "rl:1", "other", 1, 1)
