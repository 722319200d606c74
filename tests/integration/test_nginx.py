"""The nginx module (nginx/ngx_http_floodgate_module.c) in Debian's nginx,
against real redis-servers: limit_req's directives and answers, one rate
for several nginx servers, delays, dry runs, the failure policies, reloads
and internal redirects.

Each test writes an nginx.conf into a temporary prefix, starts
/usr/sbin/nginx (FLOODGATE_NGINX) in the foreground on a free loopback
port, and stops it by its PID. Zones refill at one request a minute, so no
request is given back during a test unless the test waits for it.

limit_req and named policies run on the module, on a stock redis-server (a
fresh one per test, as the module's) and on a stock 3-master cluster
(backends.py), where the module's library runs its server scripts;
limit_conn takes semaphores, which need the module.
"""

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import floodgate
from backends import BACKENDS, Target, target
from harness import REPO, Server, free_port, wait_for

NGINX = os.environ.get("FLOODGATE_NGINX", "/usr/sbin/nginx")
# the module built for that nginx (make test-nginx builds one per nginx)
MODULE = os.environ.get("FLOODGATE_NGINX_MODULE",
                        os.path.join(REPO, "build", "nginx", "objs", "ngx_http_floodgate_module.so"))


def build_module():
    if not os.path.exists(MODULE) and "FLOODGATE_NGINX_MODULE" not in os.environ:
        subprocess.run(["make", "-C", REPO, "nginx"], check=True, stdout=subprocess.DEVNULL)


class Nginx:
    """An nginx with floodgate loaded, its http{} block's body given; PORT
    in it is its own port, and html/ holds the files `ok` and `t`."""

    def __init__(self, http, port=None):
        build_module()
        self.dir = tempfile.mkdtemp(prefix="floodgate-nginx-")
        self.port = port or free_port()
        for d in ("logs", "tmp", "html"):
            os.makedirs(os.path.join(self.dir, d))
        for name in ("ok", "t"):
            with open(os.path.join(self.dir, "html", name), "w") as f:
                f.write("ok\n")
        user = "user root root;" if os.geteuid() == 0 else ""
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write("""load_module %s;
daemon off;
master_process on;
worker_processes 2;
%s
pid logs/nginx.pid;
error_log logs/error.log info;
worker_shutdown_timeout 5s;
events { worker_connections 256; }
http {
    access_log logs/access.log;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    %s
}
""" % (MODULE, user, http.replace("PORT", str(self.port))))
        self.proc = None

    def nginx(self, *args):
        return subprocess.run([NGINX, "-p", self.dir + "/", "-c", "nginx.conf", *args],
                              capture_output=True, text=True, timeout=30)

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.dir + "/", "-c", "nginx.conf"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def up():
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:  # a connection, not a request, which a limit might count
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(up, timeout=20)
        return self

    def get(self, path="/ok"):
        """(status, $floodgate_limit_req_status or _conn_status, seconds)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        start = time.monotonic()
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        self.headers = dict(r.getheaders())
        limit = r.getheader("X-Limit") or r.getheader("X-Conn", "")
        return r.status, limit, time.monotonic() - start

    def statuses(self, n, path="/ok"):
        return [self.get(path)[:2] for _ in range(n)]

    def reload(self):
        out = self.nginx("-s", "reload")
        assert out.returncode == 0, out.stderr

    def log(self):
        with open(os.path.join(self.dir, "logs", "error.log")) as f:
            return f.read()

    def alerts(self):
        return [l for l in self.log().splitlines()
                if any(w in l for w in ("[alert]", "[crit]", "[emerg]", "open socket"))]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def server_url(redis):
    """A backends.Target's URL, or that of anything with a port."""
    return getattr(redis, "url", None) or "redis://127.0.0.1:%d" % redis.port


def server_block(redis, limits, zone="rate=1r/m", extra=""):
    return """
    floodgate_server %s timeout=1s %s;
    floodgate_limit_req_zone $remote_addr zone=z %s;
    server {
        listen 127.0.0.1:PORT;
        root html;
        add_header X-Limit $floodgate_limit_req_status always;
        location /ok { %s }
        location /t { }
    }
""" % (server_url(redis), extra, zone, limits)


@pytest.fixture
def redis_server(request):
    s = Server(module=getattr(request, "param", "module") == "module").start()
    yield s
    s.stop()


@pytest.fixture(params=BACKENDS)
def backend(request):
    """A backends.Target: a module server or a stock server of the test's
    own, or the shared stock cluster (flushed)."""
    if request.param == "stock-cluster":
        return target("stock-cluster")
    s = Server(module=request.param == "module").start()
    request.addfinalizer(s.stop)
    return Target(request.param, [s])


# tests that look at, stop or pause their one server
ONE_SERVER = pytest.mark.parametrize("backend", ["module", "stock"], indirect=True,
                                     scope="function")


def set_policy(backend, name, *limits, deny=()):
    """A policy through the library (FG.POLICY on the module, its keys on a
    stock server)."""
    with floodgate.Client(backend.url) as c:
        c.policy_set(name, floodgate.PolicyDef(list(limits)))
        if deny:
            c.policy_deny(name, list(deny))


@pytest.fixture
def nginxes():
    started = []

    def start(http, port=None):
        n = Nginx(http, port).start()
        started.append(n)
        return n
    yield start
    for n in started:
        alerts = n.alerts()
        n.stop()
        assert not alerts, alerts


# ------------------------------------------------------------ configuration

