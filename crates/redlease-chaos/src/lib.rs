//! Fault injection for redlease: a fencing judge and a history checker.
//!
//! The `redlease-chaos` binary runs worker OS processes that loop
//! acquire → `BEGIN` → work → `WRITE` → `END` → release, and reports every step to a
//! [`Judge`] in the parent process, one line per event over the worker's stdout, answered
//! over its stdin before the worker goes on (so that the judge's order of receipt respects
//! causality: a worker's `END` is stamped before it releases, hence before the next holder's
//! `BEGIN`). The judge stamps each event with its own monotonic clock and plays a *fenced
//! resource*: it accepts a `WRITE` only when its fencing token is no lower than the highest
//! it has accepted. Meanwhile the runner injects faults (a holder killed or paused, Redis
//! killed, paused, flushed or busy, replies delayed or lost) and records them in the same
//! history. [`check`] then reads the history and counts what matters. Workers may also
//! hold a permit of a semaphore, a read or write hold of a read-write lock, a multi-lock,
//! or lead an election for one section: the judge and [`check_as`] then apply that
//! [`Primitive`]'s rule (at most N holders; no writer with anyone; no name held twice; one
//! leader, fenced by its term):
//!
//! ```
//! use redlease_chaos::{Event, Kind, Verdict, check};
//! use std::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let history = vec![
//!     Event::new(ms(0), Kind::Acquire, 1, 7),
//!     Event::new(ms(1), Kind::Begin, 1, 7),
//!     Event::new(ms(2), Kind::Write, 1, 7).verdict(Verdict::Accepted),
//!     Event::new(ms(3), Kind::End, 1, 7),
//!     Event::new(ms(4), Kind::Release, 1, 7),
//! ];
//! let findings = check(&history);
//! assert_eq!(findings.sections, 1);
//! assert!(findings.is_safe());
//! ```

mod check;
mod claims;
mod event;
mod judge;
pub mod liveness;
mod primitive;
mod stats;

pub use check::{Findings, check, check_as};
pub use event::{Event, Kind, Mode, ParseError, Verdict, WorkerLine, monotonic};
pub use judge::Judge;
pub use liveness::{Liveness, Stall};
pub use primitive::Primitive;
pub use stats::Percentiles;
