//! A hold that outlives its fencing counter (which a grant keeps an hour past the clock by
//! default, and an operator may delete): the holder's token is recorded with the lease itself, so
//! `leader()`, `observe()`, `inspect` and the next grant stay right.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use futures_util::StreamExt as _;

/// The counter deleted while a leader leads (as its expiry would after the keep):
/// before, `leader()` and `observe()` reported term 0 and `inspect` no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_its_term_when_the_counter_is_gone() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("weeks");
    let leadership = bounded("campaign", election.campaign("the leader"))
        .await
        .unwrap();
    let term = leadership.term();
    let mut conn = raw(&server).await;
    let fence_key = election.keys().unwrap().fence().to_owned();
    let deleted: i64 = redis::cmd("DEL")
        .arg(&fence_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1, "no counter at {fence_key}");

    let leader = bounded("leader", election.leader()).await.unwrap().unwrap();
    assert_eq!(leader.term, term, "leader() after the counter went");
    assert_eq!(leader.note, "the leader");

    let mut changes = election.observe();
    let seen = bounded("observe", changes.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.term, term, "observe() after the counter went");
    assert_eq!(seen.note, "the leader");

    let inspected = bounded("inspect", client.inspect("weeks")).await.unwrap();
    assert_eq!(inspected.snapshot.holders.len(), 1);
    assert_eq!(inspected.snapshot.holders[0].fencing_token, Some(term));
    assert_eq!(inspected.snapshot.fencing_counter, Some(term));
    let details = inspected.snapshot.holders[0]
        .details
        .clone()
        .unwrap_or_default();
    assert!(
        details.contains("the leader") && !details.starts_with(&term.get().to_string()),
        "details as an operator reads them: {details:?}"
    );

    bounded("resign", leadership.resign()).await.unwrap();
    let next = bounded("campaign again", election.campaign("next"))
        .await
        .unwrap();
    assert!(next.term() > term, "{:?} after {term:?}", next.term());
}

/// A waiter queued on a lock whose counter is gone: the grant it is handed is dated
/// against the holder's token, not against a counter of 0, and it takes the lock with a
/// fresh, larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_handed_over_after_its_counter_is_gone() {
    let server = server();
    let client = client(&server).await;
    let waiter_client = common::client(&server).await;
    let lock = client.lock("weeks-lock").ttl(Duration::from_secs(10));
    let held = bounded("acquire", lock.acquire()).await.unwrap();
    let first = held.fencing_token();
    let mut conn = raw(&server).await;
    let fence_key = lock.keys().unwrap().fence().to_owned();
    let () = redis::cmd("DEL")
        .arg(&fence_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let next = common::handed_over(held, &waiter_client, "weeks-lock").await;
    assert!(next.fencing_token() > first);
    assert!(next.is_held());
    bounded("release", next.release()).await.unwrap();
}

/// A hold far longer than the keep (a 1 s keep here): nothing keeps its counter, which
/// expires while the lock is held; the next holder's token is still larger (the clock is
/// past the holder's), and `inspect` reports the holder's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_outlives_its_counter_and_the_next_token_is_larger() {
    let server = server();
    let client = redlease::Client::builder(&server.url())
        .fence_keep(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let lock = client.lock("kept").ttl(Duration::from_secs(2));
    let guard = bounded("acquire", lock.acquire()).await.unwrap();
    let keys = lock.keys().unwrap();
    let conn = raw(&server).await;
    common::until_absent(&conn, keys.fence()).await;
    // Renewed across the counter's expiry.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(guard.is_held());
    let inspected = bounded("inspect", client.inspect("kept")).await.unwrap();
    assert_eq!(
        inspected.snapshot.holders[0].fencing_token,
        Some(guard.fencing_token())
    );
    let first = guard.fencing_token();
    bounded("release", guard.release()).await.unwrap();
    let next = bounded("acquire again", lock.acquire()).await.unwrap();
    assert!(next.fencing_token() > first);
    bounded("release", next.release()).await.unwrap();
}
