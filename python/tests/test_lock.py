"""The sync API: exclusion, fencing, the guard's surface, the other primitives."""

import datetime
import threading
import time

import pytest

import redlease
from conftest import in_thread


def test_threads_exclude_each_other_and_tokens_rise(client):
    inside = []
    overlaps = []
    tokens = []
    lock = threading.Lock()

    def worker():
        for _ in range(10):
            with client.lock("shared", ttl=5.0, wait=30.0) as guard:
                with lock:
                    if inside:
                        overlaps.append(guard.fencing_token)
                    inside.append(guard.fencing_token)
                    tokens.append(guard.fencing_token)
                # Other threads run here: the GIL is free while they wait in Redis.
                threading.Event().wait(0.001)
                with lock:
                    inside.remove(guard.fencing_token)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert len(tokens) == 40
    assert tokens == sorted(tokens) and len(set(tokens)) == 40


def test_guard_surface(client):
    with client.lock("surface", ttl=datetime.timedelta(seconds=5), wait=1) as guard:
        assert isinstance(guard.fencing_token, int)
        assert guard.is_held()
        assert 0 < guard.remaining <= 5
        guard.extend(20.0)
        assert guard.remaining > 5
        assert not guard.lost.is_set()
    assert not guard.is_held()
    assert guard.remaining == 0.0


def test_busy_lock_raises_timeout_after_the_wait(client):
    with client.lock("busy", wait=0):
        # Another thread is another owner (this one would re-enter).
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: client.lock("busy", wait=0.2).acquire())
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: client.lock("busy", wait=0).acquire())


def test_release_twice_and_extend_after_release(client):
    guard = client.lock("twice").acquire()
    guard.release()
    guard.release()
    with pytest.raises(redlease.Released):
        guard.extend(5.0)


def test_semaphore_gives_at_most_its_permits(client):
    a = client.semaphore("pool", 2).acquire()
    b = client.semaphore("pool", 2).acquire()
    with pytest.raises(redlease.Timeout):
        client.semaphore("pool", 2, wait=0).acquire()
    a.release()
    with client.semaphore("pool", 2, wait=1.0) as c:
        assert c.fencing_token > b.fencing_token
    b.release()


def test_rwlock_readers_share_and_writer_waits(client):
    rw = client.rwlock("doc")
    with rw.read() as r1:
        r2 = in_thread(lambda: rw.read(wait=0).acquire())
        assert r1.is_held() and r2.is_held()
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: rw.write(wait=0).acquire())
        r2.release()
    with rw.write(wait=1.0) as w:
        assert w.is_held()
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: rw.read(wait=0).acquire())


def test_multi_lock_holds_every_name(client):
    with client.multi_lock(["a", "b"]) as guard:
        assert sorted(name for name, _ in guard.fencing_tokens) == ["a", "b"]
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: client.lock("b", wait=0).acquire())
    with client.lock("b", wait=0):
        pass


def test_election_campaign_leader_resign(client):
    election = client.election("primary")
    assert election.leader() is None
    changes = election.observe()
    assert next(changes) is None
    leadership = election.campaign("node-1")
    leader = election.leader()
    assert leader.note == "node-1" and leader.term == leadership.term
    seen = next(changes)
    assert seen is not None and seen.note == "node-1"
    leadership.resign()
    assert election.leader() is None


def test_a_leader_proclaims_a_new_note_in_its_term(client):
    election = client.election("announced")
    changes = election.observe()
    assert next(changes) is None
    leadership = election.campaign("warming up")
    assert next(changes).note == "warming up"
    leadership.proclaim("serving on :8080")
    leader = election.leader()
    assert (leader.note, leader.term) == ("serving on :8080", leadership.term)
    seen = next(changes)
    assert (seen.note, seen.term) == ("serving on :8080", leadership.term)
    with client.lock("not-a-leadership") as guard:
        with pytest.raises(redlease.Unsupported):
            guard.proclaim("x")
    leadership.resign()
    with pytest.raises(redlease.Released):
        leadership.proclaim("after resigning")


class Interrupted(Exception):
    pass


def test_a_signal_handler_interrupts_a_blocked_wait(client):
    import signal

    def interrupt(signum, frame):
        raise Interrupted()

    holder = in_thread(lambda: client.lock("sig", wait=0).acquire())
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            client.lock("sig", wait=None).acquire()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    holder.release()
    # The interrupted waiter's place is withdrawn in the background; a release that came
    # first handed it the lock, which its give-back hands on: nobody keeps it for a ttl.
    with client.lock("sig", wait=5.0):
        pass


