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

fn scenario(name: &'static str, rule: Rule, role_changes: u8, expect: Expect) -> Scenario {
    let mut config = FailoverConfig::code(rule).moving(role_changes);
    config.name = name;
    Scenario {
        config,
        expect,
        examples: vec![SKIPPED, RELAYED],
    }
}

/// Trusting any link: the waiter trusts the grant replication brings to its link on the
/// demoted primary, while the lock went to the next waiter (or nobody).
pub fn before_trust_any_link() -> Scenario {
    scenario(
        "failover, any link trusted: a grant trusted from a link on the demoted primary",
        Rule::TrustAnyLink,
        1,
        Expect::Violated,
    )
}

/// Mutation: the link's role checked only when it was made.
pub fn mutation_checked_once() -> Scenario {
    scenario(
        "failover mutation: a link's role checked only when it is made",
        Rule::TrustLinkCheckedOnce,
        1,
        Expect::Violated,
    )
}

/// The link's role checked exactly when the grant is read: sound while the primary moves
/// once.
pub fn checked_at_read_one_failover() -> Scenario {
    let mut s = scenario(
        "failover, role exact at the read: one failover",
        Rule::TrustLinkOnPrimary,
        1,
        Expect::Holds,
    );
    s.examples.push(CONFIRMED);
    s
}

/// The same check across a failback: the server that relayed the grant is the primary
/// again when the grant is read, though the release that published it never gave it.
pub fn checked_at_read_failback() -> Scenario {
    scenario(
        "failback, role exact at the read: a relayed grant read once its server is primary again",
        Rule::TrustLinkOnPrimary,
        2,
        Expect::Violated,
    )
}

/// `ROLE` asked after the grant, its answer read later (the code before the one
/// hand-off): across a failback, the answer says primary for a grant that server only
/// relayed.
pub fn role_asked_after_failback() -> Scenario {
    scenario(
        "failback, ROLE asked after the grant: primary again by the time it answers",
        Rule::TrustRoleAskedAfter,
        2,
        Expect::Violated,
    )
}

/// The one hand-off: a pushed grant is never trusted, however often the primary moves.
pub fn fixed() -> Scenario {
    let mut s = scenario(
        "failover and back three times, the one hand-off: every pushed grant confirmed by an attempt",
        Rule::ConfirmByAttempt,
        3,
        Expect::Holds,
    );
    s.examples.push(CONFIRMED);
    s
}

/// Every failover scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        before_trust_any_link(),
        mutation_checked_once(),
        checked_at_read_one_failover(),
        checked_at_read_failback(),
        role_asked_after_failback(),
        fixed(),
    ]
}
