//! One endpoint and its connection: a Redis, a cluster (one routing connection), or a
//! Sentinel-managed primary that is looked up again when it moves; and the script calls
//! every operation makes on one node.
//!
//! A connection that left a request unanswered for the response timeout is replaced by a
//! new one (a Sentinel-managed node asks the sentinels again): redis-rs reconnects by
//! itself only when the connection is closed, and a silent partition (packets dropped,
//! no reset) closes nothing. Once the partition heals, the old connection would carry
//! nothing until the kernel's next retransmission, which backs off to minutes; a new one
//! works at once.
//!
//! The connection itself, and the watch that finds it silent, are in `conn`.

mod conn;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, RedisResult, Value};

use super::sentinel::Follower;
use crate::error::is_connection_error;
use crate::keys::LockKeys;
use crate::replies::{self, Released, Reply};
use crate::scripts::{self, AcquireArgs, EvalOnNoscript, Kind, Notices, RenewItem};

pub(crate) use conn::Conn;
#[cfg(feature = "cluster")]
pub(crate) use conn::ErasedConn;

/// One endpoint: a Redis, a cluster, or a Sentinel-managed primary.
pub(crate) struct Node {
    conn: RwLock<Conn>,
    /// How to replace a single Redis' stale connection (none for a cluster, a
    /// Sentinel-managed primary, or the application's own connection manager).
    redial: Option<Redial>,
    /// Whether the node is taken for down after a connection error (quorum nodes).
    pub(crate) health: Arc<Health>,
    /// Set when the primary is found through Sentinel: asked again after a failover.
    sentinel: Option<SentinelLink>,
    /// The address, password redacted, for messages.
    pub(crate) label: String,
    /// Told when a request went unanswered for the response timeout (see
    /// [`Node::on_stale`]).
    stale_hook: std::sync::OnceLock<StaleHook>,
}

/// What a node tells when its connection went silent: the client's pub/sub links check
/// theirs at once.
pub(crate) type StaleHook = Arc<dyn Fn() + Send + Sync>;

/// What a single Redis' connection is made from, to replace it.
struct Redial {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The response timeout.
    stale_after: Duration,
}

#[cfg_attr(
    not(feature = "sentinel"),
    allow(
        dead_code,
        reason = "never made without the sentinel feature; the calls stay"
    )
)]
struct SentinelLink {
    /// Hears the sentinels and names the primary a majority of them elect. While it says
    /// the primary may have moved (`adrift`), the old connection is not used: it would
    /// reconnect by itself to the old address, where a crashed primary restarted with an
    /// empty dataset, or an old primary a planned failover has not demoted yet, may answer
    /// as a primary for seconds (two primaries granting the same lock).
    follower: Arc<Follower>,
    config: ConnectionManagerConfig,
    /// Serialises look-ups: one task asks the sentinels, the others use its answer.
    lookup: tokio::sync::Mutex<()>,
    /// Bound on one look-up (the client's response timeout).
    timeout: std::time::Duration,
}

impl Node {
    /// A node on `conn`, which is never replaced (it reconnects by itself when closed).
    pub(crate) fn new(conn: Conn, label: String) -> Self {
        Self {
            conn: RwLock::new(conn),
            redial: None,
            health: Arc::default(),
            sentinel: None,
            label,
            stale_hook: std::sync::OnceLock::new(),
        }
    }

    /// A single Redis on `manager`, made of `client` and `config`, and made again the
    /// same way when a request on it goes unanswered for `response_timeout`.
    pub(crate) fn redialing(
        manager: ConnectionManager,
        client: redis::Client,
        config: ConnectionManagerConfig,
        response_timeout: Duration,
        label: String,
    ) -> Self {
        Self {
            conn: RwLock::new(Conn::watched(manager, response_timeout)),
            redial: Some(Redial {
                client,
                config,
                stale_after: response_timeout,
            }),
            health: Arc::default(),
            sentinel: None,
            label,
            stale_hook: std::sync::OnceLock::new(),
        }
    }

    /// A node whose primary `follower` names; `conn` is connected to the current one.
    #[cfg(feature = "sentinel")]
    pub(crate) fn with_sentinel(
        conn: ConnectionManager,
        follower: Arc<Follower>,
        config: ConnectionManagerConfig,
        timeout: std::time::Duration,
        label: String,
    ) -> Self {
        Self {
            conn: RwLock::new(Conn::watched(conn, timeout)),
            redial: None,
            health: Arc::default(),
            sentinel: Some(SentinelLink {
                follower,
                config,
                lookup: tokio::sync::Mutex::new(()),
                timeout,
            }),
            label,
            stale_hook: std::sync::OnceLock::new(),
        }
    }

