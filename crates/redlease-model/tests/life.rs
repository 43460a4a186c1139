//! Every scenario of `redlease_model::life::scenarios`.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and show what they found"
)]

mod common;

use redlease_model::Report;
use redlease_model::life::scenarios::{self, Scenario};
use redlease_model::life::{BELIEF_WITHIN_TRUTH, LifeConfig};

/// Runs `scenario`, prints the report and its counterexample (`cargo test -- --nocapture`
/// shows it), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report<LifeConfig> {
    common::verified(scenario.run(redlease_model::STATE_LIMIT), |report| {
        scenario.verify(report)
    })
}

/// The counterexample's timeline and verdict, as one text.
fn counterexample(report: &Report<LifeConfig>) -> String {
    report.discovery(BELIEF_WITHIN_TRUTH).unwrap().to_string()
}

#[test]
fn before_the_fix_a_cancelled_shortening_extend_keeps_the_old_claim() {
    let text = counterexample(&verify(&scenarios::before_cancelled_shortening()));
    // The extend is cancelled (before or after it ran) and runs: Redis cuts the key to the
    // short ttl while the claim keeps its old value.
    assert!(text.contains("stops waiting for its extend"), "{text}");
    let shortened = text.find("Redis runs the extend").unwrap();
    let expired = text.find("the key expires in Redis").unwrap();
    assert!(shortened < expired, "{text}");
    assert!(text.contains("but Redis'"), "{text}");
}

#[test]
fn before_the_fix_a_renewal_overtakes_an_extend_re_sent_after_noscript() {
    let text = counterexample(&verify(&scenarios::before_reload_reorder()));
    let reload = text.find("NOSCRIPT to the extend").unwrap();
    let renewal = text.find("Redis runs the renewal").unwrap();
    let extend = text.find("Redis runs the re-sent extend").unwrap();
    assert!(reload < renewal && renewal < extend, "{text}");
    assert!(text.contains("ignored, sent before"), "{text}");
}

#[test]
fn before_the_fix_a_renewal_cuts_back_a_lengthening_extend() {
    let text = counterexample(&verify(&scenarios::before_lengthening_overlap()));
    let extend = text.find("Redis runs the extend").unwrap();
    let renewal = text.find("Redis runs the renewal").unwrap();
    assert!(extend < renewal, "{text}");
    assert!(text.contains("stops waiting for its renewal"), "{text}");
}

#[test]
fn the_fix_keeps_every_claim_within_its_key() {
    verify(&scenarios::fixed_everything());
}

#[test]
fn the_fix_assumes_a_cancelled_request_never_runs_after_a_later_one() {
    let text = counterexample(&verify(&scenarios::fixed_late_orphan()));
    assert!(text.contains("held back on a dead connection"), "{text}");
}

#[test]
fn the_drift_allowance_is_needed_when_redis_clock_runs_fast() {
    let text = counterexample(&verify(&scenarios::fixed_without_drift()));
    assert!(text.contains("Redis' clock gains a tick"), "{text}");
}

#[test]
fn mutation_without_lowering_first_is_caught() {
    verify(&scenarios::mutation_one_step());
}

#[test]
fn mutation_with_overlapping_steps_is_caught() {
    verify(&scenarios::mutation_lower_first());
}

#[test]
fn every_lease_life_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 8);
}
