#!/usr/bin/env bash
# Lock benchmarks (bench/lock_bench.c): uncontended acquire/release
# throughput against INCR, and contended hand-off latency, for floodgate's
# FG.LOCK and two Redis baselines (SET NX PX + compare-and-delete with
# polling; a Redisson-style Lua hash lock with pub/sub wake-ups).
#
#   bash bench/lock_bench.sh          full run (about 2 minutes)
#   QUICK=1 bash bench/lock_bench.sh  smoke test; numbers not for comparison
#
# Overrides: LOCK_BENCH_ROUNDS (3), LOCK_BENCH_COMMANDS (1000000 per run),
# LOCK_BENCH_CONNECTIONS (50), LOCK_BENCH_PIPELINE (16), LOCK_BENCH_SECONDS
# (5 per strategy), LOCK_BENCH_CLIENTS (8), LOCK_BENCH_HOLD_US (1000),
# LOCK_BENCH_THINK_US (1000), LOCK_BENCH_BASELINES=1 (skip floodgate, for a
# module without FG.LOCK), BENCH_OUT (bench/results/locks.md; QUICK:
# locks-quick.md), MODULE (build/floodgate.so).
#
# Starts its own redis-server on a free loopback port, pinned to CPU 0, runs
# the client pinned to CPU 1, and stops the server (by PID) on exit. Writes
# the tables to BENCH_OUT and every run's figures to the same name with .raw.
set -euo pipefail
cd "$(dirname "$0")/.."

MODULE="${MODULE:-$PWD/build/floodgate.so}"
RESULTS="$PWD/bench/results"
quick=0
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != "0" ]; then quick=1; fi
if [ $quick = 1 ]; then default_out="$RESULTS/locks-quick.md"; else default_out="$RESULTS/locks.md"; fi
OUT="${BENCH_OUT:-$default_out}"
RAW="${OUT%.md}.raw"
rounds=${LOCK_BENCH_ROUNDS:-$([ $quick = 1 ] && echo 1 || echo 3)}
commands=${LOCK_BENCH_COMMANDS:-$([ $quick = 1 ] && echo 200000 || echo 1000000)}
connections=${LOCK_BENCH_CONNECTIONS:-50}
pipeline=${LOCK_BENCH_PIPELINE:-16}
seconds=${LOCK_BENCH_SECONDS:-$([ $quick = 1 ] && echo 1 || echo 5)}
clients=${LOCK_BENCH_CLIENTS:-8}
hold_us=${LOCK_BENCH_HOLD_US:-1000}
think_us=${LOCK_BENCH_THINK_US:-1000}
only=""
if [ "${LOCK_BENCH_BASELINES:-0}" != "0" ]; then only=baselines; fi

fail() { echo "bench/lock_bench.sh: ERROR: $*" >&2; exit 1; }
[ -f "$MODULE" ] || fail "module not found: $MODULE (run 'make module' first)"
[ "$(nproc)" -ge 2 ] || echo "bench/lock_bench.sh: WARNING: 1 CPU; server and client share it" >&2
make -s build/bench/lock_bench

dir=$(mktemp -d "${TMPDIR:-/tmp}/floodgate-lockbench.XXXXXX")
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --loadmodule "$MODULE" --daemonize yes --pidfile "$dir/redis.pid" \
    --logfile "$dir/redis.log" >/dev/null
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
[ -f "$dir/redis.pid" ] || fail "redis-server did not start (module $MODULE)"
taskset -a -cp 0 "$(cat "$dir/redis.pid")" >/dev/null

redis_version=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^redis_version://p')
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo 'no commit')
if [ -n "$(git status --porcelain -- src 2>/dev/null)" ]; then git_rev="$git_rev (src modified)"; fi
mode=full
if [ $quick = 1 ]; then mode="QUICK (smoke test, not for comparison)"; fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

bench() { taskset -c 1 build/bench/lock_bench 127.0.0.1 "$port" bench/lua "$@" $only; }
mkdir -p "$(dirname "$OUT")"
{
    bench throughput "$rounds" "$commands" "$connections" "$pipeline"
    bench handoff "$seconds" "$clients" "$hold_us" "$think_us"
} > "$dir/tables.md" 2> >(tee "$RAW" >&2)

{
    echo "# floodgate lock benchmark"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- mode: $mode${only:+ (baselines only: the module has no FG.LOCK)}"
    echo "- machine: nproc $(nproc), $(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1), $(uname -sr)"
    echo "- redis-server $redis_version on CPU 0 (\`--save \"\" --appendonly no\`, 127.0.0.1), client on CPU 1"
    echo "- module: $MODULE, git $git_rev"
    echo "- load average at start: $load_start; at end: $(cut -d' ' -f1-3 /proc/loadavg) (the run itself keeps both CPUs busy)"
    echo
    cat "$dir/tables.md"
} > "$OUT"
cat "$OUT"
echo "Written: $OUT (every run: $RAW)" >&2
