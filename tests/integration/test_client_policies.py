"""libfloodgate's policies (fg_policy_*) against real servers with the module:
the same answers as mem: (a differential run on one injected clock, sent as
AT, and a scripted sequence), the server's own messages for refused
definitions and requests (without a round trip), config files applied on a
server and on mem:, the floodgate tool's policy subcommands, the loader on a
miss, waiting in the key's queue (FIFO among threads, a timeout answered with
a denial that charges nothing, immediate answers), error mapping, and a
3-master cluster where changes reach every master.

The C program is tests/client/policy_client.c (a line protocol, a
differential mode and a threaded FIFO scenario, see its top comment); it is
built when missing.

The library's side of it (the differential run, the script, refusals, error
mapping, files, the tool, the loader, unix sockets, a cluster) runs on a
stock server and a stock 3-master cluster too (backends.py), where policies
are keys that the library's server scripts keep: lists are exact there, the
counters read 0, a wait is the library's own without a FIFO order, and a
cluster stores a policy once, on its slot's master (docs/scripts.md). The
module's FG.POLICY GET, its Bloom lists and its queue stay the module's.
"""

import json
import os
import subprocess
import time

import pytest

from backends import BACKENDS, of_param, STOCK, target
from harness import REPO, RawClient, Server
from test_client import Driver, program

FLOODGATE = os.path.join(REPO, "build", "floodgate")
T0 = 1900000000000000  # a whole second, far from the wall clock


@pytest.fixture(autouse=True)
def needs_policies(server):
    c = server.client()
    try:
        if c.execute_command("COMMAND", "INFO", "FG.CHECK") == [None]:
            pytest.skip("the module has no policies yet")
    finally:
        c.close()


