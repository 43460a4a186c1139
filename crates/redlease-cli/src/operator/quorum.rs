//! `status` and `release --force` when the locks live on a quorum (Redlock) of independent
//! nodes: the library reads (or clears) each node on its own, and the answer says node by
//! node.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use redlease::Inspection;
use serde::Serialize;

use super::state::LockState;
use crate::exit;
use crate::output::print;

/// What one node said.
#[derive(Debug, Serialize)]
struct NodeReport {
    node: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    state: Option<LockState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `status --json` over a quorum.
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    key: &'a str,
    /// One owner holds it on a majority of the nodes.
    held: bool,
    /// On how many nodes that owner holds it.
    held_on: usize,
    majority: usize,
    nodes: Vec<NodeReport>,
}

/// `release --force --json` over a quorum.
#[derive(Debug, Serialize)]
struct ForcedRelease<'a> {
    name: &'a str,
    key: &'a str,
    released: bool,
    removed_on: usize,
    nodes: Vec<NodeReport>,
}

/// Each node's answer in `inspection`, as printed: without the name and key, which the
/// answer gives once for all nodes.
fn reports(inspection: Inspection) -> Vec<NodeReport> {
    inspection
        .nodes
        .into_iter()
        .map(|node| match node.snapshot {
            Ok(snapshot) => NodeReport {
                node: node.node,
                state: Some(LockState::of("", "", &snapshot)),
                error: None,
            },
            Err(e) => NodeReport {
                node: node.node,
                state: None,
                error: Some(exit::one_line(&e.into())),
            },
        })
        .collect()
}

/// One line for a node: `held: holder 1a2b3c4d… (...), 12s left; fencing counter 42`.
fn node_line(report: &NodeReport) -> String {
    match (&report.state, &report.error) {
        (Some(state), _) => {
            let fence = state
                .fencing_counter
                .map_or_else(|| "none yet".to_owned(), |f| f.to_string());
            if state.held {
                format!("held: {}; fencing counter {fence}", state.holder_summary())
            } else {
                format!("free; fencing counter {fence}")
            }
        }
        (None, Some(e)) => format!("unreachable: {e}"),
        (None, None) => "unreachable".into(),
    }
}

/// `redlease status` over a quorum: held when one owner holds it on a majority (the
/// library has checked that a majority answered).
pub(super) fn status(inspection: Inspection, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let key = inspection.key.clone();
    let held = inspection.is_held();
    let reports = reports(inspection);
    let majority = reports.len() / 2 + 1;
    let mut owners: HashMap<&str, usize> = HashMap::new();
    for state in reports.iter().filter_map(|r| r.state.as_ref()) {
        // A read-write lock's readers each count on their own.
        for holder in &state.holders {
            *owners.entry(holder.token_prefix.as_str()).or_default() += 1;
        }
    }
    let held_on = owners.values().copied().max().unwrap_or(0);
    let text = if json {
        serde_json::to_string_pretty(&Status {
            name,
            key: &key,
            held,
            held_on,
            majority,
            nodes: reports,
        })?
    } else {
        let noun = reports
            .iter()
            .filter_map(|r| r.state.as_ref())
            .find(|s| s.held)
            .map_or("lock", LockState::noun);
        let mut out = format!(
            "{noun} `{name}` (key {key}) on a quorum of {} nodes: {} (one owner on {held_on}, a majority is {majority})",
            reports.len(),
            if held { "held" } else { "free" },
        );
        for report in &reports {
            let _ = write!(out, "\n  {}  {}", report.node, node_line(report));
        }
        out
    };
    print(&text)?;
    Ok(exit::code(exit::negative_unless(held || json)))
}

/// `redlease release --force` over a quorum: the library removed the lock on every node
/// that answered.
pub(super) fn release(removed: Inspection, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let key = removed.key.clone();
    let reports = reports(removed);
    let nodes = reports.len();
    let removed_on = reports
        .iter()
        .filter(|r| r.state.as_ref().is_some_and(|s| s.held))
        .count();
    let text = if json {
        serde_json::to_string_pretty(&ForcedRelease {
            name,
            key: &key,
            released: removed_on > 0,
            removed_on,
            nodes: reports,
        })?
    } else {
        let mut out = if removed_on > 0 {
            format!(
                "removed lock `{name}` (key {key}) from {removed_on} of {nodes} nodes; fencing counters stay:"
            )
        } else {
            format!(
                "lock `{name}` (key {key}) is not held on any of the {nodes} nodes; nothing removed:"
            )
        };
        for report in &reports {
            let line = node_line(report).replacen("held: ", "removed ", 1);
            let _ = write!(out, "\n  {}  {line}", report.node);
        }
        out
    };
    print(&text)?;
    Ok(exit::code(exit::negative_unless(removed_on > 0 || json)))
}