    /// Sets what to tell (once) when a request on this node goes unanswered for the
    /// response timeout.
    pub(crate) fn on_stale(&self, hook: StaleHook) {
        let _ = self.stale_hook.set(hook);
    }

    /// The sentinels' follower of a Sentinel-managed node.
    pub(crate) fn follower(&self) -> Option<&Arc<Follower>> {
        self.sentinel.as_ref().map(|link| &link.follower)
    }

    /// The current connection (a clone of a multiplexed handle). A stale one (see
    /// [`Conn::watched`]) is replaced first: a single Redis' by a new connection (made
    /// lazily, by the first request on it); a Sentinel-managed primary's is taken for
    /// moved, so that the next request asks the sentinels again.
    pub(crate) fn conn(&self) -> Conn {
        let conn = self
            .conn
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if !conn.is_stale() {
            return conn;
        }
        if let Some(hook) = self.stale_hook.get() {
            hook();
        }
        if let Some(link) = &self.sentinel {
            link.follower.set_adrift();
            return conn;
        }
        let Some(redial) = &self.redial else {
            return conn;
        };
        // A connection's tasks run on the runtime that makes it: outside one, keep the
        // old connection (it still reconnects when the kernel closes it).
        if tokio::runtime::Handle::try_current().is_err() {
            return conn;
        }
        let mut slot = self.conn.write().unwrap_or_else(PoisonError::into_inner);
        if !slot.is_stale() {
            // Another task replaced it meanwhile.
            return slot.clone();
        }
        match ConnectionManager::new_lazy_with_config(redial.client.clone(), redial.config.clone())
        {
            Ok(manager) => {
                tracing::info!(node = %self.label, "no reply within the response timeout; connecting again");
                *slot = Conn::watched(manager, redial.stale_after);
            }
            Err(e) => {
                tracing::warn!(node = %self.label, error = %e, "could not make a new connection; keeping the old one");
            }
        }
        slot.clone()
    }

