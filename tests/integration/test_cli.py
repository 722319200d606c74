"""The floodgate command-line tool (src/cli): check, peek, inspect and reset on
mem: and against a real server, argument errors, and simulate's output.

Exit codes: 0 allowed (or done), 1 denied (inspect: no state), 2 error.

The rate limits and policy apply against a server run on the module, a stock
server and a stock 3-master cluster (backends.py), where the tool's library
runs its server scripts; locks, semaphores, Bloom filters and unique counts
need the module."""

import csv
import json
import os
import shutil
import subprocess

import pytest

import harness
from backends import BACKENDS, of_param

FLOODGATE = os.path.join(harness.REPO, "build", "floodgate")
ALGORITHMS = ["fixed", "sliding", "slidelog", "token", "leaky", "gcra"]
ARGS = {
    "fixed": ["10", "1000"],
    "sliding": ["10", "1000"],
    "slidelog": ["10", "1000"],
    "token": ["10", "10"],
    "leaky": ["10", "10"],
    "gcra": ["10", "10", "1000"],
}


@pytest.fixture(scope="module", autouse=True)
def cli_binary():
    if not os.path.exists(FLOODGATE):
        subprocess.run(["make", "-C", harness.REPO, "build/floodgate"], check=True,
                       stdout=subprocess.DEVNULL)


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("FLOODGATE_URL", None)
    e.update(env or {})
    return subprocess.run([FLOODGATE] + [str(a) for a in args], capture_output=True,
                          text=True, env=e, timeout=30)


def run_json(*args, **kw):
    p = run(*args, "--json", **kw)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def assert_error(p, *words):
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    assert p.stderr.startswith("floodgate: ")
    for w in words:
        assert w in p.stderr


# -- help and version ----------------------------------------------------------

COMMANDS = [["check"], ["peek"], ["inspect"], ["reset"], ["simulate"],
            ["policy"], ["policy", "apply"], ["policy", "list"], ["policy", "show"],
            ["policy", "check"], ["policy", "delete"],
            ["lock"], ["lock", "take"], ["lock", "release"], ["lock", "extend"],
            ["lock", "info"],
            ["semaphore"], ["semaphore", "acquire"], ["semaphore", "release"],
            ["bloom"], ["bloom", "reserve"], ["bloom", "add"], ["bloom", "exists"],
            ["bloom", "card"], ["distinct"], ["distinct", "add"], ["distinct", "count"],
            ["doctor"]]


def test_help_and_version():
    p = run("--help")
    assert p.returncode == 0 and "usage: floodgate" in p.stdout
    for a in ALGORITHMS:
        assert a in p.stdout
    for cmd in COMMANDS:
        assert cmd[0] in p.stdout
    for flag in ("version", "--version"):
        p = run(flag)
        assert p.returncode == 0 and p.stdout.strip() == "floodgate 0.1.0"


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_command_has_help(cmd):
    p = run(*cmd, "--help")
    assert p.returncode == 0, p.stderr
    assert p.stderr == "" and "usage" in p.stdout
    assert "floodgate " + " ".join(cmd) in p.stdout


def test_no_command_prints_usage_and_fails():
    p = run()
    assert p.returncode == 2 and "usage: floodgate" in p.stderr


# -- mem: ----------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_check_on_mem_allows_a_first_request(algorithm):
    rc, d = run_json("check", "k", algorithm, *ARGS[algorithm])
    assert rc == 0
    assert d == {"allowed": True, "limit": 10, "remaining": 9, "retry_after_ms": -1,
                 "reset_after_ms": d["reset_after_ms"], "source": "memory"}
    # One unit back takes 100 ms for a bucket; a window key lasts a window
    # (the sliding window's counter, two).
    assert 0 < d["reset_after_ms"] <= 2000


def test_check_readable_output():
    p = run("check", "k", "token", "10", "1")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[0] == "allowed"
    fields = dict(line.split() for line in lines[1:])
    assert fields == {"limit": "10", "remaining": "9", "retry_after_ms": "-1",
                      "reset_after_ms": "1000", "source": "memory"}


