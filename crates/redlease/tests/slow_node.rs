//! A slow or silent node costs a quorum client at most the per-node bound (acquire,
//! release, connect), and no subscription makes a waiter wait past its own wait.
//!
//! The bounds asserted here are liveness bounds with wide margins, not speed: each is far
//! below what the code before them took (named per test).
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, server};
use redlease::{Client, Error};
use redlease_local::{Nodes, Proxy, Reply};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn nodes(n: usize) -> Nodes {
    Nodes::start(n).unwrap_or_else(|e| panic!("cannot start {n} redis-servers: {e}"))
}

/// Four nodes reached directly, the fifth through `proxy`.
fn urls_through(nodes: &Nodes, proxy: &Proxy) -> Vec<String> {
    let mut urls = nodes.urls();
    urls[4] = proxy.url();
    urls
}

/// A lease of 10 s: the per-node bound is a tenth of it, 1 s (below the default 2 s
/// response timeout).
const TTL: Duration = Duration::from_secs(10);
const NODE_BOUND: Duration = Duration::from_secs(1);
/// Slack for a loaded machine on top of a bound.
const MARGIN: Duration = Duration::from_millis(800);

/// A quorum client whose fifth node is silent (a partition that holds every byte) from
/// the start connects once the other four answered. Before: the whole 5 s connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_does_not_wait_for_a_silent_node() {
    let nodes = nodes(5);
    let proxy = Proxy::start(nodes[4].port()).unwrap();
    proxy.cut();
    let t = Instant::now();
    let client = bounded("connect", Client::quorum(urls_through(&nodes, &proxy)))
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(took < NODE_BOUND + MARGIN, "connecting took {took:?}");
    let guard = bounded("acquire", client.lock("c").ttl(TTL).acquire())
        .await
        .unwrap();
    bounded("release", guard.release()).await.unwrap();
    proxy.heal();
}

/// With one of five nodes gone silent: `try_acquire` of a busy lock, `acquire` with a
/// 200 ms wait, and acquiring and releasing a free lock each return within the per-node
/// bound plus a margin. Before: `try_acquire` took the 1 s bound plus a 2 s give-back,
/// the 200 ms wait as long, and the release the whole 2 s response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_costs_at_most_the_per_node_bound() {
    let nodes = nodes(5);
    let proxy = Proxy::start(nodes[4].port()).unwrap();
    let direct = Client::quorum(nodes.urls()).await.unwrap();
    let holder = direct
        .lock("slow")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let client = Client::quorum(urls_through(&nodes, &proxy)).await.unwrap();
    proxy.cut();

    let t = Instant::now();
    let got = bounded("try_acquire", client.lock("slow").ttl(TTL).try_acquire())
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(got.is_none());
    assert!(took < NODE_BOUND + MARGIN, "try_acquire took {took:?}");

    let t = Instant::now();
    let got = bounded(
        "acquire",
        client
            .lock("slow")
            .ttl(TTL)
            .wait(Duration::from_millis(200))
            .acquire(),
    )
    .await;
    let took = t.elapsed();
    assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
    assert!(
        took < Duration::from_millis(200) + NODE_BOUND + MARGIN,
        "a 200 ms wait took {took:?}"
    );

    let guard = bounded(
        "acquire a free lock",
        client.lock("free").ttl(TTL).acquire(),
    )
    .await
    .unwrap();
    let t = Instant::now();
    bounded("release", guard.release()).await.unwrap();
    let took = t.elapsed();
    assert!(took < NODE_BOUND + MARGIN, "release took {took:?}");

    proxy.heal();
    bounded("release", holder.release()).await.unwrap();
}

/// One node 200 ms slow and a lock kept busy: 16 waiters with a 1 s wait each give up
/// within their wait plus the per-node bound. Before: each attempt waited for the slow
/// node (whose replies queue up behind each other) and then for a give-back to it, and
/// waits ran to several seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_does_not_hold_waiters_past_their_wait() {
    let nodes = nodes(5);
    let proxy = Proxy::start(nodes[4].port()).unwrap();
    let direct = Client::quorum(nodes.urls()).await.unwrap();
    let holder = direct
        .lock("slow-busy")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let client = Client::quorum(urls_through(&nodes, &proxy)).await.unwrap();
    proxy.delay_replies(Duration::from_millis(200));

    let wait = Duration::from_secs(1);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let lock = client.lock("slow-busy").ttl(TTL).wait(wait);
            tokio::spawn(async move {
                let t = Instant::now();
                let got = lock.acquire().await;
                (got.map(|_| ()), t.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (got, took) = bounded("a waiter", task).await.unwrap();
        assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
        assert!(
            took < wait + NODE_BOUND + MARGIN,
            "a 1 s wait took {took:?}"
        );
    }
    proxy.delay_replies(Duration::ZERO);
    bounded("release", holder.release()).await.unwrap();
}

/// A listener that forwards its first connection to `target` and accepts every later
/// one without ever answering it (a server that stopped serving new connections).
async fn black_hole_after_first(target: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        let mut first = true;
        while let Ok((mut conn, _)) = listener.accept().await {
            if first {
                first = false;
                tokio::spawn(async move {
                    let mut server = TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut server).await;
                });
            } else {
                held.push(conn);
            }
        }
    });
    port
}

