#!/usr/bin/env python3
"""One Python consumer against `hotstore serve` on the root disk: events claimed and removed
per second, one event per round trip (EVENT.NEXT + EVENT.ACK) against batches (EVENT.NEXT
COUNT n + one EVENT.ACK of n tokens), with Persisted acknowledgements (each acknowledgement
command waits for its group commit: fdatasync on the root disk).

    python3 benches/consumer_batches.py [--events 20000] [--batch 100] [--groups G] [--dir DIR]
                                        [--json]

With --groups G, the batches run again through G required consumer groups, one after the
other: every group claims and acknowledges every event; the acknowledgements of all groups but
the last are recorded in the groups file (synced per EVENT.ACK), the last group's remove the
events. Each group's rate is reported.

Starts target/release/hotstore (build it first: cargo build --release -p hotstore-cli) on a
free loopback port with a store in DIR (default: a new directory under /var/tmp, which is on
the root disk here), fills it with single-fragment sealed events, drains them, stops it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from hotstore_client import HotstoreClient  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def start(store_dir):
    binary = os.path.join(ROOT, "target", "release", "hotstore")
    if not os.path.exists(binary):
        sys.exit(f"{binary} not found: cargo build --release -p hotstore-cli first")
    proc = subprocess.Popen(
        [binary, "serve", "--dir", store_dir, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in proc.stdout:
        if "listening on" in line:
            port = int(line.strip().rsplit(":", 1)[1])
            return proc, port
    sys.exit("hotstore serve exited before listening")


def fill(c, run, events):
    pipe = c.redis.pipeline(transaction=False)
    for e in range(events):
        pipe.execute_command("FRAG.PUT", run, e, 0, 0, b"x" * 100, "DURABILITY", "memory")
        pipe.execute_command("EVENT.SEAL", run, e, "DURABILITY", "memory")
        if e % 1000 == 999:
            pipe.execute()
    pipe.execute()


def drain_one_by_one(c, events):
    t = time.perf_counter()
    for _ in range(events):
        claim = c.event_next(lease_ms=60000)
        c.event_ack(claim.token, remove=True, durability="persisted")
    return events / (time.perf_counter() - t)


def drain_batches(c, events, batch, group=None):
    """The batch consumer's loop: acknowledge a batch and claim the next in one round trip."""
    t = time.perf_counter()
    done = 0
    claims = c.event_next_many(batch, lease_ms=60000, group=group)
    while claims:
        done += len(claims)
        errors, claims = c.event_ack_next(
            [x.token for x in claims], batch, durability="persisted", lease_ms=60000,
            group=group,
        )
        if any(e is not None for e in errors):
            sys.exit(f"acknowledgement failed: {errors}")
    if done != events:
        sys.exit(f"drained {done} of {events} events")
    return events / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--groups", type=int, default=0, help="also drain through G groups")
    ap.add_argument("--dir", help="store directory (default: new one under /var/tmp)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = ap.parse_args()
    store_dir = args.dir or tempfile.mkdtemp(prefix="hotstore-consumer-", dir="/var/tmp")
    proc, port = start(store_dir)
    try:
        with HotstoreClient(port=port) as c:
            one_n = max(args.events // 10, 1)
            fill(c, 1, one_n)
            one = drain_one_by_one(c, one_n)
            fill(c, 2, args.events)
            batched = drain_batches(c, args.events, args.batch)
            group_rates = []
            if args.groups:
                fill(c, 3, args.events)
                names = ["g%d" % i for i in range(args.groups)]
                for g in names:
                    c.group_create(g)
                group_rates = [drain_batches(c, args.events, args.batch, g) for g in names]
                left = c.event_range(3, 0, args.events)
                if left:
                    sys.exit(f"{len(left)} events left after every group acknowledged")
    finally:
        proc.terminate()
        proc.wait()
        if not args.dir:
            shutil.rmtree(store_dir, ignore_errors=True)
    result = {
        "events": args.events,
        "batch": args.batch,
        "one_by_one_events_per_s": round(one),
        "batched_events_per_s": round(batched),
        "speedup": round(batched / one, 1),
    }
    if args.groups:
        result["groups"] = args.groups
        result["group_events_per_s"] = [round(r) for r in group_rates]
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"one Python consumer, Persisted acks, root disk: one by one {one:,.0f} events/s; "
            f"batches of {args.batch} {batched:,.0f} events/s ({batched / one:.1f}x)"
        )
        if args.groups:
            rates = ", ".join(f"{r:,.0f}" for r in group_rates)
            print(f"through {args.groups} required groups, each: {rates} events/s "
                  "(the last group's acknowledgements remove the events)")


if __name__ == "__main__":
    main()
