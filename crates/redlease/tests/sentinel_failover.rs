//! A planned `SENTINEL FAILOVER` on a healthy deployment: the clients follow the primary
//! the sentinels elect at once, so two clients contending for one lock (one created
//! after the failover) never hold it together and never see a fencing token fall.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{bounded, eventually};
use redis::AsyncCommands as _;
use redlease::{Client, FencingToken, Retry, Wait};
use redlease_local::Sentinel;

async fn exists(port: u16, key: &str) -> bool {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    conn.exists(key).await.unwrap()
}

/// What the contenders saw.
#[derive(Default)]
struct Seen {
    /// Tasks inside the critical section right now (more than one is an overlap).
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    grants: AtomicUsize,
    /// The last token granted, and every fall below it.
    tokens: std::sync::Mutex<(Option<FencingToken>, Vec<String>)>,
}

/// Takes the lock over and over until `stop`, checking exclusion and token order.
async fn contend(client: Client, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> usize {
    let lock = client
        .lock("planned-failover")
        .ttl(Duration::from_secs(3))
        .wait(Wait::For(Duration::from_secs(1)));
    let mut errors = 0;
    while !stop.load(Ordering::Acquire) {
        let guard = match lock.acquire().await {
            Ok(g) => g,
            Err(e) => {
                errors += 1;
                tracing::debug!(error = %e, "acquire failed");
                continue;
            }
        };
        if seen.inside.fetch_add(1, Ordering::AcqRel) != 0 {
            seen.overlaps.fetch_add(1, Ordering::AcqRel);
        }
        seen.grants.fetch_add(1, Ordering::AcqRel);
        {
            let token = guard.fencing_token();
            let mut tokens = seen.tokens.lock().unwrap();
            if let Some(last) = tokens.0
                && token <= last
            {
                tokens.1.push(format!("{last:?} then {token:?}"));
            }
            tokens.0 = Some(token);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        seen.inside.fetch_sub(1, Ordering::AcqRel);
        if guard.release().await.is_err() {
            errors += 1;
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_a_planned_failover_at_once() {
    let mut deployment =
        Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"));
    let old = deployment.primary().unwrap().port();
    let first = bounded(
        "connect through sentinels",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(contend(
            first.clone(),
            Arc::clone(&seen),
            Arc::clone(&stop),
        )));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (deployment, new) = tokio::task::spawn_blocking(move || {
        let new = deployment.failover().unwrap();
        (deployment, new)
    })
    .await
    .unwrap();
    assert_ne!(old, new);

    // Created after the failover: it must connect to the primary the sentinels elected,
    // not to the old one, which still answers as a primary for a while.
    let second = bounded(
        "connect after the failover",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let probe = second.lock("probe");
    let key = probe.keys().unwrap().key().to_owned();
    let guard = bounded("acquire the probe", probe.acquire()).await.unwrap();
    assert!(
        exists(new, &key).await,
        "the client created after the failover is not on the new primary"
    );
    assert!(
        !exists(old, &key).await,
        "the client created after the failover took its lock on the old primary"
    );
    guard.release().await.unwrap();
    for _ in 0..4 {
        tasks.push(tokio::spawn(contend(
            second.clone(),
            Arc::clone(&seen),
            Arc::clone(&stop),
        )));
    }

    // Contend until the sentinels have demoted the old primary (where today's clients
    // notice the failover, and tokens fall), and a little beyond.
    let deployment = tokio::task::spawn_blocking(move || {
        deployment.wait_in_sync(Duration::from_secs(60)).unwrap();
        deployment
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    for task in tasks {
        bounded("a contender stops", task).await.unwrap();
    }
    let grants_before_stop = seen.grants.load(Ordering::Acquire);
    let tokens = seen.tokens.lock().unwrap();
    assert!(
        tokens.1.is_empty(),
        "fencing tokens fell across the failover: {:?}",
        tokens.1
    );
    assert_eq!(
        seen.overlaps.load(Ordering::Acquire),
        0,
        "two holders at once across the failover ({grants_before_stop} grants)"
    );
    assert!(grants_before_stop > 10, "too few grants to tell");
    drop(deployment);
}

/// The grant subscription follows the primary too: a client created before a planned
/// failover is still handed a released lock over pub/sub once the old primary is gone
/// (a subscription left there could not come back, and the waiter would only poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_reach_a_client_created_before_the_failover() {
    let mut deployment =
        Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"));
    let before = bounded(
        "connect through sentinels",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    // A first wait brings this client's grant subscription up on the first primary.
    let warm = before.lock("warm");
    let held = bounded("acquire", warm.acquire()).await.unwrap();
    let early = before
        .lock("warm")
        .wait(Wait::For(Duration::from_millis(50)));
    assert!(bounded("wait briefly", early.acquire()).await.is_err());
    held.release().await.unwrap();

    let old = deployment.primary().unwrap().port();
    let (deployment, new) = tokio::task::spawn_blocking(move || {
        let new = deployment.failover().unwrap();
        deployment.wait_in_sync(Duration::from_secs(60)).unwrap();
        let gone = deployment
            .servers()
            .iter()
            .position(|s| s.port() == old)
            .unwrap();
        deployment.servers_mut()[gone].kill();
        (deployment, new)
    })
    .await
    .unwrap();
    let after = bounded(
        "connect after the failover",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let lock = after.lock("handed-off").ttl(Duration::from_secs(30));
    let queue = lock.keys().unwrap().queue().to_owned();
    let held = bounded("acquire on the new primary", lock.acquire())
        .await
        .unwrap();
    // Polling alone would find the lock free only after 20 s.
    let waiting = before
        .lock("handed-off")
        .retry(Retry::new(
            Duration::from_millis(1),
            Duration::from_secs(20),
        ))
        .wait(Wait::For(Duration::from_secs(60)));
    let waiter = tokio::spawn(async move { waiting.acquire().await });
    let primary = redis::Client::open(format!("redis://127.0.0.1:{new}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    eventually("the waiter queued on the new primary", || {
        let mut primary = primary.clone();
        let queue = queue.clone();
        async move { primary.llen::<_, i64>(&queue).await.unwrap() == 1 }
    })
    .await;
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let guard = bounded("the waiter is handed the lock", waiter)
        .await
        .unwrap()
        .unwrap();
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the waiter got the lock {took:?} after its release: no hand-off reached it"
    );
    guard.release().await.unwrap();
    drop(deployment);
}

/// The primary is the one a majority of the sentinels name: one sentinel down of three
/// still leaves a majority, two down leave none and connecting says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_of_the_sentinels_names_the_primary() {
    let mut deployment =
        Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"));
    let primary = deployment.primary().unwrap().port();
    deployment.sentinels_mut()[0].kill();
    let client = bounded(
        "connect with one sentinel down",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let lock = client.lock("majority");
    let key = lock.keys().unwrap().key().to_owned();
    let guard = bounded("acquire", lock.acquire()).await.unwrap();
    assert!(exists(primary, &key).await);
    guard.release().await.unwrap();

    deployment.sentinels_mut()[1].kill();
    let err = bounded(
        "connect with two sentinels down",
        Client::builder(&deployment.sentinel_url())
            .connect_timeout(Duration::from_secs(1))
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let text = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(text.contains("no majority"), "{text}");
}
