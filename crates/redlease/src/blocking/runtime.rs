//! Driving the async engine from synchronous code: block on its runtime, never inside
//! another one.

use tokio::runtime::Runtime;

use crate::error::{Error, Result};

/// Runs `future` to completion on `runtime`, refusing to block inside an async context.
pub(super) fn block_on<F: Future>(runtime: &Runtime, future: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(inside_runtime());
    }
    Ok(runtime.block_on(future))
}

pub(super) fn inside_runtime() -> Error {
    Error::Runtime {
        reason: "the blocking API was called from inside an async runtime; use the async API there"
            .into(),
    }
}
