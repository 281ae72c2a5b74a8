//! Text forms of an ID: decimal (the default everywhere), and two compact forms for keys,
//! URLs and logs, base32 (Crockford's alphabet) and base62.
//!
//! The compact forms are written at a fixed width, zero-padded (13 base32 characters, 11
//! base62 characters), and their alphabets are in ASCII order, so comparing two texts byte
//! by byte (`ORDER BY` on a binary or `C`-collated column, `sort` with `LC_ALL=C`) orders
//! them exactly as the IDs are ordered. Decimal texts have no fixed width and sort as
//! numbers only when compared as numbers.
//!
//! | form    | width | alphabet                           | 2^63-1          |
//! |---------|-------|------------------------------------|-----------------|
//! | decimal | 1-19  | `0-9`                              | `9223372036854775807` |
//! | base32  | 13    | `0123456789ABCDEFGHJKMNPQRSTVWXYZ` | `7ZZZZZZZZZZZZ` |
//! | base62  | 11    | `0-9A-Za-z`                        | `AzL8n0Y58m7`   |
//!
//! Reading is a little more forgiving than writing: leading zeros may be left out, base32
//! may be in any case and reads Crockford's look-alikes `I` and `L` as 1 and `O` as 0.
//! Base62 is case-sensitive (`a` and `A` are different digits). Every text must stand for a
//! value below 2^63: no kubeflake ID sets bit 63.

use std::fmt;
use std::str::FromStr;

/// Crockford's base32 digits, in ASCII order: no I, L, O (look like 1, 1, 0) and no U.
const BASE32: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Base62 digits, in ASCII order: digits, upper case, lower case.
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Every ID is below this.
const ID_LIMIT: u128 = 1 << 63;
/// The longest text any form writes (a `u64` in decimal).
const MAX_DIGITS: usize = 20;

/// How an ID is written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TextForm {
    /// Decimal digits, as the ID's number: `250096622069874688`.
    #[default]
    Decimal,
    /// 13 characters of Crockford's base32: `06Y45HNZ00000`.
    Base32,
    /// 11 characters of base62: `0ITRbHQvEoq`.
    Base62,
}

impl TextForm {
    /// Every form, in the order their names are listed.
    pub const ALL: [TextForm; 3] = [TextForm::Decimal, TextForm::Base32, TextForm::Base62];

