//! `redlease latch`: count-down latches and barriers from the command line. `latch count`
//! is `run` holding one count instead of a lock (the same supervision, signals and exit
//! codes); `wait`, `barrier`, `expect` and `status` ask the latch itself.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redlease::{Latch, Opened, Wait};
use serde::Serialize;

use crate::connect::RedisArgs;
use crate::exit;
use crate::output::{echo, human, print};
use crate::run::{self, DEFAULT_TTL_TEXT, RunArgs, WaitArg};
use crate::signals::Signals;

/// `--help` of `redlease latch`.
pub(crate) const LONG_ABOUT: &str = "\
Count-down latches and barriers: wait for N parties without hanging on one that died.

Each party runs its part under `redlease latch count --key NAME -- CMD`: it holds one
count of the latch NAME while CMD runs (a lease, renewed as run renews a lock) and counts
it down when CMD ends, however it ends. `redlease latch wait --key NAME` returns once no
count is left, and says how the counts ended: counted down by their party, or expired
because their party stopped renewing (its machine died, or it lost Redis for a whole
--ttl): the latch then opened broken, and some part may be unfinished (exit 79).

A coordinator that must wait for parties that have not started yet presets the round
with `latch expect --key NAME N` (--if-idle: only when no round is open): the round then
stays open until N counts came up and went. `latch barrier --key NAME --parties N` is a
barrier: every party returns once the N-th arrives. A latch is refused over a quorum
(several --redis).

Exit codes of wait and barrier: 0 opened with every count counted down; 79 opened broken
(a count expired); 75 the latch was still closed when --wait ran out; 128+N interrupted
by signal N. latch count: CMD's own exit code, as run (79 when its count's lease was
lost). expect --if-idle: 1 when a round was already open (nothing preset). status: 1 when
nothing is outstanding (no live count, no arrival expected).

Examples:
  # on each worker
  redlease latch count --key import -- ./import-part.sh 3
  # where every part is needed
  redlease latch expect --key import 4 --if-idle
  redlease latch wait --key import --wait 1h && ./merge.sh
  # nobody starts phase 2 before all 4 are ready
  redlease latch barrier --key phase-2 --parties 4 --wait 5m";

/// Arguments of `redlease latch`.
#[derive(Debug, clap::Args)]
pub(crate) struct LatchArgs {
    #[command(subcommand)]
    pub(crate) command: LatchCommand,
}

/// The subcommands of `redlease latch`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum LatchCommand {
    /// Run a command holding one count of the latch; counted down when it ends
    #[command(after_help = exit::SEE_TABLE)]
    Count(CountArgs),
    /// Wait until the latch opens (no count left) and say how its counts ended
    #[command(after_help = exit::SEE_TABLE)]
    Wait(WaitArgs),
    /// Preset N arrivals the round waits for before anyone counted up
    #[command(after_help = exit::SEE_TABLE)]
    Expect(ExpectArgs),
    /// A barrier of N parties: returns when the last one arrives
    #[command(after_help = exit::SEE_TABLE)]
    Barrier(BarrierArgs),
    /// How many counts of the latch are outstanding now (live, or expected)
    #[command(after_help = exit::SEE_TABLE)]
    Status(StatusArgs),
}

impl LatchCommand {
    /// Gives the subcommand the connection options.
    pub(crate) fn connect_with(&mut self, redis: RedisArgs) {
        match self {
            Self::Count(args) => args.redis = redis,
            Self::Wait(args) => args.latch.redis = redis,
            Self::Expect(args) => args.redis = redis,
            Self::Barrier(args) => args.latch.redis = redis,
            Self::Status(args) => args.redis = redis,
        }
    }
}

/// Arguments of `redlease latch count`.
#[derive(Debug, clap::Args)]
pub(crate) struct CountArgs {
    /// The latch's name
    #[arg(long, short = 'k', value_name = "NAME")]
    key: String,

    /// The count's lease: how soon it expires (and the latch opens broken) if this machine
    /// dies; renewed every ttl/4 while CMD runs, 10ms..30days
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TTL_TEXT.as_str(), value_parser = run::parse_ttl)]
    ttl: Duration,

    /// When the count's lease is lost, or redlease dies or stops renewing, how long CMD's
    /// process group has between SIGTERM and SIGKILL (as run --kill-after)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    kill_after: Option<Duration>,

    /// Exit with N instead of 69 (Redis unreachable) and 79 (count lost), as run -E
    #[arg(long, short = 'E', value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    conflict_exit_code: Option<u8>,

    /// The connection options, set by `main`.
    #[arg(skip)]
    redis: RedisArgs,

    /// The command to run, and its arguments (after `--` if they start with `-`)
    #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true)]
    command: Vec<OsString>,
}

