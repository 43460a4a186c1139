//! How waiters learn that a busy lock may be theirs, over pub/sub:
//! - `grants`: hand-off grants to this client's queued waiters (a single Redis, Sentinel);
//! - `releases`: release notices on each lock's channel (Cluster, quorum), after which
//!   every waiter of that lock tries again.
//!
//! Both ride on [`Link`](crate::conn::pubsub::Link)s, which come back after an outage.

pub(crate) mod grants;
pub(crate) mod releases;

pub(crate) use grants::{Notifier, Registration};
pub(crate) use releases::{Reach, Wakeups, Watch};
