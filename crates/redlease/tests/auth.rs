//! A server that wants a password: none given, or a wrong one, is refused at connect with
//! `Error::Auth`, which says so (and never echoes the password); the right one connects.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use common::bounded;
use redlease::{Client, Error};
use redlease_local::{RedisServer, ServerOptions};

const PASSWORD: &str = "auth-pw-52e1";

fn server_with_password() -> RedisServer {
    RedisServer::start_with(ServerOptions::default().arg("--requirepass").arg(PASSWORD))
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

async fn refused(url: &str) -> Error {
    bounded("connect", Client::connect(url)).await.unwrap_err()
}

#[tokio::test]
async fn no_password_where_one_is_wanted_is_an_authentication_error() {
    let server = server_with_password();
    let err = refused(&format!("redis://127.0.0.1:{}", server.port())).await;
    let text = err.to_string();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(text.contains("NOAUTH"), "{text}");
    assert!(text.contains(&server.port().to_string()), "{text}");
    assert!(text.contains("redis://USER:PASSWORD@"), "{text}");
    assert!(!err.is_connection(), "{err:?}");
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_error_that_does_not_echo_it() {
    let server = server_with_password();
    let wrong = format!("redis://:not-{PASSWORD}@127.0.0.1:{}", server.port());
    let err = refused(&wrong).await;
    let text = format!("{err} {err:?}");
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(!text.contains(PASSWORD), "{text}");
}

#[tokio::test]
async fn the_right_password_connects() {
    let server = server_with_password();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port());
    let client = bounded("connect", Client::connect(&url)).await.unwrap();
    let guard = bounded("acquire", client.lock("auth").acquire())
        .await
        .unwrap();
    guard.release().await.unwrap();
}

/// The advice gives the credentials' place in the scheme of the URL given: a
/// `rediss://` URL gets a `rediss://` form, never a plain `redis://` one.
#[cfg(feature = "tls")]
#[tokio::test]
async fn the_advice_speaks_the_urls_own_scheme() {
    let server = RedisServer::start_with(
        ServerOptions::default()
            .tls()
            .arg("--requirepass")
            .arg(PASSWORD),
    )
    .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    let ca = std::fs::read(server.ca_certificate().unwrap()).unwrap();
    let connect = Client::builder(&server.tls_url().unwrap())
        .tls_root_certificate(ca)
        .connect();
    let err = bounded("connect", connect).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(text.contains("(rediss://USER:PASSWORD@host:port"), "{text}");
    assert!(!text.contains("redis://USER"), "{text}");
}
