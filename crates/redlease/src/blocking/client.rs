//! The blocking [`Client`], and the default one of synchronous `#[locked]` functions.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::runtime::Runtime;

use crate::error::{Error, Result};

use super::builders::{Driven, Election, Lock, MultiLock, RwLock, Semaphore};
use super::runtime::block_on;

/// A blocking handle to one Redis deployment; see [`crate::Client`].
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects with default options; see [`crate::Client::connect`].
    ///
    /// # Errors
    /// As [`crate::ClientBuilder::connect`], and [`Error::Runtime`] when the runtime cannot
    /// start or this is called from inside an async runtime.
    pub fn connect(url: &str) -> Result<Self> {
        Self::from_builder(crate::Client::builder(url))
    }

    /// Connects with the options of `builder`.
    ///
    /// # Errors
    /// As [`Client::connect`].
    pub fn from_builder(builder: crate::ClientBuilder) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redlease")
            .enable_all()
            .build()
            .map_err(|e| Error::Runtime {
                reason: format!("could not start the runtime that drives blocking locks: {e}"),
            })?;
        let inner = block_on(&runtime, builder.connect())??;
        Ok(Self {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// Gives back every lease this client still holds and waits for background
    /// releases; see [`crate::Client::shutdown`].
    ///
    /// # Errors
    /// As [`crate::Client::shutdown`], and [`Error::Runtime`] inside an async runtime.
    pub fn shutdown(&self) -> Result<()> {
        block_on(&self.runtime, self.inner.shutdown())?
    }

    /// A lock named `name`; see [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock(self.drive(self.inner.lock(name)))
    }

    /// A semaphore named `name` admitting `permits` holders at once; see
    /// [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore(self.drive(self.inner.semaphore(name, permits)))
    }

    /// A read-write lock named `name`; see [`crate::Client::rwlock`].
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock(self.drive(self.inner.rwlock(name)))
    }

    /// Several locks held together, all or nothing; see [`crate::Client::multi_lock`].
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock(self.drive(self.inner.multi_lock(names)))
    }

    /// A blocking leader election; see [`crate::Client::election`].
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election(self.drive(self.inner.election(name)))
    }

    /// Who holds the name `name`, who waits for it and its fencing counter; see
    /// [`crate::Client::inspect`].
    ///
    /// # Errors
    /// As [`crate::Client::inspect`], and [`Error::Runtime`] inside an async runtime.
    pub fn inspect(&self, name: &str) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.inspect(name))?
    }

    /// As [`Client::inspect`], for the name whose keys are `keys`; see
    /// [`crate::Client::inspect_keys`].
    ///
    /// # Errors
    /// As [`Client::inspect`].
    pub fn inspect_keys(&self, keys: &crate::LockKeys) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.inspect_keys(keys))?
    }

    /// Removes every hold on the name of `keys`, whoever holds it; see
    /// [`crate::Client::force_release`].
    ///
    /// # Errors
    /// As [`crate::Client::force_release`], and [`Error::Runtime`] inside an async runtime.
    pub fn force_release(&self, keys: &crate::LockKeys) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.force_release(keys))?
    }

    /// The async client this one drives.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    fn drive<L>(&self, inner: L) -> Driven<L> {
        Driven {
            inner,
            runtime: Arc::clone(&self.runtime),
        }
    }
}

static DEFAULT: OnceLock<Client> = OnceLock::new();

/// Makes `client` the default of synchronous `#[locked]` functions without
/// `client = ...`.
///
/// # Errors
/// [`Error::DefaultClientSet`] when a default blocking client was already set (the
/// first one stays).
pub fn set_default_client(client: Client) -> Result<()> {
    DEFAULT.set(client).map_err(|_| Error::DefaultClientSet {
        setter: "redlease::blocking::set_default_client",
    })
}

/// The client set by [`set_default_client`].
///
/// # Errors
/// [`Error::NoDefaultClient`] when none was set.
pub fn default_client() -> Result<&'static Client> {
    DEFAULT.get().ok_or(Error::NoDefaultClient {
        setter: "redlease::blocking::set_default_client",
    })
}
