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
//! A *sharded* link ([`Link::sharded`], Redis Cluster) uses `SSUBSCRIBE`: one node, one
//! channel per command (a shard channel belongs to a slot). When the node refuses a
//! channel (`MOVED`: its slot is served elsewhere) or drops it by itself (a `sunsubscribe`
//! push: the slot moved away, or the node stopped being a primary), the owner hears
//! [`Owner::moved`] and places the channel on the slot's new primary
//! (see `crate::conn::shards`).
//!
//! A *grant* link ([`Link::grants`]) carries hand-offs that its owner may take as proof that
//! a lock is its own, which holds only on the primary that decides the locks: behind a
//! failover endpoint (one URL whose new connections go to the new primary while old ones
//! stay), a link made before a failover sits on the demoted primary, now a replica, which
//! relays its new primary's grants, those the release script counted nobody for included.
//! Such a link checks `ROLE` when it connects and with every health check (a replica:
//! dropped and made again, through the endpoint, on the new primary), and vouches for one
//! message at a time ([`Link::vouch`]): `ROLE` on the very connection that carried it,
//! after it, says whether a primary sent it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::wait::jitter;

/// First reconnection delay bound; doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(20);
/// Longest reconnection delay bound.
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// How often an idle link checks with a `PING` that its connection still answers.
const HEALTH_EVERY: Duration = Duration::from_secs(5);

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
    /// A pub/sub message arrived on the link's `connection`-th connection (for
    /// [`Link::vouch`]); by default, [`Owner::message`].
    fn message_on(&self, push: &PushInfo, connection: u64) {
        let _ = connection;
        self.message(push);
    }
}

/// What a server says it is (`ROLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A primary (`master`).
    Primary,
    /// A replica (`slave`).
    Replica,
    /// A server that refused `ROLE` (an ACL without it).
    Refused,
    /// A sentinel, or an answer not understood.
    Other,
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
    /// Only on a primary (a grant link): a connection to a replica is dropped.
    primary_only: bool,
    /// Counts connection attempts: the number of the one up now (see [`Link::vouch`]).
    connections: AtomicU64,
    /// Set once the server refused `ROLE` (an ACL without `+role`): a grant link stops
    /// asking (it keeps no `NOPERM` in the `ACL LOG`), and vouches for nothing.
    role_refused: AtomicBool,
}

impl Link {
    /// A link to `targets` (RESP3 is switched on here); starts on first use.
    pub(crate) fn new(
        targets: &[redis::Client],
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
    ) -> redis::RedisResult<Arc<Self>> {
        Self::with_mode(
            targets,
            connect_timeout,
            response_timeout,
            owner,
            false,
            false,
        )
    }

    /// A link that carries hand-off grants: kept on a primary, and able to vouch for a
    /// message ([`Link::vouch`]); starts on first use.
    pub(crate) fn grants(
        targets: &[redis::Client],
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
    ) -> redis::RedisResult<Arc<Self>> {
        Self::with_mode(
            targets,
            connect_timeout,
            response_timeout,
            owner,
            false,
            true,
        )
    }

    /// A link to one cluster node for shard channels (`SSUBSCRIBE`); starts on first use.
    #[cfg(feature = "cluster")]
    pub(crate) fn sharded(
        node: &redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
    ) -> redis::RedisResult<Arc<Self>> {
        Self::with_mode(
            std::slice::from_ref(node),
            connect_timeout,
            response_timeout,
            owner,
            true,
            false,
        )
    }

