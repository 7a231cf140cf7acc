#!/usr/bin/env python3
"""Runs the `hotstore bench` matrix of docs/benchmarks.md and prints it as Markdown tables.

Usage: scripts/bench_matrix.py [--duration SECS] [--repeat N] [--quick]
Needs a release build: cargo build --release -p hotstore-cli
"""
import argparse
import json
import subprocess
import sys

SIZES = [100, 1024, 10240, 1 << 20]
DIRS = [("/dev/shm", "tmpfs /dev/shm"), ("/var/tmp", "root disk (ext4)")]


def run(args):
    cmd = ["target/release/hotstore", "bench"] + args + ["--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAILED: {' '.join(cmd)}\n{out.stderr}", file=sys.stderr)
        return None
    return json.loads(out.stdout)


def fmt_rate(b):
    return f"{b / 1e9:.2f} GB/s" if b >= 1e9 else f"{b / 1e6:.0f} MB/s"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--duration", default="1")
    p.add_argument("--repeat", default="3")
    p.add_argument("--quick", action="store_true", help="1 thread and 10 KiB only")
    a = p.parse_args()
    sizes = [10240] if a.quick else SIZES
    threads = [1] if a.quick else [1, 2]
    print("| op | tier | value | threads | durability | ops/s | bytes/s | limit | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d, dname in DIRS:
        for op in ["put", "get"]:
            for size in sizes:
                for t in threads:
                    for dur in (["memory", "persisted"] if op == "put" else ["memory"]):
                        args = [op, "--dir", d, "--value-size", str(size), "--threads", str(t),
                                "--durability", dur, "--duration", a.duration, "--repeat", a.repeat]
                        if op == "put" and size <= 1024:
                            # Small values: puts into a preallocated buffer, as a DAQ system
                            # allocates at start-up (the window measures writes, not the kernel
                            # zeroing new pages).
                            args += ["--capacity", "3GiB", "--preallocate"]
                        elif op == "put":
                            # Large values would fill any buffer within the second: steady state
                            # instead, each put followed by removing the thread's oldest key, so
                            # segments are recycled (the DAQ pattern; removal cost included).
                            keep = max(4, (256 << 20) // size // t)
                            args += ["--capacity", "1GiB", "--preallocate", "--keep", str(keep)]
                        r = run(args)
                        if r is None:
                            continue
                        print(f"| {op} | {dname} | {size} B | {t} | {dur if op == 'put' else '-'} | "
                              f"{r['ops_per_sec'] / 1e6:.2f} M | {fmt_rate(r['bytes_per_sec'])} | "
                              f"{r['limit_name']}: {fmt_rate(r['limit_bytes_per_sec'])} | {r['ratio'] * 100:.0f}% |",
                              flush=True)


if __name__ == "__main__":
    main()
