//! A client's deployment: its nodes, and the questions upper layers ask about it instead
//! of matching on its topology.

use redis::RedisResult;

use super::node::Node;
use crate::error::{Error, is_connection_error};
use crate::scripts::{Kind, Notices};
use crate::server::Server;

/// How a client reaches its deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One Redis primary at a fixed address.
    Single,
    /// The primary that a set of sentinels names, followed across failovers.
    #[cfg_attr(
        not(feature = "sentinel"),
        allow(
            dead_code,
            reason = "never made without the sentinel feature; the arms stay"
        )
    )]
    Sentinel,
    /// A Redis Cluster: each lock lives on the primary that owns its slot.
    #[cfg(feature = "cluster")]
    Cluster,
    /// N independent primaries; a lock needs a majority of them (Redlock).
    Quorum,
}

/// The first pause before an idempotent call is tried again after a connection error
/// (doubling up to 32 times this), leaving the connection time to reconnect.
const RECONNECT_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// Every node of a client's deployment, and how to use them.
pub(crate) struct Deployment {
    pub(crate) topology: Topology,
    pub(crate) nodes: Vec<Node>,
    /// The client's bound on one reply (also the per-node bound of a quorum fan-out).
    pub(crate) response_timeout: std::time::Duration,
    /// The server as it said at connect (the oldest of a quorum's nodes that answered);
    /// `None` when it did not say.
    pub(crate) server: Option<Server>,
    /// Set once the response timeout was found too long for a lease's renewal (warned
    /// about once).
    #[cfg(feature = "cluster")]
    pub(crate) clamped: std::sync::atomic::AtomicBool,
    /// How long a grant keeps a name's fencing counter past the server's clock, in ms as the
    /// granting scripts take it (`fence_keep`): `None` for the scripts' own default
    /// ([`DEFAULT_FENCE_KEEP`](crate::DEFAULT_FENCE_KEEP)), which costs no argument.
    pub(crate) fence_keep: Option<String>,
    /// Work that outlives the call that started it (give-backs of dropped guards and
    /// abandoned attempts, a quorum's requests to the nodes that had not answered when a
    /// majority had), for `Client::shutdown` to wait for.
    background: tokio_util::task::TaskTracker,
}

