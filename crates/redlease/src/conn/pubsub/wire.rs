//! What a [`Link`](super::Link) sends a server besides its subscriptions: `SSUBSCRIBE`
//! and `SUNSUBSCRIBE` one channel at a time, `ROLE`, and the errors and time bounds around
//! them.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// What a server says it is (`ROLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A primary (`master`).
    Primary,
    /// A replica (`slave`).
    Replica,
    /// A server that refused `ROLE` (an ACL without it).
    Refused,
    /// A sentinel, or an answer not understood.
    Other,
}

/// `targets` with RESP3 switched on (pub/sub messages arrive as pushes).
pub(super) fn resp3(targets: &[redis::Client]) -> redis::RedisResult<Vec<redis::Client>> {
    targets
        .iter()
        .map(|redis| {
            let info = redis.get_connection_info().clone();
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(redis::ProtocolVersion::RESP3);
            redis::Client::open(info.set_redis_settings(settings))
        })
        .collect()
}

/// `SSUBSCRIBE channel` or `SUNSUBSCRIBE channel` (one channel) on a RESP3 connection:
/// redis-rs takes the server's confirmation push as the command's reply, and a refusal
/// (`MOVED`: the slot is served elsewhere) is an error.
pub(super) async fn shard_command(
    conn: &mut MultiplexedConnection,
    command: &str,
    channel: &str,
) -> redis::RedisResult<()> {
    redis::cmd(command)
        .arg(channel)
        .query_async::<redis::Value>(conn)
        .await
        .map(drop)
}

/// Whether the node behind `conn` is a primary (`ROLE`), within `timeout`. A node that does
/// not answer in time counts as not one; one that refuses `ROLE` (an ACL without it) counts
/// as one: a subscription on a replica costs its waiters their turn, never a grant they did
/// not get (a grant only wakes a Cluster waiter, which confirms it).
pub(super) async fn within_primary(timeout: Duration, conn: &mut MultiplexedConnection) -> bool {
    matches!(
        role(timeout, conn).await,
        Some(Role::Primary | Role::Refused)
    )
}

/// What the server behind `conn` says it is (`ROLE`), within `timeout`; `None` when it
/// does not answer in time (or the connection failed).
pub(super) async fn role(timeout: Duration, conn: &mut MultiplexedConnection) -> Option<Role> {
    let cmd = redis::cmd("ROLE");
    match tokio::time::timeout(timeout, cmd.query_async::<redis::Value>(conn)).await {
        Ok(Ok(redis::Value::Array(fields))) => Some(match fields.first() {
            Some(redis::Value::BulkString(role)) if role == b"master" => Role::Primary,
            Some(redis::Value::BulkString(role)) if role == b"slave" => Role::Replica,
            _ => Role::Other,
        }),
        Ok(Err(e)) if e.code().is_some() => Some(Role::Refused),
        Ok(Ok(_)) => Some(Role::Other),
        Ok(Err(_)) | Err(_) => None,
    }
}

/// The error for a shard channel subscribed on a node that is not a primary: a server
/// error, so that the channel's owner places it anew.
pub(super) fn not_primary() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
        "not the slot's primary",
    ))
}

pub(super) fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// `f` bounded by `timeout`; a late reply is a connection error.
pub(super) async fn within(
    timeout: Duration,
    f: impl Future<Output = redis::RedisResult<()>>,
) -> redis::RedisResult<()> {
    tokio::time::timeout(timeout, f)
        .await
        .unwrap_or_else(|_| Err(timed_out("no reply in time")))
}
