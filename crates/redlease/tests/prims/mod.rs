//! Shared by the script-level tests of the semaphore, the read-write lock and the mutex's
//! hand-off (`semaphore_scripts.rs`, `rwlock_scripts.rs`, `handoff_skipped.rs`): the
//! scripts as the engine will send them (preludes in front), their keys, and calls through
//! plain redis-rs.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::panic,
    clippy::missing_panics_doc
)]

use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Script, Value};
use redlease::{LockKeys, Primitive};

/// The library's script texts, put together by its own recipes (`src/lua.rs`, included
/// here as a module: one place says which libraries go in front of which script).
#[path = "../../src/lua.rs"]
mod lua;

pub const SEM_ACQUIRE: &str = lua::SEM_ACQUIRE_LUA;
pub const SEM_RELEASE: &str = lua::SEM_RELEASE_LUA;
pub const SEM_RESIZE: &str = lua::SEM_RESIZE_LUA;
pub const RW_ACQUIRE: &str = lua::RW_ACQUIRE_LUA;
pub const RW_RELEASE: &str = lua::RW_RELEASE_LUA;
pub const RW_DOWNGRADE: &str = lua::RW_DOWNGRADE_LUA;
pub const LEASE_EXTEND: &str = lua::LEASE_EXTEND_LUA;
pub const LEASE_RENEW: &str = lua::LEASE_RENEW_LUA;
pub const RAISE_FENCE: &str = lua::RAISE_FENCE_LUA;
/// The mutex's own scripts, for the conflict tests.
pub const MUTEX_ACQUIRE: &str = lua::ACQUIRE_LUA;
pub const MUTEX_RELEASE: &str = lua::RELEASE_LUA;

/// A pause for steps that wait on Redis' clock (a lease running out).
const POLL: Duration = Duration::from_millis(5);

/// The keys of a semaphore, a read-write lock and a mutex of one name, as the library
/// derives them (`LockKeys` of each primitive).
#[derive(Debug, Clone)]
pub struct Keys {
    pub key: String,
    pub mutex: LockKeys,
    semaphore: LockKeys,
    rwlock: LockKeys,
}

impl Keys {
    pub fn new(name: &str) -> Self {
        Self {
            key: name.to_owned(),
            mutex: LockKeys::new("", name).unwrap(),
            semaphore: LockKeys::of("", name, Primitive::Semaphore).unwrap(),
            rwlock: LockKeys::of("", name, Primitive::RwLock).unwrap(),
        }
    }

    pub fn fence(&self) -> String {
        self.mutex.fence().to_owned()
    }

    pub fn channel(&self) -> String {
        self.mutex.channel().to_owned()
    }

    /// KEYS of every semaphore script.
    pub fn sem(&self) -> [String; 6] {
        let k = &self.semaphore;
        [
            self.key.clone(),
            self.fence(),
            k.holder().to_owned(),
            k.queue().to_owned(),
            k.waiters().to_owned(),
            k.permits().unwrap().to_owned(),
        ]
    }

    /// KEYS of every read-write lock script.
    pub fn rw(&self) -> [String; 6] {
        let k = &self.rwlock;
        [
            self.key.clone(),
            self.fence(),
            k.holder().to_owned(),
            k.queue().to_owned(),
            k.waiters().to_owned(),
            k.holds().unwrap().to_owned(),
        ]
    }

    /// The three keys of a permit for `lease_extend.lua` / `lease_renew.lua`.
    pub fn sem_lease(&self) -> [String; 3] {
        let k = self.sem();
        [k[0].clone(), k[2].clone(), k[5].clone()]
    }

    /// The three keys of a read-write hold for `lease_extend.lua` / `lease_renew.lua`.
    pub fn rw_lease(&self) -> [String; 3] {
        let k = self.rw();
        [k[5].clone(), k[2].clone(), k[0].clone()]
    }
}

/// Queue arguments: the grant channel and the queue linger in ms.
pub type Join<'a> = Option<(&'a str, u64)>;

