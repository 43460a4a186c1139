//! Election terms over a quorum: `leader()` and `observe()` report only terms that were
//! granted (the term the leader's own `term()` gives), and an observer's terms never go
//! backwards, while candidates campaign and resign again and again on 3 and 5 real nodes.
//!
//! A quorum grant is decided when a majority of nodes said yes; the term is the largest
//! fencing counter among them, written back to the nodes that counted lower in a second
//! round trip. A read that lands between the two saw a lower counter on a majority.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::significant_drop_tightening,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::bounded;
use futures_util::StreamExt as _;
use redlease::{Client, Election, FencingToken, Leader};

/// Campaigns per candidate.
const ROUNDS: usize = 30;
/// Candidates campaigning at once (each with its own client).
const CANDIDATES: usize = 3;

/// What one observer saw: every leader it was told of, in order.
type Seen = Vec<(String, FencingToken)>;

/// Reads `leader()` until `done`, keeping every leader it was told of.
async fn read_leaders(election: Election, done: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::new();
    while !done.load(Ordering::Acquire) {
        if let Some(Leader { note, term, .. }) = election.leader().await.unwrap() {
            seen.push((note, term));
        }
    }
    seen
}

/// Follows `observe()` until `done`, keeping every leader it was told of.
async fn follow(election: Election, done: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::new();
    let mut observed = Box::pin(election.observe());
    while !done.load(Ordering::Acquire) {
        // Bounded so that the end of the campaigns is noticed while nobody leads.
        if let Ok(item) = tokio::time::timeout(Duration::from_millis(200), observed.next()).await {
            match item {
                Some(Ok(Some(Leader { note, term, .. }))) => seen.push((note, term)),
                Some(Ok(None)) => {}
                Some(Err(e)) => panic!("observe failed: {e}"),
                None => panic!("the observation ended"),
            }
        }
    }
    seen
}

/// Checks what `who` saw against the terms granted: each leader told of with the term its
/// campaign got, and terms never going backwards.
fn check(who: &str, seen: &Seen, granted: &HashMap<String, FencingToken>) -> usize {
    let mut wrong = Vec::new();
    for (note, term) in seen {
        match granted.get(note) {
            Some(t) if t == term => {}
            Some(t) => wrong.push(format!("{note} with term {term}, granted {t}")),
            None => wrong.push(format!("{note} (term {term}), which was never granted")),
        }
    }
    let backwards: Vec<String> = seen
        .windows(2)
        .filter(|w| w[1].1 < w[0].1)
        .map(|w| format!("{} after {}", w[1].1, w[0].1))
        .collect();
    assert!(
        wrong.is_empty() && backwards.is_empty(),
        "{who} was told of {} leaders; wrong terms: {wrong:?}; terms going backwards: {backwards:?}",
        seen.len()
    );
    seen.len()
}

async fn terms_are_granted_ones_on(nodes: usize) {
    let nodes = redlease_local::Nodes::start(nodes).unwrap();
    let mut clients = Vec::new();
    for _ in 0..=CANDIDATES {
        let client = Client::quorum_builder(nodes.urls())
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        clients.push(client);
    }
    let observer = clients.pop().unwrap().election("scheduler");
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(read_leaders(observer.clone(), Arc::clone(&done))))
        .collect();
    let watcher = tokio::spawn(follow(observer.clone(), Arc::clone(&done)));
    let granted = Arc::new(Mutex::new(HashMap::new()));
    let candidates: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            let granted = Arc::clone(&granted);
            tokio::spawn(async move {
                let election = client.election("scheduler").ttl(Duration::from_secs(5));
                for round in 0..ROUNDS {
                    let note = format!("candidate {c} round {round}");
                    let leadership = election.campaign(note.clone()).await.unwrap();
                    granted.lock().unwrap().insert(note, leadership.term());
                    leadership.resign().await.unwrap();
                }
            })
        })
        .collect();
    for candidate in candidates {
        bounded("the campaigns", candidate).await.unwrap();
    }
    done.store(true, Ordering::Release);
    let granted = granted.lock().unwrap().clone();
    assert_eq!(granted.len(), CANDIDATES * ROUNDS);
    let mut told = 0;
    for (i, reader) in readers.into_iter().enumerate() {
        let seen = bounded("a reader", reader).await.unwrap();
        told += check(&format!("leader() reader {i}"), &seen, &granted);
    }
    let seen = bounded("the observer", watcher).await.unwrap();
    let followed = check("observe()", &seen, &granted);
    // Each assertion above must have had something to judge.
    assert!(followed > 0 && told > 0, "nothing was observed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_and_observe_report_only_granted_terms_over_three_nodes() {
    terms_are_granted_ones_on(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_and_observe_report_only_granted_terms_over_five_nodes() {
    terms_are_granted_ones_on(5).await;
}