    fn with_mode(
        targets: &[redis::Client],
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
        sharded: bool,
        primary_only: bool,
    ) -> redis::RedisResult<Arc<Self>> {
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
            connections: AtomicU64::new(0),
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

    /// Whether the message that arrived on the link's `connection`-th connection was sent
    /// by a primary: `ROLE`, asked on that connection after the message, says `master`.
    /// A server demoted since the message was sent may answer `slave` for a message it
    /// sent as a primary: that message is not vouched for either (its receiver confirms
    /// it another way). False when that connection is no longer up, or does not answer in
    /// time. A link found on a replica is dropped, and made again.
    pub(crate) async fn vouch(&self, connection: u64) -> bool {
        let conn = match &*self.state.borrow() {
            State::Up(conn) if self.connections.load(Ordering::SeqCst) == connection => {
                conn.clone()
            }
            _ => return false,
        };
        let mut conn = conn;
        match self.role(&mut conn).await {
            Some(Role::Primary) => true,
            Some(Role::Replica) => {
                if self.connections.load(Ordering::SeqCst) == connection {
                    tracing::debug!("the grant subscription is on a replica; moving it");
                    self.drop_current();
                }
                false
            }
            Some(Role::Refused | Role::Other) | None => false,
        }
    }

    /// What the server behind `conn` says it is, for a grant link: `None` when it does not
    /// answer in time, [`Role::Refused`] without asking once it refused.
    async fn role(&self, conn: &mut MultiplexedConnection) -> Option<Role> {
        if self.role_refused.load(Ordering::Relaxed) {
            return Some(Role::Refused);
        }
        let role = role(self.response_timeout, conn).await;
        if role == Some(Role::Refused) {
            tracing::warn!(
                "the server refused ROLE: grants are confirmed by an attempt each; allow +role to save the round trip"
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
    /// timeout), and the network that muted it may have muted this one too. A link whose
    /// connection does not answer in time reconnects.
    pub(crate) fn check_soon(&self) {
        self.check.notify_one();
    }

    /// Whether the link is connected and subscribed right now.
    pub(crate) fn is_up(&self) -> bool {
        matches!(*self.state.borrow(), State::Up(_))
    }

    /// Starts the link's task on the current runtime unless one runs.
    pub(crate) fn start(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let started = self.state.send_if_modified(|state| {
            if matches!(state, State::Idle) {
                *state = State::Connecting { failed: false };
                true
            } else {
                false
            }
        });
        if started {
            let task = Task {
                link: Arc::downgrade(self),
                closed: Arc::clone(&self.closed),
                check: Arc::clone(&self.check),
                running: true,
            };
            runtime.spawn(task.run());
        }
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

    /// One connection attempt to target `target`: connected and subscribed to every wanted
    /// channel, with the `dropped` signal wired to its disconnection.
    async fn connect(
        &self,
        target: usize,
        dropped: &Arc<Notify>,
    ) -> redis::RedisResult<MultiplexedConnection> {
        let redis = {
            let targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
            if targets.is_empty() {
                return Err(timed_out("no pub/sub target"));
            }
            targets[target % targets.len()].clone()
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(dropped));
        let owner = self.owner.clone();
        let dropped = Arc::clone(dropped);
        let sharded = self.sharded;
        let connection = self.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(move |push: PushInfo| {
                match push.kind {
                    PushKind::Disconnection => dropped.notify_one(),
                    PushKind::Message | PushKind::SMessage => {
                        if let Some(owner) = owner.upgrade() {
                            owner.message_on(&push, connection);
                        }
                    }
                    // Our own SUNSUBSCRIBE is confirmed so too: the owner tells them apart.
                    PushKind::SUnsubscribe if sharded => {
                        if let (Some(owner), Some(redis::Value::BulkString(channel))) =
                            (owner.upgrade(), push.data.first())
                            && let Ok(channel) = std::str::from_utf8(channel)
                        {
                            owner.moved(channel);
                        }
                    }
                    _ => {}
                }
                Ok::<(), std::convert::Infallible>(())
            });
        let attempt = async {
            let mut conn = redis
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let channels: Vec<String> = self.wanted().iter().cloned().collect();
            if self.sharded {
                if !channels.is_empty() && !within_primary(self.response_timeout, &mut conn).await {
                    // A replica now (a failover): every channel belongs elsewhere.
                    if let Some(owner) = self.owner.upgrade() {
                        for channel in &channels {
                            owner.moved(channel);
                        }
                    }
                    return Err(not_primary());
                }
                for channel in &channels {
                    if let Err(e) = shard_command(&mut conn, "SSUBSCRIBE", channel).await {
                        if e.code().is_some()
                            && let Some(owner) = self.owner.upgrade()
                        {
                            owner.moved(channel);
                        }
                        return Err(e);
                    }
                }
            } else {
                if self.primary_only && self.role(&mut conn).await == Some(Role::Replica) {
                    // A demoted primary behind a failover endpoint: the next connection
                    // reaches the new one.
                    return Err(not_primary());
                }
                if !channels.is_empty() {
                    conn.subscribe(&channels).await?;
                }
            }
            Ok(conn)
        };
        match tokio::time::timeout(self.connect_timeout + self.response_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(timed_out("connecting for pub/sub timed out")),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.closed.notify_one();
    }
}

/// `targets` with RESP3 switched on (pub/sub messages arrive as pushes).
fn resp3(targets: &[redis::Client]) -> redis::RedisResult<Vec<redis::Client>> {
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
async fn shard_command(
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
async fn within_primary(timeout: Duration, conn: &mut MultiplexedConnection) -> bool {
    matches!(
        role(timeout, conn).await,
        Some(Role::Primary | Role::Refused)
    )
}

/// What the server behind `conn` says it is (`ROLE`), within `timeout`; `None` when it
/// does not answer in time (or the connection failed).
async fn role(timeout: Duration, conn: &mut MultiplexedConnection) -> Option<Role> {
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
fn not_primary() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
        "not the slot's primary",
    ))
}

fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// `f` bounded by `timeout`; a late reply is a connection error.
async fn within(
    timeout: Duration,
    f: impl Future<Output = redis::RedisResult<()>>,
) -> redis::RedisResult<()> {
    tokio::time::timeout(timeout, f)
        .await
        .unwrap_or_else(|_| Err(timed_out("no reply in time")))
}

/// The background task of one link.
struct Task {
    link: Weak<Link>,
    closed: Arc<Notify>,
    check: Arc<Notify>,
    /// Cleared when the task ends by itself; otherwise (its runtime shut down) dropping
    /// it marks the link idle, so that the next use starts a new task.
    running: bool,
}

impl Task {
    async fn run(mut self) {
        let mut failures = 0u32;
        let mut flaps = 0u32;
        let mut target = 0usize;
        loop {
            let Some(link) = self.link.upgrade() else {
                self.running = false;
                return;
            };
            if failures > 0 && self.idle_if_unneeded(&link) {
                return;
            }
            let dropped = Arc::new(Notify::new());
            match link.connect(target, &dropped).await {
                Ok(conn) => {
                    failures = 0;
                    let up_since = Instant::now();
                    link.state.send_replace(State::Up(conn.clone()));
                    tracing::debug!("pub/sub link up");
                    if let Some(owner) = link.owner.upgrade() {
                        owner.changed(true);
                    }
                    drop(link);
                    if !self.hold(conn, &dropped).await {
                        self.running = false;
                        return;
                    }
                    let Some(link) = self.link.upgrade() else {
                        self.running = false;
                        return;
                    };
                    // A connection dropped right after it was made (clients killed in a
                    // loop): back off before the next one rather than hammer the server.
                    flaps = if up_since.elapsed() < RECONNECT_MAX {
                        flaps.saturating_add(1)
                    } else {
                        0
                    };
                    // Known down while it backs off (up to RECONNECT_MAX): nobody waits for
                    // it meanwhile (`Link::up`), waiters poll instead. Reconnecting at once,
                    // it is only connecting: worth the few milliseconds.
                    link.state
                        .send_replace(State::Connecting { failed: flaps > 0 });
                    tracing::debug!(flaps, "pub/sub link dropped; reconnecting");
                    if let Some(owner) = link.owner.upgrade() {
                        owner.changed(false);
                    }
                    drop(link);
                    if flaps > 0 && !self.pause(flaps).await {
                        return;
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    target = target.wrapping_add(1);
                    tracing::debug!(error = %e, failures, "pub/sub connection failed; retrying with back-off");
                    link.state.send_replace(State::Connecting { failed: true });
                    if failures == 1
                        && let Some(owner) = link.owner.upgrade()
                    {
                        // Waiters blocked on the first attempt learn that it failed.
                        owner.changed(false);
                    }
                    drop(link);
                    if !self.pause(failures).await {
                        return;
                    }
                }
            }
        }
    }

    /// Sleeps the `n`-th back-off delay (jittered, between half and all of its bound);
    /// false when the link went away meanwhile (the task ends).
    async fn pause(&mut self, n: u32) -> bool {
        let bound = RECONNECT_MIN
            .saturating_mul(1u32 << n.min(16))
            .min(RECONNECT_MAX);
        let delay = bound / 2 + jitter(bound / 2);
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = self.closed.notified() => {
                self.running = false;
                false
            }
        }
    }

    /// Marks the link idle if its owner no longer needs it; whether it did.
    fn idle_if_unneeded(&mut self, link: &Link) -> bool {
        let idle = link.state.send_if_modified(|state| {
            let needed = link.owner.upgrade().is_some_and(|o| o.needed());
            if needed {
                false
            } else {
                *state = State::Idle;
                true
            }
        });
        if idle {
            tracing::debug!("pub/sub link down and unused; idle until the next use");
            self.running = false;
        }
        idle
    }

    /// Keeps `conn` until it drops or stops answering; false when the link itself went
    /// away (the task ends).
    async fn hold(&self, mut conn: MultiplexedConnection, dropped: &Notify) -> bool {
        let (response_timeout, primary_only) = match self.link.upgrade() {
            Some(link) => (
                link.response_timeout,
                link.primary_only && !link.role_refused.load(Ordering::Relaxed),
            ),
            None => return false,
        };
        loop {
            let turn = async {
                tokio::select! {
                    () = tokio::time::sleep(HEALTH_EVERY) => {}
                    () = self.check.notified() => {}
                }
            };
            tokio::select! {
                () = dropped.notified() => return true,
                () = self.closed.notified() => return false,
                () = turn => {}
            }
            if primary_only {
                // ROLE answers as PING does, and says whether a failover demoted the
                // server since the link was made.
                match role(response_timeout, &mut conn).await {
                    Some(Role::Replica) => {
                        tracing::debug!(
                            "the grant subscription's server became a replica; moving it"
                        );
                        return true;
                    }
                    Some(_) => {}
                    None => {
                        tracing::debug!("pub/sub connection did not answer its health check");
                        return true;
                    }
                }
            } else {
                let cmd = redis::cmd("PING");
                let ping = cmd.query_async::<redis::Value>(&mut conn);
                match tokio::time::timeout(response_timeout, ping).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "pub/sub connection failed its health check");
                        return true;
                    }
                    Err(_) => {
                        tracing::debug!("pub/sub connection did not answer its health check");
                        return true;
                    }
                }
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.running
            && let Some(link) = self.link.upgrade()
        {
            link.state.send_replace(State::Idle);
        }
    }
}
