//! Compile-time errors of `#[redlease::locked]`, with their exact messages (`ui/*.stderr`,
//! pinned against the toolchain of this workspace, Rust 1.95; after a toolchain update, review
//! and regenerate them with `TRYBUILD=overwrite cargo test -p redlease-macros --test ui`).

#[test]
fn compile_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
