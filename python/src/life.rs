//! A Python process's life around the binding: the interpreter's exit, and `os.fork()`.
//!
//! **Exit.** Threads of the binding (the runtime's blocking threads running callbacks, a
//! thread blocked in a call whose wait ends) come back into Python by taking the GIL. Once
//! the interpreter finalizes, a thread taking the GIL is ended by `pthread_exit` (or pyo3
//! panics, the interpreter being gone), and unwinding through the binding's Rust frames
//! aborts the process. So every such return passes the [gate](enter_or_park): the
//! module's exit hook ([`at_exit`], registered with `atexit` when the package is imported)
//! closes it, gives back every lease and queue place of the process's clients (as
//! `Client::shutdown` does), and waits for the threads already past the gate to leave
//! Python. A thread that reaches the closed gate afterwards never comes back into Python:
//! a callback is dropped, a blocked call's thread sleeps until the process ends (as
//! the interpreter's own daemon threads do). The thread running the exit hook passes, so `atexit`
//! handlers that run after it still work.
//!
//! **Fork.** A child made by `os.fork()` has the parent's memory but none of its threads:
//! the parent's runtime, connections and background tasks are dead there. A client keeps
//! one connection [per process](PerProcess): in the child it connects afresh on first use
//! (gunicorn `--preload`, prefork pools). Guards are the parent's leases: the child is
//! refused at once (`Forked`), and what the parent's objects own is leaked, never dropped,
//! in the child (dropping could wait for a thread that does not exist there).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::sync::OnceCell;

use crate::errors::Failure;

/// How long the exit hook waits for the leases of the process to be given back (a Redis
/// that does not answer must not hold the exit up; its leases then expire by their ttl).
const GIVE_BACK_BOUND: Duration = Duration::from_secs(3);

/// How long the exit hook waits for threads already past the gate to leave Python.
const LEAVE_BOUND: Duration = Duration::from_secs(2);

/// The thread running the exit hook, once the interpreter exits. Atomics rather than a
/// lock: a child made by `os.fork()` while another thread held a lock would find it held
/// for ever.
static EXIT_THREAD: OnceLock<ThreadId> = OnceLock::new();
/// Threads past the gate that have not left Python yet.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// A thread's pass through the gate, held until it has left Python again (dropped with
/// the GIL held, or after `Python::attach` returned).
#[must_use = "dropping the pass at once lets the exit hook finalize under the thread"]
#[derive(Debug)]
pub(crate) struct Pass(());

impl Drop for Pass {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A pass into Python, unless the interpreter is exiting and this is not the thread
/// running the exit hook. (Counted before the exit is read, and the exit hook sets the
/// exit before it reads the count: one of the two sees the other.)
fn enter() -> Option<Pass> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let pass = Pass(());
    match EXIT_THREAD.get() {
        Some(exiting) if *exiting != std::thread::current().id() => None,
        _ => Some(pass),
    }
}

/// A pass for a thread about to take the GIL back to return into Python (a blocking
/// call's end); once the interpreter exits, the thread sleeps until the process ends.
pub(crate) fn enter_or_park() -> Pass {
    match enter() {
        Some(pass) => pass,
        None => loop {
            std::thread::park();
        },
    }
}

/// Runs `f` under the GIL from a thread of the binding's own (a callback, a signal
/// check), unless the interpreter is exiting: then `None`, and `f` does not run.
pub(crate) fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    let pass = enter()?;
    let done = Python::attach(f);
    drop(pass);
    Some(done)
}

/// Runs `f` with the GIL released, then takes it back through the gate.
pub(crate) fn detach<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> R {
    let (done, pass) = py.detach(|| {
        let done = f();
        (done, enter_or_park())
    });
    drop(pass);
    done
}

/// A value made in one process and made again in a child after `os.fork()`: a client's
/// connection, on the runtime of the process.
#[derive(Debug)]
pub(crate) struct PerProcess<T> {
    slot: Mutex<Slot<T>>,
}

#[derive(Debug)]
struct Slot<T> {
    pid: u32,
    runtime: &'static Runtime,
    cell: Arc<OnceCell<T>>,
}

/// A per-process value of this process, and the runtime to use it on.
#[derive(Debug)]
pub(crate) struct Here<T> {
    /// This process's runtime.
    pub(crate) runtime: &'static Runtime,
    /// The value, set once made in this process.
    pub(crate) cell: Arc<OnceCell<T>>,
}

