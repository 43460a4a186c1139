//! The background task behind a [`Link`]: it connects (cycling through the targets,
//! subscribing to every wanted channel), holds the connection while it answers its health
//! checks, and reconnects with a jittered exponential back-off for as long as the link is
//! needed.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::wait::jitter;

use super::wire::{Role, not_primary, role, shard_command, timed_out, within_primary};
use super::{Link, State};

/// First reconnection delay bound; doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(20);
/// Longest reconnection delay bound.
const RECONNECT_MAX: Duration = Duration::from_secs(1);
/// How often an idle link checks with a `PING` that its connection still answers.
const HEALTH_EVERY: Duration = Duration::from_secs(5);

impl Link {
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
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(move |push: PushInfo| {
                match push.kind {
                    PushKind::Disconnection => dropped.notify_one(),
                    PushKind::Message | PushKind::SMessage => {
                        if let Some(owner) = owner.upgrade() {
                            owner.message(&push);
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
                        tracing::debug!("the subscription's server became a replica; moving it");
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
