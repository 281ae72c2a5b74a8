//! The API's description (OpenAPI 3), served at `/openapi.yaml` so a client team can fetch
//! it from a running pod, and fuzzed by `scripts/check-openapi.sh` (Schemathesis, with no
//! allowance: every text the document allows, the sidecar accepts).
//!
//! `sidecar/openapi.yaml` (`docs/openapi.yaml` links to it) describes a sidecar whose IDs
//! go up to 2^63-1: segment mode, and Snowflake layouts of 63 bits. A sidecar of a 53-bit
//! layout serves the same document with the largest ID of its `/decode` paths lowered to
//! 2^53-1 ([`document_for`]), so that what it serves is exactly what it accepts.

use std::borrow::Cow;

use kubeflake_crds::TextForm;

/// The document as written, for IDs up to 2^63-1.
pub(crate) const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

/// The largest ID [`OPENAPI_YAML`] allows.
const FULL_RANGE: u64 = (1 << 63) - 1;

/// The document a sidecar whose IDs go up to `largest` serves.
pub(crate) fn document_for(largest: u64) -> Cow<'static, str> {
    if largest == FULL_RANGE {
        return Cow::Borrowed(OPENAPI_YAML);
    }
    let mut text = OPENAPI_YAML.to_string();
    for (full, narrowed) in bounds(FULL_RANGE).into_iter().zip(bounds(largest)) {
        text = text.replacen(&full, &narrowed, 1);
    }
    Cow::Owned(text)
}

/// The lines of the document that name the largest ID: the decimal path's maximum and the
/// compact paths' patterns ([`TextForm::pattern_up_to`]).
fn bounds(largest: u64) -> Vec<String> {
    let mut lines = vec![format!("maximum: {largest}\n")];
    for form in [TextForm::Base32, TextForm::Base62] {
        if let Some(pattern) = form.pattern_up_to(largest) {
            lines.push(format!("pattern: '{pattern}'\n"));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::route::Route;

    fn parse(text: &str) -> serde_json::Value {
        serde_saphyr::from_str(text).expect("openapi.yaml")
    }

    fn id_schema(doc: &serde_json::Value, path: &str) -> serde_json::Value {
        doc["paths"][path]["get"]["parameters"][0]["schema"].clone()
    }

    /// The document describes exactly the routes served, no more, no fewer.
    #[test]
    fn the_openapi_paths_are_the_routes_served() {
        let doc = parse(OPENAPI_YAML);
        let mut documented: Vec<&str> = doc["paths"]
            .as_object()
            .expect("paths")
            .keys()
            .map(String::as_str)
            .collect();
        let mut served: Vec<&str> = Route::ALL.iter().map(Route::openapi_path).collect();
        documented.sort_unstable();
        served.sort_unstable();
        assert_eq!(documented, served);
        // Every route answers GET only (anything else is a 405).
        let methods = ["put", "post", "delete", "options", "head", "patch", "trace"];
        for (path, item) in doc["paths"].as_object().expect("paths") {
            assert!(item.get("get").is_some(), "{path} has no get");
            for method in methods {
                assert!(item.get(method).is_none(), "{path} documents {method}");
            }
        }
    }

    /// The `/decode` paths allow exactly the texts the sidecar reads as IDs up to 2^63-1
    /// (the patterns are made, and checked against the parser, by
    /// `TextForm::pattern_up_to`; the document carries them, not copies that could drift).
    #[test]
    fn the_decode_paths_allow_exactly_the_ids_up_to_the_largest() {
        let doc = parse(OPENAPI_YAML);
        assert_eq!(
            id_schema(&doc, "/decode/{id}")["maximum"],
            serde_json::json!(FULL_RANGE)
        );
        for (path, form) in [
            ("/decode/base32/{id}", TextForm::Base32),
            ("/decode/base62/{id}", TextForm::Base62),
        ] {
            assert_eq!(
                id_schema(&doc, path)["pattern"].as_str(),
                form.pattern_up_to(FULL_RANGE).as_deref(),
                "{path}"
            );
        }
        for line in bounds(FULL_RANGE) {
            assert_eq!(OPENAPI_YAML.matches(&line).count(), 1, "{line}");
        }
    }

    /// A 53-bit layout's sidecar serves the document of its own range, changed only there.
    #[test]
    fn a_53_bit_sidecar_serves_the_document_of_its_range() {
        let largest = (1u64 << 53) - 1;
        let served = document_for(largest);
        let doc = parse(&served);
        assert_eq!(
            id_schema(&doc, "/decode/{id}")["maximum"],
            serde_json::json!(largest)
        );
        assert_eq!(
            id_schema(&doc, "/decode/base62/{id}")["pattern"].as_str(),
            TextForm::Base62.pattern_up_to(largest).as_deref()
        );
        let changed = OPENAPI_YAML
            .lines()
            .zip(served.lines())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(changed, 3);
        assert!(matches!(document_for(FULL_RANGE), Cow::Borrowed(_)));
    }
}
