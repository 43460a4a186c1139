//! The lists `run` hands its command in the environment, `REDLEASE_KEYS` and
//! `REDLEASE_FENCING_TOKENS`: items separated by spaces, `NAME=TOKEN` pairs, so that a
//! shell splits them with `for` and `${pair%=*}`. A name may hold a space, `=`, a tab or a
//! newline itself, so in these lists each of those (and `%`, and every other control
//! character) is percent-encoded as in a URL (`x y` -> `x%20y`, `p=q` -> `p%3Dq`); other
//! names, the usual ones, stand as they are. `REDLEASE_KEY` holds one name and stays raw.

use std::fmt::Write as _;

/// `name` as an item of the lists: space, `=`, `%` and control characters as `%XX`.
pub(crate) fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == ' ' || c == '=' || c == '%' || c.is_ascii_control() {
            // An ASCII character: one byte, two hex digits.
            let _ = write!(out, "%{:02X}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// `REDLEASE_KEYS`: every name, encoded, separated by spaces.
pub(crate) fn keys<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names.into_iter().map(encode).collect::<Vec<_>>().join(" ")
}

/// `REDLEASE_FENCING_TOKENS`: `NAME=TOKEN` for every name (encoded), separated by spaces;
/// `?` for a name whose token is unknown.
pub(crate) fn fencing_tokens<'a>(
    pairs: impl IntoIterator<Item = (&'a str, Option<u64>)>,
) -> String {
    pairs
        .into_iter()
        .map(|(name, token)| {
            let token = token.map_or_else(|| "?".to_owned(), |t| t.to_string());
            format!("{}={token}", encode(name))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stand_as_they_are_and_the_others_are_percent_encoded() {
        assert_eq!(
            keys(["from", "to", "account:7", "é{t}"]),
            "from to account:7 é{t}"
        );
        assert_eq!(
            fencing_tokens([("from", Some(12)), ("to", None)]),
            "from=12 to=?"
        );
        assert_eq!(
            keys([
                "x y",
                "p=q",
                "50%",
                "tab\there",
                "line\nbreak",
                "%20",
                "\u{7f}"
            ]),
            "x%20y p%3Dq 50%25 tab%09here line%0Abreak %2520 %7F"
        );
        assert_eq!(
            fencing_tokens([("x y", Some(3)), ("p=q", Some(4))]),
            "x%20y=3 p%3Dq=4"
        );
    }
}
