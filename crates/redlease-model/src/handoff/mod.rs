//! A model of the single-Redis FIFO hand-off (`crates/redlease/src/acquire/` with
//! `acquire.lua`, `release.lua` and `notify/grants.rs`): waiters queue in Redis, a
//! release hands the lock to the oldest one and pushes it a grant over pub/sub, and a
//! waiter dates the lease it then claims by a [`Rule`].
//!
//! Checked under waiter pauses, pub/sub grants delayed, reordered against replies and
//! lost with their subscription, data connections dropping, waiters giving up, leases
//! expiring and re-check timers firing at any moment, with the properties
//! [`MUTUAL_EXCLUSION`] (belief: what `is_held()` would say), [`WITHIN_LEASE`] (a
//! guard's `valid_until` never later than its lease's end in Redis) and [`SHORT_LEASE`]
//! (`acquire` never returns less than the floor of validity).
//!
//! Under [`Rule::ConfirmInWindow`] (the mutex's rule: a hand-off lasts a claim window
//! until its waiter confirms it with an attempt) waiters may also be cut off silently,
//! and three more properties are checked: [`WINDOW_BOUND`] and [`SERVED_AFTER_WINDOW`]
//! (bounded liveness: a grant to a silent waiter costs the others the window, and the
//! next waiter is then served at once by the follow-up) and [`IN_ORDER`] (FIFO).
//!
//! ```
//! use redlease_model::handoff::{self, HandoffConfig, Rule};
//!
//! let mut config = HandoffConfig::code(Rule::Fixed);
//! config.clients = 2; // a small run
//! let report = handoff::check(config);
//! assert!(report.exhaustive);
//! assert!(report.holds(handoff::MUTUAL_EXCLUSION) && report.holds(handoff::WITHIN_LEASE));
//! ```

mod config;
mod model;
mod redis;
pub mod scenarios;
mod state;
mod timeline;

pub use config::{HandoffConfig, Rule};
pub use model::{
    Action, CONFIRMED, HANDED_OFF, HandoffModel, IN_ORDER, MUTUAL_EXCLUSION, PAUSED_HANDOFF,
    SERVED_AFTER_WINDOW, SERVED_PAST_SILENT, SHORT_LEASE, VOID_DISCARDED, WINDOW_BOUND,
    WITHIN_LEASE, believers, beyond_lease, silent_too_long,
};
pub use state::{
    Budget, Client, Fence, Handed, Key, Phase, Reply, Request, Run, SEEN_CONFIRM, SEEN_HANDOFF,
    SEEN_JUMP, SEEN_PAST_SILENT, SEEN_SHORT, SEEN_VOID, State,
};
pub use timeline::{timeline, verdict_of};

use crate::check::{Report, STATE_LIMIT, explore};

/// Explores every reachable state of `config` (one thread, breadth first).
pub fn check(config: HandoffConfig) -> Report<HandoffConfig> {
    check_limited(config, &[], STATE_LIMIT)
}

/// Explores `config` until every property in `stop_at` (when not empty) has a discovery,
/// the space is exhausted, or `state_limit` states were generated.
pub fn check_limited(
    config: HandoffConfig,
    stop_at: &[&'static str],
    state_limit: usize,
) -> Report<HandoffConfig> {
    let model = HandoffModel::new(config.clone());
    explore(model, config, stop_at, state_limit, timeline, verdict_of)
}
