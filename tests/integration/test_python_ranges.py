"""The numbers given to the Python binding (issue 24), on mem: and on a
server. ctypes converts a Python int to a C integer by masking it to the
type's width without a word: 2**64 + 3 becomes 3, so a cost of 2**64 was
free, a lease of 2**64 + 50 ms lasted 50 ms and token_bucket(2**64 + 3, 1)
held 3 tokens. Every integer argument of every public call and
constructor is now refused with floodgate.InvalidError, naming it and its
C type's range, when that type cannot hold it, and a refused call changes
nothing. A number the type holds goes through unchanged, so the library's
own ranges decide, with the server's words, as they do for C callers:
Python never refuses what the library would take, nor passes what it
would not. NaN and the infinities are doubles: they reach the library,
which refuses them wherever it reads a number (tested here for every
double argument). bool is an int, as in C: True is 1; a bool argument
takes any value's truth, as C's conversion to bool does.

The costs that reach a server, and the policy checks, also run on a stock
server and a stock 3-master cluster (backends.py): int64_t's ends through
the library's server scripts.
"""

import math

import pytest

import floodgate
from backends import STOCK, target
from floodgate import InvalidError
from floodgate.middleware import WSGIRateLimit

INT64_OUT = (2**63, 2**64, 2**64 + 3, -2**63 - 1)          # beyond int64_t
INT_OUT = INT64_OUT + (2**31, 2**32 + 5, -2**31 - 1)       # beyond C's int as well
NOT_FINITE = (math.nan, math.inf, -math.inf)
HUGE = 2**1024                                             # an int no double holds
SLOW = 0.001                                               # a unit back every 1000 s: no refill
LONG_MS = 600000                                           # leases that outlive a test


@pytest.fixture(params=["mem", "redis"])
def url(request):
    if request.param == "mem":
        return "mem:"
    if request.param in STOCK:
        return target(request.param).url
    request.getfixturevalue("r")  # flushed
    return "redis://127.0.0.1:%d" % request.getfixturevalue("server").port


@pytest.fixture
def client(url):
    with floodgate.Client(url) as c:
        yield c


@pytest.fixture
def policy_name(client):
    """A policy name, gone after the test (policies outlive FLUSHALL)."""
    yield "py.ranges"
    client.policy_delete("py.ranges")


def refused(call, name):
    """call() raises InvalidError naming the argument `name`."""
    with pytest.raises(InvalidError) as e:
        call()
    assert name in e.value.message, e.value.message
    return e.value


# mem:, the module, a stock server, a stock cluster
ON_ALL = pytest.mark.parametrize("url", ["mem", "redis"] + list(STOCK), indirect=True,
                                 scope="function")


def remaining(c, key, limit):
    return c.peek(key, limit, 0).remaining


# ------------------------------------------------------------------ limits

CONSTRUCTORS = [  # (constructor, valid arguments, the index and name of each number)
    (floodgate.fixed_window, (5, 1000.0), ((0, "limit"), (1, "window_ms"))),
    (floodgate.sliding_window, (5, 1000.0), ((0, "limit"), (1, "window_ms"))),
    (floodgate.sliding_log, (5, 1000.0), ((0, "limit"), (1, "window_ms"))),
    (floodgate.token_bucket, (5, SLOW), ((0, "capacity"), (1, "refill_per_sec"))),
    (floodgate.leaky_bucket, (5, SLOW), ((0, "capacity"), (1, "leak_per_sec"))),
    (floodgate.gcra, (5, 1.0, 1000.0), ((0, "capacity"), (1, "count"), (2, "period_ms"))),
]


CONSTRUCTOR_NAMES = [make.__name__ for make, _, _ in CONSTRUCTORS]


def with_arg(args, i, value):
    return args[:i] + (value,) + args[i + 1:]


