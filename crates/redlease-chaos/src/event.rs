//! Events of a chaos run and the line protocol workers use to report them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// What happened. Worker events come first; the runner's (faults) after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Kind {
    /// A worker acquired the lock (sent after `acquire` returned).
    Acquire,
    /// A worker entered its critical section (with its guard's claim: see
    /// [`WorkerLine::until`]).
    Begin,
    /// A worker still inside its section, kept there by the runner, says what its guard
    /// claims now (renewals move it on; see [`WorkerLine::until`]).
    Claim,
    /// A worker wrote to the fenced resource with its fencing token.
    Write,
    /// A worker left its critical section.
    End,
    /// A worker is about to release the lock (sent *before* the release request, so that
    /// the next holder's `Acquire` is always stamped after it).
    Release,
    /// A worker learned that its lease was lost (`guard.lost()` resolved, or the release
    /// answered `Error::Lost`); at most one per acquisition.
    Lost,
    /// A worker's acquisition failed with an error other than a timeout (e.g. Redis down).
    Error,
    /// A worker starts waiting for the lock (`acquire`, or `run` before its work); the
    /// event carries the wait's bound. Sent before the request, so the wait measured
    /// from its stamp is never shorter than the real one.
    Wait,
    /// A worker's wait ended with `Error::Timeout` (its bound passed without the lock).
    Timeout,
    /// A worker dropped its `acquire` or `run` future before it returned (the wait ends
    /// here if it had not ended with an `ACQ`).
    Cancel,
    /// A worker leaves the run (it was told to stop); it wants the lock no more.
    Bye,
    /// The runner sent SIGKILL to the worker (its hold ends: nothing runs there any more).
    Kill,
    /// The runner sent SIGSTOP to the worker.
    Pause,
    /// The runner sent SIGCONT to a worker it had paused.
    Resume,
    /// The runner injected a fault into Redis or the network (worker 0).
    Fault,
    /// Redis became unreachable on purpose (killed or paused by the runner; worker 0):
    /// stalls do not accrue until the matching `UP`.
    Down,
    /// Redis is back (it answers `PING` again) after a `DOWN`.
    Up,
}

impl Kind {
    /// The word of the line protocol.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Acquire => "ACQ",
            Kind::Begin => "BEGIN",
            Kind::Claim => "CLAIM",
            Kind::Write => "WRITE",
            Kind::End => "END",
            Kind::Release => "REL",
            Kind::Lost => "LOST",
            Kind::Error => "ERR",
            Kind::Wait => "WAIT",
            Kind::Timeout => "TIMEOUT",
            Kind::Cancel => "CANCEL",
            Kind::Bye => "BYE",
            Kind::Kill => "KILL",
            Kind::Pause => "PAUSE",
            Kind::Resume => "RESUME",
            Kind::Fault => "FAULT",
            Kind::Down => "DOWN",
            Kind::Up => "UP",
        }
    }
}

/// The mode of a read-write lock hold (events of the other primitives carry none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Mode {
    /// A read hold: shared with other readers. Its `WRITE` event is a read of the fenced
    /// resource.
    Read,
    /// A write hold: alone.
    Write,
}

impl Mode {
    /// The word of the line protocol.
    pub fn word(self) -> &'static str {
        match self {
            Mode::Read => "r",
            Mode::Write => "w",
        }
    }
}

/// The fenced resource's decision on a `WRITE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// The write was applied.
    Accepted,
    /// The write carried a token lower than one already accepted, and was refused.
    Rejected,
}

