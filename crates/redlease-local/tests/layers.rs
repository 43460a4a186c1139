//! The crate's modules import only downwards, without cycles, as the library's do
//! (DESIGN.md, "Workspace layout"): the same checker
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
    // Leaves: the errors, the RESP wire format.
    &["error", "resp"],
    // Waiting until a deployment has settled.
    &["wait"],
    // One redis-server process.
    &["server"],
    // What sits in front of a server, and the deployments of several.
    &["proxy", "delay_line", "nodes", "cluster", "sentinel"],
];

/// The crate imports only downwards, without cycles, at every level.
#[test]
fn modules_import_only_downwards_without_cycles() {
    checker::assert_layered(env!("CARGO_MANIFEST_DIR"), "lib.rs", LAYERS);
}

/// Prints the top-level module graph bottom-up, then the problems the check reports.
#[test]
fn print_the_module_graph() {
    checker::print_graph(env!("CARGO_MANIFEST_DIR"), "lib.rs", LAYERS);
}
