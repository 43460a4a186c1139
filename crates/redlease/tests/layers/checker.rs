//! The module-graph checker of `tests/layers.rs` (its docs say what it checks): parses a
//! crate's `src/` with `syn`, follows the `mod` declarations from the crate root and finds
//! cycles and upward references against a layer table. Shared: the `tests/layers.rs` of
//! every crate of the workspace includes this file by `#[path]`, with its own table, so that
//! every crate is layered by the same rules.

#![allow(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a test's checker: a file it cannot read fails the test, the graph is printed"
)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// The two tests every crate's `tests/layers.rs` has, for its crate rooted at `$root`
/// (`"lib.rs"` or `"main.rs"`) and its layer table `$layers`:
/// `modules_import_only_downwards_without_cycles` (fails with every problem: cycles at any
/// level, upward references, modules missing from the table) and `print_the_module_graph`
/// (the top-level graph bottom-up, then the problems; `make layers` shows it). With
/// `beside $other`, the crate shares `src/` with the crate rooted at `$other` (a package's
/// library and its binary): the files that `$other` reaches are left out (they are no
/// strays of this one). A package with two roots calls it once for each, in a module of
/// its own.
macro_rules! layer_tests {
    ($root:literal, $layers:expr) => {
        $crate::checker::layer_tests!(@tests $root, None, $layers);
    };
    ($root:literal beside $other:literal, $layers:expr) => {
        $crate::checker::layer_tests!(@tests $root, Some($other), $layers);
    };
    (@tests $root:literal, $other:expr, $layers:expr) => {
        /// The crate imports only downwards, without cycles, at every level.
        #[test]
        fn modules_import_only_downwards_without_cycles() {
            $crate::checker::assert_layered(env!("CARGO_MANIFEST_DIR"), $root, $other, $layers);
        }

        /// Prints the top-level module graph bottom-up (each module after what it uses;
        /// modules on a cycle together), then the problems the check above reports.
        #[test]
        fn print_the_module_graph() {
            $crate::checker::print_graph(env!("CARGO_MANIFEST_DIR"), $root, $other, $layers);
        }
    };
}
pub(crate) use layer_tests;

/// Fails with every problem of the crate at `manifest_dir` (root file `root`, beside the
/// crate rooted at `other_root` if any) against `layers`: cycles at any level, upward
/// references, modules missing from the table.
pub(crate) fn assert_layered(
    manifest_dir: &str,
    root: &str,
    other_root: Option<&str>,
    layers: &[&[&str]],
) {
    let problems = Tree::parse(&crate_files(manifest_dir, root, other_root)).problems(layers);
    assert!(
        problems.is_empty(),
        "the module graph of {manifest_dir}/src from {root} breaks the layering \
         ({} problems):\n\n{}\n",
        problems.len(),
        problems.join("\n\n")
    );
}

/// Prints the top-level module graph of the crate at `manifest_dir` (as in
/// [`assert_layered`]) bottom-up (each module after what it uses; modules on a cycle
/// together), then the problems.
pub(crate) fn print_graph(
    manifest_dir: &str,
    root: &str,
    other_root: Option<&str>,
    layers: &[&[&str]],
) {
    let files = crate_files(manifest_dir, root, other_root);
    println!("{}", Tree::parse(&files).report(layers));
}

/// The files of the crate rooted at `root` under `manifest_dir/src`: without the files that
/// the crate rooted at `other_root` in the same `src/` reaches.
fn crate_files(
    manifest_dir: &str,
    root: &str,
    other_root: Option<&str>,
) -> BTreeMap<String, String> {
    let mut files = source_files(manifest_dir, root);
    let Some(other_root) = other_root else {
        return files;
    };
    let other = Tree::parse(&source_files(manifest_dir, other_root));
    for file in &other.reached {
        if file != "lib.rs" {
            files.remove(file);
        }
    }
    // `lib.rs` is this crate's root under the checker's name: the other root's file, when it
    // was `lib.rs`, is gone already.
    if other_root != "lib.rs" {
        files.remove(other_root);
    }
    files
}

