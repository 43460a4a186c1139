"""A holder whose lease is lost learns it: `lost` is set, `is_held()` turns false and
leaving the block raises `Lost`."""

import pytest

import redlease


def test_deleted_key_sets_lost_and_exit_raises(client, redis_server):
    with pytest.raises(redlease.Lost):
        with client.lock("doomed", ttl=1.5) as guard:
            assert guard.is_held()
            assert redis_server.command("DEL", "redlease:doomed") == ":1"
            # The next renewal (every ttl/3) finds the key gone.
            assert guard.lost.wait(timeout=10)
            assert not guard.is_held()


def test_redis_paused_past_the_lease_sets_lost(client, redis_server):
    guard = client.lock("paused", ttl=1.0).acquire()
    redis_server.pause()
    try:
        assert guard.lost.wait(timeout=10)
        assert not guard.is_held()
        assert guard.remaining == 0.0
    finally:
        redis_server.resume()
    with pytest.raises(redlease.Lost):
        guard.release()


def test_a_released_guard_is_not_lost(client):
    guard = client.lock("calm", ttl=1.0).acquire()
    guard.release()
    # Past the ttl: a lease given back is never reported lost.
    assert not guard.lost.wait(timeout=1.5)


def test_a_holder_paused_past_its_lease_is_refused_by_the_fenced_store(client, redis_server):
    store = redlease.FencedStore.connect(redis_server.url)
    stale = client.lock("stock", ttl=1.0).acquire()
    # The holder is "paused": its key is taken from it, and a new holder writes.
    redis_server.command("DEL", "redlease:stock")
    assert stale.lost.wait(timeout=10)
    with client.lock("stock", wait=5.0) as fresh:
        assert fresh.fencing_token > stale.fencing_token
        assert store.set("coupon:stock", 98, fresh.fencing_token) is None
    # The old holder wakes up and writes: refused, with the newer token.
    assert store.set("coupon:stock", b"99", stale.fencing_token) == fresh.fencing_token
    assert redis_server.command("GET", "coupon:stock") == "$2"
    # The same token again passes (one holder may write many times).
    assert store.set("coupon:stock", "97", fresh.fencing_token) is None
    with pytest.raises(redlease.Lost):
        stale.release()
