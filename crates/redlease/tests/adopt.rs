//! Handing a held lock to another process: `Guard::detach` stops renewing it here without
//! releasing it, and `Lock::adopt` on another client (another connection: another process
//! as far as the lock can tell) takes it over by its owner token, keeps it renewed and
//! gives it back; a handle whose lease is gone is refused.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use redlease::{Error, LeaseHandle, LeaseHealth, Owner, Wait};
use tokio::time::Instant;

use common::{bounded, client, get, raw, server, until_absent};

const TTL: Duration = Duration::from_millis(300);

/// The owner token a handle's string form carries (its fifth field).
fn token_of(handle: &LeaseHandle) -> String {
    handle.to_string().split(':').nth(4).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopter_keeps_a_detached_lock_renewed_past_several_ttls() {
    let server = server();
    let (first, adopter, rival) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let mut conn = raw(&server).await;
    let lock = first.lock("adopt:renewed").ttl(TTL);
    let key = lock.keys().unwrap().key().to_owned();
    let handle = lock.acquire().await.unwrap().detach();
    // Detaching released nothing, and the first client's shutdown gives nothing back.
    bounded("the first client's shutdown", first.shutdown())
        .await
        .unwrap();
    assert_eq!(get(&mut conn, &key).await, Some(token_of(&handle)));

    let adopted_at = Instant::now();
    let guard = bounded("adopt", adopter.lock("adopt:renewed").adopt(handle))
        .await
        .unwrap();
    assert!(guard.is_held());
    // Renewed by the adopter until its validity reaches four ttls past the adoption.
    let mut health = guard.health();
    bounded("renewals past four ttls", async {
        loop {
            match *health.borrow_and_update() {
                LeaseHealth::Renewed { valid_until } if valid_until > adopted_at + 4 * TTL => {
                    break;
                }
                LeaseHealth::Renewed { .. } | LeaseHealth::Retrying { .. } => {}
                other => panic!("the adopted lease ended: {other:?}"),
            }
            health.changed().await.unwrap();
        }
    })
    .await;
    assert!(guard.is_held());
    assert!(guard.owned().await.unwrap());
    let taken = rival
        .lock("adopt:renewed")
        .ttl(TTL)
        .try_acquire()
        .await
        .unwrap();
    assert!(taken.is_none(), "another client took an adopted lock");
    guard.release().await.unwrap();
    assert_eq!(get(&mut conn, &key).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adopters_release_hands_the_lock_to_a_waiter() {
    let server = server();
    let (first, adopter, waiter) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let handle = first
        .lock("adopt:handed")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap()
        .detach();
    let fence = handle.fencing_token();
    let guard = adopter.lock("adopt:handed").adopt(handle).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("adopt:handed")
            .ttl(TTL)
            .wait(Wait::For(Duration::from_secs(20)))
            .acquire()
            .await
    });
    // The waiter stays out while the adopter holds it (renewed meanwhile).
    let mut health = guard.health();
    let held_from = Instant::now();
    bounded("renewals past two ttls", async {
        while !matches!(*health.borrow_and_update(), LeaseHealth::Renewed { valid_until } if valid_until > held_from + 2 * TTL)
        {
            health.changed().await.unwrap();
        }
    })
    .await;
    assert!(!waiting.is_finished(), "the waiter got an adopted lock");
    guard.release().await.unwrap();
    let next = bounded("the waiter's acquisition", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_whose_lease_ran_out_is_refused() {
    let server = server();
    let (first, adopter) = (client(&server).await, client(&server).await);
    let conn = raw(&server).await;
    let lock = first.lock("adopt:expired").ttl(TTL);
    let key = lock.keys().unwrap().key().to_owned();
    let handle = lock.acquire().await.unwrap().detach();
    // Nobody renews it: it expires in Redis.
    until_absent(&conn, &key).await;
    let taken_over = adopter.lock("adopt:expired").adopt(handle.clone()).await;
    assert!(
        matches!(&taken_over, Err(Error::HandleGone { name, .. }) if name == "adopt:expired"),
        "{taken_over:?}"
    );
    // Nor is a lease another owner took in the meantime, which stays theirs.
    let taker = first
        .lock("adopt:expired")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let taken_over = adopter.lock("adopt:expired").adopt(handle).await;
    assert!(
        matches!(&taken_over, Err(Error::HandleGone { .. })),
        "{taken_over:?}"
    );
    assert!(taker.owned().await.unwrap());
    taker.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_handle_is_refused_in_its_own_words() {
    let server = server();
    let (first, adopter) = (client(&server).await, client(&server).await);
    let handle = first
        .lock("adopt:released")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap()
        .detach();
    let guard = adopter
        .lock("adopt:released")
        .adopt(handle.clone())
        .await
        .unwrap();
    guard.release().await.unwrap();
    // Nothing ran under the second adoption: the error says so, not that work overlapped.
    let again = adopter.lock("adopt:released").adopt(handle).await;
    let Err(e) = again else {
        panic!("a released handle was adopted: {again:?}")
    };
    assert!(matches!(&e, Error::HandleGone { name, .. } if name == "adopt:released"));
    let text = e.to_string();
    assert!(
        text.contains("cannot be adopted") && !text.contains("overlapped"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_round_trips_through_its_string_and_keeps_the_fencing_token() {
    let server = server();
    let (first, adopter) = (client(&server).await, client(&server).await);
    let guard = first
        .lock("adopt:string")
        .prefix("app:")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let fence = guard.fencing_token();
    let text = guard.detach().to_string();
    let handle: LeaseHandle = text.parse().unwrap();
    assert_eq!(handle.to_string(), text);
    assert_eq!(
        (
            handle.name(),
            handle.prefix(),
            handle.fencing_token(),
            handle.ttl()
        ),
        ("adopt:string", "app:", fence, TTL)
    );
    assert!(!format!("{handle:?}").contains(&token_of(&handle)));
    // A lock of another prefix (or name) is not the handle's.
    let elsewhere = adopter.lock("adopt:string").adopt(handle.clone()).await;
    assert!(
        matches!(&elsewhere, Err(Error::InvalidHandle { reason, .. }) if reason.contains("prefix")),
        "{elsewhere:?}"
    );
    let guard = adopter
        .lock("adopt:string")
        .prefix("app:")
        .adopt(handle)
        .await
        .unwrap();
    assert_eq!(guard.fencing_token(), fence);
    assert!(guard.remaining() > Duration::ZERO);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_guards_of_a_detached_lease_do_not_release_it() {
    let server = server();
    let (first, adopter) = (client(&server).await, client(&server).await);
    let mut conn = raw(&server).await;
    let lock = first.lock("adopt:nested").ttl(TTL);
    let key = lock.keys().unwrap().key().to_owned();
    let (outer, handle) = Owner::new()
        .scope(async {
            let outer = lock.acquire().await.unwrap();
            let inner = lock.acquire().await.unwrap();
            assert_eq!(inner.fencing_token(), outer.fencing_token());
            (outer, inner.detach())
        })
        .await;
    assert!(!outer.is_held());
    // The outer guard's release finds the lease handed on, and leaves it in Redis.
    let released = outer.release().await;
    assert!(matches!(&released, Err(Error::Lost { .. })), "{released:?}");
    assert_eq!(get(&mut conn, &key).await, Some(token_of(&handle)));
    let guard = adopter.lock("adopt:nested").adopt(handle).await.unwrap();
    assert!(guard.owned().await.unwrap());
    guard.release().await.unwrap();
}

#[test]
fn a_malformed_handle_is_a_clear_parse_error() {
    for text in [
        "",
        "not a handle",
        "redlease1:lock:12:300:0123456789abcdef0123456789abcdef",
        "redlease1:lock:12:300:not-a-token:0:job",
    ] {
        let parsed = text.parse::<LeaseHandle>();
        let Err(e @ Error::InvalidHandle { .. }) = parsed else {
            panic!("`{text}` parsed: {parsed:?}");
        };
        assert!(e.to_string().starts_with("invalid lease handle: "), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_handle_is_not_adopted_as_a_lock() {
    let server = server();
    let client = client(&server).await;
    let handle = client
        .semaphore("adopt:permits", 2)
        .ttl(TTL)
        .acquire()
        .await
        .unwrap()
        .detach();
    let adopted = client.lock("adopt:permits").adopt(handle).await;
    assert!(
        matches!(&adopted, Err(Error::Unsupported { .. })),
        "{adopted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_lock_is_handed_over_too() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let urls = nodes.urls();
    let connect = || async {
        redlease::Client::quorum_builder(&urls)
            .connect()
            .await
            .unwrap()
    };
    let (first, adopter, rival) = (connect().await, connect().await, connect().await);
    let guard = first.lock("adopt:quorum").ttl(TTL).acquire().await.unwrap();
    let fence = guard.fencing_token();
    let handle: LeaseHandle = guard.detach().to_string().parse().unwrap();
    let adopted_at = Instant::now();
    let guard = adopter.lock("adopt:quorum").adopt(handle).await.unwrap();
    assert_eq!(guard.fencing_token(), fence);
    let mut health = guard.health();
    bounded("renewals past three ttls", async {
        while !matches!(*health.borrow_and_update(), LeaseHealth::Renewed { valid_until } if valid_until > adopted_at + 3 * TTL)
        {
            health.changed().await.unwrap();
        }
    })
    .await;
    let taken = rival
        .lock("adopt:quorum")
        .ttl(TTL)
        .try_acquire()
        .await
        .unwrap();
    assert!(
        taken.is_none(),
        "another client took an adopted quorum lock"
    );
    guard.release().await.unwrap();
    let next = rival
        .lock("adopt:quorum")
        .ttl(TTL)
        .try_acquire()
        .await
        .unwrap();
    assert!(next.is_some_and(|g| g.fencing_token() > fence));
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_api_detaches_and_adopts() {
    let server = server();
    let first = redlease::blocking::Client::connect(&server.url()).unwrap();
    let adopter = redlease::blocking::Client::connect(&server.url()).unwrap();
    let guard = first.lock("adopt:blocking").ttl(TTL).acquire().unwrap();
    let fence = guard.fencing_token();
    let handle: LeaseHandle = guard.detach().unwrap().to_string().parse().unwrap();
    let guard = adopter.lock("adopt:blocking").adopt(handle).unwrap();
    assert_eq!(guard.fencing_token(), fence);
    assert!(guard.is_held());
    // Still held once more than a ttl has passed since the adoption: the adopter renews.
    let until = guard.valid_until() + TTL;
    while guard.valid_until() < until {
        assert!(guard.is_held(), "the adopted lease was lost");
        std::thread::sleep(Duration::from_millis(10));
    }
    let taken = first.lock("adopt:blocking").ttl(TTL).try_acquire().unwrap();
    assert!(taken.is_none(), "another client took an adopted lock");
    guard.release().unwrap();
    let next = first.lock("adopt:blocking").ttl(TTL).try_acquire().unwrap();
    assert!(next.is_some());
}
