//! The blocking election against real Redis: campaign, leader, observe as an iterator,
//! resign on drop before the drop returns.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use redlease::blocking::Client;

#[test]
fn a_blocking_election_hands_over_and_is_observed() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let election = client.election("scheduler").ttl(Duration::from_secs(60));
    assert_eq!(election.leader().unwrap(), None);
    let (first, changes) = next_within_a_step(election.observe());
    assert_eq!(first.unwrap(), None);

    let a = election.campaign("a").unwrap();
    assert!(a.is_leading());
    let (seen, changes) = next_within_a_step(changes);
    let seen = seen.unwrap().unwrap();
    assert_eq!((seen.note.as_str(), seen.term), ("a", a.term()));

    // Another thread campaigns; `a` steps down by being dropped, and the drop has given
    // the lease back (to `b`) before it returns.
    let candidate = std::thread::spawn({
        let election = election.clone();
        move || election.campaign("b").unwrap()
    });
    let bound = std::time::Instant::now() + common::STEP;
    while client.as_async().stats().waiting == 0 {
        assert!(std::time::Instant::now() < bound, "b never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let a_term = a.term();
    drop(a);
    let b = candidate.join().unwrap();
    assert!(b.term() > a_term);
    let (seen, changes) = next_within_a_step(changes);
    assert_eq!(
        seen.unwrap().unwrap().note,
        "b",
        "the observer missed the hand-over"
    );
    assert_eq!(election.leader().unwrap().unwrap().term, b.term());
    b.resign().unwrap();
    assert_eq!(next_within_a_step(changes).0.unwrap(), None);
}

/// The next item of `changes`, read on a thread of its own and bounded by
/// [`common::STEP`] (a hang detector, not a speed assertion).
fn next_within_a_step(
    changes: redlease::blocking::Observe,
) -> (
    redlease::Result<Option<redlease::Leader>>,
    redlease::blocking::Observe,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut changes = changes;
        let item = changes.next().unwrap();
        let _ = tx.send((item, changes));
    });
    rx.recv_timeout(common::STEP)
        .unwrap_or_else(|_| panic!("no change told within {:?}", common::STEP))
}

#[test]
fn a_blocking_leader_proclaims_a_new_note_in_its_term() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let election = client.election("scheduler").ttl(Duration::from_secs(60));
    let (first, changes) = next_within_a_step(election.observe());
    assert_eq!(first.unwrap(), None);
    let mut a = election.campaign("a").unwrap();
    let (seen, changes) = next_within_a_step(changes);
    assert_eq!(seen.unwrap().unwrap().note, "a");
    a.proclaim("a, ready").unwrap();
    assert_eq!(a.note(), "a, ready");
    let (seen, _changes) = next_within_a_step(changes);
    let seen = seen.unwrap().unwrap();
    assert_eq!((seen.note.as_str(), seen.term), ("a, ready", a.term()));
    assert_eq!(election.leader().unwrap().unwrap().note, "a, ready");
    a.resign().unwrap();
}
