//! The semaphore's scripts (`sem_acquire.lua`, `sem_release.lua`, `lease_extend.lua`,
//! `lease_renew.lua`) run through plain redis-rs against a real redis-server, before the
//! engine is wired to them: capacity, reclaim of expired permits, the permit count, the
//! conflict with a mutex of the same name, FIFO hand-off, fencing, expiry of idle keys.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::similar_names,
    reason = "tests fail loudly"
)]

mod common;
mod prims;

use prims::{
    Keys, Listener, exists, extend, lrange, now_ms, pttl, renew, score, sem_acquire,
    sem_attempt as attempt, sem_release, server_error, until_expired, zcard,
};

const LONG: u64 = 60_000;
const LINGER: u64 = 60_000;

#[tokio::test]
async fn at_most_n_holders_and_n_reached() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:cap");
    let mut fences = Vec::new();
    for token in ["a", "b", "c"] {
        let (status, fence, _) = attempt(&mut conn, &keys, token, 3).await;
        assert_eq!(status, 1, "{token} gets one of the 3 permits");
        fences.push(fence);
    }
    let (status, fence, pttl) = attempt(&mut conn, &keys, "d", 3).await;
    // A refusal carries the fencing counter it saw: the last grant's.
    assert_eq!(
        (status, fence),
        (0, *fences.iter().max().unwrap()),
        "a 4th holder is refused"
    );
    assert!(pttl > 0 && pttl <= i64::try_from(LONG).unwrap(), "{pttl}");
    assert_eq!(zcard(&mut conn, &keys.key).await, 3);
    // A retried attempt of a holder is answered with its own permit's token.
    let again = attempt(&mut conn, &keys, "a", 3).await;
    assert_eq!(again, (2, fences[0], 0));
    assert_eq!(zcard(&mut conn, &keys.key).await, 3);
    // Releasing one lets exactly one more in.
    assert_eq!(sem_release(&mut conn, &keys, "b", false).await.unwrap(), 1);
    assert_eq!(attempt(&mut conn, &keys, "d", 3).await.0, 1);
    assert_eq!(attempt(&mut conn, &keys, "e", 3).await.0, 0);
    // Holder details per permit, with the permit's fencing token.
    let details: Option<String> = redis::cmd("HGET")
        .arg(&keys.sem()[2])
        .arg("d")
        .query_async(&mut conn)
        .await
        .unwrap();
    let details = details.unwrap();
    assert!(details.contains("host of d"), "{details}");
    // A second release of the same permit is a loss, not a second free permit.
    assert_eq!(sem_release(&mut conn, &keys, "b", false).await.unwrap(), 0);
    assert_eq!(zcard(&mut conn, &keys.key).await, 3);
}

#[tokio::test]
async fn an_expired_permit_is_reclaimed() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:reclaim");
    // A live holder keeps the semaphore's keys alive, so the script itself must notice
    // that the crashed holder's permit ran out (not Redis' key expiry).
    for (token, ttl) in [("live", LONG), ("crashed", 50)] {
        assert_eq!(
            sem_acquire(&mut conn, &keys, token, ttl, 2, None)
                .await
                .unwrap()
                .0,
            1
        );
    }
    let busy = attempt(&mut conn, &keys, "next", 2).await;
    assert_eq!(busy.0, 0);
    assert!(
        busy.2 <= 50,
        "pttl is the crashed permit's time left: {busy:?}"
    );
    // The holder never releases; its permit's lease runs out.
    until_expired(&conn, &keys.key, "crashed").await;
    let (status, _, _) = attempt(&mut conn, &keys, "next", 2).await;
    assert_eq!(status, 1, "the expired permit came back");
    assert_eq!(score(&mut conn, &keys.key, "crashed").await, None);
    let crashed: bool = redis::cmd("HEXISTS")
        .arg(&keys.sem()[2])
        .arg("crashed")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!crashed, "its holder details went with it");
    assert_eq!(zcard(&mut conn, &keys.key).await, 2);
    assert_eq!(
        attempt(&mut conn, &keys, "another", 2).await.0,
        0,
        "still at most 2"
    );
}

