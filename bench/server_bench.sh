#!/usr/bin/env bash
# Decisions per second against a real server through libfloodgate, with and
# without the denial cache (bench/server_bench.c). Starts its own server with
# the module on a free loopback port (server on CPU 0, clients on CPU 1) and
# stops it by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build/floodgate.so build/bench/server_bench >/dev/null
dir=$(mktemp -d)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --loadmodule "$PWD/build/floodgate.so" --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -a -cp 0 "$(cat "$dir/redis.pid")" >/dev/null
seconds=${SECONDS_PER_CASE:-3}
header() {
    echo
    echo "$1, ${seconds} s per case"
    echo
    echo "| denial cache | leases | threads | decisions/s | round trips | decisions per round trip | admitted | admitted / ceiling |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
}

# run_case THREADS WORKLOAD CACHE LEASE: one row, on a flushed server.
run_case() {
    redis-cli -p "$port" flushall >/dev/null
    taskset -c 1 build/bench/server_bench "redis://127.0.0.1:$port" "$seconds" "$@"
}

header "100 token buckets (10, 10/s), traffic far above the limits"
for threads in 1 4; do
    for cache in 0 1; do run_case "$threads" abuse "$cache" 0; done
done
header "10 hot token buckets (10000, 100000/s), traffic within the limits, leases of 100 units (1 ms)"
for threads in 1 4; do
    for lease in 0 100; do run_case "$threads" within 0 "$lease"; done
done
