//! [`Election`]: leader election on the lease engine.

use std::fmt;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::time::Instant;

use crate::builder::{MAX_NOTE, Spec, option_setters};
use crate::engine::{Engine, one_line};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::{LockKeys, Primitive};
use crate::notify::Watch;
use crate::scripts::Kind;
use crate::token::FencingToken;
use crate::wait::Wait;

/// How long an observer with its notices up waits without news while nobody leads
/// before it looks again anyway (a safety net; changes arrive as notices).
const IDLE_LOOK: Duration = Duration::from_secs(30);

/// Leader election: "exactly one active scheduler, and everyone can see which".
///
/// Leadership is a lease on the election's lock: [`campaign`](Election::campaign) waits
/// for it (FIFO, like [`Lock::acquire`](crate::Lock::acquire); by default for as long as it
/// takes) and gives a [`Leadership`] whose [`term`](Leadership::term) is the lease's
/// fencing token, so every new leader's term is higher than every earlier one's. The
/// lease is renewed while the leadership lives; a leader whose lease is lost is told at
/// once ([`Leadership::lost`]), and the next candidate takes over within the lease's ttl
/// when a leader dies without resigning. [`leader`](Election::leader) tells anyone who
/// leads now, and [`observe`](Election::observe) follows every change, driven by the
/// notices the election's grants, hand-offs and releases publish on its channel.
///
/// Works on every deployment, as the lock does. An election and a lock of the same name
/// are the same lock.
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// let election = client.election("scheduler");
/// let leadership = election.campaign("host-a:8080").await?;
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer the leader"),
///     () = async { /* lead, stamping writes with leadership.term() */ } => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct Election {
    spec: Spec,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Election").field(&self.spec).finish()
    }
}

option_setters!(Election);

/// `note` as a leader's note: one line, at most [`MAX_NOTE`] bytes, control characters
/// turned into spaces.
///
/// # Errors
/// [`Error::InvalidOption`] for a note that is empty (or only spaces).
fn leader_note(note: &str) -> Result<Arc<str>> {
    one_line(note, MAX_NOTE)
        .map(Arc::from)
        .ok_or_else(|| Error::InvalidOption {
            option: "note",
            reason: "a leader's note must not be empty".into(),
        })
}

/// Replaces the note of the leadership held by `guard` with `note` (see
/// [`Leadership::proclaim`]); the note now recorded.
pub(crate) async fn proclaim(guard: &Guard, note: &str) -> Result<Arc<str>> {
    let note = leader_note(note)?;
    let holding = guard.holding();
    let lease = &holding.lease;
    if !lease.is_held() {
        return Err(lease.ended_error());
    }
    let taken = holding
        .engine
        .deployment()
        .proclaim(
            &lease.keys,
            lease.token.secret(),
            &note,
            guard.fencing_token().get(),
        )
        .await?;
    if !taken {
        lease.lose("proclaim found another token");
        return Err(lease.ended_error());
    }
    tracing::info!(term = %guard.fencing_token(), "proclaimed a new note");
    Ok(note)
}

/// Who leads an election, as [`Election::leader`] and [`Election::observe`] see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's note: the one it campaigned with, or the last it
    /// [proclaimed](Leadership::proclaim).
    pub note: String,
    /// The leader's term: its lease's fencing token.
    pub term: FencingToken,
    /// How long its lease runs unless renewed (as Redis counts it when asked).
    pub remaining: Duration,
}

