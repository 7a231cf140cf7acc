#!/usr/bin/env bash
# hotstore serve vs redis-server under the same redis-benchmark grid.
#
# usage: benches/server_vs_redis.sh [--out FILE.md] [--reps N] [--seconds S] [--writes-only] [--help]
#
# Starts three servers on free loopback ports, each on a fresh data directory:
#   redis              redis-server --appendonly yes --appendfsync everysec --save ""
#                      --auto-aof-rewrite-percentage 0 (a rewrite is a forked child that
#                      would run beside whichever server is measured next, on 2 cores; off,
#                      only Redis is spared its cost)
#   hotstore-memory    hotstore serve --durability memory     (reply once in the mapped store:
#                      survives a crash of the server, not a power cut)
#   hotstore-persisted hotstore serve --durability persisted  (reply once fdatasync'd; concurrent
#                      writes share a sync)
# and runs the same redis-benchmark points against each, alternating servers within every
# point (redis, memory, persisted, redis, ...), N repetitions (default 3), reporting the median:
#   SET and GET  x  -d 100 and -d 10240  x  -P 1 and -P 32,  all with -c 8 -r 100000,
# and the write rows of a DAQ buffer: SET and FRAG.PUT x -d 100 and -d 10240 at -P 16 -c 8
# -r 100000 (FRAG.PUT 1 <random event> 0 0 value on hotstore; Redis has no fragments, so its
# row is the same bytes SET under a random key). Compare hotstore-memory with the default
# Redis (appendfsync everysec) and hotstore-persisted with a run under
# HOTSTORE_BENCH_REDIS_FSYNC=always (Redis syncing before each reply, as persisted does).
# Before the points of a value size, each server is filled with that size (SET over the key
# space, -n HOTSTORE_BENCH_FILL, default 300000, which hits ~95% of the 100000 keys) so that
# GET finds values; the key count after the fill is printed. -n of each point is calibrated
# per server with a short run so that one repetition takes about S seconds (default 2).
# --writes-only (or HOTSTORE_BENCH_WRITES_ONLY=1) runs only the SET and FRAG.PUT -P 16 rows
# (fill included): a quarter of the time, for more repetitions on a busy machine.
#
# Prints a table (point, redis ops/s, hotstore-memory ops/s and its ratio to redis,
# hotstore-persisted ops/s and its ratio) and, with --out, writes it as Markdown.
# All servers are stopped at the end (also on error or Ctrl-C).
#
# Environment:
#   HOTSTORE_BENCH_DIR      parent of the data directories (default: a new temporary
#                           directory under /var/tmp, i.e. on the root disk, removed at the end)
#   HOTSTORE_BENCH_REPS     repetitions per point (default 3; --reps)
#   HOTSTORE_BENCH_SECONDS  target seconds per repetition (default 2; --seconds)
#   HOTSTORE_BENCH_FILL     SETs of the fill before each value size (default 300000)
#   HOTSTORE_BIN            the hotstore binary (default target/release/hotstore, built with
#                           cargo build --release -p hotstore-cli if missing)
#   HOTSTORE_BENCH_PREALLOC store buffer preallocated at start by each hotstore server, as
#                           a DAQ buffer is (default 8GiB, --preallocate; capacity unbounded);
#                           0 grows the store as it fills (first-touch page allocation is
#                           slow on some VMs and then dominates 10 KiB SETs)
#   HOTSTORE_BENCH_REDIS_FSYNC  Redis's appendfsync (default everysec; `always` makes Redis
#                           sync before replying, the counterpart of hotstore's persisted)
#   HOTSTORE_BENCH_SETTLE   1 (default): `sync` before every timed run, so that no run pays
#                           for the write-back of the dirty pages an earlier run (of another
#                           server) left behind; 0 to skip (the 10 KiB rows then vary about
#                           twofold from run to run)
#   HOTSTORE_BENCH_KEEP=1   keep the data directories
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=
REPS=${HOTSTORE_BENCH_REPS:-3}
SECONDS_PER_RUN=${HOTSTORE_BENCH_SECONDS:-2}
WRITES_ONLY=${HOTSTORE_BENCH_WRITES_ONLY:-0}
FILL=${HOTSTORE_BENCH_FILL:-300000}
PREALLOC=${HOTSTORE_BENCH_PREALLOC:-8GiB}
REDIS_FSYNC=${HOTSTORE_BENCH_REDIS_FSYNC:-everysec}
SETTLE=${HOTSTORE_BENCH_SETTLE:-1}
KEYSPACE=100000
CLIENTS=8

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    --out)
      OUT=${2:?--out needs a file}
      shift 2
      ;;
    --out=*)
      OUT=${1#--out=}
      shift
      ;;
    --reps)
      REPS=${2:?--reps needs a number}
      shift 2
      ;;
    --seconds)
      SECONDS_PER_RUN=${2:?--seconds needs a number}
      shift 2
      ;;
    --writes-only)
      WRITES_ONLY=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "unknown argument: $1 (see --help)" >&2
      exit 2
      ;;
  esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "--reps must be a positive integer" >&2; exit 2; }
