"""The Python binding under threads that race its lifetime (issue 24):
close() while other threads are inside calls, set_policy_loader() while
checks run the loader it replaces, the lost-lock callbacks closing or
calling their client, and clients collected on any thread, the renewal
thread among them. Whatever the interleaving, every call answers, finishes
or raises floodgate.Error, and the interpreter never crashes.

Each scenario runs in a Python of its own (this file run as a script), so
that a crash or a hang is a failed test, not a dead pytest; it loads the
package this pytest imported. Scenarios count rounds and calls, never
time: threads meet on semaphores and joins, and the time limit is only
there to turn a hang into a failure (with every thread's stack).

close() under calls and the loader replaced under policy checks run on a
stock server too (backends.py), where each connection learns its dialect
as it opens and the policies are the server scripts' (calls the scripts
do not have, Bloom filters or locks, answer an error: an answer too).
"""

import faulthandler
import gc
import os
import subprocess
import sys
import threading

import pytest

import floodgate
from backends import target

HANG_S = 300  # far beyond a scenario's run, loaded machine or not: only a hang reaches it


def url_of(server):
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture(params=["mem", "redis"])
def url(request):
    if request.param == "mem":
        return "mem:"
    if request.param == "stock":
        return target("stock").url
    return url_of(request.getfixturevalue("server"))


WITH_STOCK = pytest.mark.parametrize("url", ["mem", "redis", "stock"], indirect=True,
                                     scope="function")


def started_with(name):
    """A variable of the environment this Python started with: harness.py
    takes a sanitizer's LD_PRELOAD out of os.environ, for the servers, but
    a scenario loads the (sanitized) library and needs it."""
    with open("/proc/self/environ", "rb") as f:
        for var in f.read().split(b"\0"):
            if var.startswith(name.encode() + b"="):
                return var.split(b"=", 1)[1].decode()
    return None


def run(scenario, url, rounds):
    """Runs a scenario in a Python of its own: it must exit 0 and say ok."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(floodgate.__file__)))
    env = dict(os.environ, PYTHONPATH=package, PYTHONFAULTHANDLER="1")
    if started_with("LD_PRELOAD"):
        env["LD_PRELOAD"] = started_with("LD_PRELOAD")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), scenario, url, str(rounds)],
                       env=env, capture_output=True, text=True, timeout=2 * HANG_S)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), \
        "%s on %s: exit %d\n%s\n%s" % (scenario, url, p.returncode, p.stdout[-3000:],
                                       p.stderr[-6000:])


@WITH_STOCK
def test_close_while_threads_call(url):
    run("close_while_calling", url, 60 if url == "mem:" else 20)


def test_close_while_threads_wait_for_locks(url):
    run("close_while_waiting", url, 40 if url == "mem:" else 15)


@WITH_STOCK
def test_loader_replaced_while_checks_call_it(url):
    run("replace_loader", url, 30 if url == "mem:" else 6)


def test_lost_lock_callbacks_close_and_call_their_client(url):
    run("callbacks_close", url, 30 if url == "mem:" else 8)


def test_clients_collected_on_any_thread(url):
    run("collected", url, 30 if url == "mem:" else 8)


def test_redlock_closed_while_threads_call(server):
    run("close_redlock", url_of(server), 20)


def test_filter_shared_and_closed_by_threads():
    run("close_filter", "mem:", 200)


# ------------------------------------------------------------- the scenarios
# Run as `python3 test_python_threads.py <scenario> <url> <rounds>`.

LIMIT = floodgate.token_bucket(1_000_000, 1_000_000)


def calls(c, n):
    """Calls of every kind on client c, the n-th thread's keys."""
    key, owner = "t%d" % n, "owner-%d" % n
    return [
        lambda: c.check(key, LIMIT),
        lambda: c.peek(key, LIMIT, 0),
        lambda: c.check_batch([(key, LIMIT), (key + "b", LIMIT, 2)]),
        lambda: c.inspect(key),
        lambda: c.reset(key + "b"),
        lambda: c.stats(),
        lambda: c.bf_add("bf" + key, "x"),
        lambda: c.bf_mexists("bf" + key, ["a", "b"]),
        lambda: c.distinct_add("uv" + key, "item"),
        lambda: c.distinct_count("uv" + key, floodgate.last(60)),
        lambda: c.policy_check("pol", key),
        lambda: c.policy_names(),
        lambda: c.lock("lk" + key, owner, lease_ms=5000).acquire(),
        lambda: c.unlock("lk" + key, owner),
        lambda: c.extend("lk" + key, owner, 5000),
        lambda: c.semaphore("sem", 4, 1, owner).acquire(),
        lambda: c.semaphore_release("sem", owner),
    ]