@pytest.mark.parametrize("http, message", [
    ("floodgate_limit_req_zone $remote_addr zone=z rate=1r/h;", "invalid rate"),
    ("floodgate_limit_req_zone $remote_addr zone=a:b rate=1r/s;", "invalid zone size \"zone=a:b\""),
    ("floodgate_limit_req_zone $remote_addr zone=a:1k rate=1r/s;", "zone \"zone=a:1k\" is too small"),
    ("floodgate_limit_req_zone $remote_addr zone=:1m rate=1r/s;", "invalid zone name"),
    ("floodgate_limit_req_zone $remote_addr rate=1r/s;", "invalid number of arguments"),
    ("floodgate_limit_req_zone $remote_addr rate=1r/s rate=2r/s;", "must have \"zone\" and \"rate\""),
    ("server { listen 127.0.0.1:PORT; floodgate_limit_req zone=nope; }",
     "unknown floodgate_limit_req_zone \"nope\""),
    ("floodgate_limit_req_zone $remote_addr zone=z rate=1r/s;"
     "server { listen 127.0.0.1:PORT; floodgate_limit_req zone=z burst=-1; }",
     "invalid parameter \"burst=-1\""),
    ("floodgate_server redis://127.0.0.1:1 timeout=0;", "invalid parameter \"timeout=0\""),
    ("floodgate_limit_req_status 200;", "value must be between 400 and 599"),
    # a zone's name is one zone's, in nginx's words (its keys are its own
    # anyway: limit_req:name:... and limit_conn:name:...)
    ("floodgate_limit_req_zone $remote_addr zone=z rate=1r/s;"
     "floodgate_limit_conn_zone $remote_addr zone=z;",
     "the zone \"z\" is already declared for a different use"),
    ("floodgate_limit_conn_zone $remote_addr zone=z;"
     "floodgate_limit_req_zone $remote_addr zone=z rate=1r/s;",
     "the zone \"z\" is already declared for a different use"),
    ("floodgate_limit_req_zone $remote_addr zone=z rate=1r/s;"
     "floodgate_limit_req_zone $http_x zone=z rate=2r/s;",
     "floodgate_limit_req_zone \"z\" is already bound to key \"$remote_addr\""),
    ("floodgate_limit_conn_zone $remote_addr zone=z;floodgate_limit_conn_zone $http_x zone=z;",
     "floodgate_limit_conn_zone \"z\" is already bound to key \"$remote_addr\""),
    ("server { listen 127.0.0.1:PORT; location / { floodgate_policy a:b key=$remote_addr; } }",
     "invalid policy name \"a:b\""),
    ("floodgate_limit_req_zone $remote_addr zone=z rate=1r/s;"
     "server { listen 127.0.0.1:PORT; floodgate_limit_req zone=z; }",
     "no \"floodgate_server\" is defined"),
])
def test_bad_configurations_are_refused(http, message):
    n = Nginx(http)
    try:
        out = n.nginx("-t")
        assert out.returncode != 0 and message in out.stderr, out.stderr
    finally:
        n.stop()


# ------------------------------------------------------------------ limits

def test_burst_then_rejected_with_the_configured_status(backend, nginxes):
    n = nginxes(server_block(backend, "floodgate_limit_req zone=z burst=2 nodelay;"
                                      "floodgate_limit_req_status 429;"))
    assert n.statuses(5) == [(200, "PASSED")] * 3 + [(429, "REJECTED")] * 2
    # The state is Redis's, under "limit_req:zone:key".
    assert backend.client().exists("limit_req:z:127.0.0.1") == 1


def test_ratelimit_headers_of_the_ietf_draft(backend, nginxes):
    redis_server = backend
    n = nginxes(server_block(redis_server, "floodgate_limit_req zone=z burst=2 nodelay;"
                                           "floodgate_limit_req_headers on;"))
    # 1r/m is 16 milli-requests a second, as nginx keeps it: 62.5 s a request
    n.get()
    assert n.headers["RateLimit-Policy"] == '"z";q=3;w=188'
    assert n.headers["RateLimit"] == '"z";r=2;t=63'
    assert "Retry-After" not in n.headers
    n.get()
    n.get()
    assert n.headers["RateLimit"] == '"z";r=0;t=188'
    assert n.get()[0] == 503
    assert n.headers["RateLimit"] == '"z";r=0;t=188'
    assert n.headers["Retry-After"] in ("62", "63")  # one request's time, less the test's
    off = nginxes(server_block(redis_server, "floodgate_limit_req zone=z nodelay;"))
    off.get()
    assert "RateLimit" not in off.headers


def test_two_nginx_servers_share_one_rate(backend, nginxes):
    conf = server_block(backend, "floodgate_limit_req zone=z burst=4 nodelay;")
    a, b = nginxes(conf), nginxes(conf)
    got = []
    for _ in range(5):
        got.append(a.get()[0])
        got.append(b.get()[0])
    assert got.count(200) == 5 and got.count(503) == 5, got
    assert got[:5] == [200] * 5


@ONE_SERVER
def test_delays_as_limit_req(backend, nginxes):
    """2 r/s, burst 5, delay=1: the first two pass at once, the third waits
    its turn. However slow the machine, the bucket lets three requests
    through no faster than one request's time (500 ms) from the first's
    start to the third's end: the third waits what the first two did not
    take."""
    n = nginxes(server_block(backend, "floodgate_limit_req zone=z burst=5 delay=1;",
                             zone="rate=2r/s"))
    start = time.monotonic()
    first = n.get()
    second = n.get()
    third = n.get()
    took = time.monotonic() - start
    assert first[:2] == (200, "PASSED") and second[:2] == (200, "PASSED"), (first, second)
    assert third[:2] == (200, "DELAYED"), third
    assert took >= 0.5 - 0.002, took  # 2 ms for the ms rounding of two clocks
    assert third[2] < 10, third


def test_dry_run_passes_everything_and_says_what_it_would_do(backend, nginxes):
    n = nginxes(server_block(backend, "floodgate_limit_req zone=z nodelay;"
                                           "floodgate_limit_req_dry_run on;"))
    assert n.statuses(3) == [(200, "PASSED"), (200, "REJECTED_DRY_RUN"),
                             (200, "REJECTED_DRY_RUN")]
    assert re.search(r'limiting requests, dry run, excess: 1\.\d{3} by zone "z"', n.log()), n.log()


