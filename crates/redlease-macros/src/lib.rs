//! The `#[redlease::locked]` attribute. Use it through the `redlease` crate (feature
//! `macros`, on by default), which re-exports it as `redlease::locked`; its documentation
//! is there.

mod args;
mod expand;
mod template;

use proc_macro::TokenStream;

// The README's Rust example, compiled as a doc test so that it cannot drift from the
// attribute. Private: a proc-macro crate exports nothing but its macros (rustdoc runs the
// doc tests of private items too).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Runs a function under a distributed lock whose name is built from its arguments.
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
/// # struct User { id: u64 } struct Stock; struct Coupon;
/// #[redlease::locked(key = "coupon:{user.id}", ttl = "10s", wait = "5s")]
/// async fn grab_coupon(user: &User, stock: &Stock) -> Result<Coupon, AppError> {
///     // One caller per user at a time, across every process on this Redis.
///     # let _ = stock;
///     Ok(Coupon)
/// }
/// ```
///
/// The function keeps its signature. Its body runs as inside [`Lock::run`]: the lock is
/// acquired first (waiting up to `wait`), the lease is renewed while the body runs, the lock
/// is released when it ends, and if the lease is **lost** meanwhile the body's future is
/// dropped where it stands and the function returns [`Error::Lost`] (converted to `E`).
/// `return` and `?` in the body work as before.
///
/// # Options
/// | option | value | default |
/// |---|---|---|
/// | `key` | a template, `"coupon:{user.id}"` | the module path and the function name, `"shop::orders::grab_coupon"` |
/// | `keys` | several templates at once, `keys = ["from:{a.id}", "to:{b.id}"]`: hold a [`MultiLock`] of all of them instead of one lock | one lock |
/// | `permits` | hold one of this many permits of the [`Semaphore`] named by the key instead of a lock: a whole number from 1, `permits = 3` | a lock |
/// | `read` / `write` | hold the read or the write side of the [`RwLock`] named by the key instead of a lock (no value) | a lock |
/// | `ttl` | the lease, a duration (`"10s"`, `"1500ms"`, `"2m 30s"`) from 10ms to 30days | 30s ([`DEFAULT_TTL`]) |
/// | `wait` | how long to wait for a busy lock: a duration, `"0s"` for one attempt, or `"forever"` | 10s ([`DEFAULT_WAIT`]) |
/// | `retry` | the ceiling of the polling back-off, a duration ([`Retry`]) | 200ms |
/// | `max_hold` | a budget for the whole hold, a duration ([`Lock::max_hold`]) | none |
/// | `prefix` | the key prefix, a string ([`Lock::prefix`]) | `"redlease:"` |
/// | `client` | an expression giving the client: `self.locks`, `client`, `CLIENT` | the default client |
/// | `on_busy` | a function (path) to call instead when the lock stays busy | return [`Error::Timeout`] |
/// | `guard` | a name under which the body sees the [`Guard`] (fencing token, name) | none |
///
/// Durations and the template are checked at compile time.
///
/// ## `key`
/// Literal text with `{...}` parts, each a parameter (or `self`) followed by fields and
/// method calls without arguments: `{user.id}`, `{order.sku()}`, `{self.shard}`,
/// `{pair.0}`. Each is formatted with `Display`. `{{` and `}}` are literal braces. A name
/// that is not a parameter, an expression of another shape, or a value without `Display`
/// is a compile error that points at the template. The key is built before the lock is
/// taken, from the arguments as they are at the call.
///
/// Without `key`, the lock is named `module_path!()` + `::` + the function's name. Two
/// methods of the same name on two types in one module then share a lock: give them keys.
///
/// ## `permits`, `read` and `write`: a semaphore or a read-write lock
/// With `permits = N` the body holds one of the `N` permits of the [`Semaphore`] named by
/// the key (at most `N` bodies at once, across every process); with `read` or `write` it
/// holds that side of the [`RwLock`] named by the key (many readers at once, or one
/// writer). Everything else is as for a lock: the wait, the renewal, the loss, `guard`
/// (a permit and a read or write hold have the [`Guard`]'s surface), `on_busy` (called when
/// no permit, or the side, was granted within the wait), reentrancy within a task (a
/// nested `read` inside `write` re-enters the write hold; a nested `write` inside `read`
/// returns [`Error::Upgrade`] at once, never a deadlock). At most one of the three may be
/// given, and `permits` must be a whole number from 1: anything else is a compile error.
/// Asking for a name with another permit count than the one in use returns
/// [`Error::PermitsMismatch`]; a name used by another kind of lock returns
/// [`Error::WrongType`]; a semaphore over a quorum returns [`Error::Unsupported`].
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
/// # struct Config;
/// #[redlease::locked(key = "backups", permits = 3)]
/// async fn back_up(site: &str) -> Result<(), AppError> {
///     // At most 3 backups at once.
///     # let _ = site;
///     Ok(())
/// }
///
/// #[redlease::locked(key = "config:{name}", read)]
/// async fn load(name: &str) -> Result<Config, AppError> {
///     // Many readers at once, never beside `reload`.
///     Ok(Config)
/// }
///
/// #[redlease::locked(key = "config:{name}", write)]
/// async fn reload(name: &str) -> Result<(), AppError> {
///     Ok(())
/// }
/// ```
///
/// ## `keys`: several locks at once
/// With `keys = [...]` the body holds a [`MultiLock`] of every key (each a template, as
/// for `key`): all or nothing, taken in one canonical order (sorted, so two functions
/// locking `A,B` and `B,A` never deadlock), all within the one `wait`. Duplicate keys are
/// one lock. Everything else is as for a lock: the renewal, the loss of any key (the body
/// is cancelled, or for a synchronous one the call returns [`Error::Lost`]), `on_busy`
/// (called when one key stays busy for the whole wait), reentrancy; `guard = g` gives the
/// [`MultiGuard`] ([`blocking::MultiGuard`] for a synchronous function), with each key's
/// fencing token (`g.fencing_token("from:7")`). While it waits for one key it holds the
/// keys before it (see [`MultiLock`]). `keys` cannot be combined with `key`, `permits`,
/// `read` or `write`, must name at least one key, and each element must be a string: a
/// compile error otherwise.
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
/// # struct Account { id: u64 }
/// #[redlease::locked(keys = ["account:{from.id}", "account:{to.id}"], guard = guard)]
/// async fn transfer(from: &Account, to: &Account, amount: u64) -> Result<(), AppError> {
///     // Both accounts are ours; stamp each write with its account's fencing token.
///     let _ = guard.fencing_token(&format!("account:{}", from.id));
///     # let _ = (to, amount);
///     Ok(())
/// }
/// ```
///
/// ## `ttl`: the lease, always renewed
/// The body always runs with auto-renewal, as in [`Lock::run`]: every `ttl/3` the lease is
/// extended, so the body may take longer than `ttl`. `ttl` is how long the lock outlives a
/// crashed (or frozen) holder, and how long after a lost connection the body is cancelled.
/// There is no fixed, unrenewed lease here, unlike the seed's `expireTime`: under a fixed
/// lease a body that ran long would simply be cancelled at `ttl`. For that budget, use
/// `max_hold`: renewal stops once it is spent, the lease runs out at most `ttl` later, and
/// the body is then cancelled with [`Error::Lost`].
///
/// ## `client`
/// An async function takes its locks on a [`Client`], a synchronous one on a
/// [`blocking::Client`]. `client = expr` is evaluated when the function is called, in its
/// scope (so it may use the parameters and `self`), and may be anything that dereferences
/// to the client (`Client`, `&Client`, `Arc<Client>`); another type is a compile error at
/// the expression. Without `client`, the process-wide default is used, set once at
/// start-up with [`set_default_client`] ([`blocking::set_default_client`] for synchronous
/// functions). Whether it was set can only be known at run time: a call without one
/// returns [`Error::NoDefaultClient`], converted to `E`, saying which function to call.
///
/// ## The return type, errors and `on_busy`
/// The function must return `Result<T, E>` with `E: From<redlease::Error>` (aliases such as
/// `redlease::Result<T>` or `anyhow::Result<T>` are fine); anything else is a compile error
/// saying so. The body's own errors come back unchanged; the lock's are converted with
/// `From`: [`Error::Timeout`] (busy for the whole wait), [`Error::Lost`], [`Error::Redis`]
/// and the rest.
///
/// With `on_busy = fallback`, a lock that stays busy for the whole wait calls
/// `fallback(same arguments)` (awaited for an async function) and returns its result
/// instead of the timeout error. It is not called for other errors. The fallback has the
/// same parameters and return type; `self` is passed as the first argument
/// (`on_busy = Self::busy`). Each parameter must be a plain name, and the body must not
/// consume an argument the fallback needs (a compile error otherwise).
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
/// struct Shop {
///     locks: redlease::Client,
/// }
///
/// impl Shop {
///     #[redlease::locked(key = "restock:{sku}", client = self.locks, wait = "0s", on_busy = Self::busy)]
///     async fn restock(&self, sku: &str) -> Result<&'static str, AppError> {
///         Ok("restocked")
///     }
///
///     async fn busy(&self, _sku: &str) -> Result<&'static str, AppError> {
///         Ok("someone else is restocking it")
///     }
/// }
/// ```
///
/// ## Reentrancy
/// The body runs in an [`Owner`] scope, as in [`Lock::run`], so a nested `#[locked]` call
/// on the same key, in the same task and on the same client, re-enters at once: no round
/// trip, the same fencing token, and the lock is released when the outermost call ends. A
/// task spawned from the body is another owner (see [`Owner`]).
///
/// ## Synchronous functions
/// A function without `async` locks through the [`blocking`] API ([`blocking::Lock::run`],
/// or the `run` of a blocking semaphore or read-write lock side):
/// the lease is renewed by the client's own runtime, but a running synchronous body cannot
/// be stopped from outside, so it runs to its end even when the lease was lost meanwhile;
/// the call then returns [`Error::Lost`] instead of the body's value. Check
/// [`blocking::Guard::is_held`] between long steps (`guard = g`). Do not call it from inside
/// an async task (a `spawn_blocking` thread is fine): it returns [`Error::Runtime`] there.
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
/// #[redlease::locked(key = "ledger:{account}", client = client, guard = guard)]
/// fn post_entry(client: &redlease::blocking::Client, account: u64) -> Result<u64, AppError> {
///     // Hand the fencing token to the ledger, so that it refuses a stale holder's write.
///     Ok(guard.fencing_token().get())
/// }
/// ```
///
/// Generics, lifetimes, `where` clauses, visibility and other attributes pass through
/// untouched; `impl Trait` in the return type is not supported (`T` and `E` must be
/// nameable).
///
/// # What it expands to
/// `grab_coupon` above becomes, in the shape `cargo expand` prints:
/// ```ignore
/// async fn grab_coupon(user: &User, stock: &Stock) -> Result<Coupon, AppError> {
///     let key: ::std::string::String = {
///         let mut key = ::std::string::String::new();
///         key.push_str("coupon:");
///         ::redlease::__private::push_display(&mut key, &(user.id));
///         key
///     };
///     let lock = ::redlease::default_client().map(|client| {
///         client
///             .lock(key)
///             .ttl(::std::time::Duration::new(10u64, 0u32))
///             .wait(::redlease::Wait::For(::std::time::Duration::new(5u64, 0u32)))
///     });
///     ::redlease::__private::run::<_, Result<Coupon, AppError>, _>(lock, async |_| {
///         Ok(Coupon) // the body, unchanged
///     })
///     .await
///     .into_inner()
/// }
/// ```
/// With `client = self.locks`, the `lock` line is
/// `let client: &::redlease::Client = &(self.locks); let lock = Ok(client.lock(key)...);`.
/// With `on_busy = f`, the last expression is
/// `match run(..).await { Ran::Done(r) => r, Ran::Busy(_) => f(user, stock).await }`.
/// With `permits = 3`, `client.lock(key)` is `client.semaphore(key, 3u32)`; with `read`,
/// `client.rwlock(key).read()`, and with `write`, `.write()`. With `keys = [..]`, `key` is
/// an array of the keys, each built as above, and `client.lock(key)` is
/// `client.multi_lock(key)`.
/// `__private::run` is [`Lock::run`] (or the semaphore's, the side's or the multi-lock's
/// `run`) with the
/// body's error kept apart from the lock's, so
/// that only the lock's is converted and a busy lock can be told from the rest; its future
/// is boxed, so that a caller awaiting several locked functions stays small. The local
/// names are hygienic: the body and the template cannot see them. The generated code
/// refers to `::redlease`, so the dependency must not be renamed.
///
/// [`Lock::run`]: https://docs.rs/redlease/latest/redlease/struct.Lock.html#method.run
/// [`Lock::max_hold`]: https://docs.rs/redlease/latest/redlease/struct.Lock.html#method.max_hold
/// [`Lock::prefix`]: https://docs.rs/redlease/latest/redlease/struct.Lock.html#method.prefix
/// [`Error::Lost`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Lost
/// [`Error::Timeout`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Timeout
/// [`Error::Redis`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Redis
/// [`Error::Runtime`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Runtime
/// [`Error::NoDefaultClient`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.NoDefaultClient
/// [`Error::Upgrade`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Upgrade
/// [`Error::PermitsMismatch`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.PermitsMismatch
/// [`Error::WrongType`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.WrongType
/// [`Error::Unsupported`]: https://docs.rs/redlease/latest/redlease/enum.Error.html#variant.Unsupported
/// [`MultiLock`]: https://docs.rs/redlease/latest/redlease/struct.MultiLock.html
/// [`MultiGuard`]: https://docs.rs/redlease/latest/redlease/struct.MultiGuard.html
/// [`blocking::MultiGuard`]: https://docs.rs/redlease/latest/redlease/blocking/struct.MultiGuard.html
/// [`Semaphore`]: https://docs.rs/redlease/latest/redlease/struct.Semaphore.html
/// [`RwLock`]: https://docs.rs/redlease/latest/redlease/struct.RwLock.html
/// [`DEFAULT_TTL`]: https://docs.rs/redlease/latest/redlease/constant.DEFAULT_TTL.html
/// [`DEFAULT_WAIT`]: https://docs.rs/redlease/latest/redlease/constant.DEFAULT_WAIT.html
/// [`Retry`]: https://docs.rs/redlease/latest/redlease/struct.Retry.html
/// [`Guard`]: https://docs.rs/redlease/latest/redlease/struct.Guard.html
/// [`Client`]: https://docs.rs/redlease/latest/redlease/struct.Client.html
/// [`Owner`]: https://docs.rs/redlease/latest/redlease/struct.Owner.html
/// [`set_default_client`]: https://docs.rs/redlease/latest/redlease/fn.set_default_client.html
/// [`blocking`]: https://docs.rs/redlease/latest/redlease/blocking/index.html
/// [`blocking::Client`]: https://docs.rs/redlease/latest/redlease/blocking/struct.Client.html
/// [`blocking::Lock::run`]: https://docs.rs/redlease/latest/redlease/blocking/struct.Lock.html#method.run
/// [`blocking::Guard::is_held`]: https://docs.rs/redlease/latest/redlease/blocking/struct.Guard.html#method.is_held
/// [`blocking::set_default_client`]: https://docs.rs/redlease/latest/redlease/blocking/fn.set_default_client.html
#[proc_macro_attribute]
pub fn locked(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut args = args::Args::default();
    let parser = syn::meta::parser(|meta| args.parse_one(&meta));
    if let Err(e) = syn::parse::Parser::parse(parser, attr) {
        return e.to_compile_error().into();
    }
    let function = match syn::parse::<syn::ItemFn>(item) {
        Ok(f) => f,
        Err(e) => {
            return syn::Error::new(
                e.span(),
                "`#[redlease::locked]` goes on a function (free, or a method taking `&self`)",
            )
            .to_compile_error()
            .into();
        }
    };
    expand::expand(&args, function)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
