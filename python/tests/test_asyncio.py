"""The asyncio API: async with, run (cancelled on loss), cancellation of a wait."""

import asyncio

import pytest

import redlease


def test_async_lock_excludes_tasks_and_tokens_rise(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        inside, overlaps, tokens = [], [], []

        async def worker():
            for _ in range(10):
                async with client.lock("shared", ttl=5.0, wait=30.0) as guard:
                    if inside:
                        overlaps.append(guard.fencing_token)
                    inside.append(guard.fencing_token)
                    tokens.append(guard.fencing_token)
                    await asyncio.sleep(0)
                    inside.remove(guard.fencing_token)

        await asyncio.gather(*(worker() for _ in range(4)))
        return overlaps, tokens

    overlaps, tokens = asyncio.run(main())
    assert overlaps == []
    assert tokens == sorted(tokens) and len(set(tokens)) == 40


def test_async_guard_surface_and_timeout(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        async with client.lock("surface", ttl=5.0) as guard:
            assert guard.is_held()
            await guard.extend(20.0)
            assert guard.remaining > 5
            # Another task is another owner: it waits, then times out.
            with pytest.raises(redlease.Timeout):
                await asyncio.create_task(client.lock("surface", wait=0.2).acquire())
            assert await guard.owned()
        assert not guard.is_held()
        assert not await guard.owned()

    asyncio.run(main())


def test_run_cancels_the_work_when_the_lease_is_lost(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        started = asyncio.Event()
        cancelled = []

        async def work():
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        async def delete_when_started():
            await started.wait()
            assert redis_server.command("DEL", "redlease:job") == ":1"

        with pytest.raises(redlease.Lost):
            await asyncio.gather(client.lock("job", ttl=1.5).run(work), delete_when_started())
        return cancelled

    assert asyncio.run(main()) == [True]


def test_run_returns_the_works_result(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)

        async def work(x):
            return x * 2

        return await client.lock("job").run(work, 21)

    assert asyncio.run(main()) == 42


def test_cancelling_a_wait_leaves_nothing_held(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        holder = await client.lock("queue").acquire()
        waiter = asyncio.ensure_future(client.lock("queue", wait=None).acquire())
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.release()
        # Nobody holds it: the cancelled waiter did not take it.
        again = await client.lock("queue", wait=2.0).acquire()
        await again.release()

    asyncio.run(main())


def test_async_election(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        election = client.election("primary")
        assert await election.leader() is None
        leadership = await election.campaign("a")
        leader = await election.leader()
        assert leader.note == "a" and leader.term == leadership.term
        await leadership.proclaim("b")
        leader = await election.leader()
        assert (leader.note, leader.term) == ("b", leadership.term)
        await leadership.resign()
        assert await election.leader() is None

    asyncio.run(main())


def test_a_task_re_enters_its_lock_and_the_work_of_run_acts_for_it(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        async with client.lock("nested") as outer:
            async with client.lock("nested", wait=0) as inner:
                assert inner.fencing_token == outer.fencing_token
            # Another task is another owner.
            with pytest.raises(redlease.Timeout):
                await asyncio.create_task(client.lock("nested", wait=0).acquire())

        async def work():
            async with client.lock("nested", wait=0) as inside:
                return inside.fencing_token

        token = await client.lock("nested").run(work)
        assert token > outer.fencing_token
        assert await client.lock("nested").try_run(work) > token
        held = await client.lock("nested").acquire()
        busy = await asyncio.create_task(client.lock("nested").try_run(work))
        assert busy is None
        await held.release()

    asyncio.run(main())


def test_an_async_guards_lost_is_an_asyncio_event(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        guard = await client.lock("gone", ttl=1.0).acquire()
        assert isinstance(guard.lost, asyncio.Event) and not guard.lost.is_set()
        await client.force_release("gone")
        await asyncio.wait_for(guard.lost.wait(), timeout=10)
        assert not guard.is_held() and not await guard.owned()
        with pytest.raises(redlease.Lost):
            await guard.release()
        await client.shutdown()

    asyncio.run(main())


class Stop(Exception):
    pass


def test_async_keep_leading_cancels_the_work_on_loss_and_campaigns_again(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        election = client.election("scheduler")
        terms, cancelled = [], []

        async def work(leadership):
            terms.append(leadership.term)
            if len(terms) == 1:
                await leadership.proclaim("scheduling")
                assert (await election.leader()).note == "scheduling"
            elif len(terms) == 2:
                # Deposed: the work is cancelled where it waits.
                assert redis_server.command("DEL", "redlease:scheduler") == ":1"
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.append(leadership.term)
                    raise
            elif len(terms) == 3:
                # A proclaim that finds the leadership gone: its Lost is the loss.
                assert redis_server.command("DEL", "redlease:scheduler") == ":1"
                await leadership.proclaim("too late")
            else:
                raise Stop("done")

        with pytest.raises(Stop):
            await asyncio.wait_for(election.keep_leading("host-a", work, ttl=2.0), 60)
        assert await election.leader() is None
        return terms, cancelled

    terms, cancelled = asyncio.run(main())
    assert terms == sorted(set(terms)) and len(terms) == 4
    assert cancelled == [terms[1]]


def test_cancelling_keep_leading_cancels_the_work_and_resigns(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        election = client.election("cancelled")
        leading = asyncio.Event()

        async def work(leadership):
            leading.set()
            await asyncio.sleep(60)

        task = asyncio.ensure_future(election.keep_leading("host-a", work))
        await asyncio.wait_for(leading.wait(), 30)
        assert (await election.leader()).note == "host-a"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await election.leader() is None

    asyncio.run(main())


def test_an_async_semaphore_resize_and_an_adopt_of_a_gone_lease(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        assert await client.resize_semaphore("pool", 1) is None
        held = await client.semaphore("pool", 1).acquire()
        waiter = asyncio.ensure_future(client.semaphore("pool", 1, wait=30.0).acquire())
        await asyncio.sleep(0.2)
        assert not waiter.done()
        assert await client.resize_semaphore("pool", 2) == 1
        second = await asyncio.wait_for(waiter, 30)
        await second.release()
        await held.release()
        with pytest.raises(redlease.InvalidOption):
            await client.resize_semaphore("pool", 0)

        guard = await client.lock("handed", ttl=5.0).acquire()
        handle = guard.detach()
        assert redis_server.command("DEL", "redlease:handed") == ":1"
        with pytest.raises(redlease.Lost, match="cannot be adopted: the handle's lease is gone"):
            await client.adopt(handle)

    asyncio.run(main())


def test_async_keep_leading_refuses_a_work_that_returns_no_awaitable(redis_server):
    async def main():
        client = await redlease.AsyncClient.connect(redis_server.url)
        election = client.election("mixed")
        with pytest.raises(TypeError):
            await election.keep_leading("host-a", lambda leadership: None)
        assert await election.leader() is None

    asyncio.run(main())
