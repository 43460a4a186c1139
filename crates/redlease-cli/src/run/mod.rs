//! `redlease run`: run a command while holding a lock, the distributed `flock(1)`; or several
//! locks at once, or the leadership of an election.

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use redlease::{Count, Guard, Leadership, LeaseHealth, MultiGuard, Wait, WriteGuard};
use tokio::process::Child;

use crate::environment;
use crate::exit;
use crate::heartbeat::Heartbeat;
use crate::operator;
use crate::output::human;
use crate::proclaim;
use crate::signals::Signals;
use crate::supervise::{self, program_name};

mod args;

pub(crate) use args::{DEFAULT_TTL_TEXT, LONG_ABOUT, RunArgs, WaitArg, parse_ttl, parse_wait};
use args::{Primitive, kill_margin};

/// A hold of any primitive: every one is one or more [`Guard`]s underneath (a
/// [`WriteGuard`] derefs to one, a [`MultiGuard`] and a [`Leadership`] have them), so the
/// rest of `run` is the same for all.
#[derive(Debug)]
enum Hold {
    Guard(Guard),
    Write(WriteGuard),
    Multi(MultiGuard),
    Leader(Leadership),
    Count(Count),
}

impl Hold {
    /// Every lease held, one per name.
    fn guards(&self) -> &[Guard] {
        match self {
            Self::Guard(guard) => std::slice::from_ref(guard),
            Self::Write(guard) => std::slice::from_ref(&**guard),
            Self::Multi(guard) => guard.guards(),
            Self::Leader(leadership) => std::slice::from_ref(leadership.guard()),
            Self::Count(count) => std::slice::from_ref(count.guard()),
        }
    }

    /// The fencing token of the lease of `name`; for a hold of one name, of that name.
    fn fencing_token(&self, name: &str) -> Option<u64> {
        match self {
            Self::Multi(guard) => guard.fencing_token(name),
            _ => self.guards().first().map(Guard::fencing_token),
        }
        .map(redlease::FencingToken::get)
    }

    /// Resolves when a lease is lost (the first of them to be, for several locks), with
    /// its name.
    async fn lost(&self) -> &str {
        match self {
            Self::Guard(guard) => guard.lost().await,
            Self::Write(guard) => guard.lost().await,
            Self::Leader(leadership) => leadership.lost().await,
            Self::Count(count) => count.lost().await,
            Self::Multi(guard) => {
                let lost = guard.guards().iter().map(|g| Box::pin(g.lost()));
                let ((), i, _) = futures_util::future::select_all(lost).await;
                return guard.guards().get(i).map_or("", Guard::name);
            }
        }
        self.guards().first().map_or("", Guard::name)
    }

    /// The end of the soonest lease held, as this process knows it.
    fn valid_until(&self) -> tokio::time::Instant {
        self.guards()
            .iter()
            .map(Guard::valid_until)
            .min()
            .unwrap_or_else(tokio::time::Instant::now)
    }

    /// The name of a lease found lost, if one is.
    fn lost_name(&self) -> Option<&str> {
        self.guards().iter().find(|g| !g.is_held()).map(Guard::name)
    }

    async fn release(self) -> redlease::Result<()> {
        match self {
            Self::Guard(guard) => guard.release().await,
            Self::Write(guard) => guard.release().await,
            Self::Multi(guard) => guard.release().await,
            Self::Leader(leadership) => leadership.resign().await,
            Self::Count(count) => count.count_down().await,
        }
    }
}

