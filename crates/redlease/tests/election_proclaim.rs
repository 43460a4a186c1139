//! `Leadership::proclaim` against real Redis: the leader's note changes, its term and its
//! lease do not; observers are told the new note by the election's notices; a lost
//! leadership writes nothing; quorum and Cluster.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use futures_util::StreamExt as _;
use redis::AsyncCommands as _;
use redlease::{Error, Leader};

/// Leases far longer than a test: nothing below is renewed or expires, and an observer
/// that only looked again when the lease could run out would see no change at all.
const LONG: Duration = Duration::from_secs(120);

/// Reads `observed` until it tells a leader whose note is `note`; returns it.
async fn until_note<S>(observed: &mut S, note: &str) -> Leader
where
    S: futures_util::Stream<Item = redlease::Result<Option<Leader>>> + Unpin,
{
    bounded(&format!("the note `{note}` to be told"), async {
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

/// `election.observe()` driven by a task of its own, so that the observer is waiting (not
/// polled afresh) when a change happens; its items arrive on the returned stream.
fn observed_in_a_task(
    election: &redlease::Election,
) -> (
    impl futures_util::Stream<Item = redlease::Result<Option<Leader>>> + Unpin,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forwarder = tokio::spawn({
        let mut stream = election.observe();
        async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).is_err() {
                    return;
                }
            }
        }
    });
    let stream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    (stream, forwarder)
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proclaim_replaces_the_note_and_keeps_the_term_and_the_expiries() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let election = client.election("scheduler").ttl(LONG);
    let keys = election.keys().unwrap();
    let leadership = election.campaign("host-a: starting").await.unwrap();
    let term = leadership.term();

    // Expiries of their own on the lock and on the note, told apart from the lease's ttl
    // (a proclaim that set either anew would show it).
    let () = conn.pexpire(keys.key(), 555_555).await.unwrap();
    let () = conn.pexpire(keys.holder(), 777_777).await.unwrap();
    // The script is loaded again after a flush.
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();

    leadership
        .proclaim("host-a: serving\non :8080")
        .await
        .unwrap();
    assert_eq!(leadership.note(), "host-a: serving on :8080");
    assert_eq!(leadership.term(), term);
    let seen = election.leader().await.unwrap().unwrap();
    assert_eq!(seen.note, "host-a: serving on :8080");
    assert_eq!(seen.term, term, "a proclaim keeps the term");
    assert!(leadership.is_leading());
    assert!(leadership.owned().await.unwrap());

    let lock_left = pttl(&mut conn, keys.key()).await;
    let note_left = pttl(&mut conn, keys.holder()).await;
    assert!(
        (500_000..=555_555).contains(&lock_left),
        "the lock's expiry changed: {lock_left} ms left"
    );
    assert!(
        (700_000..=777_777).contains(&note_left),
        "the note's expiry was not kept: {note_left} ms left"
    );

    // An empty note is refused, and the note stays.
    assert!(matches!(
        leadership.proclaim(" \t\n").await,
        Err(Error::InvalidOption { option: "note", .. })
    ));
    assert_eq!(leadership.note(), "host-a: serving on :8080");
    assert_eq!(
        election.leader().await.unwrap().unwrap().note,
        "host-a: serving on :8080"
    );
    leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_is_told_a_proclaimed_note_in_the_same_term() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("scheduler").ttl(LONG);
    let (mut observed, forwarder) = observed_in_a_task(&election);
    assert!(matches!(observed.next().await, Some(Ok(None))));
    let leadership = election.campaign("a").await.unwrap();
    let first = until_note(&mut observed, "a").await;
    leadership.proclaim("a, ready").await.unwrap();
    let second = until_note(&mut observed, "a, ready").await;
    assert_eq!(first.term, leadership.term());
    assert_eq!(second.term, first.term, "the same term, another note");
    leadership.proclaim("a, draining").await.unwrap();
    let third = until_note(&mut observed, "a, draining").await;
    assert_eq!(third.term, first.term);
    forwarder.abort();
    leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_leadership_proclaims_nothing() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let election = client.election("scheduler").ttl(LONG);
    let keys = election.keys().unwrap();

    // The lock deleted behind the leader's back (an operator, a flushed or failed-over
    // Redis): the proclaim neither takes the lock again nor writes the note.
    let leadership = election.campaign("a").await.unwrap();
    let details = common::get(&mut conn, keys.holder()).await.unwrap();
    let () = conn.del(keys.key()).await.unwrap();
    assert!(matches!(
        leadership.proclaim("a, ready").await,
        Err(Error::Lost { .. })
    ));
    assert!(!leadership.is_leading(), "the loss was not recorded");
    assert_eq!(common::get(&mut conn, keys.key()).await, None);
    assert_eq!(
        common::get(&mut conn, keys.holder()).await.as_deref(),
        Some(details.as_str()),
        "the lost leader's note was written"
    );
    assert_eq!(leadership.note(), "a");
    assert_eq!(election.leader().await.unwrap(), None);
    // Asked again once known lost: the same error, and nothing written.
    assert!(matches!(
        leadership.proclaim("a, ready").await,
        Err(Error::Lost { .. })
    ));
    drop(leadership);

    // The lock (and its note) taken by another holder: the deposed leader's proclaim
    // leaves the new leader's note alone.
    let deposed = election.campaign("b").await.unwrap();
    let () = conn.set(keys.key(), "another owner").await.unwrap();
    let () = conn.set(keys.holder(), "99 c").await.unwrap();
    assert!(matches!(
        deposed.proclaim("b, ready").await,
        Err(Error::Lost { .. })
    ));
    assert_eq!(
        common::get(&mut conn, keys.holder()).await.as_deref(),
        Some("99 c")
    );
    assert_eq!(
        common::get(&mut conn, keys.key()).await.as_deref(),
        Some("another owner")
    );
    drop(deposed);
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_and_cluster_leaders_proclaim() {
    let (nodes, quorum) = common::quorum_of_three().await;
    let cluster = redlease_local::Cluster::start().unwrap();
    let cluster = bounded("connect", redlease::Client::cluster(cluster.urls()))
        .await
        .unwrap();
    for (client, quorum_nodes) in [(quorum, Some(&nodes)), (cluster, None)] {
        let election = client.election("scheduler").ttl(LONG);
        let (mut observed, forwarder) = observed_in_a_task(&election);
        let leadership = election.campaign("a").await.unwrap();
        let first = until_note(&mut observed, "a").await;
        leadership.proclaim("a, ready").await.unwrap();
        let second = until_note(&mut observed, "a, ready").await;
        assert_eq!(second.term, first.term);
        let seen = election.leader().await.unwrap().unwrap();
        assert_eq!((seen.note.as_str(), seen.term), ("a, ready", first.term));
        // Over a quorum the note is written on every node, each keeping its own fence.
        let keys = election.keys().unwrap();
        for server in quorum_nodes
            .map(redlease_local::Nodes::servers)
            .unwrap_or_default()
        {
            let mut conn = raw(server).await;
            let details = common::get(&mut conn, keys.holder()).await.unwrap();
            let (fence, note) = details.split_once(' ').unwrap();
            assert!(fence.parse::<u64>().is_ok(), "{details}");
            assert_eq!(note, "a, ready");
        }
        forwarder.abort();
        leadership.resign().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_inside_run_proclaims_and_observers_are_told() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("run-proclaims").ttl(LONG);
    let (mut observed, forwarder) = observed_in_a_task(&election);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let leading = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .run("host-a: starting", async |leadership| {
                    leadership.proclaim("host-a: serving").await?;
                    assert_eq!(leadership.note(), "host-a: serving");
                    let _ = ready_tx.send(leadership.term());
                    let _ = done_rx.await;
                    Ok::<_, Error>(())
                })
                .await
        }
    });
    let term = bounded("the work to proclaim", ready_rx).await.unwrap();
    let told = until_note(&mut observed, "host-a: serving").await;
    assert_eq!(told.term, term);
    done_tx.send(()).unwrap();
    bounded("run to end", leading).await.unwrap().unwrap();
    forwarder.abort();
}

