//! Prints what the model checker finds: the unfenced-overlap counterexample as a timeline,
//! the fencing counterexamples of the code as written, and for every scenario the states
//! explored and each property's outcome.
//!
//! ```text
//! cargo run --release -p redlease-model --example explore            # full bounds
//! cargo run --release -p redlease-model --example explore -- --quick  # what the tests run
//! cargo run --release -p redlease-model --example explore -- --only hybrid  # names containing "hybrid"
//! ```
//! The full run takes about two minutes on one core; `--quick` (the tests' bounds, no slow
//! scenario) a quarter of that.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use redlease_model::scenarios::{self, Scenario};
use redlease_model::{FENCED_SAFETY, MUTUAL_EXCLUSION, STATE_LIMIT, check_until};

fn counterexample(title: &str, scenario: &Scenario, property: &'static str) {
    let report = check_until(scenario.config.clone(), property);
    println!("== {title}");
    println!(
        "   ({}; first counterexample found after {} distinct states)\n",
        scenario.config.name, report.unique_states
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
    if quick {
        all.retain(|s| !s.slow);
    } else {
        all.extend(scenarios::combined());
        all.extend(scenarios::hybrid_others());
    }
    if let Some(only) = only {
        all.retain(|s| s.config.name.contains(only.as_str()));
    }
    let mut unexpected = 0;
    println!("== Every scenario\n");
    for scenario in all {
        let scenario = bounds(scenario);
        let report = scenario.run(STATE_LIMIT);
        print!("{report}");
        match scenario.verify(&report) {
            Ok(()) => println!("  as expected\n"),
            Err(why) => {
                unexpected += 1;
                println!("  UNEXPECTED: {why}\n");
                for outcome in report.outcomes.iter().filter(|o| o.always) {
                    if let Some(found) = &outcome.discovery {
                        println!("-- {}:\n{found}", outcome.property);
                    }
                }
            }
        }
    }
    if unexpected > 0 {
        println!("{unexpected} scenario(s) did not show what was expected");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
