"""floodgate.middleware (bindings/python): WSGIRateLimit and ASGIRateLimit
behind real HTTP servers on loopback.

WSGI runs under wsgiref.simple_server; ASGI under the small asyncio HTTP/1.1
server below (standard library only, one request per connection), each in a
thread of its own, and requests go through http.client. Every behaviour runs
for both middlewares, with a mem: client and most with a client of the session
redis-server as well, and of a stock server and a stock 3-master cluster
(backends.py), where the library runs its server scripts.

Determinism: the limits cannot refill during a test (token_bucket(n, 0.001)
gives one unit back every 1000 s; a fixed window is clock-aligned and could
roll over mid-test, so none is used), keys and policy names are unique per
test, and nothing sleeps: concurrency is ordered with events.
"""

import asyncio
import http
import http.client
import threading
import uuid
import wsgiref.simple_server

import pytest

import floodgate
from backends import STOCK, target
from floodgate.middleware import ASGIRateLimit, WSGIRateLimit
from harness import free_port

TIMEOUT = 30  # seconds a request may take on a loaded machine before it fails


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex)


# ------------------------------------------------------------ HTTP plumbing

class Response:
    def __init__(self, resp):
        self.status = resp.status
        self.body = resp.read()
        self.message = resp.headers

    def header(self, name):
        """The field's one value, None when absent; two values fail."""
        values = self.message.get_all(name) or []
        assert len(values) <= 1, (name, values)
        return values[0] if values else None


def get(port, path="/", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", path, headers=headers or {})
        return Response(conn.getresponse())
    finally:
        conn.close()


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


class WSGIServer:
    """wsgiref on a free loopback port, serving in a thread."""

    def __init__(self, app):
        self.httpd = wsgiref.simple_server.make_server("127.0.0.1", 0, app,
                                                       handler_class=_QuietHandler)
        self.port = self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(TIMEOUT)


class ASGIServer:
    """A minimal ASGI 3 HTTP/1.1 server: its own event loop in a thread, one
    request per connection (answered with Connection: close). An exception
    of the application is kept in `errors` and answered 500."""

    def __init__(self, app):
        self.app = app
        self.errors = []
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(TIMEOUT), "the ASGI server did not start"

    def _run(self, started):
        loop = self.loop
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        started.set()
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)

    async def _serve(self, reader, writer):
        try:
            method, target, _version = (await reader.readline()).decode("latin-1").split()
            headers = []
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers.append((name.strip().lower().encode("latin-1"),
                                value.strip().encode("latin-1")))
            length = int(dict(headers).get(b"content-length", b"0"))
            body = await reader.readexactly(length) if length else b""
            path, _, query = target.partition("?")
            scope = {
                "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                "method": method, "scheme": "http", "path": path,
                "raw_path": path.encode("latin-1"), "query_string": query.encode("latin-1"),
                "root_path": "", "headers": headers,
                "client": writer.get_extra_info("peername")[:2],
                "server": writer.get_extra_info("sockname")[:2],
            }
            await self._answer(scope, body, writer)
        finally:
            writer.close()
            await writer.wait_closed()

    async def _answer(self, scope, body, writer):
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        start, chunks = None, []

        async def receive():
            return pending.pop() if pending else {"type": "http.disconnect"}

        async def send(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, send)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            self.errors.append(e)
            if start is None:
                start, chunks = {"status": 500, "headers": []}, [b"error\n"]
        status = start["status"]
        head = ["HTTP/1.1 %d %s" % (status, http.HTTPStatus(status).phrase)]
        head += ["%s: %s" % (k.decode("latin-1"), v.decode("latin-1"))
                 for k, v in start.get("headers", ())]
        head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + b"".join(chunks))
        await writer.drain()


# ------------------------------------------------ the two kinds of middleware

class WSGIApp:
    """200 "hello" with an X-App field; records each environ it is called with."""

    def __init__(self, on_request=None):
        self.requests = []
        self.on_request = on_request

    def __call__(self, environ, start_response):
        self.requests.append(environ)
        if self.on_request:
            self.on_request(environ.get("PATH_INFO"))
        body = b"hello\n"
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(body))), ("X-App", "yes")])
        return [body]


