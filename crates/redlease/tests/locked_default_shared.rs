//! One default client for async and synchronous `#[locked]` functions: the async default,
//! set inside the application's runtime, also serves synchronous functions (from
//! `spawn_blocking` or a thread of their own), driven on that runtime. A test binary of its
//! own, since the defaults are set once per process.
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use common::{bounded, client, server};
use redlease::Error;

#[redlease::locked(key = "shared:{n}", guard = guard)]
fn sync_job(n: u8) -> Result<u64, Error> {
    Ok(guard.fencing_token().get())
}

#[redlease::locked(key = "shared:{n}")]
async fn async_job(n: u8) -> Result<u8, Error> {
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_locked_function_uses_the_async_default_client() {
    let server = server();
    redlease::set_default_client(client(&server).await).unwrap();
    assert_eq!(async_job(1).await.unwrap(), 1);
    let from_blocking = tokio::task::spawn_blocking(|| sync_job(1));
    let fence = bounded("a sync locked function in spawn_blocking", from_blocking)
        .await
        .unwrap()
        .unwrap();
    assert!(fence > 0);
    let from_thread = std::thread::spawn(|| sync_job(2));
    let fence = bounded(
        "a sync locked function on a thread",
        tokio::task::spawn_blocking(move || from_thread.join()),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    assert!(fence > 0);
    // The blocking default is now the one over the async client.
    let again = redlease::blocking::set_default_client(
        redlease::blocking::default_client().unwrap().clone(),
    )
    .unwrap_err();
    assert!(matches!(again, Error::DefaultClientSet { .. }), "{again:?}");
}
