//! The regular expression of a compact form's texts up to a largest value: what the
//! sidecar's OpenAPI document gives `/decode/base32/{id}` and `/decode/base62/{id}`, so that
//! a text the document allows is one [`TextForm::parse`] reads as a value at most `max`,
//! and the other way round (no text the document allows is refused).
//!
//! The expression accepts what `parse` accepts: leading zeros optional (so texts of 1 to
//! `width` characters), base32 in any case with `I`, `L` read as 1 and `O` as 0. It is
//! written in the subset of regular expressions JSON Schema and every OpenAPI tool reads
//! (character classes, counted repetition, non-capturing groups).

use super::TextForm;

impl TextForm {
    /// The texts of this compact form whose value is at most `max` (`^...$`); `None` for
    /// decimal, which has no width (its leading zeros are unbounded): describe it as an
    /// integer with a maximum instead.
    pub fn pattern_up_to(self, max: u64) -> Option<String> {
        let width = self.width()?;
        let any = self.class_where(|_| true);
        let zero = self.class_where(|v| v == 0);
        let digits = self.encode(max);
        let significant = digits.trim_start_matches('0');
        let significant = if significant.is_empty() {
            "0"
        } else {
            significant
        };
        let values: Vec<u64> = significant
            .chars()
            .filter_map(|c| self.digit_value(c))
            .collect();
        let k = values.len();
        // Texts shorter than the largest's significant digits are all smaller than it; the
        // others are zeros, then k digits at most the significant ones.
        let mut alternatives = Vec::new();
        if k > 1 {
            alternatives.push(format!("{any}{}", repeat(1, k - 1)));
        }
        let padding = width - k;
        let zeros = if padding > 0 {
            format!("{zero}{}", repeat(0, padding))
        } else {
            String::new()
        };
        alternatives.push(format!("{zeros}{}", self.at_most(&values, &any)));
        Some(format!("^(?:{})$", alternatives.join("|")))
    }

    /// Texts of exactly `values.len()` characters whose digits, read as a number, are at
    /// most `values` read as one.
    fn at_most(self, values: &[u64], any: &str) -> String {
        let Some((&first, rest)) = values.split_first() else {
            return String::new();
        };
        let top = self.radix_and_alphabet().0 - 1;
        if rest.iter().all(|&v| v == top) {
            return format!(
                "{}{}",
                self.class_where(|v| v <= first),
                exactly(any, rest.len())
            );
        }
        let mut options = Vec::new();
        if first > 0 {
            options.push(format!(
                "{}{}",
                self.class_where(|v| v < first),
                exactly(any, rest.len())
            ));
        }
        options.push(format!(
            "{}{}",
            self.class_where(|v| v == first),
            self.at_most(rest, any)
        ));
        if options.len() == 1 {
            options.remove(0)
        } else {
            format!("(?:{})", options.join("|"))
        }
    }

    /// A character class of the characters `parse` reads as a digit whose value passes
    /// `keep`, as ASCII ranges.
    fn class_where(self, keep: impl Fn(u64) -> bool) -> String {
        let chars: Vec<u8> = (b'0'..=b'z')
            .filter(|&b| self.digit_value(char::from(b)).is_some_and(&keep))
            .collect();
        let mut class = String::from("[");
        let mut i = 0;
        while i < chars.len() {
            let start = chars[i];
            let mut end = start;
            while i + 1 < chars.len() && chars[i + 1] == end + 1 {
                i += 1;
                end = chars[i];
            }
            class.push(char::from(start));
            if end > start + 1 {
                class.push('-');
            }
            if end > start {
                class.push(char::from(end));
            }
            i += 1;
        }
        class.push(']');
        class
    }
}

/// `{n}` (nothing for 1, nothing at all for 0 is the caller's business).
fn exactly(class: &str, n: usize) -> String {
    match n {
        0 => String::new(),
        1 => class.to_string(),
        n => format!("{class}{{{n}}}"),
    }
}