/// The error of the work under `keep_leading`.
#[derive(Debug)]
enum Ended {
    Work,
    Library(#[expect(dead_code, reason = "shown by Debug when a test fails")] Error),
}

impl From<Error> for Ended {
    fn from(e: Error) -> Self {
        Self::Library(e)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leading_campaigns_again_after_a_loss_and_ends_with_the_works_error() {
    let server = server();
    let (candidate, operator) = (client(&server).await, client(&server).await);
    // Renewed every half second: the leader finds its lease removed within one.
    let election = candidate
        .election("keeps-leading")
        .ttl(Duration::from_secs(2));
    let (terms_tx, mut terms) = tokio::sync::mpsc::unbounded_channel();
    let leading = tokio::spawn({
        let election = election.clone();
        let rounds = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        async move {
            election
                .keep_leading("host-a", async move |leadership| {
                    let round = rounds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    leadership
                        .proclaim(format!("host-a: round {round}"))
                        .await?;
                    terms_tx.send(leadership.term()).unwrap();
                    match round {
                        // Deposed from outside: the work is dropped and it campaigns again.
                        1 => std::future::pending().await,
                        // Deposed while proclaiming: the work's `Lost` is a loss too.
                        2 => loop {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            leadership.proclaim("host-a: still here").await?;
                        },
                        // The work ends by itself: it resigns and campaigns again.
                        3 => Ok(()),
                        _ => Err(Ended::Work),
                    }
                })
                .await
        }
    });
    let first = bounded("the first term", terms.recv()).await.unwrap();
    // An operator removes the leader's lease: its next renewal finds it gone.
    let removed = operator.force_release("keeps-leading").await.unwrap();
    assert_eq!(removed.snapshot.holders.len(), 1);
    let second = bounded("leading again after the loss", terms.recv())
        .await
        .unwrap();
    let removed = operator.force_release("keeps-leading").await.unwrap();
    assert_eq!(removed.snapshot.holders.len(), 1);
    let third = bounded(
        "leading again after the proclaim found it lost",
        terms.recv(),
    )
    .await
    .unwrap();
    let fourth = bounded("leading again after the work ended", terms.recv())
        .await
        .unwrap();
    assert!(
        first < second && second < third && third < fourth,
        "{first} {second} {third} {fourth}"
    );
    let ended = bounded("keep_leading to end", leading).await.unwrap();
    assert!(matches!(&ended, Err(Ended::Work)), "{ended:?}");
    // It resigned before returning: nobody leads.
    assert!(election.leader().await.unwrap().is_none());
}
