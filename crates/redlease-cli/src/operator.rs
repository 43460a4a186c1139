//! The operator's commands, `redlease status`, `redlease list` and `redlease release
//! --force`: what operators see of a lock, read straight from its keys (see
//! `redlease::LockKeys`), and how it is printed. (The library's `inspection` is what a
//! client reads; this is the command line over it.)

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redlease::{Client, Inspection, LockKeys};
use serde::Serialize;

use crate::connect::RedisArgs;
use crate::exit;
use crate::name::KeyArg;
use crate::output::{echo, human, print, shown, time_left};
use crate::signals::Signals;

mod cluster;
mod quorum;
mod sentinel;
mod state;

use state::Kind;
pub(crate) use state::LockState;

/// `--help` of `redlease status`.
pub(crate) const STATUS_ABOUT: &str = "\
Show who holds a lock, a semaphore or a read-write lock, and for how long.

NAME (--key NAME, as redlease run --key takes it) is a name of any kind: the type of its
key tells a lock, a semaphore (each permit's holder, and the permit count) and a
read-write lock (read or write, each hold). A multi-lock (run with several --key) is
one plain lock per name: ask for each name. An election is a lock of the same name: its
leader is the holder (redlease leader --elect NAME says it in the election's words).

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

The exit code tells held (0) from free (1). With --json it is 0 for either, so that a
script under `set -e` reads the answer from the JSON: {\"name\", \"key\", \"kind\",
\"held\", \"fencing_counter\", \"holders\": [{\"token_prefix\", \"fencing_token\",
\"remaining_ms\", \"details\", \"permits\"}], \"waiters\": [{\"token_prefix\", \"waited_ms\",
\"details\", \"permits\"}]} (each holder's and waiter's \"permits\" is 1 but for a semaphore's
acquire_many; a semaphore adds \"permits\", a read-write lock \"mode\" and each waiter's \"wants\"),
in ASCII; a lock's holder is holders[0].

Examples:
  redlease status --key nightly-report
  redlease status --watch --key nightly-report
  redlease status --json --key nightly-report | jq '.holders[0].remaining_ms'
  if redlease status -k nightly-report >/dev/null; then echo busy; fi";

/// `--help` of `redlease list`.
pub(crate) const LIST_ABOUT: &str = "\
List the locks, semaphores and read-write locks that are held now.

Walks the keyspace with SCAN (never KEYS, which blocks Redis) for keys PREFIX+PATTERN,
skips the locks' side keys (fencing counters, holder details, queues), and prints one line
per held lock: name, holder token prefix, time left, fencing counter, queued waiters and
holder details (a semaphore: one line per permit held; a read-write lock: one per hold;
an election: its leader's lock); with several --redis URLs, one line per node that holds
it, with a NODE column. --json prints an array of what status --json prints for one. PATTERN is a Redis glob (*, ?, [abc]) over lock names; the default lists
them all. With --prefix '' every string key matching PATTERN is taken for a lock.
A Cluster URL (redis+cluster://) scans every primary; a Sentinel URL (redis+sentinel://,
rediss+sentinel://) scans the primary a sentinel names (SENTINEL
GET-MASTER-ADDR-BY-NAME; the sentinels are asked in turn).

Examples:
  redlease list
  redlease list 'deploy-*'
  redlease list --json | jq -r '.[].name'";

/// `--help` of `redlease release`.
pub(crate) const RELEASE_ABOUT: &str = "\
Remove a lock that its holder cannot release (operators only): a lock, every permit of a
semaphore, every hold of a read-write lock, or an election's leader (the next candidate
then leads).

Deletes the lock key and its holder details and says what it removed (read in the same
round trip, just before): the holder's token prefix, the time its lease had left, its
details. The fencing
counter stays, so the next holder still gets a larger fencing token. The old holder is not
told: it finds the lock lost at its next renewal (a redlease run then terminates its
command). Waiters queued for the lock notice within a fraction of a second.

This breaks mutual exclusion if the holder is alive and working: prefer waiting for its
lease to run out. Hence --force, which is required. With several --redis URLs (a quorum)
the lock is removed on every node that answers, and each node's outcome is shown.

Exits with 1 when nothing was held; with --json with 0 either way (\"released\" says).

Examples:
  redlease release --force --key nightly-report";

/// Arguments of `redlease status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    name: KeyArg,

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

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
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

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
}

/// Arguments of `redlease release`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    name: KeyArg,

    /// Required: remove the lock whoever holds it
    #[arg(long, required = true)]
    force: bool,

    /// Print one JSON object on stdout instead of text
    #[arg(long)]
    json: bool,

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
}

fn keys_of(redis: &RedisArgs, name: &str) -> anyhow::Result<LockKeys> {
    Ok(LockKeys::new(&redis.prefix, name)?)
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
        .with_context(|| format!("reading lock `{}` (key {})", echo(name), echo(keys.key())))
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
    let mut signals = Signals::new()?;
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
    let keys = keys_of(&args.redis, args.name.name())?;
    let inspection = read(client, args.name.name(), &keys).await?;
    if !inspection.nodes.is_empty() {
        return quorum::status(inspection, args.name.name(), args.json);
    }
    let state = LockState::of(args.name.name(), keys.key(), &inspection.snapshot);
    let text = if args.json {
        serde_json::to_string_pretty(&state)?
    } else {
        render_status(&state)
    };
    print(&text)?;
    Ok(exit::code(exit::negative_unless(state.held || args.json)))
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
        let waiters = match state.waiters.len() {
            0 => String::new(),
            n => format!("; {n} queued waiters"),
        };
        return format!(
            "{noun} `{}` (key {}): free{permits}; fencing counter {fence}{waiters}",
            echo(&state.name),
            echo(&state.key)
        );
    }
    if state.kind == Kind::Lock {
        let holder = state.holders.first();
        let mut out = format!(
            "lock `{}` (key {}): held\n",
            echo(&state.name),
            echo(&state.key)
        );
        let rows = [
            (
                "holder token",
                holder.map_or_else(String::new, |h| shown(&h.token_prefix)),
            ),
            (
                "time left",
                time_left(holder.and_then(|h| h.remaining_ms)).replace(" left", ""),
            ),
            ("fencing token", fence),
            (
                "holder",
                holder
                    .and_then(|h| h.details.clone())
                    .unwrap_or_else(|| "-".into()),
            ),
            ("queued waiters", state.waiters.len().to_string()),
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
            state.permits_held(),
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
        ("queued waiters", state.waiters.len().to_string()),
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
            "                  {:<9}  {:>10}  {:>fence_width$}  {}{}",
            shown(&holder.token_prefix),
            holder
                .remaining_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms))),
            holder
                .fencing_token
                .map_or_else(|| "-".into(), |f| f.to_string()),
            permits_note(holder.permits, ""),
            holder.details.as_deref().unwrap_or("-"),
        );
    }
    write_waiters(&mut out, state);
    out.truncate(out.trim_end().len());
    out
}

