//! Where a [`Client`](crate::Client)'s commands go: one Redis (addressed directly or found
//! through Sentinel), a Redis Cluster, or several independent nodes (a quorum).
//!
//! - `node`: one endpoint and its connection (a Sentinel-managed one follows its primary
//!   with `sentinel`), and the script calls of one operation on one node;
//! - `cluster`: scripts loaded where missing, renewals split by slot;
//! - `quorum`: the same calls fanned out to independent nodes (Redlock);
//! - `deployment`: the nodes of a client, and what upper layers may ask of them;
//! - `connect`: making a deployment from the client's endpoints;
//! - `reading`: reading a name's keys for operators, node by node;
//! - here: each operation, sent where the deployment's topology says.
//!
//! Every lock operation is one script call on one [`Node`](node::Node); the quorum layer
//! ([`crate::quorum`]) fans the same calls out to all of its nodes.

#[cfg(feature = "cluster")]
mod cluster;
mod connect;
mod deployment;
mod node;
pub mod quorum;
mod reading;
#[cfg(feature = "sentinel")]
mod sentinel;

/// Without the `sentinel` feature there is no sentinels' follower: no value of this type
/// exists, so a node's sentinel link is always `None`.
#[cfg(not(feature = "sentinel"))]
mod sentinel {
    use redis::RedisResult;
    use tokio::time::Instant;

    /// A primary's address.
    pub(crate) type Addr = (String, u16);

    /// The sentinels' follower of a primary (none without the `sentinel` feature).
    pub(crate) enum Follower {}

    impl Follower {
        pub(crate) fn listen(&self) {
            match *self {}
        }

        pub(crate) fn on_switch(&self, _hook: impl Fn(Option<&redis::Client>) + Send + Sync) {
            match *self {}
        }

        pub(crate) fn adrift(&self) -> bool {
            match *self {}
        }

        pub(crate) fn set_adrift(&self) {
            match *self {}
        }

        pub(crate) fn events(&self) -> u64 {
            match *self {}
        }

        #[allow(clippy::unused_async, reason = "the same call as with the feature")]
        pub(crate) async fn elect(&self, _deadline: Instant) -> RedisResult<(redis::Client, Addr)> {
            match *self {}
        }

        pub(crate) fn connected(&self, _addr: &Addr, _client: &redis::Client) {
            match *self {}
        }
    }
}

use redis::Value;

use crate::error::Result;
use crate::keys::LockKeys;
pub(crate) use crate::replies::Reply;
use crate::replies::{self, Released};
use crate::scripts::{self, AcquireArgs, Kind, RenewItem};
pub(crate) use connect::connect;
pub(crate) use deployment::Deployment;
use deployment::Topology;
pub(crate) use node::StaleHook;
use node::{acquire_on, downgrade_on, extend_on, proclaim_on, release_on, renew_on};

impl Deployment {
    /// One acquisition attempt.
    pub(crate) async fn acquire(&self, keys: &LockKeys, args: &AcquireArgs<'_>) -> Result<Reply> {
        if self.topology == Topology::Quorum {
            return Box::pin(quorum::acquire(self, keys, args)).await;
        }
        // A `READONLY` never reaches the caller while the response timeout lasts: the
        // attempt did nothing, and is made again on a new connection (see `off_replicas`).
        self.off_replicas(|| acquire_on(self.primary(), keys, args))
            .await
            .map_err(|e| self.error("acquiring a lock", &keys.key, e))
    }