[[ $SECONDS_PER_RUN =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--seconds must be a number" >&2; exit 2; }

for tool in redis-server redis-benchmark redis-cli awk; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "$tool not found (Debian: redis-server, redis-tools; .ci/run installs them)" >&2
    exit 2
  }
done

HOTSTORE=${HOTSTORE_BIN:-$ROOT/target/release/hotstore}
if [[ ! -x $HOTSTORE ]]; then
  echo "== building $HOTSTORE (cargo build --release -p hotstore-cli)" >&2
  (cd "$ROOT" && cargo build --release -p hotstore-cli) >&2
fi

if [[ -n ${HOTSTORE_BENCH_DIR:-} ]]; then
  mkdir -p "$HOTSTORE_BENCH_DIR"
  WORK=$(mktemp -d "$HOTSTORE_BENCH_DIR/hotstore-vs-redis.XXXXXX")
else
  WORK=$(mktemp -d /var/tmp/hotstore-vs-redis.XXXXXX)
fi

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
  if [[ ${HOTSTORE_BENCH_KEEP:-0} == 1 ]]; then
    echo "data kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "no free port found" >&2
  exit 1
}

wait_ping() {
  local port=$1 name=$2 log=$3
  for _ in $(seq 300); do
    [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return
    sleep 0.1
  done
  echo "$name did not answer PING on port $port; its log:" >&2
  cat "$log" >&2
  exit 1
}

# Each start_* runs its server as a child of this shell (so that cleanup can stop it by its
# pid) and appends its port to PORTS.
start_redis() {
  local dir=$WORK/redis port
  mkdir -p "$dir"
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --appendonly yes --appendfsync "$REDIS_FSYNC" \
    --auto-aof-rewrite-percentage 0 \
    --save "" --dir "$dir" --daemonize no --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
  PIDS+=($!)
  wait_ping "$port" redis-server "$dir/redis.log"
  PORTS+=("$port")
}

start_hotstore() {
  local durability=$1 dir=$WORK/hotstore-$1 port=
  mkdir -p "$dir"
  local sizing=()
  [[ $PREALLOC != 0 ]] && sizing=(--preallocate "$PREALLOC")
  "$HOTSTORE" serve --dir "$dir/store" --port 0 --durability "$durability" "${sizing[@]}" \
    </dev/null >"$dir/serve.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1200); do
    port=$(sed -n 's/^hotstore: listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/serve.log")
    [[ -n $port ]] && break
    sleep 0.1
  done
  [[ -n $port ]] || {
    echo "hotstore serve --durability $durability printed no listening line; its log:" >&2
    cat "$dir/serve.log" >&2
    exit 1
  }
  wait_ping "$port" "hotstore-$durability" "$dir/serve.log"
  PORTS+=("$port")
}

# ops/s of one redis-benchmark run (from its --csv output). `frag.put` runs FRAG.PUT on
# hotstore and the same bytes as a SET under a random key on Redis (port ${PORTS[0]}).
bench() {
  local port=$1 op=$2 size=$3 pipe=$4 n=$5 out rps what
  what=(-t "$op" -d "$size")
  if [[ $op == frag.put ]]; then
    local value
    value=$(head -c "$size" /dev/zero | tr '\0' x)
    if [[ $port == "${PORTS[0]}" ]]; then
      what=(SET "frag:__rand_int__" "$value")
    else
      what=(FRAG.PUT 1 __rand_int__ 0 0 "$value")
    fi
  fi
  out=$(timeout 600 redis-benchmark -h 127.0.0.1 -p "$port" -P "$pipe" \
    -c "$CLIENTS" -r "$KEYSPACE" -n "$n" --csv "${what[@]}" </dev/null 2>&1) || {
    echo "redis-benchmark failed against port $port: $out" >&2
    exit 1
  }
  if [[ $op == frag.put ]]; then
    rps=$(awk -F'"' 'NR == 2 { print $4 }' <<<"$out")
  else
    rps=$(awk -F'"' -v op="${op^^}" '$2 == op { print $4 }' <<<"$out")
  fi
  [[ $rps =~ ^[0-9]+(\.[0-9]+)?$ ]] || {
    echo "no $op rate in redis-benchmark's CSV output: $out" >&2
    exit 1
  }
  echo "$rps"
}

# Before a timed run: write back what earlier runs left dirty (see HOTSTORE_BENCH_SETTLE).
settle() { [[ $SETTLE == 1 ]] && sync; return 0; }

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Requests for about SECONDS_PER_RUN at the rate of a short probe run.
calibrate() {
  local port=$1 op=$2 size=$3 pipe=$4 probe rps
  probe=$((pipe > 1 ? 20000 : 3000))
  rps=$(bench "$port" "$op" "$size" "$pipe" "$probe") || exit 1
  awk -v r="$rps" -v s="$SECONDS_PER_RUN" 'BEGIN { n = int(r * s); if (n < 2000) n = 2000; if (n > 5000000) n = 5000000; print n }'
}

fmt_rate() { awk -v r="$1" 'BEGIN { if (r >= 1e6) printf "%.2f M", r / 1e6; else if (r >= 1e3) printf "%.1f k", r / 1e3; else printf "%.0f", r }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

echo "== data under $WORK ($(df -T "$WORK" | awk 'NR == 2 { print $1 ", " $2 }'))"
NAMES=(redis hotstore-memory hotstore-persisted)
PORTS=()
start_redis
start_hotstore memory
start_hotstore persisted
echo "== $(redis-server --version | awk '{ print $1, $2, $3 }') on port ${PORTS[0]} (appendonly yes, appendfsync $REDIS_FSYNC, save \"\")"
echo "== hotstore serve on ports ${PORTS[1]} (memory) and ${PORTS[2]} (persisted), preallocated buffer: $PREALLOC:"
sed -n 's/^hotstore: tier /   tier /p' "$WORK/hotstore-persisted/serve.log"
echo "== grid: $([[ $WRITES_ONLY == 1 ]] && echo "SET/FRAG.PUT x -d 100/10240 at -P 16 only" || echo "SET/GET x -d 100/10240 x -P 1/32, then SET/FRAG.PUT x -d 100/10240 at -P 16"); -c $CLIENTS -r $KEYSPACE; median of $REPS; ~${SECONDS_PER_RUN}s per run; $(nproc) cores"

POINTS=("set 1" "set 32" "get 1" "get 32" "set 16" "frag.put 16")
[[ $WRITES_ONLY == 1 ]] && POINTS=("set 16" "frag.put 16")
ROWS=()
for size in 100 10240; do
  for i in 0 1 2; do
    bench "${PORTS[$i]}" set "$size" 32 "$FILL" >/dev/null
  done
  keys=""
  for i in 0 1 2; do
    v=$(redis-cli -p "${PORTS[$i]}" DBSIZE)
    keys+=" ${NAMES[$i]}=$v"
  done
  echo "-- filled with $FILL SETs of $size bytes; keys:$keys"
  for point_spec in "${POINTS[@]}"; do
    read -r op pipe <<<"$point_spec"
    {
      point="${op^^} -d $size -P $pipe"
      ns=()
      for i in 0 1 2; do
        v=$(calibrate "${PORTS[$i]}" "$op" "$size" "$pipe")
        ns+=("$v")
      done
      r0=() r1=() r2=()
      for ((rep = 1; rep <= REPS; rep++)); do
        settle
        v=$(bench "${PORTS[0]}" "$op" "$size" "$pipe" "${ns[0]}")
        r0+=("$v")
        settle
        v=$(bench "${PORTS[1]}" "$op" "$size" "$pipe" "${ns[1]}")
        r1+=("$v")
        settle
        v=$(bench "${PORTS[2]}" "$op" "$size" "$pipe" "${ns[2]}")
        r2+=("$v")
      done
      m0=$(median "${r0[@]}")
      m1=$(median "${r1[@]}")
      m2=$(median "${r2[@]}")
      row="$point|$m0|$m1|$(ratio "$m1" "$m0")|$m2|$(ratio "$m2" "$m0")"
      ROWS+=("$row")
      printf '   %-20s redis %10s  memory %10s (%sx)  persisted %10s (%sx)   [n=%s/%s/%s]\n' \
        "$point" "$(fmt_rate "$m0")" "$(fmt_rate "$m1")" "$(ratio "$m1" "$m0")" \
        "$(fmt_rate "$m2")" "$(ratio "$m2" "$m0")" "${ns[0]}" "${ns[1]}" "${ns[2]}"
      printf '   %-20s runs: redis %s; memory %s; persisted %s\n' "" \
        "$(for v in "${r0[@]}"; do fmt_rate "$v"; echo -n ' '; done)" \
        "$(for v in "${r1[@]}"; do fmt_rate "$v"; echo -n ' '; done)" \
        "$(for v in "${r2[@]}"; do fmt_rate "$v"; echo -n ' '; done)"
    }
  done
done

echo
HEADER=(point "redis ops/s" "hotstore-memory ops/s" ratio "hotstore-persisted ops/s" ratio)
{
  printf '%-18s %14s %24s %7s %26s %7s\n' "${HEADER[@]}"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r p a b c d e <<<"$row"
    printf '%-18s %14.0f %24.0f %7s %26.0f %7s\n' "$p" "$a" "$b" "$c" "$d" "$e"
  done
} | tee "$WORK/table.txt"

if [[ -n $OUT ]]; then
  {
    echo "| point | redis ops/s | hotstore-memory ops/s | ratio | hotstore-persisted ops/s | ratio |"
    echo "|---|---:|---:|---:|---:|---:|"
    for row in "${ROWS[@]}"; do
      IFS='|' read -r p a b c d e <<<"$row"
      printf '| %s | %.0f | %.0f | %s | %.0f | %s |\n' "$p" "$a" "$b" "$c" "$d" "$e"
    done
    echo
    echo "redis-benchmark -c $CLIENTS -r $KEYSPACE, median of $REPS runs of ~${SECONDS_PER_RUN} s each, servers alternating within each point; $(nproc) cores; data on $(df -T "$WORK" | awk 'NR == 2 { print $2 }'). redis: appendonly yes, appendfsync $REDIS_FSYNC. ratio = hotstore / redis."
  } >"$OUT"
  echo "wrote $OUT"
fi
