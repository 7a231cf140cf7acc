#!/usr/bin/env bash
# A scripted redis-cli session and a redis-benchmark smoke run against `hotstore serve`.
#
#   HOTSTORE_PORT=6380 [HOTSTORE_HOST=127.0.0.1] [HOTSTORE_PASSWORD=...] \
#     tests/cli/redis_cli_session.sh [session|bench|all]
#
# session: one redis-cli connection (driven as a coprocess, so later commands can use the
#   claim token an earlier one returned) runs standard and DAQ commands; its transcript is
#   compared with the expected text below (a diff on mismatch). Then a few one-shot checks:
#   RESP3 replies (redis-cli -3), STORE.STATS, INFO hotstore, redis-cli --scan.
# bench: redis-benchmark -t set,get -n 2000 -c 4 -P 8 -q must complete and print requests
#   per second for SET and GET.
# all (default): both.
#
# The session expects no other client to seal or claim events on the server meanwhile (the
# Rust test gives it a fresh server). Keys and the run number are random, so it can be run
# again against the same server. Needs redis-cli and redis-benchmark (Debian: redis-tools;
# scripts/test installs them). Exit status 0 only if everything matched.
set -euo pipefail

MODE=${1:-all}
case "$MODE" in
  session | docs | bench | all) ;;
  -h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: $0 [session|docs|bench|all]" >&2
    exit 2
    ;;
esac

PORT=${HOTSTORE_PORT:?set HOTSTORE_PORT to the port of a running hotstore serve}
HOST=${HOTSTORE_HOST:-127.0.0.1}
AUTH=() BENCH_AUTH=()
if [[ -n ${HOTSTORE_PASSWORD:-} ]]; then
  AUTH=(-a "$HOTSTORE_PASSWORD" --no-auth-warning)
  BENCH_AUTH=(-a "$HOTSTORE_PASSWORD")
fi

for tool in redis-cli redis-benchmark stdbuf timeout diff; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: $tool not found (redis-cli/redis-benchmark: Debian package redis-tools; run scripts/test, which installs it)" >&2
    exit 2
  fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hotstore-cli-session.XXXXXX")
