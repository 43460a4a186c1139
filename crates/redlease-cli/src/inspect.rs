//! `redlease status`, `redlease list` and `redlease release --force`: what operators see of
//! a lock, read straight from its keys (see `redlease::LockKeys`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redlease::{Access, Client, Inspection, LockKeys, Primitive, Snapshot};
use serde::Serialize;

use crate::connect::RedisArgs;
use crate::exit;

mod quorum;

/// `--help` of `redlease status`.
pub(crate) const STATUS_ABOUT: &str = "\
Show who holds a lock and for how long.

Reads the lock's keys in one round trip and prints: whether it is held, the first
hex digits of the holder's owner token (never the whole token: it is the holder's secret),
the time left on its lease, the lock's fencing counter (the fencing token of the latest
acquisition; the next one gets a larger number), the holder's details (host, pid and, for
redlease run, the command's name) and the queued waiters, next served first, with how
long each has waited (and, for a read-write lock, whether it wants to read or write).
It reads through the library's Client::inspect: plain reads, no script.

With several --redis URLs (a quorum of independent nodes) each node is read and shown on
its own line; the lock is held when one owner holds it on a majority of the nodes. Nodes
that cannot be reached are shown as such; fewer than a majority answering exits with 69.

With --watch it shows the lock again every INTERVAL (default 1s) until interrupted: redrawn
in place on a terminal, one snapshot after another (a blank line between) otherwise; a
snapshot that cannot reach Redis says so and the watch goes on. A signal ends it (128+N).

Examples:
  redlease status nightly-report
  redlease status --watch nightly-report
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

    /// Show it again every INTERVAL (default 1s) until interrupted: redrawn in place on a
    /// terminal, one snapshot after another otherwise
    #[arg(
        long,
        value_name = "INTERVAL",
        num_args = 0..=1,
        default_missing_value = "1s",
        value_parser = parse_interval
    )]
    watch: Option<Duration>,

    #[command(flatten)]
    redis: RedisArgs,
}

/// A `--watch` interval: a humantime duration of at least 100ms.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let every = humantime::parse_duration(text).map_err(|e| format!("{e} (e.g. 500ms, 2s)"))?;
    if every < Duration::from_millis(100) {
        return Err("at least 100ms".into());
    }
    Ok(every)
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
    /// The first hex digits of its token (never all of it).
    pub(crate) token_prefix: String,
    /// The fencing token of its acquisition.
    pub(crate) fencing_token: Option<u64>,
    /// Its lease left, in ms; `None` without expiry.
    pub(crate) ttl_ms: Option<u64>,
    /// Its details (host, pid, command).
    pub(crate) details: Option<String>,
}

impl Holder {
    /// `holder 1a2b3c4d… (host=... pid=...), 12s left`.
    fn summary(&self) -> String {
        let mut out = format!("holder {}", self.token_prefix);
        if let Some(details) = &self.details {
            let _ = write!(out, " ({details})");
        }
        let _ = write!(out, ", {}", time_left(self.ttl_ms));
        out
    }
}

/// One waiter queued for a lock, semaphore or read-write lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Waiter {
    /// The first hex digits of its token.
    pub(crate) token_prefix: String,
    /// How long it has waited, in ms (`None`: a place of an older redlease).
    pub(crate) waited_ms: Option<u64>,
    /// Its details (host, pid, command).
    pub(crate) details: Option<String>,
    /// What a read-write lock's waiter asks for: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wants: Option<&'static str>,
}

