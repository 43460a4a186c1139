"""A client's fencing-counter keep (``fence_keep``, as the Rust client's
``ClientBuilder::fence_keep``): a grant keeps the name's counter about that long past the
server's clock (an hour by default); a keep under a second or over a year is refused."""

import asyncio

import pytest

import redlease


def counter_pttl(server, name: str) -> int:
    """The remaining time of lock `name`'s fencing counter, in ms."""
    reply = server.command("PTTL", "{redlease:%s}\0fence" % name)
    assert reply.startswith(":"), reply
    return int(reply[1:])


def test_a_grant_keeps_the_counter_about_the_keep(redis_server):
    short = redlease.Client.connect(redis_server.url, fence_keep=30)
    with short.lock("short"):
        assert 20_000 <= counter_pttl(redis_server, "short") <= 30_000
    default = redlease.Client.connect(redis_server.url)
    with default.lock("hour"):
        assert 3_590_000 <= counter_pttl(redis_server, "hour") <= 3_600_000


def test_an_async_client_takes_the_keep(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url, fence_keep=45.5)
        async with client.lock("async"):
            return counter_pttl(redis_server, "async")

    assert 35_000 <= asyncio.run(main()) <= 45_500


@pytest.mark.parametrize("keep", [0, 0.5, 367 * 24 * 3600])
def test_a_keep_out_of_bounds_is_refused(redis_server, keep):
    with pytest.raises(redlease.InvalidOption, match="fence_keep"):
        redlease.Client.connect(redis_server.url, fence_keep=keep)


def test_a_keep_that_is_no_duration_is_refused(redis_server):
    with pytest.raises(redlease.InvalidOption, match="fence_keep"):
        redlease.Client.connect(redis_server.url, fence_keep=-1)
    with pytest.raises(TypeError):
        redlease.Client.connect(redis_server.url, fence_keep="1h")
