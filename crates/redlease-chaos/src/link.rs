//! The worker's pipe to the judge: the lines it sends and the answers it reads (`Link`),
//! the fencing claim a `BEGIN` carries, and the worker's pseudo-random jitter. Used by the
//! worker's loop (`worker.rs`) and by the cancellation storm (`storm.rs`).

use std::time::Duration;

use anyhow::bail;
use redlease_chaos::{Kind, Mode, Verdict, WorkerLine};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Stdin, Stdout};

/// The pipe to the judge.
pub(crate) struct Link {
    pub(crate) out: Stdout,
    pub(crate) input: BufReader<Stdin>,
    pub(crate) id: u32,
    pub(crate) seq: u64,
    pub(crate) stop: bool,
    /// The judge asked (`hold=MS` in its answer to `BEGIN`) to keep this section open
    /// this long, or until the lease is lost.
    pub(crate) hold: Option<Duration>,
    /// The mode of the read-write lock hold wanted or held, sent with every line.
    pub(crate) mode: Option<Mode>,
    /// The multi-lock name the next line concerns.
    pub(crate) lock: Option<char>,
    /// The claim the next line carries (a `BEGIN`'s; see [`claim`]), taken by it.
    pub(crate) until: Option<Duration>,
    /// The judge asked (`exit` in its answer to `BEGIN`) to end the process right after
    /// this section's release, as a job that releases and exits does.
    pub(crate) exit: bool,
    /// The judge asked (`next=WHAT` in any answer) for the next attempt: `write` or `read`
    /// (a read-write lock's side), `many` (2 permits of a semaphore).
    pub(crate) next: Option<Next>,
    /// The judge's last answer said `reads`: attempts not asked otherwise (`next`) take
    /// the read side of a read-write lock.
    pub(crate) reads: bool,
    pub(crate) line: String,
}

impl Link {
    /// The judge said stop.
    pub(crate) fn stop(&self) -> bool {
        self.stop
    }
}

impl Link {
    /// Sends one event and waits for the judge's answer (the verdict of a `WRITE`).
    pub(crate) async fn send(&mut self, kind: Kind, token: u64) -> anyhow::Result<Option<Verdict>> {
        self.send_bounded(kind, token, None).await
    }

    /// Sends one event per lock of a hold (`(name, token)`: one, unnamed, but for a
    /// multi-lock), each answered before the next.
    pub(crate) async fn send_each(
        &mut self,
        kind: Kind,
        tokens: &[(Option<char>, u64)],
    ) -> anyhow::Result<()> {
        for &(lock, token) in tokens {
            self.lock = lock;
            let sent = self.send(kind, token).await;
            self.lock = None;
            sent?;
        }
        Ok(())
    }

    /// Sends a `BEGIN` or a `CLAIM` per lock of a hold (as [`send_each`](Self::send_each)),
    /// each with its guard's claim (`claims`, in the same order).
    pub(crate) async fn send_claims(
        &mut self,
        kind: Kind,
        tokens: &[(Option<char>, u64)],
        claims: &[Option<Duration>],
    ) -> anyhow::Result<()> {
        for (&(lock, token), &until) in tokens.iter().zip(claims) {
            self.lock = lock;
            self.until = until;
            let sent = self.send(kind, token).await;
            self.lock = None;
            sent?;
        }
        Ok(())
    }

    /// [`send`](Self::send) with a bound (for a `WAIT`).
    pub(crate) async fn send_bounded(
        &mut self,
        kind: Kind,
        token: u64,
        bound: Option<Duration>,
    ) -> anyhow::Result<Option<Verdict>> {
        self.seq += 1;
        let line = WorkerLine {
            bound,
            mode: self.mode,
            lock: self.lock,
            until: self.until.take(),
            sent: redlease_chaos::monotonic(),
            ..WorkerLine::new(kind, self.id, token, self.seq)
        };
        self.out.write_all(format!("{line}\n").as_bytes()).await?;
        self.out.flush().await?;
        self.line.clear();
        if self.input.read_line(&mut self.line).await? == 0 {
            bail!("the judge hung up");
        }
        let mut words = self.line.split_ascii_whitespace();
        let verdict = match words.next() {
            Some("acc") => Some(Verdict::Accepted),
            Some("rej") => Some(Verdict::Rejected),
            _ => None,
        };
        self.reads = false;
        for word in words {
            if word == "reads" {
                self.reads = true;
            } else if word == "stop" {
                self.stop = true;
            } else if word == "exit" {
                self.exit = true;
            } else if let Some(next) = word.strip_prefix("next=") {
                self.next = Next::parse(next);
            } else if let Some(ms) = word.strip_prefix("hold=") {
                self.hold = ms.parse().ok().map(Duration::from_millis);
            }
        }
        Ok(verdict)
    }
}

/// What the judge asked a worker's next attempt to be (`next=WHAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The write side of a read-write lock.
    Write,
    /// The read side of a read-write lock.
    Read,
    /// 2 permits of a semaphore at once.
    Many,
}

impl Next {
    /// The word of the judge's answer (`next=WORD`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            Next::Write => "write",
            Next::Read => "read",
            Next::Many => "many",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Next::Write, Next::Read, Next::Many]
            .into_iter()
            .find(|n| n.word() == word)
    }
}

/// What a guard claims now, given its `remaining()`: the end of its lease as a reading of
/// [`redlease_chaos::monotonic`] (the clock the judge and every worker share). The clock is
/// read first, so the claim is never later than the guard's `valid_until` (earlier by the
/// microseconds between the two readings). `None` if the clock cannot be read.
pub(crate) fn claim(remaining: impl FnOnce() -> Duration) -> Option<Duration> {
    let clock = redlease_chaos::monotonic()?;
    Some(clock + remaining())
}

/// A small xorshift for the 1-20 ms of work (no need for a crypto RNG here).
pub(crate) struct Jitter(pub(crate) u64);

impl Jitter {
    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    pub(crate) fn work(&mut self) -> Duration {
        Duration::from_millis(1 + self.below(20))
    }
}