/// What the keys of one lock, semaphore or read-write lock say.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockState {
    /// The name.
    pub(crate) name: String,
    /// Its Redis key.
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
    /// A lock's holder: the first hex digits of its token (never all of it).
    pub(crate) token_prefix: Option<String>,
    /// A lock holder's lease left, in ms; `None` when free or without expiry.
    pub(crate) ttl_ms: Option<u64>,
    /// The fencing counter: the token of the latest acquisition.
    pub(crate) fencing_counter: Option<u64>,
    /// A lock holder's details (host, pid, command).
    pub(crate) holder: Option<String>,
    /// Every holder (one for a lock; each permit or hold for the others).
    pub(crate) holders: Vec<Holder>,
    /// Waiters in the queue.
    pub(crate) waiters: u64,
    /// Each queued waiter, the next one to be served first.
    pub(crate) waiting: Vec<Waiter>,
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
                None => format!("holder (unknown), {}", time_left(self.ttl_ms)),
            },
            Kind::Semaphore => format!(
                "{} of {} permits held: {}",
                self.holders.len(),
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
    fn noun(&self) -> &'static str {
        match self.kind {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::Rwlock => "read-write lock",
        }
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

fn keys_of(redis: &RedisArgs, name: &str) -> anyhow::Result<LockKeys> {
    Ok(LockKeys::new(&redis.prefix, name)?)
}

impl Waiter {
    fn of(waiting: &redlease::Waiting) -> Self {
        Self {
            token_prefix: shown(&waiting.token_prefix),
            waited_ms: waiting.waited.map(millis),
            details: waiting.details.clone(),
            wants: waiting.access.map(access_name),
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
                token_prefix: shown(&h.token_prefix),
                fencing_token: h.fencing_token.map(redlease::FencingToken::get),
                ttl_ms: h.time_left.map(millis),
                details: h.details.clone(),
            })
            .collect();
        let lock = holders.first().filter(|_| kind == Kind::Lock);
        Self {
            name: name.to_owned(),
            key: key.to_owned(),
            kind,
            permits: snapshot.permits,
            mode: snapshot.access.map(|a| access_name(a).to_owned()),
            held: snapshot.is_held(),
            token_prefix: lock.map(|h| h.token_prefix.clone()),
            ttl_ms: lock.and_then(|h| h.ttl_ms),
            fencing_counter: snapshot.fencing_counter.map(redlease::FencingToken::get),
            holder: lock.and_then(|h| h.details.clone()),
            waiters: snapshot.waiters.len() as u64,
            waiting: snapshot.waiters.iter().map(Waiter::of).collect(),
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

/// A token prefix as shown: the digits the library gives, then `…`.
fn shown(prefix: &str) -> String {
    format!("{prefix}…")
}

/// Reads `name` through the library ([`redlease::Client::inspect_keys`]): the one code
/// path of `status`, `list` and (with [`redlease::Client::force_release`]) `release
/// --force`.
pub(crate) async fn read(
    client: &Client,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<Inspection> {
    client
        .inspect_keys(keys)
        .await
        .with_context(|| format!("reading lock `{name}` (key {})", keys.key()))
}

/// An operator's client: no holder note (it takes nothing).
async fn operator(redis: &RedisArgs) -> anyhow::Result<Client> {
    redis.client(None).await
}

/// `redlease status`.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let Some(every) = args.watch else {
        let client = operator(&args.redis).await?;
        return status_once(&args, &client).await;
    };
    let mut signals = crate::run::Signals::new()?;
    let terminal = std::io::stdout().is_terminal();
    // One client for the whole watch; made again after a snapshot could not connect.
    let mut client = None;
    loop {
        if terminal {
            // Cursor home and clear the screen: the snapshot replaces the last one.
            let mut out = std::io::stdout().lock();
            write!(out, "\x1b[H\x1b[2J").context("writing to stdout")?;
        }
        if client.is_none() {
            client = operator(&args.redis)
                .await
                .inspect_err(|e| {
                    let _ = print(&format!("redlease: {}", exit::one_line(e)));
                })
                .ok();
        }
        // A snapshot that fails (Redis unreachable) says so and the watch goes on.
        if let Some(client) = &client
            && let Err(e) = status_once(&args, client).await
        {
            print(&format!("redlease: {}", exit::one_line(&e)))?;
        }
        if !terminal {
            print("")?;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
        }
    }
}

async fn status_once(args: &StatusArgs, client: &Client) -> anyhow::Result<ExitCode> {
    let keys = keys_of(&args.redis, &args.name)?;
    let inspection = read(client, &args.name, &keys).await?;
    if !inspection.nodes.is_empty() {
        return quorum::status(inspection, &args.name, args.json);
    }
    let state = LockState::of(&args.name, keys.key(), &inspection.snapshot);
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
    let noun = state.noun();
    if !state.held {
        let permits = match state.permits {
            Some(n) => format!(", {n} permits"),
            None => String::new(),
        };
        let waiters = match state.waiters {
            0 => String::new(),
            n => format!("; {n} queued waiters"),
        };
        return format!(
            "{noun} `{}` (key {}): free{permits}; fencing counter {fence}{waiters}",
            state.name, state.key
        );
    }
    if state.kind == Kind::Lock {
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
        write_waiters(&mut out, state);
        out.truncate(out.trim_end().len());
        return out;
    }
    let held = match (state.kind, state.mode.as_deref()) {
        (Kind::Semaphore, _) => format!(
            "{} of {} permits held",
            state.holders.len(),
            state
                .permits
                .map_or_else(|| "?".to_owned(), |n| n.to_string())
        ),
        (_, Some("read")) => format!("held for reading by {}", state.holders.len()),
        _ => "held for writing".into(),
    };
    let mut out = format!("{noun} `{}` (key {}): {held}\n", state.name, state.key);
    let rows = [
        ("kind", state.kind_label()),
        ("fencing counter", fence),
        ("queued waiters", state.waiters.to_string()),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:<15} {value}");
    }
    let fence_width = fence_width(std::slice::from_ref(state));
    let _ = writeln!(
        out,
        "  holders         {:<9}  {:>10}  {:>fence_width$}  DETAILS",
        "TOKEN", "TIME LEFT", "FENCING"
    );
    for holder in &state.holders {
        let _ = writeln!(
            out,
            "                  {:<9}  {:>10}  {:>fence_width$}  {}",
            holder.token_prefix,
            holder
                .ttl_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms))),
            holder
                .fencing_token
                .map_or_else(|| "-".into(), |f| f.to_string()),
            holder.details.as_deref().unwrap_or("-"),
        );
    }
    write_waiters(&mut out, state);
    out.truncate(out.trim_end().len());
    out
}

