"""Rate limiting for web applications: WSGI and ASGI middleware (docs/python.md).

    app = WSGIRateLimit(app, client, token_bucket(10, 2))
    app = ASGIRateLimit(app, client, policy="api", key=user_of_scope)

Each request is one decision: its value (the client's address unless a key
function says otherwise; None means "not limited") is checked against a Limit
(Client.check) or a named policy (Client.policy_check), for a cost of 1 or
what a cost function gives. The value is the request's to choose, so its
Redis key is request_key("limit", name, value) or ("policy", policy, value):
no request reaches state that is not its middleware's or its policy's, and a
policy's state is the one nginx's floodgate_policy keeps for the same value. A denial is answered here, 429 with Retry-After,
and the application is not called; an allowed request goes to the application,
whose response gets the RateLimit fields (Result.headers) added.

Both classes share the decision; they differ only in how they answer. The
client's errors (floodgate.Error) are not caught: the Client's on_failure
decides what a check does when the server is down, and a middleware that
swallowed errors would hide that choice.
"""

import asyncio
import http

from .client import request_key

__all__ = ["WSGIRateLimit", "ASGIRateLimit"]


def remote_address(environ):
    """The default WSGI key: the peer's address."""
    return environ.get("REMOTE_ADDR")


def scope_client(scope):
    """The default ASGI key: the peer's address (None when the server does
    not know it, as over a Unix socket: such requests are not limited)."""
    client = scope.get("client")
    return client[0] if client else None


class _RateLimit:
    """What WSGI and ASGI share: the settings, and one decision per request."""

    def __init__(self, app, client, limit, key, cost, policy, name, status, headers):
        if (limit is None) == (policy is None):
            raise TypeError("give exactly one of limit and policy")
        self.app = app
        self.client = client
        self.limit = limit
        self.policy = policy
        self.key = key
        self.cost = cost
        self.name = name
        self.status = status
        self.headers = headers
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Too Many Requests"
        self.status_line = "%d %s" % (status, phrase)
        self.body = (phrase + "\n").encode()

    def decide(self, request):
        """(allowed, fields) for the environ or scope, or None when its key
        is None. fields are the response headers to add: all of the
        RateLimit fields with headers=True, else only a denial's Retry-After
        (a client told 429 should still learn when to come back)."""
        value = self.key(request)
        if value is None:
            return None
        cost = self.cost(request) if callable(self.cost) else self.cost
        if self.policy is not None:
            # A policy's limits are on the server: no RateLimit-Policy field;
            # no fields at all when a list decided (no quota was counted).
            # The lists match the value as the key holds it, as nginx's do.
            key = request_key("policy", self.policy, value)
            identity = key[len("policy:") + len(self.policy) + 1:]
            answer = self.client.policy_check(self.policy, key, cost, identity=identity)
            fields = answer.headers(self.name)
        else:
            answer = self.client.check(request_key("limit", self.name, value), self.limit, cost)
            fields = answer.headers(self.limit, self.name)
        if not self.headers:
            fields = {k: v for k, v in fields.items() if k == "Retry-After"}
        return answer.allowed, list(fields.items())


class WSGIRateLimit(_RateLimit):
    """WSGI middleware: `key(environ)` (default REMOTE_ADDR) is checked
    against `limit`, or against the named `policy` (exactly one of the two),
    for `cost` units (an int, or a function of environ)."""

    def __init__(self, app, client, limit=None, *, key=remote_address, cost=1, policy=None,
                 name="default", status=429, headers=True):
        super().__init__(app, client, limit, key, cost, policy, name, status, headers)

    def __call__(self, environ, start_response):
        decision = self.decide(environ)
        if decision is None:
            return self.app(environ, start_response)
        allowed, fields = decision
        if not allowed:
            start_response(self.status_line, [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(self.body))),
            ] + fields)
            return [self.body]
        if not fields:
            return self.app(environ, start_response)

        def start_with_fields(status, response_headers, exc_info=None):
            return start_response(status, list(response_headers) + fields, exc_info)
        return self.app(environ, start_with_fields)


class ASGIRateLimit(_RateLimit):
    """ASGI 3 middleware for http scopes (others pass through untouched):
    `key(scope)` (default the client's address) is checked against `limit`,
    or against the named `policy`, for `cost` units (an int, or a function
    of scope). With a server client (client.is_remote) the decision, key and
    cost functions included, runs in the event loop's default executor so
    that the network wait does not stop the loop; with mem: it runs inline,
    as it takes about a microsecond."""

    def __init__(self, app, client, limit=None, *, key=scope_client, cost=1, policy=None,
                 name="default", status=429, headers=True):
        super().__init__(app, client, limit, key, cost, policy, name, status, headers)
        self.offload = client.is_remote

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.offload:
            # to_thread: the default executor, with the caller's contextvars.
            decision = await asyncio.to_thread(self.decide, scope)
        else:
            decision = self.decide(scope)
        if decision is None:
            return await self.app(scope, receive, send)
        allowed, fields = decision
        fields = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields]
        if not allowed:
            await send({"type": "http.response.start", "status": self.status, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(self.body)).encode()),
            ] + fields})
            await send({"type": "http.response.body", "body": self.body})
            return None
        if not fields:
            return await self.app(scope, receive, send)

        async def send_with_fields(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", ())) + fields)
            await send(message)
        return await self.app(scope, receive, send_with_fields)
