"""@redlease.locked: the key formatted from the call's arguments, checked when applied."""

import asyncio
import threading

import pytest

import redlease
from conftest import in_thread


def test_locked_sync_function_holds_the_named_lock(client):
    seen = []

    @redlease.locked(client, "coupon:{user_id}", ttl=5.0, wait=0)
    def redeem(user_id, amount=1):
        # The lock of this user is held; another user's is free.
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: client.lock(f"coupon:{user_id}", wait=0).acquire())
        with client.lock("coupon:other", wait=0):
            pass
        seen.append((user_id, amount))
        return amount

    assert redeem(7, amount=3) == 3
    assert redeem(user_id=8) == 1
    assert seen == [(7, 3), (8, 1)]
    assert redeem.__name__ == "redeem"


def test_unknown_placeholder_raises_when_applied(client):
    with pytest.raises(TypeError, match="user"):
        @redlease.locked(client, "coupon:{user}")
        def redeem(user_id):
            pass
    with pytest.raises(TypeError):
        @redlease.locked(client, "coupon:{}")
        def positional(user_id):
            pass


def test_locked_needs_the_matching_client(client):
    with pytest.raises(TypeError, match="AsyncClient"):
        @redlease.locked(client, "k")
        async def work():
            pass


def test_locked_async_function(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        inside = []
        overlaps = []

        @redlease.locked(client, "order:{order.id}", ttl=5.0, wait=10.0)
        async def ship(order):
            if inside:
                overlaps.append(order.id)
            inside.append(order.id)
            await asyncio.sleep(0.01)
            inside.remove(order.id)

        class Order:
            id = 5

        await asyncio.gather(*(ship(Order()) for _ in range(5)))
        return overlaps

    assert asyncio.run(main()) == []


def test_locked_hands_the_guard_to_the_function(client):
    seen = []

    @redlease.locked(client, "order:{order_id}", guard="lease")
    def charge(order_id, amount, lease):
        seen.append((lease.name, lease.fencing_token, lease.is_held()))
        return amount

    assert charge(7, 10) == 10
    assert charge(order_id=7, amount=11) == 11
    (name, first, held), (_, second, _) = seen
    assert (name, held) == ("order:7", True)
    assert second > first > 0


def test_locked_guard_must_name_a_parameter(client):
    with pytest.raises(TypeError, match="no parameter 'lease'"):
        @redlease.locked(client, "x", guard="lease")
        def f():
            pass


def test_locked_with_a_client_that_connects_on_first_use(redis_server):
    # As in a FastAPI module: the client and the decorated function are made at import,
    # outside any event loop, before anything is connected.
    client = redlease.AsyncClient.from_url(redis_server.url)

    @redlease.locked(client, "job:{job}", guard="lease")
    async def work(job, lease):
        return lease.name, lease.fencing_token

    first = asyncio.run(work("a"))
    # A second event loop (a second test, a reloaded app) uses the same client.
    second = asyncio.run(work("a"))
    assert first[0] == second[0] == "job:a"
    assert second[1] > first[1] > 0


def test_a_client_from_url_reports_an_unreachable_redis_on_first_use():
    client = redlease.Client.from_url("redis://127.0.0.1:1")  # nothing is connected now
    with pytest.raises(redlease.ConnectionError):
        client.lock("x", wait=0).acquire()
