//! What [`Client::inspect`](crate::Client::inspect) reports of a name: its holders, its
//! waiters and its fencing counter, read from its keys without taking anything; and the
//! wire format of those reads (the replies of `backend`'s inspection pipelines).
//!
//! A reading keeps the owner tokens it found, so that a quorum's readings can be matched
//! token by token ([`agree`]); what leaves this module shows only their first hex digits
//! (a token is its holder's secret: whoever knows it can release or extend the lease).

use std::collections::HashMap;
use std::time::Duration;

use crate::error::{Error, NodeError, Result};
use crate::keys::Primitive;
use crate::token::FencingToken;

/// How many characters of a token an inspection shows (and never more than half of it).
const SHOWN: usize = 8;

/// A read-write lock's mode: how it is held, or how a waiter wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Access {
    /// Shared: any number of readers.
    Read,
    /// Exclusive: one writer.
    Write,
}

impl Access {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            _ => None,
        }
    }
}

/// One holder of a lock, of a semaphore's permit or of a read-write lock's hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The first hex digits of its owner token (never all of it: the token is the
    /// holder's secret), enough to tell holders apart.
    pub token_prefix: String,
    /// The fencing token of its acquisition, when known.
    pub fencing_token: Option<FencingToken>,
    /// Its lease left, by the server's clock; `None` for a lock set without expiry.
    pub remaining: Option<Duration>,
    /// Its holder details (`host=... pid=...` and the client's holder note), if recorded.
    pub details: Option<String>,
    /// How many permits the hold counts for: more than 1 for a semaphore's permit taken
    /// with [`acquire_many`](crate::Semaphore::acquire_many), 1 otherwise.
    pub permits: u32,
}

/// One waiter queued for a name (a FIFO place, served in this order).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// The first hex digits of its owner token.
    pub token_prefix: String,
    /// How long it has waited, by the server's clock; `None` for a place taken by a
    /// version of redlease that did not record the time.
    pub waited: Option<Duration>,
    /// Its holder details, as it will record them once it holds.
    pub details: Option<String>,
    /// What a read-write lock's waiter asks for; `None` for the other primitives.
    pub access: Option<Access>,
    /// How many permits it asks for: more than 1 for a semaphore's waiter in
    /// [`acquire_many`](crate::Semaphore::acquire_many), 1 otherwise.
    pub permits: u32,
}

/// What one node says of a name, or what a majority of a quorum's nodes agree on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Snapshot {
    /// Which primitive holds the name; `None` while nothing does.
    pub primitive: Option<Primitive>,
    /// A held read-write lock's mode.
    pub access: Option<Access>,
    /// A semaphore's permit count (while it is held or waited for, and a count set by
    /// [`Semaphore::resize`](crate::Semaphore::resize) while it is kept).
    pub permits: Option<u32>,
    /// Every holder: one for a lock, each permit or each reader otherwise.
    pub holders: Vec<Holding>,
    /// The queued waiters, the next one to be served first.
    pub waiters: Vec<Waiting>,
    /// The fencing counter: the token of the latest acquisition of the name (whichever
    /// primitive made it); the next one is larger. `None` before the first.
    pub fencing_counter: Option<FencingToken>,
}

impl Snapshot {
    /// Whether anyone holds the name.
    #[must_use]
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// One node of a quorum and what it said, or why it did not answer.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeSnapshot {
    /// The node's address, password redacted.
    pub node: String,
    /// Its snapshot, or its error.
    pub snapshot: Result<Snapshot>,
}

/// A name's state, as [`Client::inspect`](crate::Client::inspect) read it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The name's Redis key (prefix and name).
    pub key: String,
    /// The state: the one node's, or, over a quorum, what a majority of the nodes agree
    /// on (a holder a majority of them name, with the time left and fencing token a
    /// majority reached; every waiter any node queues).
    pub snapshot: Snapshot,
    /// Over a quorum, each node's own snapshot (in the client's order); empty otherwise.
    pub nodes: Vec<NodeSnapshot>,
}

impl Inspection {
    /// Whether anyone holds the name (over a quorum: on a majority of the nodes).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.snapshot.is_held()
    }
}

/// A snapshot that still knows the owner tokens it found (crate only).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    primitive: Option<Primitive>,
    access: Option<Access>,
    permits: Option<u32>,
    holders: Vec<(String, Holding)>,
    waiters: Vec<(String, Waiting)>,
    fencing_counter: Option<u64>,
}

