//! The crate's modules import only downwards, without cycles, as the library's do
//! (DESIGN.md, "Workspace layout"): the same checker
//! (`crates/redlease/tests/layers/checker.rs`, which says what it checks), with this
//! crate's layer tables: the library (`lib.rs`) and the binary (`main.rs`) share `src/`,
//! and each is checked without the other's files. Items under `#[cfg(test)]` may reach anywhere.
//!
//! Update the table when a top-level module is added, renamed or moved. `make layers`
//! prints the graph.
#[path = "../../redlease/tests/layers/checker.rs"]
mod checker;

/// The top-level modules of `src/`, from the bottom layer to the top. A module may use the
/// modules of its own layer (without cycles) and of the layers below it, never above.
const LAYERS: &[&[&str]] = &[
    // Leaves: the workers' lines, percentiles.
    &["event", "stats"],
    // The primitive a run exercises.
    &["primitive"],
    // The judge, the claims and liveness checks over a history.
    &["claims", "judge", "liveness"],
    // The history checker.
    &["check"],
];

/// The modules of the binary (`main.rs`), from the bottom layer to the top.
const BIN_LAYERS: &[&[&str]] = &[
    // The worker's pipe to the judge.
    &["link"],
    // A worker process; the cancellation storm it may run.
    &["storm"],
    &["worker"],
    // Worker processes and their judge; the hand-off runs.
    &["runner"],
    &["handoff"],
    // A row of the fault matrix; the partition family; the matrix and its runs.
    &["scenario"],
    &["partition"],
    &["scenarios"],
    // RELIABILITY.md.
    &["report"],
];

/// The crate imports only downwards, without cycles, at every level.
#[test]
fn modules_import_only_downwards_without_cycles() {
    checker::assert_layered_beside(env!("CARGO_MANIFEST_DIR"), "lib.rs", "main.rs", LAYERS);
}

/// The binary (`main.rs`, the worker and the fault matrix) too.
#[test]
fn binary_modules_import_only_downwards_without_cycles() {
    checker::assert_layered_beside(env!("CARGO_MANIFEST_DIR"), "main.rs", "lib.rs", BIN_LAYERS);
}

/// Prints the top-level module graph bottom-up, then the problems the check reports.
#[test]
fn print_the_module_graph() {
    checker::print_graph_beside(env!("CARGO_MANIFEST_DIR"), "lib.rs", "main.rs", LAYERS);
    checker::print_graph_beside(env!("CARGO_MANIFEST_DIR"), "main.rs", "lib.rs", BIN_LAYERS);
}
