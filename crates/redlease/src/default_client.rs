//! The process-wide default client, for [`#[locked]`](crate::locked) functions that are not
//! given one with `client = ...`.
//!
//! Set once at start-up; a second call is refused, so that every locked function of the
//! process takes its locks on the same deployment (reentrancy, which keys on the client,
//! then works across them too).

use std::sync::OnceLock;

use crate::client::Client;
use crate::error::{Error, Result};

/// The default client, and the runtime it was set in (if any): synchronous `#[locked]`
/// functions drive it there when no blocking default is set.
static DEFAULT: OnceLock<(Client, Option<tokio::runtime::Handle>)> = OnceLock::new();

/// Makes `client` the default of `#[locked]` functions without `client = ...`. Set inside
/// the application's Tokio runtime, it is the default of synchronous `#[locked]`
/// functions too (run from `spawn_blocking` or threads of their own), driven on that
/// runtime, unless [`blocking::set_default_client`](crate::blocking::set_default_client)
/// set one of their own first.
///
/// # Errors
/// [`Error::DefaultClientSet`] when a default client was already set (the first one
/// stays).
///
/// # Examples
/// ```no_run
/// # async fn example() -> redlease::Result<()> {
/// redlease::set_default_client(redlease::Client::connect("redis://127.0.0.1:6379").await?)?;
/// # Ok(()) }
/// ```
pub fn set_default_client(client: Client) -> Result<()> {
    let runtime = tokio::runtime::Handle::try_current().ok();
    DEFAULT
        .set((client, runtime))
        .map_err(|_| Error::DefaultClientSet {
            setter: "redlease::set_default_client",
        })
}

/// The client set by [`set_default_client`].
///
/// # Errors
/// [`Error::NoDefaultClient`] when none was set.
pub fn default_client() -> Result<&'static Client> {
    DEFAULT
        .get()
        .map(|(client, _)| client)
        .ok_or(Error::NoDefaultClient {
            setter: "redlease::set_default_client",
        })
}

/// The default client and the runtime it was set in, for the blocking default.
#[cfg(feature = "blocking")]
pub(crate) fn default_on_its_runtime() -> Option<(&'static Client, tokio::runtime::Handle)> {
    let (client, runtime) = DEFAULT.get()?;
    Some((client, runtime.clone()?))
}
