"""redlease against the Python Redis locks people use, in one run on one machine.

Libraries: redlease (this repository's binding), redis-py's ``Lock``, python-redis-lock
and pottery's ``Redlock`` (on one Redis, as the others), each with its documented
defaults but for the lease ttl and the wait, which all get the same values.

Scenarios, each a slice of ``--seconds``:

- **uncontended**: one worker acquires and releases a lock nobody else wants, in a loop:
  cycles per second.
- **contended**: ``--workers`` processes (not threads: each library gets a GIL of its
  own per worker) loop on one lock, each holding it for ``--hold`` seconds: sections per
  second, the longest wait for the lock, and the same-worker share (of consecutive
  sections, how many went to the worker that had just released: 1/workers is fair FIFO,
  near 1 is one worker starving the rest).

The machine is shared by Redis, the workers and this script (2 vCPUs), so the numbers
mean something only against each other: the slices are interleaved (round after round,
every library once per round, the order rotating) and each result is the median of the
rounds with their range.

Usage (from the repository root, after ``make python``)::

    target/py-venv/bin/python python/bench/compare.py --rounds 5 --seconds 3

It starts its own redis-server on a free 127.0.0.1 port and stops it by PID.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

LIBRARIES = ("redlease", "redis-py", "python-redis-lock", "pottery")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server on a free loopback port, stopped by PID."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server not found: run `make redis` first")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redlease-pybench-")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                sys.exit("redis-server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Adapter:
    """One library's lock: ``acquire()`` waits (up to the wait), ``release()`` gives back."""

    def __init__(self, library: str, url: str, name: str, ttl: float, wait: float) -> None:
        self.library = library
        if library == "redlease":
            import redlease

            self.client = redlease.Client.connect(url)
            self.lock = self.client.lock(name, ttl=ttl, wait=wait)
            self.held = None
        elif library == "redis-py":
            import redis

            self.conn = redis.Redis.from_url(url)
            self.lock = self.conn.lock(name, timeout=ttl, blocking_timeout=wait)
        elif library == "python-redis-lock":
            import redis
            import redis_lock

            self.conn = redis.Redis.from_url(url)
            self.lock = redis_lock.Lock(self.conn, name, expire=int(ttl))
            self.wait = wait
        elif library == "pottery":
            import redis
            from pottery import Redlock

            self.conn = redis.Redis.from_url(url)
            self.lock = Redlock(key=name, masters={self.conn}, auto_release_time=ttl)
            self.wait = wait
        else:
            raise ValueError(library)

    def acquire(self) -> bool:
        if self.library == "redlease":
            self.held = self.lock.acquire()
            return True
        if self.library == "redis-py":
            return self.lock.acquire()
        if self.library == "python-redis-lock":
            return self.lock.acquire(blocking=True, timeout=self.wait)
        return self.lock.acquire(blocking=True, timeout=self.wait)

    def release(self) -> None:
        if self.library == "redlease":
            self.held.release()
            self.held = None
        else:
            self.lock.release()


def uncontended(library: str, url: str, seconds: float, key: str) -> float:
    lock = Adapter(library, url, key, ttl=10.0, wait=5.0)
    # Warm up: connections, script loads.
    for _ in range(20):
        lock.acquire()
        lock.release()
    cycles = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        lock.acquire()
        lock.release()
        cycles += 1
    return cycles / (time.perf_counter() - start)


def contender(args: tuple) -> list[tuple[float, float, int]]:
    library, url, key, seconds, hold, worker, barrier = args
    lock = Adapter(library, url, key, ttl=30.0, wait=30.0)
    grants: list[tuple[float, float, int]] = []
    barrier.wait()
    deadline = time.perf_counter() + seconds
    while True:
        asked = time.perf_counter()
        if asked >= deadline:
            break
        if not lock.acquire():
            continue
        granted = time.perf_counter()
        if granted <= deadline:
            grants.append((granted, granted - asked, worker))
        time.sleep(hold)
        lock.release()
    return grants


@dataclass
class Contended:
    sections_per_s: float
    longest_wait: float
    same_worker: float


def contended(library: str, url: str, seconds: float, hold: float, workers: int,
              key: str) -> Contended:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(workers)
        with ctx.Pool(workers) as pool:
            results = pool.map(
                contender,
                [(library, url, key, seconds, hold, w, barrier) for w in range(workers)],
            )
    grants = sorted(g for r in results for g in r)
    if len(grants) < 2:
        return Contended(len(grants) / seconds, seconds, 1.0)
    same = sum(1 for a, b in zip(grants, grants[1:]) if a[2] == b[2])
    return Contended(
        sections_per_s=len(grants) / seconds,
        longest_wait=max(g[1] for g in grants),
        same_worker=same / (len(grants) - 1),
    )


def summary(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--hold", type=float, default=0.001)
    parser.add_argument("--only", nargs="*", choices=LIBRARIES, default=list(LIBRARIES))
    args = parser.parse_args()
    server = RedisServer()
    rows: dict[str, dict[str, list[float]]] = {
        lib: {"uncontended": [], "sections": [], "wait": [], "same": []} for lib in args.only
    }
    try:
        for r in range(args.rounds):
            order = args.only[r % len(args.only):] + args.only[: r % len(args.only)]
            for lib in order:
                key = f"bench:{lib}:{r}"
                rows[lib]["uncontended"].append(uncontended(lib, server.url, args.seconds, key + ":u"))
                c = contended(lib, server.url, args.seconds, args.hold, args.workers, key + ":c")
                rows[lib]["sections"].append(c.sections_per_s)
                rows[lib]["wait"].append(c.longest_wait)
                rows[lib]["same"].append(c.same_worker)
                print(f"round {r + 1} {lib}: {rows[lib]['uncontended'][-1]:.0f} cycles/s, "
                      f"{c.sections_per_s:.0f} sections/s, longest wait {c.longest_wait:.3f} s, "
                      f"same worker {c.same_worker:.2f}", file=sys.stderr)
    finally:
        server.stop()
    print(f"{args.rounds} rounds of {args.seconds:g} s slices, {args.workers} contending workers "
          f"holding {args.hold * 1000:g} ms; median [range]\n")
    print("| library | uncontended cycles/s | contended sections/s | longest wait (s) | same-worker share |")
    print("|---|---|---|---|---|")
    for lib in args.only:
        row = rows[lib]
        print(f"| {lib} | {summary(row['uncontended'], '{:.0f}')} | {summary(row['sections'], '{:.0f}')} "
              f"| {summary(row['wait'], '{:.2f}')} | {summary(row['same'], '{:.2f}')} |")


if __name__ == "__main__":
    main()
