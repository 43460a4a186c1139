//! A semaphore resized while held (`Semaphore::resize`) against real Redis: a raised
//! count handed to queued waiters at once, a lowered one revoking nobody and granting
//! nothing until the permits in use fall below it, instances still asking with the old
//! count following the new one, an un-resized mismatch still refused, bad counts, a
//! quorum, a Cluster and the blocking API.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, no_polling, queued_places, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Permit, Semaphore};
use tokio::time::Instant;

/// Long enough that no holder's lease ends, nor a watcher's re-check comes, during a test:
/// a waiter served before then was handed its permit.
const LONG: Duration = Duration::from_secs(60);

/// `client`'s semaphore `name` of `permits`, with leases and waits of [`LONG`] and no
/// polling: its waiters are served by hand-offs only.
fn semaphore(client: &Client, name: &str, permits: u32) -> Semaphore {
    client
        .semaphore(name, permits)
        .ttl(LONG)
        .wait(LONG)
        .retry(no_polling())
}

async fn held(server: &redlease_local::RedisServer, semaphore: &Semaphore) -> i64 {
    let mut conn = raw(server).await;
    conn.zcard(semaphore.keys().unwrap().key()).await.unwrap()
}

async fn take(semaphore: &Semaphore, n: usize) -> Vec<Permit> {
    let mut permits = Vec::new();
    for _ in 0..n {
        permits.push(semaphore.acquire().await.unwrap());
    }
    permits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_count_is_handed_to_queued_waiters_at_once() {
    let server = server();
    let client = client(&server).await;
    let three = semaphore(&client, "raise", 3);
    let _held = take(&three, 3).await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let three = three.clone();
            tokio::spawn(async move { three.acquire().await })
        })
        .collect();
    queued_places(&server, &three.keys().unwrap(), 2).await;
    let resized = Instant::now();
    let before = semaphore(&client, "raise", 5).resize().await.unwrap();
    assert_eq!(before, Some(3));
    let mut granted = Vec::new();
    for waiter in waiters {
        granted.push(
            bounded("a waiter handed a new permit", waiter)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let waited = resized.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "served {waited:?} after the resize: not by the hand-off"
    );
    assert_eq!(held(&server, &three).await, 5);
    assert!(three.try_acquire().await.unwrap().is_none(), "5 is the cap");
    let state = client.inspect("raise").await.unwrap().snapshot;
    assert_eq!((state.permits, state.holders.len()), (Some(5), 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_count_revokes_nobody_and_grants_only_below_it() {
    let server = server();
    let client = client(&server).await;
    let five = semaphore(&client, "lower", 5);
    let mut permits = take(&five, 5).await;
    assert_eq!(
        semaphore(&client, "lower", 2).resize().await.unwrap(),
        Some(5)
    );
    assert_eq!(held(&server, &five).await, 5, "nobody revoked");
    assert!(permits.iter().all(Permit::is_held));
    // A waiter still configured with 5 waits against 2.
    let waiter = {
        let five = five.clone();
        tokio::spawn(async move { five.acquire().await })
    };
    queued_places(&server, &five.keys().unwrap(), 1).await;
    // 5 in use of 2: three releases leave 2 in use, still no room.
    for _ in 0..3 {
        permits.remove(0).release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "granted with 2 in use of 2");
    assert_eq!(held(&server, &five).await, 2);
    // The fourth leaves 1 in use: the waiter is handed the permit.
    permits.remove(0).release().await.unwrap();
    let granted = bounded("the waiter served below the count", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(granted.is_held());
    assert_eq!(held(&server, &five).await, 2);
    assert!(
        five.try_acquire().await.unwrap().is_none(),
        "never more than 2"
    );
    assert!(
        semaphore(&client, "lower", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "whatever count is asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_count_acquires_against_the_resized_one() {
    let server = server();
    let client = client(&server).await;
    let three = semaphore(&client, "rolling", 3);
    let mut permits = take(&three, 1).await;
    assert_eq!(
        semaphore(&client, "rolling", 5).resize().await.unwrap(),
        Some(3)
    );
    for _ in 0..4 {
        permits.push(three.try_acquire().await.unwrap().unwrap());
    }
    assert!(three.try_acquire().await.unwrap().is_none(), "5 is the cap");
    for permit in permits {
        permit.release().await.unwrap();
    }
    // The weight check uses the count in force (5), idle or not: the resized count is kept.
    let four = three.try_acquire_many(4).await.unwrap().unwrap();
    four.release().await.unwrap();
    match three.try_acquire_many(6).await {
        Err(Error::PermitsAsked { asked, permits, .. }) => assert_eq!((asked, permits), (6, 5)),
        other => panic!("6 of 5: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresized_mismatch_is_still_refused() {
    let server = server();
    let client = client(&server).await;
    let _held = semaphore(&client, "mismatch", 3).acquire().await.unwrap();
    match semaphore(&client, "mismatch", 4).try_acquire().await {
        Err(Error::PermitsMismatch { in_use, .. }) => assert_eq!(in_use, 3),
        other => panic!("another count: {other:?}"),
    }
    match semaphore(&client, "mismatch", 3).try_acquire_many(4).await {
        Err(Error::PermitsAsked { asked, permits, .. }) => assert_eq!((asked, permits), (4, 3)),
        other => panic!("4 of 3: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_and_a_quorum_are_refused() {
    let server = server();
    let client = client(&server).await;
    match client.semaphore("bad", 0).resize().await {
        Err(Error::InvalidOption { option, .. }) => assert_eq!(option, "permits"),
        other => panic!("0 permits: {other:?}"),
    }
    // The builder's range, 1 to u32::MAX, is the resize's too.
    assert_eq!(
        client.semaphore("bad", u32::MAX).resize().await.unwrap(),
        None
    );
    assert_eq!(
        client.semaphore("bad", 1).resize().await.unwrap(),
        Some(u32::MAX)
    );
    let (_nodes, quorum) = common::quorum_of_three().await;
    match quorum.semaphore("bad", 2).resize().await {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("over a quorum: {other:?}"),
    }
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_api_resizes() {
    let server = server();
    let client = redlease::blocking::Client::connect(&server.url()).unwrap();
    assert_eq!(client.semaphore("blocking", 2).resize().unwrap(), None);
    let permit = client.semaphore("blocking", 2).acquire().unwrap();
    assert_eq!(client.semaphore("blocking", 3).resize().unwrap(), Some(2));
    permit.release().unwrap();
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_waiter_is_woken_by_a_raised_count() {
    let cluster = common::cluster::cluster();
    let client = common::cluster::connect(&cluster).await;
    let one = semaphore(&client, "{c}raise", 1);
    let _held = one.acquire().await.unwrap();
    let waiter = {
        let one = one.clone();
        tokio::spawn(async move { one.acquire().await })
    };
    // A Cluster's semaphore waiters listen for notices rather than queue: give the waiter
    // time to find the semaphore full and listen.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    assert_eq!(
        semaphore(&client, "{c}raise", 2).resize().await.unwrap(),
        Some(1)
    );
    let permit = bounded("the waiter woken by the resize", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(permit.is_held());
}
