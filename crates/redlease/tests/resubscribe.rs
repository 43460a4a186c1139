//! Subscriptions come back after an outage of any length: the grant channel of a single
//! Redis (FIFO hand-offs) and the release channels of a quorum's nodes.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, llen, no_polling, server, subscribers};
use redlease::{Client, Error};
use redlease_local::{Nodes, RedisServer, Reply};
use tokio::sync::mpsc;

/// Longer than the few quick reconnection tries a connection manager makes by itself.
const OUTAGE: Duration = Duration::from_millis(600);

/// Kills `server`, keeps it down for [`OUTAGE`], and starts it again on the same port.
async fn outage(server: &mut RedisServer) {
    server.kill();
    tokio::time::sleep(OUTAGE).await;
    server.restart().unwrap();
}

/// The grant channels subscribed on `server` (one per client whose waiters queued).
fn grant_channels(server: &RedisServer) -> Vec<String> {
    let reply = server
        .query(&["PUBSUB", "CHANNELS", "redlease:grant:*"])
        .unwrap();
    reply
        .array()
        .unwrap_or_else(|| panic!("unexpected PUBSUB CHANNELS reply {reply:?}"))
        .iter()
        .map(|r| r.text().unwrap().into_owned())
        .collect()
}

/// Until a command goes through `client` again (its own connection reconnects on use).
async fn usable(client: &Client) {
    eventually("the client to reach Redis again", || async {
        client.lock("probe").try_acquire().await.is_ok()
    })
    .await;
}

async fn queue_len(server: &RedisServer, client: &Client, name: &str) -> i64 {
    let keys = client.lock(name).keys().unwrap();
    let mut conn = common::raw(server).await;
    llen(&mut conn, keys.queue()).await
}

/// Queues `n` waiters of `waiters` on `name` (held by someone else) one after another,
/// then returns their tasks; each reports its index on `tx` once it holds the lock.
async fn queue_waiters(
    server: &RedisServer,
    waiters: &Client,
    name: &str,
    n: i64,
    tx: &mpsc::UnboundedSender<i64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let lock = waiters
            .lock(name)
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(25))
            .retry(no_polling());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            tx.send(i).unwrap();
            guard.release().await.unwrap();
        }));
        eventually("the waiter to queue up", || async {
            queue_len(server, waiters, name).await == i + 1
        })
        .await;
    }
    tasks
}

/// After Redis was down for longer than a few quick reconnection tries, the client's
/// grant channel is subscribed again, and released locks are handed to its waiters in
/// arrival order (without the subscription, each release would skip them: they would
/// wait for their 60 s back-off instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_subscription_comes_back_after_a_long_outage() {
    let mut server = server();
    let holders = client(&server).await;
    let waiters = client(&server).await;

    // One hand-off before the outage: the waiters' client subscribed.
    let holder = holders
        .lock("fifo")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tasks = queue_waiters(&server, &waiters, "fifo", 1, &tx).await;
    let channels = grant_channels(&server);
    assert_eq!(channels.len(), 1, "{channels:?}");
    let channel = channels[0].clone();
    holder.release().await.unwrap();
    for t in tasks {
        bounded("the first hand-off", t).await.unwrap();
    }
    assert_eq!(rx.recv().await, Some(0));

    outage(&mut server).await;
    eventually("the grant channel to be subscribed again", || async {
        subscribers(&server, &channel) == 1
    })
    .await;

    usable(&holders).await;
    usable(&waiters).await;
    let holder = holders
        .lock("fifo")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let tasks = queue_waiters(&server, &waiters, "fifo", 3, &tx).await;
    holder.release().await.unwrap();
    for t in tasks {
        bounded("hand-offs after the outage", t).await.unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(order, vec![0, 1, 2]);
}

async fn quorum(urls: &[String]) -> Client {
    Client::quorum_builder(urls)
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap()
}