@pytest.mark.parametrize("make,args,numbers", CONSTRUCTORS, ids=CONSTRUCTOR_NAMES)
def test_limit_constructors_refuse_what_c_cannot_hold(make, args, numbers):
    for i, name in numbers:
        if isinstance(args[i], int):
            for v in INT64_OUT:
                refused(lambda: make(*with_arg(args, i, v)), name)
        else:
            refused(lambda: make(*with_arg(args, i, HUGE)), name)
    # token_bucket(2**64 + 3, 1) held 3 tokens
    refused(lambda: floodgate.token_bucket(2**64 + 3, 1), "capacity")
    for v in INT64_OUT:
        refused(lambda: floodgate.Limit(floodgate.limits.TOKEN_BUCKET, v, 0, 1.0), "capacity")
    # in int64_t, the library's range decides: a capacity of 0 at the check
    assert floodgate.token_bucket(-2**63, 1).limit == -2**63


@pytest.mark.parametrize("make,args,numbers", CONSTRUCTORS, ids=CONSTRUCTOR_NAMES)
def test_limits_not_finite_are_refused_by_the_library(client, make, args, numbers):
    for i, name in numbers:
        if isinstance(args[i], float):
            for v in NOT_FINITE:
                limit = make(*with_arg(args, i, v))
                refused(lambda: client.check("nf", limit), name)
                refused(lambda: client.peek("nf", limit), name)
                assert client.inspect("nf") == {}


@ON_ALL
def test_a_cost_out_of_range_takes_nothing(client):
    limit = floodgate.token_bucket(10, SLOW)
    # on an empty bucket, a cost of 2**64 was a cost of 0: allowed
    refused(lambda: client.check("empty", limit, 2**64), "cost")
    assert client.inspect("empty") == {}
    assert client.check("k", limit, 3).remaining == 7
    for v in INT64_OUT:
        refused(lambda: client.check("k", limit, v), "cost")
        refused(lambda: client.peek("k", limit, v), "cost")
        refused(lambda: client.check_batch([("k", limit, v), ("k2", limit)]), "cost")
        refused(lambda: client.check_batch([floodgate.Request("k", limit, v)],
                                           raise_on_error=False), "cost")
    assert remaining(client, "k", limit) == 7 and client.inspect("k2") == {}
    # int64_t's ends reach the library: its own answers
    assert not client.check("k", limit, 2**63 - 1).allowed
    with pytest.raises(InvalidError, match="^ERR COST must be between 0 and"):
        client.check("k", limit, -2**63)
    assert remaining(client, "k", limit) == 7


def test_bool_is_an_int_and_a_bool_argument_takes_any_truth(client):
    limit = floodgate.token_bucket(10, SLOW)
    assert client.check("b", limit, True).remaining == 9
    assert client.check("b", limit, False).remaining == 9
    # peek=2**64 is a peek (C's bool of a non-zero), not 0 = a check
    out = client.check_batch([floodgate.Request("b", limit, 2, 2**64)])
    assert out[0].remaining == 7 and remaining(client, "b", limit) == 9
    assert floodgate.token_bucket(True, 1).limit == 1
    a = client.lock("shared", "a", shared=2, lease_ms=LONG_MS)
    b = client.lock("shared", "b", shared=2, lease_ms=LONG_MS)
    assert a.acquire() and b.acquire()


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


@ON_ALL
def test_middleware_cost_from_a_header_cannot_be_made_free(client):
    limit = floodgate.token_bucket(10, SLOW)
    app = WSGIRateLimit(hello, client, limit, key=lambda environ: "mw",
                        cost=lambda environ: int(environ["HTTP_X_COST"]))
    statuses = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)
    assert app({"HTTP_X_COST": "4"}, start_response) == [b"ok"]
    for v in INT64_OUT:
        refused(lambda: app({"HTTP_X_COST": str(v)}, start_response), "cost")
    key = floodgate.request_key("limit", "default", "mw")  # the middleware's key for "mw"
    assert statuses == ["200 OK"] and remaining(client, key, limit) == 6


# ----------------------------------------------------------------- clients