/// `2 permits; ` (after `lead`) for a semaphore's holder or waiter of several permits at
/// once, nothing for one.
fn permits_note(permits: u32, lead: &str) -> String {
    if permits > 1 {
        format!("{lead}{permits} permits; ")
    } else {
        String::new()
    }
}

/// The waiters' table of `status`, next to be served first: token, how long each has
/// waited, what a read-write lock's waiter wants, details.
fn write_waiters(out: &mut String, state: &LockState) {
    if state.waiters.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  waiters         {:<9}  {:>10}  DETAILS",
        "TOKEN", "WAITED"
    );
    for waiter in &state.waiters {
        let wants = waiter.wants.map_or_else(
            || permits_note(waiter.permits, "wants "),
            |w| format!("wants {w}; "),
        );
        let _ = writeln!(
            out,
            "                  {:<9}  {:>10}  {wants}{}",
            shown(&waiter.token_prefix),
            waiter
                .waited_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms))),
            waiter.details.as_deref().unwrap_or("-"),
        );
    }
}

/// `redlease list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    // The library's client first, as every command connects: a refused password, an
    // unreachable or silent server are its errors (exit codes 77 and 69, its messages),
    // never the plain connections' words.
    let client = operator(&args.redis).await?;
    let nodes = match args.redis.urls().as_slice() {
        [url] => match cluster::primaries(&args.redis, url).await {
            Some(primaries) => Some(primaries),
            None => sentinel::primary(&args.redis, url).await,
        },
        _ => None,
    };
    let nodes = match nodes {
        Some(primaries) => primaries?,
        None => args.redis.nodes().await?,
    };
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
                    .filter(|k| !redlease::LockKeys::is_side_key(k)),
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
        .map(|s| echo(&s.name).chars().count())
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
                .remaining_ms
                .map_or_else(|| "-".into(), |ms| human(Duration::from_millis(ms)));
            let fence = h
                .fencing_token
                .map_or_else(|| "-".into(), |f| f.to_string());
            let _ = writeln!(
                out,
                "{:<node_width$}{:<name_width$}  {kind:<kind_width$}  {:<9}  {left:>10}  {fence:>fence_width$}  {:>7}  {}",
                s.node.as_deref().unwrap_or(""),
                echo(&s.name),
                shown(&h.token_prefix),
                s.waiters.len(),
                h.details.as_deref().map_or_else(|| "-".to_owned(), echo),
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
    let keys = keys_of(&args.redis, args.name.name())?;
    let client = operator(&args.redis).await?;
    let removed = client
        .force_release_keys(&keys)
        .await
        .with_context(|| format!("removing `{}` (key {})", args.name.name(), keys.key()))?;
    if !removed.nodes.is_empty() {
        return quorum::release(removed, args.name.name(), args.json);
    }
    let before = LockState::of(args.name.name(), keys.key(), &removed.snapshot);
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
    Ok(exit::code(exit::negative_unless(released || args.json)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
