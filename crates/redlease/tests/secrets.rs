//! Secrets never leak: no password in `Debug` or error messages, and no password or whole
//! owner token in the logs, at TRACE level, redis-rs' own `log` records included.
//!
//! This file installs a global capturing subscriber: every test in it logs into the same
//! buffer, and the last check reads it all.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::error::Error as _;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::acl::{ADMIN_PASSWORD, PASSWORD, RULES, acl_server, admin, url as acl_url};
use common::{bounded, eventually, no_polling};
use redis::AsyncCommands as _;
use redlease::{Client, Error};

/// Everything logged so far, by every test of this binary.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    Arc::clone(LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&buf);
        // Also turns redis-rs' `log` records into events (tracing-log).
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Capture(Arc::clone(&writer)))
            .try_init()
            .unwrap();
        buf
    }))
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

/// The longest run of hex digits in `text`: a whole owner token is 32.
fn longest_hex_run(text: &str) -> usize {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0)
}

/// Debug and Display of `err` and its whole source chain.
fn everything(err: &Error) -> String {
    let mut text = format!("{err} {err:?}");
    let mut source = err.source();
    while let Some(s) = source {
        let _ = write!(text, " {s} {s:?}");
        source = s.source();
    }
    text
}

const SECRET: &str = "hunter2-s3cr3t";

#[tokio::test]
async fn builders_clients_and_errors_never_show_a_password() {
    let _ = logs();
    let url = format!("redis://app:{SECRET}@127.0.0.1:1");
    for builder in [
        Client::builder(&url),
        Client::builder(&format!("rediss://app:{SECRET}@127.0.0.1:1/2")),
        Client::builder(&format!(
            "redis+sentinel://app:{SECRET}@127.0.0.1:1/mymaster"
        )),
        Client::quorum_builder([url.as_str(), url.as_str(), url.as_str()]),
        #[cfg(feature = "cluster")]
        Client::cluster_builder([url.as_str()]),
    ] {
        let shown = format!("{builder:?}");
        assert!(!shown.contains(SECRET), "{shown}");
    }

    // Connection refused, with a password in the URL (port 1: nothing listens there).
    let err = bounded(
        "connect to a closed port",
        Client::builder(&url)
            .connect_timeout(Duration::from_millis(500))
            .connect(),
    )
    .await
    .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let text = everything(&err);
    assert!(!text.contains(SECRET), "{text}");

    // A malformed URL with a password.
    let err = Client::connect(&format!("redis://app:{SECRET}@127.0.0.1:notaport"))
        .await
        .unwrap_err();
    let text = everything(&err);
    assert!(matches!(err, Error::InvalidOption { .. }), "{text}");
    assert!(!text.contains(SECRET), "{text}");

    // A quorum of unreachable nodes.
    let err = bounded(
        "quorum connect to closed ports",
        Client::quorum_builder([url.as_str(), url.as_str(), url.as_str()])
            .connect_timeout(Duration::from_millis(300))
            .connect(),
    )
    .await
    .unwrap_err();
    let text = everything(&err);
    assert!(!text.contains(SECRET), "{text}");

    // A wrong password, and the right one: neither is echoed.
    let server = acl_server(RULES);
    let wrong = format!("redis://redlease:{SECRET}@127.0.0.1:{}", server.port());
    let err = bounded("connect with a wrong password", Client::connect(&wrong))
        .await
        .unwrap_err();
    let text = everything(&err);
    assert!(!text.contains(SECRET), "{text}");
    let c = Client::connect(&acl_url(&server)).await.unwrap();
    let lock = c.lock("shown");
    let guard = lock.acquire().await.unwrap();
    let mut adm = admin(&server).await;
    let token: String = adm.get(lock.keys().unwrap().key()).await.unwrap();
    for shown in [
        format!("{c:?}"),
        format!("{lock:?}"),
        format!("{guard:?}"),
        format!("{:?}", Client::builder(&acl_url(&server))),
    ] {
        assert!(!shown.contains(PASSWORD), "{shown}");
        assert!(!shown.contains(&token), "{shown}");
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn trace_logs_carry_no_password_and_no_whole_token() {
    let _ = logs();
    let server = acl_server(RULES);
    let mut adm = admin(&server).await;
    let mut tokens = Vec::new();

    // Failing connections.
    let refused = format!("redis://redlease:{SECRET}@127.0.0.1:1");
    let _ = bounded(
        "refused",
        Client::builder(&refused)
            .connect_timeout(Duration::from_millis(300))
            .connect(),
    )
    .await
    .unwrap_err();
    let wrong = format!("redis://redlease:{SECRET}@127.0.0.1:{}", server.port());
    let _ = bounded("wrong password", Client::connect(&wrong))
        .await
        .unwrap_err();

    // acquire, extend, renew, hand-off, release, and a lost lease.
    let c = Client::connect(&acl_url(&server)).await.unwrap();
    let rival = Client::connect(&acl_url(&server)).await.unwrap();
    let lock = c.lock("logged").ttl(Duration::from_millis(300));
    let key = lock.keys().unwrap().key().to_owned();
    let mut guard = lock.acquire().await.unwrap();
    tokens.push(adm.get::<_, String>(&key).await.unwrap());
    guard.extend(Duration::from_millis(300)).await.unwrap();
    let before = c.stats().renewal_round_trips;
    eventually("a renewal", || async {
        c.stats().renewal_round_trips > before
    })
    .await;
    let waiter = {
        let rival = rival.clone();
        tokio::spawn(async move {
            rival
                .lock("logged")
                .ttl(Duration::from_millis(300))
                .retry(no_polling())
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    eventually("the waiter to queue", || async {
        rival.stats().waiting == 1
    })
    .await;
    let keys = redlease::LockKeys::new("redlease:", "logged").unwrap();
    let queued: Vec<String> = adm.lrange(keys.queue(), 0, -1).await.unwrap();
    tokens.extend(queued);
    guard.release().await.unwrap();
    let handed = bounded("hand-off", waiter).await.unwrap().unwrap();
    // The new holder loses its lease behind its back: the renewal logs the loss.
    let () = adm.del(&key).await.unwrap();
    bounded("the loss to be noticed", handed.lost()).await;
    assert!(matches!(handed.release().await, Err(Error::Lost { .. })));
    // Another process's lock: a Timeout names it, not its token.
    let () = adm
        .set("redlease:foreign", "0123456789abcdef0123456789abcdef")
        .await
        .unwrap();
    tokens.push("0123456789abcdef0123456789abcdef".into());
    let err = c
        .lock("foreign")
        .wait(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert!(!everything(&err).contains("0123456789abcdef0123"), "{err}");

    let logs = captured();
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "the subscriber captured nothing: {logs}"
    );
    for secret in [SECRET, PASSWORD, ADMIN_PASSWORD] {
        assert!(!logs.contains(secret), "a password was logged:\n{logs}");
    }
    for token in &tokens {
        assert_eq!(token.len(), 32);
        assert!(
            !logs.contains(token.as_str()),
            "a whole token was logged:\n{logs}"
        );
    }
    assert!(
        longest_hex_run(&logs) < 32,
        "32 hex digits in a row (a whole token or id) were logged:\n{logs}"
    );
}