def test_a_semaphore_gives_several_permits_as_one_lease(client):
    two = client.semaphore("many", 3, take=2).acquire()
    with pytest.raises(redlease.Timeout):
        client.semaphore("many", 3, wait=0, take=2).acquire()
    with client.semaphore("many", 3, wait=0) as one:
        assert one.fencing_token > two.fencing_token
    two.release()
    with client.semaphore("many", 3, wait=0, take=3) as three:
        assert three.is_held()


def test_a_request_for_several_permits_is_not_starved_by_smaller_ones(client):
    held = client.semaphore("fair", 3, take=2).acquire()
    outcome = []
    big = threading.Thread(target=lambda: outcome.append(
        client.semaphore("fair", 3, wait=30.0, take=2).acquire()))
    big.start()
    # The request for 2 queues at the head (1 permit is free, it needs 2).
    deadline = time.monotonic() + 30
    while True:
        try:
            probe = client.semaphore("fair", 3, wait=0).acquire()
        except redlease.Timeout:
            break  # the free permit is kept for the head of the queue
        probe.release()
        assert time.monotonic() < deadline, "the request for 2 never queued"
        time.sleep(0.01)
    held.release()
    big.join(timeout=30)
    assert outcome and outcome[0].is_held()
    outcome[0].release()


def test_a_request_for_no_permits_or_too_many_is_refused(client):
    with pytest.raises(redlease.InvalidOption):
        client.semaphore("bad-take", 3, take=0)
    with pytest.raises(redlease.InvalidOption):
        client.semaphore("bad-take", 3, take=4).acquire()


def test_a_thread_re_enters_its_lock_and_gives_it_back_with_the_outer_guard(client, redis_server):
    with client.lock("again") as outer:
        with client.lock("again", wait=0) as inner:
            assert inner.fencing_token == outer.fencing_token
        # The nested guard's end does not give the lock back.
        assert outer.is_held() and outer.owned()
        with pytest.raises(redlease.Timeout):
            in_thread(lambda: client.lock("again", wait=0).acquire())
    assert redis_server.command("EXISTS", "redlease:again") == ":0"
    # A semaphore's permits are not re-entered: each acquisition is a permit of its own.
    a = client.semaphore("seats", 2).acquire()
    b = client.semaphore("seats", 2).acquire()
    assert b.fencing_token > a.fencing_token
    with pytest.raises(redlease.Timeout):
        client.semaphore("seats", 2, wait=0).acquire()
    a.release()
    b.release()


def test_names_and_ttls_are_checked_when_the_acquisition_is_made(client):
    with pytest.raises(redlease.InvalidName):
        client.lock("")
    with pytest.raises(redlease.InvalidName):
        client.multi_lock([])
    with pytest.raises(redlease.InvalidOption):
        client.lock("x", ttl=0)
    with pytest.raises(redlease.InvalidOption):
        client.semaphore("x", 2, ttl=datetime.timedelta(days=31))
    with pytest.raises(redlease.InvalidOption):
        client.lock("x", max_hold=-1.0)


def test_a_detached_lease_is_adopted_by_another_client(client, redis_server):
    guard = client.lock("handed", ttl=5.0).acquire()
    token = guard.fencing_token
    handle = guard.detach()
    assert not guard.is_held()
    other = redlease.Client.connect(redis_server.url)
    adopted = other.adopt(handle)
    assert adopted.fencing_token == token and adopted.owned()
    adopted.release()
    assert redis_server.command("EXISTS", "redlease:handed") == ":0"
    with pytest.raises(redlease.Lost, match="cannot be adopted: the handle's lease is gone"):
        other.adopt(handle)


def test_inspect_and_force_release(client):
    assert client.inspect("seen")["held"] is False
    guard = client.lock("seen", ttl=5.0).acquire()
    seen = client.inspect("seen")
    assert seen["held"] and seen["primitive"] == "lock"
    assert seen["holders"][0]["fencing_token"] == guard.fencing_token
    forced = client.force_release("seen")
    assert forced["holders"][0]["fencing_token"] == guard.fencing_token
    assert not guard.owned()
    assert client.inspect("seen")["held"] is False
    assert redlease.__version__
    assert client.stats().waiting == 0


