//! Release notifications for deployments without FIFO hand-off: Redis Cluster and quorum.
//!
//! A single Redis (or a Sentinel primary) hands a released lock straight to the oldest
//! waiter (see [`wait`](crate::wait)). A cluster cannot: `PUBLISH` there reports only the
//! subscribers of the node it runs on, so the release script could not tell whether a
//! waiter still listens. Over a quorum, each node's queue could hand the lock to a
//! different waiter and nobody would get a majority. There, the release script instead
//! publishes on the lock's own channel (`{key}:released`, in the lock's slot) whenever it
//! frees the lock, and every waiter of that lock retries at once:
//!
//! - **Cluster**: one subscription, on the first seed node that answers. A classic
//!   `PUBLISH` reaches the subscribers of every node of the cluster, whichever node ran it.
//! - **Quorum**: one subscription per node, since any node may be down; the first message
//!   wakes the waiter, later copies of it cost at most one extra attempt.
//!
//! A waiter subscribes (and waits for Redis to confirm) after its first attempt finds the
//! lock busy, and arms its wake-up before each further attempt, so a release that lands
//! between an attempt and the wait is not missed. The last waiter of a lock to leave
//! unsubscribes. Waiters still re-check when the holder's lease should have run out (it
//! may have crashed without releasing) and when a subscription connection drops, so a lost
//! message costs time, never correctness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::wait::push_connection;

/// Where the subscriptions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// One node is enough (a cluster forwards every `PUBLISH` to all its nodes).
    AnyNode,
    /// Every node (independent quorum nodes).
    EveryNode,
}

/// The release channels this client's waiters listen on.
pub(crate) struct Wakeups {
    reach: Reach,
    nodes: Vec<redis::Client>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Channel -> its waiters' wake-up and how many waiters share it.
    channels: Mutex<HashMap<String, Channel>>,
    /// Subscription connections, by node index; serialises SUBSCRIBE and UNSUBSCRIBE.
    conns: tokio::sync::Mutex<Conns>,
}

struct Channel {
    notify: Arc<Notify>,
    users: usize,
}

#[derive(Default)]
struct Conns {
    by_node: HashMap<usize, ConnectionManager>,
    failed_at: Option<Instant>,
}

