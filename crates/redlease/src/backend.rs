//! Where a [`Client`](crate::Client)'s commands go: one Redis (addressed directly or found
//! through Sentinel), a Redis Cluster, or several independent nodes (a quorum).
//!
//! Every lock operation is one script call on one [`Node`]; the quorum layer
//! ([`crate::quorum`]) fans the same calls out to all of its nodes.

use std::sync::{Arc, PoisonError, RwLock};

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, Value,
};

use crate::error::{Error, Result, is_connection_error};
use crate::keys::LockKeys;
pub(crate) use crate::replies::Reply;
use crate::sentinel::Follower;
use crate::{replies, scripts};

/// How a client reaches its deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One Redis primary at a fixed address.
    Single,
    /// The primary that a set of sentinels names, followed across failovers.
    Sentinel,
    /// A Redis Cluster: each lock lives on the primary that owns its slot.
    Cluster,
    /// N independent primaries; a lock needs a majority of them (Redlock).
    Quorum,
}

/// One connection to one deployment or node, cheap to clone, multiplexed.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single Redis, reconnecting by itself.
    Single(ConnectionManager),
    /// A cluster, routing each command by its first key's slot (MOVED/ASK followed).
    /// Type-erased: the cluster connection's type is so deep that every future holding
    /// it would overflow the compiler's recursion limit when checked for `Send`, in the
    /// callers' crates too.
    Cluster(ErasedConn),
}

/// A cloneable, type-erased connection.
pub(crate) struct ErasedConn(Box<dyn DynConn>);

trait DynConn: ConnectionLike + Send + Sync {
    fn boxed_clone(&self) -> Box<dyn DynConn>;
}

impl<T: ConnectionLike + Clone + Send + Sync + 'static> DynConn for T {
    fn boxed_clone(&self) -> Box<dyn DynConn> {
        Box::new(self.clone())
    }
}

impl Clone for ErasedConn {
    fn clone(&self) -> Self {
        Self(self.0.boxed_clone())
    }
}

impl ErasedConn {
    pub(crate) fn cluster(conn: ClusterConnection) -> Self {
        Self(Box::new(ScriptsWhereNeeded(conn)))
    }
}

/// A cluster connection that loads a missing script on the one node that needs it.
///
/// redis-rs answers `NOSCRIPT` with a `SCRIPT LOAD` that has no key, so the cluster
/// connection sends it to every primary and waits for all of them: one silent primary
/// then stalls every call on the healthy ones until the response timeout (a fresh
/// cluster, a promoted replica, a restarted node: whenever a script is not cached).
/// Here an `EVALSHA` refused with `NOSCRIPT` is sent again as `EVAL` with the script's
/// text and the same keys: routed by the key's slot like the `EVALSHA`, it runs the
/// script and caches it on that node only. The caller never sees the `NOSCRIPT`, so
/// redis-rs never loads anything itself.
#[derive(Clone)]
struct ScriptsWhereNeeded<C>(C);

impl<C: ConnectionLike + Send> ConnectionLike for ScriptsWhereNeeded<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.0.req_packed_command(cmd).await;
            if !noscript(&reply) {
                return reply;
            }
            match as_eval(cmd) {
                Some(eval) => self.0.req_packed_command(&eval).await,
                None => reply,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let values = self.0.req_packed_commands(pipe, offset, count).await;
            let noscript = match &values {
                Err(e) => e.code() == Some("NOSCRIPT"),
                Ok(values) => values.iter().any(is_noscript),
            };
            if !noscript {
                return values;
            }
            // Every script call of ours is idempotent: the calls that ran run again.
            let mut evals = redis::pipe();
            for cmd in pipe.cmd_iter() {
                match as_eval(cmd) {
                    Some(eval) => evals.add_command(eval),
                    None => return values,
                };
            }
            self.0.req_packed_commands(&evals, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Whether a reply (or the error for it) is `NOSCRIPT`: the connection hands error
/// replies over as values, and the caller's conversion turns them into errors.
fn noscript(reply: &RedisResult<Value>) -> bool {
    match reply {
        Err(e) => e.code() == Some("NOSCRIPT"),
        Ok(value) => is_noscript(value),
    }
}

fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// `EVALSHA <sha> <numkeys> ...` of one of our scripts as `EVAL <text> <numkeys> ...`.
fn as_eval(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter();
    let redis::Arg::Simple(name) = args.next()? else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let redis::Arg::Simple(sha) = args.next()? else {
        return None;
    };
    let source = scripts::source(std::str::from_utf8(sha).ok()?)?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(source);
    for arg in args {
        let redis::Arg::Simple(arg) = arg else {
            return None;
        };
        eval.arg(arg);
    }
    Some(eval)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.0.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.0.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.0.get_db(),
        }
    }
}