class PolicyClient:
    """policy_client: one command per line, one answer per line."""

    def __init__(self, url, clock_us=None, send=False):
        argv = [program("policy_client"), url]
        if clock_us is not None:
            argv += [str(clock_us)] + (["send"] if send else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.opened = self.proc.stdout.readline().strip()
        assert self.opened == "ok opened", self.opened

    def __call__(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def round_trips(self):
        return int(self("stats").split()[1])

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0


def url(server):
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A flushed backends.Target: the session's module server (whose
    policies outlive FLUSHALL: the tests' names are their own), the stock
    server, the stock cluster."""
    return of_param(request, flush_session=True)


def exact_lists(text):
    """A definition or a file with its Bloom lists made exact, for a stock
    server (whose scripts keep exact lists only)."""
    out = text.replace('kind = "bloom"; error = 0.001; capacity = 100000;', 'kind = "exact";')
    return out.replace("allow:bloom:0.01:100", "allow:exact")


def cluster_url(cluster):
    return "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in cluster.nodes)


def decode(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def get(client, name):
    """FG.POLICY GET as a dict."""
    r = decode(client.execute_command("FG.POLICY", "GET", name))
    return dict(zip(r[0::2], r[1::2]))


def raw_error(server, *argv):
    """The server's error reply to a command, verbatim."""
    with RawClient(server.port) as rc:
        return rc.error_of(*argv)


# ------------------------------------------------------------ differential

@pytest.mark.parametrize("kind", BACKENDS)
def test_differential_on_one_clock(request, kind):
    """Random policies, replacements, deletes, list additions and checks at
    instants of one injected clock: mem: and the server agree on every code,
    message and field (a stock server takes AT from anyone; its lists are
    exact, so the run's are: "exact")."""
    if kind == "module":
        where, seeds, extra = url(request.getfixturevalue("timed")), (11, 12, 13), []
    else:
        where, seeds, extra = target(kind).url, (11,), ["exact"]
    for seed in seeds:
        out = subprocess.run([program("policy_client"), "diff", where, str(seed), "4000"] + extra,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        words = out.stdout.split()
        assert words[:3] == ["OK", "4000", "operations:"], out.stdout
        counts = [int(words[i]) for i in (3, 5, 9, 14, 17)]
        allowed, by_limits, by_penalty, by_lists, shadow = counts
        assert allowed > 1000 and by_limits > 100 and by_lists > 20 and shadow > 10, out.stdout
        assert by_penalty > 0, out.stdout


SCRIPT = [
    ("set {p}.api token:10:10 fixed:3:1000", "ok"),
    ("check {p}.api {p}:u1 1", "ok 1 3 2 -1 1000 limit:2 0"),
    ("check {p}.api {p}:u1 2", "ok 1 3 0 -1 1000 limit:2 0"),
    ("check {p}.api {p}:u1 1", "ok 0 3 0 1000 1000 limit:2 0"),
    ("check {p}.api {p}:u1 11", "ok 0 10 0 -1 1000 limit:1 0"),
    ("clock %d" % (T0 + 1000000), "ok"),
    ("check {p}.api {p}:u1 0", "ok 1 3 3 -1 0 limit:2 0"),
    ("set {p}.pen fixed:1:1000 penalty:5000:2:3000 deny:exact allow:bloom:0.01:100", "ok"),
    ("allow {p}.pen vip vip other", "ok 2"),
    ("deny {p}.pen bad", "ok 1"),
    ("check {p}.pen {p}:u2 1 vip", "ok 1 0 0 -1 0 allowlist 0"),
    ("check {p}.pen {p}:u2 1 bad", "ok 0 0 0 -1 0 denylist 0"),
    ("check {p}.pen {p}:u2 1", "ok 1 1 0 -1 1000 limit:1 0"),
    ("check {p}.pen {p}:u2 1", "ok 0 1 0 1000 1000 limit:1 0"),
    ("check {p}.pen {p}:u2 1", "ok 0 1 0 5000 5000 limit:1 0"),
    ("clock %d" % (T0 + 3000000), "ok"),
    ("check {p}.pen {p}:u2 1", "ok 0 0 0 3000 3000 penalty 0"),
    ("set {p}.sh token:2:1 shadow", "ok"),
    ("check {p}.sh {p}:u3 2", "ok 1 2 0 -1 2000 limit:1 0"),
    ("check {p}.sh {p}:u3 1", "ok 1 2 0 -1 2000 limit:1 1"),
    ("set {p}.grow token:10:1", "ok"),
    ("check {p}.grow {p}:u4 7", "ok 1 10 3 -1 7000 limit:1 0"),
    ("set {p}.grow token:100:1", "ok"),
    ("check {p}.grow {p}:u4 0", "ok 1 100 93 -1 7000 limit:1 0"),
    ("check {p}.grow {p}:u2 1", "err invalid ERR key holds the state of policy '{p}.pen'"),
    ("del {p}.grow", "ok 1"),
    ("del {p}.grow", "ok 0"),
    ("check {p}.grow {p}:u4 1", "err invalid ERR no such policy '{p}.grow'"),
]


@pytest.mark.parametrize("backend", ["mem", "server"] + list(STOCK))
def test_scripted_answers(timed, backend):
    """The same script gives the same exact answers on every backend (the
    allowlist exact on the stock ones, which answers the same here)."""
    where = {"mem": "mem:", "server": url(timed)}.get(backend) or target(backend).url
    names = {"p": "s%d" % int(time.time() * 1000)}
    c = PolicyClient(where, T0, send=True)
    try:
        for line, expected in SCRIPT:
            line, expected = line.format(**names), expected.format(**names)
            if backend in STOCK:
                line = exact_lists(line)
            got = c(line)
            if got.startswith("ok ") and line.startswith("check"):
                source = got.rsplit(" ", 1)[1]
                assert source == ("memory" if backend == "mem" else "server")
                got = got.rsplit(" ", 1)[0]
            assert got == expected, line
    finally:
        c.close()


# ---------------------------------------------------------- refusals

# (policy_client rules, the words of FG.POLICY SET after the name)
BAD_DEFINITIONS = [
    ("token:0:1", ["LIMIT", "TOKEN", "0", "1"]),
    ("token:5:0", ["LIMIT", "TOKEN", "5", "0"]),
    ("leaky:5:2e9", ["LIMIT", "LEAKY", "5", "2000000000"]),
    ("gcra:5:0:100", ["LIMIT", "GCRA", "5", "0", "100"]),
    ("gcra:1:1000:0.0001", ["LIMIT", "GCRA", "1", "1000", "0.0001"]),
    ("gcra:1:0.001:1e12", ["LIMIT", "GCRA", "1", "0.001", "1000000000000"]),
    ("fixed:0:1000", ["LIMIT", "FIXED", "0", "1000"]),
    ("sliding:5:0.0001", ["LIMIT", "SLIDING", "5", "0.0001"]),
    ("slidelog:5:1000", ["LIMIT", "SLIDELOG", "5", "1000"]),
    ("token:1:1 penalty:-1:1:0", ["LIMIT", "TOKEN", "1", "1", "PENALTY", "-1"]),
    ("token:1:1 penalty:10:0:0", ["LIMIT", "TOKEN", "1", "1", "PENALTY", "10", "AFTER", "0"]),
    ("token:1:1 penalty:10:1:2e12",
     ["LIMIT", "TOKEN", "1", "1", "PENALTY", "10", "WITHIN", "2000000000000"]),
    ("token:1:1 allow:bloom:0:10", ["LIMIT", "TOKEN", "1", "1", "ALLOWLIST", "BLOOM", "0", "10"]),
    ("token:1:1 deny:bloom:0.01:0", ["LIMIT", "TOKEN", "1", "1", "DENYLIST", "BLOOM", "0.01", "0"]),
    (" ".join(["token:1:1"] * 9), ["LIMIT", "TOKEN", "1", "1"] * 9),
]


def test_refusals_are_the_servers_without_a_round_trip(backend, server):
    """The module's words (raw_error asks the session's module server), on
    every backend: the library refuses before sending anything."""
    c = PolicyClient(backend.url)
    try:
        assert c("set p token:1:1") == "ok"
        before = c.round_trips()
        for rules, words in BAD_DEFINITIONS:
            got = c("set p " + rules)
            assert got.startswith("err invalid "), rules
            expected = raw_error(server, "FG.POLICY", "SET", "p", *words)
            assert got[len("err invalid "):] == expected, rules
        requests = [
            ("set a:b token:1:1", ["FG.POLICY", "SET", "a:b", "LIMIT", "TOKEN", "1", "1"]),
            ("check p k -1", ["FG.CHECK", "p", "k", "COST", "-1"]),
            ("acquire p k 1 0", ["FG.CHECK", "p", "k", "WAIT", "0"]),
            ("acquire p k 1 86400001", ["FG.CHECK", "p", "k", "WAIT", "86400001"]),
            ("allow p", ["FG.POLICY", "ALLOW", "p"]),
            ("deny p", ["FG.POLICY", "DENY", "p"]),
            ("del a:b", ["FG.POLICY", "DEL", "a:b"]),
        ]
        for line, argv in requests:
            got = c(line)
            assert got == "err invalid " + raw_error(server, *argv), line
        assert c.round_trips() == before  # all refused in the client
        assert c("invalid") == "ok " + " ".join(["invalid"] * 15)
        # errors of the server itself, passed on
        assert c("check nope k 1") == "err invalid ERR no such policy 'nope'"
        assert c("allow nope x") == "err invalid ERR no such policy 'nope'"
        # (a stock cluster's ALLOW asks the slot map for the policy's node first)
        assert c.round_trips() == before + (3 if backend.is_cluster else 2)
    finally:
        c.close()


def test_the_largest_definition(r, server):
    """57 arguments: 7 GCRA limits and a token bucket, a penalty and two Bloom lists."""
    rules = " ".join("gcra:%d:%d.5:1000.25" % (i + 1, i + 2) for i in range(7))
    rules += " token:9223372036854775807:1e9"  # no integer goes through a double
    c = PolicyClient(url(server))
    try:
        assert c("set largest %s penalty:1000.5:3:2000.5 shadow allow:bloom:0.01:100 "
                 "deny:bloom:0.001:1000" % rules) == "ok"
    finally:
        c.close()
    got = get(r, "largest")
    assert got["limits"] == [["GCRA", str(i + 1), "%d.5" % (i + 2), "1000.25"] for i in range(7)] \
        + [["TOKEN", "9223372036854775807", "1000000000"]]
    assert got["penalty"] == ["1000.5", "3", "2000.5"]
    assert got["shadow"] == 1
    assert got["allowlist"] == ["bloom", 0, "0.01", 100]
    assert got["denylist"] == ["bloom", 0, "0.001", 1000]


def test_errors_map_to_codes(r, server):
    c = PolicyClient(url(server))
    try:
        assert c("set e token:2:1") == "ok"
        r.execute_command("FG.TOKEN", "plain", 5, 1)
        assert c("check e plain 1") == \
            "err wrongtype WRONGTYPE Operation against a key holding the wrong kind of value"
        assert c("set e2 token:2:1") == "ok"
        assert c("check e k 1").startswith("ok 1 ")
        assert c("check e2 k 1") == "err invalid ERR key holds the state of policy 'e'"
    finally:
        c.close()
    # AT needs floodgate.explicit-time
    c = PolicyClient(url(server), T0, send=True)
    try:
        assert c("check e k2 1") == \
            "err invalid ERR AT is disabled: CONFIG SET floodgate.explicit-time yes allows it"
        assert c("acquire e k2 1 10").startswith("ok 1 ")  # waiting checks send no AT
    finally:
        c.close()
    bare = Server(module=False).start()
    try:
        # without the module the server scripts answer (test_scripts_policy.py)
        c = PolicyClient(url(bare))
        assert c("set e token:2:1") == "ok"
        assert c("check e k 1").startswith("ok 1 ")
        c.close()
        # unless the URL says the module's commands
        c = PolicyClient(url(bare) + "?backend=module")
        assert c("set e token:2:1").startswith("err protocol ERR unknown command")
        assert c("check e k 1").startswith("err protocol ERR unknown command")
        assert c("acquire e k 1 100").startswith("err protocol ERR unknown command")
        bare.stop()
        assert c("check e k 1").startswith("err io ")
        assert c("acquire e k 1 100").startswith("err io ")
        assert c("set e token:2:1").startswith("err io ")
        c.close()
    finally:
        bare.stop()


@pytest.mark.parametrize("backend", STOCK, indirect=True, scope="function")
def test_errors_map_to_codes_on_the_scripts(backend):
    """test_errors_map_to_codes where the scripts answer: a key holding a
    rate limit's state, a key of another policy, and AT, which a stock
    server takes from anyone (no floodgate.explicit-time there)."""
    c = PolicyClient(backend.url)
    try:
        assert c("set e token:2:1") == "ok"
        d = Driver(backend.url)
        assert d("check plain token 5 1").startswith("ok 1 ")
        d.close()
        assert c("check e plain 1") == \
            "err wrongtype WRONGTYPE Operation against a key holding the wrong kind of value"
        assert c("set e2 token:2:1") == "ok"
        assert c("check e k 1").startswith("ok 1 ")
        assert c("check e2 k 1") == "err invalid ERR key holds the state of policy 'e'"
    finally:
        c.close()
    c = PolicyClient(backend.url, T0, send=True)
    try:
        assert c("check e k2 1") == "ok 1 2 1 -1 1000 limit:1 0 server"
        assert c("acquire e k2 1 10").startswith("ok 1 2 ")  # waiting checks send no AT
    finally:
        c.close()


# ------------------------------------------------------------ config files

CONF = """# policies.conf
policies = (
  {
    name = "%(p)s.search";
    limits = (
      { algorithm = "token"; capacity = 10; rate = 10.0; },
      { algorithm = "fixed"; limit = 1000; window_ms = 86400000.0; }
    );
    penalty = { ban_ms = 60000.0; after = 5; within_ms = 10000.0; };
    shadow = false;
    denylist = { kind = "bloom"; error = 0.001; capacity = 100000;
                 items = [ "10.0.0.66", "10.0.0.67" ]; };
    allowlist = { kind = "exact"; items = [ "monitor" ]; };
  },
  { name = "%(p)s.login";
    limits = ( { algorithm = "gcra"; capacity = 5; count = 5; period_ms = 60000; } ); }
);
"""


def write_conf(tmp_path, text, name="policies.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_config_file_on_a_server(backend, tmp_path):
    p = "f%d" % int(time.time() * 1000)
    conf = CONF if backend.module else exact_lists(CONF)
    path = write_conf(tmp_path, conf % {"p": p})
    r = backend.client() if backend.module else None  # the module's FG.POLICY GET
    c = PolicyClient(backend.url)
    try:
        assert c("apply " + path) == "ok 2"
        if backend.module:
            search = get(r, p + ".search")
            assert search["limits"] == [["TOKEN", "10", "10"], ["FIXED", "1000", "86400000"]]
            assert search["penalty"] == ["60000", "5", "10000"]
            assert search["allowlist"] == ["exact", 1]
            assert search["denylist"] == ["bloom", 2, "0.001", 100000]
            assert get(r, p + ".login")["limits"] == [["GCRA", "5", "5", "60000"]]
        else:
            assert c("get %s.login" % p).startswith("ok limits=1 limit1=5:5:5:60000 ")
        assert c("check %s.search user:1 1 10.0.0.66" % p) == "ok 0 0 0 -1 0 denylist 0 server"
        assert c("check %s.search user:1 1 monitor" % p) == "ok 1 0 0 -1 0 allowlist 0 server"
        # applying again changes nothing but the counters' policy objects
        assert c("apply " + path) == "ok 2"
        if backend.module:
            assert get(r, p + ".search")["denylist"] == ["bloom", 2, "0.001", 100000]
        # a file with a mistake sends nothing
        names = c("names")
        assert "%s.login %s.search" % (p, p) in names
        bad = write_conf(tmp_path, conf.replace("rate = 10.0", "rate = 0.0") % {"p": p + "x"},
                         "bad.conf")
        assert c("apply " + bad) == ("err invalid 0 %s:6: policies[0].limits[0].rate: rate "
                                     "must be greater than 0 and at most 1e+09" % bad)
        assert c("names") == names
        if backend.module:
            assert decode(r.execute_command("FG.POLICY", "LIST")) == names.split()[1:]
        assert c("apply /nonexistent.conf") == \
            "err invalid 0 /nonexistent.conf: cannot read: No such file or directory"
        # loaded through GET, as the tool shows them (no counters on a stock server)
        assert c("get %s.search" % p).startswith(
            "ok limits=2 limit1=3:10:10:0 limit2=0:1000:0:86400000 ban_ms=60000 after=5 "
            "within_ms=10000 shadow=0 allow=exact:1 " +
            ("deny=bloom:2 allowed=1 denied=1 " if backend.module else
             "deny=exact:2 allowed=0 denied=0 "))
    finally:
        c.close()


def test_config_file_on_mem(tmp_path):
    path = write_conf(tmp_path, CONF % {"p": "m"})
    c = PolicyClient("mem:")
    try:
        assert c("apply " + path) == "ok 2"
        assert c("names") == "ok m.login m.search"
        assert c("check m.search u 1 10.0.0.67") == "ok 0 0 0 -1 0 denylist 0 memory"
        assert c("check m.login u 5").startswith("ok 1 5 0 -1 ")
        assert c("get m.search").startswith(
            "ok limits=2 limit1=3:10:10:0 limit2=0:1000:0:86400000 ban_ms=60000 after=5 "
            "within_ms=10000 shadow=0 allow=exact:1 deny=bloom:2")
    finally:
        c.close()


# ------------------------------------------------------------ the tool

def tool(*args):
    if not os.path.exists(FLOODGATE):
        subprocess.run(["make", "-C", REPO, "build/floodgate"], check=True,
                       stdout=subprocess.DEVNULL)
    env = dict(os.environ)
    env.pop("FLOODGATE_URL", None)
    return subprocess.run([FLOODGATE] + [str(a) for a in args], capture_output=True, text=True,
                          env=env, timeout=30)


def test_the_tool(backend, tmp_path):
    p = "t%d" % int(time.time() * 1000)
    path = write_conf(tmp_path, (CONF if backend.module else exact_lists(CONF)) % {"p": p})
    u = ["--url", backend.url]
    out = tool("policy", "apply", path, *u)
    assert (out.returncode, out.stdout) == (0, "applied 2 policies\n"), out.stderr
    out = tool("policy", "list", *u)
    assert out.returncode == 0 and "%s.login\n%s.search\n" % (p, p) in out.stdout
    listed = json.loads(tool("policy", "list", "--json", *u).stdout)
    assert listed == out.stdout.split()
    if backend.module:
        assert listed == decode(backend.client().execute_command("FG.POLICY", "LIST"))
    out = tool("policy", "show", p + ".search", *u)
    assert out.returncode == 0
    assert out.stdout.splitlines()[:7] == [
        p + ".search",
        "  limit 1         token capacity=10 rate=10",
        "  limit 2         fixed limit=1000 window_ms=86400000",
        "  penalty         ban_ms=60000 after=5 within_ms=10000",
        "  shadow          no",
        "  allowlist       exact, 1 entry",
        "  denylist        %s, 2 entries" % ("bloom" if backend.module else "exact")]
    out = tool("policy", "check", p + ".search", "user:1", "--cost", "3", *u)
    assert out.returncode == 0
    assert out.stdout.splitlines()[:3] == ["allowed", "  limit           10",
                                           "  remaining       7"]
    out = tool("policy", "check", p + ".search", "user:1", "--id=10.0.0.66", "--json", *u)
    assert out.returncode == 1
    assert json.loads(out.stdout) == {"allowed": False, "limit": 0, "remaining": 0,
                                      "retry_after_ms": -1, "reset_after_ms": 0,
                                      "decided_by": "denylist", "shadow_denied": False,
                                      "source": "server"}
    out = tool("policy", "check", p + ".search", "user:2", "--cost", "11", "--wait", "5000", *u)
    assert out.returncode == 1 and "  retry_after_ms  -1" in out.stdout  # never fits: at once
    shown = json.loads(tool("policy", "show", p + ".search", "--json", *u).stdout)
    assert shown["limits"][1] == {"algorithm": "fixed", "limit": 1000, "window_ms": 86400000}
    # (a stock server's scripts count nothing)
    assert (shown["allowed"], shown["denied"]) == ((1, 2) if backend.module else (0, 0))
    out = tool("policy", "delete", p + ".login", *u)
    assert (out.returncode, out.stdout) == (0, "deleted\n")
    out = tool("policy", "delete", p + ".login", "--json", *u)
    assert (out.returncode, out.stdout) == (0, '{"deleted":false}\n')
    out = tool("policy", "show", p + ".login", *u)
    assert (out.returncode, out.stdout) == (1, "(no such policy)\n")
    # errors: the library's words, exit 2
    out = tool("policy", "check", p + ".search", "k", "--wait", "0", *u)
    assert (out.returncode, out.stderr) == (2, "floodgate: invalid: WAIT must be between 1 and "
                                               "86400000\n")
    out = tool("policy", "apply", "/nonexistent.conf", *u)
    assert out.returncode == 2 and "cannot read" in out.stderr
    out = tool("policy", "frobnicate")
    assert out.returncode == 2 and "apply, list, show, check or delete" in out.stderr
    out = tool("policy", "list", "--cost", "3", *u)
    assert out.returncode == 2 and "unknown option '--cost'" in out.stderr
    # mem: would forget what it applied: refused, and --dry-run checks the file
    out = tool("policy", "apply", path, "--url", "mem:")
    assert out.returncode == 2 and "--url" in out.stderr and "--dry-run" in out.stderr
    out = tool("policy", "apply", path, "--dry-run")
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------ the loader

def without_reset(answer):
    """An answer's words without its reset_after_ms, and that number."""
    words = answer.split()
    return words[:5] + words[6:], int(words[5])


def test_the_loader_on_a_miss(backend):
    """The acquire waits (FG.CHECK WAIT; on a stock server the library's
    checks), so it is decided at the server's clock: its reset_after_ms is
    3000 less the time since the first unit was taken, which the test bounds
    by the time it measured around them."""
    p = "l%d" % int(time.time() * 1000)
    c = PolicyClient(backend.url)
    try:
        assert c("loader %s.known token:5:1 penalty:1000:2:0" % p) == "ok"
        first_ns = time.time_ns()
        assert c("check %s.known k 1" % p) == "ok 1 5 4 -1 1000 limit:1 0 server"
        assert c("loads") == "ok 1"
        if backend.module:
            r = backend.client()
            assert get(r, p + ".known")["limits"] == [["TOKEN", "5", "1"]]
            assert get(r, p + ".known")["penalty"] == ["1000", "2", "1000"]
        # the loader's definition, on the server
        other = PolicyClient(backend.url)
        assert other("get %s.known" % p).startswith(
            "ok limits=1 limit1=3:5:1:0 ban_ms=1000 after=2 within_ms=1000 ")
        for line, words, full_ms in (
                ("check %s.known k 1", ["ok", "1", "5", "3", "-1"], 2000),
                ("acquire %s.known k 1 100", ["ok", "1", "5", "2", "-1"], 3000)):
            got, reset_ms = without_reset(c(line % p))
            since_first_ms = (time.time_ns() - first_ns) / 1e6
            assert got == words + ["limit:1", "0", "server"], (line, got)
            assert full_ms - since_first_ms <= reset_ms <= full_ms, (line, reset_ms, since_first_ms)
        assert c("loads") == "ok 1"
        assert c("check %s.other k 1" % p) == "err invalid ERR no such policy '%s.other'" % p
        assert c("loads") == "ok 2"
        assert other("del %s.known" % p) == "ok 1"  # deleted by another client
        other.close()
        assert c("acquire %s.known k2 1 100" % p) == "ok 1 5 4 -1 1000 limit:1 0 server"
        assert c("loads") == "ok 3"
    finally:
        c.close()


# ------------------------------------------------------------ waiting

def fifo(target, name):
    out = subprocess.run([program("policy_client"), "fifo", target, name], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if words[0] == "counters":
            lines["counters"] = dict(w.split("=") for w in words[1:])
            continue
        fields = dict(w.split("=") for w in words[1:3])
        lines[words[0]] = (int(fields["order"]), int(fields["elapsed_ms"]), words[3:])
    return lines


@pytest.mark.parametrize("backend", ["mem", "server"])
def test_waiting_in_the_queue(server, backend):
    """policy_client.c's run_fifo: A (3 units) and B (1) wait in order, C
    times out behind A though its unit is there, D can never fit, E would
    wait beyond its timeout."""
    name = "fifo%d" % int(time.time() * 1000)
    got = fifo("mem:" if backend == "mem" else url(server), name)
    source = "memory" if backend == "mem" else "server"
    order = {k: v[0] for k, v in got.items() if k != "counters"}
    assert order["D"] == 1 and order["C"] == 2 and order["A"] < order["B"] < order["E"], got
    a, b, c, d, e = (got[k][2] for k in "ABCDE")
    assert a[:5] == ["ok", "1", "3", "0", "-1"] and b[:5] == ["ok", "1", "3", "0", "-1"], got
    # C: denied with retry 0, charged nothing (B still got its unit 200 ms after A's)
    assert c[:2] == ["ok", "0"] and c[4] == "0" and c[6:] == ["limit:1", "0", source], got
    assert got["C"][1] >= 300  # it waited its whole timeout
    assert d[:2] == ["ok", "0"] and d[4] == "-1" and got["D"][1] < 3000, got
    assert e[:2] == ["ok", "0"] and int(e[4]) > 100 and got["E"][1] < 3000, got
    assert got["B"][1] >= 750  # after A's 600 ms and one more unit
    assert got["counters"] == {"allowed": "3", "denied": "3", "waited": "3"}


def test_a_waiter_in_the_server_is_told_of_a_deleted_policy(r, server):
    c = PolicyClient(url(server))
    try:
        assert c("set gone token:1:0.05") == "ok"  # the next unit in 20 s
        assert c("check gone k 1").startswith("ok 1 ")
        c.proc.stdin.write("acquire gone k 1 30000\n")
        c.proc.stdin.flush()
        deadline = time.time() + 10
        while get(r, "gone")["waited"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        assert r.execute_command("FG.POLICY", "DEL", "gone") == 1
        assert c.proc.stdout.readline().strip() == "err invalid ERR no such policy 'gone'"
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["module", "stock"])
def test_unix_socket_and_db(kind):
    s = Server(module=kind == "module")
    sock = os.path.join(s.dir, "redis.sock")
    s.extra_args += ["--unixsocket", sock]
    s.start()
    try:
        c = PolicyClient("unix://%s?db=3" % sock)
        assert c("set u token:1:0.01") == "ok"
        assert c("check u k 1") == "ok 1 1 0 -1 100000 limit:1 0 server"
        assert c("acquire u k 1 5").startswith("ok 0 1 0 ")  # its retry is beyond 5 ms
        assert c("names") == "ok u"
        c.close()
        r = s.client(db=3)
        if kind == "module":
            assert decode(r.execute_command("TYPE", "k")) == "fg-plstat"
            assert decode(r.execute_command("FG.POLICY", "LIST")) == ["u"]
        else:  # the policy's keys and the state, in db 3 (docs/scripts.md)
            assert decode(r.execute_command("TYPE", "k")) == "string"
            assert r.exists("fg:policy:{u}") == 1 and r.smembers("fg:policies") == {b"u"}
            assert s.client(db=0).dbsize() == 0
        r.close()
    finally:
        s.stop()


# ------------------------------------------------------------ cluster

@pytest.fixture(params=["module", "stock"])
def any_cluster(request):
    """conftest's cluster with the module, or the shared stock one (flushed)."""
    if request.param == "module":
        return request.getfixturevalue("cluster")
    return target("stock-cluster").cluster


def test_cluster(any_cluster, tmp_path):
    """The module keeps a policy on every master; a stock cluster's scripts
    keep it once, in keys of its name's slot (docs/scripts.md), and a check
    asks that node first (FG.POLICY LOOKUP)."""
    from test_client_cluster import holders
    cluster = any_cluster
    module = cluster.nodes[0].module
    seeds = cluster_url(cluster)
    masters = [n.client() for n in cluster.nodes]
    c = PolicyClient(seeds)

    def stored_once(name):
        key = "fg:policy:{%s}" % name
        return holders(cluster, [key]) == {key: [cluster.owner_of(key)[1].port]}
    try:
        assert c("set cp token:2:1 deny:exact") == "ok"
        if module:
            for m in masters:  # every master has it
                assert get(m, "cp")["limits"] == [["TOKEN", "2", "1"]]
        else:
            assert stored_once("cp")
        assert c("deny cp bad1 bad2") == "ok 2"
        assert c("deny cp bad1") == "ok 0"
        if module:
            for m in masters:
                assert get(m, "cp")["denylist"] == ["exact", 2]
        assert " deny=exact:2 " in c("get cp")
        keys = ["ck%d" % i for i in range(12)]
        assert len({cluster.owner_of(k)[1].port for k in keys}) == 3
        taken_ns = time.time_ns()  # before ck5's two units are taken
        for k in keys:  # each key decided by its own node
            assert c("check cp %s 2" % k).startswith("ok 1 2 0 ")
            owner = cluster.owner_of(k)[1].client()
            assert decode(owner.execute_command("TYPE", k)) == ("fg-plstat" if module
                                                                else "string")
            owner.close()
        assert c("check cp ck0 1 bad2") == "ok 0 0 0 -1 0 denylist 0 server"
        # waiting on the key's node: a unit comes back 1 s after ck5's two
        # were taken, and the bucket is full 2 s after that grant (3 s after
        # they were taken, less the time since)
        got = c("acquire cp ck5 1 5000").split()
        since_ms = (time.time_ns() - taken_ns) / 1e6
        assert since_ms >= 1000, since_ms
        assert got[:5] == ["ok", "1", "2", "0", "-1"], got
        assert 3000 - since_ms <= int(got[5]) <= 2000, (got, since_ms)
        assert c("names") == "ok cp"
        assert c("get cp").startswith("ok limits=1 ")
        # a file, and the tool
        path = write_conf(tmp_path, (CONF if module else exact_lists(CONF)) % {"p": "cl"})
        assert c("apply " + path) == "ok 2"
        out = tool("policy", "delete", "cl.login", "--url", seeds)
        assert (out.returncode, out.stdout) == (0, "deleted\n")
        assert c("names") == "ok cl.search cp"
        if module:
            for m in masters:
                assert decode(m.execute_command("FG.POLICY", "LIST")) == ["cl.search", "cp"]
                assert get(m, "cl.search")["denylist"] == ["bloom", 2, "0.001", 100000]
        else:
            assert stored_once("cl.search") and not holders(cluster, ["fg:policy:{cl.login}"])[
                "fg:policy:{cl.login}"]
            assert " deny=exact:2 " in c("get cl.search")
        assert c("del cp") == "ok 1"
        assert c("del cp") == "ok 0"
        assert c("names") == "ok cl.search"
        if module:
            for m in masters:
                assert decode(m.execute_command("FG.POLICY", "LIST")) == ["cl.search"]
    finally:
        c.close()
        for m in masters:
            m.close()
