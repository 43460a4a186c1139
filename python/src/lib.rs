//! The native part of the `redlease` Python package (`redlease._native`): the library's
//! clients and guards on one Tokio runtime per process. The Python API (`with`,
//! `async with`, durations, decorators) is in `python/redlease/`.

mod call;
mod client;
mod errors;
mod guard;
mod life;
mod observe;
mod resource;
mod runtime;

use pyo3::prelude::*;

/// The module `redlease._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<client::Request>()?;
    m.add_class::<client::Options>()?;
    m.add_class::<client::Owner>()?;
    m.add_class::<guard::Guard>()?;
    m.add_class::<call::Cancel>()?;
    m.add_class::<observe::Changes>()?;
    m.add_class::<resource::FencedStore>()?;
    m.add_function(wrap_pyfunction!(life::at_exit, m)?)?;
    m.add("DEFAULT_TTL", redlease::DEFAULT_TTL.as_secs_f64())?;
    let default_wait = match redlease::DEFAULT_WAIT {
        redlease::Wait::For(wait) => Some(wait.as_secs_f64()),
        redlease::Wait::No => Some(0.0),
        _ => None,
    };
    m.add("DEFAULT_WAIT", default_wait)?;
    m.add("DEFAULT_PREFIX", redlease::DEFAULT_PREFIX)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
