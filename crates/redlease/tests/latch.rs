//! Count-down latches: waiters wake when the last count is counted down (over pub/sub, not
//! by polling), a dead party's count expires after its ttl and is reported as expired,
//! and a bounded wait on a latch that never opens times out.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{bounded, client, evalsha_calls, no_polling, raw, server};
use redlease::{Error, Renewal, Wait};

#[tokio::test]
async fn a_waiter_wakes_only_after_every_count_is_counted_down() {
    let server = server();
    let parties = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let mut counts = Vec::new();
    for party in &parties {
        let count = party
            .latch("import")
            .ttl(Duration::from_secs(60))
            .count_up()
            .await
            .unwrap();
        counts.push(count);
    }
    let waiter = client(&server).await;
    // Also loads the waiter's script: its first check below is one EVALSHA.
    assert_eq!(waiter.latch("import").count().await.unwrap(), 3);
    let mut admin = raw(&server).await;
    let checks_before = evalsha_calls(&mut admin).await;
    let last_down = Arc::new(AtomicBool::new(false));
    let seen_last = Arc::clone(&last_down);
    // Counts live a minute and the back-off is a minute: only the notice of the last
    // count down can wake the waiter within the test's bound.
    let waiting = tokio::spawn(async move {
        let opened = waiter
            .latch("import")
            .wait(Duration::from_secs(120))
            .retry(no_polling())
            .wait_open()
            .await;
        (opened, seen_last.load(Ordering::SeqCst))
    });
    // The waiter's first check saw the counts outstanding: a first check that comes after
    // the last count down rightly returns at once, reporting nothing.
    common::eventually("the waiter's first check", || {
        let mut admin = admin.clone();
        async move { evalsha_calls(&mut admin).await > checks_before }
    })
    .await;
    let third = counts.pop().unwrap();
    for count in counts {
        count.count_down().await.unwrap();
    }
    assert_eq!(parties[0].latch("import").count().await.unwrap(), 1);
    assert!(
        !waiting.is_finished(),
        "the waiter left with a count outstanding"
    );
    last_down.store(true, Ordering::SeqCst);
    third.count_down().await.unwrap();
    let (opened, after_last) = bounded("the waiter to wake", waiting).await.unwrap();
    let opened = opened.unwrap();
    assert!(after_last, "the waiter returned before the last count down");
    assert_eq!(opened.counted_down(), 3, "{opened:?}");
    assert_eq!(opened.expired(), 0, "{opened:?}");
    assert!(!opened.is_broken());
}

