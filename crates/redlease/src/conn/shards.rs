//! Shard channels on a Redis Cluster: each channel subscribed (`SSUBSCRIBE`) on the
//! primary that owns its slot, and moved when that slot moves.
//!
//! A classic `PUBLISH` in a cluster crosses the cluster bus to every node, whichever node
//! runs it; an `SPUBLISH` stays in the shard that owns the channel's slot. Our channels
//! carry their lock's hash tag, so a script that touches the lock's keys may `SPUBLISH` on
//! them, and only the lock's shard hears it. A subscriber must then be connected to that
//! shard: [`Shards`] keeps one sharded [`Link`] per primary that owns a wanted channel's
//! slot (found with `CLUSTER SLOTS`), and places each channel on its slot's primary.
//!
//! A channel moves when its node refuses it (`MOVED`) or drops it by itself (a
//! `sunsubscribe` push: the slot was migrated, or a failover demoted the node), and when
//! its node's link stays down (a dead primary, replaced by its replica): the slot map is
//! read again, with a jittered back-off while it still names the old node, and the
//! channel is subscribed on the slot's primary now. Meanwhile the channel counts as down
//! ([`Shards::is_up`]), its owner hears that it changed (so that waiters re-check, and do
//! not count on messages nobody can deliver), and again once it is back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::{ConnectionAddr, PushInfo, Value};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::time::Instant;

use super::pubsub::{Link, Mode, Owner};
use crate::keys::hash_slot;
use crate::wait::jitter;

/// First bound of the pause before a moved channel is placed again; doubles up to
/// [`MOVE_MAX`] while placements keep failing.
const MOVE_MIN: Duration = Duration::from_millis(10);
/// Longest pause before a moved channel is placed again.
const MOVE_MAX: Duration = Duration::from_secs(1);
/// The slot map is not read again sooner than this after the last read.
const REFRESH_GAP: Duration = Duration::from_millis(5);