def test_client_options():
    for name in ("connect_timeout_ms", "command_timeout_ms", "lease_ms"):  # C int
        for v in INT_OUT:
            refused(lambda: floodgate.Client("mem:", **{name: v}), name)
    for v in INT64_OUT:
        refused(lambda: floodgate.Client("mem:", lease_units=v), "lease_units")
    with floodgate.Client("mem:", cache_denials=2**64, send_clock=0, lease_ms=2**31 - 1):
        pass


# ------------------------------------------------------------------- locks

def held_for(c, key):
    """The lease left on key as another owner's refusal tells it."""
    grant = c.lock(key, "someone-else").acquire()
    assert not grant.acquired
    return grant.ttl_ms


LOCK_INTS = (("lease_ms", INT64_OUT), ("wait_ms", INT64_OUT), ("renew_max_ms", INT64_OUT),
             ("durable_replicas", INT_OUT), ("durable_timeout_ms", INT_OUT))


def test_lock_options(client):
    for name, values in LOCK_INTS:
        for v in values:
            refused(lambda: client.lock("lk", "o", **{name: v}), name)
            refused(lambda: client.lock_multi(["{s}a", "{s}b"], "o", **{name: v}), name)
            refused(lambda: client.semaphore("sem", 3, 1, "o", **{name: v}), name)
    # a lease of 2**64 + 50 ms was one of 50 ms
    refused(lambda: client.lock("lk", "o", lease_ms=2**64 + 50), "lease_ms")
    for v in INT64_OUT:
        refused(lambda: client.semaphore("sem", v, 1, "o"), "capacity")
        refused(lambda: client.semaphore("sem", 3, v, "o"), "permits")
    assert client.lock("lk", "o", lease_ms=LONG_MS).acquire()
    assert client.semaphore("sem", 3, 3, "o").acquire()
    assert client.lock_multi(["{s}a", "{s}b"], "o").acquire()
    # in int64_t, the library decides
    with pytest.raises(InvalidError, match="^ERR lease_ms must be between 1 and"):
        client.lock("other", "o", lease_ms=0).acquire()


def test_extend_and_release_out_of_range(client):
    lock = client.lock("ext", "o", lease_ms=LONG_MS)
    assert lock.acquire()
    for v in INT64_OUT:
        refused(lambda: client.extend("ext", "o", v), "lease_ms")
        refused(lambda: lock.extend(v), "lease_ms")
    assert held_for(client, "ext") > LONG_MS // 2  # not cut to 50 ms by a wrapped 2**64 + 50
    sem = client.semaphore("sem", 3, 2, "o")
    assert sem.acquire()
    for v in INT64_OUT + (2**64 + 1,):  # 2**64 + 1 gave back one permit
        refused(lambda: client.semaphore_release("sem", "o", v), "permits")
    assert not client.semaphore("sem", 3, 2, "p").acquire()  # still 2 of 3 held by o
    assert client.semaphore_release("sem", "o") == 0


def test_redlock(server, r):
    url = "redis://127.0.0.1:%d" % server.port
    for name in ("retry_count", "retry_delay_ms", "retry_jitter_ms", "server_timeout_ms"):
        for v in INT_OUT:
            refused(lambda: floodgate.Redlock([url], **{name: v}), name)
    refused(lambda: floodgate.Redlock([url], drift_factor=HUGE), "drift_factor")
    for v in NOT_FINITE:
        refused(lambda: floodgate.Redlock([url], drift_factor=v), "drift_factor")
    with floodgate.Redlock([url]) as rl:
        for v in INT64_OUT:
            refused(lambda: rl.acquire("rl", "o", v), "lease_ms")
            refused(lambda: rl.lock("rl", lease_ms=v).__enter__(), "lease_ms")
        assert r.exists("rl") == 0
        assert rl.acquire("rl", "o", LONG_MS)
        for v in INT64_OUT:
            refused(lambda: rl.extend("rl", "o", v), "lease_ms")
        assert r.pttl("rl") > LONG_MS // 2


# ----------------------------------------------------- Bloom, unique counts

