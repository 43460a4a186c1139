//! A [`stateright`] model of redlease's Redlock quorum (`crates/redlease/src/backend/quorum/`
//! with `acquire.lua`, `fence.lua`, `raise_fence.lua` and `release.lua`) and of its
//! fencing tokens, checked under clock drift, process pauses, node crashes, lost messages,
//! node clocks stepping back and fencing counters expiring. A node grants with a plain
//! counter or with `fence.lua`'s hybrid clock, `max(counter + 1, the node's clock)`
//! ([`Fencing`]).
//!
//! - [`Config`] says what one run explores: the deployment, the fault budgets and the
//!   protocol variant ([`Config::code`] is the code as written, with no fault).
//! - [`QuorumModel`] is the transition system; its properties are [`FENCED_SAFETY`] and
//!   [`MUTUAL_EXCLUSION`], plus examples that show the runs are not vacuous.
//! - [`check`] explores every reachable state (breadth first, one thread) and returns a
//!   [`Report`]; a counterexample comes back as a numbered [`timeline`].
//! - [`scenarios`] lists the configurations the tests and the `explore` example check,
//!   with what each is expected to show.
//! - [`handoff`] is a second model, of the single-Redis FIFO hand-off (queued waiters
//!   handed the lock by a release and told over pub/sub), with its own properties,
//!   scenarios and timelines.
//! - [`life`] models one lease's life after the grant: renewals and extends (shorter or
//!   longer) under NOSCRIPT reloads, retries, cancellation, replies out of order and a
//!   fast Redis clock, with the property that the holder's claim never outlives its key.
//! - [`serve`] models the `serve` hand-off of the semaphore (one or several permits per
//!   request) and of the read-write lock, with waiters that crash, give up, give up
//!   unheard or are cut off silently, and the queue's watchers and nudges, for safety and
//!   bounded liveness (a live waiter that could be served is, within a claim window).
//! - [`failover`] models pushed grants across a failover behind one endpoint (a waiter's
//!   link left on the demoted primary, replication delivering a grant the release skipped).
//!
//! The crate's `README.md` tells what is modelled, the bounds, the results and the limits.
//!
//! ```
//! use redlease_model::{Config, FENCED_SAFETY, MUTUAL_EXCLUSION, check};
//!
//! let mut config = Config::code();
//! config.counter_spread = 0; // every counter starts at 0: a small run
//! let report = check(config);
//! assert!(report.exhaustive);
//! assert!(report.holds(FENCED_SAFETY) && report.holds(MUTUAL_EXCLUSION));
//! ```

mod check;
mod config;
pub mod failover;
pub mod handoff;
pub mod life;
mod model;
mod path;
mod properties;
pub mod scenarios;
pub mod serve;
mod slots;
mod state;
mod steps;
mod timeline;

pub use check::{
    Discovery, Named, Outcome, Report, STATE_LIMIT, check, check_limited, check_until,
};
pub use config::{
    BeforeWrite, Config, Drift, Fencing, PauseClock, Persistence, Restart, TokenRule, WriteBack,
};
pub use model::{
    Action, BOTH_WRITE, ClockId, FENCED_SAFETY, MUTUAL_EXCLUSION, QuorumModel, SOME_REJECT,
    SOME_WRITE,
};
pub use properties::{fenced_violation, fenced_violation_shown, holders, overlapping_holders};
pub use slots::Slots;
pub use state::{
    ABSENT, Accepted, Backlog, Before, Budget, Client, Fence, LockKey, MAX_CLIENTS, MAX_NODES,
    Node, Phase, Reply, Request, Resource, State, client_name, node_name,
};
pub use timeline::{timeline, verdict, verdict_of};