impl Deployment {
    pub(crate) fn new(
        topology: Topology,
        nodes: Vec<Node>,
        response_timeout: std::time::Duration,
    ) -> Self {
        Self {
            topology,
            nodes,
            response_timeout,
            server: None,
            fence_keep: None,
            #[cfg(feature = "cluster")]
            clamped: std::sync::atomic::AtomicBool::new(false),
            background: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Runs `task` in the background on the current runtime, tracked for
    /// [`Deployment::settled`]; false (and `task` dropped) outside a runtime.
    pub(crate) fn background(
        &self,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> bool {
        self.track(task).is_some()
    }

    /// As [`Deployment::background`], with a handle to await `task` by; `None` (and `task`
    /// dropped) outside a runtime.
    pub(crate) fn track<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<T>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(self.background.spawn_on(task, &runtime))
    }

    /// Whether [`Deployment::settled`] is waiting (a shutdown): retries in the background
    /// stop rather than hold it up.
    pub(crate) fn settling(&self) -> bool {
        self.background.is_closed()
    }

    /// Resolves once no task started by [`Deployment::background`] is running, those
    /// started meanwhile included.
    pub(crate) async fn settled(&self) {
        self.background.close();
        self.background.wait().await;
        self.background.reopen();
    }

    /// The error of a failed Redis call made while doing `action` on `key`: a command a
    /// script called that the server lacks is named, with the server's version
    /// ([`Error::ServerLacks`]).
    pub(crate) fn error(&self, action: &'static str, key: &str, e: redis::RedisError) -> Error {
        Error::redis(action, key, e).on_server(self.server.as_ref())
    }

    /// How long a grant keeps a fencing counter past the clock, as the scripts take it
    /// (see the field).
    pub(crate) fn fence_keep(&self) -> Option<&str> {
        self.fence_keep.as_deref()
    }

    /// The sentinels' follower, for a Sentinel-managed primary.
    pub(crate) fn follower(&self) -> Option<&std::sync::Arc<super::sentinel::Follower>> {
        self.primary().follower()
    }

    /// The one node of a single-endpoint deployment (the first of a quorum).
    pub(crate) fn primary(&self) -> &Node {
        &self.nodes[0]
    }

    /// Whether and how a release publishes on the lock's channel: where some waiters do
    /// not queue for a hand-off but listen for releases (see `crate::notify::releases`).
    /// On a Cluster every message of the scripts is an `SPUBLISH`, which stays in the
    /// shard that owns the lock's slot.
    pub(crate) fn announces(&self) -> Notices {
        match self.topology {
            Topology::Single | Topology::Sentinel => Notices::Off,
            #[cfg(feature = "cluster")]
            Topology::Cluster if self.shard_channels() => Notices::Sharded,
            #[cfg(feature = "cluster")]
            Topology::Cluster => Notices::Publish,
            Topology::Quorum => Notices::Publish,
        }
    }

    /// Whether waiters' messages go over sharded pub/sub: on a Cluster whose server has it
    /// (Redis 7.0 and later, Valkey; assumed where the server did not say). A Redis 6.2
    /// cluster falls back to classic pub/sub, which the cluster bus carries to every node:
    /// there no waiter queues for a hand-off (a `PUBLISH` counts the subscribers of its
    /// own node only, so a grant could not tell who heard it); each listens for release
    /// notices, on any node, as a quorum's waiters do.
    #[cfg(feature = "cluster")]
    pub(crate) fn shard_channels(&self) -> bool {
        self.topology == Topology::Cluster
            && self
                .server
                .as_ref()
                .is_none_or(crate::server::Server::sharded_pubsub)
    }

    /// Whether waiters for a lease of `kind` queue for a hand-off (FIFO). Everywhere one
    /// node decides, for a lock; on a Cluster only for a lock (mutex, election), whose
    /// grants go by `SPUBLISH` on the waiter's per-lock grant channel; a semaphore's or
    /// read-write lock's waiters there listen for release notices, as every waiter does on
    /// a cluster without sharded pub/sub. Never over a quorum.
    pub(crate) fn hands_off(&self, kind: Kind) -> bool {
        #[cfg(not(feature = "cluster"))]
        let _ = kind;
        match self.topology {
            Topology::Single | Topology::Sentinel => true,
            #[cfg(feature = "cluster")]
            Topology::Cluster => kind.is_lock() && self.shard_channels(),
            Topology::Quorum => false,
        }
    }

    /// Why waiting for replicas (`WAIT`) is refused here, or `None` where the primary may
    /// have replicas.
    pub(crate) fn without_replicas(&self) -> Option<&'static str> {
        (self.topology == Topology::Quorum).then_some(
            "quorum nodes are independent primaries without replicas; drop min_replicas or use a Sentinel or Cluster client",
        )
    }

    /// Whether read-write lock waiters that cannot be handed the lock keep a place in the
    /// queue all the same (a *silent* place: they come back for the lock themselves): on a
    /// Cluster, where only a lock's waiters are sent grants (see
    /// [`hands_off`](Self::hands_off)), and wherever hand-offs
    /// cannot reach a waiter (polling, a grant subscription that is down). One node decides
    /// each lock there, so one queue orders its waiters. Not over a quorum: each node's
    /// queue could put another waiter first, and waiters heading different nodes' queues
    /// would keep each other from a majority.
    pub(crate) fn keeps_silent_places(&self) -> bool {
        self.topology != Topology::Quorum
    }

    /// Whether one script can take every lock of `keys` at once: they live on one node
    /// (a single Redis, a Sentinel primary, one Cluster slot). Never over a quorum.
    pub(crate) fn takes_at_once(&self, keys: &[&crate::keys::LockKeys]) -> bool {
        #[cfg(not(feature = "cluster"))]
        let _ = keys;
        match self.topology {
            Topology::Single | Topology::Sentinel => true,
            #[cfg(feature = "cluster")]
            Topology::Cluster => {
                let mut slots = keys
                    .iter()
                    .map(|k| crate::keys::hash_slot(k.key.as_bytes()));
                let first = slots.next();
                slots.all(|s| Some(s) == first)
            }
            Topology::Quorum => false,
        }
    }

    /// Why a count of holders (a semaphore's permits) cannot be kept soundly here, or
    /// `None` where one node decides.
    pub(crate) fn cannot_count(&self) -> Option<&'static str> {
        (self.topology == Topology::Quorum).then_some(
            "permits granted by a majority of independent nodes are not sound (3 nodes, 2 permits: holders granted by nodes {1,2}, {2,3} and {1,3} fit every node's count, yet 3 hold); use a semaphore on a single Redis, Sentinel or Cluster client, or several quorum locks",
        )
    }