/// One event of a run's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// When the judge received it, since the judge started (monotonic).
    pub at: Duration,
    /// What happened.
    pub kind: Kind,
    /// The worker it concerns (0 for faults not aimed at a worker).
    pub worker: u32,
    /// The fencing token of the worker's current acquisition (0 when none).
    pub token: u64,
    /// The worker's own sequence number for this event (0 for the runner's events).
    pub seq: u64,
    /// For a `WRITE`: what the fenced resource decided.
    pub verdict: Option<Verdict>,
    /// For a `WAIT`: the longest the wait may last (the lock's `wait`).
    pub bound: Option<Duration>,
    /// For a read-write lock: the mode of the hold the event concerns (wanted, for a
    /// `WAIT`).
    pub mode: Option<Mode>,
    /// For a multi-lock: the one-letter name of the lock the event concerns (a
    /// multi-lock's `ACQ`, `BEGIN`, `WRITE`, `END`, `REL` and `LOST` come one per name, each
    /// with that name's fencing token; its `WAIT` and the ends of a wait carry none).
    pub lock: Option<char>,
    /// For a `BEGIN`: until when the worker's guard claimed, at entry into its section, to
    /// hold the lock (its `valid_until`), on the judge's clock. The claim runs from the
    /// `BEGIN` to then, or to the hold's `REL`, `LOST`, `KILL` or `BYE` if earlier.
    pub claimed_until: Option<Duration>,
    /// When the worker sent the line (judge's clock): `at` less the time the line spent
    /// in the pipe and waiting for the judge to run (see [`Event::time`]).
    pub sent: Option<Duration>,
}

impl Event {
    /// An event with no verdict and sequence number 0 (for tests and the runner).
    pub fn new(at: Duration, kind: Kind, worker: u32, token: u64) -> Self {
        Self {
            at,
            kind,
            worker,
            token,
            seq: 0,
            verdict: None,
            bound: None,
            mode: None,
            lock: None,
            claimed_until: None,
            sent: None,
        }
    }

    /// When it happened: when its worker sent it, if known, else when the judge stamped it.
    /// A judge that is not scheduled for a while (a loaded machine) stamps the lines that
    /// waited meanwhile late and together; their send times are not moved.
    pub fn time(&self) -> Duration {
        self.sent.unwrap_or(self.at)
    }

    /// The same event sent by its worker at `sent` (judge's clock).
    #[must_use]
    pub fn sent(mut self, sent: Duration) -> Self {
        self.sent = Some(sent);
        self
    }

    /// The same event with a claim (for a `BEGIN`): the guard said it held until `until`
    /// (judge's clock).
    #[must_use]
    pub fn claimed_until(mut self, until: Duration) -> Self {
        self.claimed_until = Some(until);
        self
    }

    /// The same event about the lock named `name`, of a multi-lock.
    #[must_use]
    pub fn lock(mut self, name: char) -> Self {
        self.lock = Some(name);
        self
    }

    /// The same event with a read-write lock mode.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The same event with a verdict.
    #[must_use]
    pub fn verdict(mut self, verdict: Verdict) -> Self {
        self.verdict = Some(verdict);
        self
    }

    /// The same event with a wait bound (for a `WAIT`).
    #[must_use]
    pub fn bound(mut self, bound: Duration) -> Self {
        self.bound = Some(bound);
        self
    }
}

/// One line a worker sends: `KIND WORKER TOKEN SEQ [BOUND_MS] [r|w] [@NAME] [until=US]
/// [at=US]`,
/// e.g. `WRITE 3 117 42` or `WAIT 3 0 43 2000` (a `WAIT` carries its bound in milliseconds; a
/// worker holding a read-write lock ends every line with the mode of its hold, `r` or `w`;
/// a worker holding a multi-lock ends each line about one of its locks with `@` and that
/// lock's one-letter name, e.g. `ACQ 3 118 44 @b`; a `BEGIN` ends with the guard's claim,
/// `until=` and its `valid_until` in microseconds of `CLOCK_MONOTONIC`, the clock every
/// process of the machine shares: see [`monotonic`]; every line of a worker ends with `at=`
/// and the time it was sent, on the same clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLine {
    /// What happened.
    pub kind: Kind,
    /// The worker's id.
    pub worker: u32,
    /// Its current fencing token.
    pub token: u64,
    /// Its sequence number.
    pub seq: u64,
    /// For a `WAIT`: its bound (whole milliseconds on the wire).
    pub bound: Option<Duration>,
    /// For a read-write lock: the mode of the hold.
    pub mode: Option<Mode>,
    /// For a multi-lock: the one-letter name of the lock the line concerns.
    pub lock: Option<char>,
    /// For a `BEGIN`: the guard's `valid_until` at entry into the section; for a `CLAIM`,
    /// now; as a reading of [`monotonic`] (whole microseconds on the wire).
    pub until: Option<Duration>,
    /// When the worker sent the line, as a reading of [`monotonic`] (whole microseconds on
    /// the wire).
    pub sent: Option<Duration>,
}

