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
    // Leaves: the attribute's arguments, the lock-name template.
    &["args", "template"],
    // The expansion of `#[locked]`.
    &["expand"],
];

checker::layer_tests!("lib.rs", LAYERS);