/// One endpoint: a Redis, a cluster, or a Sentinel-managed primary.
pub(crate) struct Node {
    conn: RwLock<Conn>,
    /// Set when the primary is found through Sentinel: asked again after a failover.
    sentinel: Option<SentinelLink>,
    /// The address, password redacted, for messages.
    pub(crate) label: String,
}

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
    pub(crate) fn new(conn: Conn, label: String) -> Self {
        Self {
            conn: RwLock::new(conn),
            sentinel: None,
            label,
        }
    }

    /// A node whose primary `follower` names; `conn` is connected to the current one.
    pub(crate) fn with_sentinel(
        conn: ConnectionManager,
        follower: Arc<Follower>,
        config: ConnectionManagerConfig,
        timeout: std::time::Duration,
        label: String,
    ) -> Self {
        Self {
            conn: RwLock::new(Conn::Single(conn)),
            sentinel: Some(SentinelLink {
                follower,
                config,
                lookup: tokio::sync::Mutex::new(()),
                timeout,
            }),
            label,
        }
    }

    /// The sentinels' follower of a Sentinel-managed node.
    pub(crate) fn follower(&self) -> Option<&Arc<Follower>> {
        self.sentinel.as_ref().map(|link| &link.follower)
    }

    /// The current connection (a clone of a multiplexed handle).
    pub(crate) fn conn(&self) -> Conn {
        self.conn
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs a script on the node. For a Sentinel-managed node, an error that says the
    /// primary moved (connection lost, `READONLY` from a demoted primary) makes it ask the
    /// sentinels for the current primary and try once more there.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        let events = self.events();
        let mut conn = self.current().await?;
        let result = match invocation.invoke_async(&mut conn).await {
            Err(e) if self.must_follow(&e) => {
                let mut conn = self.follow(Some(e)).await?;
                invocation.invoke_async(&mut conn).await
            }
            other => other,
        };
        self.unless_failed_over(events, result)
    }

    /// Sends a pipeline of `EVALSHA`s of `script`, loading it on `NOSCRIPT`; follows a
    /// moved primary as [`Node::invoke`] does.
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        pipe: &Pipeline,
        script: &Script,
    ) -> RedisResult<T> {
        let events = self.events();
        let mut conn = self.current().await?;
        let result = match pipe.query_async(&mut conn).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                script.prepare_invoke().load_async(&mut conn).await?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        };
        let result = match result {
            Err(e) if self.must_follow(&e) => {
                let mut conn = self.follow(Some(e)).await?;
                script.prepare_invoke().load_async(&mut conn).await?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        };
        self.unless_failed_over(events, result)
    }

    /// Sends one plain command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let mut conn = self.current().await?;
        cmd.query_async(&mut conn).await
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

    /// The connection to use now: for a Sentinel-managed node whose primary moved and
    /// was not found again yet, a fresh one to the primary the sentinels name.
    async fn current(&self) -> RedisResult<Conn> {
        match &self.sentinel {
            Some(link) if link.follower.adrift() => self.follow(None).await,
            _ => Ok(self.conn()),
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
            let conn = Conn::Single(manager);
            *self.conn.write().unwrap_or_else(PoisonError::into_inner) = conn.clone();
            link.follower.connected(&addr, &client);
            Ok(conn)
        })
    }
}

/// True for errors after which a Sentinel-managed primary should be looked up again.
fn primary_moved(e: &redis::RedisError) -> bool {
    is_connection_error(e) || e.code() == Some("READONLY") || e.code() == Some("MASTERDOWN")
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

/// The first pause before an idempotent call is tried again after a connection error
/// (doubling up to 32 times this), leaving the connection time to reconnect.
const RECONNECT_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// The arguments of one acquisition attempt.
pub(crate) struct AcquireArgs<'a> {
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) holder: &'a str,
    /// Join the FIFO queue when busy: the grant channel and the queue keys' expiry in ms.
    pub(crate) queue: Option<(&'a str, u64)>,
}