/// The shard channels of one owner, each on its slot's primary.
pub(crate) struct Shards {
    /// The cluster's seed nodes: where the slot map is read, and the settings (credentials,
    /// TLS) of every node connection.
    seeds: Vec<redis::Client>,
    connect_timeout: Duration,
    response_timeout: Duration,
    owner: Weak<dyn Owner>,
    me: Weak<Self>,
    state: Mutex<State>,
    /// One slot map read at a time, and when the last one ended.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

#[derive(Default)]
struct State {
    /// Slot ranges and their primary (`host:port`), from the latest `CLUSTER SLOTS`.
    slots: Vec<(u16, u16, String)>,
    /// One sharded link per primary that holds (or held) a wanted channel.
    links: HashMap<String, NodeLink>,
    channels: HashMap<String, Placed>,
}

/// A node's link, and what it tells its [`Shards`] (held here: the link holds it weakly).
struct NodeLink {
    link: Arc<Link>,
    _owner: Arc<NodeOwner>,
}

/// Where a wanted channel is subscribed.
#[derive(Default)]
struct Placed {
    /// The node whose link wants it (`None` while it is being placed).
    node: Option<String>,
    /// Subscribed on that node since it was placed there.
    confirmed: bool,
    /// Callers waiting to hear whether the subscription took.
    waiting: Vec<UnboundedSender<bool>>,
    /// Placements refused or dropped in a row (for the back-off).
    moves: u32,
}

impl Shards {
    /// Shard channels for `owner` in the cluster that `seeds` belong to; nothing connects
    /// before the first channel is wanted.
    pub(crate) fn new(
        seeds: Vec<redis::Client>,
        connect_timeout: Duration,
        response_timeout: Duration,
        owner: Weak<dyn Owner>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            seeds,
            connect_timeout,
            response_timeout,
            owner,
            me: me.clone(),
            state: Mutex::new(State::default()),
            refreshed: tokio::sync::Mutex::new(None),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Single inserts, removes and flag updates: a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `channel` is subscribed on its slot's primary right now.
    pub(crate) fn is_up(&self, channel: &str) -> bool {
        // The link is asked after the state's lock is let go: a link holds its own state's
        // lock while it asks its owner whether it is still needed (which takes ours).
        let link = {
            let state = self.state();
            state
                .channels
                .get(channel)
                .filter(|placed| placed.confirmed)
                .and_then(|placed| placed.node.as_ref())
                .and_then(|node| state.links.get(node))
                .map(|known| Arc::clone(&known.link))
        };
        link.is_some_and(|link| link.is_up())
    }

    /// Subscribes to `channel` on its slot's primary (in the background); `confirmed`
    /// hears once whether it took. The channel follows its slot until it is unwanted.
    pub(crate) fn want(&self, channel: &str, confirmed: Option<UnboundedSender<bool>>) {
        let up = self.is_up(channel);
        {
            let mut state = self.state();
            let placed = state.channels.entry(channel.to_owned()).or_default();
            if up {
                if let Some(tx) = confirmed {
                    let _ = tx.send(true);
                }
                return;
            }
            placed.waiting.extend(confirmed);
        }
        self.place_later(channel, Duration::ZERO);
    }

    /// Unsubscribes from `channel`.
    pub(crate) fn unwant(&self, channel: &str) {
        let mut state = self.state();
        let Some(placed) = state.channels.remove(channel) else {
            return;
        };
        if let Some(known) = placed.node.and_then(|node| state.links.get(&node)) {
            known.link.unwant(channel);
        }
    }

    /// Places `channel` after `pause`, in a task of its own.
    fn place_later(&self, channel: &str, pause: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(shards) = self.me.upgrade() else {
            return;
        };
        let channel = channel.to_owned();
        runtime.spawn(async move {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            shards.place(&channel).await;
        });
    }

    /// Subscribes `channel` on the primary that owns its slot, moving it there from the
    /// node it was on; tells its waiters whether it took.
    async fn place(&self, channel: &str) {
        let slot = hash_slot(channel.as_bytes());
        let mut node = self.primary_of(slot);
        if node.is_none() {
            self.refresh().await;
            node = self.primary_of(slot);
        }
        let (tx, mut rx) = unbounded_channel();
        let moved = {
            let mut state = self.state();
            let state = &mut *state;
            let Some(placed) = state.channels.get_mut(channel) else {
                return;
            };
            let Some(node) = node.clone() else {
                tracing::debug!("no primary known for a shard channel's slot; waiters poll");
                for waiter in placed.waiting.drain(..) {
                    let _ = waiter.send(false);
                }
                return;
            };
            let before = placed.node.replace(node.clone());
            if let Some(before) = before.as_ref().filter(|b| **b != node)
                && let Some(known) = state.links.get(before)
            {
                known.link.forget(channel);
            }
            if !state.links.contains_key(&node) {
                let Some(made) = self.link_to(&node) else {
                    for waiter in placed.waiting.drain(..) {
                        let _ = waiter.send(false);
                    }
                    return;
                };
                state.links.insert(node.clone(), made);
            }
            let Some(link) = state.links.get(&node).map(|known| Arc::clone(&known.link)) else {
                return;
            };
            // Asked under the state's lock, so that a concurrent `unwant` comes after it.
            link.want(channel, Some(tx));
            before.is_some_and(|b| b != node) || placed.moves > 0
        };
        let took = rx.recv().await.unwrap_or(false);
        let mut state = self.state();
        let Some(placed) = state.channels.get_mut(channel) else {
            return;
        };
        if placed.node != node {
            // Moved again meanwhile: that placement answers the waiters.
            return;
        }
        if took {
            placed.confirmed = true;
            placed.moves = 0;
        }
        for waiter in placed.waiting.drain(..) {
            let _ = waiter.send(took);
        }
        drop(state);
        if took
            && moved
            && let Some(owner) = self.owner.upgrade()
        {
            // Back on the slot's primary after a move: messages reach it again.
            owner.changed(true);
        }
    }

    /// A sharded link to `node` (`host:port`), with the seeds' settings.
    fn link_to(&self, node: &str) -> Option<NodeLink> {
        let Some(client) = self.client_of(node) else {
            tracing::warn!("cannot address a cluster node for pub/sub; waiters poll");
            return None;
        };
        let owner = Arc::new(NodeOwner {
            shards: self.me.clone(),
            node: node.to_owned(),
        });
        let weak: Weak<dyn Owner> = Arc::downgrade(&owner) as Weak<dyn Owner>;
        match Link::new(
            std::slice::from_ref(&client),
            Mode::Sharded,
            self.connect_timeout,
            self.response_timeout,
            weak,
        ) {
            Ok(link) => Some(NodeLink {
                link,
                _owner: owner,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open a pub/sub link to a cluster node; waiters poll");
                None
            }
        }
    }

    /// The primary that owns `slot` in the latest slot map.
    fn primary_of(&self, slot: u16) -> Option<String> {
        self.state()
            .slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, node)| node.clone())
    }