impl<T> Clone for Here<T> {
    fn clone(&self) -> Self {
        Self {
            runtime: self.runtime,
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<T> PerProcess<T> {
    /// A value to make in this process on first use (`value`: made already).
    pub(crate) fn new(value: Option<T>) -> Result<Self, Failure> {
        let cell = Arc::new(OnceCell::new_with(value));
        Ok(Self {
            slot: Mutex::new(Slot {
                pid: std::process::id(),
                runtime: runtime()?,
                cell,
            }),
        })
    }

    /// This process's cell, and whether it was made just now: the parent's is forgotten
    /// (leaked) in a child, and an empty one takes its place.
    pub(crate) fn here(&self) -> Result<(Here<T>, bool), Failure> {
        let pid = std::process::id();
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = slot.pid != pid;
        if fresh {
            let made = Slot {
                pid,
                runtime: runtime()?,
                cell: Arc::new(OnceCell::new()),
            };
            std::mem::forget(std::mem::replace(&mut *slot, made));
        }
        let here = Here {
            runtime: slot.runtime,
            cell: Arc::clone(&slot.cell),
        };
        Ok((here, fresh))
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(PoisonError::into_inner);
        if slot.pid != std::process::id() {
            // The parent's: its drop could wait for the parent's threads.
            let orphan = std::mem::replace(&mut slot.cell, Arc::new(OnceCell::new()));
            std::mem::forget(orphan);
        }
    }
}

/// `Forked` when `pid`, the process that made a `what`, is not this one: a child made by
/// `os.fork()` holds none of the parent's leases.
pub(crate) fn same_process(pid: u32, what: &str) -> Result<(), Failure> {
    let here = std::process::id();
    if pid == here {
        return Ok(());
    }
    Err(Failure::Binding(
        "Forked",
        format!(
            "this {what} belongs to process {pid}, which made it before os.fork(); this is process {here}, which holds nothing of it (the parent's lease is untouched): acquire again here"
        ),
    ))
}

/// This process's runtime (see `crate::runtime`), or the binding's error.
pub(crate) fn runtime() -> Result<&'static Runtime, Failure> {
    crate::runtime::runtime().map_err(|e| {
        Failure::Binding(
            "RuntimeFailure",
            format!("could not start the binding's Tokio runtime: {e}"),
        )
    })
}

/// The clients of every process that ever imported the binding: given back at exit.
static CLIENTS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

#[derive(Debug)]
struct Registered {
    pid: u32,
    runtime: &'static Runtime,
    client: Weak<OnceCell<redlease::Client>>,
}

/// Has the exit hook give back `here`'s leases and queue places (while anything still
/// uses that client: its Python client or one of its guards).
pub(crate) fn register(here: &Here<redlease::Client>) {
    let mut clients = CLIENTS.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    // Forget the parent's entries (never dropped here) and the clients gone.
    let (stale, live): (Vec<_>, Vec<_>) = std::mem::take(&mut *clients)
        .into_iter()
        .partition(|c| c.pid != pid);
    std::mem::forget(stale);
    clients.extend(live.into_iter().filter(|c| c.client.strong_count() > 0));
    if clients
        .iter()
        .any(|c| std::ptr::eq(c.client.as_ptr(), Arc::as_ptr(&here.cell)))
    {
        return;
    }
    clients.push(Registered {
        pid,
        runtime: here.runtime,
        client: Arc::downgrade(&here.cell),
    });
}

/// The interpreter exits: closes the gate, gives back every lease and queue place of this
/// process's clients, and waits for the threads already inside Python to leave it.
/// Registered with `atexit` by the package; calling it earlier ends the binding's use in
/// this process (other threads' calls then never return).
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    // A second call (the hook run by hand, then by atexit) keeps the first thread.
    let _ = EXIT_THREAD.set(std::thread::current().id());
    let pid = std::process::id();
    let clients: Vec<(&'static Runtime, redlease::Client)> = CLIENTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|c| c.pid == pid)
        .filter_map(|c| Some((c.runtime, c.client.upgrade()?.get()?.clone())))
        .collect();
    py.detach(|| {
        if let Some((runtime, _)) = clients.first() {
            runtime.block_on(async {
                let all = clients.iter().map(|(_, client)| client.shutdown());
                let done =
                    tokio::time::timeout(GIVE_BACK_BOUND, futures_util::future::join_all(all))
                        .await;
                if let Ok(done) = done {
                    for e in done.into_iter().filter_map(Result::err) {
                        tracing::warn!(error = %e, "a lease could not be given back at exit; it expires by its ttl");
                    }
                } else {
                    tracing::warn!(
                        bound = ?GIVE_BACK_BOUND,
                        "leases not given back within the bound at exit; they expire by their ttl"
                    );
                }
            });
        }
        let deadline = Instant::now() + LEAVE_BOUND;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
