//! Pub/sub links that come back after an outage of any length.
//!
//! A [`Link`] is one RESP3 connection, owned by a background task, subscribed to a set of
//! channels that its owner changes at will ([`Link::want`], [`Link::unwant`]). When the
//! connection drops (or stops answering the periodic `PING`), the task reconnects with a
//! jittered exponential back-off, cycling through its targets (cluster seeds), and
//! subscribes again to every wanted channel before it reports the link up. It keeps
//! trying for as long as its owner needs the link; once nobody does, it goes idle and
//! the next use starts it again.
//!
//! Nobody waits for the task behind a lock: callers watch its state and each gives up
//! at its own deadline ([`Link::up`]). While the link is down it says so
//! ([`Link::is_up`]), so that waiters do not count on messages nobody can deliver.
//!
//! A *sharded* link ([`Mode::Sharded`], Redis Cluster) uses `SSUBSCRIBE`: one node, one
//! channel per command (a shard channel belongs to a slot). When the node refuses a
//! channel (`MOVED`: its slot is served elsewhere) or drops it by itself (a `sunsubscribe`
//! push: the slot moved away, or the node stopped being a primary), the owner hears
//! [`Owner::moved`] and places the channel on the slot's new primary
//! (see `crate::conn::shards`).
//!
//! Behind a failover endpoint (one URL whose new connections go to the new primary while
//! old ones stay), a link made before a failover sits on the demoted primary, now a
//! replica, which hears only what replication relays to it: nothing while its link to the
//! new primary is down or still syncing, and none of the grants the new primary's scripts
//! counted nobody for. A *grant* link ([`Mode::Grants`]) and a *notices* link
//! ([`Mode::Notices`]: release notices, latch waiters, election observers) therefore
//! check `ROLE` when they connect and with every health check, in place of the `PING` (a
//! replica: dropped and made again, through the endpoint, on the new primary). A health
//! check comes every few seconds, or at once when a command connection of the client
//! went silent or met `READONLY` ([`Link::check_soon`]). No message on any link is taken
//! as proof of anything: a pushed grant is confirmed by its waiter with an attempt (see
//! `crate::notify::grants`).
//!
//! The [`Link`] handle is here; the reconnecting task behind it in `task`; the commands it
//! sends a server (`SSUBSCRIBE`, `ROLE`) in `wire`.

mod task;
mod wire;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::PushInfo;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use wire::{Role, not_primary, resp3, role, shard_command, within, within_primary};

/// What a link is doing.
#[derive(Clone)]
enum State {
    /// No task runs (never used, no longer needed, or its runtime ended).
    Idle,
    /// The task is connecting; `failed` once an attempt failed since the link was last
    /// up, or while it backs off after a connection that dropped soon after it was made
    /// (it is then known to be down, and nobody should wait for it).
    Connecting { failed: bool },
    /// Connected and subscribed to every channel wanted when it connected.
    Up(MultiplexedConnection),
}

/// What a link's owner hears from it.
pub(crate) trait Owner: Send + Sync + 'static {
    /// A pub/sub message arrived.
    fn message(&self, push: &PushInfo);
    /// The link went up (`true`, resubscribed) or down (`false`).
    fn changed(&self, up: bool);
    /// Whether the link is still needed while it is down (someone waits on it).
    fn needed(&self) -> bool;
    /// A sharded link's node refused `channel` or dropped it: its slot is served
    /// elsewhere now.
    fn moved(&self, _channel: &str) {}
}

/// What a link carries, which decides how it subscribes and where it may stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Classic channels (`SUBSCRIBE`), on any server it reaches (the sentinels' events).
    #[cfg(feature = "sentinel")]
    Classic,
    /// Release notices and an election's announcements (latch waiters, election
    /// observers, waiters that listen for releases): classic channels, kept on a primary
    /// as grant links are. On a demoted primary they would hear only what replication
    /// relays, and nothing while its replication link is down or not synced yet.
    Notices,
    /// Hand-off grants: classic channels, kept on a primary.
    Grants,
    /// Shard channels (`SSUBSCRIBE`), one per command, on one cluster node.
    #[cfg(feature = "cluster")]
    Sharded,
}

