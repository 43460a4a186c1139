//! A waiter whose link is cut silently (packets dropped, nothing closed) when the lock is
//! handed to it: Redis still counts its grant subscription, so the release hands it the
//! lock. The hand-off lasts its claim window only (a tenth of the ttl, at most 1 s: see
//! `scripts/lib/handoff.lua`); then the next waiter is served, and the waiters keep their
//! order. Before: the lock sat with nobody for the whole ttl (3.0 s of 3 s), and the
//! holder's own re-acquire, queued behind another waiter, won 3 of 6 runs.
//!
//! The cut is the fault proxy's silence. The bound asserted is half the ttl against a
//! window of a twentieth: a liveness bound with a wide margin, not a speed; the test
//! prints what it measured.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::time::Duration;

use common::{bounded, server};
use redlease::{Client, LockKeys};
use redlease_local::Proxy;
use tokio::time::Instant;

const NAME: &str = "silent-waiter";
/// Long enough that a waiter stuck behind a lock held by nobody for a ttl times out.
const TTL: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_a_silently_cut_waiter_costs_the_others_its_claim_window_only() {
    let server = server();
    let keys = LockKeys::new("redlease:", NAME).unwrap();
    let proxy = Proxy::start(server.port()).unwrap();
    let holder = common::client(&server).await;
    let next = common::client(&server).await;
    let cut = Client::connect(&format!("redis://127.0.0.1:{}", proxy.port()))
        .await
        .unwrap();

    let held = holder.lock(NAME).ttl(TTL).acquire().await.unwrap();
    // The waiter about to be cut off queues first, then `next`.
    let cut_off = tokio::spawn({
        let cut = cut.clone();
        async move {
            cut.lock(NAME)
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    common::queued_places(&server, &keys, 1).await;
    let waits = tokio::spawn({
        let next = next.clone();
        async move {
            // Half the ttl: a lock left with nobody for a ttl makes this time out.
            let got = next.lock(NAME).ttl(TTL).wait(TTL / 2).acquire().await;
            (got, Instant::now())
        }
    });
    common::queued_places(&server, &keys, 2).await;

    proxy.silence();
    let released = Instant::now();
    held.release().await.unwrap();
    // The holder comes back at once, and queues behind `next`.
    let again = tokio::spawn({
        let holder = holder.clone();
        async move { holder.lock(NAME).ttl(TTL).wait(TTL / 2).acquire().await }
    });
    let (got, at) = bounded("the next waiter's turn", waits).await.unwrap();
    let guard = got.unwrap_or_else(|e| panic!("the next waiter: {e}"));
    println!(
        "the lock went to the next waiter {:?} after the release (ttl {TTL:?})",
        at - released
    );
    assert!(guard.is_held());
    assert!(
        !again.is_finished(),
        "the holder's re-acquire, queued behind the next waiter, came first"
    );
    let first = guard.fencing_token();
    guard.release().await.unwrap();
    let after = bounded("the holder's turn", again).await.unwrap().unwrap();
    assert!(after.fencing_token() > first);
    after.release().await.unwrap();
    cut_off.abort();
}
