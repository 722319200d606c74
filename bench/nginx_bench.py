#!/usr/bin/python3
"""Requests per second and p99 latency through Debian's nginx, admitting
every request: no limit, stock limit_req, floodgate_limit_req (docs/nginx.md).
The goal this measures (issue 27): each floodgate case at 0.85x its stock
case's throughput or better, at most 0.5 ms added at p99: one zone, two
zones on one location, and limit_req with limit_conn.

    make bench-nginx        (about 4 minutes)

One nginx (one worker) and one redis-server 7 with floodgate.so, both
pinned to CPU 0, on free loopback ports, serving a 3-byte static file;
wrk (Debian's) on CPU 1 with 50 connections, 5 s a run, 3 interleaved
rounds after a warm-up; medians. The limits admit everything (a huge rate
and burst), so every request of /fg costs one FG.LEAKY on one hot key, as
a per-client limit does; /fg2 two, and /fgc one and a semaphore's acquire
and release. Both servers are stopped by their PIDs.

Where the time goes: each run also reads the CPU time (/proc/PID/stat,
user + system) that the nginx worker and redis-server spent over it, per
request wrk counted. CPU 0 is the bottleneck (the worker keeps it busy),
so a floodgate case's throughput is at most what a worker adding nothing
to stock's would give with Redis on the same CPU: stock's CPU 0 time per
request / (that + Redis's per request in the floodgate case). The report
gives that ceiling beside the goal's 0.85x.
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
from bench_server import BenchServer, process_cpu_seconds  # noqa: E402

NGINX = os.environ.get("FLOODGATE_NGINX", "/usr/sbin/nginx")
MODULE = os.path.join(REPO, "build", "nginx", "objs", "ngx_http_floodgate_module.so")
REDIS = os.environ.get("FLOODGATE_REDIS_SERVER", "/usr/bin/redis-server")
QUICK = os.environ.get("QUICK") == "1"
SECONDS = 2 if QUICK else 5
ROUNDS = 1 if QUICK else 3
# (name, path, the stock case a floodgate case is measured against)
CASES = [("no limit", "/none", None), ("limit_req", "/stock", None),
         ("floodgate_limit_req", "/fg", "limit_req"),
         ("limit_req, two zones", "/stock2", None),
         ("floodgate_limit_req, two zones", "/fg2", "limit_req, two zones"),
         ("limit_req + limit_conn", "/stockc", None),
         ("floodgate_limit_req + floodgate_limit_conn", "/fgc", "limit_req + limit_conn")]


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
    floodgate_limit_req_zone $remote_addr zone=fg2 rate=100000000r/s;
    floodgate_limit_conn_zone $remote_addr zone=fgc;
    limit_req_zone $binary_remote_addr zone=stock:1m rate=100000000r/s;
    limit_req_zone $binary_remote_addr zone=stock2:1m rate=100000000r/s;
    limit_conn_zone $binary_remote_addr zone=stockc:1m;
    server {
        listen 127.0.0.1:%d;
        root html;
        location /none { try_files /ok =404; }
        location /stock { limit_req zone=stock burst=100000000 nodelay; try_files /ok =404; }
        location /fg { floodgate_limit_req zone=fg burst=100000000 nodelay; try_files /ok =404; }
        location /stock2 { limit_req zone=stock burst=100000000 nodelay;
                           limit_req zone=stock2 burst=100000000 nodelay; try_files /ok =404; }
        location /fg2 { floodgate_limit_req zone=fg burst=100000000 nodelay;
                        floodgate_limit_req zone=fg2 burst=100000000 nodelay; try_files /ok =404; }
        location /stockc { limit_req zone=stock burst=100000000 nodelay;
                           limit_conn stockc 1000; try_files /ok =404; }
        location /fgc { floodgate_limit_req zone=fg burst=100000000 nodelay;
                        floodgate_limit_conn fgc 1000; try_files /ok =404; }
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


def worker_pid(master):
    """The one worker of an nginx master (worker_processes 1)."""
    for _ in range(100):
        out = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout
        if out.split():
            return int(out.split()[0])
        time.sleep(0.1)
    raise RuntimeError("nginx has no worker")


def wrk(port, path, worker, redis):
    """req/s, p99 (ms), and the worker's and Redis' CPU µs per request."""
    before = process_cpu_seconds(worker), redis.cpu_seconds()
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c50", "-d%ds" % SECONDS,
                          "--latency", "http://127.0.0.1:%d%s" % (port, path)],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError("%s answered %s errors" % (path, errors.group(1)))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    spent = [(after - b) * 1e6 / requests
             for b, after in zip(before, (process_cpu_seconds(worker), redis.cpu_seconds()))]
    return rps, float(p99.group(1)) * scale, spent[0], spent[1]


def main():
    if not os.path.exists(MODULE):
        subprocess.run(["make", "-C", REPO, "nginx"], check=True, stdout=subprocess.DEVNULL)
    redis = BenchServer(REDIS, os.path.join(REPO, "build", "floodgate.so"), 0,
                        "floodgate-bench-redis-")
    nginx, prefix, port = start_nginx(redis.port)
    try:
        worker = worker_pid(nginx.pid)
        for _, path, _ in CASES:  # warm-up, not recorded
            wrk(port, path, worker, redis)
        runs = {name: [] for name, _, _ in CASES}
        for r in range(ROUNDS):
            for name, path, _ in CASES:
                runs[name].append(wrk(port, path, worker, redis))
                print("  round %d %-44s %9.0f req/s  p99 %.2f ms  worker %.1f us  redis %.1f us"
                      % ((r + 1, name) + runs[name][-1]))
        rps, p99, cpu_worker, cpu_redis = (
            {name: statistics.median(x[k] for x in runs[name]) for name in runs} for k in range(4))
        # each row against stock limit_req's, and a floodgate row against its own stock case
        lines = ["| case | req/s | x limit_req | p99 (ms) | p99 - limit_req's (ms) | x its stock case | "
                 "p99 - its stock case's (ms) |", "|---|---:|---:|---:|---:|---:|---:|"]
        goals = []
        for name, _, stock in CASES:
            own = ("| %.2f | %+.2f |" % (rps[name] / rps[stock], p99[name] - p99[stock])
                   if stock else "| | |")
            lines.append("| %s | %.0f | %.2f | %.2f | %+.2f %s" % (
                name, rps[name], rps[name] / rps["limit_req"], p99[name],
                p99[name] - p99["limit_req"], own))
            if stock:
                goals.append((name, rps[name] / rps[stock], p99[name] - p99[stock]))
        met = all(ratio >= 0.85 and added <= 0.5 for _, ratio, added in goals)
        lines += ["", "Where a request's time goes (CPU µs per request, medians; the worker and "
                  "Redis share CPU 0). Ceiling: the most a floodgate case could reach if its worker "
                  "added nothing to its stock case's, Redis's time then being all it adds: stock "
                  "CPU 0 / (stock CPU 0 + floodgate's Redis).", "",
                  "| case | worker µs | Redis µs | CPU 0 µs | worker µs added | ceiling (x its "
                  "stock case) |", "|---|---:|---:|---:|---:|---:|"]
        for name, _, stock in CASES:
            cpu0 = cpu_worker[name] + cpu_redis[name]
            extra = ("| %+.1f | %.2f |" % (cpu_worker[name] - cpu_worker[stock],
                                          (cpu_worker[stock] + cpu_redis[stock])
                                          / (cpu_worker[stock] + cpu_redis[stock] + cpu_redis[name]))
                     if stock else "| | |")
            lines.append("| %s | %.1f | %.1f | %.1f %s" % (name, cpu_worker[name], cpu_redis[name],
                                                          cpu0, extra))
        lines.append("")
        lines.append("**Goal** (each floodgate case >= 0.85x its stock case's req/s, <= 0.5 ms added "
                     "at p99): %s: %s." % ("; ".join("%s %.2fx, %+.2f ms" % g for g in goals),
                                          "met" if met else "not met"))
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