def until_closed(c, n, started):
    """Calls on c until one raises because c is closed; any other
    floodgate.Error is an answer too."""
    todo = calls(c, n)
    started.release()
    while True:
        for call in todo:
            try:
                call()
            except floodgate.Error as e:
                if "closed" in e.message:
                    return


def threads(target, count):
    """count threads running target(i), started."""
    ts = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in ts:
        t.start()
    return ts


def join(ts):
    for t in ts:
        t.join()


def set_up(c):
    c.policy_set("pol", floodgate.PolicyDef([LIMIT]))


def close_while_calling(url, rounds):
    """close() at once when every thread is calling: calls in flight finish,
    later ones raise, and the client is freed by the last to return."""
    for _ in range(rounds):
        c = floodgate.Client(url)
        set_up(c)
        started = threading.Semaphore(0)
        ts = threads(lambda i: until_closed(c, i, started), 8)
        for _ in ts:
            started.acquire()
        c.close()
        join(ts)
        check_closed(c)


def check_closed(c):
    try:
        c.check("k", LIMIT)
    except floodgate.Error as e:
        assert "closed" in e.message, e
    else:
        raise AssertionError("a call after close() answered")


def close_while_waiting(url, rounds):
    """close() while threads wait in a lock's queue: a holder that can no
    longer release leaves its lease to end, and the waiters behind it are
    granted then, or time out, and return."""
    for r in range(rounds):
        c = floodgate.Client(url)
        key = "queue%d" % r
        started = threading.Semaphore(0)

        def waiter(i):
            lock = c.lock(key, lease_ms=20, wait_ms=-1 if i % 2 else 30)
            started.release()
            while True:
                try:
                    if lock.acquire():
                        lock.release()
                except floodgate.Error as e:
                    if "closed" in e.message:
                        return
        ts = threads(waiter, 6)
        for _ in ts:
            started.acquire()
        c.close()
        join(ts)
        check_closed(c)


def replace_loader(url, rounds):
    """set_policy_loader() over and over while threads check policies the
    client lacks, each check calling the loader in place, and then
    close(): a replaced loader lives until no check can still be in it."""
    for r in range(rounds):
        c = floodgate.Client(url)
        started = threading.Semaphore(0)
        definition, loaded = floodgate.PolicyDef([LIMIT]), []

        def new_loader():
            def load(name):
                sum(range(200))  # a while in the loader, for the GIL to pass
                if not name.endswith("7"):
                    return None
                loaded.append(name)
                return definition
            return load

        def checker(i):
            started.release()
            n = 0
            while True:
                n += 1
                try:
                    c.policy_check("p%d-%d-%d" % (r, i, n), "k")
                except floodgate.Error as e:
                    if "closed" in e.message:
                        return
        c.set_policy_loader(new_loader())
        ts = threads(checker, 6)
        for _ in ts:
            started.acquire()
        for n in range(1, 300):
            c.set_policy_loader(new_loader() if n % 5 else None)
        c.close()
        join(ts)
        with floodgate.Client(url) as other:  # a server keeps policies past FLUSHALL
            for name in loaded:
                other.policy_delete(name)


class Clock:
    """mem:'s clock, moved by the scenario (unix microseconds)."""

    def __init__(self):
        self.now = 1_800_000_000_000_000

    def __call__(self):
        return self.now


def lose(url, c, clock, locks):
    """Makes every renewed lock of c lost: on mem: its clock ends their
    leases; on a server another client releases them."""
    if url == "mem:":
        clock.now += 3_600_000_000
        return
    with floodgate.Client(url) as other:
        for lock in locks:
            other.unlock(lock.key, lock.owner)