def test_limits_are_inherited_only_by_levels_without_their_own(backend, nginxes):
    conf = """
    floodgate_server %s;
    floodgate_limit_req_zone $remote_addr zone=z rate=1r/m;
    floodgate_limit_req_zone $remote_addr zone=wide rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        add_header X-Limit $floodgate_limit_req_status always;
        floodgate_limit_req zone=z burst=1 nodelay;
        location /ok { }
        location /t { floodgate_limit_req zone=wide burst=3 nodelay; }
    }
""" % backend.url
    n = nginxes(conf)
    assert [s for s, _ in n.statuses(3, "/ok")] == [200, 200, 503]
    assert [s for s, _ in n.statuses(5, "/t")] == [200, 200, 200, 200, 503]


def test_an_internal_redirect_counts_the_request_once(backend, nginxes):
    """burst 0: a second count of the same request would reject it."""
    conf = """
    floodgate_server %s;
    floodgate_limit_req_zone $remote_addr zone=z rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        add_header X-Limit $floodgate_limit_req_status always;
        floodgate_limit_req zone=z nodelay;
        location /r { try_files /missing /t; }
        location /t { }
    }
""" % backend.url
    n = nginxes(conf)
    assert n.get("/r")[:2] == (200, "PASSED")
    assert n.get("/t")[:2] == (503, "REJECTED")


@ONE_SERVER
def test_reload_keeps_the_limits_and_leaks_nothing(backend, nginxes):
    n = nginxes(server_block(backend, "floodgate_limit_req zone=z burst=3 nodelay;"))
    assert [s for s, _ in n.statuses(2)] == [200, 200]
    r = backend.client()
    for _ in range(3):
        n.reload()
    # The old workers exit once idle, closing their connections: what is
    # left is the new workers' (at most one each) and this test's own.
    wait_for(lambda: r.info("clients")["connected_clients"] <= 1 + 2, timeout=10)
    assert [s for s, _ in n.statuses(3)] == [200, 200, 503]
    # (requests may still reach a worker of an earlier generation, which
    # leaves once idle)
    wait_for(lambda: r.info("clients")["connected_clients"] <= 1 + 2, timeout=10)


# ------------------------------------------------------- keys from requests

def get_with(n, path, **headers):
    c = http.client.HTTPConnection("127.0.0.1", n.port, timeout=30)
    c.request("GET", path, headers={k.replace("_", "-"): v for k, v in headers.items()})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


@ONE_SERVER
def test_a_request_value_reaches_no_other_state(backend, nginxes):
    """A header names no key outside its policy's or zone's own: not the
    client's per-address zone (which then answered WRONGTYPE, and fail=open
    let everything through), not another zone, not the application's lock
    (on a stock server, which has no locks, a value of the application's)."""
    r = backend.client(decode_responses=True)
    if backend.module:
        r.execute_command("FG.POLICY", "SET", "api", "LIMIT", "TOKEN", 1000, 1)
        r.execute_command("FG.LOCK", "lock:order:7", "app", 60000)
    else:
        set_policy(backend, "api", floodgate.token_bucket(1000, 1))
        r.set("lock:order:7", "app")
    conf = """
    floodgate_server %s fail=open;
    floodgate_limit_req_zone $binary_remote_addr zone=perip rate=1r/m;
    floodgate_limit_req_zone $http_x_key zone=other rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok {
            floodgate_policy api key=$http_x_api_key;
            floodgate_limit_req zone=perip burst=3 nodelay;
        }
    }
""" % backend.url
    n = nginxes(conf)
    before = set(r.keys("*"))
    # every key a request could aim at: the per-address zone's own key in
    # every spelling, another zone's, and the application's lock
    planted = ["perip:~7f000001", "limit_req:perip:~7f000001", "limit_req:other:x",
               "lock:order:7", "policy:api:x", "~7f000001"]
    statuses = [get_with(n, "/ok", X_Api_Key=v) for v in planted]
    # the per-address limit still holds: burst 3, the rest refused
    assert statuses == [200] * 4 + [503] * 2, statuses
    if backend.module:
        assert r.execute_command("FG.UNLOCK", "lock:order:7", "app") == 0  # the app held it
    else:
        assert r.get("lock:order:7") == "app"
    # the policy's state, under its own kind and name, a key per value
    assert set(r.keys("*")) - before == {"limit_req:perip:~7f000001"} | {
        "policy:api:" + escaped(v) for v in planted}


def escaped(value):
    """A value as a request key holds it (src/core/request_key.c)."""
    raw = value.encode()
    if all(0x20 < b < 0x7f and b not in b"~{}" for b in raw):
        return value
    return "~" + raw.hex()


@ONE_SERVER
def test_the_escape_cannot_be_forged(backend, nginxes):
    """'~' starts a hex key, so a plain value holding it is written in hex
    too: "~612062" is not the bucket of "a b"."""
    conf = """
    floodgate_server %s;
    floodgate_limit_req_zone $http_x_key zone=k rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { floodgate_limit_req zone=k nodelay; }
    }
""" % backend.url
    n = nginxes(conf)
    assert get_with(n, "/ok", X_Key="a b") == 200
    assert get_with(n, "/ok", X_Key="~612062") == 200  # a bucket of its own
    assert get_with(n, "/ok", X_Key="{a}b") == 200
    assert get_with(n, "/ok", X_Key="a b") == 503
    r = backend.client(decode_responses=True)
    assert sorted(r.keys("limit_req:k:*")) == sorted([
        "limit_req:k:~612062", "limit_req:k:~7e363132303632", "limit_req:k:~7b617d62"])


# ---------------------------------------------------------------- failures

def failure_lines(n):
    return [l for l in n.log().splitlines() if "floodgate: fail=" in l]


