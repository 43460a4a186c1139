//! Subscriptions that are not grant links follow the primary behind a failover endpoint
//! (one URL whose new connections reach the new primary while old ones stay on the
//! demoted one): a latch's waiter and an election's observer, subscribed before the
//! failover, hear the count down and the new leader that happen on the new primary.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::time::Duration;

use common::replication::{replicate, replication};
use common::{bounded, eventually, no_polling, subscribers};
use futures_util::StreamExt as _;
use redlease::Client;
use redlease_local::{Proxy, RedisServer};
use tokio::time::Instant;

/// How soon after the change on the new primary its listener must hear of it: well
/// under the 9 s a subscription left on the demoted primary took (a bound, not a speed).
const HEARD_WITHIN: Duration = Duration::from_secs(3);

/// The leases here: long enough that their expiry cannot wake anybody within
/// [`HEARD_WITHIN`].
const TTL: Duration = Duration::from_secs(10);

/// A primary (`old`), its replica (`new`), and a failover endpoint sending connections
/// to `old`.
async fn endpoint_to_a_primary() -> (RedisServer, RedisServer, Proxy) {
    let old = common::server();
    let new = common::server();
    replicate(&new, &old).await;
    let endpoint = Proxy::start(old.port()).unwrap();
    (old, new, endpoint)
}

/// The failover behind the endpoint: `new` becomes the primary and new connections go to
/// it; `old` is demoted, a replica whose link to its primary is not up yet (still
/// syncing, or not reaching it: here a port nobody listens on), so it relays nothing of
/// what happens on `new`. Connections made before stay on `old`: the pub/sub ones
/// (nothing cuts them) and the command ones until a write meets `READONLY` there.
async fn fail_over(old: &RedisServer, new: &RedisServer, endpoint: &Proxy) {
    // Every write so far is on `new` (a planned failover loses none).
    let written = replication(old, "master_repl_offset");
    eventually("the replica caught up", || async {
        replication(new, "slave_repl_offset") == written
    })
    .await;
    new.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    endpoint.retarget(new.port());
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    old.query(&["REPLICAOF", "127.0.0.1", nobody.as_str()])
        .unwrap();
    assert_eq!(replication(old, "role"), "slave");
}

/// A latch's waiter subscribed on the old primary wakes soon after the last count down,
/// which runs on the new one. The waiter and the parties share one client (one per
/// process): its count downs meet `READONLY` on the old primary first.
#[tokio::test]
async fn a_latch_waiter_subscribed_before_a_failover_wakes_on_the_count_down() {
    let (old, new, endpoint) = endpoint_to_a_primary().await;
    let client = Client::connect(&endpoint.url()).await.unwrap();
    let latch = client.latch("import").ttl(TTL);
    let mut counts = Vec::new();
    for _ in 0..3 {
        counts.push(latch.count_up().await.unwrap());
    }
    let channel = latch.keys().unwrap().channel().to_owned();
    let waiter = client.clone();
    let waiting = tokio::spawn(async move {
        let opened = waiter
            .latch("import")
            .wait(Duration::from_secs(60))
            .retry(no_polling())
            .wait_open()
            .await;
        (opened, Instant::now())
    });
    eventually("the waiter subscribed on the old primary", || async {
        subscribers(&old, &channel) == 1
    })
    .await;

    fail_over(&old, &new, &endpoint).await;
    for count in counts {
        bounded("a count down", count.count_down()).await.unwrap();
    }
    let last_down = Instant::now();
    let (opened, woke) = bounded("the waiter to wake", waiting).await.unwrap();
    let opened = opened.unwrap();
    let after = woke.saturating_duration_since(last_down);
    eprintln!("the waiter woke {after:?} after the last count down ({opened:?})");
    assert_eq!(opened.counted_down(), 3, "{opened:?}");
    assert!(
        after < HEARD_WITHIN,
        "the waiter woke {after:?} after the last count down"
    );
}

/// An election's observer subscribed on the old primary sees the new leader soon after
/// it took over, on the new primary. The observer's client is the second leader's (one
/// client per process); it also holds a lock, whose release after the failover meets
/// `READONLY` on the old primary first (and goes through on the new one).
#[tokio::test]
async fn an_election_observer_subscribed_before_a_failover_sees_the_new_leader() {
    let (old, new, endpoint) = endpoint_to_a_primary().await;
    let first = Client::connect(&endpoint.url()).await.unwrap();
    let second = Client::connect(&endpoint.url()).await.unwrap();
    let election = first.election("scheduler").ttl(TTL);
    let channel = election.keys().unwrap().channel().to_owned();
    let leading = election.campaign("first").await.unwrap();
    let work = second.lock("work").ttl(TTL).acquire().await.unwrap();
    let mut changes = second.election("scheduler").retry(no_polling()).observe();
    let seen = bounded("the first leader seen", changes.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.note, "first");
    eventually("the observer subscribed on the old primary", || async {
        subscribers(&old, &channel) == 1
    })
    .await;

    fail_over(&old, &new, &endpoint).await;
    bounded("the lock released", work.release()).await.unwrap();
    bounded("the first leader resigns", leading.resign())
        .await
        .unwrap();
    let next = bounded(
        "the second leader campaigns",
        second.election("scheduler").ttl(TTL).campaign("second"),
    )
    .await
    .unwrap();
    let took_over = Instant::now();
    let heard = bounded("the observer to see the second leader", async {
        loop {
            match changes.next().await.unwrap() {
                Ok(Some(leader)) if leader.note == "second" => return Instant::now(),
                _ => {}
            }
        }
    })
    .await;
    let after = heard.saturating_duration_since(took_over);
    eprintln!("the observer saw the new leader {after:?} after it took over");
    assert!(
        after < HEARD_WITHIN,
        "the observer saw the new leader {after:?} after it took over"
    );
    next.resign().await.unwrap();
}
