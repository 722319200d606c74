#!/usr/bin/env bash
# floodgate benchmark: throughput (redis-benchmark) and memory per key.
#
#   bash bench/run.sh            full run (3 rounds; several minutes)
#   QUICK=1 bash bench/run.sh    smoke test (1 round, -n 20000 / 100000, 20000 keys)
#
# Overrides: BENCH_ROUNDS, BENCH_CASES (comma list of throughput case names),
# BENCH_N1, BENCH_N16, BENCH_MEM_KEYS, BENCH_MEM_CASES, BENCH_SKIP_THROUGHPUT=1,
# BENCH_SKIP_MEMORY=1, MODULE (default build/floodgate.so), REDIS_SERVER,
# REDIS_BENCHMARK, PYTHON (default /usr/bin/python3, which has redis-py).
#
# Peers: REDISCELL_MODULE=/path/libredis_cell.so and REDISBLOOM_MODULE=
# /path/redisbloom.so run the cases the peer has (CL.THROTTLE; BF.ADD and
# BF.EXISTS) on a server of their own, started and pinned like ours after
# our run, each beside its own server's INCR; a last table sets each
# command's ratio beside floodgate's.
#
# Starts its own redis-server on a free loopback port, pinned to CPU 0, and
# stops it (by PID) on exit. Writes bench/results/latest.md (QUICK=1:
# bench/results/quick.md; BENCH_OUT=file to choose) and *.raw JSON files.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
MODULE="${MODULE:-$ROOT/build/floodgate.so}"
REDIS_SERVER="${REDIS_SERVER:-redis-server}"
REDIS_BENCHMARK="${REDIS_BENCHMARK:-redis-benchmark}"
PYTHON="${PYTHON:-/usr/bin/python3}"
RESULTS="$BENCH_DIR/results"
if [ -n "${QUICK:-}" ] && [ "${QUICK:-0}" != "0" ]; then DEFAULT_OUT="$RESULTS/quick.md"; else DEFAULT_OUT="$RESULTS/latest.md"; fi
OUT="${BENCH_OUT:-$DEFAULT_OUT}"
RAW_PREFIX="${OUT%.md}"
export REDIS_BENCHMARK

fail() { echo "bench/run.sh: ERROR: $*" >&2; exit 1; }

[ -f "$MODULE" ] || fail "module not found: $MODULE (run 'make' first)"
MODULE="$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")"
command -v "$REDIS_SERVER" >/dev/null || fail "$REDIS_SERVER not found"
command -v "$REDIS_BENCHMARK" >/dev/null || fail "$REDIS_BENCHMARK not found"
command -v taskset >/dev/null || fail "taskset not found (util-linux)"
"$PYTHON" -c 'import redis' 2>/dev/null || fail "$PYTHON has no redis-py (apt install python3-redis)"
NCPU="$(nproc)"
[ "$NCPU" -ge 2 ] || echo "bench/run.sh: WARNING: only $NCPU CPU; server and client share it" >&2
SERVER_CPU=0
CLIENT_CPU=$(( NCPU >= 2 ? 1 : 0 ))
export BENCH_CPU="$CLIENT_CPU"

mkdir -p "$RESULTS"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/floodgate-bench.XXXXXX")"
SERVER_PID=""
PEER_PID=""
CHILD_PID=""

stop_pid() {
    local pid=$1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    # a python driver still running (interrupted run): stop it first
    if [ -n "$CHILD_PID" ] && kill -0 "$CHILD_PID" 2>/dev/null; then
        kill "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    stop_pid "$SERVER_PID"
    stop_pid "$PEER_PID"
    if [ $rc -ne 0 ] && [ -f "$WORK/redis.log" ]; then
        echo "bench/run.sh: failed (exit $rc); last lines of the server log:" >&2
        tail -n 20 "$WORK/redis.log" >&2 || true
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free loopback port: ask the kernel for one.
free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Starts redis-server with a module on a port, pinned to the server's CPU;
# sets STARTED_PID once it answers.
start_server() {
    local port=$1 module=$2 log=$3
    "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$WORK" --logfile "$log" --dbfilename "dump-$port.rdb" --daemonize no \
        --loadmodule "$module" &
    STARTED_PID=$!
    for _ in $(seq 1 100); do
        kill -0 "$STARTED_PID" 2>/dev/null || fail "redis-server exited at start (port $port, module $module)"
        redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG || fail "redis-server does not answer on port $port"
    taskset -a -cp "$SERVER_CPU" "$STARTED_PID" >/dev/null || fail "taskset of the server failed"
}

PORT="$(free_port)"
start_server "$PORT" "$MODULE" "$WORK/redis.log"
SERVER_PID=$STARTED_PID
redis-cli -h 127.0.0.1 -p "$PORT" MODULE LIST | grep -qi floodgate || fail "module not loaded"

REDIS_VERSION="$(redis-cli -h 127.0.0.1 -p "$PORT" INFO server | tr -d '\r' | sed -n 's/^redis_version://p')"
MODULE_VER="$(redis-cli -h 127.0.0.1 -p "$PORT" MODULE LIST | awk 'p{print; exit} /^ver$/{p=1}')"
CPU_MODEL="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)"
BENCH_VERSION="$("$REDIS_BENCHMARK" --version 2>/dev/null | head -n1)"
GIT_REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no commit')"
if [ -n "$(git -C "$ROOT" status --porcelain -- src 2>/dev/null)" ]; then GIT_REV="$GIT_REV (src modified)"; fi
MODE="full"
if [ "${QUICK:-0}" != "0" ] && [ -n "${QUICK:-}" ]; then MODE="QUICK (smoke test, not for comparison)"; fi

{
    echo "# floodgate benchmark"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- mode: $MODE"
    echo "- machine: nproc $NCPU, ${CPU_MODEL:-unknown CPU}, $(uname -sr)"
    echo "- redis-server $REDIS_VERSION (server on CPU $SERVER_CPU, \`--save \"\" --appendonly no\`, 127.0.0.1), $BENCH_VERSION on CPU $CLIENT_CPU"
    echo "- module: $MODULE (ver ${MODULE_VER:-?}), git $GIT_REV"
    echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on these 2 CPUs skews the numbers)"
} > "$WORK/header.md"
cat "$WORK/header.md"

