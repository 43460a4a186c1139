//! A model of the `serve` hand-off that every queued primitive shares
//! (`scripts/lib/grants.lua`), parameterised by what a grant grants ([`Kind`], [`Want`]):
//! a semaphore's permits (`semaphore.lua`, one or several per request) or a read-write
//! lock's read or write side (`rwlock.lua`: readers share, a writer holds alone, a queued
//! writer keeps the readers behind it out). Checked for safety (never more holders than
//! the grants allow: [`WITHIN_PERMITS`]) and bounded liveness: a permit granted to a gone
//! waiter is free again within a bound ([`GONE_GRANT_FREED`]), one granted to a silently
//! cut waiter within its claim window ([`CUT_GRANT_FREED`]), and whenever a live waiter
//! could be served it is within a claim window plus that bound ([`LIVE_SERVED`]); no
//! script leaves a head that fits unserved ([`SERVES_ALL`]).
//!
//! Waiters may crash (a `PUBLISH` to them reaches no one, `PUBSUB NUMSUB` counts no one:
//! `serve` drops their place), give up (their place withdrawn), give up with their
//! give-back lost while their client still listens for other waits (`serve` grants them a
//! permit nobody takes), or be cut off silently (Redis still counts them: `serve` grants
//! them a lease they never hear of, which the claim window of the one hand-off frees and a
//! grant of the whole lease does not). Waiters re-check when their timer says (the reply
//! of their latest attempt, or a nudge), and may re-check earlier. A running client
//! handles a pushed grant and a re-check that is due before time passes, so the bounds
//! are in ticks of model time: 0 means before time moves.
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
mod script;
mod state;
mod timeline;

pub use model::{
    Action, CUT_GRANT, CUT_GRANT_FREED, DEAD_HEAD_DROPPED, DROPPED, GONE_GRANT, GONE_GRANT_FREED,
    HELD_BACK, LIVE_SERVED, NUDGED, SERVED_BEHIND, SERVES_ALL, SHARED, ServeModel, WITHIN_PERMITS,
    unclaimed_too_long,
};
pub use state::{
    Client, Kind, Permit, Phase, Rule, SEEN_BEHIND, SEEN_CUT_GRANT, SEEN_DEAD_HEAD, SEEN_DROP,
    SEEN_GONE_GRANT, SEEN_HELD_BACK, SEEN_NUDGE, SEEN_SHARED, SEEN_STUCK, ServeConfig, State, Want,
};
pub use timeline::{timeline, verdict_of};

use crate::check::{Report, STATE_LIMIT, explore};

/// Explores every reachable state of `config` (one thread, breadth first).
pub fn check(config: ServeConfig) -> Report<ServeConfig> {
    let model = ServeModel::new(config.clone());
    explore(model, config, &[], STATE_LIMIT, timeline, verdict_of)
}
