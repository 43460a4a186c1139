//! `redlease status`, `redlease list` and `redlease release --force`: what operators see of
//! a lock, read straight from its keys (see `redlease::LockKeys`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redlease::LockKeys;
use serde::Serialize;

use crate::connect::{Node, RedisArgs};
use crate::exit;

mod quorum;

/// `--help` of `redlease status`.
pub(crate) const STATUS_ABOUT: &str = "\
Show who holds a lock and for how long.

Reads the lock's keys in one round trip and prints: whether it is held, the first
hex digits of the holder's owner token (never the whole token: it is the holder's secret),
the time left on its lease, the lock's fencing counter (the fencing token of the latest
acquisition; the next one gets a larger number), the holder's details (host, pid and, for
redlease run, the command's name) and how many waiters are queued.

With several --redis URLs (a quorum of independent nodes) each node is read and shown on
its own line; the lock is held when one owner holds it on a majority of the nodes. Nodes
that cannot be reached are shown as such; fewer than a majority answering exits with 69.

Examples:
  redlease status nightly-report
  redlease status --json nightly-report | jq .ttl_ms
  if redlease status nightly-report >/dev/null; then echo busy; fi";

/// `--help` of `redlease list`.
pub(crate) const LIST_ABOUT: &str = "\
List the locks that are held now.

Walks the keyspace with SCAN (never KEYS, which blocks Redis) for keys PREFIX+PATTERN,
skips the locks' side keys (fencing counters, holder details, queues), and prints one line
per held lock: name, holder token prefix, time left, fencing counter, queued waiters and
holder details; with several --redis URLs, one line per node that holds it, with a NODE
column. PATTERN is a Redis glob (*, ?, [abc]) over lock names; the default lists
them all. With --prefix '' every string key matching PATTERN is taken for a lock.

Examples:
  redlease list
  redlease list 'deploy-*'
  redlease list --json | jq -r '.[].name'";

/// `--help` of `redlease release`.
pub(crate) const RELEASE_ABOUT: &str = "\
Remove a lock that its holder cannot release (operators only).

Deletes the lock key and its holder details and says what it removed (read in the same
round trip, just before): the holder's token prefix, the time its lease had left, its
details. The fencing
counter stays, so the next holder still gets a larger fencing token. The old holder is not
told: it finds the lock lost at its next renewal (a redlease run then terminates its
command). Waiters queued for the lock notice within a fraction of a second.

This breaks mutual exclusion if the holder is alive and working: prefer waiting for its
lease to run out. Hence --force, which is required. With several --redis URLs (a quorum)
the lock is removed on every node that answers, and each node's outcome is shown.

Examples:
  redlease release --force nightly-report";

/// Arguments of `redlease status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// The lock's name (as given to redlease run --key or to the library)
    #[arg(value_name = "NAME")]
    name: String,

    /// Print one JSON object on stdout instead of text
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    redis: RedisArgs,
}

/// Arguments of `redlease list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Redis glob over lock names (*, ?, [abc])
    #[arg(value_name = "PATTERN", default_value = "*")]
    pattern: String,

    /// Print one JSON array on stdout instead of a table
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    redis: RedisArgs,
}

/// Arguments of `redlease release`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    /// The lock's name
    #[arg(value_name = "NAME")]
    name: String,

    /// Required: remove the lock whoever holds it
    #[arg(long, required = true)]
    force: bool,

    /// Print one JSON object on stdout instead of text
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    redis: RedisArgs,
}

/// What the keys of one lock say.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockState {
    /// The lock's name.
    pub(crate) name: String,
    /// Its Redis key.
    pub(crate) key: String,
    /// Whether someone holds it.
    pub(crate) held: bool,
    /// The first hex digits of the holder's token (never all of it).
    pub(crate) token_prefix: Option<String>,
    /// The holder's lease left, in ms; `None` when free or without expiry.
    pub(crate) ttl_ms: Option<u64>,
    /// The fencing counter: the token of the latest acquisition.
    pub(crate) fencing_counter: Option<u64>,
    /// Holder details (host, pid, command).
    pub(crate) holder: Option<String>,
    /// Waiters in the lock's queue.
    pub(crate) waiters: u64,
    /// The node this was read from, when the locks live on a quorum of nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
}

