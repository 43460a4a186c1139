//! What `status`, `list`, `release --force` and `run`'s busy message show of one lock,
//! semaphore or read-write lock ([`LockState`]), made from what `Client::inspect` read,
//! and its JSON. A leaf of `operator/`: the single-node and the quorum views use it.

use std::fmt::Write as _;
use std::time::Duration;

use redlease::{Access, Primitive, Snapshot};
use serde::Serialize;

use crate::output::{shown, time_left};

/// What a name is: the type of its key `K` tells (a string, a ZSET, a hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// A lock (mutex): `K` is a string, the owner token.
    Lock,
    /// A semaphore: `K` is a ZSET of permits, token -> lease expiry.
    Semaphore,
    /// A read-write lock: `K` is a hash with the mode.
    Rwlock,
}

/// One holder of a lock, a semaphore's permit or a read-write lock's hold.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Holder {
    /// The first hex digits of its token (never all of it), in ASCII: text adds `…`.
    pub(crate) token_prefix: String,
    /// The fencing token of its acquisition.
    pub(crate) fencing_token: Option<u64>,
    /// Its lease left, in ms; `None` without expiry.
    pub(crate) remaining_ms: Option<u64>,
    /// Its details (host, pid, command).
    pub(crate) details: Option<String>,
    /// How many of a semaphore's permits it holds (1 for the other primitives).
    pub(crate) permits: u32,
}

impl Holder {
    /// `holder 1a2b3c4d… (host=... pid=...), 12s left`.
    pub(crate) fn summary(&self) -> String {
        let mut out = format!("holder {}", shown(&self.token_prefix));
        if self.permits > 1 {
            let _ = write!(out, " of {} permits", self.permits);
        }
        if let Some(details) = &self.details {
            let _ = write!(out, " ({details})");
        }
        let _ = write!(out, ", {}", time_left(self.remaining_ms));
        out
    }
}

/// One waiter queued for a lock, semaphore or read-write lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Waiter {
    /// The first hex digits of its token, in ASCII: text adds `…`.
    pub(crate) token_prefix: String,
    /// How long it has waited, in ms (`None`: a place of an older redlease).
    pub(crate) waited_ms: Option<u64>,
    /// Its details (host, pid, command).
    pub(crate) details: Option<String>,
    /// What a read-write lock's waiter asks for: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wants: Option<&'static str>,
    /// How many of a semaphore's permits it asks for (1 for the other primitives).
    pub(crate) permits: u32,
}

/// What the keys of one lock, semaphore or read-write lock say.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockState {
    /// The name (left out of the JSON when empty: a quorum node's entry, whose name and
    /// key the answer says once, above its nodes).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) name: String,
    /// Its Redis key (left out when empty, as the name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) key: String,
    /// A lock, a semaphore or a read-write lock.
    pub(crate) kind: Kind,
    /// A semaphore's permit count (while it is in use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
    /// A read-write lock's mode while held: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<String>,
    /// Whether someone holds it.
    pub(crate) held: bool,
    /// The fencing counter: the token of the latest acquisition.
    pub(crate) fencing_counter: Option<u64>,
    /// Every holder (one for a lock; each permit or hold for the others). Each field is
    /// said once: a lock's holder is `holders[0]`, the number of waiters the length of
    /// `waiters`.
    pub(crate) holders: Vec<Holder>,
    /// Each queued waiter, the next one to be served first.
    pub(crate) waiters: Vec<Waiter>,
    /// The node this was read from, when the locks live on a quorum of nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
}

impl LockState {
    /// One line for messages: `holder 1a2b3c4d… (host=... pid=...), 12s left`, and for a
    /// semaphore or read-write lock what holds it and each holder.
    pub(crate) fn holder_summary(&self) -> String {
        let holders = || {
            self.holders
                .iter()
                .map(Holder::summary)
                .collect::<Vec<_>>()
                .join("; ")
        };
        match self.kind {
            Kind::Lock => match self.holders.first() {
                Some(holder) => holder.summary(),
                None => "holder (unknown)".to_owned(),
            },
            Kind::Semaphore => format!(
                "{} of {} permits held: {}",
                self.permits_held(),
                self.permits
                    .map_or_else(|| "?".to_owned(), |n| n.to_string()),
                holders()
            ),
            Kind::Rwlock => match self.mode.as_deref() {
                Some("read") => {
                    format!("held for reading by {}: {}", self.holders.len(), holders())
                }
                _ => format!("held for writing: {}", holders()),
            },
        }
    }

    /// How many of a semaphore's permits its holders hold (a holder may hold several).
    pub(crate) fn permits_held(&self) -> u32 {
        self.holders.iter().map(|h| h.permits).sum()
    }

    /// `lock`, `semaphore 3`, `rwlock read`.
    pub(crate) fn kind_label(&self) -> String {
        match (self.kind, self.permits, self.mode.as_deref()) {
            (Kind::Lock, ..) => "lock".into(),
            (Kind::Semaphore, Some(n), _) => format!("semaphore {n}"),
            (Kind::Semaphore, None, _) => "semaphore".into(),
            (Kind::Rwlock, _, Some(mode)) => format!("rwlock {mode}"),
            (Kind::Rwlock, _, None) => "rwlock".into(),
        }
    }

    /// `lock`, `semaphore`, `read-write lock`: the heading of `status`.
    pub(crate) fn noun(&self) -> &'static str {
        match self.kind {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::Rwlock => "read-write lock",
        }
    }
}

impl Waiter {
    pub(crate) fn of(waiting: &redlease::Waiting) -> Self {
        Self {
            token_prefix: waiting.token_prefix.clone(),
            waited_ms: waiting.waited.map(millis),
            details: waiting.details.clone(),
            wants: waiting.access.map(access_name),
            permits: waiting.permits,
        }
    }
}

impl LockState {
    /// What `snapshot` (read by `Client::inspect`) says of `name`, for printing.
    pub(crate) fn of(name: &str, key: &str, snapshot: &Snapshot) -> Self {
        let kind = match snapshot.primitive {
            Some(Primitive::Semaphore) => Kind::Semaphore,
            Some(Primitive::RwLock) => Kind::Rwlock,
            // A semaphore keeps its permit count while it is waited for.
            _ if snapshot.permits.is_some() => Kind::Semaphore,
            _ => Kind::Lock,
        };
        let holders: Vec<Holder> = snapshot
            .holders
            .iter()
            .map(|h| Holder {
                token_prefix: h.token_prefix.clone(),
                fencing_token: h.fencing_token.map(redlease::FencingToken::get),
                remaining_ms: h.remaining.map(millis),
                details: h.details.clone(),
                permits: h.permits,
            })
            .collect();
        Self {
            name: name.to_owned(),
            key: key.to_owned(),
            kind,
            permits: snapshot.permits,
            mode: snapshot.access.map(|a| access_name(a).to_owned()),
            held: snapshot.is_held(),
            fencing_counter: snapshot.fencing_counter.map(redlease::FencingToken::get),
            waiters: snapshot.waiters.iter().map(Waiter::of).collect(),
            holders,
            node: None,
        }
    }
}

/// `read` or `write`.
fn access_name(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        _ => "write",
    }
}

/// Whole milliseconds of `d`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
