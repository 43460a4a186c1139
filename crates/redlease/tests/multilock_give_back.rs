//! A multi-lock that cannot take every name returns its error by the end of its wait,
//! however many names it must give back and however slow Redis is to answer, and the
//! names it took are given back (in the background once the wait has run out).
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Wait};
use redlease_local::Proxy;
use tokio::time::Instant;

/// How far past its wait an acquisition may return: a generous bound showing that the
/// wait is honoured (one response timeout for an attempt in flight, and scheduling), not
/// a speed figure.
const LATE: Duration = Duration::from_secs(1);

/// How many of `keys` exist.
async fn existing(conn: &redis::aio::MultiplexedConnection, keys: &[String]) -> usize {
    let mut conn = conn.clone();
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.exists(key);
    }
    let found: Vec<bool> = pipe.query_async(&mut conn).await.unwrap();
    found.into_iter().filter(|f| *f).count()
}

/// Cuts `proxy` (every byte held from then on), off the runtime's threads: a cut waits for
/// chunks already being written past the proxy.
async fn cut(proxy: Proxy) -> Proxy {
    tokio::task::spawn_blocking(move || {
        proxy.cut();
        proxy
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_cut_off_from_redis_returns_at_its_deadline_and_gives_its_names_back() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let conn = raw(&server).await;
    let holder = client(&server).await;
    let names: Vec<String> = (1..=9).map(|i| format!("cut-{i}")).collect();
    let busy = holder
        .lock(names[8].as_str())
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let multi = waiter
        .multi_lock(names.clone())
        .ttl(Duration::from_secs(60))
        .wait(Wait::For(Duration::from_secs(3)));
    let keys: Vec<String> = names
        .iter()
        .map(|n| waiter.lock(n.as_str()).keys().unwrap().key().to_owned())
        .collect();
    let queue = waiter
        .lock(names[8].as_str())
        .keys()
        .unwrap()
        .queue()
        .to_owned();
    let started = Instant::now();
    let acquiring = tokio::spawn(async move { multi.acquire().await });
    // Redis goes away once the multi-lock holds eight names and queues for the ninth.
    eventually(
        "the multi-lock to take eight names and queue for the ninth",
        || {
            let (conn, keys, queue) = (conn.clone(), keys.clone(), queue.clone());
            async move {
                let mut c = conn.clone();
                let queued: i64 = c.llen(&queue).await.unwrap();
                existing(&conn, &keys[..8]).await == 8 && queued > 0
            }
        },
    )
    .await;
    let proxy = cut(proxy).await;
    let taken = bounded("the multi-lock", acquiring).await.unwrap();
    let took = started.elapsed();
    assert!(
        matches!(taken, Err(Error::Timeout { .. } | Error::Redis { .. })),
        "{taken:?}"
    );
    assert!(
        took < Duration::from_secs(3) + LATE,
        "a 3 s wait returned after {took:?}"
    );
    // Redis comes back: the eight names are given back, long before their 60 s lease.
    proxy.heal();
    eventually("the eight names to be given back", || {
        let (conn, keys) = (conn.clone(), keys.clone());
        async move { existing(&conn, &keys[..8]).await == 0 }
    })
    .await;
    assert!(busy.is_held());
    assert_eq!(existing(&conn, &keys[8..]).await, 1);
    busy.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_of_many_names_returns_at_its_deadline_and_gives_them_back() {
    const NAMES: usize = 20_000;
    let server = server();
    let conn = raw(&server).await;
    let client = client(&server).await;
    let names: Vec<String> = (0..NAMES).map(|i| format!("{{many}}{i:05}")).collect();
    let busy = client
        .lock(names[NAMES - 1].as_str())
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let keys: Vec<String> = names
        .iter()
        .map(|n| client.lock(n.as_str()).keys().unwrap().key().to_owned())
        .collect();
    let multi = client
        .multi_lock(names)
        .ttl(Duration::from_secs(60))
        .wait(Wait::For(Duration::from_millis(500)));
    let started = Instant::now();
    let taken = bounded("the multi-lock", multi.acquire()).await;
    let took = started.elapsed();
    assert!(matches!(taken, Err(Error::Timeout { .. })), "{taken:?}");
    assert!(
        took < Duration::from_millis(500) + LATE,
        "a 500 ms wait returned after {took:?}"
    );
    eventually("every name to be given back", || {
        let (conn, keys) = (conn.clone(), keys.clone());
        async move { existing(&conn, &keys[..NAMES - 1]).await == 0 }
    })
    .await;
    busy.release().await.unwrap();
}

/// What a multi-lock whose wait ran out gives back (the names it took, its queue place)
/// is the client's background work, which `Client::shutdown` waits for, also while Redis
/// is out of reach (here 300 ms): a program that returns from `main` after `shutdown`
/// (`redlease run` exits so) leaves no name taken until its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_names_a_multi_lock_gives_back() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let conn = raw(&server).await;
    let holder = client(&server).await;
    let busy = holder
        .lock("late-b")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = Client::connect(&proxy.url()).await.unwrap();
    let a = waiter.lock("late-a").keys().unwrap().key().to_owned();
    let queue = waiter.lock("late-b").keys().unwrap().queue().to_owned();
    let multi = waiter
        .multi_lock(["late-a", "late-b"])
        .ttl(Duration::from_secs(60))
        .wait(Wait::For(Duration::from_millis(800)));
    let acquiring = tokio::spawn(async move { multi.acquire().await });
    eventually("the multi-lock to take late-a and queue for late-b", || {
        let (conn, a, queue) = (conn.clone(), a.clone(), queue.clone());
        async move {
            let mut c = conn.clone();
            let queued: i64 = c.llen(&queue).await.unwrap();
            existing(&conn, std::slice::from_ref(&a)).await == 1 && queued > 0
        }
    })
    .await;
    // Redis out of reach until after the wait ran out: late-a's give-back is held up.
    let proxy = cut(proxy).await;
    let taken = bounded("the multi-lock", acquiring).await.unwrap();
    assert!(matches!(taken, Err(Error::Timeout { .. })), "{taken:?}");
    let closing = waiter.clone();
    let shutdown = tokio::spawn(async move { closing.shutdown().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !shutdown.is_finished(),
        "shutdown returned while late-a's give-back could not reach Redis"
    );
    proxy.heal();
    bounded("shutdown", shutdown).await.unwrap().unwrap();
    assert_eq!(
        existing(&conn, std::slice::from_ref(&a)).await,
        0,
        "late-a is still taken after shutdown"
    );
    busy.release().await.unwrap();
}
