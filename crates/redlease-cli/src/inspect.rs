//! `redlease status`, `redlease list` and `redlease release --force`: what operators see of
//! a lock, read straight from its keys (see `redlease::LockKeys`).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redlease::{LockKeys, Primitive};
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

/// The side keys of a semaphore or read-write lock that `status` reads and `release
/// --force` removes, beside `K` (whose type tells the kind).
struct LeaseKeys {
    /// The ZSET token -> lease expiry (ms): `K` for a semaphore, `B:rw:owners` for a
    /// read-write lock.
    expiries: String,
    /// The hash token -> `["<fence>", details]`.
    holders: String,
    /// The queue of waiting tokens.
    queue: String,
    /// `B:sem:permits` (the count) for a semaphore.
    permits: Option<String>,
}

impl LeaseKeys {
    fn of(kind: Kind, keys: &LockKeys) -> anyhow::Result<Self> {
        let primitive = match kind {
            Kind::Semaphore => Primitive::Semaphore,
            Kind::Lock | Kind::Rwlock => Primitive::RwLock,
        };
        let keys = LockKeys::from_key_of(keys.key().to_owned(), primitive)?;
        Ok(Self {
            expiries: keys.holds().unwrap_or_else(|| keys.key()).to_owned(),
            holders: keys.holder().to_owned(),
            queue: keys.queue().to_owned(),
            permits: keys.permits().map(str::to_owned),
        })
    }

    /// What `release --force` deletes: the holds, not the queue, the fencing counter or
    /// the permit count (waiters keep their place and are served next).
    fn holds(&self, keys: &LockKeys) -> Vec<String> {
        let mut out = vec![keys.key().to_owned(), self.holders.clone()];
        if self.expiries != keys.key() {
            out.push(self.expiries.clone());
        }
        out
    }
}

