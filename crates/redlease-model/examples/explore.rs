//! Prints what the model checker finds: the unfenced-overlap counterexample as a timeline,
//! the fencing counterexamples of the code as written, the hand-off counterexamples, and
//! for every scenario the states explored and each property's outcome.
//!
//! ```text
//! cargo run --release -p redlease-model --example explore            # full bounds
//! cargo run --release -p redlease-model --example explore -- --quick  # what the tests run
//! cargo run --release -p redlease-model --example explore -- --only hybrid  # names containing "hybrid"
//! cargo run --release -p redlease-model --example explore -- --only "counter then clock"  # fence.lua's rule for one node
//! cargo run --release -p redlease-model --example explore -- --only hand-off  # the hand-off model
//! cargo run --release -p redlease-model --example explore -- --only "lease life"  # the lease-life model
//! cargo run --release -p redlease-model --example explore -- --only failover  # grants across a failover
//! cargo run --release -p redlease-model --example explore -- --only serve  # the semaphore's and rwlock's serve
//! ```
//! The full run takes about two minutes on one core; `--quick` (the tests' bounds, no slow
//! scenario) a quarter of that.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use redlease_model::failover::{self, scenarios as failovers};
use redlease_model::handoff::{self, scenarios as handoffs};
use redlease_model::life::{self, scenarios as lives};
use redlease_model::scenarios::{self, Scenario};
use redlease_model::serve::scenarios as serves;
use redlease_model::{FENCED_SAFETY, MUTUAL_EXCLUSION, Named, Report, STATE_LIMIT, check_until};

fn counterexample(title: &str, scenario: &Scenario, property: &'static str) {
    let report = check_until(scenario.config.clone(), property);
    print_counterexample(title, &report, property);
}

/// Prints the first counterexample to `property` that `report` holds, under `title`.
fn print_counterexample<C: Named>(title: &str, report: &Report<C>, property: &str) {
    println!("== {title}");
    println!(
        "   ({}; first counterexample found after {} distinct states)\n",
        report.config.name(),
        report.unique_states
    );
    match report.discovery(property) {
        Some(found) => println!("{found}"),
        None => println!("   no counterexample found\n"),
    }
}

fn timelines(quick: bool, bounds: &dyn Fn(Scenario) -> Scenario) {
    counterexample(
        "Unfenced overlap: two clients both believe they hold the lock",
        &bounds(scenarios::pause()),
        MUTUAL_EXCLUSION,
    );
    if !quick {
        counterexample(
            "Overlap without a pause: a retry counts its own leftover key as a fresh grant",
            &scenarios::retry_after_lost_release(),
            MUTUAL_EXCLUSION,
        );
    }
    counterexample(
        "quorum.rs as written: one token for two holders (a crashed node, persistent)",
        &bounds(scenarios::crash()),
        FENCED_SAFETY,
    );
    counterexample(
        "quorum.rs as written: one token for two holders (a client that skips is_held())",
        &bounds(scenarios::no_check()),
        FENCED_SAFETY,
    );
    counterexample(
        "Plain counter: a restart without persistence, delayed by a lease, reuses a token",
        &bounds(scenarios::fixed_delayed_restart_tokens()),
        FENCED_SAFETY,
    );
    counterexample(
        "Hybrid clock, single node: its clock steps back by more than its outage",
        &bounds(scenarios::hybrid_single_step_back()),
        FENCED_SAFETY,
    );
    counterexample(
        "Counter then clock, single node: an asynchronous failover loses the last grant",
        &bounds(scenarios::counter_then_clock_single_last_write_lost()),
        FENCED_SAFETY,
    );
    if !quick {
        counterexample(
            "Counter then clock, 3 nodes: a node down a tick whose clock steps back 2",
            &scenarios::counter_then_clock_one_clock_back(),
            FENCED_SAFETY,
        );
    }
}

/// Prints `report` and whether it showed what was expected (with its counterexamples
/// when it did not); whether it did.
fn shown<C: Named>(report: &Report<C>, verdict: Result<(), String>) -> bool {
    print!("{report}");
    match verdict {
        Ok(()) => {
            println!("  as expected\n");
            true
        }
        Err(why) => {
            println!("  UNEXPECTED: {why}\n");
            for outcome in report.outcomes.iter().filter(|o| o.always) {
                if let Some(found) = &outcome.discovery {
                    println!("-- {}:\n{found}", outcome.property);
                }
            }
            false
        }
    }
}

