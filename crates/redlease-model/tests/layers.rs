//! The crate's modules import only downwards, without cycles, as the library's do
//! (ARCHITECTURE.md, "Crates and layers"): the same checker
//! (`crates/redlease/tests/layers/checker.rs`, which says what it checks), with this
//! crate's layer table. Items under `#[cfg(test)]` may reach anywhere.
//!
//! Update the table when a top-level module is added, renamed or moved. `make layers`
//! prints the graph.
#[path = "../../redlease/tests/layers/checker.rs"]
mod checker;

/// The top-level modules of `src/`, from the bottom layer to the top. A module may use the
/// modules of its own layer (without cycles) and of the layers below it, never above.
const LAYERS: &[&[&str]] = &[
    // Leaves: what a model is configured with, the slot sets, a path replayed and told.
    &["config", "path", "slots"],
    // The quorum model's state and the names of its clients and nodes.
    &["state"],
    // The properties checked on a state.
    &["properties"],
    // The quorum model.
    &["model"],
    // A path replayed as a timeline; the checker runs; the quorum's steps.
    &["timeline", "check", "steps"],
    // The scenarios of the quorum model.
    &["scenarios"],
    // The other models, each a directory of its own.
    &["failover", "handoff", "life", "serve"],
];

checker::layer_tests!("lib.rs", LAYERS);
