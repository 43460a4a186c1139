//! `redlease demo` (stub).
use std::process::ExitCode;

pub(crate) const LONG_ABOUT: &str = "demo";

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {}

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {}

#[allow(clippy::unused_async)]
pub(crate) async fn run(_: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("todo")
}

#[allow(clippy::unused_async)]
pub(crate) async fn worker(_: WorkerArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("todo")
}
