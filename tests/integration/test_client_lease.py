"""libfloodgate's token leases (fg_options.lease_units): checks served from
units taken in advance, unused units given back (FG.REFUND), the plain
check after a denied lease, fixed-window leases that end with their window,
and, under load from many threads and clients, the round trips saved and
how far admissions go beyond the bucket (tests/client/lease_load.c).

Leases are the library's: every test runs on the module, a stock server and
a stock 3-master cluster (backends.py), where the lease is taken by the
server script and given back by its FG.REFUND; the load test on a few.
"""

import subprocess
import time

import pytest

from backends import BACKENDS, target
from harness import Server
from test_client import Driver, program

SLOW = "token 100 0.001"  # a bucket that refills nothing during a test


@pytest.fixture
def module_server():
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture(params=BACKENDS)
def server(request):
    """A flushed backends.Target: a module server of the test's own, the
    stock server, the stock cluster."""
    if request.param == "module":
        return target("module", module=request.getfixturevalue("module_server"))
    return target(request.param)


def stats(d):
    f = list(map(int, d("stats").split()[1:]))
    return {"decisions": f[0], "round_trips": f[1], "lease_hits": f[5]}


def server_remaining(s, key):
    """What the server holds of SLOW's bucket at key: the module's FG.PEEK,
    or the library's peek (a client without leases) on a stock server."""
    if s.module:
        return s.client().execute_command("FG.PEEK", "TOKEN", key, 100, 0.001, "COST", 0)[2]
    d = Driver(s.url)
    try:
        return int(d("peek %s %s 0" % (key, SLOW)).split()[3])
    finally:
        d.close()


def test_leases_serve_locally_and_give_back(server):
    d = Driver(server.url, "lease=10", "lease_ms=10000")
    answers = [d("check k %s" % SLOW).split() for _ in range(50)]
    assert all(a[1] == "1" for a in answers)
    assert [a[-1] for a in answers[:11]] == ["server"] + ["lease"] * 9 + ["server"]
    assert answers[0][3] == "99"  # the server's 90 and the 9 this client holds
    assert [a[3] for a in answers[1:10]] == [str(n) for n in range(8, -1, -1)]
    st = stats(d)
    assert st["round_trips"] == 5 and st["lease_hits"] == 45 and st["decisions"] == 50
    assert server_remaining(server, "k") == 50
    for _ in range(3):
        d("check k %s" % SLOW)
    assert server_remaining(server, "k") == 40  # one more lease: 7 units held
    d.close()  # fg_close gives them back
    assert server_remaining(server, "k") == 47


def test_expired_lease_is_given_back(server):
    d = Driver(server.url, "lease=10", "lease_ms=50")
    assert d("check k %s" % SLOW).split()[-1] == "server"
    assert server_remaining(server, "k") == 90
    time.sleep(0.1)
    # One round trip: 9 units back, then a new lease of 10.
    assert d("check k %s" % SLOW).split()[-1] == "server"
    assert stats(d)["round_trips"] == 2
    assert server_remaining(server, "k") == 89
    d.close()
    assert server_remaining(server, "k") == 98


def test_denied_lease_falls_back_to_the_plain_check(server):
    taken = Driver(server.url)
    assert taken("check k %s 97" % SLOW).startswith("ok 1 100 3 ")
    taken.close()
    d = Driver(server.url, "lease=10", "lease_ms=10000")
    r = d("check k %s" % SLOW).split()
    assert r[:5] == ["ok", "1", "100", "2", "-1"] and r[-1] == "server"
    assert stats(d)["round_trips"] == 2  # the denied lease, then the check
    # For lease_ms the key is checked plainly: one round trip each.
    assert d("check k %s" % SLOW).startswith("ok 1 100 1 ")
    assert d("check k %s" % SLOW).startswith("ok 1 100 0 ")
    assert d("check k %s" % SLOW).startswith("ok 0 100 0 ")
    assert stats(d)["round_trips"] == 5
    d.close()


def test_lease_never_larger_than_the_limit(server):
    d = Driver(server.url, "lease=10", "lease_ms=10000")
    sources = [d("check f fixed 5 60000").split() for _ in range(6)]
    assert [s[1] for s in sources] == ["1"] * 5 + ["0"]
    assert [s[-1] for s in sources] == ["server"] + ["lease"] * 4 + ["server"]
    d.close()


