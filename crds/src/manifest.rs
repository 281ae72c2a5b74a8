//! Reading an `IdSequence` manifest, the YAML a user would `kubectl apply`: the standalone
//! sidecar's `--sequence-file` and the plugin's `-f` read files the same way.

use crate::IdSequence;

/// Why a text is not an `IdSequence` manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("not an IdSequence manifest: {0}")]
    Unreadable(String),
    #[error("not an IdSequence manifest: its kind is {found:?}; expected kind: IdSequence")]
    WrongKind { found: String },
}

/// Parses one `IdSequence` manifest. A `kind` other than `IdSequence` is refused (a
/// missing one is accepted, as the sidecar always did); the spec is not validated here.
pub fn parse(text: &str) -> Result<IdSequence, ManifestError> {
    let value: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| ManifestError::Unreadable(e.to_string()))?;
    if let Some(kind) = value.get("kind").and_then(|k| k.as_str())
        && kind != "IdSequence"
    {
        return Err(ManifestError::WrongKind {
            found: kind.to_string(),
        });
    }
    serde_json::from_value(value).map_err(|e| ManifestError::Unreadable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_read_with_its_name_and_spec() {
        let seq = parse(
            "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec:\n  datacenterId: 0\n",
        )
        .unwrap();
        assert_eq!(seq.metadata.name.as_deref(), Some("orders"));
    }

    #[test]
    fn another_kind_or_no_yaml_is_refused_naming_what_was_expected() {
        let err = parse("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "not an IdSequence manifest: its kind is \"Deployment\"; expected kind: IdSequence"
        );
        assert!(matches!(
            parse("{{{ nope"),
            Err(ManifestError::Unreadable(_))
        ));
    }
}