/// Every `.rs` file under `manifest_dir/src`, by its path relative to `src/` with `/`
/// separators. The checker knows a crate's root as `lib.rs`: a binary's `main.rs` is
/// given under that name (`root = "main.rs"`).
fn source_files(manifest_dir: &str, root: &str) -> BTreeMap<String, String> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read src/") {
            let entry = entry.expect("read src/");
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let path = entry.path();
            if path.is_dir() {
                walk(&path, &rel, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.insert(
                    rel,
                    std::fs::read_to_string(&path).expect("read a source file"),
                );
            }
        }
    }
    let mut files = BTreeMap::new();
    let src = Path::new(manifest_dir).join("src");
    walk(&src, "", &mut files);
    if let Some(source) = files.remove(root) {
        files.insert("lib.rs".to_owned(), source);
    }
    files
}

/// A module path from the crate root: `[]` is the root, `["backend", "quorum"]` is
/// `crate::backend::quorum`.
pub(crate) type ModPath = Vec<String>;

/// A path as written, with the module it is written in.
#[derive(Clone, Debug)]
struct Written {
    /// The module the path is written in (`self`, `super` and relative names start there).
    scope: ModPath,
    segments: Vec<String>,
    /// `::std::..`: always another crate.
    leading_colon: bool,
}

/// One reference, with where it was seen (for the messages).
#[derive(Clone, Debug)]
struct Reference {
    path: Written,
    /// The file it is written in, relative to `src/`.
    file: String,
}

/// The crate's module tree and every reference its modules make.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    /// Every module (outside `#[cfg(test)]`), with the file that holds it.
    pub(crate) modules: BTreeMap<ModPath, String>,
    /// `use` items at module level: (module, name) -> the path it stands for.
    aliases: BTreeMap<(ModPath, String), Written>,
    references: Vec<Reference>,
    /// Files reached through `mod` declarations (test modules included).
    reached: BTreeSet<String>,
    /// Files under src/ (to find the ones no `mod` declares).
    files: BTreeSet<String>,
    /// Missing files, parse errors.
    errors: Vec<String>,
    /// The source of every file (to point at lines).
    sources: BTreeMap<String, String>,
}

/// An edge between two nodes of one level, with the first reference that makes it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
}

/// The graph among the children of one module (and the module's own file, `x/mod`).
#[derive(Debug, Default)]
struct Level {
    /// `crate` for the root, else `backend`, `backend/quorum`...
    name: String,
    nodes: BTreeSet<String>,
    /// Edge -> the first reference that makes it (`file:line` and the path).
    edges: BTreeMap<Edge, String>,
}

/// A cycle found at one level: the nodes of its strongly connected component, one shortest
/// cycle through them (first node repeated at the end) and every edge inside the component.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cycle {
    pub(crate) level: String,
    members: Vec<String>,
    pub(crate) path: Vec<String>,
    edges: Vec<String>,
}

impl Tree {
    /// Parses the crate whose files (relative to `src/`, `/` separators) are given, from
    /// `lib.rs` along its `mod` declarations.
    pub(crate) fn parse(files: &BTreeMap<String, String>) -> Tree {
        let mut tree = Tree {
            files: files.keys().cloned().collect(),
            sources: files.clone(),
            ..Tree::default()
        };
        tree.modules.insert(Vec::new(), "lib.rs".to_owned());
        tree.load(files, "lib.rs", &[], "", true);
        tree
    }