class ASGIApp:
    """The same in ASGI."""

    def __init__(self, on_request=None):
        self.requests = []
        self.on_request = on_request

    async def __call__(self, scope, receive, send):
        self.requests.append(scope)
        if self.on_request:
            self.on_request(scope["path"])
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"x-app", b"yes")]})
        await send({"type": "http.response.body", "body": b"hello\n"})


class WSGI:
    Middleware, App, Server = WSGIRateLimit, WSGIApp, WSGIServer

    @staticmethod
    def header(name):
        """A key (or cost) function: the request's field `name`, or None."""
        field = "HTTP_" + name.upper().replace("-", "_")
        return lambda environ: environ.get(field)

    @staticmethod
    def path(request):
        return request["PATH_INFO"]


class ASGI:
    Middleware, App, Server = ASGIRateLimit, ASGIApp, ASGIServer

    @staticmethod
    def header(name):
        wanted = name.lower().encode()

        def value(scope):
            for field, v in scope["headers"]:
                if field == wanted:
                    return v.decode()
            return None
        return value

    @staticmethod
    def path(request):
        return request["path"]


@pytest.fixture(params=[WSGI, ASGI], ids=["wsgi", "asgi"])
def kind(request):
    return request.param


@pytest.fixture(params=["mem", "redis"] + list(STOCK))
def backend(request):
    """mem:, the session's module server, a stock server, a stock cluster."""
    return request.param


def _url(request, backend):
    if backend == "mem":
        return "mem:"
    if backend in STOCK:
        return target(backend).url
    server = request.getfixturevalue("server")
    if not server.alive():  # a test elsewhere in the run killed it
        server.start()
    return "redis://127.0.0.1:%d" % server.port


@pytest.fixture
def new_client(request, backend):
    """new_client(**options): a Client of the test's backend, closed at the end."""
    url, clients = _url(request, backend), []

    def make(**options):
        client = floodgate.Client(url, **options)
        clients.append(client)
        return client
    yield make
    for client in clients:
        client.close()


@pytest.fixture
def serve():
    """serve(kind, app): the app behind a real HTTP server, stopped at the end."""
    servers = []

    def start(kind, app):
        servers.append(kind.Server(app))
        return servers[-1]
    yield start
    for server in servers:
        server.stop()


def user(name):
    return {"X-User": unique(name)}


BUCKET = floodgate.token_bucket(3, 0.001)  # 3 units, then one more every 1000 s


# ------------------------------------------------------------------- tests

def test_allows_then_denies_with_headers(kind, new_client, serve):
    app = kind.App()
    mw = kind.Middleware(app, new_client(), BUCKET, key=kind.header("X-User"))
    port = serve(kind, mw).port
    alice = user("alice")
    for remaining in (2, 1, 0):
        r = get(port, headers=alice)
        assert r.status == 200 and r.body == b"hello\n"
        assert r.header("X-App") == "yes"  # the application's own fields stay
        assert r.header("RateLimit-Policy") == '"default";q=3;w=3000'
        assert r.header("RateLimit").startswith('"default";r=%d;t=' % remaining)
        assert r.header("Retry-After") is None
    r = get(port, headers=alice)
    assert r.status == 429
    assert r.body == b"Too Many Requests\n"
    assert r.header("Content-Type") == "text/plain; charset=utf-8"
    assert 0 < int(r.header("Retry-After")) <= 1000
    assert r.header("RateLimit").startswith('"default";r=0;t=')
    assert r.header("RateLimit-Policy") == '"default";q=3;w=3000'
    assert r.header("X-App") is None
    assert len(app.requests) == 3  # the denied request never reached the app


