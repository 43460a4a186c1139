//! Every scenario of `redlease_model::handoff::scenarios`, checked with the tests' lease.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and show what they found"
)]

mod common;

use redlease_model::Report;
use redlease_model::handoff::scenarios::{self, Scenario};
use redlease_model::handoff::{
    CONFIRMED, HANDED_OFF, HandoffConfig, IN_ORDER, MUTUAL_EXCLUSION, PAUSED_HANDOFF,
    SERVED_AFTER_WINDOW, SERVED_PAST_SILENT, SHORT_LEASE, VOID_DISCARDED, WINDOW_BOUND,
    WITHIN_LEASE,
};

/// Runs `scenario` with the tests' lease, prints the report and every counterexample
/// (`cargo test -- --nocapture` shows them), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report<HandoffConfig> {
    verify_within(scenario, redlease_model::STATE_LIMIT)
}

/// As [`verify`], stopping after `state_limit` states generated.
fn verify_within(scenario: &Scenario, state_limit: usize) -> Report<HandoffConfig> {
    let scenario = scenario.for_tests();
    common::verified(scenario.run(state_limit), |report| scenario.verify(report))
}

#[test]
fn accepting_stale_grants_lets_a_paused_waiter_claim_a_lock_redis_gave_to_another() {
    let report = verify(&scenarios::accept_stale_pause());
    let found = report.discovery(MUTUAL_EXCLUSION).unwrap();
    let text = found.to_string();
    // The timeline of issue 24, item 1: the waiter is paused, its re-check finds the lock
    // held by another client (busy), and only then does it read the old grant.
    let paused = text.find("B is paused").unwrap();
    let busy = text.rfind("Redis runs B's attempt").unwrap();
    let read = text.find("B reads grant").unwrap();
    assert!(paused < busy && busy < read, "{text}");
    assert!(text[busy..read].contains("held by C"), "{text}");
    assert!(
        found.verdict.contains("both believe they hold"),
        "{}",
        found.verdict
    );
    assert!(report.discovery(WITHIN_LEASE).is_some());
}

#[test]
fn accepting_stale_grants_breaks_without_a_pause_when_pubsub_is_slower_than_a_lease() {
    verify(&scenarios::accept_stale_slow_pubsub());
}

#[test]
fn accepting_stale_grants_while_confirming_them_keeps_the_lock_but_returns_run_out_leases() {
    let report = verify(&scenarios::accept_stale_confirming());
    let found = report.discovery(SHORT_LEASE).unwrap();
    assert!(
        found.verdict.contains("returned a guard valid until"),
        "{found}"
    );
}

#[test]
fn the_fix_holds_under_a_paused_waiter() {
    let report = verify(&scenarios::fixed_pause());
    // Not vacuous: hand-offs happen, to a paused waiter too, stale grants are discarded
    // and short leases confirmed.
    for example in [HANDED_OFF, PAUSED_HANDOFF, VOID_DISCARDED, CONFIRMED] {
        assert!(report.discovery(example).is_some(), "{example}");
    }
}

#[test]
fn the_fix_holds_when_pubsub_is_slower_than_a_lease() {
    verify(&scenarios::fixed_slow_pubsub());
}

#[test]
fn the_fix_holds_when_a_data_connection_drops() {
    verify(&scenarios::fixed_link_drop());
}

#[test]
fn the_fix_holds_when_a_grant_subscription_drops() {
    verify(&scenarios::fixed_subscription_drop());
}

#[test]
fn the_fix_holds_when_a_waiter_gives_up() {
    verify(&scenarios::fixed_give_up());
}

#[test]
fn mutation_without_voiding_stale_grants_is_caught() {
    verify(&scenarios::mutation_no_void());
}

#[test]
fn mutation_dating_grants_from_the_latest_attempt_is_caught() {
    let report = verify(&scenarios::mutation_latest_send());
    // The attempt the grant is dated from failed: its link dropped, or its client stopped
    // waiting for it; the grant is older than that attempt.
    let text = report.discovery(WITHIN_LEASE).unwrap().to_string();
    assert!(
        text.contains("data connection drops") || text.contains("stops waiting for its attempt"),
        "{text}"
    );
}

#[test]
fn mutation_without_refreshing_on_ours_is_caught() {
    verify(&scenarios::mutation_no_refresh());
}

#[test]
fn claim_windows_hold_and_serve_the_queue_past_a_silent_waiter() {
    let report = verify(&scenarios::window_silent_waiter());
    // Not vacuous: the lock is handed to the silent waiter, and a waiter behind it holds.
    for example in [PAUSED_HANDOFF, SERVED_PAST_SILENT, CONFIRMED] {
        assert!(report.discovery(example).is_some(), "{example}");
    }
    for property in [WINDOW_BOUND, SERVED_AFTER_WINDOW, IN_ORDER] {
        assert!(report.holds(property), "{property}");
    }
}

#[test]
fn claim_windows_hold_with_slow_pubsub_and_a_waiter_giving_up() {
    let report = verify(&scenarios::window_slow_pubsub_give_up());
    assert!(report.discovery(SERVED_PAST_SILENT).is_some());
}

#[test]
fn mutation_handing_off_for_the_whole_ttl_leaves_the_lock_with_a_silent_waiter() {
    let report = verify(&scenarios::mutation_whole_ttl());
    let found = report.discovery(WINDOW_BOUND).unwrap();
    let text = found.to_string();
    // The lock handed to a waiter that is cut off before it confirms: the key stands a
    // whole ttl instead of a claim window.
    assert!(text.contains("Redis hands the lock to"), "{text}");
    assert!(text.contains("is cut off silently"), "{text}");
    assert!(found.verdict.contains("sits with nobody"), "{found}");
}

#[test]
fn mutation_without_a_follow_up_leaves_the_lock_free_with_a_waiter_queued() {
    let report = verify(&scenarios::mutation_no_follow_up());
    let found = report.discovery(SERVED_AFTER_WINDOW).unwrap();
    assert!(found.verdict.contains("nobody served the queue"), "{found}");
}

#[test]
fn mutation_taking_a_free_lock_past_the_queue_breaks_fifo() {
    let report = verify(&scenarios::mutation_takes_free_lock());
    let found = report.discovery(IN_ORDER).unwrap();
    assert!(
        found.verdict.contains("took the free lock while"),
        "{found}"
    );
}

#[test]
fn every_hand_off_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 16);
}

#[test]
#[ignore = "slow (a minute or more in a debug build): cargo test -p redlease-model -- --ignored"]
fn slow_hand_off_scenarios() {
    for scenario in scenarios::slow() {
        verify_within(&scenario, scenarios::SLOW_STATE_LIMIT);
    }
}
