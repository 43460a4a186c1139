//! A guard's claim stays true for the lease's whole life, not only at the grant: a
//! shortening extend that is dropped or fails, an extend re-sent after `NOSCRIPT` while a
//! renewal falls due, and a link that goes silent under a held lease.
//!
//! Each test reads the truth (the key's `PTTL`) on a connection of its own that bypasses
//! the proxy the client talks through.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, raw, server};
use redlease::{Client, Guard, LeaseHealth};
use redlease_local::{Proxy, RedisServer};
use tokio::time::Instant;

/// The key of the lock `name` under the default prefix.
fn key(name: &str) -> String {
    format!("redlease:{name}")
}

/// A client on `server` through a proxy the test can slow down or cut.
async fn through_proxy(server: &RedisServer) -> (Proxy, Client) {
    let proxy = Proxy::start(server.port()).unwrap();
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    (proxy, client)
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// Samples the guard's claim against the key's `PTTL` for two seconds (longer than the
/// shortened lease): the claim never exceeds what Redis keeps, and the renewals, now of the
/// shorter length, keep the lease alive throughout.
async fn claim_within_truth(server: &RedisServer, guard: &Guard, key: &str) {
    let mut conn = raw(server).await;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let claimed = guard.remaining();
        let left = pttl(&mut conn, key).await;
        // Read after the claim: Redis' side can only have shrunk meanwhile, so a true
        // claim is at most what is left plus the read's own time (bounded by 50 ms here).
        assert!(
            left >= 0 && claimed <= Duration::from_millis(u64::try_from(left).unwrap() + 50),
            "the guard claims {claimed:?}, Redis keeps the lease {left} ms"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(guard.is_held(), "renewals of the shorter lease stopped");
}

/// An extend to 1 s of a 30 s lease, dropped while its reply is on the way (the extend ran
/// in Redis): the claim is 1 s at most, and renewals go on at 1 s. Before: the guard kept
/// its 30 s claim while Redis expired the key after 1 s and another client took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_shortening_extend_lowers_the_claim() {
    let server = server();
    let (proxy, client) = through_proxy(&server).await;
    let mut guard = bounded(
        "acquire",
        client
            .lock("dropped")
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await
    .unwrap();
    proxy.delay_replies(Duration::from_millis(400));
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        guard.extend(Duration::from_secs(1)),
    )
    .await;
    assert!(dropped.is_err(), "the extend's reply came back early");
    assert!(
        guard.remaining() <= Duration::from_secs(1),
        "claims {:?} after a dropped extend to 1 s",
        guard.remaining()
    );
    proxy.delay_replies(Duration::ZERO);
    claim_within_truth(&server, &guard, &key("dropped")).await;
}

/// The same for a semaphore's permit and for every lock of a multi-lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_shortening_extend_lowers_a_permits_and_a_multi_locks_claim() {
    let server = server();
    let (proxy, client) = through_proxy(&server).await;
    let mut permit = bounded(
        "permit",
        client
            .semaphore("permits", 2)
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await
    .unwrap();
    let mut both = bounded(
        "multi-lock",
        client
            .multi_lock(["m1", "m2"])
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await
    .unwrap();
    proxy.delay_replies(Duration::from_millis(400));
    let short = Duration::from_secs(1);
    let dropped = tokio::time::timeout(Duration::from_millis(50), permit.extend(short)).await;
    assert!(dropped.is_err(), "the permit's extend came back early");
    let dropped = tokio::time::timeout(Duration::from_millis(50), both.extend(short)).await;
    assert!(dropped.is_err(), "the multi-lock's extend came back early");
    assert!(
        permit.remaining() <= short,
        "the permit claims {:?}",
        permit.remaining()
    );
    // A multi-lock's extend is sent lock by lock: the first was sent, and only it may
    // have been shortened in Redis.
    let first = &both.guards()[0];
    assert!(
        first.remaining() <= short,
        "the multi-lock's first lock claims {:?}",
        first.remaining()
    );
    proxy.delay_replies(Duration::ZERO);
    claim_within_truth(&server, first, &key(first.name())).await;
    assert!(permit.is_held(), "renewals of the shorter permit stopped");
}

/// An extend to 1 s whose reply comes after the response timeout fails, yet it ran: the
/// claim keeps the lower value. Before: 30 s claimed, key gone after 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortening_extend_that_times_out_keeps_the_lower_claim() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let mut guard = bounded(
        "acquire",
        client.lock("late").ttl(Duration::from_secs(30)).acquire(),
    )
    .await
    .unwrap();
    proxy.delay_replies(Duration::from_millis(600));
    let failed = bounded("extend", guard.extend(Duration::from_secs(1))).await;
    assert!(failed.is_err(), "the extend got its reply in time");
    assert!(
        guard.remaining() <= Duration::from_secs(1),
        "claims {:?} after a failed extend to 1 s",
        guard.remaining()
    );
    proxy.delay_replies(Duration::ZERO);
    claim_within_truth(&server, &guard, &key("late")).await;
}