impl LockState {
    /// One line for messages: `holder 1a2b3c4d… (host=... pid=...), 12s left`.
    pub(crate) fn holder_summary(&self) -> String {
        let mut out = format!(
            "holder {}",
            self.token_prefix.as_deref().unwrap_or("(unknown)")
        );
        if let Some(holder) = &self.holder {
            let _ = write!(out, " ({holder})");
        }
        let _ = write!(out, ", {}", time_left(self.ttl_ms));
        out
    }
}

/// `12s 300ms left`, or `no expiry`.
fn time_left(ttl_ms: Option<u64>) -> String {
    match ttl_ms {
        Some(ms) => format!("{} left", human(Duration::from_millis(ms))),
        None => "no expiry".into(),
    }
}

/// A duration for people: whole seconds from 10 s up, else milliseconds.
pub(crate) fn human(d: Duration) -> String {
    let d = if d >= Duration::from_secs(10) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    humantime::format_duration(d).to_string()
}

/// At most the first 8 characters of `token`, and never more than half of it, then `…`:
/// enough to tell holders apart, never enough to impersonate one.
pub(crate) fn token_prefix(token: &str) -> String {
    let n = (token.chars().count() / 2).min(8);
    let mut out: String = token.chars().take(n).collect();
    out.push('…');
    out
}

fn keys_of(redis: &RedisArgs, name: &str) -> anyhow::Result<LockKeys> {
    Ok(LockKeys::new(&redis.prefix, name)?)
}

/// How many times [`read`] reads again when the lock changed hands during a read.
const READ_TRIES: u32 = 5;

/// Reads the state of the lock whose keys are `keys`.
///
/// The keys are read in one pipeline, not in a `MULTI` transaction: an operator's ACL
/// user needs no `+multi +exec` (and redis-rs miscounts the replies of a `MULTI` that the
/// ACL refuses, failing with only "broken pipe"). Scripts run atomically, so the lock
/// changed hands between the pipeline's commands only if its key changed: the key is read
/// again last, and the whole read repeated (a few times) when it did.
pub(crate) async fn read(
    conn: &mut MultiplexedConnection,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<LockState> {
    let mut tries = 0;
    loop {
        tries += 1;
        let (token, pttl, fence, holder, waiters, token_after): (
            Option<String>,
            i64,
            Option<String>,
            Option<String>,
            u64,
            Option<String>,
        ) = redis::pipe()
            .get(keys.key())
            .pttl(keys.key())
            .get(keys.fence())
            .get(keys.holder())
            .llen(keys.queue())
            .get(keys.key())
            .query_async(conn)
            .await
            .with_context(|| format!("reading lock `{name}` (key {})", keys.key()))?;
        if token == token_after || tries >= READ_TRIES {
            return Ok(LockState::new(
                name,
                keys,
                (token, pttl, fence, holder, waiters),
            ));
        }
    }
}

/// The lock's token, PTTL, fencing counter, holder details and one more integer (queue
/// length, or keys deleted), as one pipeline returns them.
type Reply = (Option<String>, i64, Option<String>, Option<String>, u64);

impl LockState {
    fn new(name: &str, keys: &LockKeys, reply: Reply) -> Self {
        let (token, pttl, fence, holder, waiters) = reply;
        Self {
            name: name.to_owned(),
            key: keys.key().to_owned(),
            held: token.is_some(),
            token_prefix: token.as_deref().map(token_prefix),
            ttl_ms: token.as_ref().and(u64::try_from(pttl).ok()),
            fencing_counter: fence.and_then(|f| f.parse().ok()),
            holder: token.as_ref().and(holder),
            waiters,
            node: None,
        }
    }
}

/// `redlease status`.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let keys = keys_of(&args.redis, &args.name)?;
    let nodes = args.redis.nodes().await?;
    let [node] = nodes.as_slice() else {
        return quorum::status(&nodes, &args.name, &keys, args.json).await;
    };
    let mut conn = connection(node)?;
    let state = read(&mut conn, &args.name, &keys).await?;
    let text = if args.json {
        serde_json::to_string_pretty(&state)?
    } else {
        render_status(&state)
    };
    print(&text)?;
    Ok(exit::code(if state.held { 0 } else { exit::NEGATIVE }))
}