    /// Runs a script on the node. For a Sentinel-managed node, an error that says the
    /// primary moved (connection lost, `READONLY` from a demoted primary) makes it ask the
    /// sentinels for the current primary and try once more there.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &scripts::Call,
    ) -> RedisResult<T> {
        self.health.call(self.invoke_unrecorded(invocation)).await
    }

    async fn invoke_unrecorded<T: FromRedisValue>(
        &self,
        invocation: &scripts::Call,
    ) -> RedisResult<T> {
        let (mut conn, events) = self.current_since().await?;
        match invocation.invoke_async(&mut conn).await {
            Err(e) if self.must_follow(&e) => {
                self.follow(Some(e)).await?;
                let (mut conn, events) = self.current_since().await?;
                let result = invocation.invoke_async(&mut conn).await;
                self.unless_failed_over(events, result)
            }
            other => self.unless_failed_over(events, other),
        }
    }

    /// Sends a pipeline (whose script calls are `EVALSHA`s of our scripts, run anyway on
    /// `NOSCRIPT` as [`scripts::EvalOnNoscript`] says); follows a moved primary as
    /// [`Node::invoke`] does.
    pub(crate) async fn pipeline<T: FromRedisValue>(&self, pipe: &Pipeline) -> RedisResult<T> {
        self.health.call(self.pipeline_unrecorded(pipe)).await
    }

    async fn pipeline_unrecorded<T: FromRedisValue>(&self, pipe: &Pipeline) -> RedisResult<T> {
        let (mut conn, events) = self.current_since().await?;
        match pipe.query_async(&mut EvalOnNoscript(&mut conn)).await {
            Err(e) if self.must_follow(&e) => {
                self.follow(Some(e)).await?;
                let (mut conn, events) = self.current_since().await?;
                let result = pipe.query_async(&mut EvalOnNoscript(&mut conn)).await;
                self.unless_failed_over(events, result)
            }
            other => self.unless_failed_over(events, other),
        }
    }

    /// Sends one plain command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        self.health
            .call(async {
                let mut conn = self.current().await?;
                cmd.query_async(&mut conn).await
            })
            .await
    }

    fn must_follow(&self, e: &redis::RedisError) -> bool {
        self.sentinel.is_some() && primary_moved(e)
    }

    /// The sentinels' failover events seen so far (0 for other nodes).
    fn events(&self) -> u64 {
        self.follower().map_or(0, |f| f.events())
    }

    /// `result`, unless the sentinels started moving the primary while the call ran: then
    /// nobody can tell whether the old primary ran it after its replica was promoted (a
    /// write the new primary never sees), so its outcome is unknown, a connection error
    /// (an acquisition gives back whatever it may have taken, and tries again).
    fn unless_failed_over<T>(&self, before: u64, result: RedisResult<T>) -> RedisResult<T> {
        match result {
            Ok(_) if self.events() != before => {
                tracing::debug!(node = %self.label, "the primary changed during the call; its outcome is unknown");
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the sentinels failed the primary over during the call; try again",
                )))
            }
            other => other,
        }
    }

    /// The connection to use now, with the count of failover events it goes with: a call
    /// on it is in doubt only if the count changes before its reply. Counted once the
    /// connection is chosen, not before: while the primary is looked up again, the
    /// `+switch-master` events that make a majority of the sentinels name the new primary
    /// keep arriving, and a reply from that primary (the one the call was sent to) is a
    /// known outcome. Read on both sides of the choice, so that an event that lands while
    /// a connection is chosen sends it through the choice again.
    async fn current_since(&self) -> RedisResult<(Conn, u64)> {
        let mut events = self.events();
        for _ in 0..CHOICES {
            let conn = self.current().await?;
            let now = self.events();
            if now == events {
                return Ok((conn, events));
            }
            events = now;
        }
        // Events kept arriving: nothing was sent, and the caller may try again.
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the sentinels kept failing the primary over while it was looked up; try again",
        )))
    }

    /// The connection to use now: for a Sentinel-managed node whose primary moved and
    /// was not found again yet, a fresh one to the primary the sentinels name.
    async fn current(&self) -> RedisResult<Conn> {
        let conn = self.conn();
        match &self.sentinel {
            Some(link) if link.follower.adrift() => self.follow(None).await,
            _ => Ok(conn),
        }
    }

    /// Asks the sentinels for the current primary and connects to it. The future is
    /// type-erased: the connection's futures are deep enough to overflow the compiler's
    /// recursion limit in every caller's `Send` check otherwise.
    fn follow(&self, cause: Option<redis::RedisError>) -> BoxFuture<'_, RedisResult<Conn>> {
        Box::pin(async move {
            let Some(link) = &self.sentinel else {
                return match cause {
                    Some(e) => Err(e),
                    None => Ok(self.conn()),
                };
            };
            if let Some(cause) = &cause {
                link.follower.set_adrift();
                tracing::info!(node = %self.label, error = %cause, "primary unreachable or demoted; asking the sentinels");
            }
            let deadline = tokio::time::Instant::now() + link.timeout;
            let Ok(_one_at_a_time) = tokio::time::timeout_at(deadline, link.lookup.lock()).await
            else {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "still looking for the primary the sentinels elected; try again",
                )));
            };
            if !link.follower.adrift() {
                // Another task found the primary while we queued for the sentinels.
                return Ok(self.conn());
            }
            // A restarted runtime (a client shared by several) listens again.
            link.follower.listen();
            let (client, addr) = link.follower.elect(deadline).await?;
            let manager =
                ConnectionManager::new_with_config(client.clone(), link.config.clone()).await?;
            let conn = Conn::watched(manager, link.timeout);
            *self.conn.write().unwrap_or_else(PoisonError::into_inner) = conn.clone();
            link.follower.connected(&addr, &client);
            Ok(conn)
        })
    }
}

/// How many times [`Node::current_since`] chooses a connection again because failover
/// events arrived while it chose (a failover's events come from each sentinel once).
const CHOICES: usize = 8;

/// How long a quorum node that failed with a connection error is taken for down: an
/// attempt still asks it, but does not wait for it to decide (its request would wait for
/// the connection's own reconnection attempts, and meanwhile an attempt whose other nodes
/// split their votes could not be decided).
const REST: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether a node is up, as far as its last answers tell: every request through
/// [`Node`] is recorded here.
#[derive(Debug)]
pub(crate) struct Health {
    /// Until when the node is not asked (after a connection error): read for quorum
    /// nodes only.
    resting_until: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Whether the node answered its latest request (`None` before any): what
    /// [`Client::connection_states`](crate::Client::connection_states) reports.
    answering: tokio::sync::watch::Sender<Option<bool>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            resting_until: std::sync::Mutex::default(),
            answering: tokio::sync::watch::Sender::new(None),
        }
    }
}

impl Health {
    /// Follows whether the node answers (`None` until its first request).
    pub(crate) fn answering(&self) -> tokio::sync::watch::Receiver<Option<bool>> {
        self.answering.subscribe()
    }

