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
echo "100 token buckets (10, 10/s), traffic far above the limits, ${seconds} s per case"
echo
echo "| denial cache | leases | threads | decisions/s | round trips | decisions per round trip | admitted | admitted / ceiling |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for threads in 1 4; do
    for cache in 0 1; do
        redis-cli -p "$port" flushall >/dev/null
        taskset -c 1 build/bench/server_bench "redis://127.0.0.1:$port" "$seconds" "$threads" abuse "$cache" 0
    done
done
echo
echo "10 hot token buckets (10000, 100000/s), traffic within the limits, leases of 100 units (1 ms)"
echo
echo "| denial cache | leases | threads | decisions/s | round trips | decisions per round trip | admitted | admitted / ceiling |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for threads in 1 4; do
    for lease in 0 100; do
        redis-cli -p "$port" flushall >/dev/null
        taskset -c 1 build/bench/server_bench "redis://127.0.0.1:$port" "$seconds" "$threads" within 0 "$lease"
    done
done
