//! Reentrancy: the same owner re-enters without a round trip; other owners, including
//! spawned tasks without the handle, do not.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{client, evalsha_calls, get, raw, server};
use redlease::{Error, Owner, Wait};

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
    assert_eq!(other.get(), 1);
    // Everything was given back.
    assert!(c.lock("run-nested").try_acquire().await.unwrap().is_some());
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
