"""A client's key prefix: the same names under the prefix that a Rust service
(``ClientBuilder::prefix``) and ``redlease run --prefix`` use are the same locks."""

import asyncio
import os
import subprocess

import pytest

import redlease


def cli() -> str:
    path = os.environ.get("REDLEASE_CLI")
    if not path:
        pytest.skip("REDLEASE_CLI is not set: `make python-test` builds the binary and sets it")
    return path


def run_once(url: str, *prefix: str) -> int:
    """`redlease run` of lock `job` (under `prefix`, when given) without waiting: its exit
    code (0 ran, 75 busy)."""
    return subprocess.run(
        [cli(), "run", "--redis", url, *prefix, "--key", "job", "--no-wait", "--", "true"],
        stderr=subprocess.DEVNULL,
    ).returncode


def test_a_prefixed_lock_is_the_clis_lock_of_that_prefix(redis_server):
    client = redlease.Client.connect(redis_server.url, prefix="app:")
    with client.lock("job") as guard:
        assert redis_server.command("EXISTS", "app:job") == ":1"
        assert redis_server.command("EXISTS", "redlease:job") == ":0"
        assert run_once(redis_server.url, "--prefix", "app:") == 75, "the CLI found it free"
        # Under the default prefix, `job` is another lock.
        assert run_once(redis_server.url) == 0
        assert guard.is_held()
    assert run_once(redis_server.url, "--prefix", "app:") == 0


def test_clients_of_one_prefix_exclude_each_other_and_others_do_not(redis_server):
    app = redlease.Client.connect(redis_server.url, prefix="app:")
    other = redlease.Client.connect(redis_server.url, prefix="other:")
    with app.lock("job"):
        with pytest.raises(redlease.Timeout):
            with redlease.Client.connect(redis_server.url, prefix="app:").lock("job", wait=0):
                pass
        with other.lock("job", wait=0) as guard:
            assert guard.is_held()


def test_an_async_client_takes_a_prefix(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url, prefix="app:")
        async with client.lock("job"):
            return redis_server.command("EXISTS", "app:job")

    assert asyncio.run(main()) == ":1"


def test_a_prefix_with_a_nul_byte_is_refused(redis_server):
    client = redlease.Client.connect(redis_server.url, prefix="bad\0prefix:")
    with pytest.raises(redlease.InvalidName):
        client.lock("job").acquire()
