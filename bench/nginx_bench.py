#!/usr/bin/python3
"""Requests per second and p99 latency through Debian's nginx, admitting
every request: no limit, stock limit_req, floodgate_limit_req (docs/nginx.md).
The goal this measures: floodgate_limit_req at 0.8x stock limit_req's
throughput or better, and at most 1 ms added at p99.

    make bench-nginx        (about 2 minutes)

One nginx (one worker) and one redis-server 7 with floodgate.so, both
pinned to CPU 0, on free loopback ports, serving a 3-byte static file;
wrk (Debian's) on CPU 1 with 50 connections, 5 s a run, 3 interleaved
rounds after a warm-up; medians. The limits admit everything (a huge rate
and burst), so every request of /fg costs one FG.LEAKY on one hot key, as
a per-client limit does. Both servers are stopped by their PIDs.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_server import BenchServer  # noqa: E402

NGINX = os.environ.get("FLOODGATE_NGINX", "/usr/sbin/nginx")
MODULE = os.path.join(REPO, "build", "nginx", "objs", "ngx_http_floodgate_module.so")
REDIS = os.environ.get("FLOODGATE_REDIS_SERVER", "/usr/bin/redis-server")
QUICK = os.environ.get("QUICK") == "1"
SECONDS = 2 if QUICK else 5
ROUNDS = 1 if QUICK else 3
CASES = [("no limit", "/none"), ("limit_req", "/stock"), ("floodgate_limit_req", "/fg")]


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_nginx(redis_port):
    prefix = tempfile.mkdtemp(prefix="floodgate-bench-nginx-")
    for d in ("logs", "tmp", "html"):
        os.makedirs(os.path.join(prefix, d))
    with open(os.path.join(prefix, "html", "ok"), "w") as f:
        f.write("ok\n")
    port = free_port()
    user = "user root root;" if os.geteuid() == 0 else ""
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write("""load_module %s;
daemon off;
master_process on;
worker_processes 1;
%s
pid logs/nginx.pid;
error_log logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    floodgate_server redis://127.0.0.1:%d timeout=1s;
    floodgate_limit_req_zone $remote_addr zone=fg rate=100000000r/s;
    limit_req_zone $binary_remote_addr zone=stock:1m rate=100000000r/s;
    server {
        listen 127.0.0.1:%d;
        root html;
        location /none { try_files /ok =404; }
        location /stock { limit_req zone=stock burst=100000000 nodelay; try_files /ok =404; }
        location /fg { floodgate_limit_req zone=fg burst=100000000 nodelay; try_files /ok =404; }
    }
}
""" % (MODULE, user, redis_port, port))
    proc = subprocess.Popen(["taskset", "-c", "0", NGINX, "-p", prefix + "/", "-c", "nginx.conf"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:%d/none" % port]
                          ).returncode == 0:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("nginx does not answer")
    return proc, prefix, port


def wrk(port, path):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c50", "-d%ds" % SECONDS,
                          "--latency", "http://127.0.0.1:%d%s" % (port, path)],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError("%s answered %s errors" % (path, errors.group(1)))
    return rps, float(p99.group(1)) * scale


def main():
    if not os.path.exists(MODULE):
        subprocess.run(["make", "-C", REPO, "nginx"], check=True, stdout=subprocess.DEVNULL)
    redis = BenchServer(REDIS, os.path.join(REPO, "build", "floodgate.so"), 0,
                        "floodgate-bench-redis-")
    nginx, prefix, port = start_nginx(redis.port)
    try:
        for _, path in CASES:  # warm-up, not recorded
            wrk(port, path)
        runs = {name: [] for name, _ in CASES}
        for r in range(ROUNDS):
            for name, path in CASES:
                runs[name].append(wrk(port, path))
                print("  round %d %-20s %9.0f req/s  p99 %.2f ms" % ((r + 1, name) + runs[name][-1]))
        stock_rps = statistics.median(x[0] for x in runs["limit_req"])
        stock_p99 = statistics.median(x[1] for x in runs["limit_req"])
        lines = ["| case | req/s | x limit_req | p99 (ms) | p99 - limit_req's (ms) |",
                 "|---|---:|---:|---:|---:|"]
        for name, _ in CASES:
            rps = statistics.median(x[0] for x in runs[name])
            p99 = statistics.median(x[1] for x in runs[name])
            lines.append("| %s | %.0f | %.2f | %.2f | %+.2f |" % (name, rps, rps / stock_rps, p99,
                                                                p99 - stock_p99))
        fg_rps = statistics.median(x[0] for x in runs["floodgate_limit_req"])
        fg_p99 = statistics.median(x[1] for x in runs["floodgate_limit_req"])
        goal = "met" if fg_rps >= 0.8 * stock_rps and fg_p99 - stock_p99 <= 1.0 else "not met"
        lines.append("")
        lines.append("**Goal** (>= 0.8x limit_req's req/s, <= 1 ms added at p99): %.2fx, %+.2f ms: %s."
                     % (fg_rps / stock_rps, fg_p99 - stock_p99, goal))
        table = "\n".join(lines)
        print(table)
        if not QUICK:
            with open(os.path.join(HERE, "results", "nginx.md"), "w") as f:
                f.write("# nginx: floodgate_limit_req against limit_req\n\n"
                        "`make bench-nginx` (bench/nginx_bench.py): one nginx worker and "
                        "redis-server on CPU 0, wrk -t1 -c50 on CPU 1, %d s a run, "
                        "medians of %d rounds.\n\n%s\n" % (SECONDS, ROUNDS, table))
    finally:
        nginx.terminate()
        nginx.wait(timeout=15)
        shutil.rmtree(prefix, ignore_errors=True)
        redis.stop()


if __name__ == "__main__":
    main()
