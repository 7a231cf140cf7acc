#!/usr/bin/env python3
"""Put/get of numpy arrays from Python: embedded (``hotstore.open``, in-process) vs network
(``hotstore serve`` through redis-py, the ``hotstore.Client``'s connection) vs the Rust
embedded figure (``hotstore bench put|get --json``), side by side, median of N runs taken in
alternation.

    pip install ./python && cargo build --release -p hotstore-cli
    python3 benches/python_embedded.py [--sizes 100,1048576] [--duration 2] [--repeat 3]

Every variant does the same work per operation on a fresh store in --dir (default /dev/shm):
put: a put of a new key of SIZE bytes followed by the removal of the oldest key once KEEP keys
are held (Rust: ``--keep``), so the store recycles segments and never fills; get: a get of one of
KEEP stored keys in turn. Python puts a numpy uint8 array (embedded: its buffer, no
intermediate copy; network: ``arr.tobytes()``, as redis-py needs bytes); a Python get wraps the
value with numpy.frombuffer (embedded: zero-copy over the store; network: over the reply's
bytes). Durability persisted (on tmpfs a no-op, as in the Rust run). Every store is bounded by the Rust
bench's automatic capacity, and every run has its 0.3 s warm-up.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import hotstore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def default_binary():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "hotstore")


def bench_capacity(base):
    """The Rust bench's automatic capacity: half the free space, on a memory file system at
    most a quarter of the available RAM, in whole 64 MiB segments. Every variant gets it: a
    bounded store keeps its recycled files pooled."""
    st = os.statvfs(base)
    cap = st.f_bavail * st.f_frsize // 2
    if os.path.realpath(base).startswith("/dev/shm"):
        with open("/proc/meminfo") as f:
            avail = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))
        cap = min(cap, avail // 4)
    return cap - cap % (64 << 20)


def keys(n):
    return [hotstore.fragment_key(1, i, 0, 0) for i in range(n)]


def timed_loop(duration, step):
    """Calls step(i) until `duration` seconds passed; returns ops/s."""
    n = 0
    start = time.perf_counter()
    deadline = start + duration
    while True:
        for _ in range(64):
            step(n)
            n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


# ---- embedded -------------------------------------------------------------------------------


def embedded_put(base, size, duration, keep):
    d = tempfile.mkdtemp(dir=base)
    try:
        with hotstore.open(os.path.join(d, "s"), capacity=bench_capacity(base)) as s:
            value = np.full(size, 7, dtype=np.uint8)
            ks = keys(1 << 18)
            put, remove = s.put, s.remove

            def step(i):
                put(ks[i % len(ks)], value)
                if i >= keep:
                    remove(ks[(i - keep) % len(ks)])

            timed_loop(0.3, step)  # warm-up, as the Rust bench's
            return timed_loop(duration, lambda i: step(i + (1 << 19)))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def embedded_get(base, size, duration, keep):
    d = tempfile.mkdtemp(dir=base)
    try:
        with hotstore.open(os.path.join(d, "s"), capacity=bench_capacity(base)) as s:
            ks = keys(keep)
            for k in ks:
                s.put(k, np.full(size, 3, dtype=np.uint8))
            get = s.get
            frombuffer = np.frombuffer

            def step(i):
                a = frombuffer(get(ks[i % keep]), np.uint8)
                assert a.size == size

            timed_loop(0.3, step)
            return timed_loop(duration, step)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- network --------------------------------------------------------------------------------


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, binary, base):
        self.dir = tempfile.mkdtemp(dir=base)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "serve", "--dir", os.path.join(self.dir, "s"), "--port", str(self.port),
             "--capacity", str(bench_capacity(base))],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("hotstore serve did not start")
                time.sleep(0.05)
        self.client = hotstore.Client("127.0.0.1", self.port)

    def close(self):
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def network_put(binary, base, size, duration, keep):
    srv = Server(binary, base)
    try:
        r = srv.client.redis
        value = np.full(size, 7, dtype=np.uint8)
        ks = keys(1 << 18)

        def step(i):
            r.set(ks[i % len(ks)], value.tobytes())
            if i >= keep:
                r.delete(ks[(i - keep) % len(ks)])

        timed_loop(0.3, step)
        return timed_loop(duration, lambda i: step(i + (1 << 19)))
    finally:
        srv.close()


def network_get(binary, base, size, duration, keep):
    srv = Server(binary, base)
    try:
        r = srv.client.redis
        ks = keys(keep)
        for k in ks:
            r.set(k, np.full(size, 3, dtype=np.uint8).tobytes())

        def step(i):
            a = np.frombuffer(r.get(ks[i % keep]), np.uint8)
            assert a.size == size

        timed_loop(0.3, step)
        return timed_loop(duration, step)
    finally:
        srv.close()


# ---- Rust -----------------------------------------------------------------------------------


def rust(binary, base, op, size, duration, keep):
    args = [binary, "bench", op, "--dir", base, "--value-size", str(size)]
    args += ["--duration", str(duration), "--json"]
    args += ["--keep", str(keep)] if op == "put" else ["--key-count", str(keep)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ops_per_sec"]


def fmt_rate(ops, size):
    mb = ops * size / 1e6
    return "%9.0f op/s %8.1f MB/s" % (ops, mb)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    ap.add_argument("--sizes", default="100,1048576", help="value sizes in bytes")
    ap.add_argument("--duration", type=float, default=2.0, help="measured seconds per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is shown)")
    ap.add_argument("--keep", type=int, default=64, help="keys held (put: then the oldest is removed)")
    ap.add_argument("--hotstore", default=default_binary(), help="the hotstore binary")
    ap.add_argument("--json", action="store_true", help="print the medians as one JSON object")
    args = ap.parse_args()
    if not os.path.exists(args.hotstore):
        sys.exit("%s not found: cargo build --release -p hotstore-cli (or --hotstore PATH)" % args.hotstore)
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = {
        "embedded": lambda op, size: (embedded_put if op == "put" else embedded_get)(
            args.dir, size, args.duration, args.keep
        ),
        "network": lambda op, size: (network_put if op == "put" else network_get)(
            args.hotstore, args.dir, size, args.duration, args.keep
        ),
        "rust": lambda op, size: rust(args.hotstore, args.dir, op, size, args.duration, args.keep),
    }
    runs = {}
    for rep in range(args.repeat):  # alternate: every figure gets one run per round
        for size in sizes:
            for op in ("put", "get"):
                for name, fn in variants.items():
                    ops = fn(op, size)
                    runs.setdefault((op, size, name), []).append(ops)
                    print("round %d: %-3s %8d B %-8s %s" % (rep + 1, op, size, name, fmt_rate(ops, size)),
                          file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    if args.json:
        print(json.dumps({"%s/%d/%s" % k: v for k, v in med.items()}))
        return
    print("machine: %s, %d cores, Python %s, numpy %s; store in %s; median of %d runs of %.1f s"
          % (platform.processor() or platform.machine(), os.cpu_count(), platform.python_version(),
             np.__version__, args.dir, args.repeat, args.duration))
    print("| op | value | embedded (Python) | network (Python, redis-py) | Rust embedded | embedded / Rust |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for op in ("put", "get"):
        for size in sizes:
            e, n, r = (med[(op, size, v)] for v in ("embedded", "network", "rust"))
            print("| %s | %s | %s | %s | %s | %.2f |" % (
                op, "%d B" % size if size < 1024 else "%d KiB" % (size // 1024),
                fmt_rate(e, size).strip(), fmt_rate(n, size).strip(), fmt_rate(r, size).strip(), e / r))


if __name__ == "__main__":
    main()