def test_name_and_status(kind, new_client, serve):
    mw = kind.Middleware(kind.App(), new_client(), floodgate.token_bucket(1, 0.001),
                         key=kind.header("X-User"), name="api", status=503)
    port = serve(kind, mw).port
    alice = user("alice")
    assert get(port, headers=alice).header("RateLimit").startswith('"api";r=0;')
    r = get(port, headers=alice)
    assert r.status == 503 and r.body == b"Service Unavailable\n"
    assert r.header("RateLimit-Policy") == '"api";q=1;w=1000'


@pytest.mark.parametrize("backend", ["mem"])
def test_default_key_is_the_peer_address(kind, new_client, serve):
    client, limit = new_client(), floodgate.token_bucket(1, 0.001)
    app = kind.App()
    port = serve(kind, kind.Middleware(app, client, limit)).port
    assert get(port).status == 200
    assert get(port).status == 429
    # The key was the loopback address the requests came from, under the
    # middleware's kind and name.
    assert client.peek("limit:default:127.0.0.1", limit).allowed is False
    assert client.peek("limit:default:127.0.0.2", limit).allowed is True


def test_a_request_value_reaches_no_other_state(kind, new_client, serve):
    """A header names no key but its middleware's: not the application's,
    not another middleware's, and '~' cannot spell another value's hex."""
    client, limit, name = new_client(), floodgate.token_bucket(1, 0.001), unique("mw")
    owned = unique("app") + ":alice"
    assert client.check(owned, limit).allowed  # the application's, now empty
    port = serve(kind, kind.Middleware(kind.App(), client, limit, key=kind.header("X-User"),
                                       name=name)).port
    for value in (owned, "limit:%s:%s" % (name, owned), "~" + "x".encode().hex(), "x"):
        assert get(port, headers={"X-User": value}).status == 200, value
    assert client.peek(owned, limit).allowed is False  # untouched, still the app's
    assert client.peek(floodgate.request_key("limit", name, "x"), limit).allowed is False
    assert floodgate.request_key("limit", "a", "~78") == "limit:a:~7e3738"
    assert floodgate.request_key("policy", "api", "a b") == "policy:api:~612062"
    with pytest.raises(floodgate.InvalidError):
        floodgate.request_key("limit", "a:b", "x")


@pytest.mark.parametrize("backend", ["mem"])
def test_key_none_is_not_limited(kind, new_client, serve):
    app = kind.App()
    mw = kind.Middleware(app, new_client(), floodgate.token_bucket(1, 0.001),
                         key=kind.header("X-User"))
    port = serve(kind, mw).port
    for _ in range(5):
        r = get(port)  # no X-User: not limited, and no RateLimit fields
        assert r.status == 200 and r.header("RateLimit") is None
    alice = user("alice")
    assert get(port, headers=alice).status == 200
    assert get(port, headers=alice).status == 429
    assert get(port).status == 200
    assert len(app.requests) == 7


def test_keys_are_limited_separately(kind, new_client, serve):
    mw = kind.Middleware(kind.App(), new_client(), BUCKET, key=kind.header("X-User"))
    port = serve(kind, mw).port
    alice, bob = user("alice"), user("bob")
    assert [get(port, headers=alice).status for _ in range(4)] == [200, 200, 200, 429]
    assert [get(port, headers=bob).status for _ in range(4)] == [200, 200, 200, 429]


def test_policy(kind, new_client, serve):
    client, policy = new_client(), unique("mw-policy")
    client.policy_set(policy, floodgate.PolicyDef([floodgate.token_bucket(2, 0.001)]))
    mallory, vip = user("mallory"), user("vip")
    client.policy_deny(policy, mallory["X-User"])
    client.policy_allow(policy, vip["X-User"])
    app = kind.App()
    mw = kind.Middleware(app, client, policy=policy, key=kind.header("X-User"))
    port = serve(kind, mw).port
    alice = user("alice")
    for remaining in (1, 0):
        r = get(port, headers=alice)
        assert r.status == 200
        assert r.header("RateLimit").startswith('"default";r=%d;' % remaining)
        assert r.header("RateLimit-Policy") is None  # the policy's limits are on its side
    r = get(port, headers=alice)
    assert r.status == 429 and 0 < int(r.header("Retry-After")) <= 1000
    # The lists decide without a quota: no RateLimit fields either way.
    r = get(port, headers=mallory)
    assert r.status == 429 and r.header("RateLimit") is None and r.header("Retry-After") is None
    for _ in range(4):
        r = get(port, headers=vip)
        assert r.status == 200 and r.header("RateLimit") is None
    assert len(app.requests) == 6


