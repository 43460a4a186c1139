//! The serve configurations checked by the tests and the `explore` example, each with
//! what it is expected to show.

use super::check;
use super::model::{
    CUT_GRANT, CUT_GRANT_FREED, DROPPED, GONE_GRANT, GONE_GRANT_FREED, SERVED_BEHIND, SERVES_ALL,
    WITHIN_PERMITS,
};
use super::state::{Rule, ServeConfig};
use crate::check::Report;
use crate::scenarios::{Expect, judge};

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: ServeConfig,
    /// The expectation for [`GONE_GRANT_FREED`] ([`WITHIN_PERMITS`] and [`SERVES_ALL`]
    /// always hold).
    pub freed: Expect,
    /// The expectation for [`CUT_GRANT_FREED`].
    pub cut_freed: Expect,
    /// The examples (`sometimes` properties) the run must find.
    pub examples: Vec<&'static str>,
}

impl Scenario {
    /// Runs the checker over every state (the spaces are small).
    pub fn run(&self) -> Report<ServeConfig> {
        check(self.config.clone())
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report<ServeConfig>) -> Result<(), String> {
        judge(
            report,
            &[
                (WITHIN_PERMITS, Expect::Holds),
                (SERVES_ALL, Expect::Holds),
                (GONE_GRANT_FREED, self.freed),
                (CUT_GRANT_FREED, self.cut_freed),
            ],
        )?;
        if let Some(missing) = (self.examples.iter()).find(|e| report.discovery(e).is_none()) {
            return Err(format!("{missing}: no example found"));
        }
        Ok(())
    }
}

fn scenario(name: &'static str, rule: Rule, freed: Expect) -> Scenario {
    let mut config = ServeConfig::code(rule);
    config.name = name;
    config.crashes = 1;
    Scenario {
        config,
        freed,
        cut_freed: Expect::Holds,
        examples: vec![GONE_GRANT, DROPPED, SERVED_BEHIND],
    }
}

/// A waiter cut off silently (Redis counts it) is granted a permit it never hears of: with
/// `window` (`None`: the whole lease), how long that permit stays taken.
fn cut(name: &'static str, window: Option<u8>, cut_freed: Expect) -> Scenario {
    let mut config = ServeConfig::code(Rule::GiveBack);
    config.name = name;
    config.abandons = 0;
    config.cuts = 1;
    config.window = window;
    Scenario {
        config,
        freed: Expect::Holds,
        cut_freed,
        examples: vec![CUT_GRANT, SERVED_BEHIND],
    }
}

/// Before the one hand-off: a pushed grant lasts the whole lease, so a permit granted to a
/// silently cut waiter sits with nobody for it.
pub fn before_cut_whole_lease() -> Scenario {
    cut(
        "serve before the one hand-off: a grant to a silently cut waiter lasts the whole lease",
        None,
        Expect::Violated,
    )
}

/// The one hand-off: a pushed grant lasts a claim window until its waiter confirms it.
pub fn cut_claim_window() -> Scenario {
    cut(
        "serve, the one hand-off: a grant to a silently cut waiter lasts its claim window",
        Some(1),
        Expect::Holds,
    )
}

/// Before the fix: a permit granted to an abandoned token sits with nobody for its lease.
pub fn before_trace_only() -> Scenario {
    scenario(
        "serve before the fix: a grant to an abandoned token only traced",
        Rule::TraceOnly,
        Expect::Violated,
    )
}

/// The fix: the client gives such a permit back at once; the next waiter is served.
pub fn fixed_give_back() -> Scenario {
    scenario(
        "serve fix: a grant to an abandoned token given back",
        Rule::GiveBack,
        Expect::Holds,
    )
}

/// Every serve scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        before_trace_only(),
        fixed_give_back(),
        before_cut_whole_lease(),
        cut_claim_window(),
    ]
}