    /// Runs the release script of `kind`: whether the lease held our token, and to whom
    /// it was handed. `own`: the releasing client's grant channel for the lease, whose
    /// waiters a lock is handed to directly (see [`scripts::release`]).
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        kind: Kind,
        token: &str,
        own: Option<&str>,
    ) -> Result<Released> {
        if self.topology == Topology::Quorum {
            let held = Box::pin(quorum::release(self, keys, kind, token)).await?;
            return Ok(Released::was(held));
        }
        let announce = self.announces();
        self.across_reconnects(|| {
            release_on(
                self.primary(),
                keys,
                kind,
                token,
                (announce, self.fence_keep()),
                own,
            )
        })
        .await
        .map_err(|e| self.error("releasing a lock", &keys.key, e))
    }

    /// Runs the extend script of `kind`; whether the lease held our token.
    pub(crate) async fn extend(
        &self,
        keys: &LockKeys,
        kind: Kind,
        token: &str,
        ttl_ms: u64,
    ) -> Result<bool> {
        if self.topology == Topology::Quorum {
            return Box::pin(quorum::extend(self, keys, kind, token, ttl_ms)).await;
        }
        self.across_reconnects(|| extend_on(self.primary(), keys, kind, token, ttl_ms))
            .await
            .map_err(|e| self.error("extending a lock", &keys.key, e))
    }

    /// Replaces the note of the leader holding `token` at `keys` (`proclaim.lua`) and
    /// announces it; whether the lock still held our token. Over a quorum, on every node,
    /// true when a majority took it.
    pub(crate) async fn proclaim(
        &self,
        keys: &LockKeys,
        token: &str,
        note: &str,
        fence: u64,
    ) -> Result<bool> {
        if self.topology == Topology::Quorum {
            return Box::pin(quorum::proclaim(self, keys, token, note, fence)).await;
        }
        let announce = self.announces();
        self.across_reconnects(|| proclaim_on(self.primary(), keys, token, note, fence, announce))
            .await
            .map_err(|e| self.error("proclaiming a leader's note", &keys.key, e))
    }

    /// Every lock of `keys` for `token` in one script, all or nothing; only where
    /// [`Deployment::takes_at_once`] says so.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        token: &str,
        ttl_ms: u64,
        holder: &str,
    ) -> Result<replies::AllReply> {
        let invocation = scripts::acquire_all(keys, token, ttl_ms, holder, self.fence_keep());
        let key = keys.first().map_or("", |k| k.key.as_str());
        let value: Value = Box::pin(self.primary().invoke(&invocation))
            .await
            .map_err(|e| self.error("acquiring locks", key, e))?;
        replies::acquire_all(&value, keys.len()).map_err(|e| self.error("acquiring locks", key, e))
    }

    /// Who holds the lock at `keys` now (an election's leader). Over a quorum, the holder
    /// a majority of nodes name, with the counter a majority of them reached (its token)
    /// and the shortest remaining lease.
    pub(crate) async fn leader(&self, keys: &LockKeys) -> Result<Option<replies::Holder>> {
        let invocation = scripts::leader(keys);
        if self.topology != Topology::Quorum {
            let value: Value = self
                .across_reconnects(|| self.primary().invoke(&invocation))
                .await
                .map_err(|e| self.error("reading the leader", &keys.key, e))?;
            return replies::leader(&value)
                .map_err(|e| self.error("reading the leader", &keys.key, e));
        }
        let answers = node::fan_out(
            self.nodes.iter().map(|node| {
                node.health
                    .call(async { replies::leader(&node.invoke::<Value>(&invocation).await?) })
            }),
            self.response_timeout,
        )
        .await;
        quorum::leader(self, answers)
    }

    /// What a latch's waiter sees now (`seen`: the round it saw open on its previous
    /// check). Never over a quorum (a latch's counts are refused there).
    pub(crate) async fn latch_check(
        &self,
        keys: &LockKeys,
        seen: Option<u64>,
    ) -> Result<replies::LatchState> {
        let invocation = scripts::latch_check(keys, seen, self.announces());
        let value: Value = self
            .across_reconnects(|| self.primary().invoke(&invocation))
            .await
            .map_err(|e| self.error("checking a latch", &keys.key, e))?;
        replies::latch_check(&value).map_err(|e| self.error("checking a latch", &keys.key, e))
    }

    /// Presets `n` arrivals of a latch's round (`only_idle`: only when none is open):
    /// whether they were added, and the arrivals now expected. Never over a quorum.
    pub(crate) async fn latch_expect(
        &self,
        keys: &LockKeys,
        n: u64,
        only_idle: bool,
    ) -> Result<(bool, u64)> {
        let invocation = scripts::latch_expect(keys, n, only_idle, self.announces());
        // Adding is not idempotent (a retry after a lost reply would expect them twice);
        // adding only to an idle latch is.
        let sent = if only_idle {
            self.across_reconnects(|| self.primary().invoke(&invocation))
                .await
        } else {
            self.primary().invoke(&invocation).await
        };
        let value: Value = sent.map_err(|e| self.error("presetting a latch", &keys.key, e))?;
        replies::latch_expect(&value).map_err(|e| self.error("presetting a latch", &keys.key, e))
    }

    /// Whether the lease of `kind` at `keys` holds `token` now, by a read. Over a quorum,
    /// whether a majority of nodes say so.
    pub(crate) async fn holds(&self, keys: &LockKeys, kind: Kind, token: &str) -> Result<bool> {
        let invocation = scripts::holds(keys, kind, token);
        let parse = |value: &Value| replies::flag("holds.lua", value);
        if self.topology != Topology::Quorum {
            let value: Value = self
                .across_reconnects(|| self.primary().invoke(&invocation))
                .await
                .map_err(|e| self.error("asking whether a lease is held", &keys.key, e))?;
            return parse(&value)
                .map_err(|e| self.error("asking whether a lease is held", &keys.key, e));
        }
        let answers = node::fan_out(
            self.nodes.iter().map(|node| {
                node.health
                    .call(async { parse(&node.invoke::<Value>(&invocation).await?) })
            }),
            self.response_timeout,
        )
        .await;
        quorum::holds(self, answers)
    }

    /// Sets the permit count of the semaphore at `keys` (`sem_resize.lua`), kept at least
    /// `keep_ms`, and serves its queue; the count in force before (`None`: none). Never
    /// over a quorum (semaphores are refused there).
    pub(crate) async fn resize(
        &self,
        keys: &LockKeys,
        permits: u32,
        keep_ms: u64,
    ) -> Result<Option<u32>> {
        let invocation =
            scripts::resize(keys, permits, keep_ms, self.announces(), self.fence_keep());
        let value: Value = self
            .across_reconnects(|| self.primary().invoke(&invocation))
            .await
            .map_err(|e| self.error("resizing a semaphore", &keys.key, e))?;
        replies::resized(&value).map_err(|e| self.error("resizing a semaphore", &keys.key, e))
    }

    /// Turns the write hold of `token` into a read hold; whether it still held the lock.
    pub(crate) async fn downgrade(&self, keys: &LockKeys, token: &str) -> Result<bool> {
        if self.topology == Topology::Quorum {
            return Box::pin(quorum::downgrade(self, keys, token)).await;
        }
        let announce = self.announces();
        self.across_reconnects(|| {
            downgrade_on(self.primary(), keys, token, (announce, self.fence_keep()))
        })
        .await
        .map_err(|e| self.error("downgrading a write lock", &keys.key, e))
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
            Topology::Quorum => Box::pin(quorum::renew(self, batch)).await,
            #[cfg(feature = "cluster")]
            Topology::Cluster => {
                let bound = self.renewal_bound(batch);
                return Box::pin(cluster::renew_by_slot(self.primary(), batch, bound, credit))
                    .await;
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
            scripts::push_extend(&mut pipe, keys, token, ttl_ms);
            pipe.cmd("WAIT").arg(replicas).arg(round_ms);
            let (extended, acked): (Value, usize) = self
                .primary()
                .pipeline(&pipe)
                .await
                .map_err(|e| self.error("waiting for replicas", &keys.key, e))?;
            let extended = replies::flag("lock_extend.lua", &extended)
                .map_err(|e| self.error("waiting for replicas", &keys.key, e))?;
            if !extended || acked >= replicas || left <= round {
                return Ok((extended, acked));
            }
            tracing::trace!(key = %keys.key, acked, wanted = replicas, "waiting for replicas, another round");
        }
    }
}
