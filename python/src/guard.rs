//! `Guard`: one hold of a lock, a permit, a read or write hold, a multi-lock or a
//! leadership, with the same small surface for all of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pyo3::prelude::*;
use redlease::{Count, Leadership, LeaseHealth, MultiGuard, WriteGuard};
use tokio::runtime::Runtime;
use tokio::sync::{Mutex, OnceCell};

use crate::call::{Cancel, Outcome, block_on, spawn_with_callback};
use crate::errors::Failure;

/// What a [`Guard`] holds.
#[derive(Debug)]
pub(crate) enum Held {
    /// A lock, a semaphore's permit or a read hold.
    One(redlease::Guard),
    /// A write hold of a read-write lock.
    Write(WriteGuard),
    /// Every lock of a multi-lock.
    Multi(MultiGuard),
    /// The leadership of an election.
    Leader(Leadership),
    /// An outstanding count of a latch.
    Count(Count),
}

impl Held {
    /// The single guards whose leases make up this hold.
    fn guards(&self) -> Vec<&redlease::Guard> {
        match self {
            Self::One(g) => vec![g],
            Self::Write(g) => vec![g],
            Self::Multi(g) => g.guards().iter().collect(),
            Self::Leader(g) => vec![g.guard()],
            Self::Count(c) => vec![c.guard()],
        }
    }

    fn is_held(&self) -> bool {
        match self {
            Self::Multi(g) => g.is_held(),
            other => other.guards().iter().all(|g| g.is_held()),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            Self::Multi(g) => g.remaining(),
            Self::Leader(g) => g.remaining(),
            other => other
                .guards()
                .iter()
                .map(|g| g.remaining())
                .min()
                .unwrap_or_default(),
        }
    }

    async fn apply(&mut self, step: Step) -> Result<(), Failure> {
        match (self, step) {
            (Self::One(g), Step::Extend(ttl)) => Ok(g.extend(ttl).await?),
            (Self::Write(g), Step::Extend(ttl)) => Ok(g.extend(ttl).await?),
            (Self::Multi(g), Step::Extend(ttl)) => Ok(g.extend(ttl).await?),
            (Self::Leader(_), Step::Extend(_)) => Err(Failure::Binding(
                "Unsupported",
                "a leadership is renewed by itself and cannot be extended; resign to end it"
                    .to_owned(),
            )),
            (Self::Count(_), Step::Extend(_)) => Err(Failure::Binding(
                "Unsupported",
                "a latch's count keeps the latch's ttl, renewed by itself; count it down to end it"
                    .to_owned(),
            )),
            (Self::Leader(g), Step::Proclaim(note)) => Ok(g.proclaim(note).await?),
            (_, Step::Proclaim(_)) => Err(Failure::Binding(
                "Unsupported",
                "only a leadership has a note to proclaim".to_owned(),
            )),
        }
    }

    async fn release(self) -> redlease::Result<()> {
        match self {
            Self::One(g) => g.release().await,
            Self::Write(g) => g.release().await,
            Self::Multi(g) => g.release().await,
            Self::Leader(g) => g.resign().await,
            Self::Count(c) => c.count_down().await,
        }
    }
}

/// A step of a held lease's life that keeps it held.
#[derive(Debug)]
enum Step {
    /// Sets the lease's ttl from now.
    Extend(Duration),
    /// Replaces a leadership's note, keeping its term.
    Proclaim(String),
}

/// Takes `step` on the hold in `held`, unless it was released.
async fn take_step(held: &Mutex<Option<Held>>, name: &str, step: Step) -> Result<Outcome, Failure> {
    let mut held = held.lock().await;
    let held = held.as_mut().ok_or_else(|| released(name))?;
    held.apply(step).await?;
    Ok(Outcome::Unit)
}

/// Whether Redis still names the owner of every lease of `held` (false once released).
async fn owning(held: Arc<Mutex<Option<Held>>>) -> Result<Outcome, Failure> {
    let held = held.lock().await;
    let Some(held) = held.as_ref() else {
        return Ok(Outcome::Bool(false));
    };
    for guard in held.guards() {
        if !guard.owned().await? {
            return Ok(Outcome::Bool(false));
        }
    }
    Ok(Outcome::Bool(true))
}

/// The error of an operation on a guard already released.
fn released(name: &str) -> Failure {
    Failure::Binding(
        "Released",
        format!("the guard of `{name}` was already released; acquire it again for another hold"),
    )
}