: > "$WORK/throughput.md"
: > "$WORK/memory.md"
if [ "${BENCH_SKIP_THROUGHPUT:-0}" = "0" ]; then
    echo "== throughput (progress on stderr)" >&2
    "$PYTHON" "$BENCH_DIR/throughput.py" --port "$PORT" --lua-dir "$BENCH_DIR/lua" \
        --out-md "$WORK/throughput.md" --out-raw "$RAW_PREFIX.throughput.raw" &
    CHILD_PID=$!; wait "$CHILD_PID"; CHILD_PID=""
fi
if [ "${BENCH_SKIP_MEMORY:-0}" = "0" ]; then
    echo "== memory (progress on stderr)" >&2
    "$PYTHON" "$BENCH_DIR/memory.py" --port "$PORT" --lua-dir "$BENCH_DIR/lua" \
        --out-md "$WORK/memory.md" --out-raw "$RAW_PREFIX.memory.raw" &
    CHILD_PID=$!; wait "$CHILD_PID"; CHILD_PID=""
fi

# The peers, each on a server of its own (ours stopped meanwhile, so that
# the two never share the CPU), with the cases it has.
: > "$WORK/peers.md"
PEER_RAWS=()
run_peer() {
    local name=$1 module=$2 cases=$3
    [ -n "$module" ] || return 0
    [ -f "$module" ] || fail "$name module not found: $module"
    local port; port="$(free_port)"
    start_server "$port" "$module" "$WORK/peer-$name.log"
    PEER_PID=$STARTED_PID
    echo "== $name (progress on stderr)" >&2
    BENCH_CASES="$cases" "$PYTHON" "$BENCH_DIR/throughput.py" --port "$port" --lua-dir "$BENCH_DIR/lua" \
        --title "Peer: $name ($(basename "$module"))" \
        --out-md "$WORK/peer-$name.throughput.md" --out-raw "$RAW_PREFIX.peer-$name.raw" &
    CHILD_PID=$!; wait "$CHILD_PID"; CHILD_PID=""
    stop_pid "$PEER_PID"; PEER_PID=""
    cat "$WORK/peer-$name.throughput.md" >> "$WORK/peers.md"
    PEER_RAWS+=("$name=$RAW_PREFIX.peer-$name.raw")
}
if [ "${BENCH_SKIP_THROUGHPUT:-0}" = "0" ] && { [ -n "${REDISCELL_MODULE:-}" ] || [ -n "${REDISBLOOM_MODULE:-}" ]; }; then
    stop_pid "$SERVER_PID"; SERVER_PID=""
    run_peer redis-cell "${REDISCELL_MODULE:-}" "CL.THROTTLE"
    run_peer RedisBloom "${REDISBLOOM_MODULE:-}" "BF.ADD,BF.EXISTS"
    "$PYTHON" "$BENCH_DIR/peers.py" "$RAW_PREFIX.throughput.raw" "${PEER_RAWS[@]}" >> "$WORK/peers.md"
fi

{ echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"; echo; } >> "$WORK/header.md"
mkdir -p "$(dirname "$OUT")"
cat "$WORK/header.md" "$WORK/throughput.md" "$WORK/peers.md" "$WORK/memory.md" > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo
cat "$WORK/throughput.md" "$WORK/peers.md" "$WORK/memory.md"
echo "Written: $OUT" >&2
