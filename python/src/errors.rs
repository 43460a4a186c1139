//! `redlease::Error` as the exception classes of `redlease._errors`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// What an operation may fail with: the library's error, or a Python exception raised
/// while it waited (`KeyboardInterrupt`) or while converting its result.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error of the library.
    Lib(redlease::Error),
    /// A Python exception.
    Py(PyErr),
    /// An error of the binding itself: the name of its class in `redlease._errors`, and
    /// its message.
    Binding(&'static str, String),
}

impl From<redlease::Error> for Failure {
    fn from(e: redlease::Error) -> Self {
        Self::Lib(e)
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Self::Py(e)
    }
}

impl Failure {
    /// The Python exception to raise.
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            Self::Py(e) => e,
            Self::Lib(e) => lib_error(py, &e),
            Self::Binding(class, message) => make(py, class, message),
        }
    }
}

/// The name of the class in `redlease._errors` an error is raised as.
fn class_name(e: &redlease::Error) -> &'static str {
    use redlease::Error as E;
    match e {
        E::Timeout { .. } => "Timeout",
        // Python's adopt raised `Lost` before the library had its own error for it.
        E::Lost { .. } | E::HandleGone { .. } => "Lost",
        E::ShutDown { .. } => "ShutDown",
        E::Released { .. } => "Released",
        E::ConnectTimeout { .. } => "ConnectionError",
        E::Auth { .. } => "AuthError",
        E::NoQuorum { .. } => "NoQuorum",
        E::Replication { .. } => "ReplicationError",
        E::InvalidName { .. } => "InvalidName",
        // The Rust-only default client (`#[redlease::locked]` without a client) included.
        E::InvalidOption { .. }
        | E::InvalidHandle { .. }
        | E::PermitsAsked { .. }
        | E::DefaultClientSet { .. }
        | E::NoDefaultClient { .. } => "InvalidOption",
        E::WrongType { .. } => "WrongType",
        E::PermitsMismatch { .. } => "PermitsMismatch",
        E::Upgrade { .. } | E::NestedDowngrade { .. } => "UpgradeError",
        E::Unsupported { .. } | E::ServerLacks { .. } | E::FixedLeaseReentered { .. } => {
            "Unsupported"
        }
        E::Runtime { .. } | E::Randomness { .. } => "RuntimeFailure",
        e if e.is_connection() => "ConnectionError",
        E::Redis { .. } => "RedisError",
        // A variant added to the library later: its base class until it gets one here.
        _ => "Error",
    }
}

/// The whole cause chain in one message, as the CLI prints it (a cause the message
/// already quotes once).
fn message(e: &redlease::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A library error as an instance of its class.
pub(crate) fn lib_error(py: Python<'_>, e: &redlease::Error) -> PyErr {
    make(py, class_name(e), message(e))
}

/// An instance of class `class` of `redlease._errors` with `message`.
fn make(py: Python<'_>, class: &str, message: String) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = py.import("redlease._errors")?.getattr(class)?;
        let args = PyTuple::new(py, [message])?;
        Ok(PyErr::from_value(class.call1(args)?))
    })();
    made.unwrap_or_else(|import_failed| import_failed)
}
