//! `status` and `release --force` when the locks live on a quorum (Redlock) of independent
//! nodes: each node is read (or cleared) on its own, and the answer says node by node.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use redlease::LockKeys;
use serde::Serialize;

use super::{LockState, connection, print, read, remove};
use crate::connect::Node;
use crate::exit;

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

/// Runs `op` on every node concurrently, with the node's name on its state.
async fn each<F, Fut>(nodes: &[Node], op: F) -> Vec<NodeReport>
where
    F: Fn(redis::aio::MultiplexedConnection) -> Fut,
    Fut: Future<Output = anyhow::Result<LockState>>,
{
    let results = futures_util::future::join_all(nodes.iter().map(|node| {
        let conn = connection(node);
        let op = &op;
        async move {
            match conn {
                Ok(conn) => op(conn).await,
                Err(e) => Err(e),
            }
        }
    }))
    .await;
    nodes
        .iter()
        .zip(results)
        .map(|(node, result)| match result {
            Ok(state) => NodeReport {
                node: node.url.clone(),
                state: Some(state),
                error: None,
            },
            Err(e) => NodeReport {
                node: node.url.clone(),
                state: None,
                error: Some(exit::one_line(&e)),
            },
        })
        .collect()
}

/// Fails with exit code 69 when fewer than a majority of nodes answered.
fn need_majority(reports: &[NodeReport]) -> anyhow::Result<usize> {
    let majority = reports.len() / 2 + 1;
    let answered = reports.iter().filter(|r| r.state.is_some()).count();
    if answered < majority {
        let errors: Vec<String> = reports
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.node)))
            .collect();
        return Err(exit::Unreachable(format!(
            "only {answered} of {} nodes answered, a majority needs {majority} ({})",
            reports.len(),
            errors.join("; ")
        ))
        .into());
    }
    Ok(majority)
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

/// `redlease status` over a quorum: held when one owner holds it on a majority.
pub(super) async fn status(
    nodes: &[Node],
    name: &str,
    keys: &LockKeys,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let reports = each(nodes, |mut conn| async move {
        read(&mut conn, name, keys).await
    })
    .await;
    let majority = need_majority(&reports)?;
    let mut owners: HashMap<&str, usize> = HashMap::new();
    for state in reports.iter().filter_map(|r| r.state.as_ref()) {
        // A read-write lock's readers each count on their own.
        for holder in &state.holders {
            *owners.entry(holder.token_prefix.as_str()).or_default() += 1;
        }
    }
    let held_on = owners.values().copied().max().unwrap_or(0);
    let held = held_on >= majority;
    let text = if json {
        serde_json::to_string_pretty(&Status {
            name,
            key: keys.key(),
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
            "{noun} `{name}` (key {}) on a quorum of {} nodes: {} (one owner on {held_on}, a majority is {majority})",
            keys.key(),
            nodes.len(),
            if held { "held" } else { "free" },
        );
        for report in &reports {
            let _ = write!(out, "\n  {}  {}", report.node, node_line(report));
        }
        out
    };
    print(&text)?;
    Ok(exit::code(if held { 0 } else { exit::NEGATIVE }))
}

/// `redlease release --force` over a quorum: removes the lock on every node that answers.
pub(super) async fn release(
    nodes: &[Node],
    name: &str,
    keys: &LockKeys,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let reports = each(nodes, |mut conn| async move {
        remove(&mut conn, name, keys).await
    })
    .await;
    if reports.iter().all(|r| r.state.is_none()) {
        need_majority(&reports)?;
    }
    let removed_on = reports
        .iter()
        .filter(|r| r.state.as_ref().is_some_and(|s| s.held))
        .count();
    let text = if json {
        serde_json::to_string_pretty(&ForcedRelease {
            name,
            key: keys.key(),
            released: removed_on > 0,
            removed_on,
            nodes: reports,
        })?
    } else {
        let mut out = if removed_on > 0 {
            format!(
                "removed lock `{name}` (key {}) from {removed_on} of {} nodes; fencing counters stay:",
                keys.key(),
                nodes.len()
            )
        } else {
            format!(
                "lock `{name}` (key {}) is not held on any of the {} nodes; nothing removed:",
                keys.key(),
                nodes.len()
            )
        };
        for report in &reports {
            let line = node_line(report).replacen("held: ", "removed ", 1);
            let _ = write!(out, "\n  {}  {line}", report.node);
        }
        out
    };
    print(&text)?;
    Ok(exit::code(if removed_on > 0 { 0 } else { exit::NEGATIVE }))
}
