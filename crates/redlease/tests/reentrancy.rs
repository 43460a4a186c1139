//! Reentrancy: the same owner re-enters without a round trip; other owners, including
//! spawned tasks without the handle, do not.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{client, evalsha_calls, get, raw, server};
use redlease::{Error, Owner, Renewal, Wait};

#[tokio::test]
async fn depth_three_across_awaits_releases_with_the_outermost_hold() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("nested").keys().unwrap().key().to_owned();
    Owner::new()
        .scope(async {
            let outer = c.lock("nested").acquire().await.unwrap();
            let token = get(&mut conn, &key).await;
            let calls = evalsha_calls(&mut conn).await;
            tokio::task::yield_now().await;
            let middle = c.lock("nested").acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            let inner = c.lock("nested").try_acquire().await.unwrap().unwrap();
            assert_eq!(
                evalsha_calls(&mut conn).await,
                calls,
                "a nested acquisition went to Redis"
            );
            assert_eq!(middle.fencing_token(), outer.fencing_token());
            assert_eq!(inner.fencing_token(), outer.fencing_token());
            inner.release().await.unwrap();
            middle.release().await.unwrap();
            assert_eq!(
                get(&mut conn, &key).await,
                token,
                "a nested release freed the lock"
            );
            outer.release().await.unwrap();
            assert_eq!(get(&mut conn, &key).await, None);
        })
        .await;
}

#[tokio::test]
async fn a_spawned_task_is_another_owner_unless_handed_the_handle() {
    let server = server();
    let c = client(&server).await;
    let owner = Owner::new();
    owner
        .clone()
        .scope(async {
            let outer = c.lock("spawned").acquire().await.unwrap();
            assert_eq!(Owner::current(), Some(owner.clone()));
            let stranger = {
                let c = c.clone();
                tokio::spawn(async move {
                    assert_eq!(Owner::current(), None);
                    c.lock("spawned").try_acquire().await.unwrap().is_none()
                })
            };
            assert!(
                stranger.await.unwrap(),
                "a spawned task re-entered without the handle"
            );
            let handed = {
                let c = c.clone();
                let owner = owner.clone();
                tokio::spawn(async move {
                    let g = c.lock("spawned").owner(&owner).try_acquire().await.unwrap();
                    let g = g.unwrap(); // the handle makes it the same owner
                    let fence = g.fencing_token();
                    g.release().await.unwrap();
                    fence
                })
            };
            assert_eq!(handed.await.unwrap(), outer.fencing_token());
            outer.release().await.unwrap();
        })
        .await;
    // Two different owners exclude each other.
    let a = c
        .lock("owners")
        .owner(&Owner::new())
        .acquire()
        .await
        .unwrap();
    let b = c
        .lock("owners")
        .owner(&Owner::new())
        .wait(Wait::No)
        .acquire()
        .await;
    assert!(matches!(b, Err(Error::Timeout { .. })), "{b:?}");
    a.release().await.unwrap();
}

#[tokio::test]
async fn nested_run_re_enters_and_a_different_lock_does_not() {
    let server = server();
    let c = client(&server).await;
    let lock = c.lock("run-nested").wait(Wait::No);
    let (outer, inner, other) = lock
        .run(async |g| {
            let inner = lock
                .run(async |g| Ok::<_, Error>(g.fencing_token()))
                .await?;
            // Still held after the nested run ended.
            assert!(g.is_held());
            let other = c
                .lock("run-other")
                .run(async |g| Ok::<_, Error>(g.fencing_token()))
                .await?;
            Ok::<_, Error>((g.fencing_token(), inner, other))
        })
        .await
        .unwrap();
    assert_eq!(outer, inner);
    // A fresh grant of its own: on this server's clock, after the outer one.
    assert!(other > outer, "{other} after {outer}");
    // Everything was given back.
    assert!(c.lock("run-nested").try_acquire().await.unwrap().is_some());
}

/// `run` promises a renewed lease: inside an outer fixed lease of the same owner it
/// refuses to start rather than re-enter a lease that nobody renews (its work would be cut
/// off when that lease runs out, whatever its own TTL). The outer hold is left as it was.
#[tokio::test]
async fn nested_run_refuses_to_re_enter_a_fixed_lease() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("fixed-outer").keys().unwrap().key().to_owned();
    Owner::new()
        .scope(async {
            let outer = c
                .lock("fixed-outer")
                .renewal(Renewal::Fixed)
                .ttl(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            let mut ran = false;
            let nested = c
                .lock("fixed-outer")
                .ttl(Duration::from_secs(60))
                .run(async |_| {
                    ran = true;
                    Ok::<_, Error>(())
                })
                .await;
            assert!(
                matches!(&nested, Err(Error::FixedLeaseReentered { name, .. }) if name == "fixed-outer"),
                "{nested:?}"
            );
            assert!(!ran, "work ran under a lease nobody renews");
            assert!(outer.is_held(), "the refused run gave back the outer hold");
            assert!(get(&mut conn, &key).await.is_some());
            outer.release().await.unwrap();
            assert_eq!(get(&mut conn, &key).await, None);
        })
        .await;
}

/// A nested `run` in a renewed outer lease re-enters it as it is: the outer's token and
/// TTL (its own `ttl` is not applied, as documented on `Lock::run`).
#[tokio::test]
async fn nested_run_shares_the_outer_lease_and_its_ttl() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("shared-ttl").keys().unwrap().key().to_owned();
    let outer_ttl = Duration::from_secs(20);
    c.lock("shared-ttl")
        .ttl(outer_ttl)
        .run(async |outer| {
            let (token, remaining) = c
                .lock("shared-ttl")
                .ttl(Duration::from_secs(600))
                .run(async |inner| Ok::<_, Error>((inner.fencing_token(), inner.remaining())))
                .await?;
            assert_eq!(token, outer.fencing_token());
            assert!(remaining <= outer_ttl, "{remaining:?}");
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(pttl > 0 && pttl <= 20_000, "the outer TTL stays: {pttl} ms");
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn without_an_owner_a_second_acquisition_waits_like_anyone() {
    let server = server();
    let c = client(&server).await;
    let first = c.lock("no-owner").acquire().await.unwrap();
    let second = c.lock("no-owner").try_acquire().await.unwrap();
    assert!(second.is_none(), "no owner, no reentrancy");
    first.release().await.unwrap();
}