fn render_status(state: &LockState) -> String {
    let fence = state
        .fencing_counter
        .map_or_else(|| "none yet".to_owned(), |f| f.to_string());
    if !state.held {
        return format!(
            "lock `{}` (key {}): free; fencing counter {fence}",
            state.name, state.key
        );
    }
    let mut out = format!("lock `{}` (key {}): held\n", state.name, state.key);
    let rows = [
        (
            "holder token",
            state.token_prefix.clone().unwrap_or_default(),
        ),
        ("time left", time_left(state.ttl_ms).replace(" left", "")),
        ("fencing token", fence),
        ("holder", state.holder.clone().unwrap_or_else(|| "-".into())),
        ("queued waiters", state.waiters.to_string()),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:<15} {value}");
    }
    out.truncate(out.trim_end().len());
    out
}

/// `redlease list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let nodes = args.redis.nodes().await?;
    let mut states = Vec::new();
    for node in &nodes {
        let mut conn = match (&node.conn, nodes.len()) {
            (Ok(conn), _) => conn.clone(),
            (Err(e), 1) => anyhow::bail!("{e}"),
            (Err(e), _) => {
                eprintln!("redlease: warning: skipping node {}: {e}", node.url);
                continue;
            }
        };
        let mut found = held_locks(&mut conn, &args.redis.prefix, &args.pattern).await?;
        if nodes.len() > 1 {
            for state in &mut found {
                state.node = Some(node.url.clone());
            }
        }
        states.extend(found);
    }
    let text = if args.json {
        serde_json::to_string_pretty(&states)?
    } else {
        render_list(&states)
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The locks held on one node whose names match `pattern`, by SCAN.
async fn held_locks(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    pattern: &str,
) -> anyhow::Result<Vec<LockState>> {
    let pattern = format!("{}{pattern}", glob_escape(prefix));
    let mut found = BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .arg("TYPE")
            .arg("string")
            .query_async(conn)
            .await
            .context("scanning for locks")?;
        found.extend(batch.into_iter().filter(|k| !is_side_key(k)));
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut states = Vec::new();
    for key in found {
        let Some(name) = key.strip_prefix(prefix) else {
            continue;
        };
        let Ok(keys) = LockKeys::from_key(key.clone()) else {
            continue;
        };
        let state = read(conn, name, &keys).await?;
        // Released or expired between the scan and the read.
        if state.held {
            states.push(state);
        }
    }
    Ok(states)
}

fn render_list(states: &[LockState]) -> String {
    if states.is_empty() {
        return "no locks held".into();
    }
    let name_width = states
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let node_width = states
        .iter()
        .filter_map(|s| s.node.as_ref().map(|n| n.chars().count() + 2))
        .max()
        .unwrap_or(0);
    let node_header = if node_width > 0 { "NODE" } else { "" };
    let mut out = format!(
        "{node_header:<node_width$}{:<name_width$}  {:<9}  {:>10}  {:>8}  {:>7}  HOLDER\n",
        "NAME", "TOKEN", "TIME LEFT", "FENCING", "WAITERS"
    );
    for s in states {
        let left = s
            .ttl_ms
            .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms)));
        let fence = s
            .fencing_counter
            .map_or_else(|| "-".into(), |f| f.to_string());
        let _ = writeln!(
            out,
            "{:<node_width$}{:<name_width$}  {:<9}  {left:>10}  {fence:>8}  {:>7}  {}",
            s.node.as_deref().unwrap_or(""),
            s.name,
            s.token_prefix.as_deref().unwrap_or("-"),
            s.waiters,
            s.holder.as_deref().unwrap_or("-"),
        );
    }
    out.truncate(out.trim_end().len());
    out
}

