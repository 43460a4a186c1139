//! `#[redlease::locked]` without `client = ...`: the process-wide default client. A test
//! binary of its own, since the default is set once per process.
#![cfg(feature = "macros")]
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use common::{bounded, client, server};
use redlease::Error;

/// Default key: the module path and the function name.
#[redlease::locked(guard = guard)]
async fn nightly_report() -> Result<String, Error> {
    Ok(guard.name().to_owned())
}

#[tokio::test]
async fn async_functions_use_the_default_client_once_it_is_set() {
    let err = nightly_report().await.unwrap_err();
    assert!(matches!(err, Error::NoDefaultClient { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "no redlease client: call `redlease::set_default_client` once at start-up, or pass `client = ...` to `#[redlease::locked]`"
    );

    let server = server();
    redlease::set_default_client(client(&server).await).unwrap();
    let name = bounded("the locked report", nightly_report())
        .await
        .unwrap();
    assert_eq!(name, "locked_default::nightly_report");

    let again = redlease::set_default_client(client(&server).await).unwrap_err();
    assert!(
        matches!(again, Error::DefaultClientSet { setter, .. } if setter == "redlease::set_default_client"),
        "{again:?}"
    );
    assert_eq!(
        again.to_string(),
        "a default client is already set; call `redlease::set_default_client` once, at start-up"
    );
}

#[redlease::locked(key = "sync:{n}")]
fn sync_report(n: u8) -> Result<u8, Error> {
    Ok(n)
}

#[test]
fn sync_functions_use_the_default_blocking_client() {
    let err = sync_report(1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no redlease client: call `redlease::blocking::set_default_client` once at start-up, or pass `client = ...` to `#[redlease::locked]`"
    );
    let server = server();
    let c = redlease::blocking::Client::connect(&server.url()).unwrap();
    redlease::blocking::set_default_client(c.clone()).unwrap();
    assert_eq!(sync_report(2).unwrap(), 2);
    let again = redlease::blocking::set_default_client(c).unwrap_err();
    assert!(
        matches!(again, Error::DefaultClientSet { setter, .. } if setter == "redlease::blocking::set_default_client"),
        "{again:?}"
    );
}
