//! The resource's half of fencing, each pattern of `redlease::resource` working with real
//! tokens: a value kept in Redis (`fenced_set`), a SQL row (`SQLite`), an HTTP service.
//! In each, a holder whose lease ran out writes after the next holder did, and is refused.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{client, raw, server};
use redis::AsyncCommands as _;
use redlease::resource::{FENCING_TOKEN_HEADER, Fenced, fence_key, fenced_set};
use redlease::{Client, FencingToken, Renewal};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// Two successive holders of one lock: the first one's lease runs out (a fixed 50 ms
/// lease, as if it were paused), then the second one takes the lock. Returns both tokens.
async fn stale_and_new(client: &Client, name: &str) -> (FencingToken, FencingToken) {
    let stale = client
        .lock(name)
        .ttl(Duration::from_millis(50))
        .renewal(Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    let fresh = client
        .lock(name)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(!stale.is_held());
    let tokens = (stale.fencing_token(), fresh.fencing_token());
    fresh.release().await.unwrap();
    tokens
}

#[tokio::test]
async fn fenced_set_refuses_a_stale_holder_in_redis() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let (stale, fresh) = stale_and_new(&client, "stock").await;

    assert_eq!(
        fenced_set(&mut conn, "coupon:stock", 99, fresh)
            .await
            .unwrap(),
        Fenced::Written
    );
    // The same holder writes again: equal tokens pass.
    assert_eq!(
        fenced_set(&mut conn, "coupon:stock", 98, fresh)
            .await
            .unwrap(),
        Fenced::Written
    );
    // The paused holder wakes up and writes: refused, the value stays.
    assert_eq!(
        fenced_set(&mut conn, "coupon:stock", 7, stale)
            .await
            .unwrap(),
        Fenced::Refused { newer: fresh }
    );
    let value: i64 = conn.get("coupon:stock").await.unwrap();
    assert_eq!(value, 98);
    let remembered: u64 = conn.get(fence_key("coupon:stock").unwrap()).await.unwrap();
    assert_eq!(remembered, fresh.get());

    // After SCRIPT FLUSH the script is loaded again.
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        fenced_set(&mut conn, "coupon:stock", 97, fresh)
            .await
            .unwrap(),
        Fenced::Written
    );
}

#[tokio::test]
async fn the_sql_pattern_refuses_a_stale_holder() {
    let server = server();
    let client = client(&server).await;
    let (stale, fresh) = stale_and_new(&client, "account:7").await;

    let db = rusqlite::Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (7, 100);",
    )
    .unwrap();
    // The pattern of the `redlease::resource` docs.
    let write = |balance: i64, token: FencingToken| {
        let token = i64::try_from(token.get()).unwrap();
        db.execute(
            "UPDATE accounts SET balance = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2",
            rusqlite::params![balance, token, 7],
        )
        .unwrap()
    };
    assert_eq!(write(150, fresh), 1, "the new holder's write is applied");
    assert_eq!(write(160, fresh), 1, "equal tokens pass");
    assert_eq!(write(0, stale), 0, "the stale holder's write is refused");
    let (balance, fence): (i64, i64) = db
        .query_row(
            "SELECT balance, fence FROM accounts WHERE id = 7",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(balance, 160);
    assert_eq!(u64::try_from(fence).unwrap(), fresh.get());
}

/// A tiny HTTP service that applies a write only with a fencing token at least the
/// largest it accepted (409 otherwise, 428 without one). Returns its port.
async fn fenced_service() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let highest = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let highest = Arc::clone(&highest);
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut token = None;
                loop {
                    let mut line = String::new();
                    stream.read_line(&mut line).await.unwrap();
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case(FENCING_TOKEN_HEADER)
                    {
                        token = value.trim().parse::<u64>().ok();
                    }
                }
                // Accept only a token not below the largest accepted: one atomic step.
                let status = match token {
                    None => "428 Precondition Required",
                    Some(t) => {
                        match highest.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                            (t >= h).then_some(t)
                        }) {
                            Ok(_) => "200 OK",
                            Err(_) => "409 Conflict",
                        }
                    }
                };
                let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                stream.get_mut().write_all(reply.as_bytes()).await.unwrap();
            });
        }
    });
    port
}

/// `PUT /stock` with the token in the header (or none); the status code.
async fn put(port: u16, token: Option<FencingToken>) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let header = token.map_or_else(String::new, |t| {
        format!("{FENCING_TOKEN_HEADER}: {}\r\n", t.get())
    });
    let request =
        format!("PUT /stock HTTP/1.1\r\nHost: localhost\r\n{header}Content-Length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).await.unwrap();
    status.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_http_pattern_refuses_a_stale_holder() {
    let server = server();
    let client = client(&server).await;
    let (stale, fresh) = stale_and_new(&client, "http-stock").await;
    let port = fenced_service().await;
    assert_eq!(put(port, Some(fresh)).await, 200);
    assert_eq!(put(port, Some(fresh)).await, 200);
    assert_eq!(put(port, Some(stale)).await, 409);
    assert_eq!(put(port, None).await, 428);
}