/// Each quorum node restarted in turn, each down longer than a few quick reconnection
/// tries: a waiter's release-notice subscription is back on every node, and the release
/// wakes it (its back-off and the holder's lease are far longer than the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_release_subscriptions_come_back_on_every_node() {
    let mut nodes = Nodes::start(5).unwrap_or_else(|e| panic!("cannot start 5 redis-servers: {e}"));
    let urls = nodes.urls();
    let holders = quorum(&urls).await;
    let waiters = quorum(&urls).await;
    let channel = holders.lock("q-resub").keys().unwrap().channel().to_owned();
    let holder = bounded(
        "acquire",
        holders
            .lock("q-resub")
            .ttl(Duration::from_secs(60))
            .acquire(),
    )
    .await
    .unwrap();
    let waiter = {
        let lock = waiters
            .lock("q-resub")
            .wait(Duration::from_secs(60))
            .retry(no_polling());
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter to listen on every node", || async {
        nodes
            .servers()
            .iter()
            .all(|s| subscribers(s, &channel) == 1)
    })
    .await;

    let keys = holders.lock("q-resub").keys().unwrap();
    let (key, fence) = (keys.key().to_owned(), keys.fence().to_owned());
    let mut waiter = waiter;
    for i in 0..nodes.len() {
        // The node comes back with the lock and its fencing counter, as a node that
        // persists its data would.
        // A node whose part of the holder's acquisition answered too late on a loaded
        // machine was given back: it holds nothing to restore.
        let text = |reply: Reply| reply.text().map(std::borrow::Cow::into_owned);
        let held = text(nodes[i].query(&["GET", &key]).unwrap());
        let counter = text(nodes[i].query(&["GET", &fence]).unwrap());
        outage(&mut nodes[i]).await;
        for (k, value, px) in [(&key, held, "60000"), (&fence, counter, "600000")] {
            let Some(value) = value else { continue };
            let restored = nodes[i].query(&["SET", k, &value, "PX", px]).unwrap();
            assert_eq!(restored, Reply::Status("OK".into()));
        }
        let node = &nodes[i];
        eventually(
            "the restarted node to carry the subscription again",
            || async { subscribers(node, &channel) == 1 || waiter.is_finished() },
        )
        .await;
        if waiter.is_finished() {
            let outcome = (&mut waiter).await.unwrap().map(|_| ());
            panic!("the waiter stopped waiting after node {i} restarted: {outcome:?}");
        }
    }
    assert!(
        nodes
            .servers()
            .iter()
            .all(|s| subscribers(s, &channel) == 1)
    );

    // The holder's own connections broke at each restart; they reconnect when used. Use
    // them until a lock reaches every node, so that the release below does too.
    let probe = holders.lock("probe").keys().unwrap().key().to_owned();
    eventually("the holder's client to reach every node again", || async {
        let Ok(Some(guard)) = holders.lock("probe").try_acquire().await else {
            return false;
        };
        let everywhere = nodes
            .servers()
            .iter()
            .all(|s| s.query(&["EXISTS", &probe]).unwrap() == Reply::Integer(1));
        let _ = guard.release().await;
        everywhere
    })
    .await;

    let released = holder.fencing_token();
    bounded("release", holder.release()).await.unwrap();
    let guard = bounded("the woken waiter", waiter)
        .await
        .unwrap()
        .unwrap_or_else(|e: Error| panic!("the waiter failed: {e}"));
    assert!(guard.fencing_token() > released);
    bounded("release", guard.release()).await.unwrap();
}

/// Releases with `release`, then checks that the waiter (which sends the instant it took
/// the lock on `taken`) took it within 2 s: far below its 5 s retry ceiling.
async fn taken_soon(
    release: impl Future<Output = redlease::Result<()>>,
    taken: mpsc::UnboundedReceiver<tokio::time::Instant>,
    waiter: tokio::task::JoinHandle<()>,
) {
    taken_within(Duration::from_secs(2), release, taken, waiter).await;
}

/// Releases with `release`, then checks that the waiter (which sends the instant it took
/// the lock on `taken`) took it within `bound`.
async fn taken_within(
    bound: Duration,
    release: impl Future<Output = redlease::Result<()>>,
    mut taken: mpsc::UnboundedReceiver<tokio::time::Instant>,
    waiter: tokio::task::JoinHandle<()>,
) {
    let released = tokio::time::Instant::now();
    release.await.unwrap();
    let taken = bounded("the waiter to take the lock", taken.recv())
        .await
        .unwrap();
    assert!(
        taken - released < bound,
        "taken {:?} after the release",
        taken - released
    );
    bounded("the waiter", waiter).await.unwrap();
}

