"""A Python process's whole life with redlease: the interpreter's exit with calls running
or waiting (asyncio, daemon threads), and os.fork() (a client made before a fork works in
the child; the parent's guards are refused there at once)."""

import concurrent.futures
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import redlease

APPS = Path(__file__).parent / "apps"


def run_app(name, *args, **kwargs):
    return subprocess.run([sys.executable, str(APPS / name), *args], capture_output=True,
                          text=True, timeout=60, **kwargs)


def test_asyncio_programs_exit_cleanly_after_an_awaited_call(redis_server):
    # Before the exit gate, about one run in four aborted (rc 134, "PyGILState_Release:
    # thread state ... must be current when releasing (finalizing)").
    runs = 200
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda _: run_app("exit_async.py", redis_server.url), range(runs)))
    failed = [(d.returncode, d.stderr[-300:]) for d in done if d.returncode != 0 or d.stderr]
    assert failed == [], f"{len(failed)} of {runs} runs failed: {failed[:3]}"


def wait_for(predicate, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_exit_with_a_daemon_thread_waiting_gives_everything_back(redis_server):
    # Before: pyo3 panicked ("The Python interpreter is not initialized"), rc 134, and the
    # lock held by the exiting process stayed held until its ttl.
    queue = "{redlease:exit-daemon}\0queue"
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, str(APPS / "exit_daemon.py"), redis_server.url],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            wait_for(lambda: redis_server.command("EXISTS", queue) == ":1", "the queued place")
            _, err = proc.communicate(input="", timeout=30)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        assert (proc.returncode, err) == (0, "")
        # The held lock and the waiting thread's place were given back at exit.
        assert redis_server.command("EXISTS", "redlease:exit-daemon") == ":0"
        assert redis_server.command("EXISTS", queue) == ":0"
        assert redis_server.command("EXISTS", "{redlease:exit-daemon}\0waiters") == ":0"


def fork_and_wait(child, timeout=20.0):
    """Runs `child()` in a forked child (its return value is the exit code) and returns
    the child's exit code; a child that hangs is killed and fails the test."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = child()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_guard_inherited_by_a_fork_is_refused_there_at_once(client, redis_server):
    guard = client.lock("forked-guard", ttl=10.0).acquire()
    token = guard.fencing_token

    def child():
        if guard.is_held() or guard.remaining != 0.0:
            return 2
        for step in (guard.release, lambda: guard.extend(5.0)):
            started = time.monotonic()
            try:
                step()
                return 3
            except redlease.Forked:
                if time.monotonic() - started > 1.0:
                    return 4
        try:
            with guard:
                pass
            return 5
        except redlease.Forked:
            return 0

    # Before: the child hung for ever in a futex wait.
    assert fork_and_wait(child) == 0
    # The parent's lease is untouched: still held, still extendable, given back by it.
    assert guard.is_held()
    guard.extend(10.0)
    assert redis_server.command("EXISTS", "redlease:forked-guard") == ":1"
    guard.release()
    with client.lock("forked-guard", wait=0) as again:
        assert again.fencing_token > token


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_client_made_before_a_fork_works_in_the_child(client, redis_server):
    with client.lock("before-fork") as before:
        first = before.fencing_token
    read, write = os.pipe()

    def child():
        with client.lock("before-fork", wait=5.0) as guard:
            os.write(write, str(guard.fencing_token).encode())
        return 0

    assert fork_and_wait(child) == 0
    os.close(write)
    token = int(os.read(read, 64))
    os.close(read)
    assert token > first
    # The parent's client still works after the child used its own connection.
    with client.lock("before-fork", wait=5.0) as guard:
        assert guard.fencing_token > token


POOL_CLIENT = None


def pool_work(_):
    with POOL_CLIENT.lock("pool", ttl=5.0, wait=30.0) as guard:
        return os.getpid(), guard.fencing_token


@pytest.mark.parametrize("pool_kind", ["multiprocessing", "billiard"])
def test_a_prefork_pool_uses_the_parents_client(redis_server, pool_kind):
    # A client made in the parent, tasks in forked workers: multiprocessing's "fork" pool,
    # and billiard's, the pool Celery's prefork workers run on.
    global POOL_CLIENT
    POOL_CLIENT = redlease.Client.connect(redis_server.url)
    with POOL_CLIENT.lock("pool"):
        pass
    if pool_kind == "billiard":
        import billiard  # python/requirements-dev.txt
        pool = billiard.Pool(2)
    else:
        pool = multiprocessing.get_context("fork").Pool(2)
    try:
        done = pool.map(pool_work, range(20))
    finally:
        pool.terminate()
        pool.join()
    tokens = [token for _, token in done]
    assert len(set(tokens)) == 20
    assert os.getpid() not in {pid for pid, _ in done}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gunicorn_preload_workers_use_the_client_made_at_import(redis_server):
    # Before: 60 of 60 requests failed with ForkedClient.
    port = free_port()
    env = dict(os.environ, REDLEASE_TEST_URL=redis_server.url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-b", f"127.0.0.1:{port}",
         "--chdir", str(APPS), "preload_app:app"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def up():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                return False

        wait_for(up, "gunicorn to listen", timeout=30)
        answers = []
        for _ in range(30):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as reply:
                assert reply.status == 200
                answers.append(reply.read().decode().split())
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    tokens = [int(token) for _, token in answers]
    assert len(set(tokens)) == len(tokens) == 30
    assert str(proc.pid) not in {pid for pid, _ in answers}
