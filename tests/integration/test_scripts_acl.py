"""The ACL recipe of docs/security.md for the script backend ("Servers without
the module"), on a stock redis-server: the users fg-app, fg-admin and
fg-reader exactly as the page creates them (its ACL SETUSER lines are read
from it), then the server scripts called as each of them.

Redis checks the commands a script calls against the caller's ACL, key
patterns included, and EVALSHA, EVAL and FCALL declare their keys
read-write; so the application user needs the scripts' own commands on its
keys, and a selector keeps its writes to the rate-limit keys: it runs every
rate-limit command and FG.CHECK, and cannot write a policy, another
pattern's key or the script cache. The admin user sets and lists policies;
the reader peeks and inspects through FCALL_RO only."""

import os
import re
import shlex
import subprocess

import pytest
import redis

import harness

SECURITY = os.path.join(harness.REPO, "docs", "security.md")
SCRIPTS = os.path.join(harness.REPO, "src", "scripts")
FLOODGATE = os.path.join(harness.REPO, "build", "floodgate")
POLICY_KEYS = ["fg:policy:{api}", "fg:policy:{api}:allow", "fg:policy:{api}:deny"]


def recipe():
    """The ACL SETUSER lines of the page's script-backend section, as words."""
    text = open(SECURITY).read()
    section = text[text.index("## Servers without the module"):]
    section = section[:section.index("\n## ", 1)]
    lines = [line for line in section.splitlines() if line.startswith("ACL SETUSER fg-")]
    users = {}
    for line in lines:
        words = shlex.split(line)
        users[words[2]] = words
    assert set(users) == {"fg-app", "fg-admin", "fg-reader"}, sorted(users)
    return users


def password(words):
    return next(w[1:] for w in words if w.startswith(">"))


@pytest.fixture(scope="module")
def srv():
    with harness.Server(module=False) as s:
        c = s.client()
        for words in recipe().values():
            assert c.execute_command(*words) == b"OK", words
        c.close()
        yield s


@pytest.fixture
def shas(srv):
    """The scripts loaded (again: a test flushes the cache), by family."""
    c = srv.client()
    out = {"ratelimit": c.script_load(harness.built_script("ratelimit"))}
    if os.path.exists(os.path.join(SCRIPTS, "policy.lua")):
        out["policy"] = c.script_load(harness.built_script("policy"))
    c.close()
    return out


def as_user(srv, name):
    return srv.client(username=name, password=password(recipe()[name]))


@pytest.fixture
def admin(srv):
    c = srv.client()
    c.flushall()
    c.close()
    c = srv.client()
    yield c
    c.close()


def refused(c, *command):
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command(*command)
    return str(e.value)


def denied(c, *command):
    """Refused by the ACL: the command itself (NOPERM; redis-py keeps the
    message only), or one a script called ("The user executing the script
    can't run this command", "... can't access at least one of the keys")."""
    msg = refused(c, *command)
    assert re.search(r"NOPERM|can't run this command|can't access|no permissions", msg, re.I), (command, msg)
    return True


RATE_LIMITS = [  # the module's command after its key, as the script takes it
    ["FG.TOKEN", "10", "2", "COST", "3"],
    ["FG.LEAKY", "10", "2"],
    ["FG.GCRA", "10", "5", "1000"],
    ["FG.FIXED", "10", "1000"],
    ["FG.SLIDING", "10", "1000"],
    ["FG.SLIDELOG", "10", "1000", "COST", "2"],
    ["CL.THROTTLE", "10", "5", "1"],
    ["GCRA", "10", "5", "1"],
]


def test_the_app_runs_every_rate_limit_command(srv, shas, admin):
    app = as_user(srv, "fg-app")
    sha = shas["ratelimit"]
    for command in RATE_LIMITS:
        key = "rl:" + command[0].lower()
        first = app.execute_command("EVALSHA", sha, 1, key, *command)
        assert len(first) == 5 and first[0] in (0, 1), command
        if command[0].startswith("FG."):
            assert first[0] == 1 and first[2] >= 0  # allowed, and its numbers
    bucket = ["TOKEN", "10", "2"]
    assert app.execute_command("EVALSHA", sha, 1, "rl:fg.token", "FG.PEEK", *bucket)[0] == 1
    assert app.execute_command("EVALSHA", sha, 1, "rl:fg.token", "FG.REFUND", *bucket) >= 0
    inspect = app.execute_command("EVALSHA", sha, 1, "rl:fg.slidelog", "FG.INSPECT")
    assert inspect[:2] == [b"type", b"slidelog"]
    assert app.execute_command("EVALSHA", sha, 1, "rl:fg.fixed", "FG.RESET") == 1
    # a GCRA at an explicit time reads PEXPIRETIME
    assert app.execute_command("EVALSHA", sha, 1, "rl:gcra", "GCRA", "10", "5", "1",
                               "AT", "1700000000000000")[1] == 11
    # the fallback after NOSCRIPT: EVAL, which caches the script again
    admin.execute_command("SCRIPT", "FLUSH")
    with pytest.raises(redis.exceptions.NoScriptError):
        app.execute_command("EVALSHA", sha, 1, "rl:x", "FG.TOKEN", 10, 2)
    assert app.execute_command("EVAL", harness.built_script("ratelimit"), 1, "rl:x", "FG.TOKEN", 10, 2) \
        == [1, 10, 9, -1, 500]
    assert app.execute_command("EVALSHA", sha, 1, "rl:x", "FG.TOKEN", 10, 2)[0] == 1
    app.close()