    /// The form's name, as `format=` and `--format` spell it.
    pub fn name(self) -> &'static str {
        match self {
            TextForm::Decimal => "decimal",
            TextForm::Base32 => "base32",
            TextForm::Base62 => "base62",
        }
    }

    /// Every name, in [`TextForm::ALL`] order.
    pub fn names() -> [&'static str; 3] {
        TextForm::ALL.map(TextForm::name)
    }

    /// How many characters the form always writes; `None` for decimal, which writes as many
    /// as the number has.
    pub fn width(self) -> Option<usize> {
        match self {
            TextForm::Decimal => None,
            TextForm::Base32 => Some(13),
            TextForm::Base62 => Some(11),
        }
    }

    fn radix_and_alphabet(self) -> (u64, &'static [u8]) {
        match self {
            TextForm::Decimal => (10, b"0123456789"),
            TextForm::Base32 => (32, BASE32),
            TextForm::Base62 => (62, BASE62),
        }
    }

    /// The digits of `id`, right-aligned in a buffer: `(buffer, index of the first digit)`.
    /// The fixed-width forms are zero-padded to their width, which holds every `u64`.
    fn digits(self, id: u64) -> ([u8; MAX_DIGITS], usize) {
        let (radix, alphabet) = self.radix_and_alphabet();
        let mut buf = [b'0'; MAX_DIGITS];
        let mut start = MAX_DIGITS;
        let mut rest = id;
        loop {
            start -= 1;
            buf[start] = alphabet[(rest % radix) as usize];
            rest /= radix;
            if rest == 0 {
                break;
            }
        }
        if let Some(width) = self.width() {
            // Zero-padding: the buffer is already '0' there.
            start = start.min(MAX_DIGITS - width);
        }
        (buf, start)
    }

    /// `id` in this form. Values at or above 2^63 are written too (the fixed widths hold
    /// every `u64`), but [`TextForm::parse`] refuses them: no ID is that large.
    pub fn encode(self, id: u64) -> String {
        let (buf, start) = self.digits(id);
        buf[start..].iter().copied().map(char::from).collect()
    }

    /// Appends `id` in this form to `out` (ASCII), without allocating a `String`.
    pub fn encode_to(self, id: u64, out: &mut Vec<u8>) {
        let (buf, start) = self.digits(id);
        out.extend_from_slice(&buf[start..]);
    }

    /// The value of one character, if it is a digit of this form.
    fn digit_value(self, c: char) -> Option<u64> {
        let byte = u8::try_from(c).ok().filter(u8::is_ascii_alphanumeric)?;
        match self {
            TextForm::Decimal => byte.is_ascii_digit().then(|| u64::from(byte - b'0')),
            TextForm::Base32 => {
                let upper = match byte.to_ascii_uppercase() {
                    b'I' | b'L' => b'1',
                    b'O' => b'0',
                    other => other,
                };
                BASE32.iter().position(|&d| d == upper).map(|p| p as u64)
            }
            TextForm::Base62 => BASE62.iter().position(|&d| d == byte).map(|p| p as u64),
        }
    }

    /// Reads an ID written in this form (leading zeros optional; see the module docs for
    /// base32's case and look-alikes). The value must be below 2^63.
    pub fn parse(self, text: &str) -> Result<u64, TextFormError> {
        if text.is_empty() {
            return Err(TextFormError::Empty { form: self });
        }
        let (radix, _) = self.radix_and_alphabet();
        // u128 holds 13 base32 (65 bits) or 11 base62 digits (< 2^66); decimal is checked
        // against the limit at every digit, so leading zeros cost nothing.
        let mut value: u128 = 0;
        let mut too_large = false;
        for (index, c) in text.chars().enumerate() {
            let digit = self
                .digit_value(c)
                .ok_or_else(|| TextFormError::BadCharacter {
                    form: self,
                    text: text.to_string(),
                    character: c,
                    position: index + 1,
                })?;
            value = value * u128::from(radix) + u128::from(digit);
            if value >= ID_LIMIT {
                too_large = true;
                value = ID_LIMIT;
            }
        }
        let length = text.chars().count();
        if let Some(width) = self.width().filter(|w| length > *w) {
            return Err(TextFormError::TooLong {
                form: self,
                text: text.to_string(),
                length,
                width,
            });
        }
        if too_large {
            return Err(TextFormError::TooLarge {
                form: self,
                text: text.to_string(),
            });
        }
        u64::try_from(value).map_err(|_| TextFormError::TooLarge {
            form: self,
            text: text.to_string(),
        })
    }

    /// What the digits of this form are, for error messages.
    fn digits_help(self) -> &'static str {
        match self {
            TextForm::Decimal => "0-9",
            TextForm::Base32 => {
                "Crockford's 0-9 and A-Z without I, L, O and U, in any case (I and L are read \
                 as 1, O as 0)"
            }
            TextForm::Base62 => "0-9, A-Z and a-z (case matters)",
        }
    }
}

impl fmt::Display for TextForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`TextForm::names`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a text form of IDs: use decimal, base32 or base62")]
pub struct UnknownTextForm(pub String);

impl FromStr for TextForm {
    type Err = UnknownTextForm;

    /// Parses [`TextForm::name`] (lower case, exactly).
    fn from_str(text: &str) -> Result<TextForm, UnknownTextForm> {
        TextForm::ALL
            .into_iter()
            .find(|f| f.name() == text)
            .ok_or_else(|| UnknownTextForm(text.to_string()))
    }
}

/// Why a text is not an ID in the form it was read in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextFormError {
    #[error("an empty text is not a {form} ID")]
    Empty { form: TextForm },
    #[error(
        "{text:?} is not a {form} ID: {character:?} (character {position}) is not a {form} digit; \
         the digits are {digits}",
        digits = form.digits_help()
    )]
    BadCharacter {
        form: TextForm,
        text: String,
        character: char,
        /// 1 for the first character.
        position: usize,
    },
    #[error(
        "{text:?} is not a {form} ID: it has {length} characters, but {form} IDs have at most \
         {width}"
    )]
    TooLong {
        form: TextForm,
        text: String,
        length: usize,
        width: usize,
    },
    #[error(
        "{text:?} is not a {form} ID: its value is 2^63 or more, and the largest ID is {largest}",
        largest = form.encode(i64::MAX as u64)
    )]
    TooLarge { form: TextForm, text: String },
}

mod pattern;

#[cfg(test)]
mod tests;
