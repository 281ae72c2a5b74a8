//! CEL building blocks of the Lease policy ([`super`]): reading annotations and labels,
//! comparing maps and spec fields, and checking numbers as ranges without converting them.

/// Annotations of `side` (`object` or `oldObject`; null on create or delete), as a map.
pub(super) fn annotations_of(side: &str) -> String {
    format!("{side} == null ? {{}} : {side}.metadata.?annotations.orValue({{}})")
}

pub(super) fn labels_of(side: &str) -> String {
    format!("{side} == null ? {{}} : {side}.metadata.?labels.orValue({{}})")
}

/// CEL: every key of map `m` other than `except` is unchanged (added, removed or
/// changed keys all count).
pub(super) fn same_except(m: &str, except: &[&str]) -> String {
    let list = except
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "variables.new{m}.all(k, k in [{list}] || variables.old{m}[?k] == optional.of(variables.new{m}[k])) \
         && variables.old{m}.all(k, k in [{list}] || k in variables.new{m})"
    )
}

/// CEL: spec field `f` is unchanged.
pub(super) fn same_spec(f: &str) -> String {
    format!("object.spec.?{f} == oldObject.spec.?{f}")
}

/// CEL: annotation `a` holds a whole number (at most 19 digits, so `uint()` cannot fail).
fn numeric(side: &str, a: &str) -> String {
    format!(
        "'{a}' in variables.{side}Annotations && variables.{side}Annotations['{a}'].matches('^[0-9]{{1,19}}$')"
    )
}

/// CEL: annotation `a` did not go down. An old value that is missing or not a number
/// (a counter being repaired) may be replaced by any number.
pub(super) fn not_lowered(a: &str) -> String {
    format!(
        "!({old}) || (({new}) && uint(variables.newAnnotations['{a}']) >= uint(variables.oldAnnotations['{a}']))",
        old = numeric("old", a),
        new = numeric("new", a),
    )
}

/// CEL: the string `value` is a whole number from 0 to `bound`, decided without
/// converting it (`uint()` fails from 2^64, `int()` from 2^63): at most as many digits as
/// `bound`, and, with as many, not after it in text order, which for digit strings of one
/// length is numeric order.
pub(super) fn in_range(value: &str, bound: u64) -> String {
    let digits = bound.to_string().len();
    format!(
        "({value}.matches('^[0-9]{{1,{digits}}}$') && (size({value}) < {digits} || {value} <= '{bound}'))"
    )
}

/// CEL: a write leaves annotation `a` absent, as it was, or a whole number from 0 to
/// `bound`: nobody writes a value the parsers refuse (docs/safety.md rules 14 and 16).
pub(super) fn written_in_range(a: &str, bound: u64) -> String {
    format!(
        "(!('{a}' in variables.newAnnotations) \
         || variables.newAnnotations[?'{a}'] == variables.oldAnnotations[?'{a}'] || {})",
        in_range(&format!("variables.newAnnotations['{a}']"), bound)
    )
}
