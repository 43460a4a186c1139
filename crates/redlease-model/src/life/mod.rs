//! A model of one lease's whole life after the grant: renewals and extends (to a shorter
//! or a longer ttl), NOSCRIPT reloads and retries across a reconnect that re-send a
//! request behind later ones, cancellation of either step (the client stops waiting, the
//! request may still run), replies read in any order at any later moment, Redis' clock
//! running fast within the drift allowance, and another client taking the key as soon as
//! it expires.
//!
//! The holder follows a [`Rule`] when it sends and applies the steps of its lease; the
//! property [`BELIEF_WITHIN_TRUTH`] is that whenever its claim says held
//! (`now < valid_until`), Redis' key holds its token.
//!
//! ```
//! use redlease_model::life::{self, LifeConfig, Rule};
//!
//! let report = life::check(LifeConfig::code(Rule::OneStepLowerFirst));
//! assert!(report.exhaustive);
//! assert!(report.holds(life::BELIEF_WITHIN_TRUTH));
//! ```

mod config;
mod model;
pub mod scenarios;
mod state;
mod timeline;

pub use config::{LifeConfig, Rule};
pub use model::{
    Action, BELIEF_WITHIN_TRUTH, LifeModel, ORPHAN_RAN, RAISED, RESENT_RAN, SHORTENED, TAKEN,
};
pub use state::{
    Budget, Holder, Key, Reply, Request, SEEN_ORPHAN, SEEN_RAISED, SEEN_RESENT, SEEN_SHORTENED,
    SEEN_TAKEN, State, Step,
};
pub use timeline::{timeline, verdict_of};

use crate::check::{Report, STATE_LIMIT, explore};

/// Explores every reachable state of `config` (one thread, breadth first).
pub fn check(config: LifeConfig) -> Report<LifeConfig> {
    check_limited(config, &[], STATE_LIMIT)
}

/// Explores `config` until every property in `stop_at` (when not empty) has a discovery,
/// the space is exhausted, or `state_limit` states were generated.
pub fn check_limited(
    config: LifeConfig,
    stop_at: &[&'static str],
    state_limit: usize,
) -> Report<LifeConfig> {
    let model = LifeModel::new(config.clone());
    explore(model, config, stop_at, state_limit, timeline, verdict_of)
}
