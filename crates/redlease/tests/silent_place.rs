//! A read-write lock's waiter keeps its FIFO place while no hand-off can reach it: queued
//! for grants, it joins "silently" (`scripts/rw_acquire.lua`, mode `silent`) once its
//! client's grant subscription is down, so that a writer waiting there still stops the
//! readers that come after it, and takes the lock before them when it is released.
//! Without the silent place its place would still name its grant channel, and the release
//! would drop it (its grant reaching no one, `serve` in `scripts/lib/rwlock.lua`), leaving
//! the lock to whoever comes first.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, server};

const NAME: &str = "silent-place";

/// The grant channel recorded in the waiter table's entry for the one queued token
/// (`""` for a silent place), or `None` when nobody is queued.
async fn queued_channel(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &redlease::LockKeys,
) -> Option<String> {
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(keys.queue())
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    let token = queued.first()?;
    let entry: Option<String> = redis::cmd("HGET")
        .arg(keys.waiters())
        .arg(token)
        .query_async(conn)
        .await
        .unwrap();
    let entry: serde_json::Value = serde_json::from_str(&entry?).unwrap();
    Some(entry["ch"].as_str().unwrap().to_owned())
}

/// Whether a new reader is kept out (its one attempt finds the lock busy).
async fn new_reader_kept_out(readers: &redlease::Client) -> bool {
    let lock = readers.rwlock(NAME).read();
    lock.try_acquire().await.unwrap().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_grant_subscription_is_down_keeps_its_place_before_later_readers() {
    let server = server();
    let readers = client(&server).await;
    let writers = client(&server).await;
    let keys = readers.rwlock(NAME).keys().unwrap();
    let mut conn = common::raw(&server).await;

    // A lease that outlives the test: no renewal of it is counted as the writer's attempt.
    let read = readers.rwlock(NAME).read().ttl(Duration::from_secs(600));
    let first_reader = read.acquire().await.unwrap();
    let writer = tokio::spawn({
        let lock = writers.rwlock(NAME).write().wait(Duration::from_secs(60));
        async move { lock.acquire().await.unwrap() }
    });
    // Queued for grants: its place names its client's grant channel.
    eventually("the writer to queue for grants", || {
        let mut conn = conn.clone();
        let keys = &keys;
        async move {
            queued_channel(&mut conn, keys)
                .await
                .is_some_and(|c| !c.is_empty())
        }
    })
    .await;

    // The grant subscription goes down and stays down: the writer tries again at once.
    common::retried_after(common::links_down(&server).await).await;
    // That attempt kept its place silently: no release hands it to a dead channel.
    assert_eq!(
        queued_channel(&mut conn, &keys).await.as_deref(),
        Some(""),
        "the writer's place is not a silent one once its grant subscription is down"
    );
    assert!(
        new_reader_kept_out(&readers).await,
        "a new reader overtook the writer whose grant subscription is down"
    );

    // The last reader leaves: the release grants nobody (the place names no channel to
    // publish to), the silent place stays at the head, and the writer takes the lock on
    // its own next attempt, before any reader that comes now.
    first_reader.release().await.unwrap();
    assert!(
        new_reader_kept_out(&readers).await,
        "a new reader took the lock released before the writer whose grant subscription is down"
    );
    let guard = bounded("the writer's turn", writer).await.unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
