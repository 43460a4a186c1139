//! Release notifications where waiters are not (or cannot now be) handed the lease:
//! Redis Cluster and quorum.
//!
//! A single Redis (or a Sentinel primary) hands a released lock straight to the oldest
//! waiter (see [`wait`](crate::wait)); so does a Cluster, for locks. Over a quorum, each
//! node's queue could hand the lock to a different waiter and nobody would get a
//! majority. There, and on a Cluster for semaphores, read-write locks and lock waiters
//! whose grant subscription is down, the release script instead
//! publishes on the lock's own channel (`{key}\0released`, in the lock's slot) whenever it
//! frees the lock, and every waiter of that lock retries at once:
//!
//! - **Cluster**: a shard channel (`SSUBSCRIBE`) on the primary that owns the lock's
//!   slot, followed when the slot moves or the primary fails over (see
//!   `crate::conn::shards`). The scripts `SPUBLISH`, so a release reaches the lock's shard
//!   only, not every node of the cluster as a classic `PUBLISH` would (which, with many
//!   nodes and busy locks, saturates the cluster bus). Lock waiters there queue for a
//!   hand-off instead (see `crate::notify::grants`) and listen here only while their grant
//!   subscription is down; semaphore and read-write lock waiters listen here.
//! - **Quorum**: one subscription per node, since any node may be down; the first message
//!   wakes the waiter, later copies of it cost at most one extra attempt.
//!
//! A waiter subscribes (and waits for one node to confirm, no longer than its own wait)
//! after its first attempt finds the lock busy, and arms its wake-up before each further
//! attempt, so a release that lands between an attempt and the wait is not missed. The
//! last waiter of a lock to leave unsubscribes. Each subscription connection is restored
//! in the background after an outage of any length, with every channel still watched
//! (see `crate::conn::pubsub`). Waiters still re-check when the holder's lease should have run
//! out (it may have crashed without releasing) and when a subscription connection drops
//! or comes back, so a lost message costs time, never correctness.

use hashbrown::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::{PushInfo, Value};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::conn::pubsub::{Link, Mode as LinkMode, Owner as LinkOwner};
use crate::conn::shards::Shards;

/// Where the subscriptions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// One node is enough (a single Redis, a Sentinel primary).
    AnyNode,
    /// Every node (independent quorum nodes).
    EveryNode,
    /// The primary that owns each channel's slot (Redis Cluster; shard channels).
    #[cfg(feature = "cluster")]
    SlotOwner,
}

/// The subscriptions behind a [`Wakeups`].
enum Subs {
    /// One link per quorum node, or one link cycling through its targets. Each restores
    /// its subscriptions after an outage by itself (see `crate::conn::pubsub`).
    Links(Vec<Arc<Link>>),
    /// Shard channels, each on its slot's primary (none without the `cluster` feature:
    /// `Shards` then has no values).
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "the arms stay, for a type without values")
    )]
    Shards(Arc<Shards>),
}

/// The release channels this client's waiters listen on.
pub(crate) struct Wakeups {
    reach: Reach,
    subs: Subs,
    /// Channel -> its waiters' wake-up and how many waiters share it.
    channels: Mutex<HashMap<String, Channel>>,
}

struct Channel {
    notify: Arc<Notify>,
    users: usize,
    /// Some link confirmed the subscription since the channel was first watched.
    confirmed: bool,
}

impl std::fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakeups")
            .field("reach", &self.reach)
            .field(
                "links",
                &match &self.subs {
                    Subs::Links(links) => links.len(),
                    Subs::Shards(_) => 0,
                },
            )
            .finish_non_exhaustive()
    }
}

