"""A process that exits holding a lock while a daemon thread waits for it (test_life.py):
prints "waiting" once the thread's request is queued, then exits when stdin closes."""

import sys
import threading

import redlease

client = redlease.Client.connect(sys.argv[1])
held = client.lock("exit-daemon", ttl=30.0).acquire()


def wait_for_it() -> None:
    client.lock("exit-daemon", ttl=30.0, wait=60.0).acquire()


threading.Thread(target=wait_for_it, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
