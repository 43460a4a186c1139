//! A model of a semaphore's `serve` hand-off (`semaphore.lua`, used by `sem_acquire.lua`
//! and `sem_release.lua`) and of what a client does with a grant for a token nobody waits
//! for any more, checked for a bounded liveness property: a permit granted to a gone
//! waiter is free again within a bound ([`GONE_GRANT_FREED`]), while never more clients
//! hold than there are permits ([`WITHIN_PERMITS`]) and no script leaves a permit free
//! while a place is queued ([`SERVES_ALL`]: a gone waiter's place lives until the first
//! script that can serve it, or until the queue's linger runs out).
//!
//! Waiters may crash (a `PUBLISH` to them reaches no one: `serve` drops their place),
//! give up with their give-back lost while their client still listens for other waits
//! (`serve` grants them a permit nobody takes), or be cut off silently (Redis still counts
//! them: `serve` grants them a permit they never hear of; [`CUT_GRANT_FREED`] bounds how
//! long it stays taken, which the claim window of the one hand-off keeps and a grant of
//! the whole lease does not). A running client handles a pushed grant
//! before time passes, so the bound is in ticks of model time: 0 means before time moves.
//!
//! ```
//! use redlease_model::serve::{self, Rule, ServeConfig};
//!
//! let report = serve::check(ServeConfig::code(Rule::GiveBack));
//! assert!(report.exhaustive);
//! assert!(report.holds(serve::GONE_GRANT_FREED));
//! ```

mod model;
pub mod scenarios;
mod state;
mod timeline;

pub use model::{
    Action, CUT_GRANT, CUT_GRANT_FREED, DROPPED, GONE_GRANT, GONE_GRANT_FREED, SERVED_BEHIND,
    SERVES_ALL, ServeModel, WITHIN_PERMITS, unclaimed_too_long,
};
pub use state::{
    Client, Permit, Phase, Rule, SEEN_BEHIND, SEEN_CUT_GRANT, SEEN_DROP, SEEN_GONE_GRANT,
    SEEN_STUCK, ServeConfig, State,
};
pub use timeline::{timeline, verdict_of};

use crate::check::{Report, STATE_LIMIT, explore};

/// Explores every reachable state of `config` (one thread, breadth first).
pub fn check(config: ServeConfig) -> Report<ServeConfig> {
    let model = ServeModel::new(config.clone());
    explore(model, config, &[], STATE_LIMIT, timeline, verdict_of)
}
