//! Hybrid-clock fencing tokens: every grant takes `max(stored + 1, Redis TIME in µs)`, so
//! tokens keep growing when Redis loses the counter (a restart without persistence, a
//! counter that expired), stay below 2^53, and counters of unused names expire.
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
use redlease_local::{Nodes, Reply};

/// 2^53: tokens stay below it, exact in JSON, doubles and JavaScript.
const LIMIT: u64 = 1 << 53;

/// Microseconds since 1970 by this machine's clock (the test servers run on it too).
fn now_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

fn integer(reply: &Reply) -> i64 {
    match reply {
        Reply::Integer(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_token_after_a_restart_without_persistence_is_larger() {
    let mut server = server();
    let before = {
        let client = client(&server).await;
        let guard = client.lock("restarted").acquire().await.unwrap();
        let fence = guard.fencing_token();
        guard.release().await.unwrap();
        fence
    };
    // SHUTDOWN NOSAVE: the server exits and forgets the counter (the reply never comes).
    let _ = server.query(&["SHUTDOWN", "NOSAVE"]);
    server.restart().unwrap();
    let client = client(&server).await;
    let guard = client.lock("restarted").acquire().await.unwrap();
    assert!(
        guard.fencing_token() > before,
        "after a restart that lost the counter: {} then {}",
        before,
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn tokens_follow_the_clock_below_2_pow_53_and_old_counters_jump_ahead() {
    let server = server();
    let client = client(&server).await;
    let keys = client.lock("old").keys().unwrap();
    // A counter left by a plain INCR scheme.
    server.command(&["SET", keys.fence(), "5"]).unwrap();
    let earliest = now_micros();
    let first = client.lock("old").acquire().await.unwrap();
    let token = first.fencing_token().get();
    assert!(token > 5);
    // Within a second of this machine's clock (the server shares it).
    assert!(
        token + 1_000_000 > earliest && token < now_micros() + 1_000_000,
        "token {token} is not the server's time in µs (now {earliest})"
    );
    assert!(token < LIMIT);
    first.release().await.unwrap();
    // Many grants within one microsecond still grow by one at least.
    let mut last = token;
    for _ in 0..50 {
        let guard = client.lock("old").acquire().await.unwrap();
        assert!(guard.fencing_token().get() > last);
        last = guard.fencing_token().get();
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_counter_expires_an_hour_after_its_last_grant() {
    let server = server();
    let client = client(&server).await;
    let keys = client.lock("expiring").keys().unwrap();
    let guard = client.lock("expiring").acquire().await.unwrap();
    let ttl = integer(&server.query(&["TTL", keys.fence()]).unwrap());
    assert!((3590..=3600).contains(&ttl), "fencing counter TTL {ttl} s");
    guard.release().await.unwrap();
    // The counter expired between two holders: the next token is still larger.
    let before = guard_token(&client, "expiring").await;
    server.command(&["DEL", keys.fence()]).unwrap();
    let after = guard_token(&client, "expiring").await;
    assert!(
        after > before,
        "after the counter expired: {before} then {after}"
    );
}

async fn guard_token(client: &Client, name: &str) -> u64 {
    let guard = client.lock(name).acquire().await.unwrap();
    let fence = guard.fencing_token().get();
    guard.release().await.unwrap();
    fence
}

#[tokio::test]
async fn a_handed_off_lock_gets_a_clock_token_and_a_fresh_counter_expiry() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let keys = holder_client.lock("handed").keys().unwrap();
    let holder = holder_client.lock("handed").acquire().await.unwrap();
    let released = holder.fencing_token();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("handed")
            .retry(common::no_polling())
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    let queue = keys.queue().to_owned();
    eventually("the waiter to queue up", || {
        let server = &server;
        let queue = queue.clone();
        async move { integer(&server.query(&["LLEN", &queue]).unwrap()) == 1 }
    })
    .await;
    // Counter lost meanwhile (expired, or a restart): the hand-off must not reuse 1.
    server.command(&["DEL", keys.fence()]).unwrap();
    holder.release().await.unwrap();
    let handed = bounded("the hand-off", waiter).await.unwrap().unwrap();
    assert!(handed.fencing_token() > released);
    assert!(integer(&server.query(&["TTL", keys.fence()]).unwrap()) > 3590);
    handed.release().await.unwrap();
}

#[tokio::test]
async fn a_counter_at_2_pow_53_is_a_clear_error() {
    let server = server();
    let client = client(&server).await;
    let keys = client.lock("huge").keys().unwrap();
    server
        .command(&["SET", keys.fence(), &LIMIT.to_string()])
        .unwrap();
    let err = client.lock("huge").try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Redis { .. }), "{err:?}");
    let text = format!("{err:#}");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source.as_deref().unwrap_or(&text).contains("2^53"),
        "{text} / {source:?}"
    );
    // A refused grant leaves the counter as it was.
    let counter = server.query(&["GET", keys.fence()]).unwrap();
    assert_eq!(counter.text().unwrap(), LIMIT.to_string());
}

#[tokio::test]
async fn a_counter_that_is_not_a_number_is_a_clear_error() {
    let server = server();
    let client = client(&server).await;
    // A name each: the refused attempt's lock key stays until its ttl (acquire.lua sets it
    // before the grant fails).
    for (name, garbled, wanted) in [
        ("text", "abc", "does not hold a number"),
        ("wide", "99999999999999999999", "2^53"),
    ] {
        let keys = client.lock(name).keys().unwrap();
        server.command(&["SET", keys.fence(), garbled]).unwrap();
        let err = client.lock(name).try_acquire().await.unwrap_err();
        let text = std::error::Error::source(&err).map_or(format!("{err:#}"), ToString::to_string);
        assert!(text.contains(wanted), "{garbled}: {text}");
        let counter = server.query(&["GET", keys.fence()]).unwrap();
        assert_eq!(counter.text().unwrap(), garbled, "the counter was changed");
    }
}

#[tokio::test]
async fn quorum_tokens_grow_after_a_majority_restarted_empty_and_the_rest_died() {
    let mut nodes = Nodes::start(5).unwrap();
    let client = Client::quorum(nodes.urls()).await.unwrap();
    let before = guard_token(&client, "q-restarted").await;
    // A majority restarts empty, and the two nodes that remember the counter are gone:
    // the next majority is made of nodes that forgot every earlier grant.
    for server in &mut nodes.servers_mut()[..3] {
        server.restart().unwrap();
    }
    for server in &mut nodes.servers_mut()[3..] {
        server.kill();
    }
    let after = bounded("an acquisition after the restarts", async {
        loop {
            match client.lock("q-restarted").try_acquire().await {
                Ok(Some(guard)) => {
                    let fence = guard.fencing_token().get();
                    guard.release().await.unwrap();
                    break fence;
                }
                Ok(None) => panic!("nobody holds the lock"),
                Err(e) if e.is_connection() || matches!(e, Error::NoQuorum { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await;
    assert!(after > before, "{before} then {after}");
}
