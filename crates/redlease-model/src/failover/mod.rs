//! A model of pushed grants across a failover behind one endpoint (a managed Redis
//! primary endpoint, a Kubernetes Service, HAProxy): new connections go to the new
//! primary, old ones stay on the demoted one. A release on the new primary publishes a
//! waiter's grant, counts 0 receivers (the waiter's link is on the old primary), skips it
//! and hands the lock to the next waiter (or frees it); replication then delivers the
//! skipped grant on the old primary, over the waiter's link. A waiter follows a [`Rule`]
//! to decide whether it trusts a pushed grant.
//!
//! The primary may move back and forth (a failover, a failback, ...) as often as the
//! configuration allows, between any two steps, also between a grant's read and the
//! answer to a `ROLE` asked about it.
//!
//! Properties: [`MUTUAL_EXCLUSION`] and [`WITHIN_TRUTH`] (a client believes it holds only
//! while the key holds its token). Leases do not run out here: the model is about who is
//! told, not when.
//!
//! ```
//! use redlease_model::failover::{self, FailoverConfig, Rule};
//!
//! let report = failover::check(FailoverConfig::code(Rule::ConfirmByAttempt).moving(3));
//! assert!(report.exhaustive);
//! assert!(report.holds(failover::MUTUAL_EXCLUSION));
//! ```

mod config;
mod model;
pub mod scenarios;
mod state;
mod timeline;

pub use config::{FailoverConfig, Rule};
pub use model::{
    Action, CONFIRMED, FailoverModel, MUTUAL_EXCLUSION, RELAYED, SKIPPED, WITHIN_TRUTH, believers,
    beyond_truth,
};
pub use state::{Client, Phase, Reply, SEEN_CONFIRM, SEEN_RELAYED, SEEN_SKIP, State};
pub use timeline::{timeline, verdict_of};

use crate::check::{Report, STATE_LIMIT, explore};

/// Explores every reachable state of `config` (one thread, breadth first).
pub fn check(config: FailoverConfig) -> Report<FailoverConfig> {
    let model = FailoverModel::new(config.clone());
    explore(model, config, &[], STATE_LIMIT, timeline, verdict_of)
}
