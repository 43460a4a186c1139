//! Waiting: hand-off on release instead of polling, FIFO order, cancel safety, and a lost
//! reply that must not make us wait for our own lock.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    clippy::print_stdout,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, get, llen, no_polling, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Wait};
use redlease_local::Proxy;
use tokio::sync::mpsc;

async fn queue_len(conn: &redis::aio::MultiplexedConnection, client: &Client, name: &str) -> i64 {
    let keys = client.lock(name).keys().unwrap();
    llen(&mut conn.clone(), keys.queue()).await
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_by_polling() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let conn = raw(&server).await;
    // The holder's lease outlasts the wait, and the back-off is longer than both: only a
    // release notification can get the waiter in before its wait runs out.
    let holder = holder_client
        .lock("wake")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("wake")
            .wait(Duration::from_secs(20))
            .retry(no_polling())
            .acquire()
            .await
    });
    eventually("the waiter to queue up", || async {
        queue_len(&conn, &holder_client, "wake").await == 1
    })
    .await;
    let released_fence = holder.fencing_token();
    holder.release().await.unwrap();
    let guard = bounded("the woken waiter", waiter).await.unwrap().unwrap();
    assert!(guard.fencing_token() > released_fence);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let holder = c.lock("fifo").acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..5_i64 {
        let lock = c
            .lock("fifo")
            .wait(Duration::from_secs(20))
            .retry(no_polling());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            tx.send(i).unwrap();
            guard.release().await.unwrap();
        }));
        // Let each waiter queue up before the next one arrives.
        eventually("the waiter to queue up", || async {
            queue_len(&conn, &c, "fifo").await == i + 1
        })
        .await;
    }
    holder.release().await.unwrap();
    for t in tasks {
        bounded("waiters", t).await.unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn a_dropped_acquire_leaves_nothing_behind() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let keys = c.lock("abandoned").keys().unwrap();
    let holder = c.lock("abandoned").acquire().await.unwrap();
    let waiting = {
        let lock = c.lock("abandoned").wait(Wait::Forever);
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter to queue up", || async {
        queue_len(&conn, &c, "abandoned").await == 1
    })
    .await;
    assert_eq!(c.waiting(), 1);
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(c.waiting(), 0, "the dropped waiter is still registered");
    eventually("the queue to empty", || async {
        queue_len(&conn, &c, "abandoned").await == 0
    })
    .await;
    let waiters: i64 = conn.hlen(keys.waiters()).await.unwrap();
    assert_eq!(waiters, 0);
    // No per-waiter subscription: nobody listens on the lock's channel, and the client's
    // one shared grant subscription is all there is.
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(keys.channel())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(subscribers, 0);
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(channels.len(), 1, "{channels:?}");
    // The release is not handed to the departed waiter: the lock is simply free.
    holder.release().await.unwrap();
    assert_eq!(get(&mut conn, keys.key()).await, None);
}

#[tokio::test]
async fn a_waiter_that_times_out_leaves_the_queue() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let holder = c.lock("short-wait").acquire().await.unwrap();
    let err = c
        .lock("short-wait")
        .wait(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("short-wait"));
    eventually("the queue to empty", || async {
        queue_len(&conn, &c, "short-wait").await == 0
    })
    .await;
    holder.release().await.unwrap();
    let again = c.lock("short-wait").try_acquire().await.unwrap();
    assert!(
        again.is_some(),
        "the timed-out waiter got the lock after all"
    );
}

#[tokio::test]
async fn a_retry_after_a_lost_reply_finds_its_own_lock() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = Client::connect(&proxy.url()).await.unwrap();
    let mut conn = raw(&server).await;
    // The acquire script runs, but its reply is lost and the connection cut. The retry
    // must recognise our own token rather than wait for the lock until its TTL.
    proxy.lose_next_reply();
    let guard = bounded(
        "acquire after a lost reply",
        c.lock("lost-reply")
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(2))
            .acquire(),
    )
    .await
    .unwrap();
    assert_eq!(proxy.lost_replies(), 1, "the proxy did not lose the reply");
    // Each grant reads the server's TIME once (the hybrid-clock fencing rule): one grant.
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        info.contains("cmdstat_time:calls=1,"),
        "the first attempt's grant is the one we hold, not a second one: {info}"
    );
    let key = c.lock("lost-reply").keys().unwrap().key().to_owned();
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0);
    guard.release().await.unwrap();
    assert_eq!(get(&mut conn, &key).await, None);
}

/// A queued waiter that takes a lock whose holder crashed must leave the queue, or the
/// release would hand the lock to its own stale place and orphan it until the TTL.
#[tokio::test]
async fn a_waiter_taking_an_expired_lock_leaves_the_queue() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let keys = c.lock("crashed").keys().unwrap();
    let crashed = c
        .lock("crashed")
        .ttl(Duration::from_millis(100))
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed); // the holder "crashes": no release, the lease expires
    let guard = c
        .lock("crashed")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        llen(&mut conn, keys.queue()).await,
        0,
        "the new holder is still queued"
    );
    guard.release().await.unwrap();
    assert_eq!(
        get(&mut conn, keys.key()).await,
        None,
        "the release orphaned the lock"
    );
}

/// Queued waiters send nothing while the lock is held: each comes back only when the
/// holder's lease can have ended (a renewed lease is found busy again, with its new end),
/// not every `retry.max` (200 ms). Counted by Redis (`INFO commandstats`) over a window of
/// two leases of a held, renewed lock: at most one attempt per waiter per two thirds of a
/// lease (the holder renews every third), plus the holder's renewals. Before: about ten
/// attempts per waiter per lease of 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_stay_silent_until_the_holders_lease_can_end() {
    const WAITERS: u64 = 20;
    const TTL: Duration = Duration::from_secs(2);
    const WINDOW: Duration = Duration::from_secs(4);
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let mut conn = raw(&server).await;
    let held = holder_client
        .lock("idle-queue")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let waiter_client = waiter_client.clone();
            tokio::spawn(async move {
                let guard = waiter_client
                    .lock("idle-queue")
                    .ttl(TTL)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                guard.release().await
            })
        })
        .collect();
    eventually("every waiter queued", || async {
        queue_len(&conn, &holder_client, "idle-queue").await == i64::try_from(WAITERS).unwrap()
    })
    .await;
    common::commands_run(&mut conn).await;
    let before = common::evalsha_calls(&mut conn).await;
    // The measurement's window (a rate needs one), not a synchronisation.
    tokio::time::sleep(WINDOW).await;
    let requests = common::evalsha_calls(&mut conn).await - before;
    let commands = common::commands_run(&mut conn).await;
    let per_window = |interval: Duration| WINDOW.as_millis() / interval.as_millis() + 1;
    let renewals = u64::try_from(per_window(TTL / 3)).unwrap();
    let rechecks = u64::try_from(per_window(TTL * 2 / 3)).unwrap();
    println!(
        "{WAITERS} queued waiters over {WINDOW:?} of a held {TTL:?} lease: {requests} requests \
         ({commands} Redis commands), the holder's renewals included"
    );
    assert!(
        requests <= WAITERS * rechecks + renewals,
        "{requests} requests: at most {rechecks} per waiter and {renewals} renewals expected"
    );
    held.release().await.unwrap();
    for waiter in waiters {
        bounded("a waiter's turn", waiter).await.unwrap().unwrap();
    }
}
