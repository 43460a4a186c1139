//! Several permits of a semaphore taken at once (`acquire_many`) against real Redis: one
//! permit counting for n, given back as n, FIFO order that a request for many is not
//! starved in, a lost holder of n giving all n back after its ttl, and bad counts.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, raw, server};
use redis::AsyncCommands as _;
use redlease::{Error, Renewal};

/// The leases holding permits of the semaphore at `key` (members of K, one per holder
/// however many permits it holds), read behind the library's back.
async fn held_members(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    conn.zcard(key).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_of_two_counts_for_two_and_gives_both_back() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("many", 3);
    let two = semaphore.acquire_many(2).await.unwrap();
    let one = semaphore.try_acquire().await.unwrap();
    assert!(one.is_some(), "one of the 3 permits is left after taking 2");
    assert!(
        semaphore.try_acquire().await.unwrap().is_none(),
        "2 + 1 of 3 taken: a fourth permit is refused"
    );
    assert!(
        semaphore.try_acquire_many(2).await.unwrap().is_none(),
        "no 2 permits are free"
    );
    // One lease for both: one member of K, one fencing token.
    let mut conn = raw(&server).await;
    assert_eq!(held_members(&mut conn, "redlease:many").await, 2);
    let seen = client.inspect("many").await.unwrap().snapshot;
    let mut counts: Vec<u32> = seen.holders.iter().map(|h| h.permits).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2], "{seen:?}");
    assert!(two.fencing_token() < one.as_ref().unwrap().fencing_token());
    two.release().await.unwrap();
    let a = semaphore.try_acquire().await.unwrap();
    let b = semaphore.try_acquire().await.unwrap();
    assert!(
        a.is_some() && b.is_some(),
        "releasing the permit of 2 freed both"
    );
    assert!(semaphore.try_acquire().await.unwrap().is_none());
    for permit in [a, b, one].into_iter().flatten() {
        permit.release().await.unwrap();
    }
    // Nothing held any more: all 3 at once.
    let all = semaphore.try_acquire_many(3).await.unwrap();
    assert!(all.is_some(), "every permit came back");
    all.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_for_many_is_not_overtaken_by_later_singles() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client
        .semaphore("fair", 3)
        .wait(Duration::from_secs(30))
        .retry(common::no_polling());
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let queue = semaphore.keys().unwrap().queue().to_owned();
    let conn = raw(&server).await;
    let queued = |n: i64| {
        let conn = conn.clone();
        let queue = queue.clone();
        eventually("the waiters to queue", move || {
            let mut conn = conn.clone();
            let queue = queue.clone();
            async move { common::llen(&mut conn, &queue).await == n }
        })
    };

    // The request for all 3 queues: only 1 is free.
    let (big_tx, mut big_rx) = tokio::sync::mpsc::unbounded_channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let big = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let permit = semaphore.acquire_many(3).await.unwrap();
            big_tx.send(permit.fencing_token()).unwrap();
            done_rx.await.unwrap();
            permit.release().await.unwrap();
        })
    };
    queued(1).await;
    // A later single would fit in the free permit, but waits behind the head.
    let (small_tx, mut small_rx) = tokio::sync::mpsc::unbounded_channel();
    let small = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let permit = semaphore.acquire().await.unwrap();
            small_tx.send(permit.fencing_token()).unwrap();
            permit.release().await.unwrap();
        })
    };
    queued(2).await;
    assert!(
        semaphore.try_acquire().await.unwrap().is_none(),
        "a newcomer does not pass the queued request for 3 either"
    );
    // An operator sees who asks for how many, in queue order.
    let seen = client.inspect("fair").await.unwrap().snapshot;
    let asked: Vec<u32> = seen.waiters.iter().map(|w| w.permits).collect();
    assert_eq!(asked, [3, 1], "{seen:?}");
    assert!(seen.holders.iter().all(|h| h.permits == 1), "{seen:?}");

    // One single released: 2 free, still not enough for the head; nobody is served.
    first.release().await.unwrap();
    let mut conn = conn.clone();
    assert_eq!(held_members(&mut conn, "redlease:fair").await, 1);
    assert_eq!(common::llen(&mut conn, &queue).await, 2);
    assert!(small_rx.try_recv().is_err(), "the later single overtook");
    assert!(semaphore.try_acquire().await.unwrap().is_none());

    // The other released: the head gets all 3, the single still waits behind it.
    second.release().await.unwrap();
    let big_fence = bounded("the request for 3", big_rx.recv()).await.unwrap();
    assert_eq!(common::llen(&mut conn, &queue).await, 1);
    assert!(small_rx.try_recv().is_err(), "served while all 3 are held");
    done_tx.send(()).unwrap();
    let small_fence = bounded("the later single", small_rx.recv()).await.unwrap();
    assert!(big_fence < small_fence, "{big_fence:?} {small_fence:?}");
    big.await.unwrap();
    small.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_holder_of_many_gives_them_all_back_after_its_ttl() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("crashed", 3);
    // A holder that never renews nor releases: as if its process died holding 3.
    let lost = semaphore
        .clone()
        .ttl(Duration::from_millis(500))
        .renewal(Renewal::Fixed)
        .acquire_many(3)
        .await
        .unwrap();
    std::mem::forget(lost);
    assert!(
        semaphore.try_acquire().await.unwrap().is_none(),
        "the permits are counted while the lease lasts"
    );
    let two = bounded(
        "the permits to come back",
        semaphore
            .clone()
            .wait(Duration::from_secs(20))
            .acquire_many(2),
    )
    .await
    .unwrap();
    // All 3 came back (not 1): 2 taken, and exactly 1 more fits.
    let one = semaphore.try_acquire().await.unwrap();
    assert!(one.is_some(), "the third permit came back too");
    assert!(semaphore.try_acquire().await.unwrap().is_none());
    two.release().await.unwrap();
    one.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_no_permits_or_more_than_there_are_is_an_error() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("counts", 3);
    for asked in [0, 4] {
        match semaphore.acquire_many(asked).await {
            Err(
                e @ Error::PermitsAsked {
                    asked: a,
                    permits: 3,
                    ..
                },
            ) if a == asked => {
                assert!(e.to_string().contains("ask for 1 to 3"), "{e}");
            }
            other => panic!("acquire_many({asked}): {other:?}"),
        }
        assert!(matches!(
            semaphore.try_acquire_many(asked).await,
            Err(Error::PermitsAsked { .. })
        ));
        let ran = semaphore
            .run_many(asked, async |_| Ok::<_, Error>(()))
            .await;
        assert!(matches!(ran, Err(Error::PermitsAsked { .. })), "{ran:?}");
    }
    // Nothing was taken by the refusals.
    let all = semaphore.try_acquire_many(3).await.unwrap();
    assert!(all.is_some());
    all.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_acquisition_of_fewer_re_enters_the_owners_permit() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("nested", 2).wait(redlease::Wait::No);
    let inner = semaphore.clone();
    semaphore
        .run_many(2, async |outer| {
            // Both permits are the owner's: a nested single re-enters them.
            let nested = inner.acquire().await?;
            assert_eq!(nested.fencing_token(), outer.fencing_token());
            nested.release().await?;
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_of_many_still_counts_for_all_past_its_ttl() {
    let server = server();
    let client = client(&server).await;
    let ttl = Duration::from_millis(300);
    let semaphore = client.semaphore("renewed-many", 3).ttl(ttl);
    let two = semaphore.acquire_many(2).await.unwrap();
    // Held for several ttls: only renewals keep it (and its weight) alive.
    tokio::select! {
        () = tokio::time::sleep(ttl * 5) => {}
        () = two.lost() => panic!("the renewed permit of 2 was lost"),
    }
    assert!(two.is_held());
    assert!(
        semaphore.try_acquire_many(2).await.unwrap().is_none(),
        "the renewed holder of 2 counts for 2"
    );
    let one = semaphore.try_acquire().await.unwrap();
    assert!(one.is_some(), "and for no more than 2");
    let seen = client.inspect("renewed-many").await.unwrap().snapshot;
    let mut counts: Vec<u32> = seen.holders.iter().map(|h| h.permits).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2], "{seen:?}");
    two.release().await.unwrap();
    one.unwrap().release().await.unwrap();
}