def test_what_leases_do_not_touch(server):
    d = Driver(server.url, "lease=10", "lease_ms=10000")
    for line in ("check s sliding 100 60000", "check l slidelog 100 60000",
                 "peek p %s" % SLOW, "check c %s 0" % SLOW, "check big %s 20" % SLOW):
        assert d(line).endswith("server") and d(line).endswith("server"), line
    assert stats(d)["lease_hits"] == 0
    assert d("batch 5 b %s" % SLOW) == "ok 5 server"
    d("check w %s" % SLOW)
    assert d("check w fixed 5 1000").startswith("err wrongtype")
    d.close()


def test_reset_drops_the_lease(server):
    d = Driver(server.url, "lease=10", "lease_ms=10000")
    d("check k %s" % SLOW)
    assert d("reset k") == "ok 1"
    assert d("check k %s" % SLOW).endswith("server")
    d.close()
    assert server_remaining(server, "k") == 99


def in_window(t, window_us):
    return int(t * 1e6) // window_us


@pytest.mark.parametrize("server", ["module", "stock"], indirect=True, scope="function")
def test_fixed_window_leases_end_with_their_window(server):
    """The client decides a check at a time between `before` and `after`
    (its clock is the server's): a lease taken in a known window must not
    serve a check that began in a later one. Runs until 100 checks in 15
    windows were served from leases, however slow the machine."""
    window_ms = 100
    d = Driver(server.url, "lease=1000", "lease_ms=10000")
    taken = None  # the window the current lease was taken in, when known
    served = 0
    lease_windows = set()  # the windows in which leases served checks
    deadline = time.monotonic() + 60
    while served < 100 or len(lease_windows) < 15:
        assert time.monotonic() < deadline, (served, len(lease_windows))
        before = time.time()
        r = d("check f fixed 100000 %d" % window_ms).split()
        after = time.time()
        assert r[1] == "1"
        w0, w1 = in_window(before, window_ms * 1000), in_window(after, window_ms * 1000)
        if r[-1] == "server":
            taken = w0 if w0 == w1 else None
        elif taken is not None:
            assert w0 == taken, "a lease served in a later window"
            served += 1
            lease_windows.add(taken)
        time.sleep(0.002)
    assert stats(d)["round_trips"] >= len(lease_windows)  # one lease per window at least
    d.close()


def run_load(s, key, threads, clients, capacity, rate, lease_units, lease_ms, pause_us,
             burst_period_ms, seconds=2):
    out = subprocess.run([program("lease_load"), s.url, key, str(threads), str(clients),
                          str(seconds), str(capacity), str(rate), str(lease_units),
                          str(lease_ms), str(pause_us), str(burst_period_ms)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    windows, total = [], None
    for line in out.stdout.splitlines():
        f = line.split()
        if f[0] == "window":
            windows.append((float(f[1]), int(f[2]), float(f[3]), float(f[4])))
        else:
            total = dict(zip(["decisions", "round_trips", "lease_hits", "admitted", "errors"],
                             map(int, f[1:])))
    return windows, total


LOADS = {
    # threads, clients, pause_us, burst period (ms): see lease_load.c
    "saturated": (4, 2, 0, 0),
    "below the rate": (4, 1, 600, 0),
    "bursts after quiet": (4, 2, 1000, 50),
    "bursts, 4 clients": (4, 4, 1000, 50),
}


# every load on the module, one on a stock server (2 s each)
@pytest.mark.parametrize("server, load", [("module", load) for load in sorted(LOADS)] +
                         [("stock", "below the rate")], indirect=["server"], scope="function")
def test_over_admission_is_bounded(server, load):
    threads, clients, pause_us, burst = LOADS[load]
    capacity, rate, lease_ms = 100, 10000, 5
    windows, total = run_load(server, "bucket", threads, clients, capacity, rate, 20, lease_ms,
                              pause_us, burst)
    assert total["errors"] == 0
    worst = max(count / allowed - 1 for _, count, allowed, _ in windows)
    ratio = total["decisions"] / max(total["round_trips"], 1)
    print("\nleases, %s: %d decisions, %d round trips (%.1f decisions per round trip), "
          "%d admitted; worst over-admission %.1f%% of what the bucket allows "
          "(bound: %d units = rate x lease_ms)" % (
              load, total["decisions"], total["round_trips"], ratio, total["admitted"],
              100 * max(worst, 0), rate * lease_ms // 1000))
    for d_ms, count, allowed, bound in windows:
        print("  %6g ms: at most %d admitted, bucket %g, bound %g" % (d_ms, count, allowed, bound))
        assert count <= bound + 1, (d_ms, count, bound)
    if load == "below the rate":
        assert ratio >= 15, ratio