/// The waiters' table of `status`, next to be served first: token, how long each has
/// waited, what a read-write lock's waiter wants, details.
fn write_waiters(out: &mut String, state: &LockState) {
    if state.waiting.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  waiters         {:<9}  {:>10}  DETAILS",
        "TOKEN", "WAITED"
    );
    for waiter in &state.waiting {
        let wants = waiter
            .wants
            .map(|w| format!("wants {w}; "))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "                  {:<9}  {:>10}  {wants}{}",
            waiter.token_prefix,
            waiter
                .waited_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms))),
            waiter.details.as_deref().unwrap_or("-"),
        );
    }
}

/// `redlease list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let nodes = args.redis.nodes().await?;
    // The names, from every node that answers (a quorum's nodes may differ).
    let mut names = BTreeSet::new();
    for node in &nodes {
        let mut conn = match (&node.conn, nodes.len()) {
            (Ok(conn), _) => conn.clone(),
            (Err(e), 1) => anyhow::bail!("{e}"),
            (Err(e), _) => {
                eprintln!("redlease: warning: skipping node {}: {e}", node.url);
                continue;
            }
        };
        names.extend(lock_keys(&mut conn, &args.redis.prefix, &args.pattern).await?);
    }
    let client = operator(&args.redis).await?;
    let mut states = Vec::new();
    for key in names {
        let Some(name) = key.strip_prefix(args.redis.prefix.as_str()) else {
            continue;
        };
        let Ok(keys) = LockKeys::from_key(key.clone()) else {
            continue;
        };
        let inspection = read(&client, name, &keys).await?;
        if inspection.nodes.is_empty() {
            states.push(LockState::of(name, &key, &inspection.snapshot));
        }
        // Over a quorum, one line per node that holds it.
        for node in &inspection.nodes {
            if let Ok(snapshot) = &node.snapshot {
                states.push(LockState {
                    node: Some(node.node.clone()),
                    ..LockState::of(name, &key, snapshot)
                });
            }
        }
    }
    // Released or expired between the scan and the read.
    states.retain(|s| s.held);
    let text = if args.json {
        serde_json::to_string_pretty(&states)?
    } else {
        render_list(&states)
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The main keys of the locks, semaphores and read-write locks on one node whose names
/// match `pattern`, by SCAN (never KEYS, which blocks Redis).
async fn lock_keys(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    pattern: &str,
) -> anyhow::Result<BTreeSet<String>> {
    let pattern = format!("{}{pattern}", glob_escape(prefix));
    let mut found = BTreeSet::new();
    // The type of a name's key is its kind: lock, semaphore, read-write lock.
    for kind in ["string", "zset", "hash"] {
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg(kind)
                .query_async(conn)
                .await
                .context("scanning for locks")?;
            found.extend(
                batch
                    .into_iter()
                    .filter(|k| !redlease::keys::is_side_key(k)),
            );
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(found)
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
    let kind_width = states
        .iter()
        .map(|s| s.kind_label().chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let node_width = states
        .iter()
        .filter_map(|s| s.node.as_ref().map(|n| n.chars().count() + 2))
        .max()
        .unwrap_or(0);
    let node_header = if node_width > 0 { "NODE" } else { "" };
    let fence_width = fence_width(states);
    let mut out = format!(
        "{node_header:<node_width$}{:<name_width$}  {:<kind_width$}  {:<9}  {:>10}  {:>fence_width$}  {:>7}  HOLDER\n",
        "NAME", "KIND", "TOKEN", "TIME LEFT", "FENCING", "WAITERS"
    );
    // One line per holder: a semaphore's permits and a read-write lock's readers each
    // get theirs.
    for s in states {
        let kind = s.kind_label();
        for h in &s.holders {
            let left = h
                .ttl_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms)));
            let fence = h
                .fencing_token
                .map_or_else(|| "-".into(), |f| f.to_string());
            let _ = writeln!(
                out,
                "{:<node_width$}{:<name_width$}  {kind:<kind_width$}  {:<9}  {left:>10}  {fence:>fence_width$}  {:>7}  {}",
                s.node.as_deref().unwrap_or(""),
                s.name,
                h.token_prefix,
                s.waiters,
                h.details.as_deref().unwrap_or("-"),
            );
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// The width of a FENCING column: its header, or its longest token.
fn fence_width(states: &[LockState]) -> usize {
    states
        .iter()
        .flat_map(|s| &s.holders)
        .filter_map(|h| h.fencing_token)
        .map(|f| f.to_string().len())
        .max()
        .unwrap_or(0)
        .max("FENCING".len())
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
    let client = operator(&args.redis).await?;
    let removed = client
        .force_release_keys(&keys)
        .await
        .with_context(|| format!("removing `{}` (key {})", args.name, keys.key()))?;
    if !removed.nodes.is_empty() {
        return quorum::release(removed, &args.name, args.json);
    }
    let before = LockState::of(&args.name, keys.key(), &removed.snapshot);
    let released = before.held;
    let text = if args.json {
        serde_json::to_string_pretty(&Removed { released, before })?
    } else if released {
        format!(
            "removed {} `{}` (key {}): {}; the fencing counter stays at {}",
            before.noun(),
            before.name,
            before.key,
            before.holder_summary(),
            before
                .fencing_counter
                .map_or_else(|| "0".to_owned(), |f| f.to_string()),
        )
    } else {
        format!(
            "{} `{}` (key {}) is not held; nothing removed",
            before.noun(),
            before.name,
            before.key
        )
    };
    print(&text)?;
    Ok(exit::code(if released { 0 } else { exit::NEGATIVE }))
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
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