impl CountArgs {
    /// `run`'s arguments for this: CMD holding one count of the latch.
    pub(crate) fn into_run(self) -> RunArgs {
        let mut args = RunArgs::latch_count(
            self.key,
            self.ttl,
            self.kill_after,
            self.conflict_exit_code,
            self.command,
        );
        args.redis = self.redis;
        args
    }
}

/// The latch and how long to wait: `wait` and `barrier`.
#[derive(Debug, clap::Args)]
pub(crate) struct WaitingArgs {
    /// The latch's name
    #[arg(long, short = 'k', value_name = "NAME")]
    key: String,

    /// How long to wait before giving up with exit code 75; `forever` to wait as long as it
    /// takes [default: forever]
    #[arg(long, value_name = "DURATION", value_parser = run::parse_wait)]
    wait: Option<WaitArg>,

    #[arg(
        long,
        help = "Print one JSON object on stdout instead of text: {\"name\", \"key\", \"opened\", \"counted_down\", \"expired\", \"broken\"}"
    )]
    json: bool,

    /// The connection options, set by `main`.
    #[arg(skip)]
    redis: RedisArgs,
}

/// Arguments of `redlease latch wait`.
#[derive(Debug, clap::Args)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    latch: WaitingArgs,
}

/// Arguments of `redlease latch barrier`.
#[derive(Debug, clap::Args)]
pub(crate) struct BarrierArgs {
    #[command(flatten)]
    latch: WaitingArgs,

    /// How many parties the barrier waits for (this one included), 1 or more
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    parties: u32,
}

/// Arguments of `redlease latch expect`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExpectArgs {
    /// The latch's name
    #[arg(long, short = 'k', value_name = "NAME")]
    key: String,

    /// Arrivals to preset, 1 or more
    #[arg(value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    arrivals: u32,

    /// Only when no round is open (no count live, no arrival expected); exit 1 when one
    /// is (nothing is preset). Of several that try, one presets the round
    #[arg(long)]
    if_idle: bool,

    /// Print one JSON object on stdout instead of text (exit 0 with --if-idle either way)
    #[arg(long)]
    json: bool,

    /// The connection options, set by `main`.
    #[arg(skip)]
    redis: RedisArgs,
}

/// Arguments of `redlease latch status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// The latch's name
    #[arg(long, short = 'k', value_name = "NAME")]
    key: String,

    /// Print one JSON object on stdout instead of text (exit 0 either way)
    #[arg(long)]
    json: bool,

    /// The connection options, set by `main`.
    #[arg(skip)]
    redis: RedisArgs,
}

/// How a round ended, as `--json` prints it.
#[derive(Debug, Serialize)]
struct OpenedJson<'a> {
    name: &'a str,
    key: String,
    opened: bool,
    counted_down: u64,
    expired: u64,
    broken: bool,
}

/// `redlease latch` (but `count`, which `main` runs as `run`).
pub(crate) async fn latch(command: LatchCommand) -> anyhow::Result<ExitCode> {
    match command {
        LatchCommand::Count(args) => run::run(args.into_run()).await,
        LatchCommand::Wait(args) => waiting(&args.latch, None).await,
        LatchCommand::Barrier(args) => waiting(&args.latch, Some(args.parties)).await,
        LatchCommand::Expect(args) => expect(&args).await,
        LatchCommand::Status(args) => status(&args).await,
    }
}

/// The latch `name` on a client of `redis`, with its keys checked.
async fn open(redis: &RedisArgs, name: &str) -> anyhow::Result<(redlease::Client, Latch, String)> {
    let client = redis.client(None).await?;
    let latch = client.latch(name).prefix(redis.prefix.as_str());
    let key = latch.keys()?.key().to_owned();
    Ok((client, latch, key))
}

