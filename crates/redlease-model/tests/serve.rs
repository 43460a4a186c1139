//! Every scenario of `redlease_model::serve::scenarios`.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and show what they found"
)]

mod common;

use redlease_model::Report;
use redlease_model::serve::scenarios::{self, Scenario};
use redlease_model::serve::{CUT_GRANT_FREED, GONE_GRANT_FREED, ServeConfig};

/// Runs `scenario`, prints the report and its counterexamples (`cargo test --
/// --nocapture` shows them), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report<ServeConfig> {
    common::verified(scenario.run(), |report| scenario.verify(report))
}

#[test]
fn before_the_fix_a_grant_to_an_abandoned_token_sits_for_its_lease() {
    let report = verify(&scenarios::before_trace_only());
    let text = report.discovery(GONE_GRANT_FREED).unwrap().to_string();
    assert!(text.contains("gives up while cut off"), "{text}");
    assert!(text.contains("only traced"), "{text}");
}

#[test]
fn the_fix_gives_a_grant_to_an_abandoned_token_back_at_once() {
    verify(&scenarios::fixed_give_back());
}

#[test]
fn before_the_one_hand_off_a_grant_to_a_silently_cut_waiter_sits_for_its_lease() {
    let report = verify(&scenarios::before_cut_whole_lease());
    let text = report.discovery(CUT_GRANT_FREED).unwrap().to_string();
    assert!(text.contains("cut silently"), "{text}");
}

#[test]
fn the_claim_window_frees_a_grant_to_a_silently_cut_waiter() {
    verify(&scenarios::cut_claim_window());
}

#[test]
fn every_serve_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 4);
}
