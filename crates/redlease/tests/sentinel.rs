//! A Sentinel-managed primary with 2 replicas and 3 sentinels: `redis+sentinel://`, a
//! failover while holding with `min_replicas`, and `WAIT` refusing an unreplicated lock.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::bounded;
use redis::AsyncCommands as _;
use redlease::{Client, Error};
use redlease_local::Sentinel;

fn sentinel() -> Sentinel {
    Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"))
}

async fn get(url: &str, key: &str) -> Option<String> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    conn.get(key).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_with_min_replicas_survives_a_failover() {
    let mut deployment = sentinel();
    let client = bounded(
        "connect through sentinels",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let lock = client
        .lock("failover")
        .min_replicas(1, Duration::from_secs(5));
    let key = lock.keys().unwrap().key().to_owned();
    let mut guard = bounded("acquire", lock.acquire()).await.unwrap();
    let token = get(&deployment.primary().unwrap().url(), &key).await;
    assert!(token.is_some());
    let new_port = deployment.failover().unwrap();
    let new_primary = format!("redis://127.0.0.1:{new_port}");
    assert_eq!(
        get(&new_primary, &key).await,
        token,
        "the new primary does not hold the lock"
    );
    // Until the sentinels have turned the old primary into a replica, it still accepts
    // writes from clients connected to it (the failover window Lock::min_replicas
    // describes). Once it has, the client follows the new primary: renewing and
    // releasing still work and find our token there.
    deployment.wait_in_sync(Duration::from_secs(60)).unwrap();
    bounded(
        "extend after failover",
        guard.extend(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let fence = guard.fencing_token();
    bounded("release after failover", guard.release())
        .await
        .unwrap();
    assert_eq!(get(&new_primary, &key).await, None);
    let again = bounded("acquire on the new primary", lock.acquire())
        .await
        .unwrap();
    assert!(again.fencing_token() > fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_waits_longer_than_one_response_timeout() {
    let deployment = sentinel();
    let client = bounded(
        "connect through sentinels",
        Client::sentinel_builder(deployment.sentinel_urls(), deployment.master_name())
            .response_timeout(Duration::from_millis(200))
            .connect(),
    )
    .await
    .unwrap();
    let replicas = deployment.replicas().unwrap();
    for r in &replicas {
        r.pause().unwrap();
    }
    let lock = client
        .lock("slow-replicas")
        .min_replicas(1, Duration::from_secs(60));
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    // The fault: replicas silent for five response timeouts. A single WAIT would have
    // its reply cut off by the response timeout long before they answer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for r in &replicas {
        r.resume().unwrap();
    }
    let guard = bounded("acquire once the replicas are back", acquiring)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_refuses_a_lock_no_replica_acknowledged() {
    let deployment = sentinel();
    let client = bounded(
        "connect through sentinels",
        Client::sentinel(deployment.sentinel_urls(), deployment.master_name()),
    )
    .await
    .unwrap();
    let lock = client
        .lock("unreplicated")
        .min_replicas(1, Duration::from_millis(300));
    let key = lock.keys().unwrap().key().to_owned();
    let replicas = deployment.replicas().unwrap();
    for r in &replicas {
        r.pause().unwrap();
    }
    let outcome = bounded("acquire with replicas paused", lock.acquire()).await;
    for r in &replicas {
        r.resume().unwrap();
    }
    match outcome {
        Err(Error::Replication {
            acked: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("expected a Replication error, got {other:?}"),
    }
    assert_eq!(
        get(&deployment.primary().unwrap().url(), &key).await,
        None,
        "the refused lock was not given back"
    );
    // Without min_replicas the same acquisition succeeds: a failover before the replicas
    // caught up could then lose it (see Lock::min_replicas).
    let guard = bounded(
        "acquire without min_replicas",
        client.lock("unreplicated").acquire(),
    )
    .await
    .unwrap();
    guard.release().await.unwrap();
}

/// The outcome a crashed primary must have; the race in which the client's old
/// connection reconnected by itself to the restarted server first is shown by the chaos
/// suite's row "sentinel primary SIGKILL" (this test does not win that race on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_primary_restarted_empty_is_not_used_again() {
    let mut deployment = sentinel();
    let client = bounded(
        "connect through sentinels",
        Client::sentinel_builder(deployment.sentinel_urls(), deployment.master_name())
            .response_timeout(Duration::from_millis(300))
            .connect(),
    )
    .await
    .unwrap();
    let first = bounded("acquire before the crash", client.lock("before").acquire())
        .await
        .unwrap();
    let (old, dead) = common::sentinel::kill_primary(&mut deployment);
    // The client notices while the sentinels still name the dead primary.
    let err = bounded(
        "try_acquire while the primary is down",
        client.lock("during").try_acquire(),
    )
    .await
    .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let new = deployment
        .wait_for_new_primary(old, Duration::from_secs(60))
        .unwrap();
    // Restarted without its data, the old server answers as a primary until the
    // sentinels turn it into a replica.
    deployment.servers_mut()[dead].restart().unwrap();
    let lock = client.lock("after");
    let key = lock.keys().unwrap().key().to_owned();
    let guard = bounded("acquire after the failover", lock.acquire())
        .await
        .unwrap();
    assert!(
        get(&format!("redis://127.0.0.1:{new}"), &key)
            .await
            .is_some(),
        "the lock is not on the primary the sentinels promoted"
    );
    guard.release().await.unwrap();
    drop(first);
}
