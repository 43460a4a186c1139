//! A 6-node Redis Cluster (3 primaries, 3 replicas): locks in many slots, exclusion, and a
//! slot migration under a held lock.
#![cfg(feature = "cluster")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::cluster::{cluster, connect};
use common::{bounded, eventually, no_polling};
use redlease::{Client, Error, Renewal};
use redlease_local::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_in_many_slots_exclude_and_fence() {
    let cluster = cluster();
    let client = connect(&cluster).await;
    let other = connect(&cluster).await;
    let mut slots = std::collections::HashSet::new();
    let mut owners = std::collections::HashSet::new();
    for i in 0..40 {
        let name = if i % 4 == 0 {
            format!("order:{{tenant-{i}}}:lock")
        } else {
            format!("lock-{i}")
        };
        let lock = client.lock(&name);
        let key = lock.keys().unwrap().key().to_owned();
        let slot = cluster.slot(&key).unwrap();
        slots.insert(slot);
        owners.insert(cluster.primary_for_slot(slot).unwrap());
        let guard = bounded("acquire", lock.acquire()).await.unwrap();
        let busy = bounded("try from another client", other.lock(&name).try_acquire())
            .await
            .unwrap();
        assert!(busy.is_none(), "two holders of {name}");
        let fence = guard.fencing_token();
        bounded("release", guard.release()).await.unwrap();
        let again = bounded("re-acquire", other.lock(&name).acquire())
            .await
            .unwrap();
        assert!(again.fencing_token() > fence);
        bounded("release", again.release()).await.unwrap();
    }
    assert!(slots.len() > 30, "only {} slots", slots.len());
    assert_eq!(owners.len(), 3, "locks did not spread over every primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_spans_slots() {
    let cluster = cluster();
    let client = connect(&cluster).await;
    let ttl = Duration::from_millis(600);
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(
            bounded(
                "acquire",
                client.lock(format!("renewed-{i}")).ttl(ttl).acquire(),
            )
            .await
            .unwrap(),
        );
    }
    let start = client.stats().renewal_round_trips;
    // Outlive the TTL several times over; a lease that was not renewed is reported lost.
    let all_lost = futures_util::future::select_all(guards.iter().map(|g| Box::pin(g.lost())));
    let outlived = tokio::time::timeout(ttl * 4, all_lost).await.is_err();
    assert!(outlived, "a lease in some slot was not renewed");
    assert!(client.stats().renewal_round_trips > start);
    for g in guards {
        assert!(g.is_held());
        bounded("release", g.release()).await.unwrap();
    }
}

/// Moving the lock's slot to another primary while the lock is held: the lock must either
/// stay held (the key moved with it) or be reported lost, never granted to a second holder
/// while the first still believes it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migration_mid_hold_keeps_the_lock_or_reports_lost() {
    let mut cluster = cluster();
    let client = connect(&cluster).await;
    let other = connect(&cluster).await;
    let lock = client
        .lock("migrating")
        .ttl(Duration::from_secs(30))
        .renewal(Renewal::Fixed);
    let key = lock.keys().unwrap().key().to_owned();
    let mut guard = bounded("acquire", lock.acquire()).await.unwrap();
    let slot = cluster.slot(&key).unwrap();
    let owner = cluster.primary_for_slot(slot).unwrap();
    cluster.migrate_slot(slot, (owner + 1) % 3).unwrap();
    assert_ne!(cluster.primary_for_slot(slot).unwrap(), owner);
    let contender = bounded("try after migration", other.lock("migrating").try_acquire())
        .await
        .unwrap();
    match bounded(
        "extend after migration",
        guard.extend(Duration::from_secs(30)),
    )
    .await
    {
        Ok(()) => assert!(
            contender.is_none(),
            "the lock was granted twice across a slot migration"
        ),
        Err(Error::Lost { .. }) => {}
        Err(e) => panic!("unexpected error after migration: {e:?}"),
    }
    drop(contender);
    bounded("release", guard.release()).await.unwrap();
}