/// The kind of name `keys` is, by the type of its key; `None` when nothing holds it (a
/// free lock, semaphore or read-write lock leave no key).
async fn kind_of(
    conn: &mut MultiplexedConnection,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<Option<Kind>> {
    let kind: String = redis::cmd("TYPE")
        .arg(keys.key())
        .query_async(conn)
        .await
        .with_context(|| format!("reading the type of `{name}` (key {})", keys.key()))?;
    match kind.as_str() {
        "none" => Ok(None),
        "string" => Ok(Some(Kind::Lock)),
        "zset" => Ok(Some(Kind::Semaphore)),
        "hash" => Ok(Some(Kind::Rwlock)),
        other => anyhow::bail!(
            "key {} is a Redis {other}, not a redlease lock (string), semaphore (zset) or read-write lock (hash); check the name and --prefix",
            keys.key()
        ),
    }
}

/// Whether `err` is Redis' `WRONGTYPE`: the key changed kind between its `TYPE` and the
/// read (released, and taken as another primitive, in between).
fn wrong_type(err: &redis::RedisError) -> bool {
    err.code() == Some("WRONGTYPE")
}

/// Reads the state of the lock, semaphore or read-write lock whose (lock) keys are `keys`;
/// the type of its key tells which.
///
/// The keys are read in one pipeline, not in a `MULTI` transaction: an operator's ACL
/// user needs no `+multi +exec` (and redis-rs miscounts the replies of a `MULTI` that the
/// ACL refuses, failing with only "broken pipe"). Scripts run atomically, so the lock
/// changed hands between the pipeline's commands only if its key (for a semaphore or a
/// read-write lock, its set of holds) changed: that is read again last, and the whole read
/// repeated (a few times) when it did.
pub(crate) async fn read(
    conn: &mut MultiplexedConnection,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<LockState> {
    let mut tries = 0;
    loop {
        tries += 1;
        let kind = kind_of(conn, name, keys).await?;
        let read = match kind {
            None | Some(Kind::Lock) => read_lock(conn, keys).await,
            Some(kind) => read_leases(conn, kind, keys, None).await,
        };
        match read {
            Ok((state, settled)) if settled || tries >= READ_TRIES => {
                return Ok(state.named(name));
            }
            Ok(_) => {}
            Err(e) if wrong_type(&e) && tries < READ_TRIES => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading lock `{name}` (key {})", keys.key()));
            }
        }
    }
}

/// A lock's state, and whether its key stayed the same during the read.
async fn read_lock(
    conn: &mut MultiplexedConnection,
    keys: &LockKeys,
) -> redis::RedisResult<(LockState, bool)> {
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
        .await?;
    let settled = token == token_after;
    Ok((
        LockState::new("", keys, (token, pttl, fence, holder, waiters)),
        settled,
    ))
}

/// The reply of [`read_leases`]' pipeline: the holds (token, expiry ms), their holder
/// table, the permit count or the mode, the fencing counter, the queue's length, the
/// server's `TIME`, and the holds' tokens read again.
type LeaseReply = (
    Vec<(String, f64)>,
    HashMap<String, String>,
    Option<String>,
    Option<String>,
    u64,
    (u64, u64),
    Vec<String>,
);

/// A semaphore's or read-write lock's state, and whether its holds stayed the same during
/// the read. With `remove`, the holds are then deleted in the same pipeline (`release
/// --force`).
async fn read_leases(
    conn: &mut MultiplexedConnection,
    kind: Kind,
    keys: &LockKeys,
    remove: Option<&[String]>,
) -> redis::RedisResult<(LockState, bool)> {
    // The name was checked when `keys` were derived: its other keys derive as well.
    let lease = LeaseKeys::of(kind, keys).map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "cannot derive the keys",
            e.to_string(),
        ))
    })?;
    let mut pipe = redis::pipe();
    pipe.zrange_withscores(&lease.expiries, 0, -1)
        .hgetall(&lease.holders);
    match &lease.permits {
        Some(permits) => pipe.get(permits),
        None => pipe.hget(keys.key(), "mode"),
    };
    pipe.get(keys.fence())
        .llen(&lease.queue)
        .cmd("TIME")
        .zrange(&lease.expiries, 0, -1);
    if let Some(remove) = remove {
        pipe.del(remove).ignore();
    }
    let reply: LeaseReply = pipe.query_async(conn).await?;
    let (expiries, details, extra, fence, waiters, (secs, micros), after) = reply;
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    let settled = expiries.iter().map(|(t, _)| t).eq(after.iter());
    let holders: Vec<Holder> = expiries
        .iter()
        .filter_map(|(token, expiry)| {
            // Whole milliseconds since the epoch, stored as a ZSET score.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a ms timestamp, far below 2^53"
            )]
            let expiry = expiry.max(0.0) as u64;
            // A hold whose lease has run out is reclaimed by the next script: not held.
            let left = expiry.checked_sub(now_ms).filter(|&ms| ms > 0)?;
            let (fencing_token, details) = parse_holder(details.get(token));
            Some(Holder {
                token_prefix: token_prefix(token),
                fencing_token,
                ttl_ms: Some(left),
                details,
            })
        })
        .collect();
    let (permits, mode) = match kind {
        Kind::Semaphore => (extra.and_then(|n| n.parse().ok()), None),
        _ => (None, extra),
    };
    // A semaphore is in use while its permit count is stored, a read-write lock while its
    // mode is: a ZSET or hash under the prefix without them is someone else's key.
    let held = !holders.is_empty() && (permits.is_some() || mode.is_some());
    Ok((
        LockState {
            name: String::new(),
            key: keys.key().to_owned(),
            kind,
            permits,
            mode: mode.filter(|_| held),
            held,
            token_prefix: None,
            ttl_ms: None,
            fencing_counter: fence.and_then(|f| f.parse().ok()),
            holder: None,
            holders,
            waiters,
            node: None,
        },
        settled,
    ))
}

/// A holder table entry, `["<fence>", details]` (cjson): its fencing token and details.
fn parse_holder(entry: Option<&String>) -> (Option<u64>, Option<String>) {
    let Some(Ok(serde_json::Value::Array(parts))) =
        entry.map(|e| serde_json::from_str::<serde_json::Value>(e))
    else {
        return (None, None);
    };
    let fence = parts.first().and_then(|f| match f {
        serde_json::Value::String(s) => s.parse().ok(),
        other => other.as_u64(),
    });
    let details = parts
        .get(1)
        .and_then(serde_json::Value::as_str)
        .filter(|d| !d.is_empty())
        .map(str::to_owned);
    (fence, details)
}

/// The lock's token, PTTL, fencing counter, holder details and one more integer (queue
/// length, or keys deleted), as one pipeline returns them.
type Reply = (Option<String>, i64, Option<String>, Option<String>, u64);

impl LockState {
    fn new(name: &str, keys: &LockKeys, reply: Reply) -> Self {
        let (token, pttl, fence, holder, waiters) = reply;
        let fencing_counter = fence.and_then(|f| f.parse().ok());
        let ttl_ms = token.as_ref().and(u64::try_from(pttl).ok());
        let holder = token.as_ref().and(holder);
        Self {
            name: name.to_owned(),
            key: keys.key().to_owned(),
            kind: Kind::Lock,
            permits: None,
            mode: None,
            held: token.is_some(),
            token_prefix: token.as_deref().map(token_prefix),
            ttl_ms,
            fencing_counter,
            holders: token
                .as_deref()
                .map(|token| Holder {
                    token_prefix: token_prefix(token),
                    fencing_token: fencing_counter,
                    ttl_ms,
                    details: holder.clone(),
                })
                .into_iter()
                .collect(),
            holder,
            waiters,
            node: None,
        }
    }

