//! [`Semaphore`]: at most N holders of one name at a time, each holding a permit that is a
//! lease of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::builder::{Spec, option_setters};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::{LockKeys, Primitive};
use crate::scripts::Kind;

/// A permit of a [`Semaphore`]: a [`Guard`] on one of its permits (or on several taken at
/// once with [`Semaphore::acquire_many`]), with the same surface (fencing token, validity,
/// loss signal, `extend`, `release`, released in the background when dropped).
pub type Permit = Guard;

/// A distributed counting semaphore: at most `permits` holders of one name at once.
///
/// Each [`Permit`] is a lease of its own: renewed by the client's one renewal scheduler
/// while held, and given back when released or dropped. A holder that crashes loses its
/// permit after its TTL: expired permits are reclaimed inside the scripts (by the server's
/// clock) before anything is counted, so no permit ever leaks. Waiters queue FIFO and are
/// handed a freed permit by the release that frees it (on a single Redis or Sentinel; on a
/// Cluster, or with [`Notifications::Polling`](crate::Notifications::Polling), waiters are
/// woken by a release notice, sharded to the semaphore's shard on a Cluster, or by their
/// own re-checks, and try again, in no set order). Every
/// permit gets a fencing token, larger than every earlier one of the name; holders at the
/// same time have different tokens, so fence the resource each holder writes, not one
/// resource shared by all holders.
///
/// Several permits may be taken at once ([`acquire_many`](Semaphore::acquire_many), as
/// Redisson's `acquire(n)`): one [`Permit`] that counts for all of them, with one lease,
/// one owner token and one fencing token, renewed, lost and given back as one. The FIFO
/// queue serves requests in order while they fit: a request for several at the head of
/// the queue waits for that many to be free, and requests behind it (and newcomers) wait
/// behind it even when fewer would fit, so that it is never starved by smaller ones.
///
/// The permit count is stored with the semaphore while it is in use: asking for the same
/// name with another count fails with [`Error::PermitsMismatch`], unless the stored count
/// was set by [`resize`](Semaphore::resize), which changes it while the semaphore is held
/// or waited for; a lock or read-write lock of the same name fails with
/// [`Error::WrongType`], and the reverse.
///
/// Not available over a quorum ([`Client::quorum`](crate::Client::quorum)): permits
/// granted by a majority of independent nodes are not sound (3 nodes, 2 permits: holders
/// granted by nodes {1,2}, {2,3} and {1,3} fit every node's count, yet 3 hold), so the
/// acquisition fails with [`Error::Unsupported`].
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// // At most 3 backups at once, across every machine.
/// client
///     .semaphore("backups", 3)
///     .run(async |permit| {
///         // ... the backup, stamped with permit.fencing_token() ...
///         Ok::<_, redlease::Error>(())
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct Semaphore {
    spec: Spec,
    permits: u32,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.permits)
            .field("spec", &self.spec)
            .finish()
    }
}

option_setters!(Semaphore);

/// How long a count set by [`Semaphore::resize`] is kept at least, whether the semaphore
/// is held or idle meanwhile (24 hours): long enough for a rolling deploy to bring every
/// instance to the new count, after which an idle semaphore forgets it (a semaphore still
/// held keeps it for as long as it is held).
pub const RESIZE_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

impl Semaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: String, permits: u32) -> Self {
        Self {
            spec: Spec::new(engine, name),
            permits,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The Redis keys and channel of the semaphore.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::of(&self.spec.prefix, &self.spec.name, Primitive::Semaphore)
    }

    fn kind(&self) -> Result<Kind> {
        self.kind_of(1)
    }

    /// Whether the semaphore can be used at all: at least one permit, and a deployment
    /// where one node counts them.
    fn usable(&self) -> Result<()> {
        if self.permits == 0 {
            return Err(Error::InvalidOption {
                option: "permits",
                reason: "a semaphore needs at least one permit".into(),
            });
        }
        if let Some(reason) = self.spec.engine.deployment().cannot_count() {
            return Err(Error::Unsupported {
                what: "a semaphore over a quorum",
                reason,
            });
        }
        Ok(())
    }

    /// The lease kind of `asked` permits taken at once. More than the builder's count is
    /// left to Redis to refuse: a count set by a [`resize`](Semaphore::resize) may be larger.
    fn kind_of(&self, asked: u32) -> Result<Kind> {
        self.usable()?;
        if asked == 0 {
            return Err(Error::PermitsAsked {
                name: self.spec.name.to_string(),
                asked,
                permits: self.permits,
            });
        }
        Ok(Kind::Permit {
            permits: self.permits,
            weight: asked,
        })
    }