/// Calls `on_lost` once, from a blocking thread of `runtime`, when any lease of `held`
/// is lost; a released lease ends the watch quietly.
fn watch_loss(runtime: &Runtime, held: &Held, on_lost: Py<PyAny>) {
    let fired = Arc::new(AtomicBool::new(false));
    let on_lost = Arc::new(on_lost);
    for guard in held.guards() {
        let mut health = guard.health();
        let fired = Arc::clone(&fired);
        let on_lost = Arc::clone(&on_lost);
        runtime.spawn(async move {
            loop {
                match *health.borrow_and_update() {
                    LeaseHealth::Lost => break,
                    LeaseHealth::Released => return,
                    _ => {}
                }
                if health.changed().await.is_err() {
                    return;
                }
            }
            if fired.swap(true, Ordering::SeqCst) {
                return;
            }
            // The callback waits for the GIL: not on a worker thread of the runtime.
            let _ = tokio::task::spawn_blocking(move || {
                crate::life::attach(|py| {
                    if let Err(e) = on_lost.call0(py) {
                        e.write_unraisable(py, None);
                    }
                });
            })
            .await;
        });
    }
}

/// A hold of a lock (or permit, read or write hold, multi-lock, leadership): the lease
/// is renewed in the background while the guard is held. Leave the `with` block (or
/// call `release()`) to give it back.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct Guard {
    runtime: &'static Runtime,
    held: Arc<Mutex<Option<Held>>>,
    /// The process that acquired it: in a child made by `os.fork()`, the hold is the
    /// parent's.
    pid: u32,
    /// The client's connection, kept for the exit hook while the guard lives.
    client: Arc<OnceCell<redlease::Client>>,
    token: u64,
    tokens: Vec<(String, u64)>,
    name: String,
}

impl Guard {
    /// An acquisition's outcome: a Python `Guard` of `held` (watched for loss when
    /// `on_lost` is given), made under the GIL.
    pub(crate) fn outcome(
        held: Held,
        on_lost: Option<Py<PyAny>>,
        client: Arc<OnceCell<redlease::Client>>,
    ) -> Outcome {
        Outcome::Object(Box::new(move |py, runtime| {
            pyo3::IntoPyObjectExt::into_py_any(Self::new(runtime, held, on_lost, client), py)
        }))
    }

    /// A guard of `held`, watching it for loss when `on_lost` is given.
    fn new(
        runtime: &'static Runtime,
        held: Held,
        on_lost: Option<Py<PyAny>>,
        client: Arc<OnceCell<redlease::Client>>,
    ) -> Self {
        let guards = held.guards();
        let tokens: Vec<(String, u64)> = guards
            .iter()
            .map(|g| (g.name().to_owned(), g.fencing_token().get()))
            .collect();
        let token = tokens.iter().map(|(_, t)| *t).max().unwrap_or_default();
        let name = tokens
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(",");
        if let Some(on_lost) = on_lost {
            watch_loss(runtime, &held, on_lost);
        }
        Self {
            runtime,
            held: Arc::new(Mutex::new(Some(held))),
            pid: std::process::id(),
            client,
            token,
            tokens,
            name,
        }
    }

    /// The hold, unless this guard was acquired in a parent process.
    fn held(&self, py: Python<'_>) -> PyResult<&Arc<Mutex<Option<Held>>>> {
        crate::life::same_process(self.pid, "guard").map_err(|e| e.into_pyerr(py))?;
        Ok(&self.held)
    }

    /// Takes `step`, waiting for it.
    fn step(&self, py: Python<'_>, step: Step) -> PyResult<()> {
        let held = self.held(py)?;
        block_on(py, self.runtime, take_step(held, &self.name, step)).map(drop)
    }

    /// Takes `step` in the background: `callback(None, error)` when done.
    fn step_with(&self, py: Python<'_>, step: Step, callback: Py<PyAny>) -> PyResult<Cancel> {
        let (held, name) = (Arc::clone(self.held(py)?), self.name.clone());
        Ok(spawn_with_callback(self.runtime, callback, async move {
            take_step(&held, &name, step).await
        }))
    }

    /// Reads the hold under its lock, or fails with `Released` once it was given back
    /// (`Forked` in a child process).
    fn read<T>(&self, py: Python<'_>, f: impl FnOnce(&Held) -> T + Send) -> PyResult<T>
    where
        T: Send,
    {
        let held = self.held(py)?;
        let name = self.name.clone();
        let done = crate::life::detach(py, || {
            let held = held.blocking_lock();
            held.as_ref().map(f).ok_or_else(|| released(&name))
        });
        done.map_err(|e| e.into_pyerr(py))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // The parent's lease: dropping it here could wait for the parent's threads.
            let held = std::mem::replace(&mut self.held, Arc::new(Mutex::new(None)));
            let client = std::mem::replace(&mut self.client, Arc::new(OnceCell::new()));
            std::mem::forget((held, client));
            return;
        }
        // Dropped inside the runtime, the library gives the lease back in the background
        // (outside one, it would only stop renewing).
        let _inside = self.runtime.enter();
        drop(self.held.try_lock().ok().and_then(|mut held| held.take()));
    }
}

