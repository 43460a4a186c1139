//! A [`stateright`] model of redlease's Redlock quorum (`crates/redlease/src/quorum.rs`)
//! and its fencing tokens, checked under clock drift, process pauses, node crashes and
//! lost messages. See this crate's `README.md` for what is modelled and what was found.
//!
//! ```
//! use redlease_model::{Config, FENCED_SAFETY, check};
//!
//! let mut config = Config::code();
//! config.pauses = 0; // a small run, for the example
//! config.crashes = 0;
//! let report = check(config);
//! assert!(report.holds(FENCED_SAFETY));
//! ```

mod check;
mod config;
mod model;
mod properties;
pub mod scenarios;
mod slots;
mod state;
mod timeline;

pub use check::{Discovery, Outcome, Report, STATE_LIMIT, check, check_limited, check_until};
pub use config::{
    BeforeWrite, Config, Drift, PauseClock, Persistence, Restart, TokenRule, WriteBack,
};
pub use model::{
    Action, BOTH_WRITE, ClockId, FENCED_SAFETY, MUTUAL_EXCLUSION, QuorumModel, SOME_REJECT,
    SOME_WRITE,
};
pub use properties::{fenced_violation, holders, overlapping_holders};
pub use slots::Slots;
pub use state::{
    Accepted, Backlog, Before, Budget, Client, LockKey, MAX_CLIENTS, MAX_NODES, Node, Phase, Reply,
    Request, Resource, State,
};
pub use timeline::{client_name, node_name, timeline, verdict};