/// A renewal falls due while an extend waits to be re-sent after `NOSCRIPT` (the extend
/// script was flushed, the renewal script is loaded): Redis runs the renewal first and the
/// extend's retry after it. Before: the renewal's reply (sent later) won, and the guard
/// claimed about 3 s while Redis held the lease for 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_resent_after_noscript_is_not_overtaken_by_a_renewal() {
    let server = server();
    let (proxy, client) = through_proxy(&server).await;
    let ttl = Duration::from_secs(3);
    let started = Instant::now();
    let mut guard = bounded("acquire", client.lock("reload").ttl(ttl).acquire())
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(include_str!("../scripts/lock_renew.lua"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // The renewal falls due a third of the ttl after the acquisition was sent: send the
    // extend 150 ms before, so that its NOSCRIPT reply (250 ms late) comes after it.
    tokio::time::sleep_until(started + ttl / 3 - Duration::from_millis(150)).await;
    proxy.delay_replies(Duration::from_millis(250));
    bounded("extend", guard.extend(Duration::from_secs(1)))
        .await
        .unwrap();
    let claimed = guard.remaining();
    let left = pttl(&mut conn, &key("reload")).await;
    proxy.delay_replies(Duration::ZERO);
    assert!(
        claimed <= Duration::from_millis(u64::try_from(left.max(0)).unwrap()),
        "the guard claims {claimed:?}, Redis keeps the lease {left} ms"
    );
}

/// A link that goes silent under a held lease (every byte held, no reset): the holder is
/// told `Retrying` within a third of the ttl of the first renewal that got no answer, and
/// the loss comes at least a twentieth of the ttl before Redis can expire the key. Before:
/// no `Retrying` until the lease's end, and the loss 32 ms (the drift allowance) before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_link_warns_early_and_reports_the_loss_with_a_margin() {
    let server = server();
    let (proxy, client) = through_proxy(&server).await;
    let ttl = Duration::from_secs(3);
    let started = Instant::now();
    let guard = bounded("acquire", client.lock("silent").ttl(ttl).acquire())
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    proxy.cut();
    let mut health = guard.health();
    bounded(
        "retrying",
        health.wait_for(|h| matches!(h, LeaseHealth::Retrying { .. } | LeaseHealth::Lost)),
    )
    .await
    .unwrap();
    let warned = started.elapsed();
    assert!(
        matches!(*health.borrow(), LeaseHealth::Retrying { .. }),
        "lost without a warning first"
    );
    // The first renewal is sent a third of the ttl in: the warning is due within a third
    // of the ttl after it (a loaded machine gets 500 ms more).
    assert!(
        warned <= ttl * 2 / 3 + Duration::from_millis(500),
        "`Retrying` came {warned:?} after the acquisition"
    );
    bounded("lost", guard.lost()).await;
    let left = pttl(&mut conn, &key("silent")).await;
    proxy.heal();
    let margin = i64::try_from((ttl / 20).as_millis()).unwrap();
    assert!(
        left >= margin - 20,
        "the loss came when Redis kept the key {left} ms more, less than a twentieth of the ttl ({margin} ms)"
    );
}

/// Over a quorum of three (each node behind a proxy that delays replies), an extend to 1 s
/// dropped in flight: the claim is lowered as on one node. Before: 30 s claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_shortening_extend_lowers_a_quorum_claim() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let proxies: Vec<Proxy> = nodes
        .servers()
        .iter()
        .map(|s| Proxy::start(s.port()).unwrap())
        .collect();
    let client = bounded(
        "connect",
        Client::quorum(proxies.iter().map(Proxy::url).collect::<Vec<_>>()),
    )
    .await
    .unwrap();
    let mut guard = bounded(
        "acquire",
        client.lock("quorum").ttl(Duration::from_secs(30)).acquire(),
    )
    .await
    .unwrap();
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(400));
    }
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        guard.extend(Duration::from_secs(1)),
    )
    .await;
    assert!(dropped.is_err(), "the extend's replies came back early");
    assert!(
        guard.remaining() <= Duration::from_secs(1),
        "claims {:?} after a dropped extend to 1 s",
        guard.remaining()
    );
    for proxy in &proxies {
        proxy.delay_replies(Duration::ZERO);
    }
    for server in nodes.servers() {
        claim_within_truth(server, &guard, &key("quorum")).await;
    }
}

/// The blocking API, from `spawn_blocking`: an extend to 1 s that times out keeps the
/// lower claim. Before: 30 s claimed.
#[cfg(feature = "blocking")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_shortening_extend_that_times_out_keeps_the_lower_claim() {
    let server = server();
    let proxy = std::sync::Arc::new(Proxy::start(server.port()).unwrap());
    let url = proxy.url();
    let (claimed, guard) = tokio::task::spawn_blocking({
        let proxy = std::sync::Arc::clone(&proxy);
        let proxy_delay = move |delay| proxy.delay_replies(delay);
        move || {
            let client = redlease::blocking::Client::builder(&url)
                .response_timeout(Duration::from_millis(200))
                .connect()
                .unwrap();
            let mut guard = client
                .lock("blocking")
                .ttl(Duration::from_secs(30))
                .acquire()
                .unwrap();
            proxy_delay(Duration::from_millis(600));
            assert!(guard.extend(Duration::from_secs(1)).is_err());
            let claimed = guard.remaining();
            proxy_delay(Duration::ZERO);
            (claimed, (client, guard))
        }
    })
    .await
    .unwrap();
    assert!(
        claimed <= Duration::from_secs(1),
        "claims {claimed:?} after a failed extend to 1 s"
    );
    tokio::task::spawn_blocking(move || {
        let (client, guard) = guard;
        drop(guard);
        drop(client);
    })
    .await
    .unwrap();
}
