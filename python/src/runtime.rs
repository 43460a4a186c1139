//! The binding's one Tokio runtime per process.
//!
//! Every client of a process runs on it. A child made by `os.fork()` inherits the
//! parent's memory but none of its threads, so the parent's runtime is dead there: the
//! first call in the child builds a fresh one (the inherited one is leaked, never shut
//! down, since shutting it down would wait for threads that do not exist), and a client
//! connected in the parent connects afresh in the child (see `crate::life::PerProcess`).

use std::sync::Mutex;

use tokio::runtime::Runtime;

/// The runtime of the process that built it.
struct ProcessRuntime {
    pid: u32,
    runtime: &'static Runtime,
}

static RUNTIME: Mutex<Option<ProcessRuntime>> = Mutex::new(None);

/// This process's runtime, built on first use (again after a fork).
pub(crate) fn runtime() -> std::io::Result<&'static Runtime> {
    let pid = std::process::id();
    // A poisoned lock only means a panic while building: the slot is still consistent.
    let mut slot = RUNTIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(current) = slot.as_ref()
        && current.pid == pid
    {
        return Ok(current.runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("redlease")
        .enable_all()
        .build()?;
    // One runtime per process, for the process' life: leaked on purpose.
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    *slot = Some(ProcessRuntime { pid, runtime });
    Ok(runtime)
}