/// After every node refused a subscription connection, try again no sooner than this.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakeups")
            .field("reach", &self.reach)
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl Wakeups {
    pub(crate) fn new(
        reach: Reach,
        nodes: Vec<redis::Client>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            reach,
            nodes,
            connect_timeout,
            response_timeout,
            channels: Mutex::new(HashMap::new()),
            conns: tokio::sync::Mutex::new(Conns::default()),
        })
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Single inserts, removes and counter updates: a panic cannot leave the map
        // inconsistent, so a poisoned lock is still usable.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts listening for releases on `channel`; `None` when no node would take the
    /// subscription (the caller then polls).
    ///
    /// Cancel safe: a dropped call leaves at worst a subscription that the next watcher
    /// of the channel reuses or the last one removes.
    pub(crate) async fn watch(self: &Arc<Self>, channel: &str) -> Option<Watch> {
        let notify = {
            let mut channels = self.channels();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    notify: Arc::new(Notify::new()),
                    users: 0,
                });
            entry.users += 1;
            Arc::clone(&entry.notify)
        };
        // From here on, dropping the watch (also mid-subscribe) gives the place back.
        let watch = Watch {
            wakeups: Arc::clone(self),
            channel: channel.to_owned(),
            notify,
        };
        self.subscribe(channel).await.then_some(watch)
    }

    /// Subscribes every connection to `channel`; true when at least one node confirmed.
    /// A connection that fails is dropped, so that the next watcher connects afresh (to
    /// another node, for a cluster whose node went away).
    async fn subscribe(self: &Arc<Self>, channel: &str) -> bool {
        let mut conns = self.conns.lock().await;
        self.connect(&mut conns).await;
        let confirmed = join_all(conns.by_node.iter().map(|(&node, conn)| {
            let mut conn = conn.clone();
            async move { (node, conn.subscribe(channel).await) }
        }))
        .await;
        let mut any = false;
        for (node, result) in confirmed {
            match result {
                Ok(()) => any = true,
                Err(e) => {
                    tracing::debug!(node, error = %e, "subscribing to release notifications failed");
                    conns.by_node.remove(&node);
                }
            }
        }
        any
    }

    /// Opens the subscription connections that are missing.
    async fn connect(self: &Arc<Self>, conns: &mut Conns) {
        if enough(self.reach, conns, self.nodes.len())
            || conns
                .failed_at
                .is_some_and(|t| t.elapsed() < RECONNECT_AFTER)
        {
            return;
        }
        let missing: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !conns.by_node.contains_key(i))
            .collect();
        match self.reach {
            Reach::AnyNode => {
                for i in missing {
                    if let Some(conn) = self.open(i).await {
                        conns.by_node.insert(i, conn);
                        break;
                    }
                }
            }
            Reach::EveryNode => {
                let opened = join_all(
                    missing
                        .into_iter()
                        .map(|i| async move { self.open(i).await.map(|conn| (i, conn)) }),
                )
                .await;
                conns.by_node.extend(opened.into_iter().flatten());
            }
        }
        conns.failed_at = (!enough(self.reach, conns, self.nodes.len())).then(Instant::now);
    }

    async fn open(self: &Arc<Self>, node: usize) -> Option<ConnectionManager> {
        let redis = self.nodes.get(node)?;
        let weak: Weak<Self> = Arc::downgrade(self);
        let opened = push_connection(
            redis,
            self.connect_timeout,
            self.response_timeout,
            move |push| {
                if let Some(wakeups) = weak.upgrade() {
                    wakeups.dispatch(&push);
                }
            },
        );
        match tokio::time::timeout(self.connect_timeout, opened).await {
            Ok(Ok(conn)) => Some(conn),
            Ok(Err(e)) => {
                tracing::debug!(node, error = %e, "no release notifications from this node");
                None
            }
            Err(_) => {
                tracing::debug!(
                    node,
                    "no release notifications from this node: connect timed out"
                );
                None
            }
        }
    }

    fn dispatch(&self, push: &PushInfo) {
        match push.kind {
            PushKind::Message => {
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
            PushKind::Disconnection => {
                tracing::debug!("release notification connection dropped; waiters re-check");
                for c in self.channels().values() {
                    c.notify.notify_waiters();
                }
            }
            _ => {}
        }
    }

    /// One watcher of `channel` left; the last one unsubscribes.
    fn leave(self: &Arc<Self>, channel: &str) {
        {
            let mut channels = self.channels();
            let Some(entry) = channels.get_mut(channel) else {
                return;
            };
            entry.users = entry.users.saturating_sub(1);
            if entry.users > 0 {
                return;
            }
            channels.remove(channel);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = Arc::clone(self);
        let channel = channel.to_owned();
        runtime.spawn(async move {
            let conns = this.conns.lock().await;
            // A new watcher may have arrived meanwhile, and subscribed under this mutex.
            if this.channels().contains_key(&channel) {
                return;
            }
            for conn in conns.by_node.values() {
                let mut conn = conn.clone();
                if let Err(e) = conn.unsubscribe(&channel).await {
                    tracing::debug!(error = %e, "unsubscribing from release notifications failed");
                }
            }
        });
    }

    /// Number of locks with a waiter listening (diagnostics).
    pub(crate) fn watched(&self) -> usize {
        self.channels().values().map(|c| c.users).sum()
    }
}

/// Whether `conns` reach the nodes `reach` asks for.
fn enough(reach: Reach, conns: &Conns, nodes: usize) -> bool {
    match reach {
        Reach::AnyNode => !conns.by_node.is_empty(),
        Reach::EveryNode => conns.by_node.len() == nodes,
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