impl Reading {
    /// The snapshot, tokens cut to their prefixes.
    pub(crate) fn snapshot(self) -> Snapshot {
        Snapshot {
            primitive: self.primitive,
            access: self.access,
            permits: self.permits,
            holders: self.holders.into_iter().map(|(_, h)| h).collect(),
            waiters: self.waiters.into_iter().map(|(_, w)| w).collect(),
            fencing_counter: self.fencing_counter.map(FencingToken::new),
        }
    }
}

/// The first characters of `token`: at most [`SHOWN`], and never more than half of it.
fn prefix(token: &str) -> String {
    token
        .chars()
        .take((token.chars().count() / 2).min(SHOWN))
        .collect()
}

/// The reply of a lock's inspection pipeline: the token at `K`, its PTTL, the fencing
/// counter, the holder details, the queue, the waiter table, the server's `TIME` and the
/// token at `K` read again.
pub(crate) type LockReply = (
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
    Vec<String>,
    HashMap<String, String>,
    (u64, u64),
    Option<String>,
);

/// The reply of a semaphore's or read-write lock's inspection pipeline: the holds (token,
/// expiry ms), the holder table, the permit count or the mode, the fencing counter, the
/// queue, the waiter table, the server's `TIME`, and the holds' tokens read again.
pub(crate) type LeaseReply = (
    Vec<(String, f64)>,
    HashMap<String, String>,
    Option<String>,
    Option<String>,
    Vec<String>,
    HashMap<String, String>,
    (u64, u64),
    Vec<String>,
);

/// A lock's holder details key as `acquire.lua` writes it, `"<fence> <details>"`: the
/// holder's fencing token and the details for operators (all of it as details when it
/// does not start with a token).
pub(crate) fn split_details(recorded: Option<String>) -> (Option<u64>, Option<String>) {
    let Some(recorded) = recorded else {
        return (None, None);
    };
    match recorded.split_once(' ') {
        Some((fence, rest)) if !fence.is_empty() && fence.bytes().all(|b| b.is_ascii_digit()) => {
            (fence.parse().ok(), Some(rest.to_owned()))
        }
        _ => (None, Some(recorded)),
    }
}

/// A lock's reading, and whether its key kept its token during the read (else it changed
/// hands in between, and the read is worth repeating).
pub(crate) fn lock(reply: LockReply) -> (Reading, bool) {
    let (token, pttl, fence, details, queue, table, time, token_after) = reply;
    let settled = token == token_after;
    let now = ms_of(time);
    let (held_fence, details) = split_details(details);
    // The counter may have expired or been deleted during a long hold: the holder's own
    // token (recorded with its details) is then the latest grant.
    let fencing_counter = fence.and_then(|f| f.parse().ok()).or(held_fence);
    let holders = token
        .map(|token| {
            let holding = Holding {
                token_prefix: prefix(&token),
                fencing_token: held_fence.or(fencing_counter).map(FencingToken::new),
                remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
                details: details.filter(|d| !d.is_empty()),
                permits: 1,
            };
            (token, holding)
        })
        .into_iter()
        .collect::<Vec<_>>();
    let reading = Reading {
        primitive: (!holders.is_empty()).then_some(Primitive::Lock),
        holders,
        waiters: waiters(Primitive::Lock, &queue, &table, now),
        fencing_counter,
        ..Reading::default()
    };
    (reading, settled)
}