/// Acquires what `args` asks for, with its options.
async fn acquire(
    client: &redlease::Client,
    args: &RunArgs,
    wait: Wait,
    program: &str,
) -> redlease::Result<Hold> {
    macro_rules! options {
        ($builder:expr) => {
            $builder
                .prefix(args.redis.prefix.as_str())
                .ttl(args.ttl)
                .wait(wait)
        };
    }
    let key = args.first();
    match args.primitive() {
        Primitive::Lock => options!(client.lock(key)).acquire().await.map(Hold::Guard),
        Primitive::Multi => options!(client.multi_lock(args.names()))
            .acquire()
            .await
            .map(Hold::Multi),
        Primitive::Semaphore { permits, take } => options!(client.semaphore(key, permits))
            .acquire_many(take)
            .await
            .map(Hold::Guard),
        Primitive::Read => options!(client.rwlock(key).read())
            .acquire()
            .await
            .map(Hold::Guard),
        Primitive::Write => options!(client.rwlock(key).write())
            .acquire()
            .await
            .map(Hold::Write),
        Primitive::Leader => options!(client.election(key))
            .campaign(leader_note(program))
            .await
            .map(Hold::Leader),
        Primitive::Count => options!(client.latch(key))
            .count_up()
            .await
            .map(Hold::Count),
    }
}

/// The note a `run --elect` campaigns with, what `redlease leader` and `status` show: this
/// host, this pid and CMD's program name (the holder details of every other `run`).
fn leader_note(program: &str) -> String {
    redlease::diagnostics::holder_details(Some(&format!("cmd={program}")))
}

/// `redlease run`.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new()?;
    let program = program_name(&args.command);
    let client = tokio::select! {
        client = args.redis.client(Some(format!("cmd={program}"))) => client?,
        sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
    };
    let outcome = run_with(&client, &args, &mut signals, &program).await;
    // What an acquisition that failed, timed out or was interrupted took is given back in
    // the background (a multi-lock's names, a queue place): let that finish before the
    // process exits, or a name stays taken until its ttl. Bounded: with Redis unreachable
    // the leases expire by themselves.
    if tokio::time::timeout(SETTLE, client.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("give-backs still running at exit; what they hold expires by itself");
    }
    outcome
}

/// How long `run` waits at exit for give-backs running in the background.
const SETTLE: Duration = Duration::from_secs(2);

/// `run` with its client: acquire, run the command, release.
async fn run_with(
    client: &redlease::Client,
    args: &RunArgs,
    signals: &mut Signals,
    program: &str,
) -> anyhow::Result<ExitCode> {
    let wait = args.wait();
    let what = args.what();
    let acquired = tokio::select! {
        acquired = acquire(client, args, wait, program) => acquired,
        sig = signals.recv() => return Ok(exit::code(exit::of_signal(sig as i32))),
    };
    let hold = match acquired {
        Ok(hold) => hold,
        Err(redlease::Error::Timeout {
            name,
            waited,
            holder_ttl,
            ..
        }) => {
            if !args.quiet {
                busy(client, args, &name, wait, waited, holder_ttl).await;
            }
            return Ok(exit::code(args.conflict(exit::BUSY)));
        }
        Err(e) => {
            return Err(e).with_context(|| format!("acquiring {what}"));
        }
    };
    tracing::debug!(%what, fences = %fencing_tokens(args, &hold), "acquired; starting the command");

    let started = Heartbeat::create(hold.valid_until())
        .and_then(|heartbeat| spawn(args, &hold, &heartbeat).map(|child| (child, heartbeat)));
    let (mut child, heartbeat) = match started {
        Ok(started) => started,
        Err(e) => {
            give_back(hold, &what).await;
            eprintln!(
                "redlease: cannot start the supervisor of `{program}` (this redlease binary, run again): {e}"
            );
            return Ok(exit::code(exit::CANNOT_START));
        }
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);

    let mut health = RenewalWarnings::new(&hold);
    // `redlease proclaim` from the command of a leader: served while it runs.
    let proclaims = Proclaims::new(&hold, &heartbeat);
    let mut serving = futures_util::stream::FuturesUnordered::new();
    let status = loop {
        tokio::select! {
            biased;
            status = child.wait() => break status.context("waiting for the command")?,
            Some((stream, leadership)) = proclaims.accept() => {
                serving.push(proclaim::serve(stream, leadership));
            }
            Some(()) = serving.next(), if !serving.is_empty() => {}
            name = hold.lost() => {
                drop(serving);
                eprintln!(
                    "redlease: {} was lost while `{program}` ran (its lease expired or the key was removed; another holder may be running); terminating `{program}` and its process group: SIGTERM now, SIGKILL in {}",
                    lost_what(args, Some(name)),
                    human(args.kill_after())
                );
                let status = terminate(&mut child, group, args.kill_after()).await?;
                tracing::debug!(%status, "the command ended after the lease was lost");
                give_back(hold, &what).await;
                return Ok(exit::code(args.conflict(exit::LOST)));
            }
            sig = signals.recv() => forward(group, sig),
            Some((name, now)) = health.next(), if !health.done => {
                // Every renewal moves the deadline the supervisor watches.
                if let Err(e) = heartbeat.beat(hold.valid_until()) {
                    tracing::warn!(error = %e, "cannot move the lease's deadline for the supervisor; it ends the command at the deadline it has");
                }
                health.report(args, &name, now);
            }
        }
    };
    drop(serving);
    if heartbeat.ended() {
        eprintln!(
            "redlease: {} was not renewed in time while `{program}` ran (redlease was stopped, or Redis did not answer), so its supervisor terminated `{program}` and its process group before the lease could end; another holder may be running now",
            lost_what(args, hold.lost_name())
        );
        tracing::debug!(%status, "the command ended for the lease's deadline");
        give_back(hold, &what).await;
        return Ok(exit::code(args.conflict(exit::LOST)));
    }
    Ok(released(args, hold, program, status).await)
}

