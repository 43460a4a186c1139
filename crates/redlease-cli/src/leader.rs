//! `redlease leader`: who leads an election, and (`--watch`) each change of leader.

use std::io::Write as _;
use std::pin::pin;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use redlease::Leader;
use serde::Serialize;

use crate::connect::RedisArgs;
use crate::exit;
use crate::name::ElectArg;
use crate::output::human;
use crate::signals::Signals;

/// `--help` of `redlease leader`.
pub(crate) const LONG_ABOUT: &str = "\
Show who leads the leader election NAME: the note its leader campaigned with (for
redlease run --elect: its host, pid and command name), its term (the fencing token of its
lease, higher than every earlier leader's) and the time left on its lease. Exits with 0
when someone leads and with 1 when nobody does, as redlease status does for a free lock;
with --json with 0 either way (\"leader\" is null when nobody leads).

An election is a lock of the same name: its leader is that lock's holder (so redlease
status --key NAME shows it too). With several --redis URLs (a quorum) the leader is the one a
majority of the nodes name.

--watch prints the current leader, then one line each time the leader changes (a new
term, or nobody), as the election's own notices announce it (grants, hand-offs,
releases), and looks again when a leader's lease should have run out without a word (a
leader that died). It runs until interrupted (SIGINT, SIGTERM or SIGHUP: exit code 128+N).
Each line starts with the time of the change (RFC 3339, UTC). When Redis cannot be asked
for a while, it says so on stderr and goes on trying.

--json prints one JSON object: {\"name\", \"key\", \"leader\": null or {\"note\", \"term\",
\"remaining_ms\"}}; with --watch one such object per line (JSON Lines), with \"at\", the time.

Examples:
  redlease leader --elect scheduler
  redlease leader --elect scheduler --json | jq .leader.term
  redlease leader --elect scheduler --watch
  if redlease leader --elect scheduler >/dev/null; then echo someone leads; fi";

/// Arguments of `redlease leader`.
#[derive(Debug, clap::Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    name: ElectArg,

    /// Print JSON on stdout instead of text (one object per line with --watch)
    #[arg(long)]
    json: bool,

    /// Print each change of leader until interrupted
    #[arg(long)]
    watch: bool,

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
}

/// The leader as `--json` prints it.
#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    /// When this was seen (`--watch` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<String>,
    name: &'a str,
    key: String,
    leader: Option<LeaderState<'a>>,
}

#[derive(Debug, Serialize)]
struct LeaderState<'a> {
    note: &'a str,
    term: u64,
    remaining_ms: u64,
}

/// `redlease leader`.
pub(crate) async fn leader(args: LeaderArgs) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new()?;
    let client = tokio::select! {
        client = args.redis.client(None) => client?,
        sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
    };
    let election = client
        .election(args.name.name())
        .prefix(args.redis.prefix.as_str());
    election.keys()?;
    if !args.watch {
        let current = tokio::select! {
            current = election.leader() => current
                .with_context(|| format!("asking who leads election `{}`", args.name.name()))?,
            sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
        };
        print(&render(&args, current.as_ref(), None)?)?;
        // With --json the answer is in the JSON (`leader` is null when nobody leads).
        return Ok(exit::code(exit::negative_unless(
            current.is_some() || args.json,
        )));
    }
    let mut changes = pin!(election.observe());
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(current)) => {
                    let line = render(&args, current.as_ref(), Some(SystemTime::now()))?;
                    if !print(&line)? {
                        // Whoever read the changes is gone (`| head -1`): done.
                        return Ok(exit::code(0));
                    }
                }
                Some(Err(e)) => eprintln!(
                    "redlease: warning: cannot ask who leads election `{}` ({}); trying again",
                    args.name.name(),
                    exit::one_line(&e.into())
                ),
                // The stream ends only when dropped; should it end, so does the watch.
                None => return Ok(exit::code(0)),
            },
            sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
        }
    }
}

/// One line (text) or object (`--json`) for `current`, timed with `at` under `--watch`.
fn render(
    args: &LeaderArgs,
    current: Option<&Leader>,
    at: Option<SystemTime>,
) -> anyhow::Result<String> {
    let key = format!("{}{}", args.redis.prefix, args.name.name());
    let at = at.map(|t| humantime::format_rfc3339_seconds(t).to_string());
    if args.json {
        let json = LeaderJson {
            at,
            name: args.name.name(),
            key,
            leader: current.map(|l| LeaderState {
                note: &l.note,
                term: l.term.get(),
                remaining_ms: u64::try_from(l.remaining.as_millis()).unwrap_or(u64::MAX),
            }),
        };
        return Ok(if args.watch {
            serde_json::to_string(&json)?
        } else {
            serde_json::to_string_pretty(&json)?
        });
    }
    let state = match current {
        Some(l) => format!(
            "led by {}; term {}, {} left",
            l.note,
            l.term.get(),
            human(round(l.remaining))
        ),
        None => "nobody leads".to_owned(),
    };
    let line = format!("election `{}` (key {key}): {state}", args.name.name());
    Ok(match at {
        Some(at) => format!("{at} {line}"),
        None => line,
    })
}

/// A lease's time left to the 100 ms, enough for people.
fn round(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis() / 100 * 100).unwrap_or(u64::MAX))
}

/// Writes `text` and a newline on stdout, flushed; `false` when stdout is a closed pipe.
fn print(text: &str) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing to stdout"),
    }
}
