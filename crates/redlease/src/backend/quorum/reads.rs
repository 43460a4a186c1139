//! What a majority of a quorum's nodes say of a lock when asked: whether a lease is still
//! held, who leads an election.

use std::collections::HashMap;

use redis::RedisResult;

use crate::backend::deployment::Deployment;
use crate::error::{Error, NodeError, Result};
use crate::replies;

/// The majority needed, or the error when fewer nodes than that answered a read.
fn too_few_answered<T>(deployment: &Deployment, answers: &[RedisResult<T>]) -> Result<usize> {
    let needed = deployment.majority();
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    if answered >= needed {
        return Ok(needed);
    }
    let errors = answers
        .iter()
        .zip(&deployment.nodes)
        .filter_map(|(answer, node)| {
            answer.as_ref().err().map(|error| NodeError {
                node: node.label.clone(),
                error: error.clone(),
            })
        })
        .collect();
    Err(Error::NoQuorum {
        what: "answered",
        acquired: answered,
        needed,
        errors,
    })
}

/// Whether a majority of nodes say that a lease holds its token (`holds.lua`'s answers):
/// a lease a majority no longer confirms is not held.
pub(crate) fn holds(deployment: &Deployment, answers: Vec<RedisResult<bool>>) -> Result<bool> {
    let needed = too_few_answered(deployment, &answers)?;
    Ok(answers
        .into_iter()
        .filter(|a| matches!(a, Ok(true)))
        .count()
        >= needed)
}
/// The holder a majority of `answers` (one per node) name, with its term and the shortest
/// remaining lease among them; `None` when no token is on a majority.
///
/// An election's leader is named only once a majority of the nodes answering hold its
/// token **and** its term record (written by its acquisition once a majority granted it,
/// see `acquire`), and with that term: between the majority's grants and that record, the
/// nodes' counters may still differ (a grant in the next fencing step, a counter not
/// written back yet), and any value read from them could be a term never granted. A
/// leader whose record is not on a majority yet is reported as nobody: it has not been
/// granted leadership yet; so is the holder of a plain lock of the same name (no record).
pub(crate) fn leader(
    deployment: &Deployment,
    answers: Vec<RedisResult<Option<replies::Holder>>>,
) -> Result<Option<replies::Holder>> {
    let needed = too_few_answered(deployment, &answers)?;
    let mut by_token: HashMap<String, Vec<replies::Holder>> = HashMap::new();
    for holder in answers.into_iter().flatten().flatten() {
        by_token
            .entry(holder.token.clone())
            .or_default()
            .push(holder);
    }
    let Some(mut holders) = by_token.into_values().find(|h| h.len() >= needed) else {
        return Ok(None);
    };
    let pttl = holders.iter().map(|h| h.pttl).min().unwrap_or(-1);
    // The term a majority recorded for this token (an earlier attempt of the same
    // acquisition that gave back may have left another one on a minority).
    let recorded: Vec<u64> = holders.iter().filter_map(|h| h.term).collect();
    let Some(&term) = recorded
        .iter()
        .find(|t| recorded.iter().filter(|u| u == t).count() >= needed)
    else {
        return Ok(None);
    };
    // The note most of these nodes give: a proclaim reaches the nodes one by one, and a
    // node it missed keeps the earlier note (a tie, while one is under way, goes to the
    // first node's).
    let mut best = 0;
    let mut best_count = 0;
    for (i, holder) in holders.iter().enumerate() {
        let count = holders
            .iter()
            .filter(|h| h.details == holder.details)
            .count();
        if count > best_count {
            (best, best_count) = (i, count);
        }
    }
    let mut leader = holders.swap_remove(best);
    leader.fence = term;
    leader.pttl = pttl;
    Ok(Some(leader))
}