def test_every_decision_of_fail_open_is_logged_and_counted_without_flooding(nginxes):
    """Redis unreachable, fail=open: each check passes; the first is logged
    with its reason at floodgate_fail_log_level, the others of each second
    in one line that counts them (each worker counts its own)."""
    import re

    class Nowhere:
        port = free_port()
    conf = server_block(Nowhere, "floodgate_limit_req zone=z nodelay;", extra="fail=open")
    n = nginxes(conf.replace("floodgate_server", "floodgate_fail_log_level warn;\n"
                                                   "    floodgate_server", 1))
    requests = 40
    start = time.monotonic()
    assert n.statuses(requests) == [(200, "PASSED")] * requests

    def counted():
        lines = failure_lines(n)
        firsts = [l for l in lines if 'zone "z" not checked, taken as passed: ' in l]
        more = [int(m.group(1)) for l in lines
                for m in [re.search(r"fail=open: (\d+) more checks taken as passed", l)] if m]
        return len(firsts) + sum(more) == requests
    wait_for(counted, timeout=30)  # a summary comes within a second of its first line
    lines = failure_lines(n)
    seconds = time.monotonic() - start
    assert all("[warn]" in l for l in lines), lines
    # a line and a summary a second at most, per worker, however many requests
    assert len(lines) <= 2 * 2 * (int(seconds) + 2), (seconds, lines)
    assert len(lines) < requests, lines


def test_fail_closed_is_logged_too(nginxes):
    class Nowhere:
        port = free_port()
    n = nginxes(server_block(Nowhere, "floodgate_limit_req zone=z nodelay;", extra="fail=closed"))
    assert n.statuses(3) == [(503, "REJECTED")] * 3
    wait_for(lambda: any("taken as rejected" in l and "[error]" in l for l in failure_lines(n)))


@pytest.mark.parametrize("fail, expected", [("fail=open", (200, "PASSED")),
                                            ("fail=closed", (503, "REJECTED"))])
def test_redis_unreachable(fail, expected, nginxes):
    class Nowhere:
        port = free_port()
    n = nginxes(server_block(Nowhere, "floodgate_limit_req zone=z nodelay;", extra=fail))
    assert n.statuses(2) == [expected] * 2


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_a_stopped_redis_is_answered_within_the_timeout_then_back(redis_server, nginxes):
    n = nginxes(server_block(redis_server, "floodgate_limit_req zone=z burst=9 nodelay;",
                             extra="fail=closed").replace("timeout=1s", "timeout=300ms"))
    assert n.get()[:2] == (200, "PASSED")
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        status, limit, took = n.get()
        assert (status, limit) == (503, "REJECTED")
        assert 0.3 <= took < 10, took  # the timeout, from the request's check on
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    wait_for(lambda: n.get()[0] == 200, timeout=10)


# ------------------------------------------------------- beside limit_req

@pytest.mark.parametrize("redis_server, options", [
    ("module", "burst=3"), ("module", "burst=3 nodelay"), ("module", "burst=3 delay=1"),
    ("stock", "burst=3 nodelay")],
    indirect=["redis_server"], scope="function")
def test_the_same_answers_as_stock_limit_req(redis_server, nginxes, options):
    """Eight requests at once to a location limited by nginx's own limit_req
    and eight to one limited by floodgate's, with the same rate and burst:
    as many pass, wait and are rejected (within one, as the issue allows:
    the two clocks tick apart)."""
    import collections
    import concurrent.futures
    conf = """
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fg rate=2r/s;
    limit_req_zone $binary_remote_addr zone=stock:1m rate=2r/s;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { limit_req zone=stock %s; add_header X-Limit $limit_req_status always; }
        location /t { floodgate_limit_req zone=fg %s;
                      add_header X-Limit $floodgate_limit_req_status always; }
    }
""" % (redis_server.port, options, options)
    n = nginxes(conf)
    counts = {}
    for path in ("/ok", "/t"):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: n.get(path)[:2], range(8)))
        counts[path] = collections.Counter(limit for _, limit in answers)
        assert all((s == 200) == (l != "REJECTED") for s, l in answers), answers
    assert counts["/ok"]["REJECTED"] >= 3, counts  # the burst was exceeded
    for status in ("PASSED", "DELAYED", "REJECTED"):
        assert abs(counts["/ok"][status] - counts["/t"][status]) <= 1, counts


# -------------------------------------------------------------- limit_conn

class Upstream:
    """A backend on a free port that answers at once, or, while held,
    keeps each request it accepts waiting until released."""

    def __init__(self):
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.hold = threading.Event()
        self.release = threading.Event()
        self.accepted = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        import threading
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self.answer, args=(conn, self.hold.is_set()),
                             daemon=True).start()

    def answer(self, conn, held):
        try:
            conn.recv(65536)
            if held:
                self.release.wait(30)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.release.set()
        self.sock.close()


def conn_block(redis, upstream, lease="30s", extra=""):
    return """
    floodgate_server redis://127.0.0.1:%d timeout=1s %s;
    floodgate_limit_conn_zone $remote_addr zone=c;
    server {
        listen 127.0.0.1:PORT;
        add_header X-Conn $floodgate_limit_conn_status always;
        location /slow {
            floodgate_limit_conn c 1;
            floodgate_limit_conn_lease %s;
            floodgate_limit_conn_status 429;
            proxy_pass http://127.0.0.1:%d;
        }
    }
""" % (redis.port, extra, lease, upstream.port)


def get_in_thread(n, path="/slow"):
    """A request in a thread of its own: out["answer"], or out["error"] when
    the connection went (a killed worker)."""
    import threading
    out = {}

    def run():
        try:
            out["answer"] = n.get(path)[:2]
        except OSError as e:
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.close()


def test_limit_conn_holds_across_two_servers(redis_server, nginxes, upstream):
    a = nginxes(conn_block(redis_server, upstream))
    b = nginxes(conn_block(redis_server, upstream))
    upstream.hold.set()
    t, out = get_in_thread(a)
    wait_for(lambda: upstream.accepted == 1)  # a's request holds the slot
    upstream.hold.clear()
    assert b.get("/slow")[:2] == (429, "REJECTED")
    assert upstream.accepted == 1  # refused before the backend
    upstream.release.set()
    t.join(10)
    assert out["answer"] == (200, "PASSED")
    # the request ended: its slot is back (given back without waiting: the
    # key goes once the releases are through)
    wait_for(lambda: b.get("/slow")[0] == 200, timeout=5)
    wait_for(lambda: redis_server.client().exists("limit_conn:c:127.0.0.1") == 0, timeout=5)


