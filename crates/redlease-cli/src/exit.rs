//! Exit codes of `redlease`, the same for every subcommand, and how an error maps to one.

use std::process::{ExitCode, ExitStatus};

/// `status`: the lock is free; `leader`: nobody leads; `release --force`: there was
/// nothing to remove; `bench` and `demo`: a correctness check failed.
pub(crate) const NEGATIVE: u8 = 1;
/// Bad usage (unknown flag, bad duration, missing command...) or any other error.
pub(crate) const ERROR: u8 = 2;
/// Redis could not be reached (`EX_UNAVAILABLE` of sysexits.h).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The server refused the credentials (none given where it wants a password, or wrong
/// ones): `EX_NOPERM` of sysexits.h. Trying again does not help.
pub(crate) const NO_PERMISSION: u8 = 77;
/// `run`: the lock stayed busy (`--no-wait`, or the wait ran out); `EX_TEMPFAIL` of
/// sysexits.h: try again later.
pub(crate) const BUSY: u8 = 75;
/// `run`: the lease was lost while CMD ran (CMD was terminated), or not renewed in time
/// (its supervisor terminated CMD), or found lost when it ended.
pub(crate) const LOST: u8 = 79;
/// `run`: CMD could not be started (as env(1) and timeout(1) say it).
pub(crate) const CANNOT_START: u8 = 125;
/// `run`: CMD was found but is not executable.
pub(crate) const NOT_EXECUTABLE: u8 = 126;
/// `run`: CMD was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit codes of every command, shown once: in `redlease --help`.
pub(crate) const TABLE: &str = "\
Exit codes (every command):
  0       success. status, leader, release --force with --json: the answer was read
          (held or free, a leader or none: the JSON says), so `set -e` scripts go on
  1       without --json: status: the lock is free; leader: nobody leads; release
          --force: nothing was held. bench, demo: a correctness check failed
  2       bad usage (unknown flag, bad duration, no CMD, a --kill-after that outlives the
          lease) or another error
  69      Redis (or a majority of a quorum's nodes) could not be reached (EX_UNAVAILABLE);
          run: CMD was not started
  77      Redis refused the credentials: it wants a password and none was given, or the
          user or password is wrong (EX_NOPERM); run: CMD was not started
  128+N   ended by signal N (SIGINT, SIGTERM, SIGHUP): status --watch, leader --watch, or
          run while still waiting for the lock

Exit codes of run:
  0..255  CMD's own exit code, passed through; 128+N when CMD was killed by signal N
  75      the lock is busy: --no-wait, or --wait ran out (EX_TEMPFAIL); CMD was not
          started. One line on stderr names the key, the holder and its time left (not
          with --quiet). Several --key: one of them stayed busy (named), none is kept;
          --elect: another candidate still leads
  79      the lease was lost while CMD ran (the key expired without renewal, e.g. Redis was
          unreachable for the whole TTL, or someone deleted it): CMD and its process group
          got SIGTERM, then SIGKILL after --kill-after. Also when CMD ended but its lock was
          found lost at release: its work may have overlapped with another holder's. Also
          when redlease was stopped (SIGSTOP, Ctrl-Z) or could not renew until shortly
          before the lease's end: its supervisor then ended CMD's process group, and
          redlease says so when it resumes. Any one of several --key; leadership with --elect
  125     CMD could not be started; 126: CMD is not executable; 127: CMD was not found
  137     redlease was killed by SIGKILL (e.g. the OOM killer) while CMD ran: CMD and its
          process group got SIGTERM, then SIGKILL after --kill-after, from the supervisor
          between redlease and CMD; the lock frees itself within --ttl
  -E N    --conflict-exit-code N replaces 69, 75 and 79 (unreachable, busy, lost) with N,
          so that they cannot be taken for CMD's own exit codes (flock -E)

Exit codes of latch (latch count: those of run):
  0       wait, barrier: the latch opened, every count counted down
  1       expect --if-idle: a round was already open, nothing preset; status: no live
          count (with --json: 0)
  75      wait, barrier: the latch was still closed when --wait ran out
  79      wait, barrier: the latch opened broken (a count expired: its party died or lost
          Redis for its whole ttl); barrier: this party's own count expired

Exit codes of proclaim:
  0       proclaimed; 79 leadership was lost; 2 not run by the command of run --elect

Environment:
  REDIS_URL   the Redis to use when no --redis is given (default redis://127.0.0.1:6379)
  REDISCLI_AUTH  the password, when the URL has none (as redis-cli): kept out of the
              command line, where other users of the machine could read it
  RUST_LOG    log filter for diagnostics on stderr (default error), e.g. warn or debug";

/// The end of every subcommand's `--help`: where the exit codes are (once, for all).
pub(crate) const SEE_TABLE: &str = "\
Exit codes: redlease --help lists them, for every command.";

/// 0 when `yes`, else [`NEGATIVE`]: the answer of `status`, `leader` and `release
/// --force`. Under `--json` they pass `yes` whatever the answer, which the JSON carries: a
/// free lock is an answer, not a failure, for a script run with `set -e`.
pub(crate) fn negative_unless(yes: bool) -> u8 {
    if yes { 0 } else { NEGATIVE }
}

/// The exit code for an error that stopped a command: [`NO_PERMISSION`] when Redis
/// refused the credentials, [`UNAVAILABLE`] when Redis (or a quorum's majority) could not
/// be reached, else [`ERROR`].
pub(crate) fn code_of(err: &anyhow::Error) -> u8 {
    let refused = err.chain().any(|cause| {
        cause
            .downcast_ref::<redlease::Error>()
            .is_some_and(|e| matches!(e, redlease::Error::Auth { .. }))
            || Said::means(cause, NO_PERMISSION)
    });
    if refused {
        return NO_PERMISSION;
    }
    let unreachable = err.chain().any(|cause| {
        cause
            .downcast_ref::<redlease::Error>()
            .is_some_and(|e| e.is_connection() || matches!(e, redlease::Error::NoQuorum { .. }))
            || cause
                .downcast_ref::<redis::RedisError>()
                .is_some_and(redlease::is_connection_error)
            || Said::means(cause, UNAVAILABLE)
    });
    if unreachable { UNAVAILABLE } else { ERROR }
}

/// An error said in the CLI's own words, with the exit code it means: [`UNAVAILABLE`]
/// when Redis could not be reached (e.g. too few nodes of a quorum answered),
/// [`NO_PERMISSION`] when it refused the credentials (e.g. a password from
/// `REDISCLI_AUTH`).
#[derive(Debug)]
pub(crate) struct Said {
    /// The exit code.
    pub(crate) code: u8,
    /// The message.
    pub(crate) text: String,
}

impl Said {
    /// Whether `cause` is one of these, meaning exit code `code`.
    fn means(cause: &(dyn std::error::Error + 'static), code: u8) -> bool {
        cause.downcast_ref::<Self>().is_some_and(|s| s.code == code)
    }
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Said {}

/// A child's exit status as the shell reports it: its code, or 128+N for signal N.
pub(crate) fn of_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(ERROR);
    }
    status.signal().map_or(ERROR, of_signal)
}

/// 128+N for signal N, the shell's convention.
pub(crate) fn of_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// `code` as an [`ExitCode`].
pub(crate) fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// The error and its causes on one line: `context: cause: cause`, skipping a cause that
/// only repeats the one before it (redis-rs errors show their source themselves), with
/// multi-line causes (a server log, say) joined by ` | `.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause
            .to_string()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" | ");
        if parts.last().is_none_or(|last| !last.ends_with(&text)) {
            parts.push(text);
        }
    }
    // A name in the library's own messages may carry control characters: shown escaped.
    parts
        .join(": ")
        .chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            escaped
                .into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect()
}