def test_denied_exits_1():
    # A cost above the limit can never fit: denied, retry_after -1.
    rc, d = run_json("check", "--cost", "11", "k", "fixed", "10", "1000")
    assert rc == 1
    assert d["allowed"] is False and d["retry_after_ms"] == -1 and d["remaining"] == 10
    p = run("check", "--cost=11", "k", "gcra", "10", "10", "1000")
    assert p.returncode == 1 and p.stdout.splitlines()[0] == "denied"


def test_peek_takes_nothing():
    rc, d = run_json("peek", "--cost", "10", "k", "slidelog", "10", "1000")
    assert rc == 0 and d["remaining"] == 0
    rc, d = run_json("peek", "--cost", "0", "k", "leaky", "3", "1")
    assert rc == 0 and d["remaining"] == 3
    rc, d = run_json("peek", "--cost", "4", "k", "leaky", "3", "1")
    assert rc == 1 and not d["allowed"]


def test_options_anywhere():
    rc, d = run_json("check", "k", "token", "10", "1", "--cost", "2", "--url", "mem:")
    assert rc == 0 and d["remaining"] == 8


def test_reset_on_mem():
    p = run("reset", "k")
    assert p.returncode == 0 and p.stdout.strip() == "(no state)"
    assert run_json("reset", "k") == (0, {"existed": False})


def test_inspect_on_mem():
    # A fresh process has a fresh table: no state.
    p = run("inspect", "k")
    assert p.returncode == 1 and p.stdout.strip() == "(no state)"


def test_url_from_the_environment():
    # An unreachable server named by FLOODGATE_URL is used, and --url wins.
    port = harness.free_port()
    env = {"FLOODGATE_URL": "redis://127.0.0.1:%d" % port}
    assert_error(run("check", "k", "token", "1", "1", env=env), "io")
    assert run("check", "--url", "mem:", "k", "token", "1", "1", env=env).returncode == 0


# -- bad arguments -------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["frob"], ["unknown command"]),
    (["check"], ["KEY ALGORITHM"]),
    (["check", "k"], ["KEY ALGORITHM"]),
    (["check", "k", "bucket", "1", "1"], ["unknown algorithm 'bucket'"]),
    (["check", "k", "token", "10"], ["token takes CAPACITY RATE_PER_SEC"]),
    (["check", "k", "gcra", "10", "10"], ["gcra takes CAPACITY COUNT PERIOD_MS"]),
    (["check", "k", "gcra", "10", "10", "1e400"], ["PERIOD_MS must be a decimal number"]),
    (["check", "k", "fixed", "10", "1000", "5"], ["fixed takes"]),
    (["check", "k", "fixed", "ten", "1000"], ["LIMIT must be an integer, not 'ten'"]),
    (["check", "k", "fixed", "10", "inf"], ["WINDOW_MS must be a decimal number"]),
    (["check", "k", "token", "10", "nan"], ["must be a decimal number"]),
    (["check", "k", "token", "10", "0x10"], ["must be a decimal number"]),
    (["check", "k", "token", "10", "1e"], ["must be a decimal number"]),
    (["check", "k", "token", "10", " 1"], ["must be a decimal number"]),
    (["check", "k", "token", "10", ""], ["must be a decimal number"]),
    (["check", "k", "fixed", "0", "1000"], ["invalid", "limit"]),
    (["check", "k", "token", "-1", "1"], ["invalid", "capacity"]),
    (["check", "k", "slidelog", "100001", "1000"], ["invalid", "100000"]),
    (["check", "k", "token", "10", "0"], ["invalid"]),
    (["check", "--cost", "-1", "k", "token", "1", "1"], ["invalid", "COST"]),
    (["check", "--cost", "x", "k", "token", "1", "1"], ["--cost must be an integer"]),
    (["check", "k", "token", "1", "1", "--cost"], ["--cost needs a value"]),
    (["check", "--frob", "k", "token", "1", "1"], ["unknown option '--frob'"]),
    (["check", "--url", "bogus://", "k", "token", "1", "1"], ["invalid", "URL"]),
    (["inspect"], ["inspect takes one KEY"]),
    (["reset", "a", "b"], ["reset takes one KEY"]),
    (["reset", "--cost", "1", "k"], ["unknown option '--cost'"]),
    (["simulate", "--frob"], ["simulate takes"]),
])
def test_bad_arguments_exit_2(args, words):
    assert_error(run(*args), *words)


