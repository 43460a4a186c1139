//! The failover configurations checked by the tests and the `explore` example, each with
//! what it is expected to show.

use super::check;
use super::config::{FailoverConfig, Rule};
use super::model::{CONFIRMED, MUTUAL_EXCLUSION, RELAYED, SKIPPED, WITHIN_TRUTH};
use crate::check::Report;
use crate::scenarios::{Expect, judge};

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: FailoverConfig,
    /// The expectation for [`MUTUAL_EXCLUSION`] and [`WITHIN_TRUTH`].
    pub expect: Expect,
    /// The examples (`sometimes` properties) the run must find.
    pub examples: Vec<&'static str>,
}

impl Scenario {
    /// Runs the checker over every state (the spaces are small).
    pub fn run(&self) -> Report<FailoverConfig> {
        check(self.config.clone())
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report<FailoverConfig>) -> Result<(), String> {
        judge(
            report,
            &[(MUTUAL_EXCLUSION, self.expect), (WITHIN_TRUTH, self.expect)],
        )?;
        if let Some(missing) = (self.examples.iter()).find(|e| report.discovery(e).is_none()) {
            return Err(format!("{missing}: no example found"));
        }
        Ok(())
    }
}

fn scenario(name: &'static str, rule: Rule, expect: Expect) -> Scenario {
    let mut config = FailoverConfig::code(rule);
    config.name = name;
    Scenario {
        config,
        expect,
        examples: vec![SKIPPED, RELAYED],
    }
}

/// Before the fix: the waiter trusts the grant replication brings to its link on the
/// demoted primary, while the lock went to the next waiter (or nobody).
pub fn before_trust_any_link() -> Scenario {
    scenario(
        "failover before the fix: a grant trusted from a link on the demoted primary",
        Rule::TrustAnyLink,
        Expect::Violated,
    )
}

/// Mutation: the link's role checked only when it was made.
pub fn mutation_checked_once() -> Scenario {
    scenario(
        "failover mutation: a link's role checked only when it is made",
        Rule::TrustLinkCheckedOnce,
        Expect::Violated,
    )
}

/// The fix: a grant from a link not on the primary is confirmed by an attempt.
pub fn fixed() -> Scenario {
    let mut s = scenario(
        "failover fix: grants trusted only from a link on the primary",
        Rule::TrustLinkOnPrimary,
        Expect::Holds,
    );
    s.examples.push(CONFIRMED);
    s
}

/// Every failover scenario.
pub fn all() -> Vec<Scenario> {
    vec![before_trust_any_link(), mutation_checked_once(), fixed()]
}
