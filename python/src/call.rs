//! Running the library's futures for Python: blocking the calling thread (the GIL
//! released, signals still checked), or in the background with a callback (the asyncio
//! API builds its awaitables on that).

use std::future::Future;
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::Failure;

/// How often a blocked call looks for a pending signal (Ctrl-C) of the main thread.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Makes a Python object of one of the binding's own classes (a `Guard`, a `Client`),
/// under the GIL, on the runtime the object will use.
pub(crate) type MakeObject =
    Box<dyn FnOnce(Python<'_>, &'static Runtime) -> PyResult<Py<PyAny>> + Send>;

/// What an operation returns, turned into a Python object under the GIL.
pub(crate) enum Outcome {
    /// `None`.
    Unit,
    /// An object of the binding's classes (the modules above this one say how to make it).
    Object(MakeObject),
    /// A number or `None`: a fenced write's outcome (`None` when written, else the newer
    /// token), a semaphore's permit count before a resize (`None`: none was stored).
    MaybeNumber(Option<u64>),
    /// An election's leader as `(note, term, remaining seconds)`, or `None`.
    Leader(Option<redlease::Leader>),
    /// Numbers, as a tuple (a latch's count, how its round ended).
    Numbers(Vec<u64>),
    /// A yes or no (whether Redis still names this holder).
    Bool(bool),
    /// What Redis holds for a name, as a dict (see `inspection`).
    Inspection(Box<redlease::Inspection>),
    /// A client's connection state as `(state, down, nodes)` (see `connection_state`).
    Connection(redlease::ConnectionState),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unit => f.write_str("Unit"),
            Self::Object(_) => f.write_str("Object"),
            Self::MaybeNumber(number) => f.debug_tuple("MaybeNumber").field(number).finish(),
            Self::Leader(leader) => f.debug_tuple("Leader").field(leader).finish(),
            Self::Numbers(numbers) => f.debug_tuple("Numbers").field(numbers).finish(),
            Self::Bool(yes) => f.debug_tuple("Bool").field(yes).finish(),
            Self::Inspection(seen) => f.debug_tuple("Inspection").field(&seen.key).finish(),
            Self::Connection(state) => f.debug_tuple("Connection").field(state).finish(),
        }
    }
}

impl Outcome {
    fn into_py(self, py: Python<'_>, runtime: &'static Runtime) -> PyResult<Py<PyAny>> {
        match self {
            Self::Unit | Self::Leader(None) => Ok(py.None()),
            Self::Object(make) => make(py, runtime),
            Self::MaybeNumber(number) => number.into_py_any(py),
            Self::Leader(Some(leader)) => (
                leader.note,
                leader.term.get(),
                leader.remaining.as_secs_f64(),
            )
                .into_py_any(py),
            Self::Numbers(numbers) => pyo3::types::PyTuple::new(py, numbers)?.into_py_any(py),
            Self::Bool(yes) => yes.into_py_any(py),
            Self::Inspection(seen) => inspection(py, &seen),
            Self::Connection(state) => connection_state(state).into_py_any(py),
        }
    }
}

/// A connection state as `(state, down, nodes)`: `("connected", None, None)`,
/// `("degraded", down, nodes)` or `("suspended", None, None)`.
fn connection_state(
    state: redlease::ConnectionState,
) -> (&'static str, Option<usize>, Option<usize>) {
    match state {
        redlease::ConnectionState::Connected => ("connected", None, None),
        redlease::ConnectionState::Degraded { down, nodes } => {
            ("degraded", Some(down), Some(nodes))
        }
        // `Suspended`, and a state added to the library later while it is not usable.
        state if !state.is_usable() => ("suspended", None, None),
        _ => ("connected", None, None),
    }
}

