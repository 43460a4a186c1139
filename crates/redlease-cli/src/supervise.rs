//! `redlease __supervise` (hidden): the small process between `redlease run` and its
//! command, which ends the command's process group when `redlease run` dies.
//!
//! `redlease run` renews the lease while the command runs. If `run` is killed with SIGKILL
//! (the OOM killer, `kill -9`) the lease is no longer renewed and another holder takes the
//! lock within one ttl; a command left running would then run on without the lock.
//! `flock(1)` has no such hole because its lock lives with a descriptor the command
//! inherits; a lease on Redis lives with the process that renews it, so the command must
//! die with that process.
//!
//! The process tree is `redlease run` -> supervisor -> command:
//! - `run` starts its own binary in this mode as the leader of a new process group, and the
//!   command joins that group. `run` therefore signals the whole group exactly as before
//!   (forwarded SIGINT, SIGTERM and SIGHUP; SIGTERM then SIGKILL on a lost lease), and the
//!   supervisor outlives those signals (it handles them: the command gets them itself).
//! - The supervisor waits for the command and exits with its exit code, 128+N when signal N
//!   killed it (the code `run` reported before there was a supervisor), or 125, 126 or 127
//!   when it cannot be started, after saying why on stderr.
//! - It learns of `run`'s death from `PR_SET_PDEATHSIG` (prompt: `run` starts it from its
//!   main thread, which ends only with the process), backed by a check of its parent pid
//!   every [`PARENT_CHECK`], which holds whichever thread started it: a process whose
//!   parent died is adopted by another. Then it does what `run` does with a lost lease:
//!   SIGTERM to the group, SIGKILL to what is left of it after `--kill-after`.
//!
//! - `run` may also live on without renewing: stopped (SIGSTOP, Ctrl-Z, a debugger), or
//!   with renewals that fail. A stopped process cannot stop its command, so the supervisor
//!   watches the lease's deadline, which `run` moves forward with every renewal (see
//!   [`crate::heartbeat`]). Should it not move, the supervisor ends the group so that the
//!   SIGKILL comes `--margin` before the deadline: SIGTERM `--kill-after` before that.
//!   `run` ends a lost lease's command itself; this is for a `run` that cannot.
//!
//! Nothing but the parent's pid, `--kill-after`, `--margin`, the deadline's directory and
//! the command line cross from `run`: no descriptor to inherit (this workspace forbids the
//! `unsafe` that adopting one by number takes). The command's environment
//! (`REDLEASE_FENCING_TOKEN`, `REDLEASE_KEY`) and its standard input, output and error are
//! the supervisor's, which `run` set.

use std::ffi::OsString;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgrp, getppid, setpgid};
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::exit;
use crate::heartbeat;
use crate::output::{echo, human};
use crate::signals::Signals;

/// The hidden subcommand's name.
pub(crate) const SUBCOMMAND: &str = "__supervise";

/// How often the supervisor checks that `redlease run` is still its parent, should the
/// parent-death signal not come (it is tied to the thread that started the supervisor).
const PARENT_CHECK: Duration = Duration::from_millis(500);

/// How often the rest of the command's group is looked for after the command ended.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Arguments of `redlease __supervise`, which only `redlease run` gives.
#[derive(Debug, clap::Args)]
pub(crate) struct SuperviseArgs {
    /// Pid of the `redlease run` that started this supervisor
    #[arg(long, value_name = "PID")]
    parent: i32,

    /// How long the command's process group has between SIGTERM and SIGKILL once `run`
    /// died
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    kill_after: Duration,

    /// How long before the lease's deadline the command's process group gets SIGKILL
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    margin: Duration,

    /// The directory that holds the lease's deadline, which `run` moves forward
    #[arg(long, value_name = "DIR")]
    deadline: PathBuf,

    /// The command to run, and its arguments
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// The arguments that make `redlease` a supervisor for `command`, after the program name.
pub(crate) fn arguments(
    kill_after: Duration,
    margin: Duration,
    deadline: &Path,
    command: &[OsString],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        SUBCOMMAND.into(),
        "--parent".into(),
        std::process::id().to_string().into(),
        "--kill-after".into(),
        humantime::format_duration(kill_after).to_string().into(),
        "--margin".into(),
        humantime::format_duration(margin).to_string().into(),
        "--deadline".into(),
        deadline.into(),
        "--".into(),
    ];
    args.extend(command.iter().cloned());
    args
}