CLI_PID=
cleanup() {
  if [[ -n $CLI_PID ]] && kill -0 "$CLI_PID" 2>/dev/null; then
    kill "$CLI_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cli() { timeout 60 redis-cli -h "$HOST" -p "$PORT" "${AUTH[@]}" "$@" </dev/null; }

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

if [[ $(cli PING 2>&1) != PONG ]]; then
  fail "no PONG from $HOST:$PORT: $(cli PING 2>&1 || true)"
fi

# ---------------------------------------------------------------------------------------------
# session
# ---------------------------------------------------------------------------------------------

run_session() {
  local tag run runhex n0 sp=' '
  # Fixed length: no key of the session is 16 bytes, the default layout's fragment key length
  # (such a key would be a fragment, and make an event EVENT.NEXT offers).
  tag=$(printf 'cli:%08d%06d' "$(($$ % 100000000))" "$RANDOM")
  run=$(((RANDOM << 15 | RANDOM) % 2000000000 + 1000))
  runhex=$(printf '%08x' "$run")
  n0=$(cli DBSIZE)
  # Another READY event would be offered before ours (a one-shot claim is given back when
  # redis-cli disconnects, so this check changes nothing).
  local pending
  pending=$(cli EVENT.NEXT LEASE 1000)
  [[ -z $pending ]] || fail "the server has READY events already (EVENT.NEXT offered one): run the session against a fresh server"
  [[ $n0 =~ ^[0-9]+$ ]] || fail "DBSIZE answered '$n0'"

  # One redis-cli connection for the whole session. Each command is followed by
  # ECHO __END__, whose reply marks the end of the command's output.
  coproc CLI { exec stdbuf -oL redis-cli -h "$HOST" -p "$PORT" "${AUTH[@]}" --no-raw 2>&1; }
  CLI_PID=$CLI_PID
  local out="$WORK/actual.txt"
  : >"$out"
  LAST=

  # send [--code] COMMAND...: runs one command line; the transcript gets "> COMMAND" and the
  # reply. With --code, an error reply is cut to its code (for errors whose text the protocol
  # does not fix). The reply is also left in $LAST.
  send() {
    local code_only=0 line reply=
    if [[ $1 == --code ]]; then
      code_only=1
      shift
    fi
    printf '%s\nECHO __END__\n' "$*" >&"${CLI[1]}"
    while true; do
      if ! IFS= read -r -t 20 line <&"${CLI[0]}"; then
        printf '> %s\n%s' "$*" "$reply" >>"$out"
        echo "--- transcript so far:" >&2
        cat "$out" >&2
        fail "redis-cli gave no (complete) reply to: $*"
      fi
      [[ $line == '"__END__"' ]] && break
      # redis-cli prints "(0.95s)" after any command slower than 0.5 s: on a loaded machine
      # that can be any command, so the transcript never contains these timing lines.
      [[ $line =~ ^\([0-9]+\.[0-9]+s\)$ ]] && continue
      if ((code_only)) && [[ $line =~ ^(\(error\)\ [A-Z]+)\  ]]; then
        line=${BASH_REMATCH[1]}
      fi
      reply+="$line"$'\n'
    done
    printf '> %s\n%s' "$*" "$reply" >>"$out"
    LAST=$reply
  }

  # The claim token in the reply of EVENT.NEXT (first line: 1) "TOKEN").
  token() {
    local t
    t=$(printf '%s' "$LAST" | sed -n '1s/^1) "\(.*\)"$/\1/p')
    [[ -n $t ]] || fail "no claim token in the reply of EVENT.NEXT: $LAST"
    printf '%s' "$t"
  }

  send PING
  send PING '"hello world"'
  send ECHO '"two words"'
  send SELECT 0
  send SET "$tag:a" 1
  send SET "$tag:b" '"two words"'
  send GET "$tag:b"
  send GET "$tag:missing"
  send MSET "$tag:c" 3 "$tag:d" 4
  send MGET "$tag:a" "$tag:missing" "$tag:c"
  send EXISTS "$tag:a" "$tag:missing" "$tag:c"
  send STRLEN "$tag:b"
  send TYPE "$tag:a"
  send TYPE "$tag:missing"
  send DBSIZE
  send DEL "$tag:a" "$tag:missing"
  send DBSIZE
  send SET "$tag:e" v EX 10
  send SET "$tag:e" v NX
  send GET "$tag:e"
  send NOSUCHCMD a b
  send CLIENT SETNAME cli-session
  send CLIENT GETNAME
  send CONFIG GET no-such-parameter-xyz
  send --code GET
  # DAQ: the example of docs/protocol.md, then KEEP, RELEASE and the error codes.
  send FRAG.PUT "$run" 42 0 0 '"detector zero"'
  send FRAG.PUT "$run" 42 1 0 '"detector one"'
  send FRAG.GET "$run" 42 1 0
  send FRAG.GET "$run" 42 7 7
  send EVENT.GET "$run" 42
  send EVENT.SEAL "$run" 42
  send EVENT.RANGE "$run" 0 100
  send EVENT.NEXT LEASE 10000
  local t1 t2 t3
  t1=$(token)
  send EVENT.RANGE "$run" 0 100
  send EVENT.NEXT
  send EVENT.ACK "$t1" REMOVE
  send EVENT.RANGE "$run" 0 100
  send EVENT.GET "$run" 42
  send FRAG.GET "$run" 42 0 0
  send --code FRAG.PUT "$run" 42 2 0 late
  send --code EVENT.SEAL "$run" 43
  send FRAG.PUT "$run" 43 0 0 keep-me DURABILITY memory
  send EVENT.SEAL "$run" 43 DURABILITY persisted
  send EVENT.NEXT LEASE 10000 BLOCK 1000 CONSUMER cli
  t2=$(token)
  send EVENT.RELEASE "$t2"
  send --code EVENT.ACK "$t2" KEEP
  send EVENT.NEXT LEASE 10000
  t3=$(token)
  [[ $t3 != "$t2" ]] || fail "a new claim got the released claim's token $t2"
  send EVENT.ACK "$t3" KEEP DURABILITY persisted
  send EVENT.RANGE "$run" 0 100 LIMIT 5
  send EVENT.GET "$run" 43
  send --code EVENT.SEAL "$run" 43
  send --code FRAG.PUT "$run" 43 1 0 late
  send EVENT.NEXT BLOCK 100
  # Slow on purpose (waits 600 ms for nothing): its timing line must not reach the transcript.
  send EVENT.NEXT BLOCK 600
  send --code FRAG.PUT "$run" notanumber 0 0 x
  send --code FRAG.PUT 4294967296 0 0 0 x
  send --code EVENT.ACK "$t3" MAYBE
  send DEL "$tag:b" "$tag:c" "$tag:d"

  # (redis-cli handles QUIT itself; tests/python/test_server.py checks it on the wire)
  eval "exec ${CLI[1]}>&-"
  wait "$CLI_PID" || true
  CLI_PID=

  # Claim numbers differ from run to run: compare tokens as <event prefix>:N.
  sed -E -i 's/([0-9a-f]{24}):[0-9]+/\1:N/g' "$out"

  local e42="${runhex}000000000000002a" e43="${runhex}000000000000002b"
  cat >"$WORK/expected.txt" <<EOF
> PING
PONG
> PING "hello world"
"hello world"
> ECHO "two words"
"two words"
> SELECT 0
OK
> SET $tag:a 1
OK
> SET $tag:b "two words"
OK
> GET $tag:b
"two words"
> GET $tag:missing
(nil)
> MSET $tag:c 3 $tag:d 4
OK
> MGET $tag:a $tag:missing $tag:c
1) "1"
2) (nil)
3) "3"
> EXISTS $tag:a $tag:missing $tag:c
(integer) 2
> STRLEN $tag:b
(integer) 9
> TYPE $tag:a
string
> TYPE $tag:missing
none
> DBSIZE
(integer) $((n0 + 4))
> DEL $tag:a $tag:missing
(integer) 1
> DBSIZE
(integer) $((n0 + 3))
> SET $tag:e v EX 10
(error) ERR hotstore does not support SET option 'EX'
> SET $tag:e v NX
(error) ERR hotstore does not support SET option 'NX'
> GET $tag:e
(nil)
> NOSUCHCMD a b
(error) ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b'$sp
> CLIENT SETNAME cli-session
OK
> CLIENT GETNAME
"cli-session"
> CONFIG GET no-such-parameter-xyz
(empty array)
> GET
(error) ERR
> FRAG.PUT $run 42 0 0 "detector zero"
OK
> FRAG.PUT $run 42 1 0 "detector one"
OK
> FRAG.GET $run 42 1 0
"detector one"
> FRAG.GET $run 42 7 7
(nil)
> EVENT.GET $run 42
1) 1) (integer) 0
   2) (integer) 0
   3) "detector zero"
