//! Every scenario of `redlease_model::failover::scenarios`.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and show what they found"
)]

mod common;

use redlease_model::Report;
use redlease_model::failover::scenarios::{self, Scenario};
use redlease_model::failover::{FailoverConfig, MUTUAL_EXCLUSION, WITHIN_TRUTH};

/// Runs `scenario`, prints the report and its counterexamples (`cargo test --
/// --nocapture` shows them), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report<FailoverConfig> {
    common::verified(scenario.run(), |report| scenario.verify(report))
}

#[test]
fn before_the_fix_a_grant_replicated_to_the_demoted_primary_makes_two_holders() {
    let report = verify(&scenarios::before_trust_any_link());
    let text = report.discovery(MUTUAL_EXCLUSION).unwrap().to_string();
    let failover = text.find("failover:").unwrap();
    let skipped = text.find("counts 0 receivers").unwrap();
    let relayed = text.find("its link there receives it").unwrap();
    assert!(failover < skipped && skipped < relayed, "{text}");
    assert!(text.contains("both believe they hold"), "{text}");
    // Without a second waiter, the waiter claims a lock Redis gave to nobody.
    let text = report.discovery(WITHIN_TRUTH).unwrap().to_string();
    assert!(text.contains("believes it holds the lock, but"), "{text}");
}

#[test]
fn mutation_checking_a_link_only_when_it_is_made_is_caught() {
    verify(&scenarios::mutation_checked_once());
}

#[test]
fn the_fix_confirms_grants_from_a_link_off_the_primary() {
    verify(&scenarios::fixed());
}

#[test]
fn every_failover_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 3);
}
