//! Every scenario of `redlease_model::scenarios`, checked with the tests' bounds.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly and show what they found"
)]

mod common;

use redlease_model::scenarios::{self, Scenario};
use redlease_model::{
    BOTH_WRITE, FENCED_SAFETY, MUTUAL_EXCLUSION, Report, SOME_REJECT, SOME_WRITE, STATE_LIMIT,
};

/// Runs `scenario` with the tests' bounds, prints the report and every counterexample
/// (`cargo test -- --nocapture` shows them), and fails unless it shows what it expects.
fn verify(scenario: &Scenario) -> Report {
    let scenario = scenario.for_tests();
    common::verified(scenario.run(STATE_LIMIT), |report| scenario.verify(report))
}

#[test]
fn no_fault_keeps_both() {
    verify(&scenarios::no_fault());
}

#[test]
fn pause_breaks_the_lock_not_the_fencing() {
    let report = verify(&scenarios::pause());
    // The safety result is not vacuous: writes happen, both clients write, and the
    // resource turns a stale token away.
    for example in [SOME_WRITE, BOTH_WRITE, SOME_REJECT] {
        assert!(report.discovery(example).is_some(), "{example}");
    }
}

#[test]
fn the_unfenced_overlap_reads_as_a_timeline() {
    let scenario = scenarios::pause().for_tests();
    let report = redlease_model::check_until(scenario.config, MUTUAL_EXCLUSION);
    let found = report.discovery(MUTUAL_EXCLUSION).unwrap();
    let text = found.to_string();
    println!("{text}");
    assert!(text.contains("A is paused"), "{text}");
    assert!(text.contains("goes to write"), "{text}");
    assert!(found.verdict.contains("both believe"), "{}", found.verdict);
    assert!(found.steps[0].starts_with("  1. t=0"), "{}", found.steps[0]);
}

#[test]
fn drift_within_the_allowance_keeps_both() {
    verify(&scenarios::drift());
}

#[test]
fn a_crash_breaks_the_tokens_as_written() {
    let report = verify(&scenarios::crash());
    let found = report.discovery(FENCED_SAFETY).unwrap();
    assert!(
        found.verdict.contains("from two holders"),
        "{}",
        found.verdict
    );
}

#[test]
fn a_lost_message_breaks_the_tokens_as_written() {
    verify(&scenarios::lost_message());
}

#[test]
fn a_stopped_clock_breaks_the_tokens_as_written() {
    verify(&scenarios::suspend());
}

#[test]
fn skipping_is_held_breaks_the_tokens_as_written() {
    verify(&scenarios::no_check());
}

#[test]
fn mutation_without_write_back_is_caught() {
    verify(&scenarios::no_write_back());
}

#[test]
fn mutation_with_a_one_node_token_is_caught() {
    verify(&scenarios::one_node_token());
}

#[test]
fn fix_under_a_pause() {
    verify(&scenarios::fixed_pause());
}

#[test]
fn fix_under_a_crash() {
    verify(&scenarios::fixed_crash());
}

#[test]
fn fix_under_a_lost_message() {
    verify(&scenarios::fixed_lost_message());
}

#[test]
fn fix_under_drift_beyond_the_allowance() {
    verify(&scenarios::fixed_drift_beyond_allowance());
}

#[test]
fn fix_under_a_stopped_clock() {
    verify(&scenarios::fixed_suspend());
}

#[test]
fn fix_when_the_client_skips_is_held() {
    verify(&scenarios::fixed_no_check());
}

#[test]
fn delayed_restart_keeps_the_lock() {
    verify(&scenarios::fixed_delayed_restart());
}

#[test]
fn delayed_restart_without_persistence_breaks_the_tokens() {
    verify(&scenarios::fixed_delayed_restart_tokens());
}

#[test]
fn fix_needs_only_the_counter_to_survive() {
    verify(&scenarios::fixed_counter_only());
}

#[test]
fn a_counter_that_expires_breaks_the_plain_counter() {
    verify(&scenarios::fixed_counter_expires());
}

#[test]
fn hybrid_clock_without_a_fault_keeps_both() {
    verify(&scenarios::hybrid_no_fault());
}

#[test]
fn hybrid_clock_keeps_the_tokens_across_a_delayed_restart_without_persistence() {
    // The plain counter's row, `delayed_restart_without_persistence_breaks_the_tokens`,
    // with fence.lua's rule: the lock and the tokens both hold.
    verify(&scenarios::hybrid_delayed_restart());
}

#[test]
fn hybrid_clock_keeps_the_tokens_across_a_quick_restart_without_persistence() {
    verify(&scenarios::hybrid_quick_restart());
}

#[test]
fn hybrid_clock_keeps_the_tokens_when_a_counter_expires() {
    verify(&scenarios::hybrid_counter_expires());
}

#[test]
fn hybrid_clock_keeps_the_tokens_when_a_clock_steps_back_without_a_crash() {
    verify(&scenarios::hybrid_step_back());
}

#[test]
fn plain_counter_single_node_restart_without_persistence_reuses_a_token() {
    verify(&scenarios::single_restart());
}

#[test]
fn hybrid_clock_single_node_restart_without_persistence_keeps_the_tokens() {
    verify(&scenarios::hybrid_single_restart());
}

#[test]
fn mutation_a_clock_stepping_back_past_the_outage_breaks_the_tokens() {
    let report = verify(&scenarios::hybrid_single_step_back());
    let found = report.discovery(FENCED_SAFETY).unwrap();
    let text = found.to_string();
    assert!(text.contains("steps back 2 tick(s)"), "{text}");
    assert!(text.contains("counter none -> "), "{text}");
}