def test_an_unrenewed_lease_ends_by_itself_and_a_budget_stops_renewal(client, redis_server):
    fixed = client.lock("fixed", ttl=0.3, renew=False).acquire()
    budget = client.lock("budget", ttl=0.3, max_hold=0.1).acquire()
    deadline = time.monotonic() + 10
    while redis_server.command("EXISTS", "redlease:fixed") == ":1" or \
            redis_server.command("EXISTS", "redlease:budget") == ":1":
        assert time.monotonic() < deadline, "a lease nobody renews never ended"
        time.sleep(0.01)
    # A renewed lease of the same ttl is still held (renewed every ttl/4).
    with client.lock("renewed", ttl=0.3) as renewed:
        assert renewed.owned()
        time.sleep(0.6)  # two ttls: only renewal keeps it
        assert renewed.owned()
    assert not fixed.is_held() and not budget.is_held()


class Stop(Exception):
    pass


def test_keep_leading_campaigns_again_until_the_work_raises(client, redis_server, caplog):
    election = client.election("scheduler")
    terms, notes = [], []

    def work(leadership):
        terms.append(leadership.term)
        round = len(terms)
        if round == 1:
            # Proclaiming from inside the work; returning campaigns again.
            leadership.proclaim("scheduling")
            notes.append(election.leader().note)
        elif round == 2:
            # Deposed (the key deleted): the work sees `lost` and returns.
            assert redis_server.command("DEL", "redlease:scheduler") == ":1"
            assert leadership.lost.wait(30.0), "the loss was never noticed"
        elif round == 3:
            # Deposed again: a proclaim that finds it gone raises Lost, which is the loss.
            assert redis_server.command("DEL", "redlease:scheduler") == ":1"
            leadership.proclaim("too late")
        else:
            notes.append(election.leader().note)
            raise Stop("done")

    with pytest.raises(Stop):
        election.keep_leading("host-a", work, ttl=2.0)
    assert notes == ["scheduling", "host-a"]
    assert terms == sorted(set(terms)) and len(terms) == 4
    # It resigned before raising the work's exception.
    assert election.leader() is None
    lost = [r.getMessage() for r in caplog.records if r.name == "redlease"]
    assert lost == [f"leadership of election `scheduler` lost in term {term}; campaigning again"
                    for term in terms[1:3]]


def test_keep_leading_ends_with_a_lost_that_is_not_its_own(client):
    election = client.election("picky")

    def work(leadership):
        raise redlease.Lost("another lease's")

    with pytest.raises(redlease.Lost, match="another lease's"):
        election.keep_leading("host-a", work)
    assert election.leader() is None


def test_a_semaphore_is_resized_while_held(client):
    assert client.resize_semaphore("pool", 2) is None
    first = client.semaphore("pool", 2).acquire()
    client.semaphore("pool", 2).acquire().release()
    second = client.semaphore("pool", 2).acquire()
    waiter = threading.Thread(target=lambda: client.semaphore("pool", 2, wait=30.0).acquire().release())
    waiter.start()
    assert client.resize_semaphore("pool", 3) == 2  # the new permit goes to the waiter
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    # A caller still configured with the old count acquires against the stored one.
    with client.semaphore("pool", 2, wait=0):
        assert client.inspect("pool")["permits"] == 3
    assert client.resize_semaphore("pool", 1) == 3  # lowered: nobody is revoked
    assert first.is_held() and second.owned()
    with pytest.raises(redlease.Timeout):
        client.semaphore("pool", 3, wait=0).acquire()
    first.release()
    second.release()
    with pytest.raises(redlease.InvalidOption):
        client.resize_semaphore("pool", 0)
    with pytest.raises(redlease.InvalidOption):
        client.resize_semaphore("pool", -1)
    with pytest.raises(TypeError):
        client.resize_semaphore("pool", 2.5)
    with client.lock("a-lock"):
        with pytest.raises(redlease.WrongType):
            client.resize_semaphore("a-lock", 2)


def test_keep_leading_refuses_an_async_work(client):
    election = client.election("mixed")

    async def work(leadership):
        pass

    with pytest.raises(TypeError, match="AsyncClient"):
        election.keep_leading("host-a", work)
    assert election.leader() is None