impl Election {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        let mut spec = Spec::new(engine, name);
        spec.wait = Wait::Forever;
        Self { spec }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Redis keys and channel of the election's lock.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::of(&self.spec.prefix, &self.spec.name, Primitive::Lock)
    }

    /// Waits to lead (up to the election's [`wait`](Election::wait), by default as long as
    /// it takes), recording `note` (one line, at most [`MAX_NOTE`] bytes; control
    /// characters become spaces) for whoever asks who leads.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty note; [`Error::Timeout`] when a wait ran out;
    /// otherwise as [`Lock::acquire`](crate::Lock::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws the candidate, and gives back a
    /// leadership handed to it meanwhile, in the background.
    #[tracing::instrument(skip_all, fields(election = %self.spec.name))]
    pub async fn campaign(&self, note: impl Into<String>) -> Result<Leadership> {
        let note = leader_note(&note.into())?;
        let mut spec = self.spec.clone();
        spec.holder = Some(Arc::clone(&note));
        let guard = spec.acquire(Kind::Leader).await?;
        tracing::info!(term = %guard.fencing_token(), "leading");
        Ok(Leadership {
            guard,
            note: std::sync::Mutex::new(note),
        })
    }

    /// Campaigns with `note` (as [`campaign`](Election::campaign)), runs `work` while
    /// leading, and resigns after it, as [`Lock::run`](crate::Lock::run) does for a lock:
    /// if leadership is lost while `work` runs, `work` is dropped (cancelled at its next
    /// `.await`) and the call returns [`Error::Lost`]. The hand-written `select!` over
    /// [`Leadership::lost`] and the work, in one call.
    ///
    /// # Errors
    /// `work`'s own error, unchanged. Otherwise, converted with `From<Error>`: anything
    /// [`campaign`](Election::campaign) returns; [`Error::Lost`] when leadership was lost
    /// during `work` or found lost when resigning; [`Error::Redis`] when the resignation
    /// could not reach Redis (the lease then runs out by itself).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and resigns in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// client
    ///     .election("scheduler")
    ///     .run("scheduler on host-a", async |leadership| {
    ///         // Runs only while leading; stamp writes with the term.
    ///         println!("leading in term {}", leadership.term());
    ///         Ok::<_, redlease::Error>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<T, E, F>(&self, note: impl Into<String>, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Leadership) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let leadership = self.campaign(note).await?;
        let outcome = {
            let work = work(&leadership);
            tokio::select! {
                biased;
                () = leadership.lost() => Err(leadership.guard.holding().lease.ended_error()),
                out = work => Ok(out),
            }
        };
        crate::builder::settle(outcome, leadership.resign().await)
    }

    /// Leads again and again: campaigns with `note`, runs `work` while leading (as
    /// [`run`](Election::run)), and when leadership is lost, or `work` returns `Ok`,
    /// resigns and campaigns again, queueing behind the other candidates (Curator's
    /// `LeaderSelector` with auto-requeue). A scheduler that must always have one leader
    /// among its instances is this call, never returning while things go well.
    ///
    /// `work` may [proclaim](Leadership::proclaim) through the shared reference it is given.
    /// A lost leadership is logged (`tracing`, warn) and is not an error here: the next
    /// campaign starts at once; so is an error of the work once leadership is found lost
    /// (a [`proclaim`](Leadership::proclaim) that found the lease gone: the work was
    /// deposed, not broken). Failures that campaigning again cannot mend end the loop.
    /// In a spawned task, give it an `async move` closure over owned state (an `Arc`):
    /// one that borrows its surroundings is not `Send` for every call (a limit of Rust's
    /// async closures today).
    ///
    /// # Errors
    /// `work`'s own error, unchanged (after resigning), when it fails while still leading. Otherwise, converted with
    /// `From<Error>`, an error of a campaign that its waiting did not ride out (bad
    /// options, [`Error::Auth`], [`Error::ShutDown`] after the client's shutdown, a wait
    /// that ran out when the election has one).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and resigns in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// client
    ///     .election("scheduler")
    ///     .keep_leading("scheduler on host-a", async |leadership| {
    ///         leadership.proclaim("host-a: scheduling").await?;
    ///         // ... schedule until done or deposed; then it campaigns again ...
    ///         Ok::<_, redlease::Error>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn keep_leading<E, F>(
        &self,
        note: impl Into<String>,
        mut work: F,
    ) -> std::result::Result<std::convert::Infallible, E>
    where
        F: AsyncFnMut(&Leadership) -> std::result::Result<(), E>,
        E: From<Error>,
    {
        let note = note.into();
        loop {
            let leadership = self.campaign(note.as_str()).await?;
            let term = leadership.term();
            let outcome = {
                let work = work(&leadership);
                tokio::select! {
                    biased;
                    () = leadership.lost() => None,
                    out = work => Some(out),
                }
            };
            match outcome {
                // Failed because it was deposed (a proclaim or a fenced write that found
                // the lease gone): a loss like any other.
                Some(Err(_)) if !leadership.is_leading() => {
                    tracing::warn!(%term, "the work failed after leadership was lost; campaigning again");
                }
                Some(Err(e)) => {
                    let _ = leadership.resign().await;
                    return Err(e);
                }
                Some(Ok(())) => {
                    if let Err(e) = leadership.resign().await {
                        tracing::warn!(%term, error = %e, "leadership ended before resigning; campaigning again");
                    }
                }
                None => {
                    tracing::warn!(%term, "leadership lost; campaigning again");
                }
            }
        }
    }

    /// Who leads now, or `None`. Over a quorum, the leader a majority of nodes name, once
    /// its term is recorded on that majority (the second round trip of its campaign):
    /// until then it is not leading yet, and `None` is reported. The term reported is
    /// always the one its [`Leadership::term`] gives.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; [`Error::Redis`] when Redis cannot be asked;
    /// [`Error::NoQuorum`] when fewer than a majority of quorum nodes answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let keys = self.spec.plan(Primitive::Lock)?;
        let holder = self.spec.engine.deployment().leader(&keys).await?;
        Ok(holder.map(|h| Leader {
            note: h.details,
            term: FencingToken::new(h.fence),
            remaining: Duration::from_millis(u64::try_from(h.pttl).unwrap_or(0)),
        }))
    }

    /// Every change of leader, starting with the current one (`None`: nobody leads), and
    /// every new note a leader [proclaims](Leadership::proclaim) (the same term, another
    /// note), driven by the notices the election's grants, hand-offs, releases and
    /// proclaims publish; it
    /// also looks again when the leader's lease should have run out (a leader that died
    /// without resigning). Changes are told in order, terms never going backwards; one that
    /// came and went between two looks may be skipped. The stream ends only when dropped. An error (Redis could not
    /// be asked) is an item too; the stream goes on after it.
    ///
    /// With [`Notifications::Polling`](crate::Notifications::Polling) it polls every
    /// [`Retry::max`](crate::Retry::max).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// use futures_util::StreamExt as _;
    ///
    /// let mut changes = client.election("scheduler").observe();
    /// while let Some(leader) = changes.next().await {
    ///     match leader? {
    ///         Some(leader) => println!("term {}: {}", leader.term, leader.note),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> LeaderChanges {
        let observer = Observer {
            election: self.clone(),
            watch: None,
            last: Told::Unknown,
            highest: None,
        };
        LeaderChanges(Box::pin(futures_util::stream::unfold(
            observer,
            |mut observer| async move {
                let item = observer.next().await;
                Some((item, observer))
            },
        )))
    }
}