/// A waiter whose pub/sub link is down hears of no release until the link is back, which
/// its reconnection back-off may delay by up to a second (Redis restarted, the link
/// killed): meanwhile it polls at the outage cadence rather than sleeping for its retry
/// ceiling, so that a lock released in between is not left free (here the link stays
/// down, and the ceiling is 5 s: the waiter must take the lock long before that; it took
/// 5 s before this rule, and a Redis restart left rwlock locks free for 110-200 ms in
/// `make chaos`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_link_is_down_still_takes_a_released_lock_soon() {
    let server = server();
    let holders = client(&server).await;
    let waiters = client(&server).await;
    let slow = redlease::Retry::new(Duration::from_millis(1), Duration::from_secs(5));

    let holder = holders.lock("down-lock").acquire().await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let lock = waiters
        .lock("down-lock")
        .wait(Duration::from_secs(25))
        .retry(slow);
    let waiter = tokio::spawn(async move {
        let guard = lock.acquire().await.unwrap();
        tx.send(tokio::time::Instant::now()).unwrap();
        guard.release().await.unwrap();
    });
    eventually("the waiter to queue up", || async {
        queue_len(&server, &waiters, "down-lock").await == 1
    })
    .await;
    common::retried_after(common::links_down(&server).await).await;

    taken_soon(holder.release(), rx, waiter).await;
}

/// The same for a read-write lock's waiter, which keeps a silent place in the queue while
/// its link is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_waiter_whose_link_is_down_still_takes_a_released_lock_soon() {
    let server = server();
    let holders = client(&server).await;
    let waiters = client(&server).await;
    let slow = redlease::Retry::new(Duration::from_millis(1), Duration::from_secs(5));

    let holder = holders.rwlock("down-rw").write().acquire().await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let lock = waiters
        .rwlock("down-rw")
        .write()
        .wait(Duration::from_secs(25))
        .retry(slow);
    let waiter = tokio::spawn(async move {
        let guard = lock.acquire().await.unwrap();
        tx.send(tokio::time::Instant::now()).unwrap();
        guard.release().await.unwrap();
    });
    let keys = waiters.rwlock("down-rw").keys().unwrap();
    let conn = common::raw(&server).await;
    // Its first attempt keeps a silent place before its client has a link (the mutex's
    // waiter queues only once it listens): wait for the link too, so that there is one
    // to cut.
    eventually("the waiter to queue up and listen", || {
        let mut conn = conn.clone();
        let queue = keys.queue().to_owned();
        let server = &server;
        async move { llen(&mut conn, &queue).await == 1 && pubsub_links(server) >= 1 }
    })
    .await;
    common::retried_after(common::links_down(&server).await).await;

    taken_soon(holder.release(), rx, waiter).await;
}

/// How many pub/sub connections `server` has (`CLIENT LIST TYPE pubsub`).
fn pubsub_links(server: &RedisServer) -> usize {
    match server.query(&["CLIENT", "LIST", "TYPE", "pubsub"]).unwrap() {
        Reply::Bulk(list) => String::from_utf8_lossy(&list).lines().count(),
        other => panic!("unexpected CLIENT LIST reply {other:?}"),
    }
}

/// Kills every pub/sub connection of `server`; how many there were.
fn kill_links(server: &RedisServer) -> i64 {
    match server.query(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap() {
        Reply::Integer(killed) => killed,
        other => panic!("unexpected CLIENT KILL reply {other:?}"),
    }
}

/// A grant subscription killed as soon as it comes back, again and again, backs off longer
/// each time before reconnecting (up to a second). A waiter that starts meanwhile does not
/// wait for it: it polls, and takes a lock released in between within a few polls. (The
/// chaos suite's "CLIENT KILL TYPE pubsub" row saw the last waiter of a run sit 115-175 ms
/// beside a free lock, waiting for its link to come back before it would queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_does_not_wait_for_a_link_that_backs_off() {
    let server = server();
    let holders = client(&server).await;
    let waiters = client(&server).await;
    let lock = waiters
        .lock("flapping")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(5));

    // One hand-off: the waiters' client subscribed.
    let holder = holders.lock("flapping").acquire().await.unwrap();
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.unwrap().release().await.unwrap() }
    });
    eventually("the waiter's grant channel", || async {
        !grant_channels(&server).is_empty()
    })
    .await;
    holder.release().await.unwrap();
    bounded("the first hand-off", first).await.unwrap();

    // Each connection of the link lives a few ms: it backs off longer each time.
    let flapping = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < flapping {
        kill_links(&server);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Once more as soon as it is back: the link backs off now, for half a second or more.
    eventually("the link to come back once more", || async {
        kill_links(&server) > 0
    })
    .await;

    let holder = holders.lock("flapping").acquire().await.unwrap();
    let (tx, taken) = mpsc::unbounded_channel();
    let waiter = tokio::spawn(async move {
        let guard = lock.acquire().await.unwrap();
        tx.send(tokio::time::Instant::now()).unwrap();
        guard.release().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // It polls at the outage cadence (50 ms at most); before, it took 0.7-0.9 s.
    taken_within(Duration::from_millis(300), holder.release(), taken, waiter).await;
}