def test_the_app_writes_nothing_else(srv, shas, admin):
    app = as_user(srv, "fg-app")
    sha = shas["ratelimit"]
    admin.hset("fg:policy:{api}", "v", 1)
    # another key pattern, by the script or directly
    assert denied(app, "EVALSHA", sha, 1, "other:k", "FG.TOKEN", 10, 2)
    assert denied(app, "GET", "other:k")
    # a policy's keys: readable by the scripts, never written
    for command in (["DEL", "fg:policy:{api}"], ["SET", "fg:policy:{api}", "x"],
                    ["HSET", "fg:policy:{api}", "rules", "x"],
                    ["SADD", "fg:policy:{api}:allow", "me"], ["EXPIRE", "fg:policy:{api}", 1]):
        assert denied(app, *command), command
    assert denied(app, "EVAL", "return redis.call('DEL', KEYS[1])", 1, "fg:policy:{api}")
    assert denied(app, "EVAL", "return redis.call('SET', KEYS[1], 'x')", 1, "fg:policy:{api}")
    assert admin.hget("fg:policy:{api}", "v") == b"1"
    # nor the script cache, the functions, the server
    for command in (["SCRIPT", "FLUSH"], ["SCRIPT", "LOAD", "return 1"],
                    ["FUNCTION", "FLUSH"], ["FUNCTION", "LOAD", "#!lua name=x\n"],
                    ["CONFIG", "GET", "maxmemory"], ["FLUSHALL"], ["KEYS", "*"]):
        assert denied(app, *command), command
    # what it cannot be kept from: its own keys, directly (docs/security.md)
    assert app.execute_command("SET", "rl:fg.token", "0")
    app.close()


