//! The library's modules import only downwards, without cycles (ARCHITECTURE.md, "Crates
//! and layers"): a newcomer can tell from the tree where a change goes.
//!
//! This test parses every file of `src/` with `syn`, follows the `mod` declarations from
//! `lib.rs` (including `#[path]` and inline `mod x { .. }`), and collects every reference
//! one module makes to another: `use crate::..`, `use super::..`, grouped uses, and paths in
//! types, expressions and macro arguments (`crate::a::f()`, `super::B`), resolved through
//! `use` re-exports (`crate::Error` is a reference to `error`). Items under `#[cfg(test)]`
//! may reach anywhere and are skipped; so are the references `lib.rs` makes (it sits above
//! everything: its `pub use` lines are the public surface, not a dependency).
//!
//! Two checks:
//! - **No cycles at any level.** At the crate root the nodes are the top-level modules (a
//!   directory is one node, the references of all its files are its own); inside each module
//!   with children, the nodes are its children plus its own file, named `x/mod` (so
//!   `backend/mod -> backend/quorum -> backend/mod` is a cycle).
//! - **Layers.** [`LAYERS`] lists the top-level modules from the bottom layer to the top; a
//!   module may use modules of its own layer or below. A module missing from the table, or a
//!   name in the table that is no module, is a failure too.
//!
//! Update the table when a top-level module is added, renamed or moved: that is the point
//! where the architecture is decided, so it is decided in review. `make layers` prints the
//! current graph in topological order (`-- --nocapture`).
#[path = "layers/checker.rs"]
mod checker;

use checker::Tree;

/// The top-level modules of `src/`, from the bottom layer to the top. A module may use the
/// modules of its own layer (without cycles) and of the layers below it, never above.
/// `lib.rs` is above every layer and is not listed.
const LAYERS: &[&[&str]] = &[
    // Leaves: vocabulary, wire formats, retry timing.
    &[
        "error",
        "token",
        "keys",
        "ttl",
        "clock",
        "lua",
        "script_args",
        "rows",
        "scripts",
        "server",
        "replies",
        "wait",
        "observe",
        "snapshot",
        "handle",
    ],
    // How a client reaches Redis: endpoints, connection settings, the pub/sub link.
    &["conn"],
    // Where commands go: one node, Sentinel, Cluster, quorum (Redlock).
    &["backend"],
    // Hand-off grants and release notices.
    &["notify"],
    // A held lease and the batched renewal scheduler.
    &["renew", "lease"],
    // A client's lease engine: shared state, holdings, give-backs.
    &["engine", "acquire", "waiters"],
    // The API.
    &[
        "client",
        "inspect",
        "lock",
        "guard",
        "owner",
        "blocking",
        "default_client",
        "resource",
        "semaphore",
        "rwlock",
        "multilock",
        "election",
        "builder",
        "__private",
        "diagnostics",
        "latch",
        "connection",
    ],
];

// ---------------------------------------------------------------------------------------
// The real tree.

checker::layer_tests!("lib.rs", LAYERS);

// ---------------------------------------------------------------------------------------
// The checker, on small synthetic crates.

fn synthetic(files: &[(&str, &str)]) -> Tree {
    let files = files
        .iter()
        .map(|(path, source)| ((*path).to_owned(), (*source).to_owned()))
        .collect();
    Tree::parse(&files)
}

fn cycle_paths(tree: &Tree) -> Vec<(String, Vec<String>)> {
    tree.cycles()
        .into_iter()
        .map(|c| (c.level, c.path))
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn checker_accepts_references_that_go_one_way() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; mod b; mod c; pub use a::A;"),
        (
            "a.rs",
            "use crate::b::{B, self}; pub struct A(B, b::B, crate::c::C);",
        ),
        (
            "b.rs",
            "pub struct B; fn f() -> crate::c::C { super::c::C }",
        ),
        ("c.rs", "pub struct C;"),
    ]);
    assert_eq!(cycle_paths(&tree), vec![]);
    assert_eq!(
        tree.problems(&[&["c"], &["b"], &["a"]]),
        Vec::<String>::new()
    );
}

#[test]
fn checker_finds_a_cycle_through_a_use_and_a_call() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B; pub fn f() {}"),
        ("b.rs", "pub struct B; fn g() { crate::c::h() }"),
        ("c.rs", "pub fn h() { super::a::f(); }"),
    ]);
    assert_eq!(
        cycle_paths(&tree),
        vec![("crate".to_owned(), names(&["a", "b", "c", "a"]))]
    );
    let problems = tree.problems(&[&["a", "b", "c"]]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].contains("a -> b -> c -> a"), "{}", problems[0]);
    assert!(
        problems[0].contains("`super::a::f` at src/c.rs:1"),
        "{}",
        problems[0]
    );
}

#[test]
fn checker_resolves_re_exports_of_lib_rs_and_ignores_its_own_references() {
    // a uses `crate::B`, which is b's; lib.rs uses both (that is no edge).
    let tree = synthetic(&[
        (
            "lib.rs",
            "mod a; mod b; pub use a::A; pub use b::B as B; fn f(_: a::A) {}",
        ),
        ("a.rs", "pub struct A(crate::B);"),
        ("b.rs", "pub struct B; fn g() { let _ = crate::A; }"),
    ]);
    assert_eq!(
        cycle_paths(&tree),
        vec![("crate".to_owned(), names(&["a", "b", "a"]))]
    );
}

