"""One FIFO queue across languages: the `redlease run` CLI, a Rust program and a Python
thread wait for the same lock in that order and get it in that order, with rising
fencing tokens from one sequence."""

import os
import subprocess
import threading
import time

import pytest

import redlease


def binary(variable: str) -> str:
    path = os.environ.get(variable)
    if not path:
        pytest.skip(f"{variable} is not set: `make python-test` builds the binary and sets it")
    return path


def queued(redis_server, name: str) -> int:
    """How many owners wait in lock `name`'s queue (its key found by pattern)."""
    reply = redis_server.command("EVAL",
        "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
        "if redis.call('TYPE', k).ok == 'list' then n = n + redis.call('LLEN', k) end end return n",
        "0", f"*redlease:{name}*queue*")
    return int(reply[1:])


def wait_queued(redis_server, name: str, n: int, procs=()) -> None:
    deadline = time.monotonic() + 30
    while queued(redis_server, name) < n:
        for p in procs:
            assert p.poll() is None, f"waiter exited early with {p.returncode}"
        assert time.monotonic() < deadline, f"fewer than {n} waiters queued"
        time.sleep(0.01)


def test_cli_rust_and_python_waiters_are_served_in_order(client, redis_server, tmp_path):
    cli = binary("REDLEASE_CLI")
    rust_waiter = binary("REDLEASE_RUST_WAITER")
    out = tmp_path / "order"
    holder = client.lock("fifo", wait=0).acquire()

    cli_proc = subprocess.Popen([
        cli, "run", "--redis", redis_server.url, "--key", "fifo", "--wait", "60s", "--",
        "sh", "-c", f'echo "cli $REDLEASE_FENCING_TOKEN" >> {out}',
    ])
    wait_queued(redis_server, "fifo", 1, [cli_proc])
    rust_proc = subprocess.Popen([rust_waiter, redis_server.url, "fifo", str(out)])
    wait_queued(redis_server, "fifo", 2, [cli_proc, rust_proc])

    python_client = redlease.Client.connect(redis_server.url)
    errors = []

    def python_waiter():
        try:
            with python_client.lock("fifo", wait=60.0) as guard:
                with open(out, "a") as f:
                    f.write(f"python {guard.fencing_token}\n")
        except Exception as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=python_waiter)
    thread.start()
    wait_queued(redis_server, "fifo", 3, [cli_proc, rust_proc])

    holder.release()
    assert cli_proc.wait(timeout=60) == 0
    assert rust_proc.wait(timeout=60) == 0
    thread.join(timeout=60)
    assert errors == []

    lines = [line.split() for line in out.read_text().splitlines()]
    assert [who for who, _ in lines] == ["cli", "rust", "python"]
    tokens = [int(token) for _, token in lines]
    assert holder.fencing_token < tokens[0] < tokens[1] < tokens[2]