/// The client's own connection works, but its pub/sub connection cannot be made (the
/// server accepts it and never answers): waiters with a 300 ms wait give up within their
/// wait plus a margin, however many wait at once. Before: 20 s (four connect tries of 5 s,
/// under a mutex the other waiters queued behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_subscription_does_not_hold_a_wait() {
    let server = server();
    let holders = client(&server).await;
    let holder = holders
        .lock("bh")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let port = black_hole_after_first(server.port()).await;
    let url = server
        .url()
        .replace(&format!(":{}", server.port()), &format!(":{port}"));
    let waiters = Client::connect(&url).await.unwrap();

    let wait = Duration::from_millis(300);
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let lock = waiters.lock("bh").wait(wait);
            tokio::spawn(async move {
                let t = Instant::now();
                let got = lock.acquire().await;
                (got.map(|_| ()), t.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (got, took) = bounded("a waiter", task).await.unwrap();
        assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
        assert!(
            took < wait + Duration::from_millis(1200),
            "a 300 ms wait took {took:?}"
        );
    }
    // try_acquire never waits for a subscription.
    let t = Instant::now();
    assert!(waiters.lock("bh").try_acquire().await.unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(1));
    holder.release().await.unwrap();
}

/// A lock is taken once a majority granted it, without waiting for a slow node, yet the
/// slow node still gets it (its request completes in the background, first `EVALSHA`,
/// `NOSCRIPT`, then `EVAL` and `SCRIPT LOAD` included), and the release takes it from every
/// node.
/// Guards against the earlier variant that returned at the first majority by dropping
/// the other requests, which left locks on a bare majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_majority_still_reaches_every_node() {
    let nodes = nodes(5);
    let proxy = Proxy::start(nodes[4].port()).unwrap();
    let client = Client::quorum(urls_through(&nodes, &proxy)).await.unwrap();
    proxy.delay_replies(Duration::from_millis(300));
    let key = client.lock("spread").keys().unwrap().key().to_owned();
    let exists = |i: usize| nodes[i].query(&["EXISTS", &key]).unwrap() == Reply::Integer(1);

    let guard = bounded("acquire", client.lock("spread").ttl(TTL).acquire())
        .await
        .unwrap();
    eventually("the slow node to hold the lock too", || async { exists(4) }).await;
    assert!((0..5).all(exists));
    bounded("release", guard.release()).await.unwrap();
    eventually("the lock to leave every node", || async {
        !(0..5).any(exists)
    })
    .await;
    proxy.delay_replies(Duration::ZERO);
}

/// `Client::shutdown` waits for the work a quorum finishes in the background: the slow
/// node's acquisition, which the caller did not wait for, and then its release. Before, it
/// returned while the slow node still held the lock (its release not sent yet), and a
/// process that exited after `shutdown` (`redlease run`) left the lock on that node until
/// its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_slow_nodes_release() {
    let nodes = nodes(5);
    let proxy = Proxy::start(nodes[4].port()).unwrap();
    let client = Client::quorum(urls_through(&nodes, &proxy)).await.unwrap();
    proxy.delay_replies(Duration::from_millis(300));
    let key = client.lock("bye").keys().unwrap().key().to_owned();
    let exists = |i: usize| nodes[i].query(&["EXISTS", &key]).unwrap() == Reply::Integer(1);

    let guard = bounded("acquire", client.lock("bye").ttl(TTL).acquire())
        .await
        .unwrap();
    bounded("release", guard.release()).await.unwrap();
    bounded("shutdown", client.shutdown()).await.unwrap();
    let holding: Vec<usize> = (0..5).filter(|&i| exists(i)).collect();
    assert!(
        holding.is_empty(),
        "nodes {holding:?} still hold the lock after shutdown"
    );
    proxy.delay_replies(Duration::ZERO);
}
