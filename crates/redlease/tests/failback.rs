//! A failover *and back* behind a failover endpoint, while a waiter's grant subscription
//! stays on the old primary A: the holder releases on the new primary B, whose release
//! script skips the waiter (nobody listens there) but whose `PUBLISH` of the grant
//! replication relays to A, where the waiter listens; then A is promoted back before the
//! waiter has made anything of that message (the endpoint holds every reply back a while,
//! as a loaded link does). A waiter that took the pushed grant as proof because its link's
//! server says it is a primary *now* believed a lease that the primary never gave it: two
//! holders, for the semaphore and the write lock alike. Every primitive confirms a pushed
//! grant with an attempt on the server that decides, so each guard that comes out of
//! `acquire` is the holder on the primary of the moment.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::prim::Prim;
use common::replication::{replicate, replication};
use common::{bounded, eventually};
use redlease::Client;
use redlease_local::{Proxy, RedisServer, Reply};

/// The name every lease of this file is on.
const NAME: &str = "handoff";
const TTL: Duration = Duration::from_secs(10);
/// How long the endpoint holds every reply back once the holder is about to release:
/// longer than the failback takes, so that the relayed grant (and anything the waiter
/// asks about it) reaches the waiter only after A is a primary again.
const SLOW_LINK: Duration = Duration::from_millis(300);

/// Promotes `to`, makes `from` its replica and sends the endpoint's new connections to
/// `to`, without waiting for the replication link (a failback right behind a failover).
fn switch(from: &RedisServer, to: &RedisServer, endpoint: &Proxy) {
    to.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    let port = to.port().to_string();
    from.query(&["REPLICAOF", "127.0.0.1", port.as_str()])
        .unwrap();
    endpoint.retarget(to.port());
}

/// Every guard the waiter gets, through a failover and a failback while its grant
/// subscription stays on A, is the holder on the primary of that moment.
async fn failover_and_back(prim: Prim) {
    let a = common::server();
    let b = common::server();
    replicate(&b, &a).await;
    let endpoint = Proxy::start(a.port()).unwrap();
    let connect = || {
        let url = endpoint.url();
        async move { Client::connect(&url).await.unwrap() }
    };
    let (holder, waiter) = (connect().await, connect().await);
    let held = prim
        .acquire_for(&holder, NAME, TTL, Duration::ZERO)
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            prim.acquire_for(&waiter, NAME, TTL, Duration::from_secs(30))
                .await
        }
    });
    let keys = prim.keys(NAME);
    common::prim::queued_for_grants(&a, &keys, 1).await;
    eventually("the place replicated to B", || async {
        b.query(&["LLEN", keys.queue()]).unwrap() == Reply::Integer(1)
    })
    .await;

    // The failover: command connections are cut and come back through the endpoint, on
    // B; the waiter's grant subscription stays on A.
    switch(&a, &b, &endpoint);
    replicate(&a, &b).await;
    a.query(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();

    endpoint.delay_replies(SLOW_LINK);
    // The lease may be gone by now (the servers moved): only its truth at the grant is
    // judged.
    let _ = held.release().await;
    // And back, while the grant B relayed through A is on its way to the waiter.
    switch(&b, &a, &endpoint);
    b.query(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    endpoint.delay_replies(Duration::ZERO);

    let got = bounded("the waiter's acquire", waiting).await.unwrap();
    let guard = got.unwrap_or_else(|e| panic!("{prim:?}: the waiter failed: {e:?}"));
    let fence = guard.fencing_token().get();
    let primary = if replication(&a, "role") == "master" {
        &a
    } else {
        &b
    };
    assert!(
        guard.is_held() && prim.holds(primary, NAME, fence),
        "{prim:?}: the waiter claims a lease (fence {fence}, {:?} left) that the primary gives to nobody or another",
        guard.remaining(),
    );
    let _ = guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_believes_no_grant_relayed_across_a_failback() {
    failover_and_back(Prim::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_believes_no_grant_relayed_across_a_failback() {
    failover_and_back(Prim::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_waiter_believes_no_grant_relayed_across_a_failback() {
    failover_and_back(Prim::Write).await;
}
