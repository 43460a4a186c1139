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
use redlease_model::serve::{CUT_GRANT_FREED, GONE_GRANT_FREED, LIVE_SERVED, ServeConfig};

/// Runs `scenario`, prints the report and its counterexamples (`cargo test --
/// --nocapture` shows them), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report<ServeConfig> {
    common::verified(scenario.run(), |report| scenario.verify(report))
}

/// The counterexample to `property` that `report` holds, as text.
fn found(report: &Report<ServeConfig>, property: &str) -> String {
    report.discovery(property).unwrap().to_string()
}

#[test]
fn before_the_fix_a_grant_to_an_abandoned_token_sits_for_its_lease() {
    let report = verify(&scenarios::before_trace_only());
    let text = found(&report, GONE_GRANT_FREED);
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
    let text = found(&report, CUT_GRANT_FREED);
    assert!(text.contains("cut silently"), "{text}");
}

#[test]
fn the_claim_window_frees_a_grant_to_a_silently_cut_waiter() {
    verify(&scenarios::cut_claim_window());
}

#[test]
fn rwlock_before_the_one_hand_off_a_cut_waiter_holds_the_lock_its_whole_lease() {
    let report = verify(&scenarios::rw_before_cut_whole_lease());
    let text = found(&report, LIVE_SERVED);
    assert!(text.contains("cut silently"), "{text}");
}

#[test]
fn rwlock_a_dead_queued_writer_kept_holds_the_readers_behind_it_out() {
    let report = verify(&scenarios::rw_dead_writer_kept());
    let text = found(&report, LIVE_SERVED);
    assert!(text.contains("crashes"), "{text}");
    assert!(text.contains("(write) crashed"), "{text}");
}

#[test]
fn rwlock_the_one_hand_off_serves_live_waiters_within_a_claim_window() {
    verify(&scenarios::rw_one_hand_off());
}

#[test]
fn rwlock_without_nudges_a_waiter_moved_up_into_the_front_is_never_served() {
    verify(&scenarios::rw_no_nudges());
}

#[test]
fn rwlock_one_watcher_nudged_suffices_while_it_lives() {
    verify(&scenarios::rw_one_watcher_nudged());
}

#[test]
fn rwlock_one_watcher_cut_off_stalls_the_queue() {
    verify(&scenarios::rw_one_watcher_cut());
}

#[test]
fn rwlock_two_watchers_survive_one_cut_off() {
    verify(&scenarios::rw_two_watchers_cut());
}

#[test]
fn semaphore_a_dead_request_for_more_permits_kept_holds_the_queue_out() {
    verify(&scenarios::sem_dead_head_kept());
}

#[test]
fn semaphore_the_one_hand_off_drops_a_dead_request_for_more_permits() {
    verify(&scenarios::sem_weighted_one_hand_off());
}

#[test]
fn semaphore_of_one_a_newcomer_moved_up_past_a_dropped_place_is_not_nudged() {
    let report = verify(&scenarios::sem_one_permit_code());
    let text = found(&report, LIVE_SERVED);
    assert!(text.contains("its place is dropped"), "{text}");
    assert!(text.contains("no timer"), "{text}");
}

#[test]
fn semaphore_of_one_nudging_every_waiter_moved_up_serves_it() {
    verify(&scenarios::sem_one_permit_every_moved());
}

#[test]
fn every_serve_scenario_has_a_test() {
    assert_eq!(scenarios::all().len(), 15);
}
