//! The table of scenarios the tests check row by row, in the order the `explore` example
//! prints them.

use super::code::{
    crash, drift, drift_beyond_allowance, lost_message, no_check, no_fault, no_write_back,
    one_node_token, pause, retry_after_lost_release, suspend,
};
use super::fixed::{
    fixed_counter_expires, fixed_counter_only, fixed_crash, fixed_delayed_restart,
    fixed_delayed_restart_tokens, fixed_drift_beyond_allowance, fixed_lost_message, fixed_no_check,
    fixed_pause, fixed_suspend, single_restart,
};
use super::hybrid::{
    hybrid_counter_expires, hybrid_delayed_restart, hybrid_no_fault, hybrid_one_clock_back,
    hybrid_quick_restart, hybrid_single_restart, hybrid_single_step_back, hybrid_step_back,
};
use super::scenario::Scenario;

/// Every scenario the tests check, in the order the `explore` example prints them.
pub fn all() -> Vec<Scenario> {
    vec![
        no_fault(),
        pause(),
        drift(),
        crash(),
        lost_message(),
        drift_beyond_allowance(),
        retry_after_lost_release(),
        suspend(),
        no_check(),
        no_write_back(),
        one_node_token(),
        fixed_pause(),
        fixed_crash(),
        fixed_lost_message(),
        fixed_drift_beyond_allowance(),
        fixed_suspend(),
        fixed_no_check(),
        fixed_delayed_restart(),
        fixed_delayed_restart_tokens(),
        fixed_counter_only(),
        fixed_counter_expires(),
        hybrid_no_fault(),
        hybrid_delayed_restart(),
        hybrid_quick_restart(),
        hybrid_counter_expires(),
        hybrid_step_back(),
        single_restart(),
        hybrid_single_restart(),
        hybrid_single_step_back(),
        hybrid_one_clock_back(),
    ]
}