/// An inspection as a dict: `key`, `held`, `primitive` (`"lock"`, `"semaphore"`,
/// `"rwlock"`, `"latch"` or `None` when nothing is there), `mode` (`"read"`, `"write"` or
/// `None`), `permits`, `fencing_counter`, and `holders` / `waiters` (dicts of
/// `token_prefix`, `fencing_token`, `remaining`, `waited`, `details`, `permits`, `mode`).
fn inspection(py: Python<'_>, seen: &redlease::Inspection) -> PyResult<Py<PyAny>> {
    use pyo3::types::{PyDict, PyList};
    fn mode(access: Option<redlease::Access>) -> Option<&'static str> {
        access.map(|a| match a {
            redlease::Access::Read => "read",
            _ => "write",
        })
    }
    let snapshot = &seen.snapshot;
    let dict = PyDict::new(py);
    dict.set_item("key", &seen.key)?;
    dict.set_item("held", seen.is_held())?;
    dict.set_item(
        "primitive",
        snapshot.primitive.map(|p| match p {
            redlease::Primitive::Lock => "lock",
            redlease::Primitive::Semaphore => "semaphore",
            redlease::Primitive::RwLock => "rwlock",
            _ => "latch",
        }),
    )?;
    dict.set_item("mode", mode(snapshot.access))?;
    dict.set_item("permits", snapshot.permits)?;
    dict.set_item(
        "fencing_counter",
        snapshot.fencing_counter.map(redlease::FencingToken::get),
    )?;
    let holders = PyList::empty(py);
    for h in &snapshot.holders {
        let one = PyDict::new(py);
        one.set_item("token_prefix", &h.token_prefix)?;
        one.set_item(
            "fencing_token",
            h.fencing_token.map(redlease::FencingToken::get),
        )?;
        one.set_item("remaining", h.remaining.map(|d| d.as_secs_f64()))?;
        one.set_item("details", &h.details)?;
        one.set_item("permits", h.permits)?;
        holders.append(one)?;
    }
    dict.set_item("holders", holders)?;
    let waiters = PyList::empty(py);
    for w in &snapshot.waiters {
        let one = PyDict::new(py);
        one.set_item("token_prefix", &w.token_prefix)?;
        one.set_item("waited", w.waited.map(|d| d.as_secs_f64()))?;
        one.set_item("details", &w.details)?;
        one.set_item("mode", mode(w.access))?;
        one.set_item("permits", w.permits)?;
        waiters.append(one)?;
    }
    dict.set_item("waiters", waiters)?;
    dict.into_py_any(py)
}

/// Runs `work` to its end on `runtime`, with the GIL released; a signal handler that
/// raises (Ctrl-C's `KeyboardInterrupt`) drops `work` and raises.
pub(crate) fn block_on<F>(py: Python<'_>, runtime: &'static Runtime, work: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Result<Outcome, Failure>> + Send,
{
    let done = crate::life::detach(py, || {
        runtime.block_on(async {
            tokio::pin!(work);
            loop {
                tokio::select! {
                    done = &mut work => return done,
                    () = tokio::time::sleep(SIGNAL_CHECK) => {
                        // Not once the interpreter exits: the exit hook ends the work.
                        #[allow(clippy::redundant_closure_for_method_calls)] // a closure for any lifetime
                        crate::life::attach(|py| py.check_signals()).transpose()?;
                    }
                }
            }
        })
    });
    match done {
        Ok(outcome) => outcome.into_py(py, runtime),
        Err(failure) => Err(failure.into_pyerr(py)),
    }
}

/// A background operation's handle: `cancel()` drops its future.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct Cancel {
    handle: tokio::task::AbortHandle,
}

#[pymethods]
impl Cancel {
    /// Drops the operation (an acquisition stops waiting; nothing is left held).
    fn cancel(&self) {
        self.handle.abort();
    }
}

/// Runs `work` on `runtime` and calls `callback(result, None)` or `callback(None, error)`
/// from a thread of its own when it ends (never when cancelled, nor once the
/// interpreter exits).
pub(crate) fn spawn_with_callback<F>(
    runtime: &'static Runtime,
    callback: Py<PyAny>,
    work: F,
) -> Cancel
where
    F: Future<Output = Result<Outcome, Failure>> + Send + 'static,
{
    let task = runtime.spawn(async move {
        let done = work.await;
        // The callback waits for the GIL: not on a worker thread of the runtime.
        let _ = tokio::task::spawn_blocking(move || {
            crate::life::attach(|py| {
                let args = match done
                    .map_err(|f| f.into_pyerr(py))
                    .and_then(|o| o.into_py(py, runtime))
                {
                    Ok(value) => (value, py.None()),
                    Err(e) => (py.None(), e.into_value(py).into_any()),
                };
                if let Err(e) = callback.call1(py, args) {
                    e.write_unraisable(py, None);
                }
            });
        })
        .await;
    });
    Cancel {
        handle: task.abort_handle(),
    }
}

/// `secs` seconds as a duration, or `InvalidOption` for a negative, infinite or NaN value.
pub(crate) fn duration(option: &'static str, secs: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        Failure::Binding(
            "InvalidOption",
            format!("invalid option `{option}`: {secs} is not a number of seconds >= 0"),
        )
    })
}