/// The changes of leader of an [`Election`], from [`Election::observe`]: a [`Stream`]
/// that is `Unpin`, so `observe().next().await` needs no pinning. It ends only when
/// dropped.
#[must_use = "a stream does nothing unless polled"]
pub struct LeaderChanges(Pin<Box<dyn Stream<Item = Result<Option<Leader>>> + Send>>);

impl fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl Stream for LeaderChanges {
    type Item = Result<Option<Leader>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// What an observer told last.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Told {
    /// Nothing yet.
    Unknown,
    /// That nobody leads.
    Nobody,
    /// The leader of this term, with this note.
    Leader(FencingToken, String),
}

/// The state of one [`Election::observe`] stream.
struct Observer {
    election: Election,
    watch: Option<Watch>,
    /// What was told last, `Unknown` before the first item.
    last: Told,
    /// The highest term told so far: a leader read with a lower one is an older leader
    /// seen by a read that overlapped its successor's grant, and is never told.
    highest: Option<FencingToken>,
}

impl Observer {
    /// The next change of leader (or an error).
    async fn next(&mut self) -> Result<Option<Leader>> {
        let retry = self.election.spec.retry;
        loop {
            if self.watch.is_none()
                && let Some(notices) = self.election.spec.engine.notices()
            {
                let keys = self.election.spec.plan(Primitive::Lock)?;
                let until = Instant::now() + retry.max();
                self.watch = notices.watch(&keys.channel, Some(until)).await;
            }
            // Armed before the read: a notice that lands between the read and the wait
            // still wakes us.
            let notify = self.watch.as_ref().map(Watch::notify);
            let mut notified = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let current = match self.election.leader().await {
                Ok(current) => current,
                Err(e) => {
                    tokio::time::sleep(retry.max()).await;
                    return Err(e);
                }
            };
            let told = current
                .as_ref()
                .map_or(Told::Nobody, |l| Told::Leader(l.term, l.note.clone()));
            let stale = matches!(&told, Told::Leader(t, _) if self.highest.is_some_and(|h| *t < h));
            if self.last != told && !stale {
                if let Told::Leader(t, _) = &told {
                    self.highest = Some(*t);
                }
                self.last = told;
                return Ok(current);
            }
            let wake = match (&current, &notified) {
                // Terms never go backwards for an observer: look again soon.
                _ if stale => retry.min().max(Duration::from_millis(1)),
                // The leader may die without resigning: look when its lease runs out.
                (Some(leader), _) => leader.remaining + retry.min().max(Duration::from_millis(1)),
                (None, Some(_)) => IDLE_LOOK,
                (None, None) => retry.max(),
            };
            let wake = if notified.is_some() {
                wake
            } else {
                wake.min(retry.max())
            };
            match notified {
                Some(n) => {
                    let mut n = pin!(n);
                    tokio::select! {
                        () = &mut n => {}
                        () = tokio::time::sleep(wake) => {}
                    }
                }
                None => tokio::time::sleep(wake).await,
            }
        }
    }
}