def test_unreachable_server_exits_2():
    port = harness.free_port()
    url = "redis://127.0.0.1:%d" % port
    for args in (["check", "k", "token", "1", "1"], ["peek", "k", "token", "1", "1"],
                 ["inspect", "k"], ["reset", "k"]):
        assert_error(run(args[0], "--url", url, *args[1:]), "io")


def test_connect_failure_names_the_address_and_the_reason():
    port = harness.free_port()
    p = run("check", "--url", "redis://127.0.0.1:%d" % port, "k", "token", "1", "1")
    assert_error(p, "io: cannot connect to 127.0.0.1:%d: Connection refused" % port)
    p = run("inspect", "--url", "unix:///nonexistent/floodgate.sock", "k")
    assert_error(p, "cannot connect to /nonexistent/floodgate.sock: No such file or directory")


def test_the_reason_reaches_another_thread_within_the_reconnect_delay():
    """fg_open's failed connect, then a check from another thread that the
    delay keeps from trying again (tests/client/reconnect_reason.c): the
    reason the tool prints comes from the connection, not the thread."""
    program = os.path.join(harness.REPO, "build", "client", "reconnect_reason")
    subprocess.run(["make", "-C", harness.REPO, "build/client/reconnect_reason"], check=True,
                   stdout=subprocess.DEVNULL)
    port = harness.free_port()
    for _ in range(5):  # a run slower than the 100 ms delay proves nothing
        out = subprocess.run([program, "redis://127.0.0.1:%d" % port], capture_output=True,
                             text=True, check=True, timeout=30).stdout.splitlines()
        assert out[0] == "io: cannot connect to 127.0.0.1:%d: Connection refused" % port
        if int(out[1].split("=")[1]) < 100:
            return
    pytest.fail("no run within the reconnect delay")


def test_invalid_url_names_every_form():
    p = run("check", "--url", "http://127.0.0.1", "k", "token", "1", "1")
    assert_error(p, "invalid URL", "redis://", "unix://", "redis+cluster://", "mem:")


# -- against a server ----------------------------------------------------------