fn join_args(invocation: &mut redis::ScriptInvocation<'_>, join: Join<'_>) {
    match join {
        Some((channel, linger)) => invocation.arg("grants").arg(channel).arg(linger),
        None => invocation.arg("no"),
    };
}

/// `{status, fence, pttl}`.
pub type Reply = (i64, i64, i64);

/// An acquisition script's reply as `{status, fence, pttl}`: a fresh grant, which the
/// scripts answer with its fencing token alone, as `{1, fence, 0}`.
pub async fn acquired(
    invocation: &redis::ScriptInvocation<'_>,
    conn: &mut MultiplexedConnection,
) -> RedisResult<Reply> {
    match invocation.invoke_async(conn).await? {
        Value::Int(fence) => Ok((1, fence, 0)),
        other => {
            // A queued waiter behind the first two places gets a fourth element (1).
            let parts: Vec<i64> = redis::from_redis_value(other)?;
            match parts[..] {
                [status, fence, pttl] | [status, fence, pttl, 1] => Ok((status, fence, pttl)),
                _ => panic!("an acquire reply of an unexpected shape: {parts:?}"),
            }
        }
    }
}

pub async fn sem_acquire(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    ttl_ms: u64,
    permits: u64,
    join: Join<'_>,
) -> RedisResult<Reply> {
    let script = Script::new(SEM_ACQUIRE);
    let mut invocation = script.key(&keys.sem()[..]);
    invocation
        .arg(token)
        .arg(ttl_ms)
        .arg(format!("host of {token}"))
        .arg(permits);
    join_args(&mut invocation, join);
    acquired(&invocation, conn).await
}

/// An attempt of `token` at one of `permits` permits for a minute, taking no queue place.
pub async fn sem_attempt(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    permits: u64,
) -> Reply {
    sem_acquire(conn, keys, token, 60_000, permits, None)
        .await
        .unwrap()
}

pub async fn sem_release(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    announce: bool,
) -> RedisResult<i64> {
    let script = Script::new(SEM_RELEASE);
    let mut invocation = script.key(&keys.sem()[..]);
    invocation.arg(token);
    if announce {
        invocation.arg(keys.channel());
    }
    Ok(held_flag(invocation.invoke_async(conn).await?))
}

/// `sem_resize.lua`: the count set to `permits`, kept `keep_ms`, permits left free
/// announced on the release channel when `announce`; the count before (0: none).
pub async fn sem_resize(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    permits: u64,
    keep_ms: u64,
    announce: bool,
) -> RedisResult<i64> {
    let script = Script::new(SEM_RESIZE);
    let mut invocation = script.key(&keys.sem()[..]);
    invocation.arg(permits).arg(keep_ms);
    if announce {
        invocation.arg(keys.channel());
    }
    invocation.invoke_async(conn).await
}

pub async fn rw_acquire(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    ttl_ms: u64,
    mode: &str,
    join: Join<'_>,
) -> RedisResult<Reply> {
    let script = Script::new(RW_ACQUIRE);
    let mut invocation = script.key(&keys.rw()[..]);
    invocation
        .arg(token)
        .arg(ttl_ms)
        .arg(format!("host of {token}"))
        .arg(mode);
    join_args(&mut invocation, join);
    acquired(&invocation, conn).await
}

pub async fn rw_release(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    announce: bool,
) -> RedisResult<i64> {
    let script = Script::new(RW_RELEASE);
    let mut invocation = script.key(&keys.rw()[..]);
    invocation.arg(token);
    if announce {
        invocation.arg(keys.channel());
    }
    Ok(held_flag(invocation.invoke_async(conn).await?))
}

/// A shared lease's release reply as 1 or 0 (whether the lease was ours): the script
/// answers `{1 or 0, hand-off, ...}` instead when it handed the lease on.
fn held_flag(reply: Value) -> i64 {
    match reply {
        Value::Int(n) => n,
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => *n,
            _ => panic!("a release reply without its flag: {items:?}"),
        },
        other => panic!("an unexpected release reply: {other:?}"),
    }
}

