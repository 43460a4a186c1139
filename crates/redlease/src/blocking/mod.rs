//! The same locks for synchronous code, driven by the same engine.
//!
//! Like `reqwest::blocking`, every type here wraps its async twin and drives it on a
//! small tokio runtime that the [`Client`] owns (one worker thread, which also runs the
//! renewal scheduler and background releases). Locks taken here and with the async API
//! exclude each other like any two clients.
//!
//! Call these methods from any thread that is not polling an async task: a plain thread,
//! or a `tokio::task::spawn_blocking` closure. Inside an async task they would block its
//! thread, so they return [`Error::Runtime`](crate::Error::Runtime) there instead of
//! blocking or panicking.
//!
//! [`Client`] has the async client's constructors ([`Client::builder`],
//! [`Client::cluster`], [`Client::sentinel`], [`Client::quorum`], [`Client::from_redis`],
//! ...), and its [`ClientBuilder`] the same options.
//!
//! All three primitives are here: [`Client::lock`], [`Client::semaphore`] (a [`Permit`] is
//! a [`Guard`]) and [`Client::rwlock`] (a [`ReadGuard`] is a [`Guard`]; a [`WriteGuard`]
//! adds [`downgrade`](WriteGuard::downgrade)). Every guard is released before its `Drop`
//! returns. Reentrancy is per [`Owner`](crate::Owner), as in the async API: a `run` opens an owner scope
//! for its work (so does [`Owner::sync_scope`](crate::Owner::sync_scope)); within it a lock or a permit re-enters, a
//! read re-entered by its owner is free, a read asked for by the writer re-enters the write
//! hold, and a write asked for by a reader fails with [`Error::Upgrade`](crate::Error::Upgrade) (never a
//! deadlock). [`Client::multi_lock`] holds several locks together, all or nothing
//! (a [`MultiGuard`]).
//!
//! ```no_run
//! # fn main() -> redlease::Result<()> {
//! let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let total = client.lock("ledger").run(|guard| {
//!     // Exclusive and renewed; check guard.is_held() between long steps.
//!     Ok::<_, redlease::Error>(guard.fencing_token().get())
//! })?;
//! # Ok(()) }
//! ```

mod builders;
mod client;
mod guards;
mod runtime;

pub use builders::{
    Election, Latch, Leadership, Lock, MultiLock, Observe, ReadLock, RwLock, Semaphore, WriteLock,
};
pub use client::{Client, ClientBuilder, default_client, set_default_client};
pub use guards::{Count, Guard, MultiGuard, Permit, ReadGuard, WriteGuard};
