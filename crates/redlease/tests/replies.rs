//! Script replies the library does not expect are errors, never a silent default.
//!
//! A real redis-server always runs the scripts the library sent (a script is addressed by
//! its SHA1), so these tests talk to a tiny fake Redis instead: it speaks enough RESP2 for
//! a client to connect, and answers every `EVALSHA` of one script with a reply of the
//! test's choosing (what a different script loaded under that name, or a proxy mangling
//! replies, would send).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redlease::{Client, Error};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Bound on one test step: a bug shows up as a failure, not a hang.
const STEP: Duration = Duration::from_secs(30);

/// What the fake answers: `acquire` to every `EVALSHA` whose `numkeys` is 5 (only
/// `acquire.lua` and `release.lua` take 5 keys; `release.lua` gets one ARGV, `acquire.lua`
/// at least four), `renew` to every other `EVALSHA` with an even key count (`lock_renew.lua`),
/// `:1` to the rest (`release.lua`, `lock_extend.lua`).
struct Fake {
    acquire: &'static str,
    renew: &'static str,
    renewals: AtomicUsize,
}

async fn fake(acquire: &'static str, renew: &'static str) -> (String, Arc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let fake = Arc::new(Fake {
        acquire,
        renew,
        renewals: AtomicUsize::new(0),
    });
    let shared = Arc::clone(&fake);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, Arc::clone(&shared)));
        }
    });
    (url, fake)
}

async fn serve(stream: TcpStream, fake: Arc<Fake>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(command) = next_command(&mut read).await {
        let name = command.first().map(|c| c.to_ascii_uppercase());
        let reply: String = match name.as_deref() {
            Some("PING") => "+PONG\r\n".into(),
            Some("SUBSCRIBE") => {
                let channel = command.get(1).cloned().unwrap_or_default();
                format!(
                    "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
                    channel.len()
                )
            }
            Some("EVALSHA") => {
                let keys: usize = command.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                let argv = command.len().saturating_sub(3 + keys);
                if keys == 5 && argv >= 4 {
                    fake.acquire.into()
                } else if keys >= 2 && keys.is_multiple_of(2) && argv == keys / 2 * 3 {
                    // lock_renew.lua: per lease two keys, and three arguments.
                    fake.renewals.fetch_add(1, Ordering::Relaxed);
                    fake.renew.into()
                } else {
                    ":1\r\n".into()
                }
            }
            _ => "+OK\r\n".into(),
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// One RESP2 command (an array of bulk strings); `None` at the end of the stream.
async fn next_command<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<Vec<String>> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        read.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut data = vec![0; len + 2];
        read.read_exact(&mut data).await.ok()?;
        data.truncate(len);
        out.push(String::from_utf8(data).ok()?);
    }
    Some(out)
}

async fn client(url: &str) -> Client {
    tokio::time::timeout(STEP, Client::connect(url))
        .await
        .expect("connect hung")
        .expect("the fake accepts connections")
}

fn assert_unexpected_reply(result: redlease::Result<Option<redlease::Guard>>, what: &str) {
    match result {
        Err(err @ Error::Redis { .. }) => {
            let Error::Redis { source, .. } = &err else {
                unreachable!()
            };
            assert_eq!(
                source.kind(),
                redis::ErrorKind::UnexpectedReturnType,
                "{what}: {source}"
            );
            assert!(source.to_string().contains("acquire.lua"), "{source}");
            assert!(!err.is_connection() && !err.is_transient(), "{what}: {err}");
            let text = err.to_string();
            assert!(
                text.contains("a redlease script answered something it never sends"),
                "{text}"
            );
        }
        other => panic!("{what}: expected an unexpected-reply error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_acquire_status_is_an_error_not_busy() {
    let (url, _fake) = fake("*3\r\n:5\r\n:7\r\n:0\r\n", "*1\r\n:1\r\n").await;
    let client = client(&url).await;
    let result = tokio::time::timeout(STEP, client.lock("job").try_acquire())
        .await
        .expect("try_acquire hung");
    assert_unexpected_reply(result, "status 5");
}

#[tokio::test]
async fn a_negative_fencing_token_is_an_error_not_zero() {
    let (url, _fake) = fake(":-3\r\n", "*1\r\n:1\r\n").await;
    let client = client(&url).await;
    let result = tokio::time::timeout(STEP, client.lock("job").try_acquire())
        .await
        .expect("try_acquire hung");
    assert_unexpected_reply(result, "fence -3");
}

#[tokio::test]
async fn a_short_acquire_reply_is_an_error() {
    let (url, _fake) = fake("*2\r\n:1\r\n:7\r\n", "*1\r\n:1\r\n").await;
    let client = client(&url).await;
    let result = tokio::time::timeout(STEP, client.lock("job").try_acquire())
        .await
        .expect("try_acquire hung");
    assert!(result.is_err(), "{result:?}");
}

/// A renewal answered with fewer results than leases used to be skipped silently: the
/// lease stayed due and was renewed again at once, in a busy loop, until it ran out. Now
/// it is a failed renewal, retried after a pause (a tenth of the TTL) like any other.
#[tokio::test]
async fn a_short_renewal_reply_is_a_failed_renewal() {
    let (url, fake) = fake(":7\r\n", "*0\r\n").await;
    let client = client(&url).await;
    let ttl = Duration::from_millis(900);
    let guard = tokio::time::timeout(STEP, client.lock("job").ttl(ttl).acquire())
        .await
        .expect("acquire hung")
        .expect("the fake grants the lock");
    tokio::time::timeout(STEP, guard.lost())
        .await
        .expect("the lease must run out: no renewal succeeds");
    let renewals = fake.renewals.load(Ordering::Relaxed);
    // From the first renewal (a third into the lease) to the end of the lease, one retry
    // every ttl/10 = 90 ms: about 7. A busy loop sends hundreds or more.
    assert!(
        (1..=40).contains(&renewals),
        "{renewals} renewal calls during one {ttl:?} lease"
    );
}