/// Cluster semaphore waiters listen for the release notice (lock waiters are handed the
/// lock instead, see `cluster_sharded.rs`): a shard channel in the semaphore's slot,
/// subscribed on the primary that owns it and on no other node, on which the release
/// script `SPUBLISH`es. The waiter's back-off is far longer than its wait, so only the
/// notice can get it in. Abandoned waits leave no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_waiter_is_woken_by_the_release() {
    let cluster = cluster();
    let holder_client = connect(&cluster).await;
    let waiter_client = connect(&cluster).await;
    let keys = holder_client.semaphore("c-wake", 1).keys().unwrap();
    let channel = keys.channel().to_owned();
    let owner = cluster.primary_for_key(keys.key()).unwrap().port();
    let listening = |n: i64| {
        let channel = channel.clone();
        let cluster = &cluster;
        move || {
            let channel = channel.clone();
            async move {
                cluster.nodes().iter().all(|s| {
                    let expected = if s.port() == owner { n } else { 0 };
                    shard_subscribers(s, &channel) == expected
                })
            }
        }
    };
    for round in 0..3 {
        let holder = bounded(
            "acquire",
            holder_client
                .semaphore("c-wake", 1)
                .ttl(Duration::from_secs(60))
                .acquire(),
        )
        .await
        .unwrap();
        let waiter = {
            let semaphore = waiter_client
                .semaphore("c-wake", 1)
                .wait(Duration::from_secs(20))
                .retry(no_polling());
            tokio::spawn(async move { semaphore.acquire().await })
        };
        eventually("the waiter to listen", listening(1)).await;
        let released = holder.fencing_token();
        bounded("release", holder.release()).await.unwrap();
        let guard = bounded("the woken waiter", waiter)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(guard.fencing_token() > released);
        bounded("release", guard.release()).await.unwrap();
        eventually("the subscription to go", listening(0)).await;
    }
    let holder = bounded("acquire", holder_client.semaphore("c-wake", 1).acquire())
        .await
        .unwrap();
    let abandoned = {
        let semaphore = waiter_client
            .semaphore("c-wake", 1)
            .wait(Duration::from_secs(20));
        tokio::spawn(async move { semaphore.acquire().await })
    };
    eventually("the waiter to listen", listening(1)).await;
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    assert_eq!(waiter_client.stats().waiting, 0);
    eventually("the subscription to go", listening(0)).await;
    bounded("release", holder.release()).await.unwrap();
}

/// Subscribers of the shard channel `channel` on this one node (`PUBSUB SHARDNUMSUB`).
fn shard_subscribers(node: &redlease_local::RedisServer, channel: &str) -> i64 {
    let reply = node.query(&["PUBSUB", "SHARDNUMSUB", channel]).unwrap();
    reply
        .array()
        .and_then(|a| a.get(1))
        .and_then(redlease_local::Reply::integer)
        .unwrap_or_else(|| panic!("unexpected PUBSUB SHARDNUMSUB reply {reply:?}"))
}