    /// Sets the semaphore's permit count to this builder's [`permits`](Semaphore::permits)
    /// while it may be held or waited for, and returns the count in force before (`None`
    /// when none was stored: the semaphore was idle).
    ///
    /// A raised count hands the new permits to the oldest queued waiters at once, as a
    /// release does. A lowered one revokes no permit: nobody is granted one again until
    /// the permits in use are below the new count. A queued request for more permits than
    /// the new count is dropped from the queue, and its next attempt fails with
    /// [`Error::PermitsAsked`].
    ///
    /// The count a resize stores is authoritative: acquisitions asking with another count
    /// (instances still configured with the old one, during a rolling deploy) acquire
    /// against it rather than failing with [`Error::PermitsMismatch`], and
    /// [`acquire_many`](Semaphore::acquire_many) is checked against it. It is kept at least
    /// [`RESIZE_KEEP`] after the resize, held or idle, and for as long as the semaphore is
    /// held or waited for after that; a semaphore idle past then forgets it, and the next
    /// acquisition stores its own count again.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for zero permits or a bad option, [`Error::InvalidName`],
    /// [`Error::WrongType`] when the name is another primitive's, [`Error::Unsupported`]
    /// over a quorum, [`Error::Redis`] when Redis cannot be asked (the resize may or may
    /// not have been made; making it again is harmless).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// // Raise the cap of the backups from 3 to 5, while they run.
    /// let before = client.semaphore("backups", 5).resize().await?;
    /// println!("the backups' cap was {before:?}, it is 5 now");
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(semaphore = %self.spec.name, permits = self.permits))]
    pub async fn resize(&self) -> Result<Option<u32>> {
        self.usable()?;
        let keys = self.keys()?;
        let keep_ms = u64::try_from(RESIZE_KEEP.as_millis()).unwrap_or(u64::MAX);
        let before = self
            .spec
            .engine
            .deployment()
            .resize(&keys, self.permits, keep_ms)
            .await?;
        tracing::info!(before = ?before, after = self.permits, "semaphore resized");
        Ok(before)
    }

    /// Makes one attempt: `Ok(None)` when every permit is held (or others queue for one).
    /// The permit count in force is the one stored by a [`resize`](Semaphore::resize)
    /// when there is one, else this builder's.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for zero permits or a bad option, [`Error::InvalidName`],
    /// [`Error::PermitsMismatch`], [`Error::WrongType`] when the name is another
    /// primitive's, [`Error::Unsupported`] over a quorum, [`Error::Redis`] when Redis cannot
    /// be asked (a permit the attempt may have taken is then given back in the background).
    ///
    /// # Cancel safety
    /// Cancel safe: a permit taken by a dropped attempt is given back in the background.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.spec.try_acquire(self.kind()?).await
    }

    /// Takes a permit, waiting up to the semaphore's [`wait`](Semaphore::wait) in the FIFO
    /// queue.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out; [`Error::ShutDown`] when
    /// [`Client::shutdown`](crate::Client::shutdown) ended the wait; otherwise as
    /// [`try_acquire`](Semaphore::try_acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws it from the queue, and gives back a
    /// permit that was handed to it meanwhile, in the background.
    #[tracing::instrument(skip_all, fields(semaphore = %self.spec.name))]
    pub async fn acquire(&self) -> Result<Permit> {
        self.spec.acquire(self.kind()?).await
    }

    /// Takes a permit, runs `work` while it is kept renewed, and gives it back; `work` is
    /// dropped where it stands the moment the permit is lost, as with
    /// [`Lock::run`](crate::Lock::run). A nested `run` or `acquire` of the same semaphore by
    /// the same owner re-enters the owner's permit.
    ///
    /// # Errors
    /// `work`'s own error, unchanged; otherwise, converted with `From<Error>`, as
    /// [`Lock::run`](crate::Lock::run).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and gives the permit back in the background.
    pub async fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Permit) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let kind = self.kind().map_err(E::from)?;
        self.spec.run(kind, work).await
    }

    /// Makes one attempt at `n` permits at once, as one [`Permit`]: `Ok(None)` when fewer
    /// than `n` are free, or others queue for permits.
    ///
    /// # Errors
    /// [`Error::PermitsAsked`] when `n` is 0 or more than the semaphore's permit count in
    /// force (its [`permits`](Semaphore::permits), or the count a
    /// [`resize`](Semaphore::resize) stored); otherwise as [`try_acquire`](Semaphore::try_acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: permits taken by a dropped attempt are given back in the background.
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<Permit>> {
        self.spec.try_acquire(self.kind_of(n)?).await
    }

    /// Takes `n` permits at once, as one [`Permit`] (one lease, one owner token, one
    /// fencing token: renewed, lost and given back as one), waiting up to the semaphore's
    /// [`wait`](Semaphore::wait) in the FIFO queue. At the head of the queue the request
    /// waits until `n` permits are free, and every request behind it waits too.
    ///
    /// A nested acquisition by the same [`Owner`](crate::Owner) re-enters the owner's
    /// permit when that holds at least `n` permits; otherwise it takes permits of its own,
    /// and waits (up to its wait) if the owner's own permit leaves too few.
    ///
    /// # Errors
    /// [`Error::PermitsAsked`] when `n` is 0 or more than the semaphore's permit count in
    /// force (its [`permits`](Semaphore::permits), or the count a
    /// [`resize`](Semaphore::resize) stored); otherwise as [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws it from the queue, and gives back
    /// permits that were handed to it meanwhile, in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// // A full backup counts for 2 of the 3 backup slots.
    /// let permit = client.semaphore("backups", 3).acquire_many(2).await?;
    /// // ... the backup, stamped with permit.fencing_token() ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(semaphore = %self.spec.name, permits = n))]
    pub async fn acquire_many(&self, n: u32) -> Result<Permit> {
        self.spec.acquire(self.kind_of(n)?).await
    }

    /// As [`run`](Semaphore::run), holding `n` permits at once (see
    /// [`acquire_many`](Semaphore::acquire_many)).
    ///
    /// # Errors
    /// As [`run`](Semaphore::run), and [`Error::PermitsAsked`] (converted with
    /// `From<Error>`) when `n` is 0 or more than the semaphore's permit count in force.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and gives the permits back in the background.
    pub async fn run_many<T, E, F>(&self, n: u32, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Permit) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let kind = self.kind_of(n).map_err(E::from)?;
        self.spec.run(kind, work).await
    }
}
