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
async fn an_insecure_url_alone_is_refused_naming_the_option_that_turns_verification_off() {
    let server = RedisServer::start_with(ServerOptions::default().tls()).unwrap();
    // redis-rs reads `#insecure` as "verify nothing"; redlease takes that only from its
    // explicit option, so that a URL copied into a configuration cannot do it unseen.
    let url = format!("{}/#insecure", server.tls_url().unwrap());
    let err = bounded("connect with #insecure", Client::connect(&url))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, redlease::Error::InvalidOption { .. })
            && message.contains("danger_accept_invalid_certificates")
            && message.contains("--insecure")
            && !message.contains("feature"),
        "{err:?}"
    );
    // With the option, the fragment says the same thing and is accepted.
    let c = Client::builder(&url)
        .danger_accept_invalid_certificates()
        .connect()
        .await
        .unwrap();
    c.lock("insecure-url")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn the_insecure_mode_accepts_a_certificate_of_an_unknown_ca_that_the_default_refuses() {
    let server = RedisServer::start_with(ServerOptions::default().tls()).unwrap();
    let url = server.tls_url().unwrap();

    // The test CA is in no root store: verified, the certificate is refused.
    let err = bounded("connect verifying", Client::connect(&url))
        .await
        .unwrap_err();
    assert!(
        err.is_connection() || matches!(err, redlease::Error::Redis { .. }),
        "{err:?}"
    );

    let c = Client::builder(&url)
        .danger_accept_invalid_certificates()
        .connect()
        .await
        .unwrap();
    let guard = c.lock("unverified").acquire().await.unwrap();
    assert!(guard.fencing_token().get() > 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_server_requiring_client_certificates_refuses_a_client_without_one_and_accepts_one_with_it()
 {
    let server =
        RedisServer::start_with(ServerOptions::default().tls_client_certificates()).unwrap();
    let url = server.tls_url().unwrap();
    let ca = std::fs::read(server.ca_certificate().unwrap()).unwrap();
    let (cert, key) = server.client_certificate().unwrap();
    let (cert, key) = (std::fs::read(cert).unwrap(), std::fs::read(key).unwrap());

    let err = bounded(
        "connect without a client certificate",
        Client::builder(&url)
            .tls_root_certificate(ca.clone())
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(
        err.is_connection() || matches!(err, redlease::Error::Redis { .. }),
        "{err:?}"
    );

    let c = Client::builder(&url)
        .tls_root_certificate(ca)
        .tls_client_certificate(cert, key)
        .connect()
        .await
        .unwrap();
    let guard = c.lock("mutual-tls").acquire().await.unwrap();
    // The pub/sub connection of waiters presents the certificate too.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.lock("mutual-tls").acquire().await })
    };
    common::eventually("the waiter to queue", || async { c.stats().waiting == 1 }).await;
    guard.release().await.unwrap();
    bounded("hand-off over mutual TLS", waiter)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn pem_without_a_certificate_or_a_matching_key_is_refused_at_connect() {
    let server = RedisServer::start_with(ServerOptions::default().tls()).unwrap();
    let url = server.tls_url().unwrap();
    let ca = std::fs::read(server.ca_certificate().unwrap()).unwrap();
    let (cert, key) = server.client_certificate().unwrap();
    let other_key = std::fs::read(cert.with_file_name("server.key")).unwrap();
    let (cert, key) = (std::fs::read(cert).unwrap(), std::fs::read(key).unwrap());

    let refused = async |builder: redlease::ClientBuilder, option: &str, words: &str| {
        let err = bounded("connect with bad PEM", builder.connect())
            .await
            .unwrap_err();
        match &err {
            redlease::Error::InvalidOption {
                option: o, reason, ..
            } => {
                assert_eq!(*o, option, "{err}");
                assert!(reason.contains(words), "{err}");
            }
            other => panic!("expected InvalidOption for {option}, got {other:?}"),
        }
    };
    // A file name where the PEM text belongs.
    refused(
        Client::builder(&url).tls_root_certificate("/etc/redis/ca.crt"),
        "tls_root_certificate",
        "no CA certificate found",
    )
    .await;
    refused(
        Client::builder(&url)
            .tls_root_certificate(ca.clone())
            .tls_client_certificate(key.clone(), key.clone()),
        "tls_client_certificate",
        "no client certificate found",
    )
    .await;
    refused(
        Client::builder(&url)
            .tls_root_certificate(ca.clone())
            .tls_client_certificate(cert.clone(), cert.clone()),
        "tls_client_certificate",
        "no private key",
    )
    .await;
    refused(
        Client::builder(&url)
            .tls_root_certificate(ca)
            .tls_client_certificate(cert, other_key),
        "tls_client_certificate",
        "the key is its own",
    )
    .await;
}
