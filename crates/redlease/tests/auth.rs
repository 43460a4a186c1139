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
