//! `rediss://`: TLS with the server's certificate verified.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use common::bounded;
use redlease::Client;
use redlease_local::{RedisServer, ServerOptions};

#[tokio::test]
async fn tls_with_a_trusted_ca_works_and_an_unknown_ca_is_refused() {
    let server = RedisServer::start_with(ServerOptions::default().tls()).unwrap();
    let url = server.tls_url().unwrap();
    let ca = std::fs::read(server.ca_certificate().unwrap()).unwrap();

    let c = Client::builder(&url)
        .tls_root_certificate(ca)
        .connect()
        .await
        .unwrap();
    let guard = c.lock("over-tls").acquire().await.unwrap();
    // Waiting goes over the TLS pub/sub connection too.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.lock("over-tls").acquire().await })
    };
    common::eventually("the waiter to queue", || async { c.stats().waiting == 1 }).await;
    guard.release().await.unwrap();
    bounded("hand-off over TLS", waiter)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();

    // The system's roots do not know the test CA: the certificate is refused.
    let err = bounded("connect with an unknown CA", Client::connect(&url))
        .await
        .unwrap_err();
    assert!(
        err.is_connection() || matches!(err, redlease::Error::Redis { .. }),
        "{err:?}"
    );
    // A plain connection to the TLS port is no substitute either.
    let plain = url.replace("rediss://", "redis://");
    let c = Client::builder(&plain)
        .response_timeout(std::time::Duration::from_millis(300))
        .connect_timeout(std::time::Duration::from_millis(300))
        .connect()
        .await;
    assert!(c.is_err());
}

#[tokio::test]
async fn certificate_verification_cannot_be_turned_off() {
    let server = RedisServer::start_with(ServerOptions::default().tls()).unwrap();
    // redis-rs' `#insecure` URL fragment skips verification only with its
    // `tls-rustls-insecure` feature, which redlease does not enable.
    let url = format!("{}/#insecure", server.tls_url().unwrap());
    let err = bounded("connect with #insecure", Client::connect(&url))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            redlease::Error::InvalidOption { .. } | redlease::Error::Redis { .. }
        ) && format!("{err:?}").contains("insecure"),
        "{err:?}"
    );
}
