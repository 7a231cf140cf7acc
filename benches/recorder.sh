#!/usr/bin/env bash
# Recorder benchmark (issue 5 targets): 10 links of 5568-byte frames, Persisted, on the root disk
# and on /dev/shm. Each repetition runs fio's sequential 1 MiB O_DIRECT write (the disk's limit)
# right before `hotstore record` on the same file system, so the ratio is measured in the same
# run; on /dev/shm the limit is memcpy bandwidth, which `hotstore record` measures itself.
# The input (10 x --rate, default 150 MB/s) runs with a --pre window of 2 s: the backlog at the
# trigger (3 GB) makes the writers run flat out, and the sustained rate is taken while it drains.
#
# usage: benches/recorder.sh [--reps N] [--rate RATE] [--disk DIR] [--out FILE.md]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=3 rate=150MB/s disk=/var/tmp out=
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v fio >/dev/null || { echo "fio is needed (apt-get install fio)" >&2; exit 2; }
[ -x target/release/hotstore ] || cargo build --release -p hotstore-cli
bin=target/release/hotstore
work=$(mktemp -d "$disk/hotstore-recbench.XXXXXX")
trap 'rm -rf "$work" /dev/shm/hotstore-recbench.*' EXIT

fio_write() { # dir -> bytes/s
  fio --name=seq --directory="$1" --rw=write --bs=1M --direct=1 --ioengine=psync --size=4G \
      --runtime=4 --time_based --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"])'
  rm -f "$1"/seq.*
}

record() { # dir -> json
  "$bin" record --store "$1" --links 10 --rate-per-link "$rate" --pre 2 --post 2 \
    --capacity 8GiB --preallocate --dram-bound 7GiB --json 2>/dev/null
  rm -rf "$1"
}

rows=()
for where in disk shm; do
  for i in $(seq "$reps"); do
    if [ $where = disk ]; then
      limit=$(fio_write "$work")
      j=$(record "$work/store")
      lname="fio 1 MiB O_DIRECT"
    else
      s=$(mktemp -d /dev/shm/hotstore-recbench.XXXXXX)
      j=$(record "$s/store")
      limit=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["limit_bytes_per_sec"])')
      lname=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["limit_name"])')
    fi
    row=$(echo "$j" | python3 -c '
import json, sys
j = json.load(sys.stdin); limit = float(sys.argv[1])
print("%s %.3f %.3f %.3f %d %d %.2f %.2f" % (sys.argv[2], j["write_bytes_per_sec"]/1e9, limit/1e9,
      j["write_bytes_per_sec"]/limit, j["frames_dropped"], j["frames_recorded"],
      j["backlog_peak_bytes"]/1e9, j["backlog_model_bytes"]/1e9))' "$limit" "$where")
    echo "$where run $i: $row ($lname)" >&2
    rows+=("$row")
  done
done
python3 - "$out" "${rows[@]}" <<'PY'
import statistics, sys
out, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
lines = ["| where | runs | sustained write GB/s (median) | limit GB/s (median) | ratio per run | median ratio | frames lost | backlog peak / model GB |",
         "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
for where in ("disk", "shm"):
    rs = [r for r in rows if r[0] == where]
    if not rs: continue
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    lines.append("| %s | %d | %.2f | %.2f | %s | %.2f | %d of %d | %.2f / %.2f |" % (
        "root disk" if where == "disk" else "/dev/shm", len(rs), med(1), med(2),
        ", ".join(r[3] for r in rs), med(3), sum(int(r[4]) for r in rs),
        sum(int(r[4]) + int(r[5]) for r in rs), med(6), med(7)))
text = "\n".join(lines)
print(text)
if out: open(out, "w").write(text + "\n")
PY