#[tokio::test]
async fn a_different_permit_count_is_a_distinct_error() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:count");
    attempt(&mut conn, &keys, "a", 2).await;
    let (code, text) = server_error(sem_acquire(&mut conn, &keys, "b", LONG, 3, None).await);
    assert_eq!(code, "REDLEASE_PERMITS", "{text}");
    assert!(text.contains("2 permits are in use"), "{text}");
    assert_eq!(zcard(&mut conn, &keys.key).await, 1, "nothing granted");
    // The count may change once nothing holds or waits.
    assert_eq!(sem_release(&mut conn, &keys, "a", false).await.unwrap(), 1);
    assert!(
        !exists(&mut conn, &keys.sem()[5]).await,
        "the count goes with the last holder"
    );
    assert_eq!(attempt(&mut conn, &keys, "b", 3).await.0, 1);
    // Bad counts are refused by the script too (the engine checks them first).
    let (code, text) = server_error(sem_acquire(&mut conn, &keys, "c", LONG, 0, None).await);
    assert_eq!(code, "ERR", "{text}");
}

#[tokio::test]
async fn a_semaphore_and_a_mutex_of_one_name_refuse_each_other() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("shared:name");

    // Semaphore first: the mutex's acquire fails with WRONGTYPE.
    attempt(&mut conn, &keys, "s", 2).await;
    let result = prims::mutex_acquire(&mut conn, &keys, "m").await;
    let (code, text) = server_error(result);
    assert_eq!(code, "WRONGTYPE", "{text}");
    let result = prims::mutex_release(&mut conn, &keys, "s").await;
    assert_eq!(server_error(result).0, "WRONGTYPE");
    assert_eq!(zcard(&mut conn, &keys.key).await, 1, "the permit is intact");
    assert_eq!(sem_release(&mut conn, &keys, "s", false).await.unwrap(), 1);

    // Mutex first: every semaphore script fails with WRONGTYPE and writes nothing.
    let (status, _, _) = prims::mutex_acquire(&mut conn, &keys, "m").await.unwrap();
    assert_eq!(status, 1);
    let (code, text) =
        server_error(sem_acquire(&mut conn, &keys, "s", LONG, 2, Some(("grant:s", LINGER))).await);
    assert_eq!(code, "WRONGTYPE", "{text}");
    assert_eq!(
        server_error(sem_release(&mut conn, &keys, "m", false).await).0,
        "WRONGTYPE"
    );
    assert_eq!(
        server_error(extend(&mut conn, &keys.sem_lease(), "m", LONG).await).0,
        "WRONGTYPE"
    );
    for side in &keys.sem()[2..] {
        assert!(!exists(&mut conn, side).await, "{side} was written");
    }
    assert_eq!(
        common::get(&mut conn, &keys.key).await.as_deref(),
        Some("m")
    );
}

#[tokio::test]
async fn a_freed_permit_goes_to_the_oldest_listening_waiter() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:fifo");
    let (_, first_fence, _) = attempt(&mut conn, &keys, "holder", 1).await;
    let mut w1 = Listener::new(&server, "grant:1").await;
    let mut w2 = Listener::new(&server, "grant:2").await;
    // "gone" queued first, but its client no longer listens: it is skipped.
    for (token, channel) in [("gone", "grant:gone"), ("w1", "grant:1"), ("w2", "grant:2")] {
        let reply = sem_acquire(&mut conn, &keys, token, LONG, 1, Some((channel, LINGER)))
            .await
            .unwrap();
        assert_eq!(reply.0, 0, "{token} waits");
    }
    assert_eq!(
        lrange(&mut conn, &keys.sem()[3]).await,
        ["gone", "w1", "w2"]
    );
    // A fresh caller that does not queue finds no permit.
    assert_eq!(attempt(&mut conn, &keys, "fresh", 1).await.0, 0);

    assert_eq!(
        sem_release(&mut conn, &keys, "holder", false)
            .await
            .unwrap(),
        1
    );
    let (fence, token, key) = w1.grant().await;
    assert_eq!((token.as_str(), key.as_str()), ("w1", keys.key.as_str()));
    assert!(fence > first_fence, "{fence} after {first_fence}");
    assert!(
        score(&mut conn, &keys.key, "w1").await.is_some(),
        "w1 holds"
    );
    assert_eq!(score(&mut conn, &keys.key, "gone").await, None);
    // The waiter's next attempt confirms it holds, with the token of the message.
    let confirm = sem_acquire(&mut conn, &keys, "w1", LONG, 1, Some(("grant:1", LINGER)))
        .await
        .unwrap();
    assert_eq!(confirm, (2, fence, 0));
    assert_eq!(lrange(&mut conn, &keys.sem()[3]).await, ["w2"]);

    assert_eq!(sem_release(&mut conn, &keys, "w1", false).await.unwrap(), 1);
    let (fence2, token, _) = w2.grant().await;
    assert_eq!(token, "w2");
    assert!(fence2 > fence);
    assert!(!exists(&mut conn, &keys.sem()[3]).await, "queue empty");
}

