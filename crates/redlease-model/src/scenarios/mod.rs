//! The configurations checked by the tests and the `explore` example, each with the
//! outcome it is expected to show, by family: the code as written and its mutations
//! (`code`), the fix with a plain counter (`fixed`), the hybrid clock (`hybrid`), counter
//! then clock (`counter_then_clock`); [`all`] is the table the tests check row by row.

mod code;
mod counter_then_clock;
mod fixed;
mod hybrid;
mod scenario;
mod table;

pub use code::{
    crash, drift, drift_beyond_allowance, lost_message, no_check, no_fault, no_write_back,
    one_node_token, pause, retry_after_lost_release, suspend,
};
pub use counter_then_clock::{
    counter_then_clock_behind, counter_then_clock_one_clock_back, counter_then_clock_rows,
    counter_then_clock_single_last_write_lost,
};
pub use fixed::{
    combined, fixed_counter_expires, fixed_counter_only, fixed_crash, fixed_delayed_restart,
    fixed_delayed_restart_tokens, fixed_drift_beyond_allowance, fixed_lost_message, fixed_no_check,
    fixed_pause, fixed_suspend, single_restart,
};
pub use hybrid::{
    hybrid_counter_expires, hybrid_delayed_restart, hybrid_no_fault, hybrid_one_clock_back,
    hybrid_others, hybrid_quick_restart, hybrid_restart_within_skew, hybrid_single_last_write_lost,
    hybrid_single_restart, hybrid_single_step_back, hybrid_step_back,
};
pub(crate) use scenario::judge;
pub use scenario::{Expect, Scenario};
pub use table::all;