    fn named(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }
}

/// `redlease status`.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let Some(every) = args.watch else {
        return status_once(&args).await;
    };
    let mut signals = crate::run::Signals::new()?;
    let terminal = std::io::stdout().is_terminal();
    loop {
        if terminal {
            // Cursor home and clear the screen: the snapshot replaces the last one.
            let mut out = std::io::stdout().lock();
            write!(out, "\x1b[H\x1b[2J").context("writing to stdout")?;
        }
        // A snapshot that fails (Redis unreachable) says so and the watch goes on.
        if let Err(e) = status_once(&args).await {
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

async fn status_once(args: &StatusArgs) -> anyhow::Result<ExitCode> {
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
            found.extend(batch.into_iter().filter(|k| !is_side_key(k)));
            cursor = next;
            if cursor == 0 {
                break;
            }
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

/// The suffixes of the side keys of every kind (after the base `{K}`, or `K` when it has
/// a hash tag): fencing counter, holder details, queues, waiter tables, a semaphore's
/// permit count, a read-write lock's holds.
const SIDE_SUFFIXES: [&str; 12] = [
    ":fence",
    ":holder",
    ":queue",
    ":waiters",
    ":sem:holders",
    ":sem:queue",
    ":sem:waiters",
    ":sem:permits",
    ":rw:holders",
    ":rw:queue",
    ":rw:waiters",
    ":rw:owners",
];

/// Whether `key` is a side key of some lock, semaphore or read-write lock (its fencing
/// counter, holder details, queue, waiter table...) rather than a main key.
fn is_side_key(key: &str) -> bool {
    let candidates = |base: &str| {
        let untagged = base
            .strip_prefix('{')
            .and_then(|b| b.strip_suffix('}'))
            .map(str::to_owned);
        [Some(base.to_owned()), untagged].into_iter().flatten()
    };
    SIDE_SUFFIXES.iter().any(|suffix| {
        key.strip_suffix(suffix).is_some_and(|base| {
            candidates(base).any(|main| {
                [Primitive::Lock, Primitive::Semaphore, Primitive::RwLock]
                    .into_iter()
                    .filter_map(|primitive| LockKeys::from_key_of(main.clone(), primitive).ok())
                    .any(|keys| {
                        [keys.fence(), keys.holder(), keys.queue(), keys.waiters()]
                            .into_iter()
                            .chain(keys.permits())
                            .chain(keys.holds())
                            .any(|side| side == key)
                    })
            })
        })
    })
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

/// Deletes the lock key and its holder details on one node (for a semaphore or read-write
/// lock, every permit or hold: `K`, its holder table and its expiries); returns what was
/// there.
///
/// One pipeline without `MULTI` (see [`read`]) after the `TYPE` of the key: what it
/// reports was read just before the delete, in the same round trip. Only a lock taken in
/// the microseconds between the two (by a new holder of a free or just expired lock) is
/// removed unreported. The fencing counter stays; so do a semaphore's or read-write lock's
/// queue (its waiters are served next) and a semaphore's permit count.
async fn remove(
    conn: &mut MultiplexedConnection,
    name: &str,
    keys: &LockKeys,
) -> anyhow::Result<LockState> {
    if let Some(kind @ (Kind::Semaphore | Kind::Rwlock)) = kind_of(conn, name, keys).await? {
        let holds = LeaseKeys::of(kind, keys)?.holds(keys);
        let (before, _) = read_leases(conn, kind, keys, Some(&holds))
            .await
            .with_context(|| format!("removing `{name}` (key {})", keys.key()))?;
        for holder in &before.holders {
            tracing::info!(name = %name, token = %holder.token_prefix, "hold removed by force");
        }
        return Ok(before.named(name));
    }
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
        for suffix in [":sem:holders", ":sem:permits", ":rw:owners", ":rw:holders"] {
            assert!(
                is_side_key(&format!("{{redlease:pool}}{suffix}")),
                "{suffix}"
            );
            assert!(
                is_side_key(&format!("redlease:{{pool}}{suffix}")),
                "{suffix}"
            );
            assert!(!is_side_key(&format!("redlease:pool{suffix}")), "{suffix}");
        }
    }

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