@pytest.fixture
def url(r, server):
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A flushed backends.Target: the session's module server, the stock
    server, the stock cluster."""
    return of_param(request, flush_session=True)


# The longest fixed window (10^12 ms): windows start at multiples of it
# since the epoch, the next in 2033, so the test's calls share one window
# whatever the wall clock says (a minute's window may roll over between them).
LONG_WINDOW_MS = "1000000000000"


def test_check_peek_inspect_reset_on_a_server(backend):
    url, r = backend.url, backend.client()
    decisions = [run_json("check", "--url", url, "u", "fixed", "2", LONG_WINDOW_MS)
                 for _ in range(3)]
    assert [rc for rc, _ in decisions] == [0, 0, 1]
    assert [d["remaining"] for _, d in decisions] == [1, 0, 0]
    assert all(d["source"] == "server" for _, d in decisions)
    assert 0 < decisions[2][1]["retry_after_ms"] <= int(LONG_WINDOW_MS)

    rc, d = run_json("peek", "--url", url, "u", "fixed", "2", LONG_WINDOW_MS)
    assert rc == 1 and d["remaining"] == 0

    p = run("inspect", "--url", url, "u")
    assert p.returncode == 0
    assert p.stdout.startswith("type=fixed ") and " count=2 " in p.stdout
    rc, d = run_json("inspect", "--url", url, "u")
    assert rc == 0 and d["key"] == "u"
    assert d["state"] == {"type": "fixed", "window_start_us": d["state"]["window_start_us"],
                          "count": 2, "pttl": d["state"]["pttl"]}
    assert isinstance(d["state"]["window_start_us"], int) and d["state"]["pttl"] > 0

    assert run_json("reset", "--url", url, "u") == (0, {"existed": True})
    assert r.exists("u") == 0
    assert run_json("reset", "--url", url, "u") == (0, {"existed": False})
    p = run("inspect", "--url", url, "u")
    assert p.returncode == 1 and p.stdout.strip() == "(no state)"
    assert run_json("inspect", "--url", url, "u") == (1, {"key": "u", "state": None})


def test_server_state_is_shared_between_runs(backend):
    url = backend.url
    rc, d = run_json("check", "--url", url, "--cost", "3", "b", "token", "5", "1")
    assert rc == 0 and d["remaining"] == 2
    # FG.LEAKY and FG.GCRA share the bucket state.
    rc, d = run_json("peek", "--url", url, "b", "leaky", "5", "1")
    assert rc == 0 and d["remaining"] in (1, 2)
    assert run_json("inspect", "--url", url, "b")[1]["state"]["type"] == "bucket"
    if backend.module:
        assert backend.client().execute_command("FG.INSPECT", "b") is not None
    rc, d = run_json("check", "--url", url, "--cost", "5", "b", "gcra", "5", "1", "1000")
    assert rc == 1 and d["retry_after_ms"] > 0


def test_peek_writes_nothing_on_a_server(backend):
    url, r = backend.url, backend.client()
    rc, d = run_json("peek", "--url", url, "p", "slidelog", "3", "1000")
    assert rc == 0 and d["remaining"] == 2
    assert r.exists("p") == 0


def test_server_errors_exit_2(backend):
    url, r = backend.url, backend.client()
    r.set("plain", "x")
    assert_error(run("check", "--url", url, "plain", "token", "1", "1"), "wrongtype")
    # a sliding log keeps its key 10 minutes after the request (a fixed
    # window's key ends with its clock-aligned window: maybe at once)
    assert run("check", "--url", url, "w", "slidelog", "1", "600000").returncode == 0
    assert_error(run("check", "--url", url, "w", "token", "1", "1"), "wrongtype")


def test_json_escapes_keys(backend):
    url = backend.url
    key = 'a"b\\c'
    run("check", "--url", url, key, "token", "2", "1")
    rc, d = run_json("inspect", "--url", url, key)
    assert rc == 0 and d["key"] == key


# -- simulate ------------------------------------------------------------------

SCENARIOS = ["steady", "bursty", "boundary"]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def simulation(tmp_path_factory):
    out = tmp_path_factory.mktemp("simulate")
    p = run("simulate", "--out", out)
    assert p.returncode == 0, p.stderr
    return out, p.stdout


def test_simulate_writes_one_row_per_request_and_algorithm(simulation):
    out, _ = simulation
    for name in SCENARIOS:
        rows = read_csv(out / (name + ".csv"))
        assert list(rows[0].keys()) == ["time_ms", "algorithm", "allowed"]
        by_algorithm = {}
        for row in rows:
            assert row["allowed"] in ("0", "1")
            by_algorithm.setdefault(row["algorithm"], []).append(int(row["time_ms"]))
        assert sorted(by_algorithm) == sorted(ALGORITHMS)
        times = by_algorithm["fixed"]
        assert times == sorted(times) and len(times) > 20
        assert all(t == times for t in by_algorithm.values())


def allowed(rows, algorithm, lo=float("-inf"), hi=float("inf")):
    return sum(int(r["allowed"]) for r in rows
               if r["algorithm"] == algorithm and lo <= int(r["time_ms"]) < hi)


def test_simulate_boundary_shows_the_fixed_window_burst(simulation):
    out, _ = simulation
    rows = read_csv(out / "boundary.csv")
    # Around the window boundary at 1000 ms: the fixed window admits a full
    # window on each side, the sliding log only the limit.
    assert allowed(rows, "fixed", 500, 1500) == 20
    assert allowed(rows, "slidelog", 500, 1500) == 10
    assert allowed(rows, "fixed", 1000, 1500) == 10
    assert allowed(rows, "slidelog", 1000, 1500) == 0


def test_simulate_peaks(simulation):
    out, stdout = simulation
    peaks = {}
    for name in SCENARIOS:
        for row in read_csv(out / (name + "-1s.csv")):
            key = (name, row["algorithm"])
            peaks[key] = max(peaks.get(key, 0), int(row["allowed_last_1s"]))
    for name in SCENARIOS:
        # The sliding log is exact: never more than the limit in any second.
        assert peaks[(name, "slidelog")] == 10
    assert peaks[("boundary", "fixed")] == 20
    # A bucket allows its capacity at once, then its rate: 10 + 9 in 950 ms.
    assert peaks[("steady", "token")] == 19
    assert "peak in 1 s" in stdout and "sliding log" in stdout


def test_simulate_buckets_agree(simulation):
    # Token bucket, leaky bucket and GCRA are one algorithm (docs/design.md).
    out, _ = simulation
    for name in SCENARIOS:
        rows = read_csv(out / (name + ".csv"))
        seq = {a: [r["allowed"] for r in rows if r["algorithm"] == a]
               for a in ("token", "leaky", "gcra")}
        assert seq["token"] == seq["leaky"] == seq["gcra"]


def test_simulate_is_deterministic(simulation, tmp_path):
    out, _ = simulation
    assert run("simulate", "--out=%s" % tmp_path).returncode == 0
    for name in SCENARIOS:
        for suffix in (".csv", "-1s.csv"):
            assert (tmp_path / (name + suffix)).read_bytes() == \
                (out / (name + suffix)).read_bytes()


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot not installed")
def test_simulate_plot(tmp_path):
    p = run("simulate", "--out", tmp_path, "--plot")
    assert p.returncode == 0, p.stderr
    for name in SCENARIOS:
        assert (tmp_path / (name + ".png")).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / (name + ".gp")).exists()


def test_simulate_unwritable_dir_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_error(run("simulate", "--out", blocker / "sub"))


# -- families: locks, semaphores, Bloom filters, unique counters ----------------

def test_lock_take_extend_release(r, url):
    rc, d = run_json("lock", "take", "--url", url, "order:7", "--owner", "w1",
                     "--lease", "60000")
    assert rc == 0 and d["acquired"] is True and d["owner"] == "w1" and d["holds"] == 1
    assert d["token"] > 0 and 0 < d["ttl_ms"] <= 60000
    # another owner is refused, and told how long until it could be granted
    rc, d2 = run_json("lock", "take", "--url", url, "order:7", "--owner", "w2")
    assert rc == 1 and d2["acquired"] is False and d2["token"] == 0 and d2["ttl_ms"] > 0
    # waiting in the server's queue ends with the wait (the lease is a minute)
    rc, _ = run_json("lock", "take", "--url", url, "order:7", "--owner", "w2", "--wait", "20")
    assert rc == 1
    assert run_json("lock", "extend", "--url", url, "order:7", "--owner", "w1") == \
        (0, {"extended": True})
    assert run_json("lock", "extend", "--url", url, "order:7", "--owner", "w2") == \
        (1, {"extended": False})
    assert run_json("lock", "release", "--url", url, "order:7", "--owner", "w1") == \
        (0, {"released": True, "holds_left": 0})
    p = run("lock", "release", "--url", url, "order:7", "--owner", "w1")
    assert p.returncode == 1 and p.stdout.strip() == "(not held)"
    # free again: a wait is granted at once, with a larger token
    rc, d3 = run_json("lock", "take", "--url", url, "order:7", "--owner", "w2", "--wait", "5000")
    assert rc == 0 and d3["acquired"] and d3["token"] > d["token"]


def test_lock_take_prints_a_fresh_owner(r, url):
    p = run("lock", "take", "--url", url, "job:1", "--shared")
    assert p.returncode == 0
    lines = dict(line.split() for line in p.stdout.splitlines()[1:])
    assert p.stdout.startswith("acquired\n") and len(lines["owner"]) == 32
    assert run("lock", "release", "--url", url, "job:1", "--owner", lines["owner"]).returncode == 0


def test_lock_reentrant_holds(r, url):
    for holds in (1, 2):
        rc, d = run_json("lock", "take", "--url", url, "re:1", "--owner", "a", "--reentrant")
        assert rc == 0 and d["holds"] == holds
    p = run("lock", "release", "--url", url, "re:1", "--owner", "a")
    assert p.returncode == 0 and p.stdout.strip() == "released, 1 hold left"


def test_semaphore_acquire_release(r, url):
    rc, d = run_json("semaphore", "acquire", "--url", url, "pool:db", "3", "--permits", "2",
                     "--owner", "req-1", "--lease", "60000")
    assert rc == 0 and d["acquired"] and d["holds"] == 2
    rc, d = run_json("semaphore", "acquire", "--url", url, "pool:db", "3", "--permits", "2",
                     "--owner", "req-2")
    assert rc == 1 and not d["acquired"]
    assert run_json("semaphore", "release", "--url", url, "pool:db", "--owner", "req-1",
                    "--permits", "1") == (0, {"released": True, "permits_left": 1})
    assert run_json("semaphore", "release", "--url", url, "pool:db", "--owner", "req-1") == \
        (0, {"released": True, "permits_left": 0})
    assert run_json("semaphore", "release", "--url", url, "pool:db", "--owner", "req-1") == \
        (1, {"released": False, "permits_left": -1})


def test_bloom_reserve_add_exists_card(r, url):
    assert run_json("bloom", "reserve", "--url", url, "seen:urls", "--capacity", "1000",
                    "--error", "0.001") == (0, {"reserved": True})
    assert r.execute_command("BF.INFO", "seen:urls", "CAPACITY") == [1000]
    p = run("bloom", "add", "--url", url, "seen:urls", "/a", "/b", "/a")
    assert p.returncode == 0 and p.stdout.splitlines() == ["added /a", "added /b", "present /a"]
    assert run_json("bloom", "exists", "--url", url, "seen:urls", "/a", "/b") == \
        (0, {"exists": {"/a": True, "/b": True}})
    rc, d = run_json("bloom", "exists", "--url", url, "seen:urls", "/a", "/never")
    assert rc == 1 and d == {"exists": {"/a": True, "/never": False}}
    assert run_json("bloom", "card", "--url", url, "seen:urls") == (0, {"card": 2})
    # BF.RESERVE's own checks and messages, and nothing created
    assert_error(run("bloom", "reserve", "--url", url, "bf:bad", "--error", "2"),
                 "invalid", "error rate")
    assert_error(run("bloom", "reserve", "--url", url, "seen:urls"), "item exists")
    assert r.exists("bf:bad") == 0


def test_distinct_add_and_count(r, url, explicit_time):
    # One instant for every add (regression: at the server's clock, a
    # second add that fell in the next second could answer "changed", as
    # FG.UVADD may when its staircase moves: the test failed in CI).
    sec, usec = r.time()
    at = str(sec * 1_000_000 + usec)
    p = run("distinct", "add", "--url", url, "uv:{site}:home", "alice", "bob", "--at", at)
    assert p.returncode == 0 and p.stdout.strip() == "changed"
    assert run_json("distinct", "add", "--url", url, "uv:{site}:home", "alice", "--at", at) == \
        (0, {"changed": False})
    run("distinct", "add", "--url", url, "uv:{site}:about", "carol", "alice", "--at", at)
    assert run_json("distinct", "count", "--url", url, "uv:{site}:home", "uv:{site}:about",
                    "--last", "1d") == (0, {"count": 3})
    p = run("distinct", "count", "--url", url, "uv:{site}:home", "--last", "24h")
    assert p.returncode == 0 and p.stdout.strip() == "2"


def test_distinct_at_an_explicit_time(t, timed):
    url = "redis://127.0.0.1:%d" % timed.port
    at = 1700000000 * 1000000  # a whole second
    now_s = int(t.time()[0])
    assert now_s > 1700000000 + 86400  # the test's time is in the counter's past
    assert run_json("distinct", "add", "--url", url, "uv:at", "x", "--at", at) == \
        (0, {"changed": True})
    # the counter's exact span is 7 days from its newest second: count [at, at+1s)
    assert run_json("distinct", "count", "--url", url, "uv:at", "--from", at,
                    "--to", at + 1000000) == (0, {"count": 1})
    assert run_json("distinct", "count", "--url", url, "uv:at", "--from", at + 1000000,
                    "--to", at + 2000000) == (0, {"count": 0})


@pytest.mark.parametrize("args,words", [
    (["lock", "take", "k"], ["lock take changes a server's state", "--url"]),
    (["semaphore", "acquire", "k", "1"], ["mem:", "--url"]),
    (["bloom", "add", "k", "x"], ["mem:", "--url"]),
    (["distinct", "add", "k", "x"], ["mem:", "--url"]),
    (["policy", "delete", "p"], ["mem:", "--url"]),
    (["lock"], ["lock needs take, release, extend or info"]),
    (["lock", "frob"], ["unknown lock subcommand 'frob'"]),
    (["lock", "take", "--frob", "k"], ["unknown option '--frob' for lock take"]),
    (["lock", "take", "--url", "mem:", "--lease", "x", "k"], ["--lease must be an integer"]),
    (["bloom", "reserve", "--url", "mem:", "k", "--expansion", "1.5"],
     ["--expansion must be an integer"]),
    (["distinct", "count", "--url", "redis://127.0.0.1:1", "k"], ["needs --last"]),
    (["distinct", "count", "--url", "mem:", "k", "--last", "24x"], ["--last must be"]),
    (["distinct", "count", "--url", "mem:", "k", "--from", "1"], ["--from and --to go together"]),
    (["semaphore", "acquire", "--url", "redis://127.0.0.1:1", "k", "many"], ["CAPACITY must be an integer"]),
])
def test_family_errors_exit_2(args, words):
    assert_error(run(*args), *words)


def test_release_and_extend_need_an_owner(r, url):
    assert_error(run("lock", "release", "--url", url, "k"), "needs --owner")
    assert_error(run("lock", "extend", "--url", url, "k"), "needs --owner")
    assert_error(run("semaphore", "release", "--url", url, "k"), "needs --owner")


# -- policy apply needs a server ------------------------------------------------

POLICY_FILE = """
policies = (
  { name = "api.search";
    limits = ( { algorithm = "token"; capacity = 10; rate = 10.0; } );
    allowlist = { items = [ "10.0.0.1" ]; }; }
);
"""


def test_policy_apply_refuses_mem(tmp_path):
    conf = tmp_path / "policies.conf"
    conf.write_text(POLICY_FILE)
    assert_error(run("policy", "apply", conf), "policy apply changes a server's state",
                 "--url", "--dry-run")
    p = run("policy", "apply", conf, "--dry-run")
    assert p.returncode == 0 and p.stdout.strip() == "%s: 1 policy, valid (nothing sent)" % conf


def test_policy_apply_on_a_server(backend, tmp_path):
    url = backend.url
    conf = tmp_path / "policies.conf"
    conf.write_text(POLICY_FILE)
    p = run("policy", "apply", conf, "--url", url)
    assert p.returncode == 0 and p.stdout.strip() == "applied 1 policy"
    # policies outlive FLUSHALL: other tests' may be on the session server
    assert "api.search" in run_json("policy", "list", "--url", url)[1]
    if backend.module:
        assert b"api.search" in backend.client().execute_command("FG.POLICY", "LIST")
    p = run("policy", "show", "api.search", "--url", url)
    assert "allowlist       exact, 1 entry\n" in p.stdout
    assert "denylist        exact, 0 entries\n" in p.stdout
    # --dry-run sends nothing, whatever the URL
    assert run_json("policy", "delete", "api.search", "--url", url) == (0, {"deleted": True})
    assert run_json("policy", "apply", conf, "--url", url, "--dry-run") == (0, {"valid": 1})
    assert "api.search" not in run_json("policy", "list", "--url", url)[1]
    if backend.module:
        assert b"api.search" not in backend.client().execute_command("FG.POLICY", "LIST")


def test_lock_take_waits_without_limit_at_minus_one(r, url):
    """--wait -1 waits as long as it takes (it was taken as no --wait)."""
    run("lock", "take", "--url", url, "order:10", "--owner", "w1", "--lease", "300")
    p = run("lock", "take", "--url", url, "order:10", "--owner", "w2", "--wait", "-1")
    assert p.returncode == 0 and p.stdout.startswith("acquired"), p.stdout + p.stderr


def test_lock_info(r, url):
    run("lock", "take", "--url", url, "order:9", "--owner", "w1", "--lease", "60000")
    rc, d = run_json("lock", "info", "--url", url, "order:9")
    assert rc == 0 and d["kind"] == "lock" and d["used"] == 1 and d["waiters"] == []
    assert d["holders"][0][0] == "w1" and isinstance(d["next_token"], int)
    p = run("lock", "info", "--url", url, "order:9")
    assert p.returncode == 0 and p.stdout.startswith('kind            "lock"\n')
    assert run_json("lock", "info", "--url", url, "order:none") == (1, None)


# -- doctor --------------------------------------------------------------------

def doctor(port, *args):
    return run("doctor", "redis://127.0.0.1:%d" % port, *args)


def test_doctor_on_a_safe_server(r, server):
    p = doctor(server.port)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok      module floodgate 0.1.0" in p.stdout
    for family in ("ratelimit", "locks", "bloom", "uv", "policies", "gcra"):
        assert "command family %s registered" % family in p.stdout
    assert "note    maxmemory-policy noeviction" in p.stdout and "hazard" not in p.stdout
    assert "a single server" in p.stdout
    rc, d = run_json("doctor", "redis://127.0.0.1:%d" % server.port)
    assert rc == 0 and d["hazards"] == 0
    assert {f["level"] for f in d["findings"]} <= {"ok", "note"}


@pytest.mark.parametrize("args,hazard", [
    (["--maxmemory-policy", "allkeys-lru"], "maxmemory-policy allkeys-lru can evict any key"),
    (["--maxmemory-policy", "volatile-ttl"], "maxmemory-policy volatile-ttl can evict keys"),
    (["--floodgate.explicit-time", "yes"], "floodgate.explicit-time is on"),
    (["--floodgate.enable-effect-commands", "yes"], "user 'default' may send the effect"),
])
def test_doctor_names_a_hazard_and_exits_1(args, hazard):
    with harness.Server(args) as s:
        p = doctor(s.port)
    assert p.returncode == 1, p.stdout + p.stderr
    assert any(line.startswith("hazard") and hazard in line for line in p.stdout.splitlines())


def test_doctor_without_the_module():
    """A stock server is no hazard: the library runs its scripts there."""
    with harness.Server(module=False) as s:
        p = doctor(s.port)
    assert "note    no module" in p.stdout and "server scripts" in p.stdout, p.stdout
    assert p.returncode == 0, p.stdout


def test_doctor_on_an_unreachable_server():
    port = harness.free_port()
    assert_error(doctor(port), "cannot connect to 127.0.0.1:%d: Connection refused" % port)
    assert_error(run("doctor", "http://x"), "invalid URL", "redis+cluster://")
    assert_error(run("doctor"), "mem: is no server")


# -- bash completion -----------------------------------------------------------

COMPLETION = os.path.join(harness.REPO, "src", "cli", "completion.bash")


def complete(*words):
    """What src/cli/completion.bash offers for the last of words."""
    script = ('source "$0"; COMP_WORDS=(floodgate "$@"); COMP_CWORD=$#; _floodgate; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "-c", script, COMPLETION] + list(words), capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return sorted(w for w in p.stdout.split("\n") if w)


def test_completion_of_commands_subcommands_and_options():
    assert {"check", "lock", "semaphore", "bloom", "distinct", "policy", "doctor"} <= \
        set(complete(""))
    assert complete("lo") == ["lock"]
    assert complete("lock", "") == ["extend", "info", "release", "take"]
    assert complete("bloom", "") == ["add", "card", "exists", "reserve"]
    assert complete("policy", "ap") == ["apply"]
    assert complete("semaphore", "acquire", "k", "--p") == ["--permits"]
    assert complete("lock", "take", "k", "--") == sorted(
        ["--owner", "--lease", "--wait", "--shared", "--reentrant", "--url", "--json", "--help"])
    assert complete("check", "k", "to") == ["token"]
    assert complete("distinct", "count", "k", "--la") == ["--last"]


def test_completion_names_only_options_the_tool_takes():
    # every option the script offers for a subcommand is accepted by it
    for words in (["lock", "take"], ["semaphore", "acquire"], ["bloom", "reserve"],
                  ["distinct", "count"], ["policy", "check"], ["policy", "apply"]):
        for opt in complete(*words, "k", "--"):
            assert opt in run(*words, "--help").stdout, (words, opt)


def test_man_page_covers_every_command_and_option():
    import re
    with open(os.path.join(harness.REPO, "docs", "man", "floodgate.1")) as f:
        man = f.read().replace("\\-", "-")
    for cmd in COMMANDS:
        assert " ".join(cmd) in man, cmd
        for opt in re.findall(r"--[a-z-]+", run(*cmd, "--help").stdout):
            assert opt in man, (cmd, opt)
