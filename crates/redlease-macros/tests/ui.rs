//! Compile-time errors of `#[redlease::locked]`, with their exact messages (`ui/*.stderr`,
//! pinned to the toolchain of `rust-toolchain`/CI; regenerate with `TRYBUILD=overwrite`).

#[test]
fn compile_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
