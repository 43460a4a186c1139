//! `Client::inspect` against every primitive on real servers: holders with their details,
//! time left and fencing tokens, waiters with how long they have waited, the fencing
//! counter; a quorum node by node; an operator's read-only ACL user; and
//! `Client::force_release`.
#![allow(clippy::unwrap_used, clippy::panic, reason = "a test")]

mod common;

use std::time::Duration;

use redlease::{Access, Client, Error, Inspection, LockKeys, Primitive, Wait};
use redlease_local::RedisServer;

use common::{bounded, raw, server};

const TTL: Duration = Duration::from_secs(30);

/// A client whose holders record `note` in their details.
async fn noted(server: &RedisServer, note: &str) -> Client {
    Client::builder(&server.url())
        .holder_note(note)
        .connect()
        .await
        .unwrap()
}

/// An operator's client (every permission: the tests may run under the library's own
/// least-privilege ACL, which has no `TYPE` or `LRANGE`).
async fn operator(server: &RedisServer) -> Client {
    Client::connect(&server.admin_url()).await.unwrap()
}

/// Inspects `name` until `done` holds (a waiter queues in the background).
async fn inspect_until(
    client: &Client,
    name: &str,
    what: &str,
    done: impl Fn(&Inspection) -> bool,
) -> Inspection {
    bounded(what, async {
        loop {
            let inspection = client.inspect(name).await.unwrap();
            if done(&inspection) {
                return inspection;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_held_lock_shows_its_holder_and_its_queued_waiters_with_how_long_they_waited() {
    let server = server();
    let (a, b, ops) = (
        noted(&server, "job=a").await,
        noted(&server, "job=b").await,
        operator(&server).await,
    );
    let guard = a.lock("inspect-lock").ttl(TTL).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("inspect-lock")
                .ttl(TTL)
                .wait(Wait::For(TTL))
                .acquire()
                .await
        }
    });
    let seen = inspect_until(&ops, "inspect-lock", "the waiter queued", |i| {
        i.snapshot
            .waiters
            .first()
            .and_then(|w| w.waited)
            .is_some_and(|w| w >= Duration::from_millis(20))
    })
    .await;
    assert_eq!(seen.key, "redlease:inspect-lock");
    assert!(seen.is_held() && seen.nodes.is_empty(), "{seen:?}");
    let state = &seen.snapshot;
    assert_eq!(state.primitive, Some(Primitive::Lock));
    let [holder] = state.holders.as_slice() else {
        panic!("one holder expected: {state:?}")
    };
    assert_eq!(holder.token_prefix.len(), 8, "{holder:?}");
    assert_eq!(holder.fencing_token, Some(guard.fencing_token()));
    assert_eq!(state.fencing_counter, Some(guard.fencing_token()));
    let left = holder.remaining.unwrap();
    assert!(left > Duration::ZERO && left <= TTL, "{left:?}");
    assert!(
        holder.details.as_deref().unwrap().ends_with("job=a"),
        "{holder:?}"
    );
    let [waiting] = state.waiters.as_slice() else {
        panic!("one waiter expected: {state:?}")
    };
    assert!(
        waiting.details.as_deref().unwrap().ends_with("job=b"),
        "{waiting:?}"
    );
    assert!(waiting.waited.unwrap() < TTL, "{waiting:?}");
    assert_ne!(waiting.token_prefix, holder.token_prefix);
    assert_eq!(waiting.access, None);

    // A waiter that comes back keeps its place and its age: ages only grow.
    let before = waiting.waited.unwrap();
    let later = inspect_until(&ops, "inspect-lock", "the wait to grow", |i| {
        i.snapshot.waiters.first().and_then(|w| w.waited) > Some(before)
    })
    .await;
    assert_eq!(later.snapshot.waiters.len(), 1);

    guard.release().await.unwrap();
    let taken = bounded("the hand-off", waiter).await.unwrap().unwrap();
    let taken_fence = taken.fencing_token();
    let after = ops.inspect("inspect-lock").await.unwrap().snapshot;
    assert!(after.waiters.is_empty(), "{after:?}");
    assert_eq!(after.holders[0].fencing_token, Some(taken.fencing_token()));
    assert!(
        after.holders[0]
            .details
            .as_deref()
            .unwrap()
            .ends_with("job=b")
    );
    taken.release().await.unwrap();

    // Free: no holder, the counter stays.
    let free = ops.inspect("inspect-lock").await.unwrap();
    assert!(!free.is_held());
    assert_eq!(free.snapshot.primitive, None);
    assert_eq!(free.snapshot.fencing_counter, Some(taken_fence));
}

#[tokio::test]
async fn a_semaphore_shows_each_permit_and_its_waiters() {
    let server = server();
    let (a, ops) = (noted(&server, "pool=a").await, operator(&server).await);
    let pool = a.semaphore("inspect-pool", 2).ttl(TTL);
    let (one, two) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let third = tokio::spawn({
        let pool = pool.clone().wait(Wait::For(TTL));
        async move { pool.acquire().await }
    });
    let seen = inspect_until(&ops, "inspect-pool", "the third queued", |i| {
        !i.snapshot.waiters.is_empty()
    })
    .await;
    let state = &seen.snapshot;
    assert_eq!(state.primitive, Some(Primitive::Semaphore));
    assert_eq!(state.permits, Some(2));
    assert_eq!(state.access, None);
    let mut fences: Vec<_> = state.holders.iter().map(|h| h.fencing_token).collect();
    fences.sort();
    assert_eq!(
        fences,
        vec![Some(one.fencing_token()), Some(two.fencing_token())]
    );
    for holder in &state.holders {
        assert!(holder.details.as_deref().unwrap().ends_with("pool=a"));
        assert!(holder.remaining.unwrap() <= TTL);
    }
    assert_eq!(state.waiters.len(), 1);
    assert!(state.waiters[0].waited.is_some(), "{state:?}");
    assert_eq!(state.fencing_counter, Some(two.fencing_token()));

    one.release().await.unwrap();
    let got = bounded("the hand-off", third).await.unwrap().unwrap();
    let after = ops.inspect("inspect-pool").await.unwrap().snapshot;
    assert_eq!(after.holders.len(), 2);
    assert!(after.waiters.is_empty());
    got.release().await.unwrap();
    two.release().await.unwrap();
    assert!(!ops.inspect("inspect-pool").await.unwrap().is_held());
}

#[tokio::test]
async fn a_latch_shows_each_outstanding_count() {
    let server = server();
    let (a, ops) = (noted(&server, "party=a").await, operator(&server).await);
    let latch = a.latch("inspect-latch").ttl(TTL);
    let (one, two) = (
        latch.count_up().await.unwrap(),
        latch.count_up().await.unwrap(),
    );
    let state = ops.inspect("inspect-latch").await.unwrap().snapshot;
    assert_eq!(state.primitive, Some(Primitive::Latch), "{state:?}");
    let mut fences: Vec<_> = state.holders.iter().map(|h| h.fencing_token).collect();
    fences.sort();
    assert_eq!(
        fences,
        vec![
            Some(one.guard().fencing_token()),
            Some(two.guard().fencing_token())
        ]
    );
    for holder in &state.holders {
        assert!(holder.details.as_deref().unwrap().ends_with("party=a"));
        assert!(holder.remaining.unwrap() <= TTL);
    }
    one.count_down().await.unwrap();
    two.count_down().await.unwrap();
    assert!(!ops.inspect("inspect-latch").await.unwrap().is_held());
}

#[tokio::test]
async fn a_read_write_lock_shows_its_mode_and_what_each_waiter_wants() {
    let server = server();
    let (a, ops) = (noted(&server, "rw=a").await, operator(&server).await);
    let lock = a.rwlock("inspect-rw");
    let readers = [
        lock.read().ttl(TTL).acquire().await.unwrap(),
        lock.read().ttl(TTL).acquire().await.unwrap(),
    ];
    let writer = tokio::spawn({
        let write = lock.write().ttl(TTL).wait(Wait::For(TTL));
        async move { write.acquire().await }
    });
    let seen = inspect_until(&ops, "inspect-rw", "the writer queued", |i| {
        !i.snapshot.waiters.is_empty()
    })
    .await;
    let state = &seen.snapshot;
    assert_eq!(state.primitive, Some(Primitive::RwLock));
    assert_eq!(state.access, Some(Access::Read));
    assert_eq!(state.holders.len(), 2);
    assert_eq!(state.waiters[0].access, Some(Access::Write));
    assert!(state.waiters[0].waited.is_some());

    for reader in readers {
        reader.release().await.unwrap();
    }
    let held = bounded("the writer's turn", writer).await.unwrap().unwrap();
    let after = ops.inspect("inspect-rw").await.unwrap().snapshot;
    assert_eq!(after.access, Some(Access::Write));
    assert_eq!(after.holders[0].fencing_token, Some(held.fencing_token()));
    assert!(after.waiters.is_empty());
    held.release().await.unwrap();
}

#[tokio::test]
async fn an_election_and_a_multi_lock_show_as_the_locks_they_hold() {
    let server = server();
    let (a, ops) = (common::client(&server).await, operator(&server).await);
    let leading = a
        .election("inspect-leader")
        .campaign("replica-7")
        .await
        .unwrap();
    let state = ops.inspect("inspect-leader").await.unwrap().snapshot;
    assert_eq!(state.primitive, Some(Primitive::Lock));
    assert_eq!(state.holders[0].fencing_token, Some(leading.term()));
    assert_eq!(state.holders[0].details.as_deref(), Some("replica-7"));
    leading.resign().await.unwrap();

    let both = a
        .multi_lock(["inspect-a", "inspect-b"])
        .acquire()
        .await
        .unwrap();
    for name in ["inspect-a", "inspect-b"] {
        let state = ops.inspect(name).await.unwrap().snapshot;
        assert_eq!(state.holders[0].fencing_token, both.fencing_token(name));
    }
    let a_holder = &ops.inspect("inspect-a").await.unwrap().snapshot.holders[0];
    let b_holder = &ops.inspect("inspect-b").await.unwrap().snapshot.holders[0];
    assert_eq!(a_holder.token_prefix, b_holder.token_prefix, "one owner");
    both.release().await.unwrap();
}

#[tokio::test]
async fn bad_names_and_foreign_keys_get_clear_errors() {
    let server = server();
    let ops = operator(&server).await;
    assert!(matches!(
        ops.inspect("").await,
        Err(Error::InvalidName { .. })
    ));
    let mut conn = raw(&server).await;
    redis::cmd("RPUSH")
        .arg("redlease:a-list")
        .arg("x")
        .exec_async(&mut conn)
        .await
        .unwrap();
    let err = ops.inspect("a-list").await.unwrap_err();
    assert!(
        matches!(err, Error::WrongType { ref key, .. } if key == "redlease:a-list"),
        "{err}"
    );
    // A name nothing ever took: free, no counter. (Spawned: the future is `Send`.)
    let never = tokio::spawn(async move { ops.inspect("never-taken").await })
        .await
        .unwrap()
        .unwrap()
        .snapshot;
    assert_eq!(never, redlease::Snapshot::default());
}

#[tokio::test]
async fn a_forced_release_removes_the_holds_and_keeps_the_counter_and_the_queue() {
    let server = server();
    let (a, b, ops) = (
        common::client(&server).await,
        common::client(&server).await,
        operator(&server).await,
    );
    let guard = a.lock("inspect-force").ttl(TTL).acquire().await.unwrap();
    let keys = LockKeys::new(redlease::DEFAULT_PREFIX, "inspect-force").unwrap();
    let removed = ops.force_release_keys(&keys).await.unwrap();
    assert_eq!(
        removed.snapshot.holders[0].fencing_token,
        Some(guard.fencing_token())
    );
    let after = ops.inspect("inspect-force").await.unwrap().snapshot;
    assert!(!after.is_held());
    assert_eq!(after.fencing_counter, Some(guard.fencing_token()));
    // Someone else takes it at once, with a larger token.
    let next = b
        .lock("inspect-force")
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    next.release().await.unwrap();
    drop(guard);

    let pool = a.semaphore("inspect-force-pool", 1).ttl(TTL);
    let permit = pool.acquire().await.unwrap();
    let keys = LockKeys::of(
        redlease::DEFAULT_PREFIX,
        "inspect-force-pool",
        Primitive::Semaphore,
    )
    .unwrap();
    let removed = ops.force_release_keys(&keys).await.unwrap().snapshot;
    assert_eq!(removed.holders.len(), 1);
    assert_eq!(removed.permits, Some(1));
    let again = b
        .semaphore("inspect-force-pool", 1)
        .try_acquire()
        .await
        .unwrap();
    assert!(again.is_some(), "the permit is free after a forced release");
    drop((permit, again));
}

#[tokio::test]
async fn an_operator_with_only_read_commands_can_inspect() {
    let rules = [
        "resetkeys",
        "~redlease:*",
        "~{redlease:*",
        "resetchannels",
        "-@all",
        "+ping",
        "+type",
        "+get",
        "+pttl",
        "+time",
        "+lrange",
        "+hget",
        "+hgetall",
        "+zrange",
    ];
    let server = common::acl::acl_server(&rules);
    let mut admin = common::acl::admin(&server).await;
    redis::cmd("SET")
        .arg("redlease:read-only")
        .arg("0123456789abcdef0123456789abcdef")
        .arg("PX")
        .arg(60_000)
        .exec_async(&mut admin)
        .await
        .unwrap();
    let reader = Client::connect(&common::acl::url(&server)).await.unwrap();
    let state = reader.inspect("read-only").await.unwrap().snapshot;
    assert_eq!(state.holders[0].token_prefix, "01234567");

    // Without one of them, the error names the command refused.
    let server = common::acl::acl_server(&rules[..rules.len() - 2]);
    let reader = Client::connect(&common::acl::url(&server)).await.unwrap();
    let err = reader.inspect("read-only").await.unwrap_err();
    let text = format!("{err} {}", std::error::Error::source(&err).unwrap());
    assert!(text.contains("hgetall"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quorum_is_shown_node_by_node_with_what_a_majority_agrees_on() {
    let (mut nodes, client) = common::quorum_of_three().await;
    let guard = client
        .lock("inspect-quorum")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    // The acquisition returns once a majority granted; the last node's grant may still be
    // on its way (it completes in the background).
    common::eventually("every node shows the lock", || async {
        let seen = client.inspect("inspect-quorum").await.unwrap();
        seen.nodes
            .iter()
            .all(|n| n.snapshot.as_ref().is_ok_and(redlease::Snapshot::is_held))
    })
    .await;
    let seen = client.inspect("inspect-quorum").await.unwrap();
    assert_eq!(seen.nodes.len(), 3);
    assert!(seen.is_held());
    assert_eq!(
        seen.snapshot.holders[0].fencing_token,
        Some(guard.fencing_token())
    );
    for node in &seen.nodes {
        assert!(node.snapshot.as_ref().unwrap().is_held(), "{node:?}");
    }

    nodes.servers_mut()[0].kill();
    let seen = client.inspect("inspect-quorum").await.unwrap();
    assert!(seen.is_held(), "two of three still hold it");
    assert!(seen.nodes[0].snapshot.is_err());

    nodes.servers_mut()[1].kill();
    let err = client.inspect("inspect-quorum").await.unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    drop(guard);
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_is_read_where_the_name_lives() {
    let cluster = common::cluster::cluster();
    let client = common::cluster::connect(&cluster).await;
    let mut guards = Vec::new();
    // Names in several slots, on several primaries.
    for i in 0..6 {
        let name = format!("inspect-cluster-{i}");
        guards.push((
            name.clone(),
            client.lock(name).ttl(TTL).acquire().await.unwrap(),
        ));
    }
    for (name, guard) in &guards {
        let state = client.inspect(name).await.unwrap().snapshot;
        assert_eq!(
            state.holders[0].fencing_token,
            Some(guard.fencing_token()),
            "{name}"
        );
    }
    let pool = client.semaphore("inspect-cluster-pool", 3).ttl(TTL);
    let permit = pool.acquire().await.unwrap();
    let state = client
        .inspect("inspect-cluster-pool")
        .await
        .unwrap()
        .snapshot;
    assert_eq!(state.permits, Some(3));
    assert_eq!(state.holders.len(), 1);
    permit.release().await.unwrap();
    for (_, guard) in guards {
        guard.release().await.unwrap();
    }
}

/// A lock removed by force goes to its oldest queued waiter at once: the waiter, which
/// sends nothing while the lock is held, would otherwise come back only when the removed
/// holder's lease would have ended (a minute here, beyond the test's step bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_removed_by_force_goes_to_its_oldest_waiter_at_once() {
    let server = server();
    let holder = common::client(&server).await;
    let waiter = common::client(&server).await;
    let ops = common::client(&server).await;
    let held = holder
        .lock("forced-queue")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let keys = holder.lock("forced-queue").keys().unwrap();
    let waits = tokio::spawn(async move {
        waiter
            .lock("forced-queue")
            .wait(Duration::from_secs(120))
            .acquire()
            .await
    });
    common::queued_places(&server, &keys, 1).await;
    let removed = ops.force_release("forced-queue").await.unwrap().snapshot;
    assert_eq!(removed.holders.len(), 1);
    let guard = bounded("the waiter's turn", waits).await.unwrap().unwrap();
    assert!(guard.fencing_token() > held.fencing_token());
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
