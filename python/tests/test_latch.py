"""The count-down latch: counts are leases, waiters wake when none is left, and a party
that dies is reported as expired, never as counted down."""

import asyncio
import subprocess
import sys
import threading
import time

import pytest

import redlease


def waiting(latch, redis_server):
    """A thread waiting for `latch` to open (up to 30 s), started, and the list its
    `Opened` goes to. Its first check has reached Redis when this returns (else it may see
    the latch open already, with nothing counted down while it waited)."""
    opened = []
    before = redis_server.script_calls()
    waiter = threading.Thread(target=lambda: opened.append(latch.wait_open(wait=30.0)))
    waiter.start()
    deadline = time.monotonic() + 30
    while redis_server.script_calls() == before:
        assert time.monotonic() < deadline, "the waiter never checked the latch"
    return waiter, opened


def test_a_latch_opens_when_every_count_is_down(client, redis_server):
    latch = client.latch("import", ttl=5.0)
    assert latch.count() == 0
    first, second = latch.count_up(), latch.count_up()
    assert latch.count() == 2
    assert second.fencing_token > first.fencing_token
    waiter, opened = waiting(latch, redis_server)
    first.count_down()
    assert latch.count() == 1
    assert waiter.is_alive(), f"the latch opened with a count outstanding: {opened}"
    with pytest.raises(redlease.Timeout):
        latch.wait_open(wait=0)
    second.count_down()
    waiter.join(timeout=30)
    assert opened == [redlease.Opened(counted_down=2, expired=0)]
    assert not opened[0].is_broken


def test_a_count_ends_with_its_with_block(client):
    latch = client.latch("block")
    with latch.count_up() as count:
        assert count.is_held() and latch.count() == 1
    assert latch.count() == 0
    assert latch.wait_open(wait=0) == redlease.Opened(0, 0)


def test_a_party_that_dies_is_reported_expired(redis_server, client):
    party = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, redlease\n"
        f"latch = redlease.Client.connect({redis_server.url!r}).latch('job', ttl=1.0)\n"
        "count = latch.count_up()\n"
        "print('counted up', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )], stdout=subprocess.PIPE, text=True)
    assert party.stdout.readline().strip() == "counted up"
    assert party.wait(timeout=30) == -9
    opened = client.latch("job", ttl=1.0).wait_open(wait=30.0)
    assert opened == redlease.Opened(counted_down=0, expired=1)
    assert opened.is_broken


def test_a_count_cannot_be_extended_nor_proclaimed(client):
    with client.latch("steps").count_up() as count:
        with pytest.raises(redlease.Unsupported):
            count.extend(5.0)
        with pytest.raises(redlease.Unsupported):
            count.proclaim("x")


def test_an_async_latch(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        latch = client.latch("async-import")
        first, second = await latch.count_up(), await latch.count_up()
        before = redis_server.script_calls()
        waiter = asyncio.ensure_future(latch.wait_open(wait=30.0))
        # The waiter's first check reaches Redis before anything is counted down (as in
        # the threaded test above), the loop running meanwhile.
        deadline = time.monotonic() + 30
        while redis_server.script_calls() == before:
            assert time.monotonic() < deadline, "the waiter never checked the latch"
            await asyncio.sleep(0.001)
        await first.count_down()
        assert await latch.count() == 1
        assert not waiter.done(), "the latch opened with a count outstanding"
        await second.count_down()
        return await waiter

    assert asyncio.run(main()) == redlease.Opened(counted_down=2, expired=0)


def test_expected_arrivals_hold_the_round_open_until_they_came(client, redis_server):
    latch = client.latch("workers", ttl=5.0)
    assert latch.try_expect(2) is True
    assert latch.try_expect(2) is False  # a round is open: the others join it
    assert latch.expect(1) == 3  # one more
    waiter, opened = waiting(latch, redis_server)
    # Nobody counted up yet, and the round is open all the same.
    for _ in range(2):
        latch.count_up().count_down()
    assert waiter.is_alive(), f"the latch opened with an arrival expected: {opened}"
    with pytest.raises(redlease.Timeout):
        latch.wait_open(wait=0)
    latch.count_up().count_down()
    waiter.join(timeout=30)
    assert opened == [redlease.Opened(counted_down=3, expired=0)]
    assert latch.try_expect(1) is True  # the next round


def test_a_barrier_opens_when_the_last_party_arrives(client):
    latch = client.latch("phase-2", ttl=5.0)
    arrived = []

    def party():
        arrived.append(latch.barrier(3, wait=30.0))

    parties = [threading.Thread(target=party) for _ in range(2)]
    for p in parties:
        p.start()
    time.sleep(0.2)
    assert arrived == [], "the barrier opened before every party arrived"
    party()
    for p in parties:
        p.join(timeout=30)
    assert arrived == [redlease.Opened(counted_down=3, expired=0)] * 3
    with pytest.raises(redlease.Timeout):
        client.latch("alone", ttl=5.0).barrier(2, wait=0.2)


def test_latch_counts_are_checked(client):
    latch = client.latch("checked")
    for bad in (0, -1, 2**32):
        with pytest.raises(redlease.InvalidOption):
            latch.expect(bad)
    with pytest.raises(redlease.InvalidOption):
        latch.barrier(0)
    with pytest.raises(TypeError):
        latch.try_expect("2")


def test_an_async_barrier_and_expected_arrivals(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        barrier = client.latch("async-phase", ttl=5.0)
        opened = await asyncio.gather(*(barrier.barrier(3, wait=30.0) for _ in range(3)))
        latch = client.latch("async-workers", ttl=5.0)
        assert await latch.try_expect(1) is True
        assert await latch.try_expect(1) is False
        assert await latch.expect(1) == 2
        assert await latch.count() == 2
        return opened

    assert asyncio.run(main()) == [redlease.Opened(counted_down=3, expired=0)] * 3
