//! A name that spells another name's side key (its fencing counter, holder details, a
//! read-write lock's holds) is a lock of its own: two different names never share a key,
//! hash tags included.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use redis::AsyncCommands as _;
use redlease::{Error, LockKeys};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_spelling_a_used_names_fencing_counter_is_free() {
    let server = server();
    let client = client(&server).await;
    // Using `{t}y` leaves its fencing counter behind for an hour.
    client
        .lock("{t}y")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let fence = LockKeys::new("redlease:", "{t}y").unwrap();
    let counter: Option<u64> = conn.get(fence.fence()).await.unwrap();
    assert!(counter.is_some(), "the counter stays");

    let guard = client.lock("{t}y:fence").try_acquire().await.unwrap();
    assert!(
        guard.is_some(),
        "`{{t}}y:fence` is busy with `{{t}}y`'s counter"
    );
    guard.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_name_spelling_a_fencing_counter_leaves_that_lock_usable() {
    let server = server();
    let client = client(&server).await;
    let squatter = client.lock("{t}w:fence").acquire().await.unwrap();
    let guard = client.lock("{t}w").try_acquire().await;
    let guard = match guard {
        Ok(Some(guard)) => guard,
        other => panic!("`{{t}}w` while `{{t}}w:fence` is held: {other:?}"),
    };
    assert!(guard.fencing_token().get() > 0);
    guard.release().await.unwrap();
    squatter.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_of_a_name_and_its_holder_key_does_not_block_on_itself() {
    let server = server();
    let client = client(&server).await;
    let multi = client
        .multi_lock(["{t}x", "{t}x:holder"])
        .wait(Duration::from_millis(500));
    let guard = bounded("the multi-lock", multi.acquire()).await;
    let guard = match guard {
        Ok(guard) => guard,
        Err(e) => panic!("`{{t}}x` with `{{t}}x:holder`: {e}"),
    };
    assert_eq!(guard.guards().len(), 2);
    assert!(client.lock("{t}x").try_acquire().await.unwrap().is_none());
    assert!(
        client
            .lock("{t}x:holder")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_spelling_a_read_write_locks_holds_stays_apart_from_it() {
    let server = server();
    let client = client(&server).await;
    let rwlock = client.rwlock("{t}");
    let writer = rwlock.write().acquire().await.unwrap();

    // All five permits are free: the writer is not one of them.
    let semaphore = client.semaphore("{t}:rw:owners", 5);
    let mut permits = Vec::new();
    for i in 0..5 {
        match semaphore.try_acquire().await {
            Ok(Some(permit)) => permits.push(permit),
            other => panic!("permit {i} of 5 beside the writer: {other:?}"),
        }
    }
    assert!(semaphore.try_acquire().await.unwrap().is_none(), "a sixth");

    // The permits are not holds of the read-write lock: once the writer leaves, it is
    // free.
    writer.release().await.unwrap();
    let next = rwlock.write().try_acquire().await.unwrap();
    assert!(next.is_some(), "the permits kept the read-write lock held");
    next.unwrap().release().await.unwrap();
    for permit in permits {
        permit.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_a_nul_byte_is_refused_with_a_reason() {
    let server = server();
    let client = client(&server).await;
    match client.lock("a\0b").try_acquire().await {
        Err(Error::InvalidName { reason, .. }) => {
            assert!(reason.contains("NUL"), "{reason}");
        }
        other => panic!("a NUL byte in a name: {other:?}"),
    }
}