@pytest.mark.parametrize("redis_server", ["module"], indirect=True, scope="function")
def test_subrequests_are_limited_as_limit_conn_limits_them(redis_server, nginxes, upstream):
    """Regression: a subrequest never took a slot. Beside limit_conn: a
    location mirrored to one limited to 1 connection (its main request not
    limited) whose backend holds the first mirror: the next request's
    mirror is refused by both. (The module's server: a stock one has no
    semaphores.)"""
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_conn_zone $remote_addr zone=fc;
    limit_conn_zone $binary_remote_addr zone=sc:1m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { mirror /sm; }
        location /t { mirror /fm; }
        location /sm { internal; limit_conn sc 1; proxy_pass http://127.0.0.1:%d; }
        location /fm { internal; floodgate_limit_conn fc 1; proxy_pass http://127.0.0.1:%d; }
    }
""" % (redis_server.port, upstream.port, upstream.port))
    for path, zone in (("/ok", "sc"), ("/t", "fc")):
        upstream.release.clear()
        upstream.hold.set()
        before = upstream.accepted
        assert n.get(path)[0] == 200
        wait_for(lambda: upstream.accepted == before + 1)  # its mirror holds the slot
        upstream.hold.clear()
        assert n.get(path)[0] == 200
        wait_for(lambda: 'limiting connections by zone "%s"' % zone in n.log(), timeout=10)
        assert upstream.accepted == before + 1  # the second mirror was refused before it
        upstream.release.set()


def test_limit_conn_slot_comes_back_when_the_client_goes_away(redis_server, nginxes, upstream):
    a = nginxes(conn_block(redis_server, upstream))
    upstream.hold.set()
    s = socket.create_connection(("127.0.0.1", a.port))
    s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for(lambda: upstream.accepted == 1)
    upstream.hold.clear()
    assert a.get("/slow")[:2] == (429, "REJECTED")
    s.close()  # the client goes away: nginx ends the request, and gives the slot back
    wait_for(lambda: a.get("/slow")[0] == 200, timeout=5)


def test_limit_conn_slot_of_a_killed_worker_comes_back_with_its_lease(redis_server, nginxes,
                                                                     upstream):
    a = nginxes(conn_block(redis_server, upstream, lease="3s"))
    b = nginxes(conn_block(redis_server, upstream, lease="3s"))
    upstream.hold.set()
    get_in_thread(a)
    wait_for(lambda: upstream.accepted == 1)
    upstream.hold.clear()
    workers = subprocess.run(["pgrep", "-P", str(a.proc.pid)], capture_output=True,
                             text=True).stdout.split()
    for w in workers:
        os.kill(int(w), signal.SIGKILL)
    # renewed every second, the lease has two seconds at least left
    assert b.get("/slow")[:2] == (429, "REJECTED")
    start = time.monotonic()
    wait_for(lambda: b.get("/slow")[0] == 200, timeout=15)
    assert time.monotonic() - start < 10
    a.proc.send_signal(signal.SIGQUIT)  # its error log has the killed workers' alerts
    a.proc.wait(timeout=15)
    a.alerts = lambda: []


# ---------------------------------------------------------------- policies

def test_a_named_policy_limits_the_location(backend, nginxes):
    if backend.module:
        r = backend.client()
        r.execute_command("FG.POLICY", "SET", "api", "LIMIT", "TOKEN", 2, 0.001)
        r.execute_command("FG.POLICY", "DENY", "api", "blocked")
    else:
        set_policy(backend, "api", floodgate.token_bucket(2, 0.001), deny=["blocked"])
    conf = """
    floodgate_server %s;
    server {
        listen 127.0.0.1:PORT;
        root html;
        add_header X-Limit $floodgate_limit_req_status always;
        location /ok { floodgate_policy api key=$remote_addr; }
        location /t { floodgate_policy api key=$arg_user; floodgate_limit_req_status 429; }
    }
""" % backend.url
    n = nginxes(conf)
    assert n.statuses(3) == [(200, "PASSED"), (200, "PASSED"), (503, "REJECTED")]
    assert n.get("/t?user=blocked")[:2] == (429, "REJECTED")
    assert n.get("/t?user=someone")[:2] == (200, "PASSED")
    assert n.get("/t")[:2] == (200, "")  # an empty key is not limited
    assert "limiting requests by policy \"api\"" in n.log()


@pytest.mark.parametrize("redis_server, options, passed_at_once", [
    ("module", "burst=5", 0), ("module", "burst=5 delay=2", 2), ("stock", "burst=5 delay=2", 2)],
    indirect=["redis_server"], scope="function")
def test_the_same_delays_as_stock_limit_req(redis_server, nginxes, options, passed_at_once):
    """Five requests at once beside limit_req, 10 r/s and burst 5 (and the
    first two excess requests undelayed): each module logs the excess it
    delayed each request for, in limit_req's words; as delays, sorted, they
    agree within what the arrivals allow. Each delay is the burst's 100 ms
    steps less the time since its first request was decided, so two
    modules' delays differ by as much as their decisions' instants are
    spread: within each burst, the spread of the requests' start times
    (nginx's access log: $msec less $request_time), plus, for floodgate,
    a round trip to Redis (the longest $request_time of the requests it did
    not delay), plus 1 ms for each of nginx's millisecond clock and the
    log's rounding."""
    conf = """
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fg rate=10r/s;
    limit_req_zone $binary_remote_addr zone=stock:1m rate=10r/s;
    log_format starts '$uri $msec $request_time';
    server {
        listen 127.0.0.1:PORT;
        root html;
        access_log logs/starts.log starts;
        location /ok { limit_req zone=stock %s; }
        location /t { floodgate_limit_req zone=fg %s; }
    }
""" % (redis_server.port, options, options)
    n = nginxes(conf)
    for path in ("/ok", "/t"):
        # connected first, then the five requests written in one go, so
        # that both bursts arrive within a fraction of a millisecond
        socks = [socket.create_connection(("127.0.0.1", n.port), timeout=30) for _ in range(5)]
        for sk in socks:
            sk.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\n\r\n")
        for sk in socks:
            answer = b""
            while True:
                chunk = sk.recv(65536)
                if not chunk:
                    break
                answer += chunk
            sk.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    log = n.log()
    delays = lambda zone: sorted(  # noqa: E731 - limit_req's words: excess in requests
        (float(x) - passed_at_once) * 1000 / 10
        for x in re.findall(r'delaying request, excess: (\d+\.\d{3}), by zone "%s"' % zone, log))
    stock, ours = delays("stock"), delays("fg")
    assert len(stock) >= 4 - passed_at_once and len(ours) == len(stock), (stock, ours)
    with open(os.path.join(n.dir, "logs", "starts.log")) as f:
        timing = [line.split() for line in f.read().splitlines()]
    starts = {path: [float(msec) - float(took) for uri, msec, took in timing if uri == path]
              for path in ("/ok", "/t")}
    spread_ms = {path: (max(v) - min(v)) * 1000 for path, v in starts.items()}
    # the requests floodgate did not delay answered after a round trip each
    undelayed = sorted(float(took) for uri, _, took in timing if uri == "/t")[:5 - len(ours)]
    round_trip_ms = max(undelayed) * 1000
    tolerance = spread_ms["/ok"] + spread_ms["/t"] + round_trip_ms + 2
    assert all(abs(a - b) <= tolerance for a, b in zip(stock, ours)), (stock, ours, tolerance)


# Rates whose interval is no whole number of ms (10r/m: 6,024.096 ms), and
# some that are, per second and per minute.
RATES = ("10r/m", "20r/m", "3r/s", "7r/s", "13r/m", "1r/s", "2r/m", "30r/s", "1r/m")


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_no_delay_where_limit_req_has_none(redis_server, nginxes):
    """Regression: at 10r/m (and 20r/m, 3r/s) a new key's first request was
    DELAYED by 1 ms, where limit_req passes it: the module took the
    interval in whole ms (6,024) and the bucket's reset rounded up (6,025).
    Beside limit_req, at each rate, burst=2 without nodelay: the first
    request of a key passes on both, the second is delayed on both."""
    zones = "".join("floodgate_limit_req_zone $arg_k zone=f%d rate=%s;\n"
                    "    limit_req_zone $arg_k zone=s%d:1m rate=%s;\n" % (i, r, i, r)
                    for i, r in enumerate(RATES))
    locations = "".join("location /s%d { limit_req zone=s%d burst=2; try_files /ok =404;"
                        " add_header X-Limit $limit_req_status always; }\n"
                        "        location /f%d { floodgate_limit_req zone=f%d burst=2; try_files /ok =404;"
                        " add_header X-Limit $floodgate_limit_req_status always; }\n"
                        % (i, i, i, i) for i in range(len(RATES)))
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    %s
    server {
        listen 127.0.0.1:PORT;
        root html;
        %s
    }
""" % (redis_server.port, zones, locations))
    for i, rate in enumerate(RATES):
        for module in ("s", "f"):
            first = n.get("/%s%d?k=first" % (module, i))
            assert first[:2] == (200, "PASSED"), (rate, module, first)
    assert "delaying request" not in n.log(), n.log()


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_log_lines_are_limit_reqs(redis_server, nginxes):
    """Regression: floodgate logged "limiting requests by zone" and
    "delaying request, 990 ms", which fail2ban's nginx-limit-req filter and
    log parsers written for nginx do not match. Beside limit_req: a
    rejection and a delay, each logged in limit_req's words, with the same
    excess (within what a ms of the two clocks makes of it)."""
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fg rate=1r/m;
    limit_req_zone $binary_remote_addr zone=stock:1m rate=1r/m;
    floodgate_limit_req_zone $remote_addr zone=fgd rate=10r/s;
    limit_req_zone $binary_remote_addr zone=stockd:1m rate=10r/s;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { limit_req zone=stock; }
        location /t { floodgate_limit_req zone=fg; }
        location /okd { limit_req zone=stockd burst=3; try_files /ok =404; }
        location /td { floodgate_limit_req zone=fgd burst=3; try_files /ok =404; }
    }
""" % redis_server.port)
    took = {}  # zone -> s from the first request's start to the second's end
    for path, zone, statuses in (("/ok", "stock", [503]), ("/t", "fg", [503]),
                                 ("/okd", "stockd", [200]), ("/td", "fgd", [200])):
        start = time.monotonic()
        first, second = n.get(path), n.get(path)
        took[zone] = time.monotonic() - start
        assert [first[0], second[0]] == [200] + statuses, (path, first, second)
    log = n.log()
    said = {}
    for what, comma in (("limiting requests", ""), ("delaying request", ",")):
        for x, zone in re.findall(r'%s, excess: (\d+\.\d{3})%s by zone "(\w+)", client: 127\.0\.0\.1'
                                  % (what, comma), log):
            said[zone] = float(x)
    assert set(said) == set(took), log
    # Each found the first request's unit less what leaked since: at most
    # the time the two took, less the delay the second then waited (its
    # excess, in intervals: 60 s and 100 ms), in intervals; and within a ms
    # of the clocks' rounding (floodgate's reset is whole ms, rounded up).
    for zone, interval, delayed in (("stock", 60, 0), ("fg", 60, 0), ("stockd", 0.1, 1),
                                    ("fgd", 0.1, 1)):
        leaked, ms = 1 - said[zone], 0.001 / interval
        bound = (took[zone] - delayed * said[zone] * interval) / interval
        assert -0.001 - ms <= leaked <= bound + 0.001 + ms, (zone, said, took)


def zones_all_or_nothing(nginxes, url):
    """A zone by $arg_a (1r/m) and one by address (1r/m, burst=2 nodelay),
    beside limit_req's: a=1, a=1, a=1, a=2, a=3, a=4 get 200 429 429 200
    200 429 from both, the refusals of a=1 leaving the address its burst
    for a=2 and a=3."""
    n = nginxes("""
    floodgate_server %s;
    floodgate_limit_req_zone $arg_a zone=fa rate=1r/m;
    floodgate_limit_req_zone $remote_addr zone=fip rate=1r/m;
    limit_req_zone $arg_a zone=sa:1m rate=1r/m;
    limit_req_zone $binary_remote_addr zone=sip:1m rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        limit_req_status 429;
        floodgate_limit_req_status 429;
        location /ok { limit_req zone=sa; limit_req zone=sip burst=2 nodelay; }
        location /t { floodgate_limit_req zone=fa; floodgate_limit_req zone=fip burst=2 nodelay; }
    }
""" % url)
    for path in ("/ok", "/t"):
        got = [n.get("%s?a=%s" % (path, a))[0] for a in (1, 1, 1, 2, 3, 4)]
        assert got == [200, 429, 429, 200, 200, 429], (path, got)


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_several_zones_all_or_nothing(redis_server, nginxes):
    """Regression: each zone that passed kept the request another refused,
    where limit_req charges its zones only when all pass
    (zones_all_or_nothing)."""
    zones_all_or_nothing(nginxes, "redis://127.0.0.1:%d" % redis_server.port)


def test_several_zones_all_or_nothing_across_cluster_nodes(nginxes):
    """The same where the zones' keys sit on different masters of a
    cluster: the refund goes to the node of the zone that passed."""
    from test_client_cluster import cluster_url, holders
    cluster = target("stock-cluster").cluster
    keys = ["limit_req:fa:%d" % a for a in (1, 2, 3, 4)] + ["limit_req:fip:127.0.0.1"]
    def forget():  # the shared cluster outlives this test: no state of an earlier run
        for node in cluster.nodes:
            c = node.client()
            try:
                for k, ports in holders(cluster, keys).items():
                    if node.port in ports:
                        c.delete(k)
            finally:
                c.close()
    forget()
    zones_all_or_nothing(nginxes, cluster_url(cluster))
    where = holders(cluster, keys)
    forget()
    assert len({ports[0] for ports in where.values() if ports}) > 1, where  # more than one master


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_subrequests_are_limited_as_limit_req_limits_them(redis_server, nginxes):
    """Regression: a subrequest was never limited. Beside limit_req: a
    location mirrored to one limited to 1r/m (its main request not
    limited), four requests: the mirror passes once and is limited three
    times by both; and a main request limited already does not limit its
    mirror again (limit_req's status is the main request's)."""
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fm rate=1r/m;
    limit_req_zone $binary_remote_addr zone=sm:1m rate=1r/m;
    floodgate_limit_req_zone $remote_addr zone=fboth rate=1r/m;
    limit_req_zone $binary_remote_addr zone=sboth:1m rate=1r/m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { mirror /sm; }
        location /t { mirror /fm; }
        location /sm { internal; limit_req zone=sm; try_files /ok =404; }
        location /fm { internal; floodgate_limit_req zone=fm; try_files /ok =404; }
        location /okb { limit_req zone=sboth burst=9 nodelay; mirror /smb; try_files /ok =404; }
        location /tb { floodgate_limit_req zone=fboth burst=9 nodelay; mirror /fmb; try_files /ok =404; }
        location /smb { internal; limit_req zone=sboth; try_files /ok =404; }
        location /fmb { internal; floodgate_limit_req zone=fboth; try_files /ok =404; }
    }