/// `latch wait`, or `latch barrier` of `parties`.
async fn waiting(args: &WaitingArgs, parties: Option<u32>) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new()?;
    let wait = args.wait.map_or(Wait::Forever, WaitArg::wait);
    let (client, latch, key) = tokio::select! {
        opened = open(&args.redis, &args.key) => opened?,
        sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
    };
    let latch = latch.wait(wait);
    let what = format!("latch `{}` (key {})", echo(&args.key), echo(&key));
    let outcome = tokio::select! {
        outcome = async {
            match parties {
                Some(n) => latch.barrier(n).await,
                None => latch.wait_open().await,
            }
        } => outcome,
        sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
    };
    let code = match outcome {
        Ok(opened) => {
            report(args, &key, &what, Some(opened))?;
            if opened.is_broken() { exit::LOST } else { 0 }
        }
        Err(redlease::Error::Timeout {
            waited, holder_ttl, ..
        }) => {
            report(args, &key, &what, None)?;
            let earliest = holder_ttl.map_or_else(String::new, |t| {
                format!("; the earliest live count has {} left", human(t))
            });
            eprintln!(
                "redlease: {what} was still closed after waiting {}{earliest}",
                human(waited)
            );
            exit::BUSY
        }
        Err(redlease::Error::Lost { .. }) => {
            eprintln!(
                "redlease: this party's count of {what} expired before it was counted down (redlease was stopped, or Redis did not answer for its whole ttl)"
            );
            exit::LOST
        }
        Err(e) => return Err(e).with_context(|| format!("waiting for {what}")),
    };
    let _ = client.shutdown().await;
    Ok(exit::code(code))
}

/// Prints how the round ended (`None`: it did not, the wait ran out).
fn report(args: &WaitingArgs, key: &str, what: &str, opened: Option<Opened>) -> anyhow::Result<()> {
    if args.json {
        let json = OpenedJson {
            name: &args.key,
            key: key.to_owned(),
            opened: opened.is_some(),
            counted_down: opened.map_or(0, |o| o.counted_down()),
            expired: opened.map_or(0, |o| o.expired()),
            broken: opened.is_some_and(|o| o.is_broken()),
        };
        return print(&serde_json::to_string_pretty(&json)?);
    }
    let Some(opened) = opened else { return Ok(()) };
    let broken = if opened.is_broken() {
        " broken: some party's work may be unfinished"
    } else {
        ""
    };
    print(&format!(
        "{what} opened{broken}: {} counted down, {} expired",
        opened.counted_down(),
        opened.expired()
    ))
}

/// `latch expect`.
async fn expect(args: &ExpectArgs) -> anyhow::Result<ExitCode> {
    let (client, latch, key) = open(&args.redis, &args.key).await?;
    let what = format!("latch `{}` (key {})", echo(&args.key), echo(&key));
    let (text, json, code) = if args.if_idle {
        let set = latch
            .try_expect(args.arrivals)
            .await
            .with_context(|| format!("presetting {what}"))?;
        let text = if set {
            format!("{what}: preset {} arrivals", args.arrivals)
        } else {
            format!("{what}: a round is already open; nothing preset")
        };
        let json = serde_json::json!({"name": args.key, "key": key, "preset": set});
        (text, json, exit::negative_unless(set || args.json))
    } else {
        let expected = latch
            .expect(args.arrivals)
            .await
            .with_context(|| format!("presetting {what}"))?;
        let text = format!("{what}: {expected} arrivals expected now");
        let json =
            serde_json::json!({"name": args.key, "key": key, "preset": true, "expected": expected});
        (text, json, 0)
    };
    print(&if args.json {
        serde_json::to_string_pretty(&json)?
    } else {
        text
    })?;
    let _ = client.shutdown().await;
    Ok(exit::code(code))
}

/// `latch status`.
async fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let (client, latch, key) = open(&args.redis, &args.key).await?;
    let what = format!("latch `{}` (key {})", echo(&args.key), echo(&key));
    let outstanding = latch
        .count()
        .await
        .with_context(|| format!("reading {what}"))?;
    let text = if args.json {
        serde_json::to_string_pretty(
            &serde_json::json!({"name": args.key, "key": key, "outstanding": outstanding}),
        )?
    } else {
        format!("{what}: {outstanding} outstanding (live counts and arrivals still expected)")
    };
    print(&text)?;
    let _ = client.shutdown().await;
    Ok(exit::code(exit::negative_unless(
        outstanding > 0 || args.json,
    )))
}