/// Whether `key` is a side key of some lock (its fencing counter, holder details, queue or
/// waiter table) rather than a lock key.
fn is_side_key(key: &str) -> bool {
    let candidates = |base: &str| {
        let untagged = base
            .strip_prefix('{')
            .and_then(|b| b.strip_suffix('}'))
            .map(str::to_owned);
        [Some(base.to_owned()), untagged].into_iter().flatten()
    };
    [":fence", ":holder", ":queue", ":waiters"]
        .iter()
        .filter_map(|suffix| key.strip_suffix(suffix))
        .flat_map(candidates)
        .filter_map(|lock_key| LockKeys::from_key(lock_key).ok())
        .any(|keys| [keys.fence(), keys.holder(), keys.queue(), keys.waiters()].contains(&key))
}

/// `text` with Redis glob characters escaped, to match literally.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What `release --force` removed.
#[derive(Debug, Serialize)]
struct Removed {
    released: bool,
    #[serde(flatten)]
    before: LockState,
}

/// `redlease release --force`.
pub(crate) async fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    debug_assert!(args.force, "clap requires --force");
    let keys = keys_of(&args.redis, &args.name)?;
    let nodes = args.redis.nodes().await?;
    let [node] = nodes.as_slice() else {
        return quorum::release(&nodes, &args.name, &keys, args.json).await;
    };
    let before = remove(&mut connection(node)?, &args.name, &keys).await?;
    let released = before.held;
    let text = if args.json {
        serde_json::to_string_pretty(&Removed { released, before })?
    } else if released {
        format!(
            "removed lock `{}` (key {}): {}; the fencing counter stays at {}",
            before.name,
            before.key,
            before.holder_summary(),
            before
                .fencing_counter
                .map_or_else(|| "0".to_owned(), |f| f.to_string()),
        )
    } else {
        format!(
            "lock `{}` (key {}) is not held; nothing removed",
            before.name, before.key
        )
    };
    print(&text)?;
    Ok(exit::code(if released { 0 } else { exit::NEGATIVE }))
}

/// Deletes the lock key and its holder details on one node; returns what was there.
///
/// One pipeline without `MULTI` (see [`read`]): what it reports was read just before the
/// delete, in the same round trip. Only a lock taken in the microseconds between the two
/// (by a new holder of a free or just expired lock) is removed unreported.
async fn remove(
    conn: &mut MultiplexedConnection,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<LockState> {
    let reply: Reply = redis::pipe()
        .get(keys.key())
        .pttl(keys.key())
        .get(keys.fence())
        .get(keys.holder())
        .del(&[keys.key(), keys.holder()])
        .query_async(conn)
        .await
        .with_context(|| format!("removing lock `{name}` (key {})", keys.key()))?;
    let before = LockState {
        waiters: 0,
        ..LockState::new(name, keys, reply)
    };
    if let Some(token) = &before.token_prefix {
        tracing::info!(lock = %name, %token, "lock removed by force");
    }
    Ok(before)
}

/// The connection of a node, or why there is none.
fn connection(node: &Node) -> anyhow::Result<MultiplexedConnection> {
    node.conn.clone().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Writes `text` and a newline on stdout.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_prefixes_never_show_a_whole_token() {
        assert_eq!(
            token_prefix("0123456789abcdef0123456789abcdef"),
            "01234567…"
        );
        assert_eq!(token_prefix("abcd"), "ab…");
        assert_eq!(token_prefix("a"), "…");
    }

    #[test]
    fn side_keys_are_told_from_lock_keys() {
        assert!(is_side_key("{redlease:job}:fence"));
        assert!(is_side_key("{redlease:job}:holder"));
        assert!(is_side_key("redlease:{job}:fence"));
        assert!(!is_side_key("redlease:job"));
        assert!(!is_side_key("redlease:job:fence"));
    }

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
