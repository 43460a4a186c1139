//! Bad input and a misbehaving Redis: each a clear error, never a panic or a hang.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, MAX_NAME_LEN, MAX_TTL, Retry};

#[tokio::test]
async fn every_script_survives_script_flush() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let lock = c.lock("flushed");
    // Load all scripts once, then flush them before each call.
    let mut guard = lock.acquire().await.unwrap();
    guard.extend(Duration::from_secs(10)).await.unwrap();
    guard.release().await.unwrap();
    let flush = || async {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn.clone())
            .await
            .unwrap();
    };
    flush().await;
    let mut guard = lock.acquire().await.unwrap();
    flush().await;
    guard.extend(Duration::from_secs(10)).await.unwrap();
    flush().await;
    assert!(guard.owned().await.unwrap());
    flush().await;
    guard.release().await.unwrap();
    flush().await;
    assert!(lock.try_acquire().await.unwrap().is_some());
    let _: i64 = conn.exists("x").await.unwrap();
}

#[tokio::test]
async fn a_restarted_server_is_used_again() {
    let mut server = server();
    let c = client(&server).await;
    let guard = c.lock("restarted").acquire().await.unwrap();
    server.restart().unwrap();
    // The lock was not persisted: our release finds nothing, and says so.
    let released = bounded("release after restart", guard.release()).await;
    assert!(
        matches!(released, Err(Error::Lost { .. } | Error::Redis { .. })),
        "{released:?}"
    );
    // The next calls reconnect and reload the scripts by themselves.
    let guard = bounded("acquire after restart", async {
        loop {
            match c.lock("restarted").acquire().await {
                Err(e) if e.is_connection() => {}
                other => break other,
            }
        }
    })
    .await
    .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_foreign_value_of_another_type_is_wrongtype() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let _: i64 = conn.lpush("redlease:listy", "x").await.unwrap();
    let err = c.lock("listy").try_acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::WrongType { ref key, .. } if key == "redlease:listy"),
        "{err:?}"
    );
    assert!(err.to_string().contains("WRONGTYPE"));
    let err = c.lock("listy").acquire().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    // The foreign value is untouched.
    let len: i64 = conn.llen("redlease:listy").await.unwrap();
    assert_eq!(len, 1);
}

#[tokio::test]
async fn redis_down_is_a_clear_error_without_a_hang() {
    let port = redlease_local::free_port().unwrap();
    let err = bounded(
        "connect to nothing",
        Client::connect(&format!("redis://127.0.0.1:{port}")),
    )
    .await
    .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains("reachable"), "{err}");
    // Nothing ever answered: a connect failure, in a connect failure's words.
    assert!(!err.to_string().contains("stopped answering"), "{err}");

    let mut server = server();
    let c = client(&server).await;
    server.kill();
    let err = bounded("acquire while Redis is down", c.lock("down").acquire())
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let err = bounded(
        "try_acquire while Redis is down",
        c.lock("down").try_acquire(),
    )
    .await
    .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
}

#[tokio::test]
async fn a_paused_server_times_out_instead_of_hanging() {
    let server = server();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    server.pause().unwrap();
    let err = bounded("acquire while Redis is paused", c.lock("paused").acquire())
        .await
        .unwrap_err();
    server.resume().unwrap();
    assert!(err.is_connection(), "{err:?}");
    assert_stopped_answering(&err);
}

/// `err` says that a server that had answered stopped answering, not that its address,
/// TLS or credentials may be wrong (the connection worked).
fn assert_stopped_answering(err: &Error) {
    let text = err.to_string();
    assert!(text.contains("stopped answering"), "{text}");
    assert!(text.contains("response timeout"), "{text}");
    assert!(!text.contains("address, TLS"), "{text}");
}

/// `call` fails within 3 s, saying that Redis stopped answering.
async fn stops_answering<T: std::fmt::Debug>(
    what: &str,
    call: impl Future<Output = redlease::Result<T>>,
) {
    // Far below one connect timeout (5 s): a hang detector, not a speed figure.
    let err = tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no error within 3 s of a 200 ms response timeout"))
        .unwrap_err();
    assert!(err.is_connection(), "{what}: {err:?}");
    assert_stopped_answering(&err);
}

/// A link that worked (the client connected through it) goes silent (a blackhole: every
/// byte dropped, nothing closed): the attempt's error says that Redis stopped answering
/// within the response timeout, which a connect failure never says; and every call, the
/// ones on replaced connections too, ends about a response timeout later (a call used to
/// wait for the replacement's tries: six connect timeouts, 30 s at the default 5 s).
#[tokio::test]
async fn a_blackholed_link_says_redis_stopped_answering() {
    let server = server();
    let proxy = redlease_local::Proxy::start(server.port()).unwrap();
    let c = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    proxy.silence();
    stops_answering(
        "try_acquire on a silent link",
        c.lock("during").try_acquire(),
    )
    .await;
    // The next calls (on replaced connections, as mute) say the same; reading a lock too.
    stops_answering(
        "another try on a silent link",
        c.lock("again").try_acquire(),
    )
    .await;
    stops_answering("inspect on a silent link", c.inspect("during")).await;
    proxy.heal();
}

#[tokio::test]
async fn bad_names_and_options_are_refused() {
    let server = server();
    let c = client(&server).await;
    let cases: Vec<(redlease::Lock, &str)> = vec![
        (c.lock(""), "name"),
        (c.lock("x".repeat(MAX_NAME_LEN + 1)), "name"),
        (c.lock("a{}b"), "name"),
        (c.lock("zero").ttl(Duration::ZERO), "ttl"),
        (c.lock("tiny").ttl(Duration::from_millis(1)), "ttl"),
        (c.lock("huge").ttl(MAX_TTL + Duration::from_secs(1)), "ttl"),
        (c.lock("overflow").ttl(Duration::MAX), "ttl"),
        (c.lock("wait").wait(Duration::MAX), "wait"),
        (
            c.lock("retry")
                .retry(Retry::new(Duration::ZERO, Duration::ZERO)),
            "retry",
        ),
    ];
    for (lock, what) in cases {
        for err in [
            lock.try_acquire().await.unwrap_err(),
            lock.acquire().await.unwrap_err(),
        ] {
            match (&err, what) {
                (Error::InvalidName { reason, .. }, "name") => assert!(!reason.is_empty()),
                (Error::InvalidOption { option, .. }, _) => assert_eq!(*option, what),
                _ => panic!("{lock:?}: expected an error about {what}, got {err:?}"),
            }
        }
    }
    // Nothing was written for any of them.
    let size: i64 = redis::cmd("DBSIZE")
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert_eq!(size, 0);

    for url in ["", "http://127.0.0.1:1", "redis://"] {
        let err = Client::connect(url).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption { option: "url", .. } | Error::Redis { .. }
            ),
            "{url}: {err:?}"
        );
    }
    let err = Client::builder(&server.url())
        .response_timeout(Duration::ZERO)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidOption {
            option: "response_timeout",
            ..
        }
    ));
}

#[tokio::test]
async fn wrong_credentials_are_a_clear_error_that_hides_the_password() {
    let server = redlease_local::RedisServer::start_with(
        redlease_local::ServerOptions::default()
            .arg("--requirepass")
            .arg("right-secret"),
    )
    .unwrap();
    let url = format!("redis://default:wrong-secret@127.0.0.1:{}", server.port());
    let err = bounded("connect", Client::connect(&url)).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("wrong-secret"), "{shown}");
    let url = format!("redis://default:right-secret@127.0.0.1:{}", server.port());
    let c = Client::connect(&url).await.unwrap();
    c.lock("authed")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
