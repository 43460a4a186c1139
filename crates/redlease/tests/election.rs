//! Leader election against real Redis: campaign, leader, resign and hand-over; `observe`
//! sees every change in order across a killed leader (SIGKILL), a resign and a paused one (SIGSTOP),
//! with terms strictly increasing; a paused leader is told it lost; quorum and Cluster.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, server};
use futures_util::StreamExt as _;
use redlease::{Client, Error, Leader};

const CHILD_URL: &str = "REDLEASE_TEST_ELECT_URL";
const CHILD_NOTE: &str = "REDLEASE_TEST_ELECT_NOTE";
/// The exit code of a child leader told that it lost its leadership.
const TOLD_LOST: i32 = 3;

/// Run by the tests below in child processes: campaigns with a 1 s lease and leads until
/// told it lost (exit 3), or is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the election tests"]
async fn election_child_leader() {
    let (Ok(url), Ok(note)) = (std::env::var(CHILD_URL), std::env::var(CHILD_NOTE)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let leadership = client
        .election("scheduler")
        .ttl(Duration::from_secs(1))
        .campaign(note.as_str())
        .await
        .unwrap();
    // Tells the test that this process knows it leads (the observers learn it from Redis,
    // possibly before this process read its grant).
    let raw = redis::Client::open(url.as_str()).unwrap();
    let mut conn = raw.get_multiplexed_async_connection().await.unwrap();
    let () = redis::AsyncCommands::set(&mut conn, leading_key(&note), 1)
        .await
        .unwrap();
    leadership.lost().await;
    std::process::exit(TOLD_LOST);
}

/// The key a child leader sets once its campaign returned.
fn leading_key(note: &str) -> String {
    format!("test:leading:{note}")
}

fn child_leader(server: &redlease_local::RedisServer, note: &str) -> tokio::process::Child {
    common::children(
        "election_child_leader",
        1,
        &[(CHILD_URL, &server.url()), (CHILD_NOTE, note)],
    )
    .remove(0)
}

fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Reads `observed` until it tells the leader whose note is `note`; returns it.
async fn until_leader<S>(observed: &mut S, note: &str) -> Leader
where
    S: futures_util::Stream<Item = redlease::Result<Option<Leader>>> + Unpin,
{
    bounded(&format!("`{note}` to lead"), async {
        loop {
            match observed.next().await {
                Some(Ok(Some(leader))) if leader.note == note => return leader,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("observe failed: {e}"),
                None => panic!("the observation ended"),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_leader_resign_and_hand_over() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("scheduler");
    assert_eq!(election.leader().await.unwrap(), None);
    let a = election.campaign("host-a").await.unwrap();
    let seen = election.leader().await.unwrap().unwrap();
    assert_eq!(seen.note, "host-a");
    assert_eq!(seen.term, a.term());
    assert!(seen.remaining > Duration::ZERO);
    // A second candidate waits; the resign hands it the leadership, with a higher term.
    let b = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("host-b").await.unwrap() }
    });
    common::eventually("host-b to queue", || {
        let client = client.clone();
        async move { client.stats().waiting == 1 }
    })
    .await;
    let a_term = a.term();
    a.resign().await.unwrap();
    let b = bounded("host-b to lead", b).await.unwrap();
    assert!(b.term() > a_term, "terms must grow");
    assert_eq!(election.leader().await.unwrap().unwrap().note, "host-b");
    assert!(matches!(
        election.campaign("\n\t ").await,
        Err(Error::InvalidOption { option: "note", .. })
    ));
    b.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_learn_of_changes_from_notices_not_from_lease_expiry() {
    let server = server();
    let client = client(&server).await;
    // Leases far longer than a test step: an observer that only looked again when the
    // leader's lease should run out would miss every change below. The observer runs in
    // a task of its own, so it is waiting (not polled afresh) when each change happens.
    let election = client.election("long").ttl(Duration::from_secs(120));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forwarder = tokio::spawn({
        let mut stream = Box::pin(election.observe());
        async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).is_err() {
                    return;
                }
            }
        }
    });
    let mut observed = tokio_stream_of(rx);
    assert!(matches!(observed.next().await, Some(Ok(None))));
    let a = election.campaign("a").await.unwrap();
    until_leader(&mut observed, "a").await;
    let b = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("b").await.unwrap() }
    });
    common::eventually("b to queue", || {
        let client = client.clone();
        async move { client.stats().waiting == 1 }
    })
    .await;
    a.resign().await.unwrap();
    until_leader(&mut observed, "b").await;
    bounded("b", b).await.unwrap().resign().await.unwrap();
    bounded("nobody to lead", async {
        while !matches!(observed.next().await, Some(Ok(None))) {}
    })
    .await;
    forwarder.abort();
}