def test_cost_function(kind, new_client, serve):
    def cost(request):
        return int(kind.header("X-Cost")(request) or 1)
    mw = kind.Middleware(kind.App(), new_client(), floodgate.token_bucket(5, 0.001),
                         key=kind.header("X-User"), cost=cost)
    port = serve(kind, mw).port
    alice = user("alice")
    r = get(port, headers=dict(alice, **{"X-Cost": "3"}))
    assert r.status == 200 and r.header("RateLimit").startswith('"default";r=2;')
    assert get(port, headers=dict(alice, **{"X-Cost": "3"})).status == 429
    r = get(port, headers=alice)  # cost 1
    assert r.status == 200 and r.header("RateLimit").startswith('"default";r=1;')
    r = get(port, headers=dict(alice, **{"X-Cost": "0"}))  # asks, takes nothing
    assert r.status == 200 and r.header("RateLimit").startswith('"default";r=1;')


@pytest.mark.parametrize("backend", ["mem"])
def test_constant_cost(kind, new_client, serve):
    mw = kind.Middleware(kind.App(), new_client(), floodgate.token_bucket(5, 0.001),
                         key=kind.header("X-User"), cost=2)
    port = serve(kind, mw).port
    alice = user("alice")
    assert [get(port, headers=alice).status for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("backend", ["mem"])
def test_without_headers(kind, new_client, serve):
    mw = kind.Middleware(kind.App(), new_client(), floodgate.token_bucket(1, 0.001),
                         key=kind.header("X-User"), headers=False)
    port = serve(kind, mw).port
    alice = user("alice")
    r = get(port, headers=alice)
    assert r.status == 200 and r.header("X-App") == "yes"
    assert r.header("RateLimit") is None and r.header("RateLimit-Policy") is None
    r = get(port, headers=alice)  # a denial still says when to come back
    assert r.status == 429 and 0 < int(r.header("Retry-After")) <= 1000
    assert r.header("RateLimit") is None and r.header("RateLimit-Policy") is None


def test_fleet_view(kind, backend, new_client, serve):
    """Two instances of the application, each with its own middleware and
    client: on a server they share the limit; mem: clients each count alone."""
    limit = floodgate.token_bucket(4, 0.001)
    apps = [kind.App(), kind.App()]
    ports = [serve(kind, kind.Middleware(app, new_client(), limit,
                                         key=kind.header("X-User"))).port for app in apps]
    alice = user("alice")
    statuses = [get(ports[i % 2], headers=alice).status for i in range(10)]
    if backend != "mem":
        assert statuses == [200] * 4 + [429] * 6
        assert [len(app.requests) for app in apps] == [2, 2]
    else:
        assert statuses == [200] * 8 + [429] * 2
        assert [len(app.requests) for app in apps] == [4, 4]


@pytest.mark.parametrize("on_failure, status, source", [
    ("open", 200, floodgate.Source.FAILED_OPEN),
    ("closed", 429, floodgate.Source.FAILED_CLOSED),
    ("fallback", 200, floodgate.Source.FALLBACK),
])
def test_server_down_follows_on_failure(kind, serve, on_failure, status, source):
    client = floodgate.Client("redis://127.0.0.1:%d" % free_port(), on_failure=on_failure,
                              connect_timeout_ms=1000)
    try:
        assert client.check(unique("probe"), BUCKET).source is source
        app = kind.App()
        port = serve(kind, kind.Middleware(app, client, BUCKET,
                                           key=kind.header("X-User"))).port
        r = get(port, headers=user("alice"))
        assert r.status == status
        assert len(app.requests) == (status == 200)
        if status == 429:
            assert int(r.header("Retry-After")) >= 1
    finally:
        client.close()


def test_server_down_raises_with_on_failure_error(kind):
    client = floodgate.Client("redis://127.0.0.1:%d" % free_port(), connect_timeout_ms=1000)
    try:
        app = kind.App()
        mw = kind.Middleware(app, client, BUCKET)
        with pytest.raises(floodgate.IOError):
            if kind is WSGI:
                mw({"REMOTE_ADDR": "127.0.0.1"}, lambda *a: pytest.fail("answered"))
            else:
                asyncio.run(mw(_http_scope(), _never_called, _never_called))
        assert app.requests == []
    finally:
        client.close()


def test_asgi_error_reaches_the_server(serve):
    """Through the HTTP server: the server sees the exception (here: 500)."""
    client = floodgate.Client("redis://127.0.0.1:%d" % free_port(), connect_timeout_ms=1000)
    try:
        server = serve(ASGI, ASGIRateLimit(ASGIApp(), client, BUCKET))
        assert get(server.port).status == 500
        assert len(server.errors) == 1 and isinstance(server.errors[0], floodgate.IOError)
    finally:
        client.close()


def test_needs_exactly_one_of_limit_and_policy(kind):
    client = floodgate.Client()
    try:
        with pytest.raises(TypeError):
            kind.Middleware(kind.App(), client)
        with pytest.raises(TypeError):
            kind.Middleware(kind.App(), client, BUCKET, policy="p")
    finally:
        client.close()


# ------------------------------------------------------------- ASGI only

def _http_scope():
    return {"type": "http", "asgi": {"version": "3.0"}, "method": "GET", "path": "/",
            "headers": [], "client": ("127.0.0.1", 1)}


async def _never_called(*args):
    pytest.fail("called")


@pytest.mark.parametrize("scope_type", ["lifespan", "websocket"])
def test_asgi_passes_other_scopes_through(scope_type):
    seen = []

    async def app(scope, receive, send):
        seen.append((scope, receive, send))

    def key(scope):
        pytest.fail("a %s scope was checked" % scope["type"])

    client = floodgate.Client()
    try:
        mw = ASGIRateLimit(app, client, floodgate.token_bucket(1, 0.001), key=key)
        scope = {"type": scope_type, "asgi": {"version": "3.0"}, "client": ("127.0.0.1", 1)}
        for _ in range(3):
            asyncio.run(mw(scope, _never_called, _never_called))
        assert seen == [(scope, _never_called, _never_called)] * 3
    finally:
        client.close()


def test_asgi_check_thread(backend, new_client, serve):
    """A server client's check runs off the event loop; a mem: one inline."""
    threads = []

    def key(scope):
        threads.append(threading.current_thread())
        return unique("alice")

    server = serve(ASGI, ASGIRateLimit(ASGIApp(), new_client(), BUCKET, key=key))
    assert get(server.port).status == 200
    assert len(threads) == 1
    assert (threads[0] is server.thread) == (backend == "mem")


@pytest.mark.parametrize("backend", ["redis", "stock"])
def test_asgi_loop_serves_while_a_check_waits(new_client, serve):
    """While the check of /slow waits (its key function blocks until /fast
    has been served), the loop serves /fast: it would wait for ever if the
    check blocked the loop."""
    entered, fast_served = threading.Event(), threading.Event()

    def key(scope):
        if scope["path"] == "/slow":
            entered.set()
            assert fast_served.wait(TIMEOUT), "the loop was blocked"
        return unique("alice")

    def on_request(path):
        if path == "/fast":
            fast_served.set()

    server = serve(ASGI, ASGIRateLimit(ASGIApp(on_request), new_client(), BUCKET, key=key))
    slow = []
    request = threading.Thread(target=lambda: slow.append(get(server.port, "/slow")))
    request.start()
    try:
        assert entered.wait(TIMEOUT)
        assert get(server.port, "/fast").status == 200
    finally:
        fast_served.set()
        request.join(TIMEOUT)
    assert slow[0].status == 200
    assert server.errors == []
