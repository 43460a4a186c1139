//! A hold that outlives its fencing counter (which a grant keeps for a week, and an
//! operator may delete): the holder's token is recorded with the lease itself, so
//! `leader()`, `observe()`, `inspect` and the next grant stay right.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use futures_util::StreamExt as _;

/// The counter deleted while a leader leads (as its 7-day expiry would after a week):
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

/// What renewals send once a day for a hold of six days or more (`raise_fence.lua`): the
/// counter comes back at the holder's token if it was deleted, and its expiry is set to a
/// week again when it is already higher. Before, a counter at or above the token kept its
/// old expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_the_counter_restores_it_and_its_week() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("kept");
    let guard = bounded("acquire", lock.acquire()).await.unwrap();
    let keys = lock.keys().unwrap();
    let mut conn = raw(&server).await;
    let token: String = redis::cmd("GET")
        .arg(keys.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    let keeper = conn.clone();
    let keep = || {
        let mut conn = keeper.clone();
        let (fence, key, token) = (
            keys.fence().to_owned(),
            keys.key().to_owned(),
            token.clone(),
        );
        let fencing = guard.fencing_token().get();
        async move {
            let kept: i64 = redis::cmd("EVAL")
                .arg(concat!(
                    include_str!("../scripts/lib/common.lua"),
                    include_str!("../scripts/lib/fence.lua"),
                    include_str!("../scripts/raise_fence.lua")
                ))
                .arg(2)
                .arg(&fence)
                .arg(&key)
                .arg(fencing)
                .arg(&token)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(kept, 1);
        }
    };
    let week_ms = 7 * 24 * 3600 * 1000;
    // Deleted: restored at the holder's token, for a week.
    let () = redis::cmd("DEL")
        .arg(keys.fence())
        .query_async(&mut conn)
        .await
        .unwrap();
    keep().await;
    let value: u64 = redis::cmd("GET")
        .arg(keys.fence())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, guard.fencing_token().get());
    // Higher than the token (another grant of the name), with a short expiry left: the
    // value stays, the week comes back.
    let higher = guard.fencing_token().get() + 10;
    let () = redis::cmd("SET")
        .arg(keys.fence())
        .arg(higher)
        .arg("PX")
        .arg(5_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    keep().await;
    let value: u64 = redis::cmd("GET")
        .arg(keys.fence())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, higher);
    let left: i64 = redis::cmd("PTTL")
        .arg(keys.fence())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left > week_ms - 60_000, "the counter keeps {left} ms");
    bounded("release", guard.release()).await.unwrap();
}
