//! What a scenario is: a configuration of the quorum model and the outcome it is expected
//! to show (also used by the other models' scenarios), and the helpers every family of
//! scenarios builds its configurations with.

use crate::check::{Report, check_limited};
use crate::config::{Config, Persistence, Restart};
use crate::model::{FENCED_SAFETY, MUTUAL_EXCLUSION};

/// What a scenario expects of a property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No state violates it (checked exhaustively).
    Holds,
    /// The checker finds a counterexample.
    Violated,
    /// Not asserted (a run stopped at the other property's counterexample).
    Unchecked,
}

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: Config,
    /// The expectation for [`FENCED_SAFETY`].
    pub fenced: Expect,
    /// The expectation for [`MUTUAL_EXCLUSION`].
    pub mutual_exclusion: Expect,
    /// The [`counter_spread`](Config::counter_spread) of the smaller run the tests make
    /// (0: every counter starts at 0, about a fifth of the states).
    pub test_spread: u8,
    /// Too slow for `cargo test` in a debug build (over ~5 s): checked by the `explore`
    /// example and by the ignored test.
    pub slow: bool,
}

impl Scenario {
    pub(super) fn new(config: Config, fenced: Expect, mutual_exclusion: Expect) -> Self {
        Scenario {
            config,
            fenced,
            mutual_exclusion,
            // Counterexamples to fencing need counters that differ from the start.
            test_spread: u8::from(fenced == Expect::Violated),
            slow: false,
        }
    }

    pub(super) fn slow(mut self) -> Self {
        self.slow = true;
        self
    }

    /// The same scenario with the tests' smaller bounds.
    #[must_use]
    pub fn for_tests(&self) -> Scenario {
        let mut smaller = self.clone();
        smaller.config.counter_spread = self.test_spread.min(self.config.counter_spread);
        smaller
    }

    /// Runs the checker as far as the expectations need: every state when something is
    /// expected to hold, else until each expected counterexample is found.
    pub fn run(&self, state_limit: usize) -> Report {
        let holds = [self.fenced, self.mutual_exclusion].contains(&Expect::Holds);
        let mut stop_at = Vec::new();
        if !holds {
            if self.fenced == Expect::Violated {
                stop_at.push(FENCED_SAFETY);
            }
            if self.mutual_exclusion == Expect::Violated {
                stop_at.push(MUTUAL_EXCLUSION);
            }
        }
        check_limited(self.config.clone(), &stop_at, state_limit)
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report) -> Result<(), String> {
        judge(
            report,
            &[
                (FENCED_SAFETY, self.fenced),
                (MUTUAL_EXCLUSION, self.mutual_exclusion),
            ],
        )
    }
}

/// Whether `report` shows what `expected` says of each property; otherwise, why not.
pub(crate) fn judge<C>(report: &Report<C>, expected: &[(&str, Expect)]) -> Result<(), String> {
    for &(property, expect) in expected {
        let found = report.discovery(property).is_some();
        match expect {
            Expect::Holds if found => {
                return Err(format!("{property}: unexpected counterexample"));
            }
            Expect::Holds if !report.exhaustive => {
                return Err(format!("{property}: the state space was not exhausted"));
            }
            Expect::Violated if !found => {
                return Err(format!("{property}: no counterexample found"));
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn with(name: &'static str, change: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::code();
    config.name = name;
    change(&mut config);
    config
}

pub(super) fn restart(persistence: Persistence, min_down: u8) -> Restart {
    Restart {
        persistence,
        min_down,
    }
}