/// Releases `hold` once the command ended with `status`: the command's exit code, or
/// [`exit::LOST`] when the hold was found lost.
async fn released(args: &RunArgs, hold: Hold, program: &str, status: ExitStatus) -> ExitCode {
    let code = exit::of_status(status);
    let lost = lost_what(args, hold.lost_name());
    match hold.release().await {
        Ok(()) => exit::code(code),
        Err(redlease::Error::Lost { .. }) => {
            eprintln!(
                "redlease: {lost} was found lost when `{program}` ended ({}); its work may have overlapped with another holder's",
                describe(status)
            );
            exit::code(args.conflict(exit::LOST))
        }
        Err(e) => {
            eprintln!(
                "redlease: warning: could not release {} ({e:#}); it frees itself within {}",
                args.what(),
                human(args.ttl)
            );
            exit::code(code)
        }
    }
}

/// The socket of `redlease proclaim` while a leader's command runs (nothing for another
/// hold, or when it cannot listen: the command's `redlease proclaim` then says so).
struct Proclaims<'a> {
    listener: Option<(proclaim::Listener, &'a Leadership)>,
}

impl<'a> Proclaims<'a> {
    fn new(hold: &'a Hold, heartbeat: &Heartbeat) -> Self {
        let Hold::Leader(leadership) = hold else {
            return Self { listener: None };
        };
        let listener = proclaim::Listener::bind(heartbeat.dir())
            .inspect_err(|e| tracing::warn!(error = %e, "cannot listen for redlease proclaim"))
            .ok();
        Self {
            listener: listener.map(|l| (l, leadership)),
        }
    }

    /// The next connection, with the leadership to proclaim with; never without a
    /// listener. Cancel safe.
    async fn accept(&self) -> Option<(tokio::net::UnixStream, &'a Leadership)> {
        let Some((listener, leadership)) = &self.listener else {
            return std::future::pending().await;
        };
        match listener.accept().await {
            Ok(stream) => Some((stream, *leadership)),
            Err(e) => {
                tracing::debug!(error = %e, "accepting a redlease proclaim");
                None
            }
        }
    }
}

/// A lease's health, with the lock's name.
type Named = (String, LeaseHealth);

