//! The fault matrix: one scenario per fault, each with the deployment it needs, the
//! guarantee redlease claims under it, and a bounded fault schedule.
//!
//! `rows` lists the matrix; `run` runs one row against its `target`, with the faults of
//! `inject`, and reads the `history` it leaves.

mod history;
mod inject;
mod rows;
mod run;
mod target;

pub(crate) use rows::matrix;
pub(crate) use run::{Budget, Outcome, run};
