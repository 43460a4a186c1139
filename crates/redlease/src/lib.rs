//! Correct distributed locks on Redis.
//!
//! ```no_run
//! # async fn example() -> redlease::Result<()> {
//! let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
//! let guard = client.lock("coupon-stock").acquire().await?;
//! // Only one holder at a time runs this. Pass the fencing token to the resource, so that
//! // it can refuse a write from a holder whose lease ran out.
//! println!("holding with fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # What a lock is here
//! A lock named `N` is the Redis key `redlease:N` holding a random 128-bit owner token,
//! set with `SET NX PX` semantics inside one script that also bumps a *fencing counter*.
//! Only the owner's token can release or extend it (atomic compare-and-delete scripts), a
//! crashed owner's lock frees itself after its TTL, and every acquisition gets a fencing
//! token larger than all earlier ones.
//!
//! # Validity
//! A [`Guard`] never claims more than `sent + ttl - drift`, where `sent` is when the
//! request that set the lease left this process and `drift = ttl/100 + 2ms`.
//!
//! # Waiting
//! [`Lock::acquire`] waits in a FIFO queue kept in Redis; a release hands the lock straight
//! to the oldest waiter that still listens, over one pub/sub connection per [`Client`]. See
//! [`wait`](crate::wait) for details, and [`Notifications::Polling`] to poll instead.
//!
//! # Errors
//! Every failure is one [`Error`]. A release or extend that finds another token (or none)
//! is [`Error::Lost`]: the caller learns that mutual exclusion may have been broken.

pub mod blocking;
mod client;
mod error;
mod guard;
pub mod keys;
mod lock;
mod owner;
mod renew;
mod scripts;
mod token;
pub mod wait;

pub use client::{
    Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, Notifications,
};
pub use error::{Error, Result};
pub use guard::{Guard, drift};
pub use keys::LockKeys;
pub use lock::{DEFAULT_PREFIX, DEFAULT_TTL, DEFAULT_WAIT, Lock, MAX_TTL, MIN_TTL};
pub use owner::Owner;
pub use renew::Renewal;
pub use token::FencingToken;
pub use wait::{Retry, Wait};