#[test]
fn checker_skips_test_code_and_doc_comments() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "pub fn f() { crate::b::g() }"),
        (
            "b.rs",
            "/// Called by [`crate::a::f`], see `super::a::f`.\npub fn g() {}\n\
             #[cfg(test)] mod tests { use crate::a::f; use super::super::a::*; }\n\
             #[cfg(test)] fn helper() { crate::a::f() }\n\
             #[cfg(all(test, unix))] mod more;\n\
             struct S; impl S { #[cfg(test)] fn t() { crate::a::f() } }",
        ),
        ("b/more.rs", "use crate::a::f;"),
    ]);
    assert_eq!(cycle_paths(&tree), vec![]);
    assert_eq!(tree.problems(&[&["b"], &["a"]]), Vec::<String>::new());
}

#[test]
fn checker_reads_paths_inside_macros() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "pub enum E { V } fn f() { let _ = crate::b::B; }"),
        (
            "b.rs",
            "pub struct B; fn g(e: &str) -> bool { matches!(e, crate::a::E::V) }",
        ),
    ]);
    assert_eq!(
        cycle_paths(&tree),
        vec![("crate".to_owned(), names(&["a", "b", "a"]))]
    );
}

#[test]
fn checker_treats_a_directory_as_one_node_and_checks_its_children() {
    // backend/mod re-exports quorum, and quorum uses the Deployment of backend/mod: a cycle
    // inside backend, none among the top-level modules.
    let tree = synthetic(&[
        ("lib.rs", "mod backend; mod client;"),
        (
            "backend/mod.rs",
            "mod node; mod quorum; pub use quorum::Quorum; pub struct Deployment;",
        ),
        ("backend/node.rs", "pub struct Node;"),
        (
            "backend/quorum.rs",
            "use super::Deployment; pub struct Quorum(Vec<super::node::Node>);",
        ),
        ("client.rs", "use crate::backend::{Deployment, Quorum};"),
    ]);
    assert_eq!(
        cycle_paths(&tree),
        vec![(
            "backend".to_owned(),
            names(&["backend/mod", "backend/quorum", "backend/mod"])
        )]
    );
    assert_eq!(
        tree.problems(&[&["backend"], &["client"]]).len(),
        1,
        "only the cycle inside backend"
    );
}

#[test]
fn checker_follows_re_exports_to_the_sibling_that_defines_the_item() {
    // quorum uses `super::Node`, re-exported by backend's own file from node: that is
    // quorum -> node (not quorum -> backend/mod), so with node -> quorum the cycle is
    // between node and quorum. `x.rs` beside a directory works like `x/mod.rs`.
    let tree = synthetic(&[
        ("lib.rs", "mod backend;"),
        ("backend.rs", "mod node; mod quorum; pub use node::Node;"),
        (
            "backend/node.rs",
            "pub(in crate::backend) struct Node; fn f() { crate::backend::quorum::q() }",
        ),
        ("backend/quorum.rs", "pub fn q() {} fn g(_: super::Node) {}"),
    ]);
    assert_eq!(
        cycle_paths(&tree),
        vec![(
            "backend".to_owned(),
            names(&["backend/node", "backend/quorum", "backend/node"])
        )]
    );
}

#[test]
fn checker_handles_path_attributes_and_inline_modules() {
    let tree = synthetic(&[
        (
            "lib.rs",
            "mod default_client; #[cfg(feature = \"macros\")] #[path = \"private.rs\"] \
             pub mod __private;",
        ),
        (
            "default_client.rs",
            "pub fn get() {} pub(crate) mod blocking { pub fn get() { super::get() } \
             pub(in crate::default_client) fn h() { crate::__private::p() } }",
        ),
        (
            "private.rs",
            "pub fn p() { crate::default_client::blocking::get() }",
        ),
    ]);
    assert_eq!(
        tree.modules.keys().cloned().collect::<Vec<_>>(),
        vec![
            vec![],
            names(&["__private"]),
            names(&["default_client"]),
            names(&["default_client", "blocking"]),
        ]
    );
    assert_eq!(
        cycle_paths(&tree),
        vec![(
            "crate".to_owned(),
            names(&["__private", "default_client", "__private"])
        )]
    );
}

#[test]
fn checker_enforces_the_layer_table() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B;"),
        ("b.rs", "pub struct B;"),
        ("c.rs", "pub fn c() { crate::b::B; }"),
        ("stray.rs", ""),
    ]);
    let problems = tree.problems(&[&["a"], &["b"], &["gone"]]);
    assert_eq!(
        problems,
        vec![
            "src/stray.rs is declared by no `mod`: declare it or delete it".to_owned(),
            "add `c` to the layer table (LAYERS in tests/layers.rs)".to_owned(),
            "`gone` is in the layer table but is no module of src/: remove or rename it".to_owned(),
            "`a` (layer 0) uses `b` (layer 1), a layer above it: `crate::b::B` at src/a.rs:1"
                .to_owned(),
        ]
    );
}

#[test]
fn checker_reports_items_defined_in_lib_rs() {
    let tree = synthetic(&[
        ("lib.rs", "mod a; pub fn helper() {}"),
        ("a.rs", "fn f() { crate::helper() }"),
    ]);
    let problems = tree.problems(&[&["a"]]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("`a` uses an item defined in lib.rs"),
        "{}",
        problems[0]
    );
}
