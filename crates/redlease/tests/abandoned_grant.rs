//! A lock handed to a waiter that gave up: its acquisition ended without the lock and its
//! give-back could not withdraw its place (here refused, as it is when the waiter is cut
//! off from Redis), so a later release grants the place. The client that hears the grant
//! gives the lock back at once, and the next waiter gets it, rather than the lock sitting
//! with nobody for a whole ttl.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, server};
use redlease::{Client, LockKeys};
use redlease_local::Reply;

const NAME: &str = "given-up";
/// Longer than the next waiter waits: a lock left with nobody fails the test.
const TTL: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_grant_to_a_waiter_that_gave_up_is_given_back() {
    let server = server();
    let keys = LockKeys::new("redlease:", NAME).unwrap();
    // The waiter's own user, whose scripts the test can refuse.
    server
        .query(&[
            "ACL",
            "SETUSER",
            "waiter",
            "on",
            ">waiter-pw",
            "~*",
            "&*",
            "+@all",
        ])
        .unwrap();
    let url = format!("redis://waiter:waiter-pw@127.0.0.1:{}", server.port());
    let waiter = Client::builder(&url).connect().await.unwrap();
    let (holder, next) = (client(&server).await, client(&server).await);
    let held = holder.lock(NAME).ttl(TTL).acquire().await.unwrap();

    let gave_up = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .lock(NAME)
                .ttl(TTL)
                .retry(common::no_polling())
                .wait(Duration::from_secs(2))
                .acquire()
                .await
        }
    });
    common::queued_places(&server, &keys, 1).await;
    // From now on nothing the waiter's client runs reaches the lock: its give-back fails.
    server
        .query(&["ACL", "SETUSER", "waiter", "-evalsha", "-evalsha_ro"])
        .unwrap();
    let queued = tokio::spawn({
        let next = next.clone();
        async move {
            next.lock(NAME)
                .ttl(TTL)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    common::queued_places(&server, &keys, 2).await;
    let outcome = bounded("the waiter gives up", gave_up).await.unwrap();
    assert!(
        matches!(outcome, Err(redlease::Error::Timeout { .. })),
        "{outcome:?}"
    );
    // Its give-back ran and failed; its place is still queued, first.
    let _ = waiter.shutdown().await;
    let queue = server.query(&["LRANGE", keys.queue(), "0", "-1"]).unwrap();
    assert!(
        matches!(&queue, Reply::Array(places) if places.len() == 2),
        "{queue:?}"
    );
    server
        .query(&["ACL", "SETUSER", "waiter", "+evalsha", "+evalsha_ro"])
        .unwrap();

    // The release hands the lock to the place of the waiter that gave up; its client
    // hears the grant and hands the lock on.
    held.release().await.unwrap();
    let guard = bounded("the next waiter's turn", queued)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