2) 1) (integer) 1
   2) (integer) 0
   3) "detector one"
> EVENT.SEAL $run 42
OK
> EVENT.RANGE $run 0 100
1) 1) (integer) 42
   2) "ready"
   3) (integer) 2
   4) (integer) 25
   5) (integer) 0
> EVENT.NEXT LEASE 10000
1) "$e42:N"
2) 1) (integer) $run
   2) (integer) 42
3) (integer) 0
4) 1) 1) (integer) 0
      2) (integer) 0
      3) "detector zero"
   2) 1) (integer) 1
      2) (integer) 0
      3) "detector one"
> EVENT.RANGE $run 0 100
1) 1) (integer) 42
   2) "claimed"
   3) (integer) 2
   4) (integer) 25
   5) (integer) 0
> EVENT.NEXT
(nil)
> EVENT.ACK $e42:N REMOVE
OK
> EVENT.RANGE $run 0 100
(empty array)
> EVENT.GET $run 42
(empty array)
> FRAG.GET $run 42 0 0
(nil)
> FRAG.PUT $run 42 2 0 late
(error) LATE
> EVENT.SEAL $run 43
(error) NOEVENT
> FRAG.PUT $run 43 0 0 keep-me DURABILITY memory
OK
> EVENT.SEAL $run 43 DURABILITY persisted
OK
> EVENT.NEXT LEASE 10000 BLOCK 1000 CONSUMER cli
1) "$e43:N"
2) 1) (integer) $run
   2) (integer) 43