impl WorkerLine {
    /// A line without a bound, mode or lock name.
    pub fn new(kind: Kind, worker: u32, token: u64, seq: u64) -> Self {
        Self {
            kind,
            worker,
            token,
            seq,
            bound: None,
            mode: None,
            lock: None,
            until: None,
            sent: None,
        }
    }
}

/// `CLOCK_MONOTONIC` now: one clock for the judge and every worker process of the machine
/// (so that a worker's claim can be compared with the judge's stamps and with other
/// workers' claims). `None` if the clock cannot be read.
pub fn monotonic() -> Option<Duration> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok()?;
    Some(Duration::new(
        u64::try_from(now.tv_sec()).ok()?,
        u32::try_from(now.tv_nsec()).ok()?,
    ))
}

impl fmt::Display for WorkerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            self.kind.word(),
            self.worker,
            self.token,
            self.seq
        )?;
        if let Some(bound) = self.bound {
            write!(f, " {}", bound.as_millis())?;
        }
        if let Some(mode) = self.mode {
            write!(f, " {}", mode.word())?;
        }
        if let Some(name) = self.lock {
            write!(f, " @{name}")?;
        }
        if let Some(until) = self.until {
            write!(f, " until={}", until.as_micros())?;
        }
        match self.sent {
            Some(sent) => write!(f, " at={}", sent.as_micros()),
            None => Ok(()),
        }
    }
}

/// A worker line that could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "bad worker line `{line}`: expected `KIND WORKER TOKEN SEQ [BOUND_MS] [r|w] [@NAME] [until=US] [at=US]` with a worker event"
)]
pub struct ParseError {
    line: String,
}

impl FromStr for WorkerLine {
    type Err = ParseError;