def test_the_app_through_the_library(srv, admin):
    """The tool (libfloodgate): the dialect learnt by COMMAND INFO, or forced."""
    if not os.path.exists(FLOODGATE):
        subprocess.run(["make", "-s", "-C", harness.REPO, "build/floodgate"], check=True,
                       stdout=subprocess.DEVNULL)
    base = "redis://fg-app:%s@127.0.0.1:%d" % (password(recipe()["fg-app"]), srv.port)
    for url, key in ((base, "rl:cli-auto"), (base + "?backend=script", "rl:cli-script")):
        p = subprocess.run([FLOODGATE, "check", "--url", url, "--json", key, "token", "10", "2"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert '"allowed":true' in p.stdout and '"remaining":9' in p.stdout
        p = subprocess.run([FLOODGATE, "check", "--url", url, "other:k", "token", "10", "2"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "NOPERM" in p.stderr, (p.stdout, p.stderr)


def test_the_app_without_command_info(srv, admin):
    """COMMAND INFO is optional: the library then tells the dialect from an
    empty FG.TOKEN, refused on arity before any ACL check."""
    words = recipe()["fg-app"]
    admin.execute_command(*[w.replace("fg-app", "fg-app-nocmd") for w in words])
    admin.execute_command("ACL", "SETUSER", "fg-app-nocmd", "-command")
    try:
        url = "redis://fg-app-nocmd:%s@127.0.0.1:%d" % (password(words), srv.port)
        p = subprocess.run([FLOODGATE, "check", "--url", url, "rl:nocmd", "fixed", "5", "1000"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
    finally:
        admin.execute_command("ACL", "DELUSER", "fg-app-nocmd")


def test_functions_for_the_app_and_the_reader(srv, admin):
    p = subprocess.run([FLOODGATE, "functions", "load", "--replace",
                        "redis://127.0.0.1:%d" % srv.port], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    app = as_user(srv, "fg-app")
    reader = as_user(srv, "fg-reader")
    assert app.execute_command("FCALL", "fg_token", 1, "rl:fn", 10, 2) == [1, 10, 9, -1, 500]
    assert app.execute_command("FCALL", "fg_slidelog", 1, "rl:fnlog", 10, 1000)[0] == 1
    assert denied(app, "FCALL", "fg_token", 1, "other:fn", 10, 2)
    # the reader: FCALL_RO of the no-writes functions, on the rate-limit keys
    assert reader.execute_command("FCALL_RO", "fg_peek", 1, "rl:fn", "TOKEN", 10, 2)[2] == 8
    state = reader.execute_command("FCALL_RO", "fg_inspect", 1, "rl:fnlog")
    assert state[:2] == [b"type", b"slidelog"]
    assert reader.execute_command("FCALL_RO", "fg_inspect", 1, "rl:none") is None
    # and nothing that writes: FCALL, EVALSHA (its keys are read-write), SET
    assert denied(reader, "FCALL", "fg_token", 1, "rl:fn", 10, 2)
    assert denied(reader, "EVAL", "return 1", 1, "rl:fn")
    assert denied(reader, "SET", "rl:fn", "0")
    assert denied(reader, "FCALL_RO", "fg_inspect", 1, "other:fn")
    app.close()
    reader.close()


# The commands policy.lua calls, on the keys it names, as a stand-in for it
# while it is being written: FG.CHECK's reads of the definition and the
# lists and its write of the state; FG.POLICY's writes.
CHECK_CALLS = """
local rules = redis.call('HGET', KEYS[2], 'rules')
local denied = redis.call('SISMEMBER', KEYS[4], ARGV[1])
local allowed = redis.call('SISMEMBER', KEYS[3], ARGV[1])
local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], 'p1|api', 'PXAT', tostring(t[1] * 1000 + 60000))
redis.call('DEL', KEYS[1])
return {rules, denied, allowed}
"""
POLICY_CALLS = """
redis.call('HSET', KEYS[1], 'rules', 'r', 'limits', 'l', 'penalty', '', 'allow', 'exact',
           'deny', 'exact')
redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('EXISTS', KEYS[1])
redis.call('SADD', KEYS[2], 'a')
redis.call('SADD', KEYS[3], 'd')
redis.call('SREM', KEYS[2], 'a')
redis.call('HMGET', KEYS[1], 'rules', 'limits', 'penalty')
redis.call('SCARD', KEYS[2])
redis.call('SISMEMBER', KEYS[3], 'd')
if ARGV[1] == 'del' then return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) end
return 'OK'
"""


def test_the_calls_of_policies(srv, admin):
    """What FG.CHECK and FG.POLICY call, whatever policy.lua's state: the
    admin writes definitions and lists and the registry, the app checks."""
    boss = as_user(srv, "fg-admin")
    app = as_user(srv, "fg-app")
    assert boss.execute_command("EVAL", POLICY_CALLS, 3, *POLICY_KEYS, "set") == b"OK"
    assert boss.sadd("fg:policies", "api") == 1
    assert boss.smembers("fg:policies") == {b"api"}
    assert app.execute_command("EVAL", CHECK_CALLS, 4, "rl:u1", *POLICY_KEYS, "u1") == \
        [b"r", 0, 0]
    # the app runs the check, not the administration
    assert denied(app, "EVAL", POLICY_CALLS, 3, *POLICY_KEYS, "set")
    assert denied(app, "SMEMBERS", "fg:policies")
    # (the allow list its SREM emptied is no key: two deleted)
    assert boss.execute_command("EVAL", POLICY_CALLS, 3, *POLICY_KEYS, "del") == 2
    assert boss.srem("fg:policies", "api") == 1
    # and the admin no check: it has no rate-limit keys
    assert denied(boss, "EVAL", CHECK_CALLS, 4, "rl:u1", *POLICY_KEYS, "u1")
    boss.close()
    app.close()


def policy_script_runs(srv, shas):
    """Whether src/scripts/policy.lua answers FG.POLICY SET as the default
    user (it is being written: issue 26)."""
    if "policy" not in shas:
        return False
    c = srv.client()
    try:
        c.execute_command("EVALSHA", shas["policy"], 3, "fg:policy:{probe}",
                          "fg:policy:{probe}:allow", "fg:policy:{probe}:deny",
                          "FG.POLICY", "SET", "probe", "LIMIT", "TOKEN", "10", "10")
        c.delete(*["fg:policy:{probe}" + s for s in ("", ":allow", ":deny")])
        return True
    except redis.ResponseError:
        return False
    finally:
        c.close()


def test_the_admin_sets_policies_and_the_app_checks_them(srv, shas, admin):
    if not policy_script_runs(srv, shas):
        pytest.skip("src/scripts/policy.lua does not run FG.POLICY SET yet")
    sha = shas["policy"]
    boss = as_user(srv, "fg-admin")
    app = as_user(srv, "fg-app")

    def policy(c, *args):
        return c.execute_command("EVALSHA", sha, 3, *POLICY_KEYS, "FG.POLICY", *args)

    def check(c, key, *options):
        return c.execute_command("EVALSHA", sha, 4, key, *POLICY_KEYS, "FG.CHECK", "api",
                                 *options)

    assert policy(boss, "SET", "api", "LIMIT", "TOKEN", "10", "10", "PENALTY", "60000",
                  "AFTER", "5") == b"OK"
    assert boss.sadd("fg:policies", "api") == 1  # the library's registry, beside SET
    assert policy(boss, "DENY", "api", "10.0.0.66") == 1
    assert policy(boss, "ALLOW", "api", "10.0.0.1") == 1
    assert policy(boss, "UNLIST", "api", "ALLOW", "10.0.0.1") == 1
    got = policy(boss, "GET", "api")
    assert got[:2] == [b"name", b"api"]
    assert boss.smembers("fg:policies") == {b"api"}
    # the app checks: charged on its key, the lists read
    assert check(app, "rl:user42", "COST", "2")[:3] == [1, 10, 8]
    assert check(app, "rl:user43", "ID", "10.0.0.66")[5] == b"denylist"
    # and cannot change the policy, through the script or around it
    assert policy_refused(app, policy)
    assert denied(app, "SADD", "fg:policies", "x")
    assert policy(boss, "DEL", "api") == 1
    assert boss.srem("fg:policies", "api") == 1
    # the admin has no rate-limit keys
    assert denied(boss, "GET", "rl:user42")
    boss.close()
    app.close()


def policy_refused(app, policy):
    for args in (["SET", "api", "LIMIT", "TOKEN", "1000", "1000"], ["DEL", "api"],
                 ["ALLOW", "api", "me"], ["UNLIST", "api", "DENY", "10.0.0.66"]):
        with pytest.raises(redis.ResponseError) as e:
            policy(app, *args)
        assert re.search(r"NOPERM|can't run this command|can't access|no permissions", str(e.value), re.I), \
            (args, str(e.value))
    return True


POLICY_FILE = """
policies = (
  {
    name = "acl.api";
    limits = ( { algorithm = "token"; capacity = 10; rate = 10.0; } );
    denylist = { kind = "exact"; items = [ "10.0.0.66" ]; };
  }
);
"""


def tool(*args):
    return subprocess.run([FLOODGATE] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=30)


def test_policies_through_the_tool(srv, shas, admin, tmp_path):
    """floodgate policy apply/list/show/delete as fg-admin, policy check as
    fg-app: libfloodgate's own calls within the recipe."""
    if not policy_script_runs(srv, shas):
        pytest.skip("src/scripts/policy.lua does not run FG.POLICY SET yet")
    users = recipe()
    boss = "redis://fg-admin:%s@127.0.0.1:%d" % (password(users["fg-admin"]), srv.port)
    app = "redis://fg-app:%s@127.0.0.1:%d" % (password(users["fg-app"]), srv.port)
    conf = tmp_path / "policies.conf"
    conf.write_text(POLICY_FILE)
    p = tool("policy", "apply", conf, "--url", boss)
    assert p.returncode == 0, p.stderr
    p = tool("policy", "list", "--url", boss)
    assert p.returncode == 0 and "acl.api" in p.stdout, (p.stdout, p.stderr)
    assert tool("policy", "show", "acl.api", "--url", boss).returncode == 0
    p = tool("policy", "check", "acl.api", "rl:acl-user", "--cost", "3", "--url", app)
    assert p.returncode == 0, p.stderr
    p = tool("policy", "check", "acl.api", "rl:acl-user", "--id", "10.0.0.66", "--url", app)
    assert p.returncode == 1, (p.stdout, p.stderr)
    # the application cannot change it
    p = tool("policy", "apply", conf, "--url", app)
    assert p.returncode == 2, (p.stdout, p.stderr)
    p = tool("policy", "delete", "acl.api", "--url", app)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert tool("policy", "delete", "acl.api", "--url", boss).returncode == 0
    assert admin.exists("fg:policy:{acl.api}") == 0
