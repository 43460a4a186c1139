//! The `#[redlease::locked]` attribute. Use it through the `redlease` crate (feature
//! `macros`, on by default), which re-exports it as `redlease::locked`; its documentation
//! is there.

mod args;
mod expand;
mod template;

use proc_macro::TokenStream;

/// DOCS
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
