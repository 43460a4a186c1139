"""A private redis-server per test on a free loopback port, stopped by its PID."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import redlease


def redis_server_binary() -> str:
    """The server binary as crates/redlease-local finds it: REDLEASE_REDIS_SERVER, else
    `redis-server` on the PATH."""
    binary = os.environ.get("REDLEASE_REDIS_SERVER") or shutil.which("redis-server")
    if not binary:
        pytest.fail("redis-server not found: install Redis (make redis) or set REDLEASE_REDIS_SERVER")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A running redis-server of this test."""

    def __init__(self, *extra: str, binary: str = "") -> None:
        """`extra`: more `redis-server` arguments (`--cluster-enabled yes`); `binary`: the
        program (`redis-sentinel` runs a sentinel: `extra` is then its config file)."""
        self.dir = tempfile.mkdtemp(prefix="redlease-py-")
        for _ in range(20):
            self.port = free_port()
            if binary:
                command = [binary, *extra, "--port", str(self.port), "--bind", "127.0.0.1"]
            else:
                command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                           "--save", "", "--appendonly", "no", "--dir", self.dir, *extra]
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         cwd=self.dir)
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError("could not start redis-server")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.command("PING") == "+PONG":
                    return True
            except OSError:
                time.sleep(0.01)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str) -> str:
        """Sends one command (RESP) and returns the first line of the reply."""
        payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(payload.encode())
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return reply.decode().split("\r\n")[0]

    def script_calls(self) -> int:
        """How many script calls (EVALSHA and EVAL) the server ran, by INFO commandstats."""
        payload = b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n"
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(payload)
            reply = b""
            while b"\r\n" not in reply:
                reply += s.recv(4096)
            header, _, rest = reply.partition(b"\r\n")
            length = int(header[1:])
            while len(rest) < length:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
        calls = 0
        for line in rest.decode().splitlines():
            name, _, stats = line.partition(":")
            if name in ("cmdstat_evalsha", "cmdstat_eval"):
                calls += int(stats.split(",")[0].removeprefix("calls="))
        return calls

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def redis_server():
    server = RedisServer()
    try:
        yield server
    finally:
        server.resume() if server.proc.poll() is None else None
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def servers():
    """Starts redis-servers on demand (`servers(*extra)`), every one stopped at the end."""
    started = []

    def start(*extra: str, binary: str = "") -> RedisServer:
        server = RedisServer(*extra, binary=binary)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.resume() if server.proc.poll() is None else None
            server.stop()
            shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def client(redis_server):
    return redlease.Client.connect(redis_server.url)


def in_thread(fn):
    """`fn()` run in another thread (another owner: it does not re-enter this thread's
    locks); returns its result or raises its exception."""
    done = {}

    def run():
        try:
            done["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            done["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the other thread hung"
    if "error" in done:
        raise done["error"]
    return done.get("value")