#[tokio::test]
async fn a_permit_freed_by_expiry_goes_to_the_queue_head_not_a_newcomer() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:expiry-fifo");
    sem_acquire(&mut conn, &keys, "crashed", 50, 1, None)
        .await
        .unwrap();
    let mut w = Listener::new(&server, "grant:w").await;
    assert_eq!(
        sem_acquire(&mut conn, &keys, "w", LONG, 1, Some(("grant:w", LINGER)))
            .await
            .unwrap()
            .0,
        0
    );
    until_expired(&conn, &keys.key, "crashed").await;
    // The newcomer's own attempt reclaims the permit and hands it to the head.
    let newcomer = attempt(&mut conn, &keys, "newcomer", 1).await;
    assert_eq!(
        newcomer.0, 0,
        "the newcomer does not overtake: {newcomer:?}"
    );
    let (_, token, _) = w.grant().await;
    assert_eq!(token, "w");
    assert!(score(&mut conn, &keys.key, "w").await.is_some());
}

#[tokio::test]
async fn a_waiter_that_gives_up_withdraws_with_release() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:withdraw");
    attempt(&mut conn, &keys, "holder", 1).await;
    let _quitter_listens = Listener::new(&server, "grant:q").await;
    let mut w = Listener::new(&server, "grant:w").await;
    for (token, channel) in [("quitter", "grant:q"), ("w", "grant:w")] {
        sem_acquire(&mut conn, &keys, token, LONG, 1, Some((channel, LINGER)))
            .await
            .unwrap();
    }
    assert_eq!(
        sem_release(&mut conn, &keys, "quitter", false)
            .await
            .unwrap(),
        0
    );
    assert_eq!(lrange(&mut conn, &keys.sem()[3]).await, ["w"]);
    sem_release(&mut conn, &keys, "holder", false)
        .await
        .unwrap();
    let (_, token, _) = w.grant().await;
    assert_eq!(token, "w", "the permit skipped the waiter that left");
    assert_eq!(score(&mut conn, &keys.key, "quitter").await, None);
}

#[tokio::test]
async fn a_release_that_frees_a_permit_announces_it() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:announce");
    attempt(&mut conn, &keys, "a", 1).await;
    let mut released = Listener::new(&server, &keys.channel()).await;
    assert_eq!(sem_release(&mut conn, &keys, "a", true).await.unwrap(), 1);
    assert_eq!(released.payload().await, keys.key);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_grants() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:fence");
    let mut last = 0;
    let mut listener = Listener::new(&server, "grant:f").await;
    for round in 0..5 {
        for token in ["a", "b"] {
            let t = format!("{token}{round}");
            let (status, fence, _) = attempt(&mut conn, &keys, &t, 2).await;
            assert_eq!(status, 1);
            assert!(fence > last, "{fence} after {last}");
            last = fence;
        }
        // One hand-off per round, which must grow the token too.
        let w = format!("w{round}");
        sem_acquire(&mut conn, &keys, &w, LONG, 2, Some(("grant:f", LINGER)))
            .await
            .unwrap();
        sem_release(&mut conn, &keys, &format!("a{round}"), false)
            .await
            .unwrap();
        let (fence, token, _) = listener.grant().await;
        assert_eq!(token, w);
        assert!(fence > last, "hand-off {fence} after {last}");
        last = fence;
        sem_release(&mut conn, &keys, &format!("b{round}"), false)
            .await
            .unwrap();
        sem_release(&mut conn, &keys, &w, false).await.unwrap();
    }
}

#[tokio::test]
async fn extend_and_renew_keep_live_permits_and_report_lost_ones() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:renew");
    let other = Keys::new("sem:renew-other");
    let lease = keys.sem_lease();
    let other_lease = other.sem_lease();
    sem_acquire(&mut conn, &keys, "short", 50, 2, None)
        .await
        .unwrap();
    sem_acquire(&mut conn, &keys, "live", 1_000, 2, None)
        .await
        .unwrap();
    sem_acquire(&mut conn, &other, "elsewhere", 1_000, 1, None)
        .await
        .unwrap();
    let before = score(&mut conn, &keys.key, "live").await.unwrap();
    assert_eq!(extend(&mut conn, &lease, "live", LONG).await.unwrap(), 1);
    let after = score(&mut conn, &keys.key, "live").await.unwrap();
    assert!(after > before + 50_000, "{before} -> {after}");
    for key in &lease {
        assert!(pttl(&mut conn, key).await > 50_000, "{key} lives as long");
    }
    until_expired(&conn, &keys.key, "short").await;
    assert_eq!(extend(&mut conn, &lease, "short", LONG).await.unwrap(), 0);
    assert_eq!(extend(&mut conn, &lease, "never", LONG).await.unwrap(), 0);
    let renewed = renew(
        &mut conn,
        &[
            (&lease, "live", LONG),
            (&lease, "short", LONG),
            (&other_lease, "elsewhere", LONG),
            (&other_lease, "live", LONG),
        ],
    )
    .await
    .unwrap();
    assert_eq!(renewed, [1, 0, 1, 0]);
    assert!(now_ms(&mut conn).await >= score(&mut conn, &keys.key, "short").await.unwrap_or(0));
}