/// `{min,max}` after a class, or `{n}` when they are equal.
fn repeat(min: usize, max: usize) -> String {
    if min == max {
        if max == 1 {
            String::new()
        } else {
            format!("{{{max}}}")
        }
    } else {
        format!("{{{min},{max}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::TextForm;

    /// A tiny matcher for the patterns made here (classes, `{m,n}`, `(?:a|b)`, `^...$`),
    /// enough to check them against `parse` without a regex crate.
    fn matches(pattern: &str, text: &str) -> bool {
        let body = pattern
            .strip_prefix('^')
            .and_then(|p| p.strip_suffix('$'))
            .expect("anchored");
        let ends = match_seq(body.as_bytes(), text.as_bytes(), 0);
        ends.contains(&text.len())
    }

    /// Every position in `text` where a match of `pattern` starting at `at` can end.
    fn match_seq(pattern: &[u8], text: &[u8], at: usize) -> Vec<usize> {
        let mut positions = vec![at];
        let mut p = 0;
        while p < pattern.len() {
            let (item_end, item): (usize, Box<dyn Fn(usize) -> Vec<usize> + '_>) = match pattern[p]
            {
                b'[' => {
                    let close = p + pattern[p..].iter().position(|&c| c == b']').expect("]");
                    let class = pattern[p + 1..close].to_vec();
                    (
                        close + 1,
                        Box::new(move |i| {
                            if i < text.len() && in_class(&class, text[i]) {
                                vec![i + 1]
                            } else {
                                vec![]
                            }
                        }),
                    )
                }
                b'(' => {
                    let close = p + group_end(&pattern[p..]);
                    let inner = pattern[p + 3..close].to_vec();
                    (
                        close + 1,
                        Box::new(move |i| {
                            split_top(&inner)
                                .into_iter()
                                .flat_map(|alt| match_seq(alt, text, i))
                                .collect()
                        }),
                    )
                }
                other => panic!("unexpected {:?}", char::from(other)),
            };
            let (next, min, max) = counted(pattern, item_end);
            let mut reached = Vec::new();
            let mut frontier = positions.clone();
            if min == 0 {
                reached.extend(frontier.iter().copied());
            }
            for n in 1..=max {
                frontier = frontier.iter().flat_map(|&i| item(i)).collect();
                frontier.sort_unstable();
                frontier.dedup();
                if n >= min {
                    reached.extend(frontier.iter().copied());
                }
            }
            reached.sort_unstable();
            reached.dedup();
            positions = reached;
            p = next;
        }
        positions
    }

    fn counted(pattern: &[u8], at: usize) -> (usize, usize, usize) {
        if pattern.get(at) != Some(&b'{') {
            return (at, 1, 1);
        }
        let close = at + pattern[at..].iter().position(|&c| c == b'}').expect("}");
        let inside = std::str::from_utf8(&pattern[at + 1..close]).expect("ascii");
        let (min, max) = match inside.split_once(',') {
            Some((a, b)) => (a.parse().expect("min"), b.parse().expect("max")),
            None => {
                let n = inside.parse().expect("n");
                (n, n)
            }
        };
        (close + 1, min, max)
    }

    fn group_end(pattern: &[u8]) -> usize {
        let mut depth = 0;
        for (i, &c) in pattern.iter().enumerate() {
            match c {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            }
        }
        panic!("unbalanced group")
    }

    fn split_top(inner: &[u8]) -> Vec<&[u8]> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, &c) in inner.iter().enumerate() {
            match c {
                b'(' => depth += 1,
                b')' => depth -= 1,
                b'|' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        parts
    }

    fn in_class(class: &[u8], c: u8) -> bool {
        let mut i = 0;
        while i < class.len() {
            if i + 2 < class.len() && class[i + 1] == b'-' {
                if (class[i]..=class[i + 2]).contains(&c) {
                    return true;
                }
                i += 3;
            } else {
                if class[i] == c {
                    return true;
                }
                i += 1;
            }
        }
        false
    }

    /// Texts around the edges: every length, the largest, one above, look-alikes, case.
    fn samples(form: TextForm, max: u64) -> Vec<String> {
        let width = form.width().expect("compact");
        let mut texts = Vec::new();
        for value in [
            0,
            1,
            31,
            32,
            61,
            62,
            max / 2,
            max.saturating_sub(1),
            max,
            max + 1,
            u64::MAX >> 1,
        ] {
            let full = form.encode(value);
            texts.push(full.trim_start_matches('0').to_string());
            texts.push(full.clone());
            texts.push(full.to_lowercase());
            texts.push(format!("0{full}"));
        }
        for c in [
            'I', 'L', 'O', 'U', 'i', 'l', 'o', 'u', 'z', 'Z', '7', '8', '-', '_',
        ] {
            for len in [1, width - 1, width] {
                texts.push(std::iter::repeat_n(c, len).collect());
                let mut near = form.encode(max);
                near.replace_range(0..1, &c.to_string());
                texts.push(near);
            }
        }
        texts.push(String::new());
        texts
    }

    /// The sidecar's OpenAPI document promises exactly what `/decode` accepts: for every
    /// sample text, the pattern allows it if and only if `parse` reads it as at most `max`.
    #[test]
    fn the_pattern_allows_exactly_the_texts_parse_reads_up_to_the_largest_value() {
        for form in [TextForm::Base32, TextForm::Base62] {
            for max in [(1u64 << 63) - 1, (1 << 53) - 1, 1000, 61, 31, 1, 0] {
                let pattern = form.pattern_up_to(max).expect("compact form");
                for text in samples(form, max) {
                    let accepted = form.parse(&text).is_ok_and(|v| v <= max);
                    assert_eq!(
                        matches(&pattern, &text),
                        accepted,
                        "{form} up to {max}: {text:?} against {pattern}"
                    );
                }
            }
        }
    }

    /// What the OpenAPI document carries for the full 63-bit range (docs/openapi.yaml;
    /// the sidecar's test checks the document against this function).
    #[test]
    fn the_patterns_of_the_full_range_are_short_enough_to_read() {
        assert_eq!(
            TextForm::Base32.pattern_up_to((1 << 63) - 1).as_deref(),
            Some("^(?:[0-9A-TV-Za-tv-z]{1,12}|[0-7ILOilo][0-9A-TV-Za-tv-z]{12})$")
        );
        assert_eq!(TextForm::Decimal.pattern_up_to(5), None);
    }
}
