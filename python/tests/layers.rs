//! The binding's modules import only downwards, without cycles, as the library's do: the
//! same checker (`crates/redlease/tests/layers/checker.rs`, which says what it checks),
//! with this crate's layer table. (The binding's behaviour is tested from Python, by the
//! `test_*.py` files beside this one; this is its one Rust test.)
//!
//! Update the table when a top-level module is added, renamed or moved. `make layers`
//! prints the graph.
#[path = "../../crates/redlease/tests/layers/checker.rs"]
mod checker;

/// The top-level modules of `src/`, from the bottom layer to the top. A module may use the
/// modules of its own layer (without cycles) and of the layers below it, never above.
const LAYERS: &[&[&str]] = &[
    // Leaves: the exceptions a failure becomes, the process's runtime.
    &["errors", "runtime"],
    // The process's life: the exit gate, a connection per process.
    &["life"],
    // Running the library's futures for Python (blocking, or with a callback).
    &["call"],
    // The Python classes over a held lease, a leader watch, a fenced store.
    &["guard", "observe", "resource"],
    // The client, which makes the rest.
    &["client"],
];

checker::layer_tests!("lib.rs", LAYERS);