/// One warning line on stderr when renewing a lease starts failing, and one when it
/// recovers (the loss itself has its own message).
struct RenewalWarnings {
    changes: futures_util::stream::SelectAll<futures_util::stream::BoxStream<'static, Named>>,
    /// Names whose renewal is failing now.
    failing: std::collections::HashSet<String>,
    /// Every lease's health stream ended.
    done: bool,
}

impl RenewalWarnings {
    fn new(hold: &Hold) -> Self {
        let changes = futures_util::stream::select_all(hold.guards().iter().map(|guard| {
            let name = guard.name().to_owned();
            guard
                .health_changes()
                .map(move |h| (name.clone(), h))
                .boxed()
        }));
        Self {
            changes,
            failing: std::collections::HashSet::new(),
            done: false,
        }
    }

    /// The next health change of any lease; `None` (and `done`) once all ended.
    async fn next(&mut self) -> Option<Named> {
        let next = self.changes.next().await;
        self.done = next.is_none();
        next
    }

    fn report(&mut self, args: &RunArgs, name: &str, health: LeaseHealth) {
        match health {
            LeaseHealth::Retrying { failures, .. } if self.failing.insert(name.to_owned()) => {
                eprintln!(
                    "redlease: warning: renewing {} is failing (Redis did not answer; {failures} attempt{}); retrying, the lease is certain for another {}",
                    args.named(name, None),
                    if failures == 1 { "" } else { "s" },
                    human(health.remaining()),
                );
            }
            LeaseHealth::Renewed { .. } if self.failing.remove(name) => {
                eprintln!(
                    "redlease: renewing {} recovered; the lease is certain for another {}",
                    args.named(name, None),
                    human(health.remaining()),
                );
            }
            _ => {}
        }
    }
}

/// What was lost, for messages: what is held, or for several locks the one lost, `name`
/// (``lock `b` (one of locks `a`, `b`)``), or all of them when that is not known; for an
/// election, its leadership.
fn lost_what(args: &RunArgs, name: Option<&str>) -> String {
    match (args.primitive(), name) {
        (Primitive::Multi, Some(name)) if !name.is_empty() => args.named(name, None),
        (Primitive::Leader, _) => format!("leadership of {}", args.what()),
        _ => args.what(),
    }
}

/// `NAME=TOKEN` for every name held, in the order given: `REDLEASE_FENCING_TOKENS`.
fn fencing_tokens(args: &RunArgs, hold: &Hold) -> String {
    environment::fencing_tokens(
        args.names()
            .into_iter()
            .map(|name| (name, hold.fencing_token(name))),
    )
}

/// Starts the command under a supervisor (this binary again, see [`crate::supervise`]) that
/// leads a new process group, which the command joins: signals for the command go to that
/// group, and the supervisor ends the group should this process die, or should it not move
/// `heartbeat`'s deadline forward before the lease can end. The supervisor passes
/// the command's exit code through (128+N for signal N), and reports a command that cannot
/// start with 125, 126 or 127 as the command itself would have been.
fn spawn(args: &RunArgs, hold: &Hold, heartbeat: &Heartbeat) -> std::io::Result<Child> {
    let first = args.first();
    let token = hold
        .fencing_token(first)
        .map_or_else(String::new, |t| t.to_string());
    // Started from this task, which `main` runs on the main thread (`block_on`): the
    // supervisor's parent-death signal fires when that thread ends, i.e. with the process.
    let mut command = tokio::process::Command::new(supervise::program()?);
    command
        .arg0("redlease")
        .args(supervise::arguments(
            args.kill_after(),
            kill_margin(args.ttl),
            heartbeat.dir(),
            &args.command,
        ))
        .env("REDLEASE_FENCING_TOKEN", &token)
        .env("REDLEASE_KEY", first)
        .env("REDLEASE_KEYS", environment::keys(args.names()))
        .env("REDLEASE_FENCING_TOKENS", fencing_tokens(args, hold))
        .process_group(0);
    if args.primitive() == Primitive::Leader {
        command
            .env("REDLEASE_TERM", &token)
            .env(proclaim::ENV, proclaim::path(heartbeat.dir()));
    } else {
        // Not inherited from a `run --elect` around this one.
        command
            .env_remove("REDLEASE_TERM")
            .env_remove(proclaim::ENV);
    }
    command.spawn()
}

