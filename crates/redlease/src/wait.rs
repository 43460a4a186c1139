//! Waiting for a busy lock: FIFO hand-off over pub/sub, with polling as a fallback.
//!
//! Each [`Client`](crate::Client) subscribes once, on a RESP3 connection of its own, to its
//! *grant channel* `redlease:grant:<client id>`. A waiter registers its token here, then
//! joins the lock's FIFO queue in Redis (one script call). When the holder releases, the
//! release script hands the lock straight to the oldest waiter whose client still listens
//! (`PUBLISH` reaches a subscriber) and publishes the grant on that client's channel, which
//! this module routes to the waiting task: one round trip per hand-off, no thundering herd,
//! no starvation. Waiters also re-check when the holder's lease should have run out and
//! when the pub/sub connection drops, so a lost message costs time, never correctness.
//!
//! Cluster and quorum clients do not queue: in a cluster, `PUBLISH` counts only the
//! subscribers of the node it runs on, so the hand-off could not tell whether a waiter
//! listens; over a quorum, each node's queue could hand the lock to a different waiter.
//! Their waiters subscribe to the lock's own release channel and try again when the
//! release script announces that the lock is free (no FIFO order there). With
//! [`Notifications::Polling`](crate::Notifications::Polling), or when no subscription can
//! be made, waiters poll with a jittered exponential back-off bounded by [`Retry`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::token::OwnerToken;

/// How long [`Lock::acquire`](crate::Lock::acquire) waits for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// One attempt only.
    No,
    /// Up to this long.
    For(Duration),
    /// Until the lock is acquired (or the future is dropped).
    Forever,
}

impl From<Duration> for Wait {
    fn from(d: Duration) -> Self {
        Self::For(d)
    }
}

/// Bounds of the jittered exponential back-off between polls.
///
/// Delay `n` is drawn uniformly from `0..=min(max, min * 2^n)` ("full jitter"). Waiters
/// with pub/sub also re-check at most every `max`, which bounds how late they notice a
/// lock released by something that does not notify (another library's `DEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    min: Duration,
    max: Duration,
}

impl Retry {
    /// Default first delay bound: fast, so that a short critical section costs little.
    pub const DEFAULT_MIN: Duration = Duration::from_millis(1);
    /// Default ceiling.
    pub const DEFAULT_MAX: Duration = Duration::from_millis(200);

    /// Back-off from `min` up to `max` (checked when the lock is used).
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// The first delay bound.
    pub const fn min(&self) -> Duration {
        self.min
    }

    /// The ceiling.
    pub const fn max(&self) -> Duration {
        self.max
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.min.is_zero() || self.min > self.max {
            return Err(Error::InvalidOption {
                option: "retry",
                reason: format!(
                    "need 0 < min <= max, got min {:?} and max {:?}",
                    self.min, self.max
                ),
            });
        }
        Ok(())
    }

    /// The `n`-th delay, fully jittered.
    pub(crate) fn delay(&self, n: u32) -> Duration {
        self.delay_within(n, self.max)
    }

    /// The `n`-th delay, fully jittered, bounded by `cap` as well as by the ceiling.
    pub(crate) fn delay_within(&self, n: u32, cap: Duration) -> Duration {
        let bound = self
            .min
            .saturating_mul(1u32 << n.min(20))
            .min(self.max)
            .min(cap);
        jitter(bound)
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MIN, Self::DEFAULT_MAX)
    }
}

/// A uniformly random duration in `0..=bound`.
pub(crate) fn jitter(bound: Duration) -> Duration {
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::random_range(0..=nanos))
}

/// Routes hand-offs from this client's grant channel to the waiting tasks.
pub(crate) struct Notifier {
    enabled: bool,
    channel: String,
    /// The Redis to subscribe on (none for cluster and quorum clients, which poll).
    redis: Option<redis::Client>,
    connect_timeout: Duration,
    response_timeout: Duration,
    waiters: Mutex<HashMap<String, oneshot::Sender<u64>>>,
    state: tokio::sync::Mutex<PubSubState>,
    ready: std::sync::atomic::AtomicBool,
    epoch: watch::Sender<u64>,
}

#[derive(Default)]
struct PubSubState {
    conn: Option<ConnectionManager>,
    failed_at: Option<Instant>,
}

/// After a failed subscription, try again no sooner than this.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

impl Notifier {
    pub(crate) fn new(
        enabled: bool,
        redis: Option<redis::Client>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let id = OwnerToken::generate()?;
        Ok(Arc::new(Self {
            enabled,
            channel: format!("redlease:grant:{}", id.secret()),
            redis,
            connect_timeout,
            response_timeout,
            waiters: Mutex::new(HashMap::new()),
            state: tokio::sync::Mutex::new(PubSubState::default()),
            ready: std::sync::atomic::AtomicBool::new(false),
            epoch: watch::Sender::new(0),
        }))
    }

