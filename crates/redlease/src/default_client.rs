//! The process-wide default client, for [`#[locked]`](crate::locked) functions that are not
//! given one with `client = ...`.
//!
//! Set once at start-up; a second call is refused, so that every locked function of the
//! process takes its locks on the same deployment (reentrancy, which keys on the client,
//! then works across them too).

use std::sync::OnceLock;

use crate::client::Client;
use crate::error::{Error, Result};

static DEFAULT: OnceLock<Client> = OnceLock::new();

/// Makes `client` the default of `#[locked]` functions without `client = ...`.
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
    DEFAULT.set(client).map_err(|_| Error::DefaultClientSet {
        setter: "redlease::set_default_client",
    })
}

/// The client set by [`set_default_client`].
///
/// # Errors
/// [`Error::NoDefaultClient`] when none was set.
pub fn default_client() -> Result<&'static Client> {
    DEFAULT.get().ok_or(Error::NoDefaultClient {
        setter: "redlease::set_default_client",
    })
}
