//! A release sent while a planned `SENTINEL FAILOVER` is under way returns `Ok` when it
//! worked: the primary the sentinels elected answered it, and the `+switch-master` events
//! that made their majority name that primary are no reason to doubt the reply.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::bounded;
use futures_util::StreamExt as _;
use redlease::Client;
use redlease_local::{Reply, Sentinel};

/// How long after the failover began each round's release is sent.
const INTO_THE_FAILOVER: [Duration; 2] = [Duration::from_millis(150), Duration::from_millis(600)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_planned_failover_returns_ok() {
    let mut deployment =
        Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"));
    let client = bounded(
        "connect through sentinels",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    // One sentinel's events tell when the failover begins.
    let mut events = redis::Client::open(deployment.sentinel_urls()[0].as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    events
        .subscribe("+failover-state-send-slaveof-noone")
        .await
        .unwrap();
    for (round, delay) in INTO_THE_FAILOVER.into_iter().enumerate() {
        let lock = client
            .lock(format!("planned-failover-{round}"))
            .ttl(Duration::from_secs(30));
        let key = lock.keys().unwrap().key().to_owned();
        let guard = bounded("acquire", lock.acquire()).await.unwrap();
        let old = deployment.primary().unwrap().port();
        let master = deployment.master_name().to_owned();
        let reply = deployment.sentinels()[0]
            .query(&["SENTINEL", "FAILOVER", master.as_str()])
            .unwrap();
        assert!(
            matches!(&reply, Reply::Status(s) if s == "OK"),
            "SENTINEL FAILOVER: {reply:?}"
        );
        bounded("the failover to begin", events.on_message().next())
            .await
            .unwrap();
        tokio::time::sleep(delay).await;
        let released = bounded("the release", guard.release()).await;
        assert!(
            released.is_ok(),
            "round {round}: a release {delay:?} into the failover: {released:?}"
        );
        deployment = tokio::task::spawn_blocking(move || {
            let new = deployment
                .wait_for_new_primary(old, Duration::from_secs(30))
                .unwrap();
            deployment.wait_in_sync(Duration::from_secs(60)).unwrap();
            let mut conn = redis::Client::open(format!("redis://127.0.0.1:{new}"))
                .unwrap()
                .get_connection()
                .unwrap();
            let left: bool = redis::Commands::exists(&mut conn, &key).unwrap();
            assert!(
                !left,
                "round {round}: the lock is still held after its release"
            );
            deployment
        })
        .await
        .unwrap();
    }
    // The client goes on working on the new primary.
    let guard = bounded("acquire after", client.lock("after").acquire())
        .await
        .unwrap();
    guard.release().await.unwrap();
    drop(events);
    drop(deployment);
}