    /// Whether every lock lives on one server at a time, whose clock fresh grants read
    /// (a single Redis, or Sentinel's primary): the client then estimates that clock's
    /// rate (`crate::clock`). A Cluster's keys live on servers with clocks of their own, a
    /// quorum's grants read a coarsened clock.
    pub(crate) fn one_clock(&self) -> bool {
        matches!(self.topology, Topology::Single | Topology::Sentinel)
    }

    /// Whether the nodes are a quorum of independent ones (each answers on its own).
    pub(crate) fn is_quorum(&self) -> bool {
        self.topology == Topology::Quorum
    }

    /// Nodes that must agree: all of one endpoint, or a majority of a quorum.
    pub(crate) fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs an idempotent script call, again after a connection error (a connection
    /// killed under it, a server restarting) or a `READONLY` (a connection left on a
    /// primary demoted behind a failover endpoint) for as long as the response timeout
    /// lasts since the first try: the connection reconnects by itself meanwhile. Without this,
    /// a release that meets a dropped connection would leave the lock held by nobody
    /// until its TTL.
    pub(crate) async fn across_reconnects<T, F, Fut>(&self, call: F) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.again_after(retried, call).await
    }

    /// Runs a script call that writes (an acquisition attempt, whose outcome a connection
    /// error leaves unknown: its caller settles that), again after a `READONLY` only, as
    /// [`Deployment::across_reconnects`] does: the connection that met it is on a replica
    /// (a primary demoted behind a failover endpoint) and is replaced by a new one, which
    /// the endpoint sends to the new primary. The refused attempt did nothing: a replica
    /// accepts no write, and the script stopped at its first one, so sending it again is
    /// the same attempt.
    pub(crate) async fn off_replicas<T, F, Fut>(&self, call: F) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.again_after(on_replica, call).await
    }

    /// Runs `call`, again while it fails with an error `again` accepts, for as long as the
    /// response timeout lasts since the first try, with a short back-off that leaves the
    /// connection time to reconnect.
    async fn again_after<T, F, Fut>(
        &self,
        again: fn(&redis::RedisError) -> bool,
        mut call: F,
    ) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let until = tokio::time::Instant::now() + self.response_timeout;
        let mut tries = 0u32;
        loop {
            match Box::pin(call()).await {
                Err(e) if again(&e) && tokio::time::Instant::now() < until => {
                    tries += 1;
                    tracing::debug!(error = %e, tries, "connection error or replica; trying again on the new connection");
                    let pause = RECONNECT_PAUSE.saturating_mul(1 << tries.min(5));
                    let wake = (tokio::time::Instant::now() + pause).min(until);
                    tokio::time::sleep_until(wake).await;
                }
                other => return other,
            }
        }
    }

    /// How long a cluster renewal waits for one primary: the response timeout, but no
    /// more than a third of the shortest lease in `batch`: one that waited longer would
    /// leave no time to try again before the lease runs out, and a slow primary would
    /// take the healthy ones' leases with it. (The renewal round itself gives up sooner,
    /// after `renew::patience`; each primary's leases are credited as it answers.)
    #[cfg(feature = "cluster")]
    pub(crate) fn renewal_bound(
        &self,
        batch: &[crate::scripts::RenewItem<'_>],
    ) -> std::time::Duration {
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
}

/// Whether [`Deployment::across_reconnects`] tries a call again after `e`: a connection
/// error, or `READONLY` (the connection, now on a replica, is replaced by a new one).
fn retried(e: &redis::RedisError) -> bool {
    is_connection_error(e) || on_replica(e)
}

/// Whether `e` is a replica's refusal of a write (`READONLY`).
fn on_replica(e: &redis::RedisError) -> bool {
    crate::error::error_code(e) == Some("READONLY")
}