/// The row of [`scenarios::counter_then_clock_rows`] or
/// [`scenarios::counter_then_clock_behind`] named `name`.
fn counter_then_clock(name: &str) -> Scenario {
    let rows = scenarios::counter_then_clock_rows();
    let behind = scenarios::counter_then_clock_behind();
    let found = rows
        .into_iter()
        .chain(behind)
        .find(|s| s.config.name == name);
    found.unwrap_or_else(|| panic!("no scenario named {name}"))
}

#[test]
fn counter_then_clock_without_a_fault_keeps_both() {
    verify(&counter_then_clock("counter then clock: no fault"));
}

#[test]
fn counter_then_clock_keeps_the_tokens_across_a_delayed_restart_without_persistence() {
    verify(&counter_then_clock(
        "counter then clock: crash, no persistence, delayed restart",
    ));
}

#[test]
fn counter_then_clock_keeps_the_tokens_across_a_quick_restart_without_persistence() {
    verify(&counter_then_clock(
        "counter then clock: crash, no persistence, restart after a tick",
    ));
}

#[test]
fn counter_then_clock_keeps_the_tokens_when_a_counter_expires() {
    verify(&counter_then_clock("counter then clock: counter expires"));
}

#[test]
fn counter_then_clock_keeps_the_tokens_when_a_clock_steps_back_without_a_crash() {
    verify(&counter_then_clock(
        "counter then clock: a clock steps back 2 ticks, no crash",
    ));
}

#[test]
fn counter_then_clock_single_node_restart_without_persistence_keeps_the_tokens() {
    verify(&counter_then_clock(
        "counter then clock, single node: crash, no persistence, restart after a tick",
    ));
    verify(&counter_then_clock(
        "counter then clock, counters behind the clock, single node: crash, no persistence, restart after a tick",
    ));
}

#[test]
fn counter_then_clock_needs_the_clock_assumption_as_the_hybrid_clock_does() {
    let report = verify(&counter_then_clock(
        "counter then clock, single node: crash, no persistence, down 1 tick, clock steps back 2",
    ));
    let text = report.discovery(FENCED_SAFETY).unwrap().to_string();
    assert!(text.contains("steps back 2 tick(s)"), "{text}");
    assert!(text.contains("counter + 1, or TIME when none"), "{text}");
}

#[test]
fn every_single_node_hybrid_row_has_a_counter_then_clock_row_expecting_the_same() {
    let rows = scenarios::counter_then_clock_rows();
    let hybrid = (scenarios::all().into_iter())
        .filter(|s| s.config.fencing == redlease_model::Fencing::HYBRID)
        .chain(scenarios::hybrid_others());
    for hybrid in hybrid.filter(|s| s.config.nodes == 1) {
        let name = hybrid
            .config
            .name
            .replacen("hybrid", "counter then clock", 1);
        let row = rows.iter().find(|r| r.config.name == name);
        let row = row.unwrap_or_else(|| panic!("no row {name}"));
        assert_eq!(
            (row.fenced, row.mutual_exclusion),
            (hybrid.fenced, hybrid.mutual_exclusion),
            "{name}"
        );
    }
    // The fast ones have a test above; the slow ones run in `slow_scenarios`.
    assert_eq!(rows.iter().filter(|s| !s.slow).count(), 7);
}

#[test]
fn hybrid_clock_keeps_the_tokens_when_a_failover_loses_the_last_grant() {
    verify(&scenarios::hybrid_single_last_write_lost());
}

#[test]
fn counter_then_clock_hands_out_a_token_again_when_a_failover_loses_the_last_grant() {
    // Why fence.lua keeps the hybrid clock: the counter comes back one grant behind and is
    // still there, so the clock is never consulted.
    let report = verify(&scenarios::counter_then_clock_single_last_write_lost());
    let found = report.discovery(FENCED_SAFETY).unwrap();
    let text = found.to_string();
    assert!(text.contains("its last write is lost"), "{text}");
    assert!(
        found.verdict.contains("from two holders"),
        "{}",
        found.verdict
    );
}

#[test]
fn every_scenario_has_a_test() {
    // One test per scenario above (so they run in parallel and fail by name); the slow
    // ones run in `slow_scenarios`.
    let fast = scenarios::all().iter().filter(|s| !s.slow).count();
    assert_eq!(scenarios::all().len(), fast + 3);
    assert_eq!(fast, 27);
}

#[test]
#[ignore = "slow (minutes in a debug build): cargo test -p redlease-model -- --ignored"]
fn slow_scenarios() {
    let slow = scenarios::all().into_iter().filter(|s| s.slow);
    let more = scenarios::combined()
        .into_iter()
        .chain(scenarios::hybrid_others())
        .chain(
            scenarios::counter_then_clock_rows()
                .into_iter()
                .filter(|s| s.slow),
        )
        .chain(
            scenarios::counter_then_clock_behind()
                .into_iter()
                .filter(|s| s.slow),
        );
    for scenario in slow.chain(more) {
        verify(&scenario);
    }
}

#[test]
fn counter_then_clock_keeps_distances_below_the_clock_up_to_the_grants_left() {
    // One node, two clients with one attempt each: two grants left, so a counter one,
    // two or three units behind the clock is its own state (two grants could bring it up
    // to the clock, or not), and every counter further behind is the same as three.
    let scenario = counter_then_clock(
        "counter then clock, counters behind the clock, single node: crash, no persistence, restart after a tick",
    );
    let model = redlease_model::QuorumModel::new(scenario.config);
    let counters: Vec<redlease_model::Fence> = (stateright::Model::init_states(&model).iter())
        .map(|s| s.nodes[0].counter)
        .collect();
    assert_eq!(counters, [redlease_model::ABSENT, -3, -2, -1, 0]);
}