    /// Parses one file holding module `module`; `child_dir` is where its `mod x;` files live.
    fn load(
        &mut self,
        files: &BTreeMap<String, String>,
        file: &str,
        module: &[String],
        child_dir: &str,
        record: bool,
    ) {
        self.reached.insert(file.to_owned());
        let Some(source) = files.get(file) else {
            self.errors.push(format!(
                "src/{file} is declared by a `mod` but does not exist"
            ));
            return;
        };
        let parsed = match syn::parse_file(source) {
            Ok(parsed) => parsed,
            Err(err) => {
                self.errors.push(format!("src/{file}: cannot parse: {err}"));
                return;
            }
        };
        let mut collector = Collector {
            tree: self,
            files,
            file: file.to_owned(),
            file_dir: parent_dir(file).to_owned(),
            module: module.to_vec(),
            child_dir: child_dir.to_owned(),
            inline_depth: 0,
            block_depth: 0,
            record,
        };
        collector.visit_file(&parsed);
    }

    /// The absolute path (from the crate root) a written path stands for, or `None` when it
    /// names something outside this crate (or a local name).
    fn absolute(&self, path: &Written, depth: u8) -> Option<Vec<String>> {
        if path.leading_colon || depth > 16 {
            return None;
        }
        let (first, rest) = path.segments.split_first()?;
        let mut base = match first.as_str() {
            "crate" => return Some(rest.to_vec()),
            "self" => path.scope.clone(),
            "super" => {
                let mut base = path.scope.clone();
                base.pop()?;
                let mut rest = rest;
                while let Some((next, tail)) = rest.split_first() {
                    if next != "super" {
                        break;
                    }
                    base.pop()?;
                    rest = tail;
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            name => {
                let mut child = path.scope.clone();
                child.push(name.to_owned());
                if self.modules.contains_key(&child) {
                    child
                } else {
                    let alias = self.aliases.get(&(path.scope.clone(), name.to_owned()))?;
                    self.absolute(alias, depth + 1)?
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that holds what an absolute path names, following `use` re-exports.
    fn module_of(&self, absolute: &[String], depth: u8) -> Option<ModPath> {
        let mut module = Vec::new();
        for (i, segment) in absolute.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                module = child;
                continue;
            }
            if depth < 16
                && let Some(alias) = self.aliases.get(&(module.clone(), segment.clone()))
            {
                // A re-export: what it stands for, then the rest of the path.
                let mut target = self.absolute(alias, depth + 1)?;
                target.extend(absolute[i + 1..].iter().cloned());
                return self.module_of(&target, depth + 1);
            }
            break;
        }
        Some(module)
    }

    /// `file:line` of the first line outside comments that holds the path as written, or
    /// the longest prefix of it (a `use a::{b, c}` flattened), or else the file alone. (Line
    /// numbers from spans would need proc-macro2's `span-locations`, which grows every span
    /// and so every syn type of the workspace, and changes what clippy says of the macros.)
    fn locate(&self, file: &str, segments: &[String]) -> String {
        let Some(source) = self.sources.get(file) else {
            return file.to_owned();
        };
        for len in (2..=segments.len()).rev() {
            let text = segments[..len].join("::");
            let found = source
                .lines()
                .enumerate()
                .find(|(_, line)| !line.trim_start().starts_with("//") && line.contains(&text));
            if let Some((i, _)) = found {
                return format!("{file}:{}", i + 1);
            }
        }
        file.to_owned()
    }

    /// Every reference as (from module, to module, evidence).
    fn resolved(&self) -> Vec<(ModPath, ModPath, String)> {
        let mut out = Vec::new();
        for reference in &self.references {
            let Some(absolute) = self.absolute(&reference.path, 0) else {
                continue;
            };
            let Some(target) = self.module_of(&absolute, 0) else {
                continue;
            };
            let written = reference.path.segments.join("::");
            let at = self.locate(&reference.file, &reference.path.segments);
            out.push((
                reference.path.scope.clone(),
                target,
                format!("`{written}` at src/{at}"),
            ));
        }
        out
    }

    /// The graph among the children of every module that has children.
    fn levels(&self) -> Vec<Level> {
        let resolved = self.resolved();
        let mut levels = Vec::new();
        for parent in self.modules.keys() {
            let children: Vec<&ModPath> = self
                .modules
                .keys()
                .filter(|m| m.len() == parent.len() + 1 && m.starts_with(parent))
                .collect();
            if children.is_empty() {
                continue;
            }
            let mut level = Level {
                name: level_name(parent),
                ..Level::default()
            };
            level.nodes.insert(node_name(parent, None));
            for child in children {
                level.nodes.insert(node_name(parent, child.last()));
            }
            for (from, to, evidence) in &resolved {
                if !from.starts_with(parent) || !to.starts_with(parent) {
                    continue;
                }
                let from_node = node_name(parent, from.get(parent.len()));
                let to_node = node_name(parent, to.get(parent.len()));
                // lib.rs sits above everything: what it uses is no dependency.
                if from_node == to_node || (parent.is_empty() && from.is_empty()) {
                    continue;
                }
                level
                    .edges
                    .entry(Edge {
                        from: from_node,
                        to: to_node,
                    })
                    .or_insert_with(|| evidence.clone());
            }
            levels.push(level);
        }
        levels
    }

    /// The cycles at every level.
    pub(crate) fn cycles(&self) -> Vec<Cycle> {
        self.levels().iter().flat_map(Level::cycles).collect()
    }

    /// Everything wrong with the crate against a layer table, one message each.
    pub(crate) fn problems(&self, layers: &[&[&str]]) -> Vec<String> {
        let mut problems = self.errors.clone();
        for file in self.files.difference(&self.reached) {
            problems.push(format!(
                "src/{file} is declared by no `mod`: declare it or delete it"
            ));
        }
        for cycle in self.cycles() {
            problems.push(cycle.to_string());
        }
        let root = self.levels().into_iter().find(|l| l.name == "crate");
        let Some(root) = root else {
            return problems;
        };
        let layer_of: BTreeMap<&str, usize> = layers
            .iter()
            .enumerate()
            .flat_map(|(i, layer)| layer.iter().map(move |m| (*m, i)))
            .collect();
        for node in &root.nodes {
            if node != ROOT_NODE && !layer_of.contains_key(node.as_str()) {
                problems.push(format!(
                    "add `{node}` to the layer table (LAYERS in tests/layers.rs)"
                ));
            }
        }
        for name in layer_of.keys() {
            if !root.nodes.contains(*name) {
                problems.push(format!(
                    "`{name}` is in the layer table but is no module of src/: remove or rename it"
                ));
            }
        }
        for (edge, evidence) in &root.edges {
            if edge.to == ROOT_NODE {
                problems.push(format!(
                    "`{}` uses an item defined in lib.rs ({evidence}): lib.rs only declares \
                     modules and re-exports, move the item into a module",
                    edge.from
                ));
                continue;
            }
            let (Some(&from), Some(&to)) = (
                layer_of.get(edge.from.as_str()),
                layer_of.get(edge.to.as_str()),
            ) else {
                continue;
            };
            if to > from {
                problems.push(format!(
                    "`{}` (layer {from}) uses `{}` (layer {to}), a layer above it: {evidence}",
                    edge.from, edge.to
                ));
            }
        }
        problems
    }

    /// The top-level graph bottom-up (each module after what it uses), then the problems.
    pub(crate) fn report(&self, layers: &[&[&str]]) -> String {
        let mut out = String::new();
        let Some(root) = self.levels().into_iter().find(|l| l.name == "crate") else {
            return "no modules".to_owned();
        };
        let mut nodes = root.nodes.clone();
        nodes.remove(ROOT_NODE);
        // Components (a cycle is one), each at 1 + the highest rank of what it uses.
        let components = root.components(&nodes);
        let mut rank: BTreeMap<usize, usize> = BTreeMap::new();
        let component_of: BTreeMap<&String, usize> = components
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.iter().map(move |n| (n, i)))
            .collect();
        let below_of = |i: usize| -> BTreeSet<usize> {
            root.edges
                .keys()
                .filter(|e| components[i].contains(&e.from))
                .filter_map(|e| component_of.get(&e.to).copied())
                .filter(|&j| j != i)
                .collect()
        };
        while rank.len() < components.len() {
            for i in 0..components.len() {
                if rank.contains_key(&i) {
                    continue;
                }
                let below = below_of(i);
                if below.iter().all(|j| rank.contains_key(j)) {
                    let r = below.iter().map(|j| rank[j] + 1).max().unwrap_or(0);
                    rank.insert(i, r);
                }
            }
        }
        let _ = writeln!(
            out,
            "top-level modules of src/, bottom-up (each after what it uses; \
             {{a b}} is a cycle):"
        );
        for r in 0..=rank.values().copied().max().unwrap_or(0) {
            let mut row = Vec::new();
            for (i, component) in components.iter().enumerate() {
                if rank[&i] != r {
                    continue;
                }
                let names: Vec<&str> = component.iter().map(String::as_str).collect();
                let label = if names.len() > 1 {
                    format!("{{{}}}", names.join(" "))
                } else {
                    names.join("")
                };
                row.push(label);
            }
            let _ = writeln!(out, "  {r:>2}: {}", row.join(", "));
        }
        let _ = writeln!(out, "\nwhat each module uses:");
        for node in &nodes {
            let used: Vec<&str> = root
                .edges
                .keys()
                .filter(|e| &e.from == node)
                .map(|e| e.to.as_str())
                .collect();
            let _ = writeln!(out, "  {node} -> {}", used.join(", "));
        }
        let problems = self.problems(layers);
        let _ = writeln!(out, "\n{} problems with the layer table:", problems.len());
        for problem in problems {
            let _ = writeln!(out, "\n{problem}");
        }
        out
    }
}

/// The node at the root level that stands for lib.rs's own items.
const ROOT_NODE: &str = "lib.rs";

fn level_name(parent: &[String]) -> String {
    if parent.is_empty() {
        "crate".to_owned()
    } else {
        parent.join("/")
    }
}

/// `backend/quorum` for the child `quorum` of `backend`; `backend/mod` for backend's own file.
fn node_name(parent: &[String], child: Option<&String>) -> String {
    match (parent.is_empty(), child) {
        (true, Some(child)) => child.clone(),
        (true, None) => ROOT_NODE.to_owned(),
        (false, Some(child)) => format!("{}/{child}", parent.join("/")),
        (false, None) => format!("{}/mod", parent.join("/")),
    }
}

impl Level {
    fn successors(&self, node: &str) -> impl Iterator<Item = &String> {
        self.edges
            .keys()
            .filter(move |e| e.from == node)
            .map(|e| &e.to)
    }

    fn reachable(&self, from: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(node) = todo.pop() {
            for next in self.successors(&node) {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    }

    /// Strongly connected components among `nodes`, in name order (small graphs: by
    /// mutual reachability).
    fn components(&self, nodes: &BTreeSet<String>) -> Vec<Vec<String>> {
        let reach: BTreeMap<&String, BTreeSet<String>> =
            nodes.iter().map(|n| (n, self.reachable(n))).collect();
        let mut done = BTreeSet::new();
        let mut components = Vec::new();
        for node in nodes {
            if done.contains(node) {
                continue;
            }
            let mut component = vec![node.clone()];
            for other in nodes {
                if other != node && reach[node].contains(other) && reach[other].contains(node) {
                    component.push(other.clone());
                }
            }
            done.extend(component.iter().cloned());
            components.push(component);
        }
        components
    }

    /// One [`Cycle`] per strongly connected component of more than one node.
    fn cycles(&self) -> Vec<Cycle> {
        let mut cycles = Vec::new();
        for members in self.components(&self.nodes) {
            if members.len() < 2 {
                continue;
            }
            let inside: BTreeSet<&String> = members.iter().collect();
            // Shortest way back to the first member, by breadth-first search inside.
            let start = &members[0];
            let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
            let mut last = None;
            let mut queue = VecDeque::from([start]);
            'search: while let Some(node) = queue.pop_front() {
                for next in self.successors(node) {
                    if !inside.contains(next) {
                        continue;
                    }
                    if next == start {
                        last = Some(node);
                        break 'search;
                    }
                    if !came_from.contains_key(next) {
                        came_from.insert(next, node);
                        queue.push_back(next);
                    }
                }
            }
            // A component of two or more nodes always leads back to its first member.
            let mut node = last.expect("a strongly connected component has a cycle");
            let mut cycle = vec![start.clone()];
            while node != start {
                cycle.push(node.clone());
                node = came_from[node];
            }
            cycle.push(start.clone());
            cycle.reverse();
            let edges = self
                .edges
                .iter()
                .filter(|(e, _)| inside.contains(&e.from) && inside.contains(&e.to))
                .map(|(e, evidence)| format!("{} -> {}: {evidence}", e.from, e.to))
                .collect();
            cycles.push(Cycle {
                level: self.name.clone(),
                members,
                path: cycle,
                edges,
            });
        }
        cycles
    }
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = if self.level == "crate" {
            "the top-level modules".to_owned()
        } else {
            format!("the modules of `{}`", self.level)
        };
        writeln!(
            f,
            "import cycle among {level}: {}\n  (all of {{{}}} reach each other; the references \
             between them, break at least one:)",
            self.path.join(" -> "),
            self.members.join(", ")
        )?;
        let lines: Vec<String> = self.edges.iter().map(|e| format!("    {e}")).collect();
        write!(f, "{}", lines.join("\n"))
    }
}

fn parent_dir(file: &str) -> &str {
    file.rfind('/').map_or("", |i| &file[..i])
}

fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

/// `#[cfg(test)]`, or `#[cfg(all(test, ..))]`: code only the crate's unit tests see.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    fn mentions_test(meta: &syn::Meta) -> bool {
        match meta {
            syn::Meta::Path(path) => path.is_ident("test"),
            syn::Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|metas| metas.iter().any(mentions_test)),
            _ => false,
        }
    }
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| mentions_test(&meta))
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Walks one file: declares its modules, loads their files, records `use` aliases and
/// references.
struct Collector<'t> {
    tree: &'t mut Tree,
    files: &'t BTreeMap<String, String>,
    file: String,
    file_dir: String,
    /// The module the visitor is in (inline `mod x { .. }` included).
    module: ModPath,
    /// Where the files of the current module's `mod x;` children live.
    child_dir: String,
    /// Inside how many inline `mod x { .. }` of this file.
    inline_depth: usize,
    /// Inside how many blocks (a `use` there is no module-level alias).
    block_depth: usize,
    /// False inside `#[cfg(test)]`: the files are walked (so none looks undeclared) but
    /// nothing is recorded.
    record: bool,
}