    fn until(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        self.resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the node is resting after a connection error.
    pub(crate) fn resting(&self) -> bool {
        self.until()
            .is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// Records what a request to the node found: a connection error rests the node for
    /// [`REST`]; any reply (even an error reply) means it is up.
    pub(crate) fn record<T>(&self, result: &RedisResult<T>) {
        let answered = !matches!(result, Err(e) if is_connection_error(e));
        if answered && *self.answering.borrow() == Some(true) {
            // Up, as before: nothing to change (a rest is set only with a failure, which
            // records the node as not answering), and no lock written on the hot path.
            return;
        }
        if answered {
            *self.until() = None;
        } else {
            *self.until() = Some(tokio::time::Instant::now() + REST);
        }
        self.answering.send_if_modified(|was| {
            let changed = *was != Some(answered);
            *was = Some(answered);
            changed
        });
    }

    /// Runs `call` and records what it found.
    pub(crate) async fn call<T>(
        &self,
        call: impl Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let result = call.await;
        self.record(&result);
        result
    }
}

/// True for errors after which a Sentinel-managed primary should be looked up again.
fn primary_moved(e: &redis::RedisError) -> bool {
    is_connection_error(e) || matches!(crate::error::error_code(e), Some("READONLY" | "MASTERDOWN"))
}

/// Runs `futures` concurrently, each bounded by `timeout`; a late one counts as a
/// connection error.
pub(crate) async fn fan_out<T, F>(
    futures: impl IntoIterator<Item = F>,
    timeout: std::time::Duration,
) -> Vec<RedisResult<T>>
where
    F: Future<Output = RedisResult<T>>,
{
    futures_util::future::join_all(futures.into_iter().map(|f| {
        tokio::time::timeout(timeout, f).map(|r| {
            r.unwrap_or_else(|_| {
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "node did not answer in time",
                )))
            })
        })
    }))
    .await
}

/// One acquisition attempt on one node.
pub(crate) async fn acquire_on(
    node: &Node,
    keys: &LockKeys,
    args: &AcquireArgs<'_>,
) -> RedisResult<Reply> {
    replies::acquire(&node.invoke(&scripts::acquire(keys, args)).await?)
}

/// The release script on one node.
pub(crate) async fn release_on(
    node: &Node,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    (notices, fence_keep): (Notices, Option<&str>),
    own: Option<&str>,
) -> RedisResult<Released> {
    let invocation = scripts::release(keys, kind, token, notices, own, fence_keep);
    replies::released(
        scripts::release_name(kind),
        &node.invoke(&invocation).await?,
    )
}

/// `rw_downgrade.lua` on one node.
pub(crate) async fn downgrade_on(
    node: &Node,
    keys: &LockKeys,
    token: &str,
    (notices, fence_keep): (Notices, Option<&str>),
) -> RedisResult<bool> {
    let invocation = scripts::downgrade(keys, token, notices, fence_keep);
    replies::flag("rw_downgrade.lua", &node.invoke(&invocation).await?)
}

/// The extend script on one node.
pub(crate) async fn extend_on(
    node: &Node,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    ttl_ms: u64,
) -> RedisResult<bool> {
    let invocation = scripts::extend(keys, kind, token, ttl_ms);
    replies::flag(scripts::extend_name(kind), &node.invoke(&invocation).await?)
}

/// `proclaim.lua` on one node: whether the lock still held `token` (and took the note).
pub(crate) async fn proclaim_on(
    node: &Node,
    keys: &LockKeys,
    token: &str,
    leader_note: &str,
    fence: u64,
    notices: Notices,
) -> RedisResult<bool> {
    let invocation = scripts::proclaim(keys, token, leader_note, fence, notices);
    replies::flag("proclaim.lua", &node.invoke(&invocation).await?)
}

/// One pipeline of renewal script calls (batches of [`BATCH`](scripts::BATCH) leases) on
/// one node; whether each lease of `batch` was renewed, in order.
pub(crate) async fn renew_on(node: &Node, batch: &[RenewItem<'_>]) -> RedisResult<Vec<bool>> {
    let (pipe, calls) = scripts::renew(batch);
    let answers: Vec<Value> = node.pipeline(&pipe).await?;
    if answers.len() != calls.len() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a renewal pipeline answered another number of calls than it sent",
            format!("{} answers for {} calls", answers.len(), calls.len()),
        )));
    }
    let mut renewed = vec![false; batch.len()];
    for (answer, call) in answers.iter().zip(&calls) {
        for (&i, ok) in call.iter().zip(replies::renew(answer, call.len())?) {
            renewed[i] = ok;
        }
    }
    Ok(renewed)
}
