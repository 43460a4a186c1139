//! What every test of a model's scenarios does with a checker's report: show it, and fail
//! unless it shows what the scenario expects.

use redlease_model::{Named, Report};

/// Prints `report` and the counterexample of each `always` property (`cargo test --
/// --nocapture` shows them), and fails with the reason `verify` gives unless it finds in
/// `report` what its scenario expects; returns `report` for further checks.
pub(crate) fn verified<C: Named>(
    report: Report<C>,
    verify: impl FnOnce(&Report<C>) -> Result<(), String>,
) -> Report<C> {
    println!("{report}");
    for outcome in report.outcomes.iter().filter(|o| o.always) {
        if let Some(found) = &outcome.discovery {
            println!("-- {}:\n{found}", outcome.property);
        }
    }
    if let Err(why) = verify(&report) {
        panic!("{}: {why}\n{report}", report.config.name());
    }
    report
}
