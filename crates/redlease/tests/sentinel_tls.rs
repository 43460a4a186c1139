//! Sentinel over TLS: a primary, 2 replicas and 3 sentinels that speak TLS only and
//! require client certificates (`Sentinel::start_tls_client_certificates`). Locks through
//! `rediss+sentinel://` and the builder's `rediss://` sentinels, a failover followed over
//! TLS, credentials for the sentinels and the primary, and the clear errors of a wrong CA,
//! a missing client certificate and a plain `redis+sentinel://` URL.
#![cfg(all(feature = "sentinel", feature = "tls"))]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::{Duration, Instant};

use common::bounded;
use redlease::{Client, ClientBuilder, Error};
use redlease_local::{Reply, Sentinel};

/// The connect timeout of the clients that must fail: a refusal is to come well before
/// it, not as a timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn deployment() -> Sentinel {
    Sentinel::start_tls_client_certificates()
        .unwrap_or_else(|e| panic!("cannot start a TLS sentinel deployment: {e}"))
}

/// The deployment's CA, client certificate and key (PEM).
fn pem(deployment: &Sentinel) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let ca = std::fs::read(deployment.ca_certificate().unwrap()).unwrap();
    let (cert, key) = deployment.client_certificate().unwrap();
    (
        ca,
        std::fs::read(cert).unwrap(),
        std::fs::read(key).unwrap(),
    )
}

/// `builder` with the deployment's CA and client certificate.
fn trusted(builder: ClientBuilder, deployment: &Sentinel) -> ClientBuilder {
    let (ca, cert, key) = pem(deployment);
    builder
        .tls_root_certificate(ca)
        .tls_client_certificate(cert, key)
}

/// The builder's form: the sentinels at `sentinels` (`rediss://` URLs), with the
/// deployment's CA and client certificate.
fn through(deployment: &Sentinel, sentinels: Vec<String>) -> ClientBuilder {
    trusted(
        Client::sentinel_builder(sentinels, deployment.master_name()),
        deployment,
    )
}

/// Takes the lock `name` through `client` and gives it back.
async fn lock_once(client: &Client, name: &str) {
    bounded(name, client.lock(name).acquire())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The value of `key` on the data node on `port`, read by the harness (not over TLS).
fn value_on(deployment: &Sentinel, port: u16, key: &str) -> Reply {
    deployment
        .servers()
        .iter()
        .find(|s| s.port() == port)
        .unwrap()
        .query(&["GET", key])
        .unwrap()
}

/// The error of connecting with `builder`, which must come before the connect timeout.
async fn refused(what: &str, builder: ClientBuilder) -> Error {
    let started = Instant::now();
    let err = bounded(what, builder.connect_timeout(CONNECT_TIMEOUT).connect())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < CONNECT_TIMEOUT * 2,
        "{what}: took {:?}: {err}",
        started.elapsed()
    );
    err
}

/// Checks that `builder` is refused before any connection as an invalid `url` whose
/// message says `words`.
async fn invalid_url(builder: ClientBuilder, words: &str) {
    let err = builder.connect().await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { option: "url", .. })
            && err.to_string().contains(words),
        "{err}"
    );
}

/// `err` and its sources, one line.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sentinels_lock_follow_a_failover_take_credentials_and_refuse_what_does_not_fit() {
    let mut deployment = deployment();
    let url = deployment.sentinel_url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");

    let client = locks(&deployment, &url).await;
    let primary = deployment.primary().unwrap().port();

    // A failover: the client follows the sentinels to the new primary, over TLS.
    let deployment = tokio::task::spawn_blocking(move || {
        let new = deployment.failover().unwrap();
        assert_ne!(new, primary);
        deployment
    })
    .await
    .unwrap();
    let new = deployment.primary().unwrap().port();
    let lock = client.lock("after-failover");
    let key = lock.keys().unwrap().key().to_owned();
    let guard = bounded("acquire after the failover", lock.acquire())
        .await
        .unwrap();
    assert!(
        matches!(value_on(&deployment, new, &key), Reply::Bulk(_)),
        "the lock is not on the primary the sentinels promoted"
    );
    guard.release().await.unwrap();

    refusals(&deployment, &url).await;
    credentials(&deployment, &url).await;
}