/// `rx` as a stream.
fn tokio_stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures_util::Stream<Item = T> + Unpin {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_follows_a_killed_a_resigning_and_a_paused_leader_in_order() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("scheduler").ttl(Duration::from_secs(1));
    let mut observed = Box::pin(election.observe());
    let mut seen = Vec::new();

    // A leader in another process, SIGKILLed: the next candidate takes over after its
    // lease runs out.
    let mut first = child_leader(&server, "first");
    seen.push(until_leader(&mut observed, "first").await);
    let second = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("second").await.unwrap() }
    });
    common::eventually("second to queue", || {
        let client = client.clone();
        async move { client.stats().waiting == 1 }
    })
    .await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    seen.push(until_leader(&mut observed, "second").await);
    let second = bounded("second", second).await.unwrap();

    // A resign with a candidate (in another process) queued: a hand-off.
    let mut third = child_leader(&server, "third");
    let queue = election.keys().unwrap().queue().to_owned();
    let conn = common::raw(&server).await;
    common::eventually("third to queue", || {
        let (mut conn, queue) = (conn.clone(), queue.clone());
        // The child is queued once its campaign is in the lock's queue.
        async move { common::llen(&mut conn, &queue).await == 1 }
    })
    .await;
    second.resign().await.unwrap();
    seen.push(until_leader(&mut observed, "third").await);

    // The third leader is paused past its lease: a candidate takes over, and the paused
    // leader, resumed, is told it lost.
    let fourth = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("fourth").await.unwrap() }
    });
    // Paused once it knows it leads (not while it is still reading its grant: a grant it
    // reads after its lease ran out is no leadership at all).
    common::eventually("third to know it leads", || {
        let mut conn = conn.clone();
        async move {
            common::get(&mut conn, &leading_key("third"))
                .await
                .is_some()
        }
    })
    .await;
    signal(&third, "-STOP");
    seen.push(until_leader(&mut observed, "fourth").await);
    signal(&third, "-CONT");
    let status = bounded("the paused leader", third.wait()).await.unwrap();
    assert_eq!(
        status.code(),
        Some(TOLD_LOST),
        "the paused leader was not told"
    );
    let fourth = bounded("fourth", fourth).await.unwrap();

    let notes: Vec<&str> = seen.iter().map(|l| l.note.as_str()).collect();
    assert_eq!(notes, ["first", "second", "third", "fourth"]);
    for pair in seen.windows(2) {
        assert!(
            pair[0].term < pair[1].term,
            "terms must strictly increase: {seen:?}"
        );
    }
    assert_eq!(fourth.term(), seen[3].term);
    fourth.resign().await.unwrap();
    // The resign is observed as nobody leading.
    bounded("nobody to lead", async {
        while !matches!(observed.next().await, Some(Ok(None))) {}
    })
    .await;
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_and_cluster_elections_name_one_leader() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let quorum = Client::quorum_builder(nodes.urls())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let cluster = redlease_local::Cluster::start().unwrap();
    let cluster = bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap();
    for client in [quorum, cluster] {
        let election = client.election("scheduler");
        let mut observed = Box::pin(election.observe());
        let a = election.campaign("a").await.unwrap();
        let seen_a = until_leader(&mut observed, "a").await;
        assert_eq!(seen_a.term, a.term());
        let b = tokio::spawn({
            let election = election.clone();
            async move { election.campaign("b").await.unwrap() }
        });
        a.resign().await.unwrap();
        let seen_b = until_leader(&mut observed, "b").await;
        let b = bounded("b", b).await.unwrap();
        assert!(seen_b.term > seen_a.term);
        assert_eq!(election.leader().await.unwrap().unwrap().term, b.term());
        b.resign().await.unwrap();
    }
}