3) (integer) 0
4) 1) 1) (integer) 0
      2) (integer) 0
      3) "keep-me"
> EVENT.RELEASE $e43:N
OK
> EVENT.ACK $e43:N KEEP
(error) CLAIMLOST
> EVENT.NEXT LEASE 10000
1) "$e43:N"
2) 1) (integer) $run
   2) (integer) 43
3) (integer) 0
4) 1) 1) (integer) 0
      2) (integer) 0
      3) "keep-me"
> EVENT.ACK $e43:N KEEP DURABILITY persisted
OK
> EVENT.RANGE $run 0 100 LIMIT 5
1) 1) (integer) 43
   2) "kept"
   3) (integer) 1
   4) (integer) 7
   5) (integer) 0
> EVENT.GET $run 43
1) 1) (integer) 0
   2) (integer) 0
   3) "keep-me"
> EVENT.SEAL $run 43
(error) ACKED
> FRAG.PUT $run 43 1 0 late
(error) LATE
> EVENT.NEXT BLOCK 100
(nil)
> EVENT.NEXT BLOCK 600
(nil)
> FRAG.PUT $run notanumber 0 0 x
(error) ERR
> FRAG.PUT 4294967296 0 0 0 x
(error) ERR
> EVENT.ACK $e43:N MAYBE
(error) ERR
> DEL $tag:b $tag:c $tag:d
(integer) 3
EOF

  if ! diff -u "$WORK/expected.txt" "$out" >"$WORK/diff.txt"; then
    echo "FAIL: the redis-cli session differs from the expected text (--- expected, +++ actual):" >&2
    cat "$WORK/diff.txt" >&2
    exit 1
  fi
  echo "ok: redis-cli session ($(grep -c '^> ' "$out") commands) matches"

  # One-shot checks.
  local stats3 stats2 name hello info
  hello=$(cli -3 --no-raw HELLO 3)
  grep -q '"proto" => (integer) 3' <<<"$hello" || fail "redis-cli -3 HELLO 3 is not a RESP3 map with proto 3: $hello"
  stats3=$(cli -3 --no-raw STORE.STATS)
  stats2=$(cli --no-raw STORE.STATS)
  for name in entries live_bytes dead_bytes capacity_bytes file_bytes puts removes full_errors \
    events_open events_ready events_claimed events_kept events_incomplete late_fragments \
    events_removed events_kept_total leases_expired claims_released events_timed_out \
    power_safe_tiers tiers; do
    grep -Eq "^ *[0-9]+# \"$name\" => " <<<"$stats3" || fail "STORE.STATS (RESP3 map) has no $name: $stats3"
    grep -Eq "^ *[0-9]+\) \"$name\"$" <<<"$stats2" || fail "STORE.STATS (RESP2 array) has no $name: $stats2"
  done
  grep -Eq '^ *[0-9]+# "late_fragments" => \(integer\) [1-9]' <<<"$stats3" ||
    fail "STORE.STATS late_fragments is not positive after two LATE replies: $stats3"
  echo "ok: STORE.STATS as a RESP3 map and a RESP2 array"
  info=$(cli INFO hotstore)
  grep -qi '^# hotstore' <<<"$info" || fail "INFO hotstore has no '# Hotstore' section: $info"
  echo "ok: INFO hotstore"
  cli SET "$tag:s1" 1 >/dev/null
  cli SET "$tag:s2" 2 >/dev/null
  cli SET "$tag:s3" 3 >/dev/null
  local scanned
  scanned=$(cli --scan --pattern "$tag:s*" | sort | tr '\n' ' ')
  [[ $scanned == "$tag:s1 $tag:s2 $tag:s3 " ]] || fail "redis-cli --scan --pattern '$tag:s*' gave: $scanned"
  [[ $(cli DEL "$tag:s1" "$tag:s2" "$tag:s3") == 3 ]] || fail "DEL of the scanned keys"
  echo "ok: redis-cli --scan"
}