/// The hand-off model: the counterexamples as timelines, then every scenario; how many
/// did not show what they expect.
fn hand_off(quick: bool, only: Option<&String>) -> usize {
    let bounds = |s: handoffs::Scenario| if quick { s.for_tests() } else { s };
    if only.is_none_or(|o| o == "hand-off") {
        for (title, scenario, property) in [
            (
                "hand-off accepting stale grants: a paused waiter claims a lock Redis gave to another (issue 24, item 1)",
                handoffs::accept_stale_pause(),
                handoff::MUTUAL_EXCLUSION,
            ),
            (
                "Hand-off, mutation of the fix: grants dated from the latest attempt (a failed one)",
                handoffs::mutation_latest_send(),
                handoff::WITHIN_LEASE,
            ),
            (
                "Hand-off, mutation of the fix: Ours dated from its send without a refresh",
                handoffs::mutation_no_refresh(),
                handoff::WITHIN_LEASE,
            ),
            (
                "Hand-off, mutation of claim windows: a grant to a silent waiter sets the whole ttl",
                handoffs::mutation_whole_ttl(),
                handoff::WINDOW_BOUND,
            ),
            (
                "Hand-off, mutation of claim windows: no follow-up, the lock sits free with a waiter queued",
                handoffs::mutation_no_follow_up(),
                handoff::SERVED_AFTER_WINDOW,
            ),
            (
                "Hand-off, mutation of claim windows: an attempt takes a free lock past the queue",
                handoffs::mutation_takes_free_lock(),
                handoff::IN_ORDER,
            ),
        ] {
            let scenario = bounds(scenario);
            let report = handoff::check_limited(scenario.config, &[property], STATE_LIMIT);
            print_counterexample(title, &report, property);
        }
    }
    let mut all: Vec<(handoffs::Scenario, usize)> = handoffs::all()
        .into_iter()
        .map(|s| (s, STATE_LIMIT))
        .collect();
    if !quick {
        all.extend((handoffs::slow().into_iter()).map(|s| (s, handoffs::SLOW_STATE_LIMIT)));
    }
    if let Some(only) = only {
        all.retain(|(s, _)| s.config.name.contains(only.as_str()));
    }
    let mut unexpected = 0;
    println!("== Every hand-off scenario\n");
    for (scenario, limit) in all {
        let scenario = bounds(scenario);
        let report = scenario.run(limit);
        unexpected += usize::from(!shown(&report, scenario.verify(&report)));
    }
    unexpected
}

/// The lease-life model: the counterexamples of the rule before the fix (and of the
/// fix's assumptions) as timelines, then every scenario; how many did not show what they
/// expect. Its bounds are small enough to run in full even with `--quick`.
fn lease_life(only: Option<&String>) -> usize {
    let mut all = lives::all();
    if let Some(only) = only {
        all.retain(|s| s.config.name.contains(only.as_str()));
    }
    for scenario in all
        .iter()
        .filter(|s| s.belief == scenarios::Expect::Violated)
    {
        let report = scenario.run(STATE_LIMIT);
        print_counterexample(scenario.config.name, &report, life::BELIEF_WITHIN_TRUTH);
    }
    let mut unexpected = 0;
    println!("== Every lease-life scenario\n");
    for scenario in all {
        let report = scenario.run(STATE_LIMIT);
        unexpected += usize::from(!shown(&report, scenario.verify(&report)));
    }
    unexpected
}

/// The failover model: its counterexamples as timelines, then every scenario; how many
/// did not show what they expect.
fn grants_across_failover(only: Option<&String>) -> usize {
    let mut all = failovers::all();
    if let Some(only) = only {
        all.retain(|s| s.config.name.contains(only.as_str()));
    }
    let mut unexpected = 0;
    for scenario in all {
        let report = scenario.run();
        if scenario.expect == scenarios::Expect::Violated {
            for property in [failover::MUTUAL_EXCLUSION, failover::WITHIN_TRUTH] {
                let title = format!("{}: {property}", scenario.config.name);
                print_counterexample(&title, &report, property);
            }
        }
        unexpected += usize::from(!shown(&report, scenario.verify(&report)));
    }
    unexpected
}

/// The serve model (the semaphore's and the read-write lock's hand-off): its
/// counterexamples as timelines, then every scenario; how many did not show what they
/// expect.
fn semaphore_serve(only: Option<&String>) -> usize {
    let mut all = serves::all();
    if let Some(only) = only {
        all.retain(|s| s.config.name.contains(only.as_str()));
    }
    let mut unexpected = 0;
    for scenario in all {
        let report = scenario.run();
        for property in scenario.violated() {
            let title = format!("{}: {property}", scenario.config.name);
            print_counterexample(&title, &report, property);
        }
        unexpected += usize::from(!shown(&report, scenario.verify(&report)));
    }
    unexpected
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = (args.iter().position(|a| a == "--only")).and_then(|i| args.get(i + 1));
    let bounds = |s: Scenario| if quick { s.for_tests() } else { s };

    if only.is_none() {
        timelines(quick, &bounds);
    }
    let mut all = scenarios::all();
    all.extend(scenarios::counter_then_clock_rows());
    all.extend(scenarios::counter_then_clock_behind());
    all.push(scenarios::hybrid_single_last_write_lost());
    all.push(scenarios::counter_then_clock_single_last_write_lost());
    if quick {
        all.retain(|s| !s.slow);
    } else {
        all.extend(scenarios::combined());
        all.extend(scenarios::hybrid_others());
    }
    if let Some(only) = only {
        all.retain(|s| s.config.name.contains(only.as_str()));
    }
    let mut unexpected = hand_off(quick, only);
    unexpected += lease_life(only);
    unexpected += grants_across_failover(only);
    unexpected += semaphore_serve(only);
    if all.is_empty() {
        return if unexpected > 0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    println!("== Every scenario\n");
    for scenario in all {
        let scenario = bounds(scenario);
        let report = scenario.run(STATE_LIMIT);
        unexpected += usize::from(!shown(&report, scenario.verify(&report)));
    }
    if unexpected > 0 {
        println!("{unexpected} scenario(s) did not show what was expected");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