/// One lease for the renewal scheduler.
pub(crate) struct RenewItem<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
}

/// Every node of a client's deployment, and how to use them.
pub(crate) struct Deployment {
    pub(crate) topology: Topology,
    pub(crate) nodes: Vec<Node>,
    /// The client's bound on one reply (also the per-node bound of a quorum fan-out).
    pub(crate) response_timeout: std::time::Duration,
    /// Set once the response timeout was found too long for a lease's renewal (warned
    /// about once).
    pub(crate) clamped: std::sync::atomic::AtomicBool,
}

impl Deployment {
    /// The one node of a single-endpoint deployment (the first of a quorum).
    pub(crate) fn primary(&self) -> &Node {
        &self.nodes[0]
    }

    /// Whether a release publishes on the lock's channel: where waiters do not queue for a
    /// hand-off but listen for releases (see `crate::wake`).
    pub(crate) fn announces(&self) -> bool {
        matches!(self.topology, Topology::Cluster | Topology::Quorum)
    }

    /// Nodes that must agree: all of one endpoint, or a majority of a quorum.
    pub(crate) fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// One acquisition attempt.
    pub(crate) async fn acquire(&self, keys: &LockKeys, args: &AcquireArgs<'_>) -> Result<Reply> {
        if self.topology == Topology::Quorum {
            return Box::pin(crate::quorum::acquire(self, keys, args)).await;
        }
        Box::pin(acquire_on(self.primary(), keys, args))
            .await
            .map_err(|e| Error::redis("acquiring a lock", &keys.key, e))
    }

    /// Runs the release script; whether the lock held our token.
    pub(crate) async fn release(&self, keys: &LockKeys, token: &str) -> Result<bool> {
        if self.topology == Topology::Quorum {
            return Box::pin(crate::quorum::release(self, keys, token)).await;
        }
        let announce = self.announces();
        self.across_reconnects(|| release_on(self.primary(), keys, token, announce))
            .await
            .map_err(|e| Error::redis("releasing a lock", &keys.key, e))
    }

    /// Runs the extend script; whether the lock held our token.
    pub(crate) async fn extend(&self, keys: &LockKeys, token: &str, ttl_ms: u64) -> Result<bool> {
        if self.topology == Topology::Quorum {
            return Box::pin(crate::quorum::extend(self, keys, token, ttl_ms)).await;
        }
        self.across_reconnects(|| extend_on(self.primary(), keys, token, ttl_ms))
            .await
            .map_err(|e| Error::redis("extending a lock", &keys.key, e))
    }

