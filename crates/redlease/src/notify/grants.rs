//! Hand-off grants: this client's grant channel, and the waiters it routes grants to.
//!
//! Each [`Client`](crate::Client) subscribes once, on a RESP3 connection of its own, to its
//! *grant channel* `redlease:grant:<client id>`. A waiter registers its token here, then
//! joins the lock's FIFO queue in Redis; the release script hands the lock to the oldest
//! waiter whose client still listens and publishes the grant on that client's channel,
//! which this module routes to the waiting task (see [`crate::wait`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::{PushInfo, Value};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::conn::pubsub::{Link, Owner as LinkOwner};
use crate::error::Result;
use crate::replies::parse_grant;
use crate::token::OwnerToken;

/// Routes hand-offs from this client's grant channel to the waiting tasks.
pub(crate) struct Notifier {
    enabled: bool,
    channel: String,
    /// The subscription (none for cluster and quorum clients, which do not queue).
    link: Option<Arc<Link>>,
    waiters: Mutex<HashMap<String, oneshot::Sender<u64>>>,
    /// When a waiter last asked for the subscription: the link keeps reconnecting for
    /// [`IN_USE_FOR`] after that, even with no waiter registered.
    last_used: Mutex<Option<Instant>>,
    epoch: watch::Sender<u64>,
}

/// How long after its last use the grant subscription is still restored after an outage
/// when no waiter is queued (with waiters queued, it is restored for as long as it takes).
const IN_USE_FOR: Duration = Duration::from_secs(30);

impl Notifier {
    pub(crate) fn new(
        enabled: bool,
        redis: Option<redis::Client>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let id = OwnerToken::generate()?;
        let channel = format!("redlease:grant:{}", id.secret());
        Ok(Arc::new_cyclic(|weak: &Weak<Self>| {
            let owner: Weak<dyn LinkOwner> = weak.clone();
            let link = redis.filter(|_| enabled).and_then(|redis| {
                match Link::new(&[redis], connect_timeout, response_timeout, owner) {
                    Ok(link) => {
                        link.keep(&channel);
                        Some(link)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "release notifications unavailable; waiters poll instead");
                        None
                    }
                }
            });
            Self {
                enabled: enabled && link.is_some(),
                channel,
                link,
                waiters: Mutex::new(HashMap::new()),
                last_used: Mutex::new(None),
                epoch: watch::Sender::new(0),
            }
        }))
    }

    /// Moves the grant subscription to `primary` (a Sentinel primary the sentinels
    /// elected): the current connection is dropped and the next one goes there.
    pub(crate) fn follow(&self, primary: &redis::Client) {
        if let Some(link) = &self.link
            && let Err(e) = link.retarget(std::slice::from_ref(primary))
        {
            tracing::warn!(error = %e, "the grant subscription cannot follow the new primary; waiters poll");
        }
    }

    /// Makes every waiter re-check the lock now (a failover moves the queues elsewhere).
    pub(crate) fn recheck(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// The channel on which this client receives hand-offs.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether hand-offs can reach this client now, without waiting for a subscription:
    /// false while the subscription is down (being restored).
    pub(crate) fn subscribed(&self) -> bool {
        self.enabled && self.link.as_ref().is_some_and(|l| l.is_up())
    }

    /// Subscribes on first use; false when notifications are off or unavailable right
    /// now, in which case the caller polls. Waits for a subscription being made no later
    /// than `deadline`, and not at all for one known to be down (it is restored in the
    /// background meanwhile).
    pub(crate) async fn ready(self: &Arc<Self>, deadline: Option<Instant>) -> bool {
        if !self.enabled {
            return false;
        }
        let Some(link) = &self.link else {
            return false;
        };
        *self
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        link.up(deadline).await.is_some()
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
        // A registered waiter needs the subscription: (re)start it if it went idle.
        if self.enabled
            && let Some(link) = &self.link
        {
            link.start();
        }
        Registration {
            notifier: Arc::clone(self),
            token: token.secret().to_owned(),
            grant: rx,
        }
    }

    /// A receiver that changes whenever the subscription drops or comes back.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Tells the registered waiter `token` that it was handed the lock with `fence`: from
    /// the grant subscription, or sooner from the reply of a release by this very client
    /// (whichever comes first; the other finds nobody left to tell).
    pub(crate) fn deliver(&self, fence: u64, token: &str) {
        let sender = self.lock_waiters().remove(token);
        if let Some(tx) = sender {
            let _ = tx.send(fence);
        } else {
            // Told already, another client's waiter, or the waiter gave up: then its own
            // clean-up (the release script) hands the lock on, whichever of the two Redis
            // runs first.
            tracing::trace!("hand-off for no waiter registered here");
        }
    }

    /// Number of registered waiters (for tests and diagnostics).
    pub(crate) fn waiting(&self) -> usize {
        self.lock_waiters().len()
    }
}

impl LinkOwner for Notifier {
    fn message(&self, push: &PushInfo) {
        let Some(Value::BulkString(payload)) = push.data.get(1) else {
            return;
        };
        let Some((fence, token)) = parse_grant(payload) else {
            return;
        };
        self.deliver(fence, token);
    }

    fn changed(&self, up: bool) {
        // Down: queued waiters re-check (a release meanwhile skips them). Up: they re-join
        // the queue at once, where releases can reach them again.
        tracing::debug!(up, "grant subscription changed; waiters re-check");
        self.epoch.send_modify(|e| *e += 1);
    }

    fn needed(&self) -> bool {
        !self.lock_waiters().is_empty()
            || self
                .last_used
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|t| t.elapsed() < IN_USE_FOR)
    }
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
