import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The Python binding, from the source tree (it loads build/libfloodgate.so.0).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bindings", "python"))

import harness  # noqa: E402
from topology import Cluster, assert_no_crash  # noqa: E402


@pytest.fixture(scope="session")
def server(request):
    """One redis-server with the module loaded, for the whole run."""
    s = harness.Server()
    request.addfinalizer(s.cleanup)
    s.start()
    return s


@pytest.fixture(scope="session")
def timed(request):
    """A server that allows `AT unix_us` (floodgate.explicit-time yes)."""
    s = harness.Server(["--floodgate.explicit-time", "yes"])
    request.addfinalizer(s.cleanup)
    s.start()
    return s


@pytest.fixture
def t(timed):
    """A client on the explicit-time server, on a flushed dataset."""
    c = timed.client()
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def r(server):
    """A client on the session server; the dataset is flushed before each test."""
    if not server.alive():
        # a previous test crashed the server: start a fresh one on the same port
        server.start()
    c = server.client()
    c.execute_command("FLUSHALL")
    yield c
    c.close()


def _config_for_one_test(servers, name):
    """A bool config on for one test, on running servers (a session server
    that a previous test killed is started again)."""
    def set_all(value):
        for srv in servers:
            if srv.alive():
                c = srv.client()
                c.config_set(name, value)
                c.close()
    for srv in servers:
        if not srv.alive():
            srv.start()
    set_all("yes")
    yield
    set_all("no")


@pytest.fixture
def effect_commands(server):
    """Clients may send the effect commands to the session server during this
    test, as a repair tool would (floodgate.enable-effect-commands)."""
    yield from _config_for_one_test([server], "floodgate.enable-effect-commands")


@pytest.fixture
def explicit_time(server):
    """Clients may give the time (AT, FG.UVADDAT) to the session server during
    this test (floodgate.explicit-time)."""
    yield from _config_for_one_test([server], "floodgate.explicit-time")


@pytest.fixture(scope="module")
def cluster():
    """A 3-master cluster on loopback for one test file; every node must
    still be free of crashes at the end."""
    cl = Cluster(3)
    try:
        cl.start()
        yield cl
    finally:
        for n in cl.nodes:
            if n.alive():
                assert_no_crash(n)
        cl.stop()


@pytest.fixture
def cluster_effect_commands(cluster):
    """floodgate.enable-effect-commands on every node of the cluster during
    this test."""
    yield from _config_for_one_test(cluster.nodes, "floodgate.enable-effect-commands")


@pytest.fixture
def cluster_explicit_time(cluster):
    """floodgate.explicit-time on every node of the cluster during this test."""
    yield from _config_for_one_test(cluster.nodes, "floodgate.explicit-time")


# make integration runs the suite on pytest-xdist workers, a test file to a
# worker (--dist loadfile), each worker with its own session servers and
# ports (harness.free_port). The files that take longest go out first, so
# that none of them is started last and leaves the other workers idle while
# it runs; the rest keep their order, and so does each file. Only a worker
# reorders: a run in one process stays in the order written.
LONGEST_FIRST = ("test_python_asan.py", "test_python_threads.py", "test_pauses.py")


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionfinish(session, exitstatus):
    harness.stop_all()