/// Locks through `url` and through the builder's `rediss://` sentinels; the client of `url`.
async fn locks(deployment: &Sentinel, url: &str) -> Client {
    // Lock and unlock through the URL, with a waiter handed the lock over the TLS pub/sub
    // connection to the primary.
    let client = bounded(
        "connect through rediss+sentinel://",
        trusted(Client::builder(url), deployment).connect(),
    )
    .await
    .unwrap();
    let lock = client.lock("over-tls");
    let key = lock.keys().unwrap().key().to_owned();
    let guard = bounded("acquire", lock.acquire()).await.unwrap();
    let primary = deployment.primary().unwrap().port();
    assert!(matches!(
        value_on(deployment, primary, &key),
        Reply::Bulk(_)
    ));
    let waiter = {
        let c = client.clone();
        tokio::spawn(async move { c.lock("over-tls").acquire().await })
    };
    common::eventually("the waiter to queue", || async {
        client.stats().waiting == 1
    })
    .await;
    let fence = guard.fencing_token();
    guard.release().await.unwrap();
    let handed = bounded("hand-off over TLS", waiter).await.unwrap().unwrap();
    assert!(handed.fencing_token() > fence);
    handed.release().await.unwrap();
    assert_eq!(value_on(deployment, primary, &key), Reply::Nil);

    // The builder's form: rediss:// sentinels.
    let built = bounded(
        "connect through rediss:// sentinels",
        through(deployment, deployment.sentinel_urls()).connect(),
    )
    .await
    .unwrap();
    lock_once(&built, "built").await;

    client
}

/// A wrong CA, a missing client certificate and plain-text URLs: refused, clearly.
async fn refusals(deployment: &Sentinel, url: &str) {
    // A CA that did not sign the sentinels' certificates: refused at once, saying so.
    let other =
        redlease_local::RedisServer::start_with(redlease_local::ServerOptions::default().tls())
            .unwrap();
    let (ca, cert, key) = pem(deployment);
    let started = Instant::now();
    let err = refused(
        "connect with a wrong CA",
        Client::builder(url)
            .tls_root_certificate(std::fs::read(other.ca_certificate().unwrap()).unwrap())
            .tls_client_certificate(cert.clone(), key.clone()),
    )
    .await;
    assert!(
        started.elapsed() < CONNECT_TIMEOUT,
        "a wrong CA waited out the connect timeout: {err}"
    );
    let text = chain(&err);
    assert!(
        text.contains("invalid peer certificate") && text.contains("tls_root_certificate"),
        "{text}"
    );

    // No client certificate, where the servers require one: refused, naming the option.
    let err = refused(
        "connect without a client certificate",
        Client::builder(url).tls_root_certificate(ca.clone()),
    )
    .await;
    let text = chain(&err);
    assert!(
        err.is_connection() && text.contains("tls_client_certificate"),
        "{text}"
    );

    // A plain URL to the TLS sentinels: refused, pointing at rediss+sentinel://.
    let plain = url.replace("rediss+sentinel://", "redis+sentinel://");
    let err = refused("connect in plain text", Client::builder(&plain)).await;
    let text = chain(&err);
    assert!(
        err.is_connection() && text.contains("rediss+sentinel://"),
        "{text}"
    );
    // With TLS options, the plain URL is refused before any connection.
    invalid_url(
        trusted(Client::builder(&plain), deployment),
        "rediss+sentinel://",
    )
    .await;
}

/// Credentials over TLS, right and wrong, for the primary and for the sentinels.
async fn credentials(deployment: &Sentinel, url: &str) {
    // Credentials over TLS: an ACL user on the data nodes (the URL's credentials are the
    // primary's) and one on the sentinels (in the builder's sentinel URLs).
    for server in deployment.servers() {
        let reply = server
            .query(&[
                "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all",
            ])
            .unwrap();
        assert_eq!(reply, Reply::Status("OK".into()));
    }
    for sentinel in deployment.sentinels() {
        let reply = sentinel
            .query(&[
                "ACL",
                "SETUSER",
                "watcher",
                "on",
                ">watcher-pw",
                "&*",
                "+@all",
            ])
            .unwrap();
        assert_eq!(reply, Reply::Status("OK".into()));
    }
    let with_user = |creds: &str| url.replacen("://", &format!("://{creds}@"), 1);
    let as_app = bounded(
        "connect as the primary's ACL user",
        trusted(Client::builder(&with_user("app:app-pw")), deployment).connect(),
    )
    .await
    .unwrap();
    lock_once(&as_app, "as-app").await;
    let err = refused(
        "connect with the primary's wrong password",
        trusted(Client::builder(&with_user("app:wrong")), deployment),
    )
    .await;
    assert!(matches!(err, Error::Auth { .. }), "{}", chain(&err));

    let sentinels = |password: &str| {
        deployment
            .sentinel_urls()
            .iter()
            .map(|u| u.replacen("://", &format!("://watcher:{password}@"), 1))
            .collect::<Vec<_>>()
    };
    let watched = bounded(
        "connect as the sentinels' ACL user",
        through(deployment, sentinels("watcher-pw")).connect(),
    )
    .await
    .unwrap();
    lock_once(&watched, "as-watcher").await;
    let err = refused(
        "connect with the sentinels' wrong password",
        through(deployment, sentinels("wrong")),
    )
    .await;
    assert!(matches!(err, Error::Auth { .. }), "{}", chain(&err));
}

#[tokio::test]
async fn sentinels_given_in_both_schemes_are_refused() {
    invalid_url(
        Client::sentinel_builder(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"], "redlease"),
        "one scheme",
    )
    .await;
}
