//! The lease's deadline, passed from `redlease run` to its supervisor while the command runs.
//!
//! A `redlease run` that is stopped (SIGSTOP, Ctrl-Z, a debugger) no longer renews its
//! lease, and a stopped process cannot stop its command either: the supervisor, which is
//! not stopped with it (it leads another process group), must. So `run` keeps a deadline,
//! the end of its lease as it knows it, and moves it forward with every renewal; the
//! supervisor ends the command's process group before the deadline unless it has moved.
//!
//! The deadline is an instant of `CLOCK_MONOTONIC`, one clock for every process of the
//! machine, written as whole nanoseconds in the file `deadline` of a directory that only
//! this user can enter (mode 0700), under the temporary directory: written under another
//! name and renamed, so that a reader sees a whole deadline or the one before. Nothing
//! wakes the supervisor when it moves: it reads the file again when the deadline it knows
//! comes near, and the renewals that move it come long before that. Both conversions
//! between this process's [`Instant`]s and the shared clock err early, never late: a
//! process paused in the middle of one makes the deadline sooner.
//!
//! When the supervisor ends the command for a deadline, it first leaves the file `ended`
//! beside it, so that `run`, once it resumes, tells that end from the command's own exit.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use tokio::time::Instant;

/// The file that holds the deadline.
const DEADLINE: &str = "deadline";
/// The file being written, renamed to [`DEADLINE`] once whole.
const NEXT: &str = "deadline.next";
/// The mark the supervisor leaves when it ends the command for a deadline.
const ENDED: &str = "ended";

/// `run`'s side: the directory it made, whose deadline it moves. Removed on drop.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    dir: PathBuf,
}

impl Heartbeat {
    /// Makes the directory, with `until` as its first deadline.
    pub(crate) fn create(until: Instant) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = std::env::temp_dir().join(format!(
            "redlease-run-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        // Never an existing directory: one made by somebody else could be read or moved.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let heartbeat = Self { dir };
        heartbeat.beat(until)?;
        Ok(heartbeat)
    }

    /// The directory, which the supervisor is given.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves the deadline to `until`.
    pub(crate) fn beat(&self, until: Instant) -> std::io::Result<()> {
        let nanos = to_shared(until)?.as_nanos();
        let next = self.dir.join(NEXT);
        let mut file = std::fs::File::create(&next)?;
        writeln!(file, "{nanos}")?;
        drop(file);
        std::fs::rename(next, self.dir.join(DEADLINE))
    }

    /// Whether the supervisor ended the command for a deadline.
    pub(crate) fn ended(&self) -> bool {
        self.dir.join(ENDED).exists()
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// The supervisor's side: the deadline in `dir`, as an instant of this process.
pub(crate) fn read(dir: &Path) -> std::io::Result<Instant> {
    let text = std::fs::read_to_string(dir.join(DEADLINE))?;
    let nanos: u64 = text.trim().parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a deadline that is not a number of nanoseconds: {e}"),
        )
    })?;
    from_shared(Duration::from_nanos(nanos))
}

/// The supervisor's side: leaves the mark that says it ended the command for a deadline.
pub(crate) fn mark_ended(dir: &Path) -> std::io::Result<()> {
    std::fs::File::create(dir.join(ENDED)).map(drop)
}

/// Removes `dir` and what is in it, best effort: `run` at its end, the supervisor when
/// `run` died.
pub(crate) fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::debug!(error = %e, dir = %dir.display(), "removing the deadline's directory");
    }
}

/// `CLOCK_MONOTONIC` now.
fn shared_now() -> std::io::Result<Duration> {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(Duration::from)
        .map_err(std::io::Error::from)
}

/// `until` on the shared clock. The shared clock is read first: the time until `until`
/// measured later is shorter, so the result is never later than `until`.
fn to_shared(until: Instant) -> std::io::Result<Duration> {
    let shared = shared_now()?;
    Ok(shared + until.saturating_duration_since(Instant::now()))
}

/// `shared` as an instant of this process. This process's clock is read first: the time
/// until `shared` measured later is shorter, so the result is never later than `shared`.
fn from_shared(shared: Duration) -> std::io::Result<Instant> {
    let now = Instant::now();
    Ok(now + shared.saturating_sub(shared_now()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_back_as_it_went_or_sooner() -> std::io::Result<()> {
        let until = Instant::now() + Duration::from_secs(5);
        let heartbeat = Heartbeat::create(until)?;
        let read = read(heartbeat.dir())?;
        assert!(read <= until, "{read:?} is later than {until:?}");
        assert!(
            until - read < Duration::from_secs(1),
            "{read:?} vs {until:?}"
        );
        assert!(!heartbeat.ended());
        mark_ended(heartbeat.dir())?;
        assert!(heartbeat.ended());
        let dir = heartbeat.dir().to_owned();
        drop(heartbeat);
        assert!(!dir.exists());
        Ok(())
    }
}
