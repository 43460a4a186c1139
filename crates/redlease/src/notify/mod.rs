//! How waiters learn that a busy lock may be theirs, over pub/sub:
//! - `grants`: hand-off grants to this client's queued waiters (a single Redis, Sentinel,
//!   and a Cluster's locks, there by `SPUBLISH` on a per-lock shard channel);
//! - `releases`: release notices on each lock's channel (quorum; a Cluster's semaphores
//!   and read-write locks, and its lock waiters whose grant subscription is down), after
//!   which every waiter of that lock tries again.
//!
//! Both ride on [`Link`](crate::conn::pubsub::Link)s, which come back after an outage; on a
//! Cluster, on one sharded link per primary, each channel on its slot's primary (see
//! `crate::conn::shards`), so that no message crosses the whole cluster.

pub(crate) mod grants;
pub(crate) mod releases;

pub(crate) use grants::{Grant, GrantSource, Notifier, Place, Registration, Told};
pub(crate) use releases::{Reach, Wakeups, Watch};