/// A script missing on a healthy primary is loaded there only: a silent primary elsewhere
/// does not stall the locks of the others (redis-rs alone loads it on every primary and
/// waits for all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_primary_does_not_stall_the_others_when_scripts_are_not_cached() {
    let cluster = cluster();
    let response_timeout = Duration::from_secs(2);
    let client = bounded(
        "connect",
        Client::cluster_builder(cluster.urls())
            .response_timeout(response_timeout)
            .connect(),
    )
    .await
    .unwrap();
    let lock = client.lock("healthy-primary");
    let key = lock.keys().unwrap().key().to_owned();
    let home = cluster
        .primary_for_slot(cluster.slot(&key).unwrap())
        .unwrap();
    let silent = (home + 1) % cluster.primaries().len();
    let primaries = cluster.primaries();
    for (i, primary) in primaries.iter().enumerate() {
        if i != silent {
            assert_eq!(
                primary.query(&["SCRIPT", "FLUSH"]).unwrap(),
                redlease_local::Reply::Status("OK".into())
            );
        }
    }
    primaries[silent].pause().unwrap();
    let started = tokio::time::Instant::now();
    let taken = bounded("try_acquire with a primary silent", lock.try_acquire()).await;
    let acquired_in = started.elapsed();
    let released = match taken {
        Ok(Some(guard)) => bounded("release with a primary silent", guard.release()).await,
        other => {
            primaries[silent].resume().unwrap();
            panic!("expected the lock, got {other:?}");
        }
    };
    let took = started.elapsed();
    eprintln!("acquired in {acquired_in:?}, released by {took:?}");
    let left = primaries[home].query(&["EXISTS", &key]);
    primaries[silent].resume().unwrap();
    released.unwrap();
    assert!(
        acquired_in < response_timeout,
        "acquiring on a healthy primary took {acquired_in:?}, waiting for the silent one"
    );
    assert!(
        took < response_timeout,
        "acquiring and releasing on a healthy primary took {took:?}"
    );
    assert_eq!(
        left.unwrap(),
        redlease_local::Reply::Integer(0),
        "the release left the lock behind"
    );
}

/// Each primary's leases are renewed on their own: a silent primary neither delays the
/// renewal of leases on the healthy ones nor takes them down with its own, even with a
/// response timeout two thirds of the ttl (clamped for renewals to a third of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_primary_does_not_cost_the_healthy_ones_their_leases() {
    let cluster = Cluster::start_with(3, 0)
        .unwrap_or_else(|e| panic!("cannot start a cluster without replicas: {e}"));
    for node in cluster.nodes() {
        // The healthy primaries keep serving their slots while one is silent.
        assert_eq!(
            node.query(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])
                .unwrap(),
            redlease_local::Reply::Status("OK".into())
        );
    }
    let client = bounded(
        "connect",
        Client::cluster_builder(cluster.urls())
            .response_timeout(Duration::from_secs(2))
            .connect(),
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(3);
    let on_primary = |wanted: usize| {
        (0..10_000)
            .map(|i| format!("lease-{i}"))
            .find(|name| {
                let key = client.lock(name).keys().unwrap().key().to_owned();
                cluster
                    .primary_for_slot(cluster.slot(&key).unwrap())
                    .unwrap()
                    == wanted
            })
            .unwrap()
    };
    let (healthy, doomed) = (on_primary(0), on_primary(1));
    let healthy = bounded("acquire", client.lock(&healthy).ttl(ttl).acquire())
        .await
        .unwrap();
    let doomed = bounded("acquire", client.lock(&doomed).ttl(ttl).acquire())
        .await
        .unwrap();
    let silent = &cluster.primaries()[1];
    silent.pause().unwrap();
    let kept = tokio::time::timeout(ttl * 3, healthy.lost()).await.is_err();
    let doomed_held = doomed.is_held();
    silent.resume().unwrap();
    assert!(
        kept,
        "a lease on a healthy primary was lost while another primary was silent"
    );
    assert!(healthy.is_held());
    assert!(
        !doomed_held,
        "a lease on the silent primary was still believed held after 3 ttls"
    );
    bounded("release", healthy.release()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_the_apps_cluster_connection_locks_and_hands_off() {
    let cluster = cluster();
    let app_cluster = redlease::redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let connection = app_cluster.get_async_connection().await.unwrap();
    let mine = bounded(
        "connect on the app's connection",
        Client::cluster_from(cluster.urls(), connection).connect(),
    )
    .await
    .unwrap();
    let other = connect(&cluster).await;
    let guard = other.lock("app-conn").acquire().await.unwrap();
    let handed = common::handed_over(guard, &mine, "app-conn").await;
    assert!(handed.owned().await.unwrap());
    handed.release().await.unwrap();
}
