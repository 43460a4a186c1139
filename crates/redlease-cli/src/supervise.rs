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
//! Nothing but the parent's pid, `--kill-after` and the command line cross from `run`: no
//! descriptor to inherit (this workspace forbids the `unsafe` that adopting one by number
//! takes). The command's environment (`REDLEASE_FENCING_TOKEN`, `REDLEASE_KEY`) and its
//! standard input, output and error are the supervisor's, which `run` set.

use std::ffi::OsString;
use std::io::{ErrorKind, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgrp, getppid, setpgid};
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;
use crate::output::human;
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
pub(crate) fn arguments(kill_after: Duration, command: &[OsString]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        SUBCOMMAND.into(),
        "--parent".into(),
        std::process::id().to_string().into(),
        "--kill-after".into(),
        humantime::format_duration(kill_after).to_string().into(),
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
        return Ok(exit::code(exit::LOST));
    }

    let mut child = match spawn(&args.command) {
        Ok(child) => child,
        Err(e) => {
            say(&format!("cannot run `{program}`: {e}"));
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
            // Sent to the group: the command got it too, and decides what it means.
            sig = forwarded.recv() => {
                tracing::debug!(signal = %sig, "the command's group got a signal");
                false
            }
        };
        if orphaned {
            say(&format!(
                "`redlease run` (pid {parent}) died while `{program}` ran, so its lock is no longer renewed; terminating `{program}` and its process group: SIGTERM now, SIGKILL in {}",
                human(args.kill_after)
            ));
            end_group(&mut child, args.kill_after).await;
            return Ok(exit::code(exit::LOST));
        }
    };
    Ok(exit::code(exit::of_status(status)))
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
/// ended and the rest of the group is gone or `grace` has passed, SIGKILL to whatever is
/// left of the group, this process included.
async fn end_group(child: &mut Child, grace: Duration) {
    let group = getpgrp();
    let deadline = tokio::time::Instant::now() + grace;
    if let Err(e) = killpg(group, Signal::SIGTERM) {
        tracing::debug!(error = %e, "SIGTERM to the command's group");
    }
    let ended = tokio::time::timeout_at(deadline, child.wait()).await;
    tracing::debug!(?ended, "the command after SIGTERM");
    // A process group offers no event to wait on: look for the rest of it.
    while others_in_group(group) {
        if tokio::time::Instant::now() >= deadline {
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