    /// Runs an idempotent script call, again after a connection error (a connection
    /// killed under it, a server restarting) for as long as the response timeout lasts
    /// since the first try: the connection reconnects by itself meanwhile. Without this,
    /// a release that meets a dropped connection would leave the lock held by nobody
    /// until its TTL.
    async fn across_reconnects<T, F, Fut>(&self, mut call: F) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let until = tokio::time::Instant::now() + self.response_timeout;
        let mut tries = 0u32;
        loop {
            match Box::pin(call()).await {
                Err(e) if is_connection_error(&e) && tokio::time::Instant::now() < until => {
                    tries += 1;
                    tracing::debug!(error = %e, tries, "connection error; trying again after the reconnect");
                    let pause = RECONNECT_PAUSE.saturating_mul(1 << tries.min(5));
                    let wake = (tokio::time::Instant::now() + pause).min(until);
                    tokio::time::sleep_until(wake).await;
                }
                other => return other,
            }
        }
    }

    /// Renews `batch`, telling `credit` each lease's outcome as soon as it is known (the
    /// lease's index in `batch`): `Some(true)` renewed, `Some(false)` lost (another token
    /// or none), `None` unknown (no answer; retry). In a cluster each primary's group of
    /// leases is credited when that primary answers, however slow the others are.
    pub(crate) async fn renew(
        &self,
        batch: &[RenewItem<'_>],
        credit: &(dyn Fn(usize, Option<bool>) + Sync),
    ) {
        let outcomes = match self.topology {
            Topology::Quorum => Box::pin(crate::quorum::renew(self, batch)).await,
            Topology::Cluster => {
                let bound = self.renewal_bound(batch);
                return Box::pin(renew_by_slot(self.primary(), batch, bound, credit)).await;
            }
            Topology::Single | Topology::Sentinel => {
                match Box::pin(renew_on(self.primary(), batch)).await {
                    Ok(renewed) => renewed.into_iter().map(Some).collect(),
                    Err(e) => {
                        tracing::debug!(error = %e, leases = batch.len(), "renewal failed");
                        vec![None; batch.len()]
                    }
                }
            }
        };
        for (i, outcome) in outcomes.into_iter().enumerate() {
            credit(i, outcome);
        }
    }

    /// How long a cluster renewal waits for one primary: the response timeout, but no
    /// more than a third of the shortest lease in `batch`. A renewal is due a third of
    /// the lease in; one that waited longer would leave no time to try again before the
    /// lease runs out, and a slow primary would take the healthy ones' leases with it.
    fn renewal_bound(&self, batch: &[RenewItem<'_>]) -> std::time::Duration {
        let shortest = batch
            .iter()
            .map(|item| item.ttl_ms)
            .min()
            .unwrap_or(u64::MAX);
        let third =
            std::time::Duration::from_millis(shortest / 3).max(std::time::Duration::from_millis(1));
        if third < self.response_timeout
            && !self
                .clamped
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                response_timeout = ?self.response_timeout,
                ttl = ?std::time::Duration::from_millis(shortest),
                "the response timeout is longer than a third of a lock's ttl: cluster renewals \
                 wait at most a third of the ttl for each primary; lower the response timeout \
                 or lengthen the ttl"
            );
        }
        self.response_timeout.min(third)
    }

    /// Re-sets the lease (a write) and runs `WAIT replicas round` right behind it in one
    /// pipeline, so that both go over the same connection and `WAIT` covers the lock's
    /// current value whichever connection first wrote it. Returns whether the lock still
    /// held our token, and how many replicas acknowledged.
    ///
    /// `WAIT` holds its reply back for up to its timeout, while every reply is bounded by
    /// the response timeout: a `timeout` longer than that is waited in rounds of half the
    /// response timeout, each one re-setting the lease and waiting again, until enough
    /// replicas acknowledge or `timeout` has passed.
    pub(crate) async fn replicate(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl_ms: u64,
        replicas: usize,
        timeout: std::time::Duration,
    ) -> Result<(bool, usize)> {
        let round = (self.response_timeout / 2).max(std::time::Duration::from_millis(1));
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let this_round = left.min(round);
            // `WAIT n 0` would block forever: never send a zero timeout.
            let round_ms = u64::try_from(this_round.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(scripts::EXTEND.get_hash())
                .arg(2)
                .arg(&keys.key)
                .arg(&keys.holder)
                .arg(token)
                .arg(ttl_ms)
                .cmd("WAIT")
                .arg(replicas)
                .arg(round_ms);
            let (extended, acked): (Value, usize) = self
                .primary()
                .pipeline(&pipe, &scripts::EXTEND)
                .await
                .map_err(|e| Error::redis("waiting for replicas", &keys.key, e))?;
            let extended = replies::flag("extend.lua", &extended)
                .map_err(|e| Error::redis("waiting for replicas", &keys.key, e))?;
            if !extended || acked >= replicas || left <= round {
                return Ok((extended, acked));
            }
            tracing::trace!(key = %keys.key, acked, wanted = replicas, "waiting for replicas, another round");
        }
    }
}

/// One acquisition attempt on one node.
pub(crate) async fn acquire_on(
    node: &Node,
    keys: &LockKeys,
    args: &AcquireArgs<'_>,
) -> RedisResult<Reply> {
    let mut invocation = scripts::ACQUIRE.key(&keys.script_keys()[..]);
    invocation.arg(args.token).arg(args.ttl_ms).arg(args.holder);
    match args.queue {
        Some((channel, linger_ms)) => invocation.arg("1").arg(channel).arg(linger_ms),
        None => invocation.arg("0"),
    };
    replies::acquire(&node.invoke(&invocation).await?)
}

/// The release script on one node.
pub(crate) async fn release_on(
    node: &Node,
    keys: &LockKeys,
    token: &str,
    announce: bool,
) -> RedisResult<bool> {
    let mut invocation = scripts::RELEASE.key(&keys.script_keys()[..]);
    invocation.arg(token);
    if announce {
        invocation.arg(&keys.channel);
    }
    replies::flag("release.lua", &node.invoke(&invocation).await?)
}

