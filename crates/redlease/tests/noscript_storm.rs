//! Script calls make progress while the server's script cache is flushed more often than a
//! round trip: a call refused with `NOSCRIPT` must not depend on a reload surviving until
//! the call is sent again.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, raw, server};
use redlease::Client;
use redlease_local::{DelayLine, RedisServer};
use tokio::task::JoinHandle;

/// Each way between the client and the server: an 80 ms round trip.
const ONE_WAY: Duration = Duration::from_millis(40);

/// How often the script cache is flushed: four times per round trip, so that a script
/// loaded by one request is gone again before the client's next request arrives.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A client whose every request to `server` crosses an 80 ms round trip, and the delay
/// line that makes it (kept as long as the client is used).
async fn far_client(server: &RedisServer) -> (Client, DelayLine) {
    let line = DelayLine::start(server.port(), ONE_WAY).unwrap();
    let client = Client::connect(&line.url()).await.unwrap();
    (client, line)
}

/// `SCRIPT FLUSH` every [`FLUSH_EVERY`] over a direct connection to `server`, until
/// aborted (it panics, and ends, if a flush fails).
async fn storm(server: &RedisServer) -> JoinHandle<()> {
    let mut flusher = raw(server).await;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(FLUSH_EVERY);
        loop {
            every.tick().await;
            let flush: redis::RedisResult<()> = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut flusher)
                .await;
            flush.unwrap();
        }
    })
}

/// A lock, a semaphore's permit and a read-write lock's write and read holds are each
/// taken and given back during the storm. Only progress is asserted (each step within
/// `bounded`'s generous bound), never a speed.
#[tokio::test]
async fn every_primitive_is_taken_and_given_back_while_scripts_are_flushed() {
    let server = server();
    let (client, _line) = far_client(&server).await;
    let storm = storm(&server).await;

    bounded("a lock taken and given back", async {
        let guard = client.lock("storm").acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    bounded("a permit taken and given back", async {
        let guard = client.semaphore("storm", 2).acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    bounded("a write hold taken and given back", async {
        let guard = client.rwlock("storm").write().acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    bounded("a read hold taken and given back", async {
        let guard = client.rwlock("storm").read().acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;

    // The storm ran all along: a failed flush would have ended it.
    assert!(!storm.is_finished());
    storm.abort();
}

/// A lease of 1 s taken before the storm is still held three ttls into it: its renewals
/// (the renewal scheduler's pipelines) get through.
#[tokio::test]
async fn renewals_get_through_while_scripts_are_flushed() {
    let server = server();
    let (client, _line) = far_client(&server).await;
    let renewed = bounded("a renewed lock taken", async {
        client
            .lock("storm-renewed")
            .ttl(Duration::from_secs(1))
            .acquire()
            .await
            .unwrap()
    })
    .await;
    let storm = storm(&server).await;

    let lost = tokio::time::timeout(Duration::from_secs(3), renewed.lost()).await;
    assert!(
        lost.is_err(),
        "the lease was lost: its renewals did not get through"
    );
    bounded("the renewed lock given back", renewed.release())
        .await
        .unwrap();

    assert!(!storm.is_finished());
    storm.abort();
}