def callbacks_close(url, rounds):
    """Lost-lock callbacks that call their client and close it, on the
    renewal thread (fg_close joins that thread), while the main thread
    closes it as well."""
    for r in range(rounds):
        clock = Clock()
        c = floodgate.Client(url, clock=clock if url == "mem:" else None)
        reported = threading.Semaphore(0)

        def on_lost(key, owner, reason, c=c):
            try:
                c.check(key + ":after", LIMIT)
                c.stats()
                c.close()
            except floodgate.Error as e:
                assert "closed" in e.message, e
            finally:
                reported.release()
        locks = [c.lock("cb%d:%d" % (r, i), lease_ms=60, renew=True, on_lost=on_lost)
                 for i in range(8)]
        for lock in locks:
            assert lock.acquire()
        lose(url, c, clock, locks)
        # One reported (its close may keep the rest from ever being): close
        # while the others may be running.
        reported.acquire()
        c.close()
        check_closed(c)


def collected(url, rounds):
    """Clients whose last reference their own lost-lock callback drops, on
    the renewal thread: by letting it go, or by collecting the reference
    cycle it is in there; other threads collect meanwhile."""
    for r in range(rounds):
        clock = Clock()
        reported = threading.Semaphore(0)
        keep = {}  # the locks (and so their clients) until their loss

        def on_lost(key, owner, reason):
            lock = keep.pop(key)
            lock.client.stats()
            del lock
            gc.collect()  # the cycles among them
            reported.release()
        for i in range(6):
            c = floodgate.Client(url, clock=clock if url == "mem:" else None)
            lock = c.lock("gc%d:%d" % (r, i), lease_ms=60, renew=True, on_lost=on_lost)
            if i % 2:
                lock.cycle = lock  # only the collector frees this one
            keep[lock.key] = lock  # before a loss, which a starved renewal may bring early
            assert lock.acquire()
            lose(url, c, clock, [lock])
        del c, lock
        collectors = threads(lambda i: [gc.collect() for _ in range(20)], 3)
        for _ in range(6):
            reported.acquire()
        join(collectors)


def close_redlock(url, rounds):
    """close() while threads acquire, extend and release through a Redlock."""
    for r in range(rounds):
        rl = floodgate.Redlock([url], server_timeout_ms=500)
        started = threading.Semaphore(0)

        def caller(i):
            started.release()
            while True:
                try:
                    rl.acquire("rl%d:%d" % (r, i), "o%d" % i, 1000)
                    rl.extend("rl%d:%d" % (r, i), "o%d" % i, 1000)
                    rl.release("rl%d:%d" % (r, i), "o%d" % i)
                except floodgate.Error as e:
                    if "closed" in e.message:
                        return
        ts = threads(caller, 4)
        for _ in ts:
            started.acquire()
        rl.close()
        join(ts)


def close_filter(url, rounds):
    """Threads adding to and asking one filter (fg_filter is not
    thread-safe: the binding makes them take turns), then close()."""
    for r in range(rounds):
        f = floodgate.Filter(capacity=50, expansion=2)
        started = threading.Semaphore(0)

        def user(i):
            started.release()
            n = 0
            while True:
                n += 1
                try:
                    f.add("%d-%d" % (i, n))  # past capacity: new levels grow
                    assert "%d-%d" % (i, (n + 1) // 2) in f
                    len(f)
                    f.bytes()
                except floodgate.Error as e:
                    if "closed" in e.message:
                        return
        ts = threads(user, 4)
        for _ in ts:
            started.acquire()
        f.close()
        join(ts)


def main(name, target, count):
    """Runs one scenario; an exception in any thread or callback fails it,
    and so does a hang, after printing where every thread is."""
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    failures = []

    def failed(args):
        failures.append(args.exc_value)
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)
    threading.excepthook = sys.unraisablehook = failed
    globals()[name](target, count)
    if failures:
        sys.exit("%d exceptions in threads or callbacks" % len(failures))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
