"""floodgate functions load|show (src/cli/functions.c): the server scripts as
the Redis Functions library 'floodgate', on stock redis-servers (no module):
load lists the functions; FCALL then answers as the module's commands do
(checked against a server with the module at the same explicit instants);
loading again needs --replace; show tells this floodgate's library from
another; a server without FUNCTION and a user without +function are told
what to do; a cluster URL loads every master.

Exit codes: 0 done (show: the library is this floodgate's), 1 (show) absent
or another, 2 error."""

import json
import os
import re
import subprocess

import pytest

import harness
from topology import Cluster

FLOODGATE = os.path.join(harness.REPO, "build", "floodgate")
LIBRARY_FILE = os.path.join(harness.REPO, "build", "floodgate-functions.lua")
FUNCTIONS = sorted(["fg_token", "fg_leaky", "fg_gcra", "fg_fixed", "fg_sliding", "fg_slidelog",
                    "cl_throttle", "gcra", "fg_peek", "fg_refund", "fg_reset", "fg_inspect",
                    "fg_check", "fg_policy",
                    "fg_lock", "fg_unlock", "fg_acquire", "fg_release", "fg_extend",
                    "fg_forceunlock", "fg_lockinfo", "fg_mlock", "fg_munlock", "fg_unwait",
                    "fg_fence", "fg_fset", "fg_fget",
                    "fg_uvcreate", "fg_uvadd", "fg_uvaddat", "fg_uvcount", "fg_uvexport",
                    "bf_reserve", "bf_add", "bf_madd", "bf_insert", "bf_exists", "bf_mexists",
                    "bf_info", "bf_card"])
READ_ONLY = {"fg_peek", "fg_inspect", "fg_lockinfo", "bf_exists", "bf_mexists", "bf_info",
             "bf_card"}
T0 = 1_700_000_000_000_000  # an explicit instant, unix us


@pytest.fixture(scope="module", autouse=True)
def cli_binary():
    if not os.path.exists(FLOODGATE):
        subprocess.run(["make", "-s", "-C", harness.REPO, "build/floodgate"], check=True,
                       stdout=subprocess.DEVNULL)


def run(*args):
    env = dict(os.environ)
    env.pop("FLOODGATE_URL", None)
    return subprocess.run([FLOODGATE] + [str(a) for a in args], capture_output=True, text=True,
                          env=env, timeout=60)


def url(srv):
    return "redis://127.0.0.1:%d" % srv.port


def assert_error(p, *words):
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    assert p.stderr.startswith("floodgate: ")
    for w in words:
        assert w in p.stderr, p.stderr


def library_text():
    with open(LIBRARY_FILE) as f:
        return f.read()


@pytest.fixture(scope="module")
def stock():
    with harness.Server(module=False) as srv:
        yield srv


@pytest.fixture
def plain(stock):
    """A client of the stock server, no functions and no keys."""
    c = stock.client()
    c.execute_command("FUNCTION", "FLUSH")
    c.flushall()
    yield c
    c.close()


@pytest.fixture(scope="module")
def moduled():
    with harness.Server(["--floodgate.explicit-time", "yes"]) as srv:
        yield srv


def listed_functions(c):
    libs = c.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "floodgate")
    assert len(libs) == 1
    lib = dict(zip(libs[0][::2], libs[0][1::2]))
    assert lib[b"library_name"] == b"floodgate"
    out = {}
    for fn in lib[b"functions"]:
        f = dict(zip(fn[::2], fn[1::2]))
        out[f[b"name"].decode()] = sorted(x.decode() for x in f[b"flags"])
    return out


# -- help, man page, completion ---------------------------------------------------

