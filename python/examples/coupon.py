"""The flash-sale coupon race, in Python: 100 coupons, 400 buyers on 16 threads, a stock
kept in Redis and updated by a non-atomic read-modify-write. Without a lock the shop
oversells; under ``@redlease.locked`` (the key taken from the function's arguments) it
sells exactly 100.

Starts a private redis-server on a free 127.0.0.1 port and stops it by PID at the end.
From the repository root, after ``make python`` (which installs redis-py for it)::

    target/py-venv/bin/python python/examples/coupon.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import redis

import redlease

COUPONS = 100
BUYERS = 400
THREADS = 16


def start_redis() -> tuple[subprocess.Popen, int, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server not found: run `make redis` first")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="redlease-coupon-")
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    conn = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.ping()
            return server, port, workdir
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                server.terminate()
                sys.exit("redis-server did not start")
            time.sleep(0.02)


def sale(conn: redis.Redis, buy) -> tuple[int, int, float]:
    conn.set("shop:coupon-stock", COUPONS)
    conn.delete("shop:coupons-sold")
    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(buy, ["flash"] * BUYERS))
    sold = conn.llen("shop:coupons-sold")
    left = int(conn.get("shop:coupon-stock"))
    return sold, left, time.perf_counter() - started


def main() -> None:
    server, port, workdir = start_redis()
    print(f"private redis-server on 127.0.0.1:{port} (pid {server.pid})")
    try:
        conn = redis.Redis(port=port)
        locks = redlease.Client.connect(f"redis://127.0.0.1:{port}")

        def check_then_act(shop: str) -> None:
            # Check, then act: the race the lock exists to prevent.
            stock = int(conn.get("shop:coupon-stock"))
            if stock > 0:
                time.sleep(0)  # let another thread run between the check and the act
                conn.set("shop:coupon-stock", stock - 1)
                conn.rpush("shop:coupons-sold", shop)

        @redlease.locked(locks, "coupon:{shop}", ttl=10.0, wait=30.0)
        def buy_locked(shop: str) -> None:
            check_then_act(shop)

        for label, buy in (("without a lock:", check_then_act), ("with redlease:", buy_locked)):
            sold, left, took = sale(conn, buy)
            print(f"{label:<16} sold {sold:>3} of {COUPONS} coupons, stock left {left:>3}, {took:.2f} s")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
