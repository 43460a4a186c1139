//! The tokio runtime a benchmark runs on (`redlease bench --runtime`).

/// The tokio runtime flavours `redlease bench --runtime` can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Flavor {
    /// `Builder::new_multi_thread` with 2 workers (the CLI's runtime).
    MultiThread,
    /// `Builder::new_current_thread`.
    CurrentThread,
}

impl Flavor {
    /// A runtime of this flavour, with every driver on.
    pub(crate) fn build(self) -> std::io::Result<tokio::runtime::Runtime> {
        match self {
            Self::MultiThread => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build(),
            Self::CurrentThread => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
        }
    }
}