    fn from_str(line: &str) -> Result<Self, ParseError> {
        let bad = || ParseError {
            line: line.to_owned(),
        };
        let mut parts = line.split_ascii_whitespace();
        let kind = match parts.next().ok_or_else(bad)? {
            "ACQ" => Kind::Acquire,
            "BEGIN" => Kind::Begin,
            "CLAIM" => Kind::Claim,
            "WRITE" => Kind::Write,
            "END" => Kind::End,
            "REL" => Kind::Release,
            "LOST" => Kind::Lost,
            "ERR" => Kind::Error,
            "WAIT" => Kind::Wait,
            "TIMEOUT" => Kind::Timeout,
            "CANCEL" => Kind::Cancel,
            "BYE" => Kind::Bye,
            _ => return Err(bad()),
        };
        let mut number = || {
            parts
                .next()
                .and_then(|p| p.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        let worker = u32::try_from(number()?).map_err(|_| bad())?;
        let token = number()?;
        let seq = number()?;
        let mut next = parts.next();
        let bound = match next.map(str::parse::<u64>) {
            Some(Ok(ms)) => {
                next = parts.next();
                Some(Duration::from_millis(ms))
            }
            _ => None,
        };
        let mode = match next {
            Some("r") => {
                next = parts.next();
                Some(Mode::Read)
            }
            Some("w") => {
                next = parts.next();
                Some(Mode::Write)
            }
            _ => None,
        };
        let lock = match next.and_then(|word| word.strip_prefix('@')).map(str::chars) {
            None => None,
            Some(mut chars) => {
                next = parts.next();
                match (chars.next(), chars.next()) {
                    (Some(name), None) => Some(name),
                    _ => return Err(bad()),
                }
            }
        };
        // The optional `PREFIX=MICROSECONDS` words, in their order.
        let mut stamp = |prefix: &str| {
            let value = micros(next, prefix).map_err(|()| bad())?;
            if value.is_some() {
                next = parts.next();
            }
            Ok::<_, ParseError>(value)
        };
        let until = stamp("until=")?;
        let sent = stamp("at=")?;
        if next.is_some() {
            return Err(bad());
        }
        Ok(Self {
            kind,
            worker,
            token,
            seq,
            bound,
            mode,
            lock,
            until,
            sent,
        })
    }
}

/// `word` read as `PREFIX` and a number of microseconds: `Ok(None)` when there is no word or
/// it does not start with `prefix`, `Err` when its number does not parse.
fn micros(word: Option<&str>, prefix: &str) -> Result<Option<Duration>, ()> {
    match word.and_then(|w| w.strip_prefix(prefix)) {
        None => Ok(None),
        Some(n) => n
            .parse::<u64>()
            .map(|us| Some(Duration::from_micros(us)))
            .map_err(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() -> Result<(), ParseError> {
        let line = WorkerLine::new(Kind::Write, 3, 117, 42);
        assert_eq!(line.to_string().parse::<WorkerLine>()?, line);
        let wait = WorkerLine {
            bound: Some(Duration::from_secs(2)),
            ..WorkerLine::new(Kind::Wait, 3, 0, 43)
        };
        assert_eq!(wait.to_string(), "WAIT 3 0 43 2000");
        assert_eq!(wait.to_string().parse::<WorkerLine>()?, wait);
        let read = WorkerLine {
            mode: Some(Mode::Read),
            ..wait
        };
        assert_eq!(read.to_string(), "WAIT 3 0 43 2000 r");
        assert_eq!(read.to_string().parse::<WorkerLine>()?, read);
        let write = WorkerLine {
            mode: Some(Mode::Write),
            ..WorkerLine::new(Kind::Write, 3, 117, 44)
        };
        assert_eq!(write.to_string(), "WRITE 3 117 44 w");
        assert_eq!(write.to_string().parse::<WorkerLine>()?, write);
        assert!("WRITE 3 117 44 x".parse::<WorkerLine>().is_err());
        let named = WorkerLine {
            lock: Some('b'),
            ..WorkerLine::new(Kind::Acquire, 3, 118, 45)
        };
        assert_eq!(named.to_string(), "ACQ 3 118 45 @b");
        assert_eq!(named.to_string().parse::<WorkerLine>()?, named);
        assert!("ACQ 3 118 45 @bc".parse::<WorkerLine>().is_err());
        assert!("ACQ 3 118 45 @".parse::<WorkerLine>().is_err());
        assert!("ACQ 3 118 45 @b w".parse::<WorkerLine>().is_err());
        assert!("WRITE 3 117 44 w 5".parse::<WorkerLine>().is_err());
        let claim = WorkerLine {
            lock: Some('b'),
            until: Some(Duration::from_micros(1_234_567)),
            ..WorkerLine::new(Kind::Begin, 3, 118, 46)
        };
        assert_eq!(claim.to_string(), "BEGIN 3 118 46 @b until=1234567");
        assert_eq!(claim.to_string().parse::<WorkerLine>()?, claim);
        let unnamed = WorkerLine {
            lock: None,
            ..claim
        };
        assert_eq!(unnamed.to_string().parse::<WorkerLine>()?, unnamed);
        assert!("BEGIN 3 118 46 until=x".parse::<WorkerLine>().is_err());
        assert!("BEGIN 3 118 46 until=5 @b".parse::<WorkerLine>().is_err());
        let stamped = WorkerLine {
            sent: Some(Duration::from_micros(7)),
            ..claim
        };
        assert_eq!(stamped.to_string(), "BEGIN 3 118 46 @b until=1234567 at=7");
        assert_eq!(stamped.to_string().parse::<WorkerLine>()?, stamped);
        let plain = WorkerLine {
            sent: Some(Duration::from_micros(8)),
            ..WorkerLine::new(Kind::End, 3, 118, 47)
        };
        assert_eq!(plain.to_string().parse::<WorkerLine>()?, plain);
        assert!("END 3 118 47 at=8 until=9".parse::<WorkerLine>().is_err());
        assert!("END 3 118 47 at=".parse::<WorkerLine>().is_err());
        assert!("DOWN 0 0 1".parse::<WorkerLine>().is_err(), "runner-only");
        assert!("WAIT 1 0 3 5 6".parse::<WorkerLine>().is_err());
        assert!("KILL 1 2 3".parse::<WorkerLine>().is_err(), "runner-only");
        assert!("WRITE 1 x 3".parse::<WorkerLine>().is_err());
        Ok(())
    }
}
