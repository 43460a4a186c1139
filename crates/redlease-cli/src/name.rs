//! How every subcommand names what it reads or holds: `--key NAME` for a lock, semaphore
//! or read-write lock (`run --key`, `status --key`, `release --force --key`), `--elect
//! NAME` for an election (`run --elect`, `leader --elect`). The older spelling with the
//! name alone (`status NAME`, `leader NAME`) is still accepted, and hidden from `--help`.
//! A leaf: it uses no other module of the binary.

/// A clap argument group: the name given with `--$flag NAME` (or `-$short NAME`), or alone
/// (hidden).
macro_rules! name_arg {
    ($(#[$doc:meta])* $ty:ident, $flag:ident $(($short:literal))?, $bare:ident, $help:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, clap::Args)]
        pub(crate) struct $ty {
            #[arg(
                long,
                $(short = $short,)?
                value_name = "NAME",
                required_unless_present = stringify!($bare),
                help = $help
            )]
            $flag: Option<String>,

            /// The same name without the flag (hidden: the older spelling)
            #[arg(value_name = "NAME", hide = true, conflicts_with = stringify!($flag))]
            $bare: Option<String>,
        }

        impl $ty {
            /// The name given (clap requires one of the two spellings).
            pub(crate) fn name(&self) -> &str {
                self.$flag
                    .as_deref()
                    .or(self.$bare.as_deref())
                    .unwrap_or_default()
            }
        }
    };
}

name_arg!(
    /// `--key NAME` (or the name alone) of `status` and `release --force`.
    KeyArg,
    key('k'),
    bare_key,
    "The name of the lock, semaphore or read-write lock (as given to redlease run --key or to the library)"
);

name_arg!(
    /// `--elect NAME` (or the name alone) of `leader`.
    ElectArg,
    elect,
    bare_elect,
    "The election's name (as given to redlease run --elect or to the library)"
);