""" % redis_server.port)
    for path in ("/ok", "/t", "/okb", "/tb"):
        assert [n.get(path)[0] for _ in range(4)] == [200] * 4, path

    def limited(zone):
        return len(re.findall(r'limiting requests, excess: [\d.]+ by zone "%s"' % zone, n.log()))
    wait_for(lambda: limited("sm") == 3 and limited("fm") == 3, timeout=10)
    assert limited("sboth") == limited("fboth") == 0, n.log()


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_http2_as_http1(redis_server, nginxes):
    """HTTP/2 (cleartext, curl's prior knowledge) beside limit_req: at 2r/s,
    burst=2 delay=1,
    three requests pass, pass and wait; at 1r/m, the second is rejected;
    each with its status in the header, as over HTTP/1.1."""
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fd rate=2r/s;
    floodgate_limit_req_zone $remote_addr zone=fr rate=1r/m;
    limit_req_zone $binary_remote_addr zone=sd:1m rate=2r/s;
    limit_req_zone $binary_remote_addr zone=sr:1m rate=1r/m;
    server {
        listen 127.0.0.1:PORT http2;
        root html;
        location /d/s { limit_req zone=sd burst=2 delay=1;
                        add_header X-Limit $limit_req_status always; try_files /ok =404; }
        location /d/f { floodgate_limit_req zone=fd burst=2 delay=1;
                        add_header X-Limit $floodgate_limit_req_status always; try_files /ok =404; }
        location /r/s { limit_req zone=sr; add_header X-Limit $limit_req_status always;
                        try_files /ok =404; }
        location /r/f { floodgate_limit_req zone=fr; add_header X-Limit $floodgate_limit_req_status always;
                        try_files /ok =404; }
    }
""" % redis_server.port)

    def curl(path, times):
        # a connection each: Debian's curl 7.88 fails a prior-knowledge
        # connection's second request ("Error in the HTTP2 framing layer")
        answers = []
        for _ in range(times):
            out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null",
                                  "-w", "%{http_version} %{http_code} %header{x-limit}",
                                  "http://127.0.0.1:%d%s" % (n.port, path)],
                                 capture_output=True, text=True, timeout=30)
            answers.append(tuple(out.stdout.split()))
        return answers
    for module in ("s", "f"):
        assert curl("/d/" + module, 3) == [("2", "200", "PASSED"), ("2", "200", "PASSED"),
                                           ("2", "200", "DELAYED")], module
        assert curl("/r/" + module, 2) == [("2", "200", "PASSED"), ("2", "503", "REJECTED")], module


