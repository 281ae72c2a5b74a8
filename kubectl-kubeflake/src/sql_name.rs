//! Names `sql` writes into SQL from the command line (`--prefix`, `--table`, `--column`).
//!
//! They are checked rather than quoted away: a name that needs quoting in one dialect
//! (`Order`, `my-table`) would be spelled differently in each, and a prefix ends up in a
//! dozen function names. Clap calls these parsers, so a bad name is a usage error (exit 2)
//! that names the flag.

/// Longest prefix: PostgreSQL cuts names at 63 bytes, MySQL at 64, and the longest
/// function name adds `_min_key_ms` (11) to it.
pub const MAX_PREFIX: usize = 40;
/// Longest table or column name (PostgreSQL's limit; SQLite has none).
pub const MAX_NAME: usize = 63;

/// Why a name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("it is empty; give a name such as {example}")]
    Empty { example: &'static str },
    #[error("it is {len} characters long; use at most {max}")]
    TooLong { len: usize, max: usize },
    #[error("it must start with {1}, not {0:?}")]
    BadStart(char, &'static str),
    #[error(
        "{0:?} is not allowed: use {1} (no quoting, so the name reads the same in every dialect)"
    )]
    BadChar(char, &'static str),
}

/// What a name may consist of, for [`check`].
struct Rule {
    allowed: fn(char) -> bool,
    /// The allowed characters, for messages.
    what: &'static str,
    /// The allowed first characters, for messages.
    start: &'static str,
    example: &'static str,
}

fn check(text: &str, max: usize, rule: Rule) -> Result<String, BadName> {
    let Rule {
        allowed,
        what,
        start,
        example,
    } = rule;
    let Some(first) = text.chars().next() else {
        return Err(BadName::Empty { example });
    };
    let len = text.chars().count();
    if len > max {
        return Err(BadName::TooLong { len, max });
    }
    if !allowed(first) || first.is_ascii_digit() {
        return Err(BadName::BadStart(first, start));
    }
    match text.chars().find(|c| !allowed(*c)) {
        Some(c) => Err(BadName::BadChar(c, what)),
        None => Ok(text.to_string()),
    }
}

/// A function name prefix: lowercase ASCII letters, digits and `_` (PostgreSQL folds
/// unquoted names to lowercase, so mixed case would read differently there).
pub fn prefix(text: &str) -> Result<String, BadName> {
    let rule = Rule {
        allowed: |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_',
        what: "lowercase letters, digits and _",
        start: "a lowercase letter or _",
        example: "kf or orders",
    };
    check(text, MAX_PREFIX, rule)
}

/// A table or column name: ASCII letters, digits and `_`.
pub fn identifier(text: &str) -> Result<String, BadName> {
    let rule = Rule {
        allowed: |c| c.is_ascii_alphanumeric() || c == '_',
        what: "letters, digits and _",
        start: "a letter or _",
        example: "orders or id",
    };
    check(text, MAX_NAME, rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_lowercase_words_that_start_with_a_letter() {
        assert_eq!(prefix("kf").as_deref(), Ok("kf"));
        assert_eq!(prefix("_orders_2").as_deref(), Ok("_orders_2"));
        let err = prefix("Kf").unwrap_err().to_string();
        assert_eq!(err, "it must start with a lowercase letter or _, not 'K'");
        assert!(matches!(prefix("1kf"), Err(BadName::BadStart('1', _))));
        assert!(matches!(identifier("1t"), Err(BadName::BadStart('1', _))));
        assert!(matches!(prefix("k-f"), Err(BadName::BadChar('-', _))));
        assert!(matches!(prefix(""), Err(BadName::Empty { .. })));
        assert_eq!(
            prefix(&"a".repeat(41)),
            Err(BadName::TooLong { len: 41, max: 40 })
        );
    }

    #[test]
    fn table_and_column_names_may_have_capitals_but_nothing_to_quote() {
        assert_eq!(identifier("Orders_2025").as_deref(), Ok("Orders_2025"));
        let err = identifier("orders;drop").unwrap_err().to_string();
        assert!(err.contains("';' is not allowed"), "{err}");
        assert!(identifier("a.b").is_err());
    }
}