#[tokio::test]
async fn a_dead_partys_count_expires_after_its_ttl_and_is_reported_as_expired() {
    let server = server();
    let alive = client(&server).await;
    let dead = client(&server).await;
    let waiter = client(&server).await;
    let live = alive
        .latch("job")
        .ttl(Duration::from_secs(60))
        .count_up()
        .await
        .unwrap();
    // The party "dies": its count is never counted down, and nothing renews it.
    let ttl = Duration::from_millis(800);
    let doomed = dead
        .latch("job")
        .ttl(ttl)
        .renewal(Renewal::Fixed)
        .count_up()
        .await
        .unwrap();
    std::mem::forget(doomed);
    drop(dead);
    let waiting = tokio::spawn(async move {
        waiter
            .latch("job")
            .wait(Duration::from_secs(120))
            .retry(no_polling())
            .wait_open()
            .await
    });
    live.count_down().await.unwrap();
    // No notice comes for the dead count: the waiter must look again at its expiry.
    let opened = bounded("the waiter to see the dead count expire", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(opened.counted_down(), 1, "{opened:?}");
    assert_eq!(opened.expired(), 1, "{opened:?}");
    assert!(opened.is_broken());
    assert_eq!(alive.latch("job").count().await.unwrap(), 0);
}

#[tokio::test]
async fn waiting_with_nothing_outstanding_returns_at_once() {
    let server = server();
    let client = client(&server).await;
    let latch = client.latch("idle").wait(Wait::No);
    assert_eq!(
        latch.wait_open().await.unwrap(),
        redlease::Opened::default()
    );
    // A round that ended before the waiter came is not the waiter's to report.
    let count = latch.count_up().await.unwrap();
    count.count_down().await.unwrap();
    let opened = latch.wait_open().await.unwrap();
    assert_eq!((opened.counted_down(), opened.expired()), (0, 0));
}

#[tokio::test]
async fn a_bounded_wait_on_a_latch_that_never_opens_times_out() {
    let server = server();
    let client = client(&server).await;
    let latch = client.latch("stuck").ttl(Duration::from_secs(60));
    let _count = latch.count_up().await.unwrap();
    let waited = bounded(
        "the bounded wait",
        latch.clone().wait(Duration::from_millis(300)).wait_open(),
    )
    .await;
    match waited {
        Err(Error::Timeout {
            holder_ttl: Some(left),
            ..
        }) => assert!(left > Duration::from_secs(30), "{left:?}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(latch.count().await.unwrap(), 1);
}

#[tokio::test]
async fn a_waiter_looks_again_only_at_the_count_expiry() {
    let server = server();
    let party = client(&server).await;
    let waiter = client(&server).await;
    let mut conn = raw(&server).await;
    let ttl = Duration::from_millis(1500);
    let doomed = party
        .latch("quiet")
        .ttl(ttl)
        .renewal(Renewal::Fixed)
        .count_up()
        .await
        .unwrap();
    std::mem::forget(doomed);
    // Loads the waiter's script, so that no NOSCRIPT retry is counted below.
    assert_eq!(waiter.latch("quiet").count().await.unwrap(), 1);
    let before = evalsha_calls(&mut conn).await;
    // The default back-off: a waiter that polled would look every few hundred ms.
    let opened = bounded(
        "the waiter",
        waiter
            .latch("quiet")
            .wait(Duration::from_secs(60))
            .wait_open(),
    )
    .await
    .unwrap();
    let looks = evalsha_calls(&mut conn).await - before;
    eprintln!("one count expiring after {ttl:?}: the waiter ran {looks} scripts");
    assert_eq!(opened.expired(), 1, "{opened:?}");
    // Its first look, and one at the count's expiry.
    assert!(looks <= 2, "the waiter looked {looks} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_latch_waits_for_workers_that_have_not_started() {
    let server = server();
    let (coordinator, worker) = (client(&server).await, client(&server).await);
    let latch = coordinator.latch("preset").ttl(Duration::from_secs(60));
    assert_eq!(latch.expect(2).await.unwrap(), 2);
    // Nobody counted up yet, and the round is open: a waiter waits.
    assert_eq!(latch.count().await.unwrap(), 2);
    let (counted_tx, mut counted) = tokio::sync::mpsc::unbounded_channel();
    let waiting = tokio::spawn({
        let latch = latch
            .clone()
            .wait(Duration::from_secs(60))
            .retry(no_polling());
        async move {
            let opened = latch.wait_open().await;
            (opened, counted.try_recv().is_ok())
        }
    });
    // A try_expect on an open round adds nothing.
    assert!(!latch.try_expect(5).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 2);
    let workers = worker.latch("preset").ttl(Duration::from_secs(60));
    let first = workers.count_up().await.unwrap();
    first.count_down().await.unwrap();
    // One arrival of two came and went: the round is still open.
    assert_eq!(latch.count().await.unwrap(), 1);
    assert!(!waiting.is_finished());
    let second = workers.count_up().await.unwrap();
    counted_tx.send(()).unwrap();
    second.count_down().await.unwrap();
    let (opened, after_the_last) = bounded("the preset round to end", waiting).await.unwrap();
    let opened = opened.unwrap();
    assert!(
        after_the_last,
        "the waiter returned before the last arrival"
    );
    assert_eq!((opened.counted_down(), opened.expired()), (2, 0));
    // Idle again: try_expect presets the next round, zero arrivals are refused.
    assert!(latch.try_expect(1).await.unwrap());
    assert!(matches!(
        latch.expect(0).await,
        Err(Error::InvalidOption { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_opens_for_every_party_when_the_last_arrives() {
    let server = server();
    let parties = 3;
    let mut clients = Vec::new();
    for _ in 0..parties {
        clients.push(client(&server).await);
    }
    let arrived = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut waiting = Vec::new();
    for party in clients.iter().take(2) {
        let latch = party
            .latch("barrier")
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(60))
            .retry(no_polling());
        let arrived = Arc::clone(&arrived);
        waiting.push(tokio::spawn(async move {
            arrived.fetch_add(1, Ordering::SeqCst);
            let opened = latch.barrier(parties).await;
            (opened, arrived.load(Ordering::SeqCst))
        }));
    }
    common::eventually("two parties at the barrier", || {
        let latch = clients[0].latch("barrier");
        // One arrival of the three still expected.
        async move { latch.count().await.unwrap() == 1 }
    })
    .await;
    for w in &waiting {
        assert!(
            !w.is_finished(),
            "a party passed the barrier before the last arrived"
        );
    }
    arrived.fetch_add(1, Ordering::SeqCst);
    let last = clients[2]
        .latch("barrier")
        .ttl(Duration::from_secs(60))
        .barrier(parties)
        .await
        .unwrap();
    assert_eq!(last.expired(), 0);
    for w in waiting {
        let (opened, arrivals) = bounded("the barrier to open", w).await.unwrap();
        let opened = opened.unwrap();
        assert_eq!(
            arrivals, parties,
            "a party passed before every party arrived"
        );
        assert_eq!((opened.counted_down(), opened.expired()), (3, 0));
    }
    // Reusable: the next round is preset afresh.
    assert!(
        clients[0]
            .latch("barrier")
            .try_expect(parties)
            .await
            .unwrap()
    );
}