@pytest.mark.parametrize("redis_server", ["module"], indirect=True, scope="function")
def test_a_stock_configuration_carries_over_by_its_names(redis_server, nginxes):
    """Regression (zone=name:size was refused): limit_req's and limit_conn's
    lines, zone sizes and $binary_remote_addr included, become floodgate's
    by their names alone (docs/nginx.md's migration), and answer as
    stock's do."""
    stock = """
    limit_req_zone $binary_remote_addr zone=%(p)sip:10m rate=1r/m;
    limit_conn_zone $binary_remote_addr zone=%(p)sc:10m;
    server {
        listen 127.0.0.1:%(port)s;
        root html;
        limit_req_status 429;
        limit_req_log_level warn;
        limit_conn_status 503;
        add_header X-Limit $limit_req_status always;
        location /ok { limit_req zone=%(p)sip burst=1 nodelay; limit_conn %(p)sc 5; }
    }
"""
    floodgate = re.sub(r"\b(limit_req|limit_conn)", r"floodgate_\1",
                       stock.replace("$limit_req_status", "$floodgate_limit_req_status"))
    ports = {"f": free_port()}
    n = nginxes("floodgate_server redis://127.0.0.1:%d;\n" % redis_server.port +
                stock % {"p": "s", "port": "PORT"} + floodgate % {"p": "f", "port": ports["f"]})
    ports["s"] = n.port
    for p in ("s", "f"):
        got = []
        for _ in range(3):
            c = http.client.HTTPConnection("127.0.0.1", ports[p], timeout=30)
            c.request("GET", "/ok")
            r = c.getresponse()
            r.read()
            got.append((r.status, r.getheader("X-Limit")))
            c.close()
        assert got == [(200, "PASSED"), (200, "PASSED"), (429, "REJECTED")], (p, got)