/// Leadership of an [`Election`]: a lease on its lock, renewed while this lives.
///
/// Dropping it resigns in the background, as dropping a [`Guard`] releases a lock.
#[must_use = "dropping a Leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
    /// Behind a lock so that [`proclaim`](Leadership::proclaim) takes `&self`: the work
    /// inside [`Election::run`] holds a shared reference.
    note: std::sync::Mutex<Arc<str>>,
}

impl Leadership {
    /// The term: the lease's fencing token, higher than every earlier leader's. Stamp the
    /// leader's writes with it so that a resource can refuse a deposed leader's.
    pub fn term(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// The note this leader campaigned with, or the last it
    /// [proclaimed](Leadership::proclaim).
    pub fn note(&self) -> String {
        self.current_note().to_string()
    }

    fn current_note(&self) -> Arc<str> {
        Arc::clone(
            &self
                .note
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Replaces the note that [`Election::leader`] and [`Election::observe`] report for
    /// this leader (etcd's `proclaim`), keeping the term and the lease: one script that
    /// writes `note` (one line, at most [`MAX_NOTE`] bytes; control characters become
    /// spaces) only while the lock still holds this leadership's token, leaves the
    /// note's expiry as it was, and announces the change on the election's channel, so
    /// that observers tell the same term with the new note. Over a quorum the note is
    /// written on every node, as an extend is, and taken when a majority took it; a node
    /// that missed it keeps the earlier note, and a read that a majority of nodes with
    /// the new one did not answer may still report the earlier one.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty note; [`Error::Lost`] when leadership was
    /// lost (then nothing is written; over a quorum, the minority of nodes that may still
    /// hold the token take it, and no read reports it: a leader is named only by a
    /// majority) ([`Error::ShutDown`] after the client's shutdown);
    /// [`Error::Redis`] when Redis could not be asked (over a quorum, when too few nodes
    /// answered to tell): the note may or may not have been replaced, and
    /// [`note`](Self::note) keeps the earlier one.
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the note in Redis is either replaced or unchanged, and
    /// [`note`](Self::note) keeps the earlier one.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// let leadership = client.election("scheduler").campaign("host-a: starting").await?;
    /// // ... warm up ...
    /// leadership.proclaim("host-a: serving on :8080").await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(election = %self.guard.holding().lease.name))]
    pub async fn proclaim(&self, note: impl Into<String>) -> Result<()> {
        let note = proclaim(&self.guard, &note.into()).await?;
        *self
            .note
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = note;
        Ok(())
    }

    /// Whether the lease is still ours, without asking Redis.
    pub fn is_leading(&self) -> bool {
        self.guard.is_held()
    }

    /// Time left until the lease runs out unless renewed.
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Asks Redis whether this leader still holds the election's lease; see
    /// [`Guard::owned`].
    ///
    /// # Errors
    /// As [`Guard::owned`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn owned(&self) -> Result<bool> {
        self.guard.owned().await
    }

    /// Resolves the moment leadership is lost (the lease ran out or was taken).
    ///
    /// # Cancel safety
    /// Cancel safe; it only watches.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Steps down: the lease is released (handed to the next candidate, if any).
    ///
    /// # Errors
    /// [`Error::Lost`] when leadership had already been lost; [`Error::Redis`] when Redis
    /// could not be reached (the lease then runs out by itself).
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The guard of the lease.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The guard and the note (for the blocking API).
    #[cfg(feature = "blocking")]
    pub(crate) fn into_parts(self) -> (Guard, Arc<str>) {
        let note = self.current_note();
        (self.guard, note)
    }
}