    /// Reads the slot map again (`CLUSTER SLOTS`), from the seeds and the nodes known, in
    /// turn, until one answers.
    async fn refresh(&self) {
        let mut last = self.refreshed.lock().await;
        if last.is_some_and(|at| at.elapsed() < REFRESH_GAP) {
            return;
        }
        let known: Vec<String> = self.state().links.keys().cloned().collect();
        let candidates = self
            .seeds
            .iter()
            .cloned()
            .chain(known.iter().filter_map(|node| self.client_of(node)));
        for node in candidates {
            match self.slots_from(&node).await {
                Ok(slots) if !slots.is_empty() => {
                    self.state().slots = slots;
                    *last = Some(Instant::now());
                    return;
                }
                Ok(_) => tracing::debug!("a cluster node listed no slots"),
                Err(e) => {
                    tracing::debug!(error = %e, "reading the slot map failed; asking another node");
                }
            }
        }
        *last = Some(Instant::now());
    }

    fn client_of(&self, node: &str) -> Option<redis::Client> {
        let (host, port) = node.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let info = self.seeds.first()?.get_connection_info().clone();
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        redis::Client::open(info.set_addr(addr)).ok()
    }

    /// `CLUSTER SLOTS` of `node`: each range with its primary's `host:port`.
    async fn slots_from(
        &self,
        node: &redis::Client,
    ) -> redis::RedisResult<Vec<(u16, u16, String)>> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let bound = self.connect_timeout + self.response_timeout;
        let ask = async {
            let mut conn = node
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn)
                .await
        };
        let reply = tokio::time::timeout(bound, ask).await.map_err(|_| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "CLUSTER SLOTS timed out",
            ))
        })??;
        let fallback_host = match node.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => String::new(),
        };
        Ok(parse_slots(&reply, &fallback_host))
    }

    /// The node at `node` changed: up (resubscribed to all its channels) or down.
    fn node_changed(&self, node: &str, up: bool) {
        {
            let mut state = self.state();
            for placed in state.channels.values_mut() {
                if placed.node.as_deref() != Some(node) {
                    continue;
                }
                placed.confirmed = up;
                if up {
                    placed.moves = 0;
                    for waiter in placed.waiting.drain(..) {
                        let _ = waiter.send(true);
                    }
                }
            }
        }
        if let Some(owner) = self.owner.upgrade() {
            owner.changed(up);
        }
        if !up {
            self.watch_down(node);
        }
    }

    /// While the link to `node` is down, reads the slot map again now and then and moves
    /// the channels whose slots another primary owns now (a failover replaced the node).
    fn watch_down(&self, node: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shards = self.me.clone();
        let node = node.to_owned();
        runtime.spawn(async move {
            let mut round = 0u32;
            loop {
                round = round.saturating_add(1);
                let bound = MOVE_MIN.saturating_mul(1 << round.min(10)).min(MOVE_MAX);
                tokio::time::sleep(bound / 2 + jitter(bound / 2)).await;
                let Some(shards) = shards.upgrade() else {
                    return;
                };
                let (link, channels) = {
                    let state = shards.state();
                    let link = state.links.get(&node).map(|l| Arc::clone(&l.link));
                    let channels: Vec<String> = state
                        .channels
                        .iter()
                        .filter(|(_, p)| p.node.as_deref() == Some(node.as_str()))
                        .map(|(c, _)| c.clone())
                        .collect();
                    (link, channels)
                };
                // Asked without the state's lock (see `is_up`).
                let up = link.is_some_and(|l| l.is_up());
                if up || channels.is_empty() {
                    return;
                }
                shards.refresh().await;
                for channel in channels {
                    let now = shards.primary_of(hash_slot(channel.as_bytes()));
                    if now.is_some_and(|n| n != node) {
                        shards.place_later(&channel, Duration::ZERO);
                    }
                }
            }
        });
    }

    /// `node` refused `channel` or dropped it: place it again, after a back-off when this
    /// keeps happening.
    fn moved(&self, node: &str, channel: &str) {
        let pause = {
            let mut state = self.state();
            let state = &mut *state;
            let Some(placed) = state.channels.get_mut(channel) else {
                return;
            };
            if placed.node.as_deref() != Some(node) {
                // The confirmation of our own unsubscribe there, after a move.
                return;
            }
            placed.confirmed = false;
            placed.node = None;
            placed.moves = placed.moves.saturating_add(1);
            if let Some(known) = state.links.get(node) {
                known.link.forget(channel);
            }
            let bound = MOVE_MIN
                .saturating_mul(1 << placed.moves.min(10))
                .min(MOVE_MAX);
            bound / 2 + jitter(bound / 2)
        };
        tracing::debug!("a shard channel's slot moved; placing it on the slot's primary");
        if let Some(owner) = self.owner.upgrade() {
            // Messages cannot reach it until it is placed again.
            owner.changed(false);
        }
        let Some(shards) = self.me.upgrade() else {
            return;
        };
        let channel = channel.to_owned();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(pause).await;
                shards.refresh().await;
                shards.place(&channel).await;
            });
        }
    }

    /// Whether some wanted channel is placed on `node`.
    fn needs(&self, node: &str) -> bool {
        self.state()
            .channels
            .values()
            .any(|p| p.node.as_deref() == Some(node))
    }
}