impl Collector<'_> {
    fn reference(&mut self, segments: Vec<String>, leading_colon: bool) {
        if !self.record || segments.len() < 2 {
            return;
        }
        self.tree.references.push(Reference {
            path: Written {
                scope: self.module.clone(),
                segments,
                leading_colon,
            },
            file: self.file.clone(),
        });
    }

    /// Records each leaf of a `use` tree: a reference, and at module level an alias.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, leading_colon: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, leading_colon);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let (full, alias) = if name == "self" {
                    (prefix.clone(), prefix.last().cloned())
                } else {
                    let mut full = prefix.clone();
                    full.push(name.clone());
                    (full, Some(name))
                };
                self.use_leaf(full, alias, leading_colon);
            }
            syn::UseTree::Rename(r) => {
                let name = r.ident.to_string();
                let mut full = prefix.clone();
                if name != "self" {
                    full.push(name);
                }
                self.use_leaf(full, Some(r.rename.to_string()), leading_colon);
            }
            syn::UseTree::Glob(_) => {
                self.use_leaf(prefix.clone(), None, leading_colon);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree, leading_colon);
                }
            }
        }
    }

    fn use_leaf(&mut self, full: Vec<String>, alias: Option<String>, leading: bool) {
        if !self.record || full.is_empty() {
            return;
        }
        if let Some(alias) = alias
            && self.block_depth == 0
            && alias != "_"
        {
            self.tree.aliases.insert(
                (self.module.clone(), alias),
                Written {
                    scope: self.module.clone(),
                    segments: full.clone(),
                    leading_colon: leading,
                },
            );
        }
        // `use crate::a;` is a reference to `a` even though it has only two segments; a
        // one-segment `use name;` is a crate (or a child module, declared anyway).
        if full.len() >= 2 {
            self.reference(full, leading);
        }
    }

    /// Paths inside a macro's tokens (`matches!(e, crate::Error::Lost)`).
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => {
                    self.macro_tokens(group.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let mut segments = vec![first.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    let after_colons = i >= 2
                        && matches!((&tokens[i - 2], &tokens[i - 1]),
                            (TokenTree::Punct(a), TokenTree::Punct(b))
                                if a.as_char() == ':' && b.as_char() == ':');
                    self.reference(segments, after_colons);
                    i = j;
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::ExternCrate(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::ForeignMod(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::TraitAlias(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            // Test code may reach anywhere; only walk its files so none looks undeclared.
            if let syn::Item::Mod(m) = item {
                let record = std::mem::replace(&mut self.record, false);
                self.visit_item_mod(m);
                self.record = record;
            }
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        let mut module = self.module.clone();
        module.push(name.clone());
        if let Some((_, items)) = &item.content {
            // Inline `mod x { .. }`: same file, one level down.
            let child_dir = join(&self.child_dir, &name);
            let outer_dir = std::mem::replace(&mut self.child_dir, child_dir);
            let outer_module = std::mem::replace(&mut self.module, module.clone());
            if self.record {
                self.tree.modules.insert(module, self.file.clone());
            }
            self.inline_depth += 1;
            for item in items {
                self.visit_item(item);
            }
            self.inline_depth -= 1;
            self.module = outer_module;
            self.child_dir = outer_dir;
            return;
        }
        // `mod x;`: x.rs or x/mod.rs in the children's directory, or `#[path]`.
        let (file, child_dir) = if let Some(path) = path_attr(&item.attrs) {
            let base = if self.inline_depth == 0 {
                &self.file_dir
            } else {
                &self.child_dir
            };
            let file = join(base, &path);
            let child_dir = if file.ends_with("/mod.rs") || file == "mod.rs" {
                parent_dir(&file).to_owned()
            } else {
                join(parent_dir(&file), &name)
            };
            (file, child_dir)
        } else {
            let beside = join(&self.child_dir, &format!("{name}.rs"));
            let inside = join(&self.child_dir, &format!("{name}/mod.rs"));
            if self.files.contains_key(&inside) && !self.files.contains_key(&beside) {
                (inside, join(&self.child_dir, &name))
            } else {
                (beside, join(&self.child_dir, &name))
            }
        };
        if self.record {
            self.tree.modules.insert(module.clone(), file.clone());
        }
        let files = self.files;
        let record = self.record;
        self.tree.load(files, &file, &module, &child_dir, record);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree, item.leading_colon.is_some());
    }

    fn visit_block(&mut self, block: &'ast syn::Block) {
        self.block_depth += 1;
        visit::visit_block(self, block);
        self.block_depth -= 1;
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test_only(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_test_only(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test_only(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_test_only(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_test_only(&local.attrs) {
            visit::visit_local(self, local);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !is_test_only(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.reference(segments, path.leading_colon.is_some());
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_tokens(mac.tokens.clone());
    }

    // `pub(crate)`, `pub(super)`, `pub(in crate::x)` say who may see, not what is used.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    // `#[path]`, `#[cfg]`, docs...
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}