/// The program to start as the supervisor: this very binary. Its path, so that `ps`,
/// `top` and `pgrep` call the supervisor `redlease`; on Linux `/proc/self/exe` when that
/// path no longer holds this binary (replaced by a package upgrade while `run` waited).
pub(crate) fn program() -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let path = std::env::current_exe()?;
    let this = std::path::Path::new("/proc/self/exe");
    if !cfg!(target_os = "linux") {
        return Ok(path);
    }
    match (std::fs::metadata(&path), std::fs::metadata(this)) {
        (Ok(found), Ok(running))
            if (found.dev(), found.ino()) == (running.dev(), running.ino()) =>
        {
            Ok(path)
        }
        (_, Ok(_)) => Ok(this.into()),
        (_, Err(_)) => Ok(path),
    }
}

/// `redlease __supervise`: starts the command in this process's group, waits for it and
/// exits with its exit code; ends the group if `redlease run` dies first.
pub(crate) fn main(args: SuperviseArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(supervise(args))
}

async fn supervise(args: SuperviseArgs) -> anyhow::Result<ExitCode> {
    let program = program_name(&args.command);
    let parent = Pid::from_raw(args.parent);
    // `run` started it as the leader of a new group; make sure, since the end of this
    // group is what the supervisor is for (and never the end of its parent's group).
    setpgid(Pid::from_raw(0), Pid::from_raw(0)).context("leading a process group")?;
    // Handlers first: a signal sent to the group must not kill the supervisor, and the
    // parent-death signal must find its handler.
    let mut forwarded = Signals::new()?;
    let mut parent_died = signal(SignalKind::user_defined2()).context("handling SIGUSR2")?;
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGUSR2) {
        tracing::debug!(error = %e, "no parent-death signal; checking the parent pid only");
    }
    if getppid() != parent {
        // `run` died before the command started: do not start it.
        say(&format!(
            "`redlease run` (pid {parent}) died before `{program}` started; not starting it"
        ));
        heartbeat::remove(&args.deadline);
        return Ok(exit::code(exit::LOST));
    }
    let watch = Deadline::new(&args);
    let mut deadline = watch.read(Instant::now());
    if watch.term_at(deadline) <= Instant::now() {
        say(&format!(
            "the lease of `redlease run` (pid {parent}) is too close to its end to start `{program}`; not starting it"
        ));
        if let Err(e) = heartbeat::mark_ended(&args.deadline) {
            tracing::debug!(error = %e, "marking the command ended for its deadline");
        }
        return Ok(exit::code(exit::LOST));
    }

    let mut child = match spawn(&args.command) {
        Ok(child) => child,
        Err(e) => {
            // The path as given (as env(1) says it), not only its file name.
            let tried = args.command.first().map(|p| p.to_string_lossy());
            say(&format!(
                "cannot run `{}`: {e}",
                echo(tried.as_deref().unwrap_or("?"))
            ));
            return Ok(exit::code(match e.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                ErrorKind::PermissionDenied => exit::NOT_EXECUTABLE,
                _ => exit::CANNOT_START,
            }));
        }
    };
    let mut check = tokio::time::interval(PARENT_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let status = loop {
        let orphaned = tokio::select! {
            biased;
            status = child.wait() => break status.context("waiting for the command")?,
            _ = parent_died.recv() => getppid() != parent,
            _ = check.tick() => getppid() != parent,
            () = tokio::time::sleep_until(watch.term_at(deadline)) => {
                // Renewals move the deadline long before this: look whether they did.
                deadline = watch.read(deadline);
                if watch.term_at(deadline) > Instant::now() {
                    continue;
                }
                if let Err(e) = heartbeat::mark_ended(&args.deadline) {
                    tracing::debug!(error = %e, "marking the command ended for its deadline");
                }
                let kill_at = watch.kill_at(deadline);
                say(&format!(
                    "`redlease run` (pid {parent}) did not renew its lease in time (it is stopped, or Redis did not answer), which may end in {}; terminating `{program}` and its process group before it does: SIGTERM now, SIGKILL in {}",
                    human(deadline.saturating_duration_since(Instant::now())),
                    human(kill_at.saturating_duration_since(Instant::now())),
                ));
                end_group(&mut child, kill_at).await;
                return Ok(exit::code(exit::LOST));
            }
            // Sent to the group: the command got it too, and decides what it means.
            sig = forwarded.recv() => {
                tracing::debug!(signal = %sig, "the command's group got a signal");
                false
            }
        };
        if orphaned {
            let kill_at = (Instant::now() + args.kill_after).min(watch.kill_at(deadline));
            say(&format!(
                "`redlease run` (pid {parent}) died while `{program}` ran, so its lock is no longer renewed; terminating `{program}` and its process group: SIGTERM now, SIGKILL in {}",
                human(kill_at.saturating_duration_since(Instant::now()))
            ));
            // Nobody else will remove it.
            heartbeat::remove(&args.deadline);
            end_group(&mut child, kill_at).await;
            return Ok(exit::code(exit::LOST));
        }
    };
    Ok(exit::code(exit::of_status(status)))
}