impl Wakeups {
    pub(crate) fn new(
        reach: Reach,
        nodes: &[redis::Client],
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> redis::RedisResult<Arc<Self>> {
        let mut failed = None;
        let wakeups = Arc::new_cyclic(|weak: &Weak<Self>| {
            let owner: Weak<dyn LinkOwner> = weak.clone();
            let subs = match reach {
                #[cfg(feature = "cluster")]
                Reach::SlotOwner => Subs::Shards(Shards::new(
                    nodes.to_vec(),
                    connect_timeout,
                    response_timeout,
                    owner,
                )),
                Reach::AnyNode | Reach::EveryNode => {
                    let groups: Vec<&[redis::Client]> = if reach == Reach::AnyNode {
                        vec![nodes]
                    } else {
                        nodes.chunks(1).collect()
                    };
                    Subs::Links(
                        groups
                            .into_iter()
                            .filter_map(|targets| {
                                Link::new(
                                    targets,
                                    LinkMode::Notices,
                                    connect_timeout,
                                    response_timeout,
                                    owner.clone(),
                                )
                                .map_err(|e| failed = Some(e))
                                .ok()
                            })
                            .collect(),
                    )
                }
            };
            Self {
                reach,
                subs,
                channels: Mutex::new(HashMap::new()),
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(wakeups),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Single inserts, removes and counter updates: a panic cannot leave the map
        // inconsistent, so a poisoned lock is still usable.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts listening for releases on `channel`; `None` when no node confirmed the
    /// subscription by `deadline`, or every node is known to be down right now (the
    /// caller then polls). Subscribing goes on in the background on every node, and
    /// comes back after an outage.
    ///
    /// Cancel safe: a dropped call leaves at worst a subscription that the next watcher
    /// of the channel reuses or the last one removes.
    pub(crate) async fn watch(
        self: &Arc<Self>,
        channel: &str,
        deadline: Option<Instant>,
    ) -> Option<Watch> {
        let (confirmations, notify) = {
            let mut channels = self.channels();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    notify: Arc::new(Notify::new()),
                    users: 0,
                    confirmed: false,
                });
            entry.users += 1;
            let notify = Arc::clone(&entry.notify);
            if entry.confirmed && self.is_up(channel) {
                (None, notify)
            } else {
                // Asked under the map's lock, so that a concurrent last `leave` cannot
                // unsubscribe after us.
                let (tx, rx) = mpsc::unbounded_channel();
                match &self.subs {
                    Subs::Links(links) => {
                        for link in links {
                            link.want(channel, Some(tx.clone()));
                        }
                    }
                    Subs::Shards(shards) => shards.want(channel, Some(tx)),
                }
                (Some(rx), notify)
            }
        };
        // From here on, dropping the watch (also mid-subscribe) gives the place back.
        let watch = Watch {
            wakeups: Arc::clone(self),
            channel: channel.to_owned(),
            notify,
        };
        let Some(mut confirmations) = confirmations else {
            return Some(watch);
        };
        let expected = match &self.subs {
            Subs::Links(links) => links.len(),
            Subs::Shards(_) => 1,
        };
        let mut answers = 0;
        while answers < expected {
            let next = confirmations.recv();
            let answer = match deadline {
                Some(d) => tokio::time::timeout_at(d, next).await.ok().flatten(),
                None => next.await,
            };
            match answer {
                Some(true) => {
                    if let Some(c) = self.channels().get_mut(channel) {
                        c.confirmed = true;
                    }
                    return Some(watch);
                }
                Some(false) => answers += 1,
                None => break,
            }
        }
        tracing::debug!("no node confirmed the release notification subscription in time; polling");
        None
    }

    /// Runs every link's health check now (see `Link::check_soon`): a command connection
    /// of the client went silent or met `READONLY`.
    pub(crate) fn check_soon(&self) {
        if let Subs::Links(links) = &self.subs {
            for link in links {
                link.check_soon();
            }
        }
    }

    /// Moves the subscriptions to `primary` (a Sentinel primary the sentinels elected).
    pub(crate) fn follow(&self, primary: &redis::Client) {
        let Subs::Links(links) = &self.subs else {
            return;
        };
        for link in links {
            if let Err(e) = link.retarget(std::slice::from_ref(primary)) {
                tracing::warn!(error = %e, "release notices cannot follow the new primary; observers poll");
            }
        }
    }

    /// One watcher of `channel` left; the last one unsubscribes.
    fn leave(&self, channel: &str) {
        let mut channels = self.channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        entry.users = entry.users.saturating_sub(1);
        if entry.users > 0 {
            return;
        }
        channels.remove(channel);
        // Under the map's lock: a new watcher's `want` comes after this.
        match &self.subs {
            Subs::Links(links) => {
                for link in links {
                    link.unwant(channel);
                }
            }
            Subs::Shards(shards) => shards.unwant(channel),
        }
    }

    /// Whether messages on `channel` can reach this client now (some node's link is up;
    /// on a Cluster, the link of its slot's primary, subscribed).
    fn is_up(&self, channel: &str) -> bool {
        match &self.subs {
            Subs::Links(links) => links.iter().any(|l| l.is_up()),
            Subs::Shards(shards) => shards.is_up(channel),
        }
    }

    /// Number of locks with a waiter listening (diagnostics).
    pub(crate) fn watched(&self) -> usize {
        self.channels().values().map(|c| c.users).sum()
    }
}

impl LinkOwner for Wakeups {
    fn message(&self, push: &PushInfo) {
        let Some(Value::BulkString(channel)) = push.data.first() else {
            return;
        };
        let Ok(channel) = std::str::from_utf8(channel) else {
            return;
        };
        if let Some(c) = self.channels().get(channel) {
            c.notify.notify_waiters();
        }
    }

    fn changed(&self, up: bool) {
        // Down: waiters re-check. Up again: a release may have gone unheard meanwhile.
        tracing::debug!(up, "release notification link changed; waiters re-check");
        for c in self.channels().values() {
            c.notify.notify_waiters();
        }
    }

    fn needed(&self) -> bool {
        !self.channels().is_empty()
    }
}

/// A waiter's subscription to one lock's release channel; given back on drop.
pub(crate) struct Watch {
    wakeups: Arc<Wakeups>,
    channel: String,
    notify: Arc<Notify>,
}

impl Watch {
    /// The wake-up to arm before an attempt and await after it.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        Arc::clone(&self.notify)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.wakeups.leave(&self.channel);
    }
}
