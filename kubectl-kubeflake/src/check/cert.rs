//! The validity of the certificates in a PEM bundle (a webhook's `caBundle`), read with a
//! small DER reader of its own: only the path to `tbsCertificate.validity` is walked
//! (RFC 5280 section 4.1), nothing is verified. The plugin needs the dates, not trust.

use chrono::{DateTime, NaiveDate, Utc};

/// Why a bundle's certificates cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("it holds no PEM certificate (no -----BEGIN CERTIFICATE----- block)")]
    NoCertificate,
    #[error("certificate {index}: its PEM block is not valid base64")]
    Base64 { index: usize },
    #[error("certificate {index}: not a DER X.509 certificate ({why})")]
    Der { index: usize, why: &'static str },
}

/// One certificate's validity period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
}

/// The validity of every `CERTIFICATE` block in `pem`, in order.
pub fn bundle_validity(pem: &[u8]) -> Result<Vec<Validity>, CertError> {
    let text = String::from_utf8_lossy(pem);
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let index = out.len();
        let end = body.find(END).ok_or(CertError::Der {
            index,
            why: "the PEM block has no END line",
        })?;
        let der = base64_decode(&body[..end]).ok_or(CertError::Base64 { index })?;
        out.push(validity(&der).map_err(|why| CertError::Der { index, why })?);
        rest = &body[end + END.len()..];
    }
    if out.is_empty() {
        return Err(CertError::NoCertificate);
    }
    Ok(out)
}

/// Standard base64 (RFC 4648, with padding), whitespace ignored.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut padding = 0;
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            _ => return None,
        };
        if padding > 0 {
            return None;
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (padding <= 2).then_some(out)
}

/// One DER element: its tag and contents, and what follows it.
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), &'static str> {
    let (&tag, rest) = input.split_first().ok_or("it ends early")?;
    let (&first, mut rest) = rest.split_first().ok_or("it ends early")?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err("a length is malformed");
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return Err("an element is longer than the data");
    }
    let (contents, after) = rest.split_at(len);
    Ok((tag, contents, after))
}

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION_TAG: u8 = 0xa0;

fn validity(der: &[u8]) -> Result<Validity, &'static str> {
    let (tag, cert, _) = element(der)?;
    if tag != SEQUENCE {
        return Err("it is not a SEQUENCE");
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return Err("tbsCertificate is not a SEQUENCE");
    }
    let (tag, _, mut rest) = element(tbs)?;
    if tag == VERSION_TAG {
        rest = element(rest)?.2; // serialNumber
    }
    rest = element(rest)?.2; // signature
    rest = element(rest)?.2; // issuer
    let (tag, validity, _) = element(rest)?;
    if tag != SEQUENCE {
        return Err("validity is not a SEQUENCE");
    }
    let (tag, before, rest) = element(validity)?;
    let not_before = time(tag, before)?;
    let (tag, after, _) = element(rest)?;
    let not_after = time(tag, after)?;
    Ok(Validity {
        not_before,
        not_after,
    })
}

/// UTCTime (YYMMDDHHMMSSZ, years 1950-2049) or GeneralizedTime (YYYYMMDDHHMMSSZ).
fn time(tag: u8, text: &[u8]) -> Result<DateTime<Utc>, &'static str> {
    let text = std::str::from_utf8(text).map_err(|_| "a time is not text")?;
    let digits = text.strip_suffix('Z').ok_or("a time is not in UTC")?;
    let num = |s: &str| s.parse::<u32>().map_err(|_| "a time has a non-digit");
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = num(&digits[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (num(&digits[..4])?, &digits[4..]),
        _ => return Err("a time is neither UTCTime nor GeneralizedTime"),
    };
    let year = i32::try_from(year).map_err(|_| "a year is out of range")?;
    let (month, day) = (num(&rest[..2])?, num(&rest[2..4])?);
    let (hour, minute, second) = (num(&rest[4..6])?, num(&rest[6..8])?, num(&rest[8..10])?);
    NaiveDate::from_ymd_opt(year, month, day)
        .and_then(|d| d.and_hms_opt(hour, minute, second))
        .map(|t| t.and_utc())
        .ok_or("a time is not a valid date")
}

#[cfg(test)]
pub(super) mod tests;