pub async fn rw_downgrade(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
) -> RedisResult<i64> {
    Script::new(RW_DOWNGRADE)
        .key(&keys.rw()[..])
        .arg(token)
        .invoke_async(conn)
        .await
}

pub async fn extend(
    conn: &mut MultiplexedConnection,
    lease: &[String; 3],
    token: &str,
    ttl_ms: u64,
) -> RedisResult<i64> {
    Script::new(LEASE_EXTEND)
        .key(&lease[..])
        .arg(token)
        .arg(ttl_ms)
        .invoke_async(conn)
        .await
}

pub async fn renew(
    conn: &mut MultiplexedConnection,
    leases: &[(&[String; 3], &str, u64)],
) -> RedisResult<Vec<i64>> {
    let script = Script::new(LEASE_RENEW);
    let mut invocation = script.prepare_invoke();
    for (keys, _, _) in leases {
        invocation.key(&keys[..]);
    }
    for (_, token, ttl) in leases {
        invocation.arg(*token).arg(*ttl);
    }
    invocation.invoke_async(conn).await
}

/// The server's time in ms since 1970.
pub async fn now_ms(conn: &mut MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1000 + micros / 1000
}

/// The lease expiry (ms since 1970) of `token` in `zset`, if it has one.
pub async fn score(conn: &mut MultiplexedConnection, zset: &str, token: &str) -> Option<i64> {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(zset)
        .arg(token)
        .query_async(conn)
        .await
        .unwrap();
    #[allow(clippy::cast_possible_truncation)]
    score.map(|s| s as i64)
}

