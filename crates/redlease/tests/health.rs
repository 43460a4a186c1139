//! A holder watches its lease's renewal health (`Guard::health`, `Guard::health_changes`),
//! against a real redis-server that stops answering (SIGSTOP) and comes back, or loses the
//! key: renewed, retrying with the time left, recovered, lost, released.
#![allow(clippy::unwrap_used, clippy::panic, reason = "a test")]

mod common;

use std::time::Duration;

use futures_util::StreamExt as _;
use redis::AsyncCommands as _;
use redlease::{Client, Error, LeaseHealth, Renewal};

use common::{bounded, raw, server};

/// A client that gives up on a silent Redis after 200 ms, so that a paused server makes a
/// renewal fail well within the lease.
async fn impatient(server: &redlease_local::RedisServer) -> Client {
    Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_renewals_are_reported_while_the_lease_lasts_and_recovery_too() {
    let server = server();
    let client = impatient(&server).await;
    let guard = client
        .lock("health-pause")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let mut changes = guard.health_changes();
    let first = changes.next().await.unwrap();
    assert!(matches!(first, LeaseHealth::Renewed { .. }), "{first:?}");

    server.pause().unwrap();
    let failing = bounded("a failing renewal reported", async {
        loop {
            match changes.next().await {
                Some(h @ LeaseHealth::Retrying { .. }) => return h,
                Some(LeaseHealth::Renewed { .. }) => {}
                other => panic!("expected a failing renewal, got {other:?}"),
            }
        }
    })
    .await;
    let LeaseHealth::Retrying { failures, .. } = failing else {
        unreachable!()
    };
    assert_eq!(failures, 1);
    // Reported while there is time left: the lease is still ours.
    assert!(failing.remaining() > Duration::ZERO, "{failing:?}");
    assert!(guard.is_held());

    server.resume().unwrap();
    let recovered = bounded("the recovery reported", async {
        loop {
            match changes.next().await {
                Some(h @ LeaseHealth::Renewed { .. }) => return h,
                Some(LeaseHealth::Retrying { .. }) => {}
                other => panic!("expected a recovery, got {other:?}"),
            }
        }
    })
    .await;
    assert!(
        recovered.remaining() > Duration::from_secs(1),
        "{recovered:?}"
    );
    assert!(matches!(
        *guard.health().borrow(),
        LeaseHealth::Renewed { .. }
    ));

    guard.release().await.unwrap();
    assert_eq!(changes.next().await, Some(LeaseHealth::Released));
    assert_eq!(changes.next().await, None, "the stream ends with the lease");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_lease_reports_lost_distinct_from_failing() {
    let server = server();
    let client = impatient(&server).await;
    let guard = client
        .lock("health-lost")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let mut health = guard.health();
    let mut conn = raw(&server).await;
    let _: () = conn.del("redlease:health-lost").await.unwrap();
    let seen = bounded("the loss", health.wait_for(|h| !h.is_held()))
        .await
        .map(|h| *h)
        .unwrap();
    assert_eq!(seen, LeaseHealth::Lost);
    assert_eq!(seen.remaining(), Duration::ZERO);
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fixed_lease_is_reported_lost_when_it_runs_out() {
    let server = server();
    let client = impatient(&server).await;
    let guard = client
        .lock("health-fixed")
        .ttl(Duration::from_millis(300))
        .renewal(Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    let all: Vec<LeaseHealth> = bounded("the stream", guard.health_changes().collect()).await;
    assert!(
        matches!(all.first(), Some(LeaseHealth::Renewed { .. })),
        "{all:?}"
    );
    assert_eq!(all.last(), Some(&LeaseHealth::Lost), "{all:?}");
    assert!(!guard.is_held());
}

#[tokio::test(flavor = "multi_thread")]
async fn every_primitive_has_the_health_watch() {
    let server = server();
    let client = impatient(&server).await;
    let permit = client.semaphore("health-sem", 2).acquire().await.unwrap();
    let write = client.rwlock("health-rw").write().acquire().await.unwrap();
    let leadership = client
        .election("health-leader")
        .campaign("me")
        .await
        .unwrap();
    let multi = client
        .multi_lock(["health-a", "health-b"])
        .acquire()
        .await
        .unwrap();
    for health in [
        permit.health(),
        write.health(),
        leadership.guard().health(),
        multi.guards()[1].health(),
    ] {
        assert!(matches!(*health.borrow(), LeaseHealth::Renewed { .. }));
    }
    let mut of_permit = permit.health();
    permit.release().await.unwrap();
    assert_eq!(*of_permit.borrow_and_update(), LeaseHealth::Released);
    write.release().await.unwrap();
    leadership.resign().await.unwrap();
    multi.release().await.unwrap();
}