#[pymethods]
impl Guard {
    /// The fencing token of this hold: larger than every earlier hold's of the same
    /// lock. Pass it to the resource, which refuses writes with a token older than the
    /// largest it has seen. (For a multi-lock, the largest of its locks' tokens; see
    /// `fencing_tokens`.)
    #[getter]
    fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Each lock's name and fencing token (one pair but for a multi-lock).
    #[getter]
    fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.tokens.clone()
    }

    /// The lock's name (the names joined by commas for a multi-lock).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lease is still ours, without asking Redis: false once it was found
    /// gone, ran past its validity, or was released.
    fn is_held(&self, py: Python<'_>) -> bool {
        self.read(py, Held::is_held).unwrap_or(false)
    }

    /// Seconds until the lease's validity ends unless renewed (0.0 once released).
    #[getter]
    fn remaining(&self, py: Python<'_>) -> f64 {
        self.read(py, Held::remaining)
            .unwrap_or_default()
            .as_secs_f64()
    }

    /// Sets the lease's ttl to `ttl` seconds from now (renewals keep that ttl).
    /// Raises `Lost` when the lease is gone, `Released` after `release()`.
    fn extend(&self, py: Python<'_>, ttl: f64) -> PyResult<()> {
        let ttl = crate::call::duration("ttl", ttl).map_err(|e| e.into_pyerr(py))?;
        self.step(py, Step::Extend(ttl))
    }

    /// Replaces a leadership's note (what `leader()` and observers see) without losing
    /// its term or lease. Raises `Lost` when it no longer leads (nothing is written),
    /// `Unsupported` on a guard that is not a leadership.
    fn proclaim(&self, py: Python<'_>, note: String) -> PyResult<()> {
        self.step(py, Step::Proclaim(note))
    }

    /// Gives the hold back (a leadership resigns). Raises `Lost` when the lease was
    /// lost meanwhile (the work done under it may have overlapped with another holder).
    /// A second call does nothing.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let held = self.held(py)?;
        block_on(py, self.runtime, async {
            let held = held.lock().await.take();
            if let Some(held) = held {
                held.release().await?;
            }
            Ok(Outcome::Unit)
        })
        .map(drop)
    }

    /// Asks Redis whether it still names this hold's owner (every lease of it): false
    /// once it expired or was taken, or after `release()`.
    fn owned(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let held = Arc::clone(self.held(py)?);
        block_on(py, self.runtime, owning(held))
    }

    /// `owned()` for asyncio.
    fn owned_with(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Cancel> {
        let held = Arc::clone(self.held(py)?);
        Ok(spawn_with_callback(self.runtime, callback, owning(held)))
    }

    /// Ends this guard without giving the lease back, and returns the lease's handle (a
    /// secret: its owner token) for `Client.adopt` in another process or thread; nobody
    /// renews the lease until it is adopted. Only a lock's lease can be detached.
    fn detach(&self, py: Python<'_>) -> PyResult<String> {
        let held = self.held(py)?;
        let name = self.name.clone();
        let done = crate::life::detach(py, || {
            let mut held = held.blocking_lock();
            match held.take() {
                Some(Held::One(guard)) => Ok(guard.detach().to_string()),
                None => Err(released(&name)),
                Some(other) => {
                    *held = Some(other);
                    Err(Failure::Binding(
                        "Unsupported",
                        "only a lock's lease can be detached and adopted (not a write hold, a multi-lock, a leadership or a latch's count)".to_owned(),
                    ))
                }
            }
        });
        done.map_err(|e| e.into_pyerr(py))
    }

    /// `extend()` for asyncio: `callback(result, error)` is called from another thread
    /// when done; the returned handle cancels it.
    fn extend_with(&self, py: Python<'_>, ttl: f64, callback: Py<PyAny>) -> PyResult<Cancel> {
        let ttl = crate::call::duration("ttl", ttl).map_err(|e| e.into_pyerr(py))?;
        self.step_with(py, Step::Extend(ttl), callback)
    }

    /// `proclaim()` for asyncio, as `extend_with`.
    fn proclaim_with(&self, py: Python<'_>, note: String, callback: Py<PyAny>) -> PyResult<Cancel> {
        self.step_with(py, Step::Proclaim(note), callback)
    }

    /// `release()` for asyncio: `callback(result, error)` is called from another thread
    /// when done; the returned handle cancels it.
    fn release_with(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Cancel> {
        let held = Arc::clone(self.held(py)?);
        Ok(spawn_with_callback(self.runtime, callback, async move {
            let taken = held.lock().await.take();
            if let Some(taken) = taken {
                taken.release().await?;
            }
            Ok(Outcome::Unit)
        }))
    }

    fn __repr__(&self) -> String {
        format!("<redlease.Guard {} token={}>", self.name, self.token)
    }
}
