//! Key templates: `"coupon:{user.id}:{order.sku()}"`.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::{Expr, LitStr};

/// One piece of a template.
enum Part {
    Text(String),
    /// A parameter, its fields and zero-argument method calls, spanned at the literal.
    Value(Expr),
}

/// The code that builds the key, a `String`, from `template`.
///
/// `params` are the names the function binds (`self` included for methods); a `{...}` must
/// start with one of them.
pub(crate) fn key_code(
    template: &LitStr,
    params: &[String],
    function: &str,
    key: &syn::Ident,
) -> syn::Result<TokenStream> {
    let parts = parse(template, params, function)?;
    if parts.is_empty() {
        return Err(syn::Error::new(
            template.span(),
            "the key template is empty; leave `key` out for the module path and function name",
        ));
    }
    let span = template.span();
    let mut statements = TokenStream::new();
    for part in &parts {
        statements.extend(match part {
            Part::Text(text) => quote!(#key.push_str(#text);),
            // Spanned at the template, so that a value without `Display` is reported there.
            Part::Value(value) => quote_spanned! {span=>
                ::redlease::__private::push_display(&mut #key, &(#value));
            },
        });
    }
    Ok(quote!({
        let mut #key = ::std::string::String::new();
        #statements
        #key
    }))
}

fn parse(template: &LitStr, params: &[String], function: &str) -> syn::Result<Vec<Part>> {
    let span = template.span();
    let error = |message: String| syn::Error::new(span, message);
    let source = template.value();
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '}' => {
                return Err(error(
                    "unmatched `}` in the key template; write `}}` for a literal brace".into(),
                ));
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => {
                            return Err(error(
                                "unclosed `{` in the key template; write `{{` for a literal brace"
                                    .into(),
                            ));
                        }
                    }
                }
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                parts.push(Part::Value(value(&inner, span, params, function)?));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

/// Parses and checks one `{...}`.
fn value(inner: &str, span: Span, params: &[String], function: &str) -> syn::Result<Expr> {
    let shape = || {
        syn::Error::new(
            span,
            format!(
                "`{{{inner}}}` in the key template: use a parameter, its fields and method calls without arguments, like `{{user.id}}` or `{{order.sku()}}`"
            ),
        )
    };
    if inner.trim().is_empty() {
        return Err(syn::Error::new(
            span,
            "empty `{}` in the key template: name a parameter, like `{user.id}`",
        ));
    }
    let tokens: TokenStream = inner.parse().map_err(|_| shape())?;
    let expr: Expr = syn::parse2(respan(tokens, span)).map_err(|_| shape())?;
    let root = root(&expr).ok_or_else(shape)?;
    if !params.contains(&root) {
        let message = if params.is_empty() {
            format!("`{root}` in the key template is not a parameter: `{function}` has none")
        } else {
            let known = params
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "`{root}` in the key template is not a parameter of `{function}`; it has {known}"
            )
        };
        return Err(syn::Error::new(span, message));
    }
    Ok(expr)
}

/// The parameter a template value starts from, if it has the accepted shape.
fn root(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            path.path.get_ident().map(ToString::to_string)
        }
        Expr::Field(field) => root(&field.base),
        Expr::MethodCall(call) if call.args.is_empty() && call.turbofish.is_none() => {
            root(&call.receiver)
        }
        _ => None,
    }
}

/// Gives every token the literal's span, so that errors (a missing field, a value without
/// `Display`) point at the template and names resolve where the function is.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}