#[tokio::test]
async fn every_key_expires_when_the_semaphore_is_idle() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:idle");
    // Released: nothing is left at once but the fencing counter.
    attempt(&mut conn, &keys, "a", 2).await;
    sem_release(&mut conn, &keys, "a", false).await.unwrap();
    for key in &keys.sem() {
        if *key != keys.fence() {
            assert!(!exists(&mut conn, key).await, "{key} left after release");
        }
    }
    // Crashed holders and a waiter that went away: every key expires by itself.
    for token in ["a", "b"] {
        sem_acquire(&mut conn, &keys, token, 100, 2, None)
            .await
            .unwrap();
    }
    sem_acquire(&mut conn, &keys, "w", LONG, 2, Some(("nobody", 300)))
        .await
        .unwrap();
    // The count outlives the permits while someone queues.
    assert!(pttl(&mut conn, &keys.sem()[5]).await > pttl(&mut conn, &keys.key).await);
    prims::all_but_the_fence_expire(&mut conn, &keys.sem(), &keys.fence(), 300, "semaphore").await;
}

#[tokio::test]
async fn every_script_runs_after_script_flush_and_with_eval() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:flush");
    attempt(&mut conn, &keys, "a", 1).await;
    prims::script_flush(&mut conn).await;
    // EVALSHA meets NOSCRIPT, redis-rs loads the script again.
    assert_eq!(
        extend(&mut conn, &keys.sem_lease(), "a", LONG)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        renew(&mut conn, &[(&keys.sem_lease(), "a", LONG)])
            .await
            .unwrap(),
        [1]
    );
    assert_eq!(sem_release(&mut conn, &keys, "a", false).await.unwrap(), 1);
    prims::script_flush(&mut conn).await;
    assert_eq!(attempt(&mut conn, &keys, "b", 1).await.0, 1);
    // The EVAL path (a cluster node lacking the script is sent its text).
    prims::script_flush(&mut conn).await;
    let sem = keys.sem().to_vec();
    let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let reply = prims::eval(
        &mut conn,
        prims::SEM_ACQUIRE,
        &sem,
        &s(&["c", "60000", "d", "1", "no"]),
    )
    .await
    .unwrap();
    // "b" holds the one permit: busy, {0, seen, pttl}.
    assert!(
        matches!(reply, redis::Value::Array(ref a) if a.len() == 3 && a[0] == redis::Value::Int(0)),
        "{reply:?}"
    );
    let lease = keys.sem_lease().to_vec();
    let reply = prims::eval(&mut conn, prims::LEASE_EXTEND, &lease, &s(&["b", "60000"]))
        .await
        .unwrap();
    assert_eq!(reply, redis::Value::Int(1));
    let reply = prims::eval(&mut conn, prims::LEASE_RENEW, &lease, &s(&["b", "60000"]))
        .await
        .unwrap();
    assert_eq!(reply, redis::Value::Array(vec![redis::Value::Int(1)]));
    let reply = prims::eval(&mut conn, prims::SEM_RELEASE, &sem, &s(&["b"]))
        .await
        .unwrap();
    assert_eq!(reply, redis::Value::Int(1));
}

/// All of one semaphore's (and read-write lock's) keys and channel share the name's slot,
/// as a cluster-enabled server computes it.
#[tokio::test]
async fn every_key_shares_the_names_cluster_slot() {
    let server = redlease_local::RedisServer::start_with(
        redlease_local::ServerOptions::default().cluster_enabled(),
    )
    .unwrap();
    let mut conn = common::raw(&server).await;
    for name in ["plain", "redlease:jobs", "{tag}:x", "a{b}c"] {
        let keys = Keys::new(name);
        let mut all: Vec<String> = keys.sem().to_vec();
        all.extend(keys.rw());
        all.push(keys.channel());
        let mut slots = Vec::new();
        for key in &all {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            slots.push(slot);
        }
        assert!(
            slots.iter().all(|s| *s == slots[0]),
            "{name}: {all:?} -> {slots:?}"
        );
    }
}