/// A semaphore's or read-write lock's reading, and whether its holds stayed the same
/// during the read.
pub(crate) fn leases(primitive: Primitive, reply: LeaseReply) -> (Reading, bool) {
    let (expiries, table, extra, fence, queue, waiter_table, time, after) = reply;
    let now = ms_of(time);
    let settled = expiries.iter().map(|(t, _)| t).eq(after.iter());
    let holders: Vec<(String, Holding)> = expiries
        .into_iter()
        .filter_map(|(token, expiry)| {
            // Whole milliseconds since 1970, stored as a ZSET score.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a ms timestamp, far below 2^53"
            )]
            let expiry = expiry.max(0.0) as u64;
            // A hold whose lease has run out is reclaimed by the next script: not held.
            let left = expiry.checked_sub(now).filter(|&ms| ms > 0)?;
            let entry = table.get(&token).map(|e| json_array(e)).unwrap_or_default();
            let holding = Holding {
                token_prefix: prefix(&token),
                fencing_token: entry.first().and_then(number).map(FencingToken::new),
                remaining: Some(Duration::from_millis(left)),
                details: entry.get(1).and_then(text),
                // A semaphore's holder of n > 1 permits: `[fence, details, n]`.
                permits: if primitive == Primitive::Semaphore {
                    permits_of(&entry, 2)
                } else {
                    1
                },
            };
            Some((token, holding))
        })
        .collect();
    let (permits, access, counted) = match primitive {
        Primitive::Semaphore => (extra.as_deref().and_then(stored_permits), None, false),
        Primitive::RwLock => (None, extra.as_deref().and_then(Access::parse), false),
        _ => (None, None, extra.is_some_and(|n| n != "0")),
    };
    // A semaphore is in use while its permit count is stored, a read-write lock while its
    // mode is, a latch while it has counts: a ZSET, hash or SET under the prefix without
    // them is someone else's key.
    let ours = permits.is_some() || access.is_some() || counted;
    let held = ours && !holders.is_empty();
    let reading = Reading {
        primitive: held.then_some(primitive),
        access: access.filter(|_| held),
        permits,
        holders: if held { holders } else { Vec::new() },
        waiters: if ours {
            waiters(primitive, &queue, &waiter_table, now)
        } else {
            Vec::new()
        },
        fencing_counter: fence.and_then(|f| f.parse().ok()),
    };
    (reading, settled)
}

/// The waiters of `queue` (in its order) with their waiter records (a cjson object, the
/// same for every primitive: see `scripts/lib/grants.lua`). A place without a record, a
/// notice mark (`~`) or a read-write lock's silent place whose waiter stopped coming back
/// (its `till` passed) is no waiter (the next script drops it).
fn waiters(
    primitive: Primitive,
    queue: &[String],
    table: &HashMap<String, String>,
    now: u64,
) -> Vec<(String, Waiting)> {
    let rw = primitive == Primitive::RwLock;
    queue
        .iter()
        .filter_map(|token| {
            let record = WaiterRecord::parse(table.get(token)?)?;
            if rw && record.ch.is_empty() && record.till.is_none_or(|till| till < now) {
                return None;
            }
            let waiting = Waiting {
                token_prefix: prefix(token),
                waited: record
                    .since
                    .map(|since| Duration::from_millis(now.saturating_sub(since))),
                details: Some(record.who).filter(|who| !who.is_empty()),
                access: if rw {
                    record.mode.as_deref().and_then(Access::parse)
                } else {
                    None
                },
                permits: record.n.filter(|&n| n >= 1).unwrap_or(1),
            };
            Some((token.clone(), waiting))
        })
        .collect()
}

/// A waiter record as the scripts write it (`scripts/lib/grants.lua`): numbers are decimal
/// strings (or numbers), absent fields are absent.
#[derive(Debug, Default)]
struct WaiterRecord {
    /// The grant channel; empty for a silent place.
    ch: String,
    /// Holder details.
    who: String,
    /// When the place was taken (ms since 1970).
    since: Option<u64>,
    /// A semaphore request's permits, when more than one.
    n: Option<u32>,
    /// A read-write lock's `read` or `write`.
    mode: Option<String>,
    /// A read-write lock's silent place's end (ms since 1970).
    till: Option<u64>,
}

impl WaiterRecord {
    /// The record of a waiter table's entry; `None` when it is no cjson object.
    fn parse(entry: &str) -> Option<Self> {
        let serde_json::Value::Object(fields) = serde_json::from_str(entry).ok()? else {
            return None;
        };
        let text = |name: &str| fields.get(name).and_then(serde_json::Value::as_str);
        let whole = |name: &str| fields.get(name).and_then(number);
        Some(Self {
            ch: text("ch").unwrap_or_default().to_owned(),
            who: text("who").unwrap_or_default().to_owned(),
            since: whole("since"),
            n: whole("n").and_then(|n| u32::try_from(n).ok()),
            mode: text("mode").map(str::to_owned),
            till: whole("till"),
        })
    }
}

/// Ms since 1970 of a `TIME` reply.
fn ms_of((secs, micros): (u64, u64)) -> u64 {
    secs.saturating_mul(1000).saturating_add(micros / 1000)
}

/// The elements of a table entry (a cjson array), or none when it is not one.
fn json_array(entry: &str) -> Vec<serde_json::Value> {
    match serde_json::from_str(entry) {
        Ok(serde_json::Value::Array(parts)) => parts,
        _ => Vec::new(),
    }
}

