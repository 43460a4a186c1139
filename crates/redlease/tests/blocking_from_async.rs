//! A blocking client made from an async one (`Client::blocking`): driven on the
//! application's runtime over the async client's connections.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

/// Redis' count of connected clients.
async fn connected_clients(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// `Client::blocking` drives blocking locks on the application's runtime over the async
/// client's own connections: a blocking guard taken in `spawn_blocking` excludes the async
/// client's acquisitions of the same name, and no second client connects to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_client_from_an_async_one_shares_its_connections() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server).await;
    let before = connected_clients(&mut conn).await;
    let blocking = client.blocking().unwrap();
    let guard = tokio::task::spawn_blocking(move || blocking.lock("shared").acquire())
        .await
        .unwrap()
        .unwrap();
    let busy = client
        .lock("shared")
        .wait(redlease::Wait::No)
        .acquire()
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    let after = connected_clients(&mut conn).await;
    assert_eq!(
        after, before,
        "the blocking client opened connections of its own"
    );
    tokio::task::spawn_blocking(move || guard.release())
        .await
        .unwrap()
        .unwrap();
    client
        .lock("shared")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Outside a runtime there is no application runtime to drive it: a clear error.
#[test]
fn a_blocking_client_from_an_async_one_needs_its_runtime() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = common::server();
    let client = runtime.block_on(common::client(&server));
    let err = client.blocking().unwrap_err();
    assert!(matches!(err, redlease::Error::Runtime { .. }), "{err:?}");
}