/// What one node's link tells its [`Shards`].
struct NodeOwner {
    shards: Weak<Shards>,
    node: String,
}

impl Owner for NodeOwner {
    fn message(&self, push: &PushInfo) {
        if let Some(owner) = self.shards.upgrade().and_then(|s| s.owner.upgrade()) {
            owner.message(push);
        }
    }

    fn changed(&self, up: bool) {
        if let Some(shards) = self.shards.upgrade() {
            shards.node_changed(&self.node, up);
        }
    }

    fn needed(&self) -> bool {
        self.shards.upgrade().is_some_and(|s| s.needs(&self.node))
    }

    fn moved(&self, channel: &str) {
        if let Some(shards) = self.shards.upgrade() {
            shards.moved(&self.node, channel);
        }
    }
}

/// `CLUSTER SLOTS` -> (first slot, last slot, primary `host:port`); an empty host is
/// `fallback_host` (the node asked).
fn parse_slots(reply: &Value, fallback_host: &str) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let slot = |i: usize| match fields.get(i) {
                Some(Value::Int(n)) => u16::try_from(*n).ok(),
                _ => None,
            };
            let Some(Value::Array(primary)) = fields.get(2) else {
                return None;
            };
            let host = match primary.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return None,
            };
            let host = if host.is_empty() || host == "?" {
                fallback_host.to_owned()
            } else {
                host
            };
            let Some(Value::Int(port)) = primary.get(1) else {
                return None;
            };
            Some((slot(0)?, slot(1)?, format!("{host}:{port}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_maps_parse() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
            Value::Int(3),
        ]);
        assert_eq!(
            parse_slots(&reply, "10.0.0.1"),
            vec![
                (0, 5460, "127.0.0.1:7000".to_owned()),
                (5461, 16383, "10.0.0.1:7001".to_owned()),
            ]
        );
    }
}