@pytest.mark.parametrize("redis_server", ["module"], indirect=True, scope="function")
def test_limit_req_runs_before_limit_conn(redis_server, nginxes):
    """Regression: floodgate_limit_conn ran before floodgate_limit_req (a
    phase runs its handlers in the reverse order of registration), so a
    delayed request held its slot through its delay and the next one was
    refused. Beside limit_req and limit_conn: rate 2r/s, burst 5, one
    connection; one request, then two at once: all three pass on both. (On
    the module's server: a stock one has no semaphores, docs/scripts.md.)"""
    import concurrent.futures
    n = nginxes("""
    floodgate_server redis://127.0.0.1:%d;
    floodgate_limit_req_zone $remote_addr zone=fr rate=2r/s;
    floodgate_limit_conn_zone $remote_addr zone=fc;
    limit_req_zone $binary_remote_addr zone=sr:1m rate=2r/s;
    limit_conn_zone $binary_remote_addr zone=sc:1m;
    server {
        listen 127.0.0.1:PORT;
        root html;
        location /ok { limit_req zone=sr burst=5; limit_conn sc 1; }
        location /t { floodgate_limit_req zone=fr burst=5; floodgate_limit_conn fc 1; }
    }
""" % redis_server.port)
    for path in ("/ok", "/t"):
        assert n.get(path)[0] == 200
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            statuses = list(pool.map(lambda _: n.get(path)[0], range(2)))
        assert statuses == [200, 200], (path, statuses)


@pytest.mark.parametrize("redis_server", ["module", "stock"], indirect=True, scope="function")
def test_a_paused_redis_is_answered_within_the_timeout(redis_server, nginxes):
    """CLIENT PAUSE holds the checks (writes) in the server: the timeout
    answers them, by fail=open here, and the limits apply again after."""
    n = nginxes(server_block(redis_server, "floodgate_limit_req zone=z burst=1 nodelay;",
                             extra="fail=open").replace("timeout=1s", "timeout=300ms"))
    assert n.get()[:2] == (200, "PASSED")
    redis_server.client().execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    try:
        status, limit, took = n.get()
        assert (status, limit) == (200, "PASSED")
        assert 0.3 <= took < 10, took
    finally:
        redis_server.client().execute_command("CLIENT", "UNPAUSE")
    # the limits apply again: the burst runs out
    wait_for(lambda: n.get()[0] == 503, timeout=10)


@pytest.mark.parametrize("kind", ["module", "stock"])
def test_a_cluster_behind_floodgate_server(nginxes, kind):
    """redis+cluster://: each zone key on its slot's master, limit_req and
    limit_conn alike (10 slots: a slot given back without waiting never
    stands in the way of the next request); a stock cluster has no
    semaphores, so limit_req alone there."""
    from topology import Cluster
    from test_client_cluster import cluster_url, holders
    cluster = Cluster().start() if kind == "module" else target("stock-cluster").cluster
    conn = "floodgate_limit_conn c 10;" if kind == "module" else ""
    try:
        conf = """
    floodgate_server %s;
    floodgate_limit_req_zone $arg_k zone=z rate=1r/m;
    floodgate_limit_conn_zone $arg_k zone=c;
    server {
        listen 127.0.0.1:PORT;
        root html;
        add_header X-Limit $floodgate_limit_req_status always;
        location /ok { floodgate_limit_req zone=z burst=1 nodelay; %s }
    }
""" % (cluster_url(cluster), conn)
        n = nginxes(conf)
        for k in ("a", "b", "c", "d"):
            assert [s for s, _ in n.statuses(3, "/ok?k=" + k)] == [200, 200, 503], k
        where = holders(cluster, ["limit_req:z:" + k for k in "abcd"])
        assert all(len(ports) == 1 for ports in where.values()), where
        assert len({ports[0] for ports in where.values()}) > 1  # spread over masters
    finally:
        if kind == "module":
            cluster.stop()
