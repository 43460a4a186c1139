//! The expansion: the function keeps its signature; its body runs inside the lock.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Signature, Type};

use crate::args::Args;
use crate::template;

const SHAPE: &str =
    "`#[redlease::locked]` functions must return `Result<T, E>` with `E: From<redlease::Error>`";

/// Hygienic names of the generated code: neither the body nor the key template can see or
/// shadow them.
struct Names {
    key: Ident,
    lock: Ident,
    client: Ident,
    ran: Ident,
}

impl Names {
    fn new() -> Self {
        let name = |n| Ident::new(n, Span::mixed_site());
        Self {
            key: name("key"),
            lock: name("lock"),
            client: name("client"),
            ran: name("ran"),
        }
    }
}

pub(crate) fn expand(args: &Args, function: ItemFn) -> syn::Result<TokenStream> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    let ret = return_type(&sig)?;
    let blocking = sig.asyncness.is_none();
    let names = Names::new();
    let key = &names.key;
    let function_name = sig.ident.to_string();
    let key_code = if let Some(templates) = &args.keys {
        // A multi-lock: `key` is the array of keys, each built as a single key is.
        let params = parameters(&sig.inputs);
        let each = templates
            .iter()
            .map(|template| template::key_code(template, &params, &function_name, key))
            .collect::<syn::Result<Vec<_>>>()?;
        let n = each.len();
        quote!(let #key: [::std::string::String; #n] = [#(#each),*];)
    } else {
        let code = if let Some(template) = &args.key {
            let params = parameters(&sig.inputs);
            template::key_code(template, &params, &function_name, key)?
        } else {
            quote!(::std::string::String::from(
                ::std::concat!(::std::module_path!(), "::", #function_name)
            ))
        };
        quote!(let #key: ::std::string::String = #code;)
    };
    let lock_code = lock_code(args, blocking, &names);
    let lock = &names.lock;
    let guard = args
        .guard
        .as_ref()
        .map_or_else(|| quote!(_), ToTokens::to_token_stream);
    // Spanned at the return type, so that a wrong one is reported there, once.
    let call = if blocking {
        quote_spanned! {ret.span()=>
            ::redlease::__private::run_blocking::<_, #ret, _>(#lock, |#guard| #block)
        }
    } else {
        quote_spanned! {ret.span()=>
            ::redlease::__private::run::<_, #ret, _>(#lock, async |#guard| #block).await
        }
    };
    let finish = if let Some(fallback) = &args.on_busy {
        let arguments = call_arguments(&sig.inputs)?;
        let awaited = (!blocking).then(|| quote!(.await));
        let ran = &names.ran;
        quote! {
            match #call {
                ::redlease::__private::Ran::Done(#ran) => #ran,
                ::redlease::__private::Ran::Busy(_) => #fallback(#(#arguments),*) #awaited,
            }
        }
    } else {
        quote_spanned!(ret.span()=> #call.into_inner())
    };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #key_code
            #lock_code
            #finish
        }
    })
}

/// The return type, if the function may be locked at all; whether it is a `Result` with
/// the right error is left to the trait bound of `run`, which also sees through aliases.
fn return_type(sig: &Signature) -> syn::Result<&Type> {
    if let Some(constness) = &sig.constness {
        return Err(syn::Error::new(
            constness.span(),
            "`#[redlease::locked]` cannot lock a `const fn`",
        ));
    }
    let ReturnType::Type(_, ret) = &sig.output else {
        return Err(syn::Error::new(
            sig.ident.span(),
            format!("{SHAPE}; `{}` returns `()`", sig.ident),
        ));
    };
    if mentions_impl_trait(ret) {
        return Err(syn::Error::new(
            ret.span(),
            format!("{SHAPE} with nameable `T` and `E`, not `impl Trait`"),
        ));
    }
    Ok(ret)
}

/// `let lock: Result<Lock> = ...;` (or a semaphore, or a side of a read-write lock) from
/// `client = ...` or the default client.
fn lock_code(args: &Args, blocking: bool, names: &Names) -> TokenStream {
    let Names {
        key, lock, client, ..
    } = names;
    let builder = args.builder(client, key);
    let calls = args.builder_calls();
    if let Some(expr) = &args.client {
        // Spanned at the expression, so that a wrong type is reported there.
        let span = expr.span();
        let client_type = if blocking {
            quote_spanned!(span=> ::redlease::blocking::Client)
        } else {
            quote_spanned!(span=> ::redlease::Client)
        };
        let annotated = quote_spanned!(span=> let #client: &#client_type = &(#expr););
        quote! {
            #annotated
            let #lock = ::redlease::Result::Ok(#builder #calls);
        }
    } else {
        let default_client = if blocking {
            quote!(::redlease::blocking::default_client)
        } else {
            quote!(::redlease::default_client)
        };
        quote! {
            let #lock = #default_client().map(|#client| #builder #calls);
        }
    }
}

/// Every name the parameters bind, `self` included.
fn parameters(inputs: &syn::punctuated::Punctuated<FnArg, syn::Token![,]>) -> Vec<String> {
    let mut names = Vec::new();
    for input in inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => bound_names(&typed.pat, &mut names),
        }
    }
    names
}

fn bound_names(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                bound_names(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| bound_names(&f.pat, names)),
        Pat::Reference(r) => bound_names(&r.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Paren(paren) => bound_names(&paren.pat, names),
        Pat::Type(typed) => bound_names(&typed.pat, names),
        _ => {}
    }
}

/// The parameters, passed on to the `on_busy` fallback as they are.
fn call_arguments(
    inputs: &syn::punctuated::Punctuated<FnArg, syn::Token![,]>,
) -> syn::Result<Vec<TokenStream>> {
    inputs
        .iter()
        .map(|input| match input {
            FnArg::Receiver(receiver) => Ok(receiver.self_token.to_token_stream()),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(ident) if ident.subpat.is_none() && ident.by_ref.is_none() => {
                    Ok(ident.ident.to_token_stream())
                }
                other => Err(syn::Error::new(
                    other.span(),
                    "`on_busy` passes the parameters on to the fallback, so each must be a plain name",
                )),
            },
        })
        .collect()
}

fn mentions_impl_trait(ty: &Type) -> bool {
    fn walk(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => ident == "impl",
            proc_macro2::TokenTree::Group(group) => walk(group.stream()),
            _ => false,
        })
    }
    walk(ty.to_token_stream())
}