def test_bloom_filters(client):
    for v in INT64_OUT:
        refused(lambda: client.bf_reserve("bf", capacity=v), "capacity")
        refused(lambda: floodgate.Filter(capacity=v), "capacity")
    for v in INT_OUT:
        refused(lambda: client.bf_reserve("bf", expansion=v), "expansion")
        refused(lambda: floodgate.Filter(expansion=v), "expansion")
    refused(lambda: client.bf_reserve("bf", error_rate=HUGE), "error_rate")
    refused(lambda: floodgate.Filter(error_rate=HUGE), "error_rate")
    for v in NOT_FINITE:
        with pytest.raises(InvalidError):
            client.bf_reserve("bf", error_rate=v)
        with pytest.raises(InvalidError):
            floodgate.Filter(error_rate=v)
    client.bf_reserve("bf", 0.01, 100)  # not made by any refused call
    assert client.bf_card("bf") == 0


DISTINCT_OPTIONS = ("span_s", "minutes", "hours", "days", "tzoffset_s")


def test_unique_counts(client):
    for name in DISTINCT_OPTIONS:
        for v in INT64_OUT:
            refused(lambda: client.distinct_create("uv", **{name: v}), name)
    client.distinct_create("uv")  # not made by any refused call
    for v in INT64_OUT:
        refused(lambda: client.distinct_add("uv", "x", at_us=v), "at_us")
        refused(lambda: floodgate.last(v), "n")
        refused(lambda: floodgate.between(v, 10**15), "start_us")
        refused(lambda: floodgate.between(0, v), "end_us")
    for v in INT_OUT:
        refused(lambda: floodgate.last(1, v), "unit")
    assert client.distinct_count("uv", floodgate.last(1, floodgate.DAYS)) == 0
    # in int64_t, the library decides: the unit 2**32 + 1 was 1, SECONDS
    with pytest.raises(InvalidError, match="^ERR unit must be"):
        client.distinct_count("uv", floodgate.last(1, 2))


# ---------------------------------------------------------------- policies

def test_policy_definitions(client, policy_name):
    limit = floodgate.token_bucket(10, SLOW)
    bad = [(floodgate.PolicyDef([limit], ban_ms=1000.0, ban_after=v), "ban_after")
           for v in INT64_OUT]
    bad += [(floodgate.PolicyDef([limit], ban_ms=HUGE), "ban_ms"),
            (floodgate.PolicyDef([limit], ban_ms=1000.0, ban_within_ms=HUGE), "ban_within_ms")]
    for spec in ("allowlist", "denylist"):
        bad += [(floodgate.PolicyDef([limit], **{spec: floodgate.ListSpec("bloom", 0.01, v)}),
                 spec + " capacity") for v in INT64_OUT]
        bad.append((floodgate.PolicyDef([limit], **{spec: floodgate.ListSpec("bloom", HUGE)}),
                    spec + " error"))
    for definition, name in bad:
        refused(lambda: client.policy_set(policy_name, definition), name)
    for v in NOT_FINITE:
        for definition in (floodgate.PolicyDef([limit], ban_ms=v),
                           floodgate.PolicyDef([limit], ban_ms=1000.0, ban_within_ms=v),
                           floodgate.PolicyDef([limit], denylist=floodgate.ListSpec("bloom", v))):
            with pytest.raises(InvalidError):
                client.policy_set(policy_name, definition)
    assert policy_name not in client.policy_names()


@ON_ALL
def test_policy_checks(client, policy_name, request):
    limit = floodgate.token_bucket(10, SLOW)
    client.policy_set(policy_name, floodgate.PolicyDef([limit]))
    assert client.policy_check(policy_name, "pk", 3).result.remaining == 7
    for v in INT64_OUT:
        refused(lambda: client.policy_check(policy_name, "pk", v), "cost")
        refused(lambda: client.policy_acquire(policy_name, "pk", 1000, v), "cost")
        refused(lambda: client.policy_acquire(policy_name, "pk", v), "timeout_ms")
    assert client.policy_check(policy_name, "pk", 0).result.remaining == 7
    info = client.policy_get(policy_name)
    counted = request.node.callspec.params["url"] not in STOCK  # no counters in scripts
    assert (info.allowed, info.denied) == ((2, 0) if counted else (0, 0))