/// Sends `sig` to the command's process group.
fn forward(group: Option<Pid>, sig: Signal) {
    let Some(group) = group else { return };
    tracing::debug!(signal = %sig, %group, "forwarding");
    if let Err(e) = killpg(group, sig) {
        tracing::debug!(error = %e, "the command's process group is gone");
    }
}

/// SIGTERM to the command's group, then SIGKILL to whatever is left of the group once
/// `grace` has passed (the command itself may exit sooner, its children later); returns
/// the command's status.
async fn terminate(
    child: &mut Child,
    group: Option<Pid>,
    grace: Duration,
) -> anyhow::Result<ExitStatus> {
    let deadline = tokio::time::Instant::now() + grace;
    forward(group, Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout_at(deadline, child.wait()).await {
        // The command is gone; give the rest of its group the rest of the grace period.
        // A process group offers no event to wait on: poll whether it still exists.
        while group.is_some_and(|g| killpg(g, None).is_ok())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        forward(group, Signal::SIGKILL);
        return status.context("waiting for the command");
    }
    forward(group, Signal::SIGKILL);
    child.wait().await.context("waiting for the command")
}

/// Releases a hold whose outcome no longer changes the exit code; logs failures.
async fn give_back(hold: Hold, what: &str) {
    if let Err(e) = hold.release().await {
        tracing::debug!(%what, error = %e, "release after the command");
    }
}

/// `exited with 3`, `killed by SIGTERM`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => Signal::try_from(sig)
            .map_or_else(|_| format!("signal {sig}"), |s| format!("killed by {s}")),
        (None, None) => status.to_string(),
    }
}

/// Says, on one line, that the lock is busy: the key, the holder, its time left.
async fn busy(
    client: &redlease::Client,
    args: &RunArgs,
    name: &str,
    wait: Wait,
    waited: Duration,
    holder_ttl: Option<Duration>,
) {
    // The timeout names the lock still busy (one of several with several --key).
    let name = if args.names().contains(&name) {
        name
    } else {
        args.first()
    };
    // The holder as the majority of a quorum sees it, else as the first node that has one.
    let holder = async {
        let keys = redlease::LockKeys::new(&args.redis.prefix, name).ok()?;
        let inspection = operator::read(client, name, &keys).await.ok()?;
        let key = inspection.key.clone();
        let snapshot = if inspection.is_held() {
            inspection.snapshot
        } else {
            inspection
                .nodes
                .into_iter()
                .find_map(|n| n.snapshot.ok().filter(redlease::Snapshot::is_held))?
        };
        Some(operator::LockState::of(name, &key, &snapshot))
    };
    let state = tokio::time::timeout(Duration::from_secs(1), holder)
        .await
        .ok()
        .flatten();
    let key = format!("{}{}", args.redis.prefix, name);
    let who = match state {
        Some(state) => state.holder_summary(),
        None => match holder_ttl {
            Some(ttl) => format!("holder's lease has {} left", human(ttl)),
            None => "holder set no expiry".into(),
        },
    };
    let gave_up = match wait {
        Wait::No => "not waiting (--no-wait)".to_owned(),
        _ => format!("gave up after waiting {}", human(waited)),
    };
    let busy = if args.primitive() == Primitive::Leader {
        "has another leader"
    } else {
        "is busy"
    };
    eprintln!(
        "redlease: {} {busy}: {who}; {gave_up}",
        args.named(name, Some(&key))
    );
}