# ---------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------

run_bench() {
  local out rc=0 clean op
  out=$(timeout 120 redis-benchmark -h "$HOST" -p "$PORT" "${BENCH_AUTH[@]}" -t set,get -n 2000 -c 4 -P 8 -q </dev/null 2>&1) || rc=$?
  clean=$(tr '\r' '\n' <<<"$out")
  if ((rc != 0)); then
    echo "$clean" >&2
    fail "redis-benchmark exited with status $rc"
  fi
  for op in SET GET; do
    if ! grep -Eq "^$op: [0-9]+(\.[0-9]+)? requests per second" <<<"$clean"; then
      echo "$clean" >&2
      fail "redis-benchmark printed no requests per second for $op"
    fi
  done
  grep -E '^(SET|GET): .*requests per second' <<<"$clean" | sed 's/^/ok: redis-benchmark /'
}

# ---------------------------------------------------------------------------------------------
# docs: the redis-cli session of docs/protocol.md ("Examples (redis-cli)"), run as written on one
# connection against a fresh server; the replies must be the document's (claim numbers aside).
# ---------------------------------------------------------------------------------------------

run_docs() {
  local doc block line cmd reply t tok=
  doc="$(cd "$(dirname "$0")/../.." && pwd)/docs/protocol.md"
  [[ -f $doc ]] || fail "no $doc"
  block="$WORK/doc_block.txt"
  awk '/^\$ redis-cli -p 6380$/ {on=1; next} on && /^```/ {exit} on' "$doc" >"$block"
  grep -q '^127\.0\.0\.1:6380> ' "$block" || fail "no redis-cli session in $doc"
  sed -E -e 's/^127\.0\.0\.1:6380> /> /' -e 's/([0-9a-f]{24}):[0-9]+/\1:N/g' "$block" >"$WORK/doc_expected.txt"
  coproc DOC { exec stdbuf -oL redis-cli -h "$HOST" -p "$PORT" "${AUTH[@]}" --no-raw 2>&1; }
  CLI_PID=$DOC_PID
  local out="$WORK/doc_actual.txt"
  : >"$out"
  while IFS= read -r cmd; do
    # The document's claim token stands for the one this server gave.
    [[ -n $tok ]] && cmd=$(sed -E "s/[0-9a-f]{24}:[0-9]+/$tok/g" <<<"$cmd")
    printf '%s\nECHO __END__\n' "$cmd" >&"${DOC[1]}"
    printf '> %s\n' "$cmd" >>"$out"
    reply=
    while true; do
      IFS= read -r -t 20 line <&"${DOC[0]}" || fail "redis-cli gave no reply to: $cmd"
      [[ $line == '"__END__"' ]] && break
      [[ $line =~ ^\([0-9]+\.[0-9]+s\)$ ]] && continue # redis-cli's timing line
      printf '%s\n' "$line" >>"$out"
      reply+="$line"$'\n'
    done
    t=$(sed -n '1s/^1) "\([0-9a-f]\{24\}:[0-9]\{1,\}\)"$/\1/p' <<<"$reply")
    [[ -n $t ]] && tok=$t
  done < <(sed -n 's/^127\.0\.0\.1:6380> //p' "$block")
  eval "exec ${DOC[1]}>&-"
  wait "$CLI_PID" || true
  CLI_PID=
  sed -E -i 's/([0-9a-f]{24}):[0-9]+/\1:N/g' "$out"
  if ! diff -u "$WORK/doc_expected.txt" "$out" >"$WORK/doc_diff.txt"; then
    echo "FAIL: docs/protocol.md's redis-cli session does not run as written (--- document, +++ server):" >&2
    cat "$WORK/doc_diff.txt" >&2
    exit 1
  fi
  echo "ok: docs/protocol.md's redis-cli session ($(grep -c '^> ' "$out") commands) runs as written"
}

case "$MODE" in
  session) run_session ;;
  docs) run_docs ;;
  bench) run_bench ;;
  all)
    run_session
    run_bench
    ;;
esac