/// One self-healing subscription connection.
pub(crate) struct Link {
    /// Tried in turn, one per connection attempt; replaced by [`Link::retarget`].
    targets: Mutex<Vec<redis::Client>>,
    /// Fires the `dropped` signal of the connection up now (to move it elsewhere).
    current: Mutex<Option<Arc<Notify>>>,
    connect_timeout: Duration,
    response_timeout: Duration,
    owner: Weak<dyn Owner>,
    wanted: Mutex<BTreeSet<String>>,
    state: watch::Sender<State>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE of single channels (never held across a connect).
    commands: tokio::sync::Mutex<()>,
    /// Signalled when the link is dropped, so that its task ends.
    closed: Arc<Notify>,
    /// Signalled to run the health check of the connection up now at once (see
    /// [`Link::check_soon`]).
    check: Arc<Notify>,
    /// Shard channels (`SSUBSCRIBE`), one per command, rather than classic ones.
    sharded: bool,
    /// Only on a primary (a grant or notices link): a connection to a replica is dropped.
    primary_only: bool,
    /// Set once the server refused `ROLE` (an ACL without `+role`): the link stops
    /// asking (it keeps no `NOPERM` in the `ACL LOG`) and checks with `PING` instead.
    role_refused: AtomicBool,
}

impl Link {
    /// A link of `mode` to `targets` (RESP3 is switched on here; a sharded link has one
    /// target, its cluster node); starts on first use.
    pub(crate) fn new(
        targets: &[redis::Client],
        mode: Mode,
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
    ) -> redis::RedisResult<Arc<Self>> {
        let (sharded, primary_only) = match mode {
            #[cfg(feature = "sentinel")]
            Mode::Classic => (false, false),
            Mode::Notices | Mode::Grants => (false, true),
            #[cfg(feature = "cluster")]
            Mode::Sharded => (true, false),
        };
        Ok(Arc::new(Self {
            targets: Mutex::new(resp3(targets)?),
            current: Mutex::new(None),
            connect_timeout,
            response_timeout,
            owner,
            wanted: Mutex::new(BTreeSet::new()),
            state: watch::Sender::new(State::Idle),
            commands: tokio::sync::Mutex::new(()),
            closed: Arc::new(Notify::new()),
            check: Arc::new(Notify::new()),
            sharded,
            primary_only,
            role_refused: AtomicBool::new(false),
        }))
    }

    /// Points the link at `targets` from now on: the connection up now (if any) is
    /// dropped, and the link reconnects there, subscribed to every wanted channel.
    pub(crate) fn retarget(&self, targets: &[redis::Client]) -> redis::RedisResult<()> {
        let targets = resp3(targets)?;
        *self.targets.lock().unwrap_or_else(PoisonError::into_inner) = targets;
        self.drop_current();
        Ok(())
    }