/// The lease's deadline as the supervisor watches it, and when to act on it.
struct Deadline<'a> {
    dir: &'a Path,
    kill_after: Duration,
    margin: Duration,
}

impl<'a> Deadline<'a> {
    fn new(args: &'a SuperviseArgs) -> Self {
        Self {
            dir: &args.deadline,
            kill_after: args.kill_after,
            margin: args.margin,
        }
    }

    /// The deadline `run` wrote last; `known` when it cannot be read (a deadline that
    /// cannot be read does not move).
    fn read(&self, known: Instant) -> Instant {
        match heartbeat::read(self.dir) {
            Ok(deadline) => deadline,
            Err(e) => {
                tracing::debug!(error = %e, "reading the lease's deadline");
                known
            }
        }
    }

    /// When the command's group gets SIGKILL for `deadline`: `--margin` before it.
    fn kill_at(&self, deadline: Instant) -> Instant {
        deadline
            .checked_sub(self.margin)
            .unwrap_or_else(Instant::now)
    }

    /// When the command's group gets SIGTERM for `deadline`: `--kill-after` before the
    /// SIGKILL.
    fn term_at(&self, deadline: Instant) -> Instant {
        self.kill_at(deadline)
            .checked_sub(self.kill_after)
            .unwrap_or_else(Instant::now)
    }
}

/// Starts the command in this process's group (the supervisor leads it), with the
/// supervisor's environment and standard input, output and error.
fn spawn(command: &[OsString]) -> std::io::Result<Child> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "no command"))?;
    tokio::process::Command::new(program).args(rest).spawn()
}

/// SIGTERM to this process's group (the supervisor handles it), then, once the command
/// ended and the rest of the group is gone or `deadline` has come, SIGKILL to whatever is
/// left of the group, this process included.
async fn end_group(child: &mut Child, deadline: Instant) {
    let group = getpgrp();
    if let Err(e) = killpg(group, Signal::SIGTERM) {
        tracing::debug!(error = %e, "SIGTERM to the command's group");
    }
    let ended = tokio::time::timeout_at(deadline, child.wait()).await;
    tracing::debug!(?ended, "the command after SIGTERM");
    // A process group offers no event to wait on: look for the rest of it.
    while others_in_group(group) {
        if Instant::now() >= deadline {
            let _ = killpg(group, Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(GROUP_POLL).await;
    }
}

/// Whether a live process other than this one is in process group `group`. Where `/proc`
/// cannot tell, assumes so (the group then gets SIGKILL when the grace period ends).
fn others_in_group(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let me = std::process::id();
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .any(|pid| live_group_of(pid) == Some(group.as_raw()))
}

/// The process group of live process `pid` from `/proc/PID/stat` (`pid (comm) state ppid
/// pgrp ...`, where comm may hold spaces and parentheses); `None` for a zombie (dead,
/// waiting to be reaped) or a process that is gone.
fn live_group_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?;
    if state == "Z" {
        return None;
    }
    fields.next()?; // ppid
    fields.next()?.parse().ok()
}

/// One line on stderr, ignoring a failure to write it: `eprintln!` would panic on a closed
/// stderr, and nothing may stop the supervisor from ending the group.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "redlease: {message}");
}

/// The program's file name, for messages and the holder details (never its arguments,
/// which may carry secrets).
pub(crate) fn program_name(command: &[OsString]) -> String {
    command
        .first()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map_or_else(|| "?".into(), |n| n.to_string_lossy().into_owned())
}
