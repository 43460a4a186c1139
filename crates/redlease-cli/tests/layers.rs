//! The binary's modules import only downwards, without cycles, as the library's do
//! (ARCHITECTURE.md, "Crates and layers"): the same checker
//! (`crates/redlease/tests/layers/checker.rs`, which says what it checks), with this
//! crate's layer table. `main.rs` is the crate root (the checker calls it `lib.rs`); what
//! it uses is no dependency. Items under `#[cfg(test)]` may reach anywhere.
//!
//! Update the table when a top-level module is added, renamed or moved. `cargo test -p
//! redlease-cli --test layers -- --nocapture` prints the graph.
#[path = "../../redlease/tests/layers/checker.rs"]
mod checker;

/// The top-level modules of `src/`, from the bottom layer to the top. A module may use the
/// modules of its own layer (without cycles) and of the layers below it, never above.
const LAYERS: &[&[&str]] = &[
    // Leaves: exit codes, output, signals, names, the environment of a run's command, the
    // lease's deadline that run hands its supervisor.
    &[
        "exit",
        "output",
        "signals",
        "name",
        "environment",
        "heartbeat",
    ],
    // Where Redis is.
    &["connect"],
    // What operators read of a lock; the supervisor between run and its command.
    &["operator", "supervise", "proclaim"],
    // The commands that hold or follow a lock.
    &["run", "leader"],
    // The commands built on run: a latch's count is run holding a count.
    &["latch"],
    // The demo and the benchmarks.
    &["demo", "bench"],
];

checker::layer_tests!("main.rs", LAYERS);