/// Waits until the server's clock has passed `token`'s lease expiry in `zset` (the lease
/// ran out), without touching the keys.
pub async fn until_expired(conn: &MultiplexedConnection, zset: &str, token: &str) {
    let mut conn = conn.clone();
    let expiry = score(&mut conn, zset, token)
        .await
        .unwrap_or_else(|| panic!("{token} holds no lease in {zset}"));
    crate::common::bounded("a lease to run out", async {
        while now_ms(&mut conn).await <= expiry {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
}

pub async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    n == 1
}

pub async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

pub async fn zcard(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

pub async fn lrange(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

/// A waiter's client listening on its grant channel, as the library's Notifier does.
pub struct Listener {
    stream: redis::aio::PubSubStream,
    pub channel: String,
}

impl Listener {
    pub async fn new(server: &redlease_local::RedisServer, channel: &str) -> Self {
        let client = redis::Client::open(server.admin_url()).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub.subscribe(channel).await.unwrap();
        Self {
            stream: pubsub.into_on_message(),
            channel: channel.to_owned(),
        }
    }

    /// The next hand-off, as (fence, token, key) of "<fence> <token> <key>" (nudges,
    /// "next <ttl> <token> <key>", passed over).
    pub async fn grant(&mut self) -> (i64, String, String) {
        let text = loop {
            let msg = crate::common::bounded("a grant message", self.stream.next())
                .await
                .unwrap();
            let text: String = msg.get_payload().unwrap();
            if !text.starts_with("next ") {
                break text;
            }
        };
        let mut parts = text.splitn(3, ' ');
        let fence = parts.next().unwrap().parse().unwrap();
        let token = parts.next().unwrap().to_owned();
        let key = parts.next().unwrap().to_owned();
        (fence, token, key)
    }

    /// The next raw message payload.
    pub async fn payload(&mut self) -> String {
        let msg = crate::common::bounded("a message", self.stream.next())
            .await
            .unwrap();
        msg.get_payload().unwrap()
    }
}

/// The server error `result` carries: its code and its full text.
pub fn server_error<T: std::fmt::Debug>(result: RedisResult<T>) -> (String, String) {
    match result {
        Ok(v) => panic!("expected an error reply, got {v:?}"),
        Err(e) => {
            let text = e.to_string();
            // Redis 6.2 wraps an error raised in a script as "ERR Error running script
            // (call to f_<sha1>): @user_script:<line>: WRONGTYPE ..."; 7.0+ keep its code.
            let wrapped = text
                .split_once("@user_script:")
                .map(|(_, rest)| rest.trim_start_matches(|c: char| c.is_ascii_digit()))
                .and_then(|rest| rest.strip_prefix(": "))
                .and_then(|rest| rest.split_whitespace().next())
                .filter(|code| code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'));
            let code = match (e.code(), wrapped) {
                (Some("ERR"), Some(inner)) if !inner.is_empty() => inner,
                (code, _) => code.unwrap_or_default(),
            };
            (code.to_owned(), text)
        }
    }
}

/// `EVAL` of `source` (what a cluster node that lacks the script is sent).
pub async fn eval(
    conn: &mut MultiplexedConnection,
    source: &str,
    keys: &[String],
    args: &[String],
) -> RedisResult<Value> {
    redis::cmd("EVAL")
        .arg(source)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query_async(conn)
        .await
}

pub async fn script_flush(conn: &mut MultiplexedConnection) {
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .unwrap();
}

fn mutex_keys(keys: &Keys) -> [&str; 5] {
    let m = &keys.mutex;
    [m.key(), m.fence(), m.holder(), m.queue(), m.waiters()]
}

/// The mutex's `acquire.lua` on the same name, only trying.
pub async fn mutex_acquire(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
) -> RedisResult<Reply> {
    mutex_join(conn, keys, token, None).await
}

/// The mutex's `acquire.lua`, queueing as `join` says when the lock is busy.
pub async fn mutex_join(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    join: Join<'_>,
) -> RedisResult<Reply> {
    let script = Script::new(MUTEX_ACQUIRE);
    let mut invocation = script.key(&mutex_keys(keys)[..]);
    invocation.arg(token).arg(60_000).arg("mutex holder");
    join_args(&mut invocation, join);
    acquired(&invocation, conn).await
}

/// The mutex's `acquire.lua` as a waiter's later attempt that only tries: `mode` is
/// `leave` (its grants cannot reach it) or `listen` (it listens for release notices
/// instead).
pub async fn mutex_try_as(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
    mode: &str,
) -> RedisResult<Reply> {
    let script = Script::new(MUTEX_ACQUIRE);
    let mut invocation = script.key(&mutex_keys(keys)[..]);
    invocation
        .arg(token)
        .arg(60_000)
        .arg("mutex holder")
        .arg(mode);
    if mode == "listen" {
        invocation.arg("").arg(60_000);
    }
    acquired(&invocation, conn).await
}

/// The mutex's `release.lua` on the same name: 1 freed, 0 not ours (a hand-off's grant
/// message is an error here; see [`mutex_hand_off`]).
pub async fn mutex_release(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
) -> RedisResult<i64> {
    Ok(redis::from_redis_value(
        mutex_hand_off(conn, keys, token).await?,
    )?)
}

/// The mutex's `release.lua`: 1 freed, 0 not ours, else a hand-off's grant message.
pub async fn mutex_hand_off(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
) -> RedisResult<Value> {
    Script::new(MUTEX_RELEASE)
        .key(&mutex_keys(keys)[..])
        .arg(token)
        .invoke_async(conn)
        .await
}

/// Each of `keys` but the fencing counter `fence` has an expiry of at most `bound_ms` (it
/// outlives none of `what`'s holders and waiters), and every one of them then expires by
/// itself; the counter keeps an expiry of its own and outlives them.
pub async fn all_but_the_fence_expire(
    conn: &mut MultiplexedConnection,
    keys: &[String],
    fence: &str,
    bound_ms: i64,
    what: &str,
) {
    for key in keys {
        let ttl = pttl(conn, key).await;
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
        if key != fence {
            assert!(ttl <= bound_ms, "{key} outlives the {what} ({ttl} ms)");
        }
    }
    for key in keys.iter().filter(|k| *k != fence) {
        crate::common::eventually(&format!("{key} to expire"), || {
            let mut conn = conn.clone();
            let key = key.clone();
            async move { !exists(&mut conn, &key).await }
        })
        .await;
    }
    assert!(pttl(conn, fence).await > 0);
}