    /// The channel on which this client receives hand-offs.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether hand-offs can reach this client now, without waiting for a subscription.
    pub(crate) fn subscribed(&self) -> bool {
        self.enabled && self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Subscribes on first use; false when notifications are off or unavailable, in which
    /// case the caller polls.
    pub(crate) async fn ready(self: &Arc<Self>) -> bool {
        if !self.enabled {
            return false;
        }
        if self.ready.load(std::sync::atomic::Ordering::Acquire) {
            return true;
        }
        let mut state = self.state.lock().await;
        if state.conn.is_some() {
            return true;
        }
        if state
            .failed_at
            .is_some_and(|t| t.elapsed() < RESUBSCRIBE_AFTER)
        {
            return false;
        }
        match self.subscribe().await {
            Ok(conn) => {
                state.conn = Some(conn);
                self.ready.store(true, std::sync::atomic::Ordering::Release);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "release notifications unavailable; waiters poll instead");
                state.failed_at = Some(Instant::now());
                false
            }
        }
    }

    async fn subscribe(self: &Arc<Self>) -> redis::RedisResult<ConnectionManager> {
        let Some(redis) = &self.redis else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no single Redis to subscribe on",
            )));
        };
        let weak: Weak<Self> = Arc::downgrade(self);
        let mut conn = push_connection(
            redis,
            self.connect_timeout,
            self.response_timeout,
            move |push| {
                if let Some(notifier) = weak.upgrade() {
                    notifier.dispatch(&push);
                }
            },
        )
        .await?;
        conn.subscribe(&self.channel).await?;
        Ok(conn)
    }

    fn dispatch(&self, push: &PushInfo) {
        match push.kind {
            PushKind::Message => {
                let Some(Value::BulkString(payload)) = push.data.get(1) else {
                    return;
                };
                let Some((fence, token)) = parse_grant(payload) else {
                    return;
                };
                let sender = self.lock_waiters().remove(token);
                if let Some(tx) = sender {
                    let _ = tx.send(fence);
                } else {
                    // The waiter gave up; its own clean-up (the release script) hands the
                    // lock on, whichever of the two Redis runs first.
                    tracing::debug!("hand-off for a waiter that already left");
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("pub/sub connection dropped; waiters re-check");
                self.epoch.send_modify(|e| *e += 1);
            }
            _ => {}
        }
    }

    fn lock_waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<u64>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a waiter before it joins the queue, so that no hand-off can be missed.
    pub(crate) fn register(self: &Arc<Self>, token: &OwnerToken) -> Registration {
        let (tx, rx) = oneshot::channel();
        self.lock_waiters().insert(token.secret().to_owned(), tx);
        Registration {
            notifier: Arc::clone(self),
            token: token.secret().to_owned(),
            grant: rx,
        }
    }

    /// A receiver that changes whenever the pub/sub connection drops.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Number of registered waiters (for tests and diagnostics).
    pub(crate) fn waiting(&self) -> usize {
        self.lock_waiters().len()
    }
}

/// A RESP3 connection to `redis` whose pushes (pub/sub messages, disconnections) go to
/// `on_push`, and which subscribes again to its channels after a reconnection.
pub(crate) async fn push_connection(
    redis: &redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
    on_push: impl Fn(PushInfo) + Send + Sync + 'static,
) -> redis::RedisResult<ConnectionManager> {
    let info = redis.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let config = crate::client::manager_config(connect_timeout, response_timeout)
        .set_push_sender(move |push: PushInfo| {
            on_push(push);
            Ok::<(), std::convert::Infallible>(())
        })
        .set_automatic_resubscription();
    ConnectionManager::new_with_config(client, config).await
}

/// "<fence> <token> <key>" -> (fence, token).
fn parse_grant(payload: &[u8]) -> Option<(u64, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.splitn(3, ' ');
    let fence = parts.next()?.parse().ok()?;
    let token = parts.next()?;
    Some((fence, token))
}

/// A waiter's place in the notifier; removed on drop.
pub(crate) struct Registration {
    notifier: Arc<Notifier>,
    token: String,
    grant: oneshot::Receiver<u64>,
}

impl Registration {
    /// Resolves with the fencing token when the lock is handed to this waiter.
    /// Pends forever if the sender is gone (the caller always races it with a timer).
    pub(crate) async fn granted(&mut self) -> u64 {
        match (&mut self.grant).await {
            Ok(fence) => fence,
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.notifier.lock_waiters().remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let r = Retry::new(Duration::from_millis(1), Duration::from_millis(50));
        for n in 0..40 {
            let d = r.delay(n);
            assert!(d <= Duration::from_millis(50));
            if n == 0 {
                assert!(d <= Duration::from_millis(1));
            }
        }
        assert!(
            Retry::new(Duration::ZERO, Duration::from_millis(1))
                .validate()
                .is_err()
        );
        assert!(
            Retry::new(Duration::from_secs(2), Duration::from_secs(1))
                .validate()
                .is_err()
        );
    }

    #[test]
    fn grants_parse() {
        assert_eq!(parse_grant(b"17 abcd redlease:x y"), Some((17, "abcd")));
        assert_eq!(parse_grant(b"x abcd k"), None);
    }
}
