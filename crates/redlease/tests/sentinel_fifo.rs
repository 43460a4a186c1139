//! FIFO order across a Sentinel failover. Waiters of several clients queue in order, the
//! primary is killed (SIGKILL) and replaced, and the holder releases on the new primary at
//! once: the first hand-offs there find some waiters' grant subscriptions not moved yet. Such a
//! waiter keeps its queue place (it is skipped, not dropped), so it is served by the next
//! hand-off after its subscription is back, ahead of every waiter that queued after it,
//! instead of rejoining the queue at its tail.
#![cfg(feature = "sentinel")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::bounded;
use redlease::{Client, Wait};

/// How many waiters queue behind the holder, each with a client of its own.
const WAITERS: usize = 5;
/// How long each waiter holds the lock once it has it: longer than a grant subscription
/// takes to follow the new primary (its reconnection back-off is at most 1 s), so that a
/// waiter skipped by one hand-off is reachable by the next one.
const HOLD: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_keep_their_order_across_a_crashed_primary() {
    let (deployment, _holder, held, _, queue) = common::sentinel::held("fifo-failover").await;
    let url = deployment.sentinel_url();

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let client = bounded("connect a waiter", Client::connect(&url))
            .await
            .unwrap();
        let waiting = client
            .lock("fifo-failover")
            .ttl(Duration::from_secs(10))
            .wait(Wait::For(Duration::from_secs(90)));
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = waiting.acquire().await?;
            order.lock().unwrap().push(i);
            tokio::time::sleep(HOLD).await;
            let released = guard.release().await;
            drop(client);
            released
        }));
        // Queued one after the other.
        common::sentinel::queued(&deployment, &queue, i + 1).await;
    }
    let (deployment, _) = common::sentinel::crash_primary(deployment).await;
    bounded("the holder releases on the new primary", held.release())
        .await
        .unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(120), waiter)
            .await
            .unwrap_or_else(|_| panic!("a waiter did not finish within its wait"))
            .unwrap()
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), WAITERS);
    // The first hand-off on the new primary goes to whoever is reachable then; every
    // later one to the oldest waiter left, skipped or not.
    let rest = &order[1..];
    assert!(
        rest.windows(2).all(|w| w[0] < w[1]),
        "waiters (in queue order 0..{WAITERS}) served in the order {order:?}: a waiter skipped \
         during the failover lost its place"
    );
    drop(deployment);
}
