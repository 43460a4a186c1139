//! A hand-off after the Sentinel primary was killed (SIGKILL) and replaced: the waiter, queued
//! before the crash, confirms the grant with an attempt of its own (Sentinel grants are not
//! trusted), and its guard is dated from that attempt, not from a busy reply it had long
//! before the hand-off. It claims a lease the new primary really holds for it.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, eventually};
use redis::AsyncCommands as _;
use redlease::{Client, Retry, Wait};

/// The waiter's lease.
const TTL: Duration = Duration::from_secs(6);
/// How long the holder keeps the lock once the waiter is queued on the new primary: more
/// than half the waiter's ttl, so that a lease dated from the waiter's last busy reply
/// would have less than half its ttl left when handed over.
const HOLD: Duration = Duration::from_millis(3500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_after_a_crashed_primary_is_dated_from_its_confirmation() {
    let (deployment, _holder, held, key, queue) = common::sentinel::held("crash-hand-off").await;
    let waiter = bounded(
        "connect the waiter",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    // Re-checks come from hand-offs and changes of the grant subscription only (never from
    // polling), so that the waiter's last busy attempt is the one right after its
    // subscription moved to the new primary.
    let waiting = waiter
        .lock("crash-hand-off")
        .ttl(TTL)
        .retry(Retry::new(Duration::from_secs(20), Duration::from_secs(20)))
        .wait(Wait::For(Duration::from_secs(60)));
    let waiting = tokio::spawn(async move { waiting.acquire().await });

    common::sentinel::queued(&deployment, &queue, 1).await;
    let (deployment, new) = common::sentinel::crash_primary(deployment).await;
    let primary = redis::Client::open(format!("redis://127.0.0.1:{new}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // The waiter's grant subscription moved to the new primary (the holder's client never
    // waited, so it has none), where its queue place was replicated.
    eventually("the waiter's grant subscription on the new primary", || {
        let mut primary = primary.clone();
        async move {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg("redlease:grant:*")
                .query_async(&mut primary)
                .await
                .unwrap();
            channels.len() == 1
        }
    })
    .await;
    let mut conn = primary.clone();
    assert_eq!(conn.llen::<_, i64>(&queue).await.unwrap(), 1);

    // The holder's work goes on for a while, then it hands the lock on.
    tokio::time::sleep(HOLD).await;
    bounded("the holder releases on the new primary", held.release())
        .await
        .unwrap();
    let guard = bounded("the waiter is handed the lock", waiting)
        .await
        .unwrap()
        .unwrap();
    let remaining = guard.remaining();
    assert!(guard.is_held(), "the waiter's guard is not held");
    assert!(
        remaining > TTL / 2,
        "the waiter's guard claims only {remaining:?} of its {TTL:?} lease: dated from before \
         the hand-off"
    );
    // Redis (the new primary) holds the lease the guard claims, for at least as long.
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    let inspection = bounded("inspect", waiter.inspect("crash-hand-off"))
        .await
        .unwrap();
    let holders = &inspection.snapshot.holders;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].fencing_token, Some(guard.fencing_token()));
    assert!(
        u128::try_from(pttl).unwrap() >= guard.remaining().as_millis(),
        "Redis holds the lease for {pttl} ms, the guard claims {:?}",
        guard.remaining()
    );
    guard.release().await.unwrap();
    drop(deployment);
}
