"""A client's connection state: connected, degraded (a quorum missing a minority) or
suspended, now and as it changes, against servers paused with SIGSTOP."""

import asyncio

import redlease
from conftest import in_thread

CONNECTED = redlease.ConnectionState("connected")
SUSPENDED = redlease.ConnectionState("suspended")


def test_a_paused_server_suspends_the_client_and_its_return_reconnects_it(redis_server):
    client = redlease.Client.connect(redis_server.url, response_timeout=0.5)
    assert client.connection_state() == CONNECTED
    assert client.connection_state().is_usable
    states = client.connection_states()
    assert in_thread(lambda: next(states)) == CONNECTED
    redis_server.pause()
    # An idle client notices: the stream sends a PING each second without a change.
    suspended = in_thread(lambda: next(states))
    assert suspended == SUSPENDED and not suspended.is_usable
    assert client.connection_state() == SUSPENDED
    redis_server.resume()
    assert in_thread(lambda: next(states)) == CONNECTED
    with client.lock("after", wait=5.0):
        pass


def test_a_quorum_missing_a_minority_is_degraded(servers):
    nodes = [servers() for _ in range(3)]
    client = redlease.Client.connect([n.url for n in nodes], response_timeout=0.5)
    states = client.connection_states()
    assert in_thread(lambda: next(states)) == CONNECTED
    nodes[0].pause()
    degraded = in_thread(lambda: next(states))
    assert degraded == redlease.ConnectionState("degraded", down=1, nodes=3)
    assert degraded.is_usable
    with client.lock("still", ttl=5.0, wait=5.0):
        pass
    nodes[1].pause()
    assert in_thread(lambda: next(states)) == SUSPENDED
    nodes[0].resume()
    nodes[1].resume()
    # The two nodes come back one after the other, or at once.
    seen = [in_thread(lambda: next(states))]
    if seen[0] != CONNECTED:
        seen.append(in_thread(lambda: next(states)))
    assert seen in ([CONNECTED], [redlease.ConnectionState("degraded", 1, 3), CONNECTED])


def test_a_lazy_client_connects_for_its_state(redis_server):
    client = redlease.Client.from_url(redis_server.url)
    assert client.connection_state() == CONNECTED


def test_async_connection_states(redis_server):
    async def main():
        client = redlease.AsyncClient.from_url(redis_server.url, response_timeout=0.5)
        assert await client.connection_state() == CONNECTED
        states = client.connection_states()
        seen = [await asyncio.wait_for(states.__anext__(), 30)]
        redis_server.pause()
        seen.append(await asyncio.wait_for(states.__anext__(), 30))
        redis_server.resume()
        seen.append(await asyncio.wait_for(states.__anext__(), 30))
        return seen

    assert asyncio.run(main()) == [CONNECTED, SUSPENDED, CONNECTED]
