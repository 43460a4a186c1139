//! The crate's modules import only downwards, without cycles, as the library's do
//! (ARCHITECTURE.md, "Crates and layers"): the same checker
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
    // Faults at the head of the hand-off queue.
    &["heads"],
    // A row of the fault matrix; the partition family; the matrix and its runs.
    &["scenario"],
    &["partition"],
    &["scenarios"],
    // RELIABILITY.md.
    &["report"],
];

/// The library (`lib.rs`), without the binary's files.
mod library {
    crate::checker::layer_tests!("lib.rs" beside "main.rs", super::LAYERS);
}

/// The binary (`main.rs`, the worker and the fault matrix), without the library's files.
mod binary {
    crate::checker::layer_tests!("main.rs" beside "lib.rs", super::BIN_LAYERS);
}
