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
fn trusting_any_link_a_grant_replicated_to_the_demoted_primary_makes_two_holders() {
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
fn a_role_exact_at_the_read_holds_across_one_failover() {
    verify(&scenarios::checked_at_read_one_failover());
}

#[test]
fn a_role_exact_at_the_read_breaks_across_a_failback() {
    let report = verify(&scenarios::checked_at_read_failback());
    let text = report.discovery(WITHIN_TRUTH).unwrap().to_string();
    assert!(text.contains("failover again"), "{text}");
}

#[test]
fn role_asked_after_the_grant_breaks_across_a_failback() {
    let report = verify(&scenarios::role_asked_after_failback());
    let text = report.discovery(WITHIN_TRUTH).unwrap().to_string();
    let asked = text.find("asks ROLE").unwrap();
    let back = text.find("failover again").unwrap();
    let answered = text.find("answers").unwrap();
    assert!(asked < answered && back < answered, "{text}");
}

#[test]
fn the_one_hand_off_confirms_every_pushed_grant_however_often_the_primary_moves() {
    verify(&scenarios::fixed());
}

#[test]
fn every_failover_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 6);
}