def test_help_man_page_and_completion():
    p = run("--help")
    assert p.returncode == 0 and "functions load|show" in p.stdout
    p = run("functions", "--help")
    assert p.returncode == 0
    assert "floodgate functions load [URL] [--replace]" in p.stdout
    assert "floodgate functions show [URL]" in p.stdout
    for words in (["load"], ["show"]):
        p = run("functions", *words, "--help")
        assert p.returncode == 0 and "floodgate functions " + words[0] in p.stdout
    assert "--replace" in run("functions", "load", "--help").stdout
    with open(os.path.join(harness.REPO, "docs", "man", "floodgate.1")) as f:
        man = f.read().replace("\\-", "-")
    for text in ("functions load", "functions show", "--replace"):
        assert text in man, text
    completion = os.path.join(harness.REPO, "src", "cli", "completion.bash")

    def complete(*words):
        script = ('source "$0"; COMP_WORDS=(floodgate "$@"); COMP_CWORD=$#; _floodgate; '
                  'printf "%s\\n" "${COMPREPLY[@]}"')
        out = subprocess.run(["bash", "-c", script, completion] + list(words),
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return sorted(w for w in out.stdout.split("\n") if w)
    assert "functions" in complete("")
    assert complete("functions", "") == ["load", "show"]
    assert "--replace" in complete("functions", "load", "--")
    assert "--replace" not in complete("functions", "show", "--")


def test_bad_arguments():
    assert_error(run("functions"), "load or show")
    assert_error(run("functions", "unload"), "unknown subcommand 'functions unload'")
    assert_error(run("functions", "load"), "mem: is no server")
    assert_error(run("functions", "load", "redis://a", "redis://b"), "one URL")
    assert_error(run("functions", "show", "--replace", "redis://a"), "unknown option '--replace'")
    assert_error(run("functions", "load", "http://x"), "invalid URL")


# -- load -----------------------------------------------------------------------------

def test_load_lists_every_function(stock, plain):
    p = run("functions", "load", url(stock))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "library floodgate loaded on 127.0.0.1:%d: %d functions" % (
        stock.port, len(FUNCTIONS))
    shown = [line.split() for line in lines[1:]]
    assert [words[0] for words in shown] == FUNCTIONS
    for words in shown:
        assert words[1:] == (["no-writes"] if words[0] in READ_ONLY else [])
    assert listed_functions(plain) == {f: (["no-writes"] if f in READ_ONLY else [])
                                      for f in FUNCTIONS}
    # the server holds this floodgate's own text
    lib = plain.execute_command("FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "floodgate")[0]
    code = dict(zip(lib[::2], lib[1::2]))[b"library_code"].decode()
    assert code == library_text()
    assert code.startswith("#!lua name=floodgate\n")


def test_load_json(stock, plain):
    p = run("functions", "load", "--url", url(stock), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["library"] == "floodgate" and out["replace"] is False
    assert out["nodes"] == ["127.0.0.1:%d" % stock.port]
    assert [f["name"] for f in out["functions"]] == FUNCTIONS
    assert {f["name"] for f in out["functions"] if f["flags"] == ["no-writes"]} == READ_ONLY


def test_loading_twice_needs_replace(stock, plain):
    assert run("functions", "load", url(stock)).returncode == 0
    p = run("functions", "load", url(stock))
    assert_error(p, "127.0.0.1:%d already holds a library 'floodgate'" % stock.port,
                 "already exists", "--replace")
    # the library is as it was, and still answers
    assert sorted(listed_functions(plain)) == FUNCTIONS
    assert plain.execute_command("FCALL", "fg_token", 1, "k", 10, 2)[0] == 1
    # a library of the name, but another text: --replace puts this floodgate's back
    plain.execute_command("FUNCTION", "LOAD", "REPLACE",
                          "#!lua name=floodgate\n"
                          "redis.register_function('fg_token', function() return 7 end)")
    assert plain.execute_command("FCALL", "fg_token", 1, "k", 10, 2) == 7
    p = run("functions", "load", url(stock), "--replace")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("library floodgate loaded on ")
    assert sorted(listed_functions(plain)) == FUNCTIONS
    assert plain.execute_command("FCALL", "fg_token", 1, "k2", 10, 2) == [1, 10, 9, -1, 500]
    # and replacing this floodgate's own library by itself is fine too
    assert run("functions", "load", url(stock), "--replace").returncode == 0


def answer(c, *command):
    try:
        return c.execute_command(*command)
    except Exception as e:  # noqa: BLE001 - the error is the answer
        return ("error", str(e))


def same_answers(fcall_client, module_client, calls):
    """Each (function, key, arguments after the key) by FCALL, and as the
    module's command: the same reply."""
    for fn, key, args in calls:
        name = fn.upper().replace("_", ".")
        # FG.PEEK and FG.REFUND name the family before the key
        command = [name, args[0], key] + args[1:] if fn in ("fg_peek", "fg_refund") \
            else [name, key] + args
        want = answer(module_client, *command)
        got = answer(fcall_client, "FCALL", fn, 1, key, *args)
        assert got == want, (fn, key, args)


def test_fcall_answers_as_the_module(stock, plain, moduled):
    """The same calls at the same explicit instants: FCALL on the stock
    server, the module's commands on the other."""
    assert run("functions", "load", url(stock)).returncode == 0
    m = moduled.client()
    m.flushall()
    calls = []  # (function, key, arguments after the key)
    for i in range(12):
        at = ["AT", T0 + i * 37_000]
        calls += [
            ("fg_token", "tok", ["10", "2", "COST", "3"] + at),
            ("fg_leaky", "lk", ["5", "1.5"] + at),
            ("fg_gcra", "gc", ["4", "10", "1000"] + at),
            ("fg_fixed", "fx", ["7", "100"] + at),
            ("fg_sliding", "sw", ["7", "100"] + at),
            ("fg_slidelog", "sl", ["5", "300", "COST", "2"] + at),
            ("fg_peek", "tok", ["TOKEN", "10", "2"] + at),
        ]
        if i % 4 == 3:
            calls.append(("fg_refund", "tok", ["TOKEN", "10", "2", "COST", "2"] + at))
    calls += [("fg_reset", "fx", []), ("fg_reset", "fx", [])]
    same_answers(plain, m, calls)
    # a state reads the same but for its TTL, counted from each server's
    # clock, and integers past 2^53 (a TAT in ns), which a script can only
    # answer as their decimal text
    def exact(v):
        return int(v) if isinstance(v, bytes) and re.fullmatch(rb"-?\d{16,}", v) else v
    for key in ("tok", "gc", "sl"):
        got = plain.execute_command("FCALL_RO", "fg_inspect", 1, key)
        want = m.execute_command("FG.INSPECT", key)
        assert [exact(v) for v in got[:-2]] == want[:-2], key
        assert got[-2] == want[-2] == b"pttl"
    tat = plain.execute_command("FCALL_RO", "fg_inspect", 1, "tok")[3]
    assert isinstance(tat, bytes) and int(tat) > 2 ** 53
    assert plain.execute_command("FCALL_RO", "fg_inspect", 1, "nothing") is None
    # read-only functions run under FCALL_RO; the others are refused there
    with pytest.raises(Exception, match="write flag"):
        plain.execute_command("FCALL_RO", "fg_token", 1, "tok", 10, 2)
    m.close()


def test_fcall_refuses_as_the_module(stock, plain, moduled):
    """Argument errors and WRONGTYPE: the module's messages, as they are."""
    assert run("functions", "load", url(stock)).returncode == 0
    m = moduled.client()
    m.flushall()
    for c in (plain, m):
        c.hset("h", "f", "v")
    same_answers(plain, m, [
        ("fg_token", "t", ["0", "2"]),
        ("fg_token", "t", ["10", "2", "COST", "-1"]),
        ("fg_fixed", "f", ["10", "nan"]),
        ("fg_peek", "t", ["NOPE", "10", "2"]),
        ("fg_gcra", "h", ["10", "1", "1000"]),
    ])
    m.close()


# -- show -----------------------------------------------------------------------------

def test_show(stock, plain):
    p = run("functions", "show", url(stock))
    assert p.returncode == 1 and p.stderr == ""
    assert p.stdout == "127.0.0.1:%d: no library floodgate (floodgate functions load puts " \
                       "it there)\n" % stock.port
    assert json.loads(run("functions", "show", url(stock), "--json").stdout) == {
        "nodes": [{"node": "127.0.0.1:%d" % stock.port, "library": "absent", "functions": []}],
        "current": False}
    assert run("functions", "load", url(stock)).returncode == 0
    p = run("functions", "show", url(stock))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "127.0.0.1:%d: library floodgate, this floodgate's, " \
                                       "%d functions" % (stock.port, len(FUNCTIONS))
    out = json.loads(run("functions", "show", "--json", "--url", url(stock)).stdout)
    assert out["current"] is True and out["nodes"][0]["library"] == "current"
    assert [f["name"] for f in out["nodes"][0]["functions"]] == FUNCTIONS
    # another text of the library: an older or newer floodgate's
    plain.execute_command("FUNCTION", "LOAD", "REPLACE", library_text() + "-- another\n")
    p = run("functions", "show", url(stock))
    assert p.returncode == 1
    assert "not this floodgate's (floodgate functions load --replace puts this one)" in p.stdout
    assert json.loads(run("functions", "show", url(stock), "--json").stdout)["current"] is False


# -- servers that refuse ----------------------------------------------------------------

def test_a_server_without_function_is_told_to_use_evalsha():
    with harness.Server(["--rename-command", "FUNCTION", '""'], module=False) as srv:
        for sub in ("load", "show"):
            p = run("functions", sub, url(srv))
            assert_error(p, "127.0.0.1:%d has no FUNCTION command" % srv.port,
                         "unknown command", "EVALSHA", "needs nothing loaded")


def test_a_user_without_function_is_told_which_rule(stock, plain):
    plain.execute_command("ACL", "SETUSER", "nofn", "on", ">pw", "~*", "+@all", "-function")
    try:
        p = run("functions", "load", "redis://nofn:pw@127.0.0.1:%d" % stock.port)
        assert_error(p, "refused FUNCTION LOAD", "NOPERM", "+function|load")
        assert plain.execute_command("FUNCTION", "LIST") == []
        plain.execute_command("ACL", "SETUSER", "nofn", "+function|load")
        p = run("functions", "load", "redis://nofn:pw@127.0.0.1:%d" % stock.port)
        assert_error(p, "refused FUNCTION LIST", "+function|list")
        assert len(plain.execute_command("FUNCTION", "LIST")) == 1  # loaded, not listed
        p = run("functions", "load", "redis://nofn:bad@127.0.0.1:%d" % stock.port)
        assert_error(p, "AUTH refused")
    finally:
        plain.execute_command("ACL", "DELUSER", "nofn")


def test_cannot_connect():
    port = harness.free_port()
    assert_error(run("functions", "load", "redis://127.0.0.1:%d" % port),
                 "io: cannot connect to 127.0.0.1:%d" % port)


# -- a cluster --------------------------------------------------------------------------

def test_cluster_url_loads_every_master():
    cl = Cluster(module=False)
    try:
        cl.start()
        seeds = ",".join("127.0.0.1:%d" % n.port for n in cl.nodes[1:])
        cluster_url = "redis+cluster://" + seeds
        p = run("functions", "show", cluster_url)
        assert p.returncode == 1 and p.stdout.count("no library floodgate") == 3, p.stdout
        p = run("functions", "load", cluster_url, "--json")
        assert p.returncode == 0, p.stderr
        assert sorted(json.loads(p.stdout)["nodes"]) == sorted(
            "127.0.0.1:%d" % n.port for n in cl.nodes)
        for node in cl.nodes:  # each master answers for the keys of its slots
            c = node.client()
            key = next("k%d" % i for i in range(10000)
                       if cl.slot_owner[c.execute_command("CLUSTER", "KEYSLOT", "k%d" % i)]
                       == node.port)
            assert c.execute_command("FCALL", "fg_token", 1, key, 10, 2) == [1, 10, 9, -1, 500]
            c.close()
        p = run("functions", "show", cluster_url)
        assert p.returncode == 0 and p.stdout.count("this floodgate's") == 3, p.stdout
        # a second load refuses on the first master, and says so
        p = run("functions", "load", cluster_url)
        assert_error(p, "already holds a library 'floodgate'")
        p = run("functions", "load", cluster_url, "--replace")
        assert p.returncode == 0, p.stderr
        assert re.match(r"library floodgate loaded on (127\.0\.0\.1:\d+, ){2}127\.0\.0\.1:\d+: "
                        r"%d functions\n" % len(FUNCTIONS), p.stdout), p.stdout
    finally:
        cl.stop()