/// The extend script on one node.
pub(crate) async fn extend_on(
    node: &Node,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
) -> RedisResult<bool> {
    let mut invocation = scripts::EXTEND.key(&keys.key);
    invocation.key(&keys.holder).arg(token).arg(ttl_ms);
    replies::flag("extend.lua", &node.invoke(&invocation).await?)
}

/// Leases per `renew.lua` call in a renewal round trip (each touches 2 keys).
pub(crate) const BATCH: usize = 500;

/// One pipeline of `renew.lua` calls (batches of [`BATCH`] leases) on one node.
pub(crate) async fn renew_on(node: &Node, batch: &[RenewItem<'_>]) -> RedisResult<Vec<bool>> {
    let mut pipe = redis::pipe();
    for chunk in batch.chunks(BATCH) {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(scripts::RENEW.get_hash())
            .arg(chunk.len() * 2);
        for item in chunk {
            cmd.arg(&item.keys.key).arg(&item.keys.holder);
        }
        for item in chunk {
            cmd.arg(item.token).arg(item.ttl_ms);
        }
    }
    let answers: Vec<Value> = node.pipeline(&pipe, &scripts::RENEW).await?;
    let chunks = batch.chunks(BATCH);
    if answers.len() != chunks.len() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a renewal pipeline answered another number of calls than it sent",
            format!("{} answers for {} calls", answers.len(), chunks.len()),
        )));
    }
    let mut renewed = Vec::with_capacity(batch.len());
    for (answer, chunk) in answers.iter().zip(chunks) {
        renewed.extend(replies::renew(answer, chunk.len())?);
    }
    Ok(renewed)
}

/// Cluster renewal: a script call may only touch one slot, so the batch is split by slot
/// and the calls are sent concurrently (the cluster connection pipelines those that go to
/// the same primary). Each group waits at most `bound` and is credited as soon as it is
/// answered.
async fn renew_by_slot(
    node: &Node,
    batch: &[RenewItem<'_>],
    bound: std::time::Duration,
    credit: &(dyn Fn(usize, Option<bool>) + Sync),
) {
    let mut by_slot = std::collections::BTreeMap::<u16, Vec<usize>>::new();
    for (i, item) in batch.iter().enumerate() {
        by_slot
            .entry(crate::keys::hash_slot(item.keys.key.as_bytes()))
            .or_default()
            .push(i);
    }
    let groups: Vec<Vec<usize>> = by_slot.into_values().collect();
    futures_util::future::join_all(groups.iter().map(|group| async move {
        let items: Vec<RenewItem<'_>> = group
            .iter()
            .map(|&i| RenewItem {
                keys: batch[i].keys,
                token: batch[i].token,
                ttl_ms: batch[i].ttl_ms,
            })
            .collect();
        match tokio::time::timeout(bound, renew_on(node, &items)).await {
            Ok(Ok(renewed)) if renewed.len() == group.len() => {
                for (&i, ok) in group.iter().zip(renewed) {
                    credit(i, Some(ok));
                }
            }
            Ok(Ok(renewed)) => {
                tracing::debug!(
                    leases = group.len(),
                    replies = renewed.len(),
                    "renewal reply of the wrong length"
                );
                for &i in group {
                    credit(i, None);
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, leases = group.len(), "renewal failed");
                for &i in group {
                    credit(i, None);
                }
            }
            Err(_) => {
                tracing::debug!(leases = group.len(), ?bound, "renewal not answered in time");
                for &i in group {
                    credit(i, None);
                }
            }
        }
    }))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_missing_script_is_sent_again_with_its_text_and_the_same_keys() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(scripts::EXTEND.get_hash())
            .arg(2)
            .arg("{k}")
            .arg("{k}:holder")
            .arg("token")
            .arg(1000);
        let eval = as_eval(&evalsha).unwrap_or_else(|| redis::cmd("NONE"));
        let eval = words(&eval);
        assert_eq!(eval[0], b"EVAL");
        assert_eq!(
            eval[1],
            include_str!("../scripts/extend.lua").as_bytes().to_vec()
        );
        assert_eq!(words(&evalsha)[2..], eval[2..]);
        // Not ours, or not a script call: left alone.
        assert!(as_eval(redis::cmd("EVALSHA").arg("0".repeat(40)).arg(0)).is_none());
        assert!(as_eval(redis::cmd("GET").arg("k")).is_none());
    }
}