    /// Drops the connection up now (if any): the link reconnects.
    fn drop_current(&self) {
        if let Some(dropped) = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            dropped.notify_one();
        }
    }

    /// What the server behind `conn` says it is, for a link kept on a primary: `None` when
    /// it does not answer in time, [`Role::Refused`] without asking once it refused.
    async fn role(&self, conn: &mut MultiplexedConnection) -> Option<Role> {
        if self.role_refused.load(Ordering::Relaxed) {
            return Some(Role::Refused);
        }
        let role = role(self.response_timeout, conn).await;
        if role == Some(Role::Refused) {
            tracing::warn!(
                "the server refused ROLE: a subscription left on a demoted primary is found only by re-checks; allow +role"
            );
            self.role_refused.store(true, Ordering::Relaxed);
        }
        role
    }

    fn wanted(&self) -> MutexGuard<'_, BTreeSet<String>> {
        // Single inserts and removes: a poisoned lock is still consistent.
        self.wanted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the health check of the connection up now without waiting for its turn: the
    /// client's command connection went silent (a request unanswered for the response
    /// timeout), and the network that muted it may have muted this one too; or it met
    /// `READONLY`, and this one may sit on the same demoted primary. A link whose
    /// connection does not answer in time, or (kept on a primary) is on a replica,
    /// reconnects.
    pub(crate) fn check_soon(&self) {
        self.check.notify_one();
    }

    /// Whether the link is connected and subscribed right now.
    pub(crate) fn is_up(&self) -> bool {
        matches!(*self.state.borrow(), State::Up(_))
    }

    /// Starts the link if needed and waits until it is up, until it is known to be down
    /// (an attempt failed: `None` at once), or until `deadline`.
    pub(crate) async fn up(
        self: &Arc<Self>,
        deadline: Option<Instant>,
    ) -> Option<MultiplexedConnection> {
        self.start();
        let mut states = self.state.subscribe();
        loop {
            match &*states.borrow_and_update() {
                State::Up(conn) => return Some(conn.clone()),
                State::Idle | State::Connecting { failed: true } => return None,
                State::Connecting { failed: false } => {}
            }
            let changed = states.changed();
            match deadline {
                Some(deadline) => {
                    if !matches!(tokio::time::timeout_at(deadline, changed).await, Ok(Ok(()))) {
                        return None;
                    }
                }
                None => changed.await.ok()?,
            }
        }
    }

    /// Adds `channel` to the wanted set without subscribing now: the next connection
    /// subscribes to it.
    pub(crate) fn keep(&self, channel: &str) {
        self.wanted().insert(channel.to_owned());
    }

    /// Adds `channel` to the wanted set (a reconnection subscribes to it again) and
    /// subscribes to it now in the background; `confirmed` hears whether it took.
    pub(crate) fn want(
        self: &Arc<Self>,
        channel: &str,
        confirmed: Option<tokio::sync::mpsc::UnboundedSender<bool>>,
    ) {
        self.wanted().insert(channel.to_owned());
        self.reconcile(channel, confirmed);
    }

    /// Removes `channel` from the wanted set without unsubscribing: the node dropped it
    /// already (a sharded link whose slot moved), and a reconnection must not ask again.
    #[cfg(feature = "cluster")]
    pub(crate) fn forget(&self, channel: &str) {
        self.wanted().remove(channel);
    }

    /// Removes `channel` from the wanted set and unsubscribes in the background.
    pub(crate) fn unwant(self: &Arc<Self>, channel: &str) {
        self.wanted().remove(channel);
        self.reconcile(channel, None);
    }

    /// Brings the connection's subscription to `channel` in line with the wanted set, in
    /// a task of its own. Each change spawns one, and each sends what is wanted when it
    /// runs, one at a time: the last one to run sends the latest wish.
    fn reconcile(
        self: &Arc<Self>,
        channel: &str,
        confirmed: Option<tokio::sync::mpsc::UnboundedSender<bool>>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let link = Arc::clone(self);
        let channel = channel.to_owned();
        runtime.spawn(async move {
            let ok = link.sync(&channel).await;
            if let Some(tx) = confirmed {
                let _ = tx.send(ok);
            }
        });
    }

    /// Whether `channel` is subscribed on the link after this call.
    async fn sync(self: &Arc<Self>, channel: &str) -> bool {
        // A link still in its first connection attempt subscribes when it connects; wait
        // for it no longer than that attempt can take.
        let bound = Instant::now() + self.connect_timeout + self.response_timeout;
        let Some(mut conn) = self.up(Some(bound)).await else {
            return false;
        };
        let _one_at_a_time = self.commands.lock().await;
        let want = self.wanted().contains(channel);
        let sent = match (self.sharded, want) {
            (false, true) => within(self.response_timeout, conn.subscribe(channel)).await,
            (false, false) => within(self.response_timeout, conn.unsubscribe(channel)).await,
            (true, _) => {
                let command = if want { "SSUBSCRIBE" } else { "SUNSUBSCRIBE" };
                let mut sent = within(
                    self.response_timeout,
                    shard_command(&mut conn, command, channel),
                )
                .await;
                if want && sent.is_ok() && !within_primary(self.response_timeout, &mut conn).await {
                    // A replica serves SSUBSCRIBE too, but its primary's SPUBLISH does not
                    // count its subscribers: give the channel back and place it anew.
                    let _ = within(
                        self.response_timeout,
                        shard_command(&mut conn, "SUNSUBSCRIBE", channel),
                    )
                    .await;
                    sent = Err(not_primary());
                }
                if want
                    && let Err(e) = &sent
                    && e.code().is_some()
                    && let Some(owner) = self.owner.upgrade()
                {
                    // Refused (MOVED), or on a replica: not this node's channel (any more).
                    tracing::debug!(error = %e, "a shard channel was refused; placing it anew");
                    owner.moved(channel);
                }
                sent
            }
        };
        match sent {
            Ok(()) => want,
            Err(e) => {
                tracing::debug!(error = %e, "changing a pub/sub subscription failed; the reconnection restores it");
                false
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.closed.notify_one();
    }
}