/// A whole number, written as a decimal string (as the scripts store them) or a number.
fn number(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::String(s) => s.parse().ok(),
        other => other.as_u64(),
    }
}

/// The permit count at `at` of a semaphore's table entry: 1 when absent (a single
/// permit's entry has no count) or not a whole number >= 1.
/// A semaphore's stored permit count: `"<n>"`, or `"<n>!<keep>"` when a resize set it
/// (see `scripts/lib/semaphore.lua`, `stored_count`).
fn stored_permits(stored: &str) -> Option<u32> {
    stored
        .split_once('!')
        .map_or(stored, |(n, _)| n)
        .parse()
        .ok()
}

fn permits_of(entry: &[serde_json::Value], at: usize) -> u32 {
    entry
        .get(at)
        .and_then(number)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A non-empty string.
fn text(value: &serde_json::Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// What a majority of a quorum's nodes agree on, from each node's reading: a holder
/// whose token a majority name, with the time left and the fencing token a majority
/// reached (the lease holds while a majority hold it); every waiter some node queues
/// (the longest wait); the counter a majority reached.
///
/// # Errors
/// [`Error::NoQuorum`] when fewer than `majority` nodes answered and `lenient` is off;
/// with `lenient` (a forced release, which reports node by node), only when none did.
pub(crate) fn agree(
    answers: &[(String, redis::RedisResult<Reading>)],
    majority: usize,
    lenient: bool,
) -> Result<Reading> {
    let readings: Vec<&Reading> = answers
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let enough = if lenient { 1 } else { majority };
    if readings.len() < enough {
        let errors = answers
            .iter()
            .filter_map(|(node, r)| {
                r.as_ref().err().map(|e| NodeError {
                    node: node.clone(),
                    error: e.clone(),
                })
            })
            .collect();
        return Err(Error::NoQuorum {
            what: "answered",
            acquired: readings.len(),
            needed: majority,
            errors,
        });
    }
    // The `majority`-th largest of `values` (the smallest when fewer are given).
    let reached = |mut values: Vec<u64>| {
        values.sort_unstable_by(|a, b| b.cmp(a));
        values
            .get(majority.min(values.len()).saturating_sub(1))
            .copied()
    };
    let mut by_token: HashMap<&str, Vec<&Holding>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for reading in &readings {
        for (token, holding) in &reading.holders {
            let entry = by_token.entry(token.as_str()).or_default();
            if entry.is_empty() {
                order.push(token);
            }
            entry.push(holding);
        }
    }
    let mut holders = Vec::new();
    for token in order {
        let found = &by_token[token];
        let Some(first) = found.first().filter(|_| found.len() >= majority) else {
            continue;
        };
        let lefts: Option<Vec<u64>> = found
            .iter()
            .map(|h| {
                h.remaining
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            })
            .collect();
        let fences: Vec<u64> = found
            .iter()
            .filter_map(|h| h.fencing_token.map(FencingToken::get))
            .collect();
        holders.push((
            token.to_owned(),
            Holding {
                token_prefix: first.token_prefix.clone(),
                fencing_token: reached(fences).map(FencingToken::new),
                remaining: lefts.and_then(reached).map(Duration::from_millis),
                details: first.details.clone(),
                permits: first.permits,
            },
        ));
    }
    let mut waiters: Vec<(String, Waiting)> = Vec::new();
    for reading in &readings {
        for (token, waiting) in &reading.waiters {
            match waiters.iter_mut().find(|(t, _)| t == token) {
                Some((_, known)) => known.waited = known.waited.max(waiting.waited),
                None => waiters.push((token.clone(), waiting.clone())),
            }
        }
    }
    // Longest waiting first: the order the nodes' queues agree on.
    waiters.sort_by_key(|(_, w)| std::cmp::Reverse(w.waited));
    let holding = readings.iter().find(|r| {
        r.holders
            .iter()
            .any(|(t, _)| holders.iter().any(|(held, _)| held == t))
    });
    Ok(Reading {
        primitive: holding.and_then(|r| r.primitive),
        access: holding.and_then(|r| r.access),
        permits: readings.iter().find_map(|r| r.permits),
        holders,
        waiters,
        fencing_counter: reached(readings.iter().filter_map(|r| r.fencing_counter).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_never_show_a_whole_token() {
        assert_eq!(prefix("0123456789abcdef0123456789abcdef"), "01234567");
        assert_eq!(prefix("abcd"), "ab");
        assert_eq!(prefix("a"), "");
    }
}
