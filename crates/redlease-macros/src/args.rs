//! The options of `#[locked(...)]`, parsed and checked at compile time.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::{Expr, Ident, LitStr, Path};

/// The shortest lease the library accepts (`redlease::MIN_TTL`).
const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest lease or wait the library accepts (`redlease::MAX_TTL`, 30 days).
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What the attribute said.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    /// `keys = [...]`: a multi-lock of these templates, never empty.
    pub(crate) keys: Option<Vec<LitStr>>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<WaitArg>,
    pub(crate) retry: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) prefix: Option<LitStr>,
    pub(crate) client: Option<Expr>,
    pub(crate) on_busy: Option<Path>,
    pub(crate) guard: Option<Ident>,
    /// `permits = N`, `read` or `write`, with the option's name; a lock without.
    pub(crate) primitive: Option<(Primitive, String)>,
}

/// What the function holds, when not a lock.
pub(crate) enum Primitive {
    /// One of the permits of a semaphore.
    Permits(u32),
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
}

/// `wait = "..."`.
pub(crate) enum WaitArg {
    No,
    For(Duration),
    Forever,
}

impl Args {
    /// Takes one `name = value` of the attribute.
    pub(crate) fn parse_one(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
            return Err(meta.error(UNKNOWN));
        };
        let duplicate = || meta.error(format!("`{name}` is given twice"));
        match name.as_str() {
            "key" => {
                let template = meta.value()?.parse()?;
                if self.keys.is_some() {
                    return Err(meta.error(KEY_AND_KEYS));
                }
                set(&mut self.key, template).ok_or_else(duplicate)
            }
            "keys" => {
                let templates = templates(&meta.value()?.parse()?)?;
                if self.key.is_some() {
                    return Err(meta.error(KEY_AND_KEYS));
                }
                if let Some((_, primitive)) = &self.primitive {
                    return Err(meta.error(keys_and(primitive)));
                }
                set(&mut self.keys, templates).ok_or_else(duplicate)
            }
            "prefix" => set(&mut self.prefix, meta.value()?.parse()?).ok_or_else(duplicate),
            "client" => set(&mut self.client, meta.value()?.parse()?).ok_or_else(duplicate),
            "on_busy" => set(&mut self.on_busy, meta.value()?.parse()?).ok_or_else(duplicate),
            "guard" => set(&mut self.guard, meta.value()?.parse()?).ok_or_else(duplicate),
            "ttl" => {
                let lit: LitStr = meta.value()?.parse()?;
                let ttl = duration(&lit, "ttl")?;
                if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "`ttl` must be between 10ms and 30days, not {}",
                            humantime::format_duration(ttl)
                        ),
                    ));
                }
                set(&mut self.ttl, ttl).ok_or_else(duplicate)
            }
            "wait" => {
                let lit: LitStr = meta.value()?.parse()?;
                let wait = match lit.value().trim() {
                    "forever" => WaitArg::Forever,
                    _ => match duration(&lit, "wait")? {
                        d if d.is_zero() => WaitArg::No,
                        d if d > MAX_TTL => {
                            return Err(syn::Error::new(
                                lit.span(),
                                "`wait` longer than 30days: write `wait = \"forever\"`",
                            ));
                        }
                        d => WaitArg::For(d),
                    },
                };
                set(&mut self.wait, wait).ok_or_else(duplicate)
            }
            "retry" => {
                let lit: LitStr = meta.value()?.parse()?;
                let retry = positive(&lit, "retry")?;
                set(&mut self.retry, retry).ok_or_else(duplicate)
            }
            "max_hold" => {
                let lit: LitStr = meta.value()?.parse()?;
                let budget = positive(&lit, "max_hold")?;
                set(&mut self.max_hold, budget).ok_or_else(duplicate)
            }
            "permits" => {
                let permits = permits(&meta.value()?.parse()?)?;
                self.set_primitive(meta, Primitive::Permits(permits), name)
            }
            "read" | "write" => {
                if !(meta.input.is_empty() || meta.input.peek(syn::Token![,])) {
                    return Err(meta.error(format!(
                        "`{name}` takes no value: write `#[redlease::locked(key = \"...\", {name})]`"
                    )));
                }
                let side = if name == "read" {
                    Primitive::Read
                } else {
                    Primitive::Write
                };
                self.set_primitive(meta, side, name)
            }
            _ => Err(meta.error(UNKNOWN)),
        }
    }

    /// Sets what the function holds, refusing a second one.
    fn set_primitive(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        primitive: Primitive,
        name: String,
    ) -> syn::Result<()> {
        if self.keys.is_some() {
            return Err(meta.error(keys_and(&name)));
        }
        if let Some((_, first)) = &self.primitive {
            return Err(meta.error(if *first == name {
                format!("`{name}` is given twice")
            } else {
                format!(
                    "`{first}` and `{name}` cannot be combined: `permits = N` holds one of N permits of a semaphore, `read` and `write` one side of a read-write lock; choose one"
                )
            }));
        }
        self.primitive = Some((primitive, name));
        Ok(())
    }

    /// The builder the options apply to: `client.lock(key)`, `client.semaphore(key, N)`,
    /// `client.rwlock(key).read()` or `.write()`, or `client.multi_lock(key)` (`key` then
    /// being the array of keys).
    pub(crate) fn builder(&self, client: &Ident, key: &Ident) -> TokenStream {
        if self.keys.is_some() {
            return quote!(#client.multi_lock(#key));
        }
        match self.primitive.as_ref().map(|(p, _)| p) {
            None => quote!(#client.lock(#key)),
            Some(Primitive::Permits(n)) => quote!(#client.semaphore(#key, #n)),
            Some(Primitive::Read) => quote!(#client.rwlock(#key).read()),
            Some(Primitive::Write) => quote!(#client.rwlock(#key).write()),
        }
    }

    /// The builder calls for the options given.
    pub(crate) fn builder_calls(&self) -> TokenStream {
        let mut calls = TokenStream::new();
        if let Some(prefix) = &self.prefix {
            calls.extend(quote!(.prefix(#prefix)));
        }
        if let Some(ttl) = self.ttl {
            let ttl = duration_tokens(ttl);
            calls.extend(quote!(.ttl(#ttl)));
        }
        if let Some(wait) = &self.wait {
            let wait = match wait {
                WaitArg::No => quote!(::redlease::Wait::No),
                WaitArg::Forever => quote!(::redlease::Wait::Forever),
                WaitArg::For(d) => {
                    let d = duration_tokens(*d);
                    quote!(::redlease::Wait::For(#d))
                }
            };
            calls.extend(quote!(.wait(#wait)));
        }
        if let Some(retry) = self.retry {
            let min = duration_tokens(retry.min(Duration::from_millis(1)));
            let max = duration_tokens(retry);
            calls.extend(quote!(.retry(::redlease::Retry::new(#min, #max))));
        }
        if let Some(budget) = self.max_hold {
            let budget = duration_tokens(budget);
            calls.extend(quote!(.max_hold(#budget)));
        }
        calls
    }
}

const UNKNOWN: &str = "unknown option of `#[redlease::locked]`; expected `key`, `keys`, `permits`, `read`, `write`, `ttl`, `wait`, `retry`, `max_hold`, `prefix`, `client`, `on_busy` or `guard`";

const KEY_AND_KEYS: &str = "`key` and `keys` cannot be combined: `key = \"...\"` holds one lock, `keys = [...]` several at once; put every key in `keys`";

/// The error for `keys` with `permits`, `read` or `write`.
fn keys_and(primitive: &str) -> String {
    format!(
        "`keys` and `{primitive}` cannot be combined: `keys = [...]` holds several locks at once, not a semaphore or a side of a read-write lock"
    )
}

/// `keys = ["from:{a.id}", "to:{b.id}"]`: at least one template, each a string.
fn templates(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let Expr::Array(array) = value else {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` must be a list of key templates, like `keys = [\"from:{a.id}\", \"to:{b.id}\"]`",
        ));
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new_spanned(
            array,
            "`keys = []` names no lock: give at least one key template, like `keys = [\"from:{a.id}\", \"to:{b.id}\"]`",
        ));
    }
    array
        .elems
        .iter()
        .map(|element| match element {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(template),
                ..
            }) => Ok(template.clone()),
            other => Err(syn::Error::new_spanned(
                other,
                "each of `keys` must be a key template, a string like \"from:{a.id}\"",
            )),
        })
        .collect()
}

/// Sets `slot` unless it is set already (`None` then).
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// A humane duration (`"10s"`, `"1500ms"`, `"2m 30s"`).
fn duration(lit: &LitStr, option: &str) -> syn::Result<Duration> {
    let text = lit.value();
    humantime::parse_duration(text.trim()).map_err(|e| {
        syn::Error::new(
            lit.span(),
            format!(
                "`{option} = {text:?}` is not a duration ({e}); write it like \"10s\", \"1500ms\" or \"2m 30s\""
            ),
        )
    })
}

fn positive(lit: &LitStr, option: &str) -> syn::Result<Duration> {
    let d = duration(lit, option)?;
    if d.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{option}` must be greater than zero"),
        ));
    }
    Ok(d)
}

/// `permits = N`: a whole number from 1.
fn permits(value: &Expr) -> syn::Result<u32> {
    let shape = || {
        syn::Error::new_spanned(
            value,
            "`permits` must be a whole number of at least 1, like `permits = 3`",
        )
    };
    let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(int),
        ..
    }) = value
    else {
        return Err(shape());
    };
    match int.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new(
            int.span(),
            "`permits = 0` admits nobody: a semaphore needs at least 1 permit",
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(syn::Error::new(
            int.span(),
            format!("`permits` must be between 1 and {}", u32::MAX),
        )),
    }
}

fn duration_tokens(d: Duration) -> TokenStream {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    quote!(::std::time::Duration::new(#secs, #nanos))
}
