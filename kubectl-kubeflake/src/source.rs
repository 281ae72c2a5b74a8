//! Where a command's layout comes from: flags, an IdSequence manifest, or the cluster.
//!
//! All three end in `IdSequenceSpec::params()`, the same validation the sidecar applies to
//! its `--sequence-file`, so a layout the plugin accepts is one a sequence can have.

use std::io::Read;
use std::path::Path;

use kubeflake_crds::IdSequence;
use kubeflake_crds::sequence::{IdSequenceSpec, SequenceParams};
use kubeflake_crds::timebase::rfc3339;
use serde::Serialize;

use crate::cli::{LayoutArgs, time_unit_name};
use crate::cluster;
use crate::error::CliError;

/// A validated layout and a name for it in messages ("flags", "-f x.yaml", "idsequence
/// shop/orders").
#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub params: SequenceParams,
}

/// The layout as the json/yaml output shows it (field names as in an IdSequence spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LayoutView {
    pub source: String,
    pub timestamp_bits: u8,
    pub datacenter_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub total_bits: u32,
    pub time_unit: &'static str,
    pub epoch: String,
    pub datacenter_id: u32,
}

impl Resolved {
    pub fn view(&self) -> LayoutView {
        let p = &self.params;
        LayoutView {
            source: self.name.clone(),
            timestamp_bits: p.layout.timestamp_bits(),
            datacenter_bits: p.layout.datacenter_bits(),
            worker_bits: p.layout.worker_bits(),
            sequence_bits: p.layout.sequence_bits(),
            total_bits: p.layout.total_bits(),
            time_unit: time_unit_name(p.timebase.unit()),
            epoch: rfc3339(p.timebase.epoch_unix_ms()),
            datacenter_id: p.datacenter.0,
        }
    }
}

/// Resolves the layout: `--sequence` reads the cluster, `-f` a file, otherwise the flags.
pub async fn resolve(
    args: &LayoutArgs,
    cluster_args: &crate::cli::ClusterArgs,
) -> Result<Resolved, CliError> {
    if let Some(name) = &args.sequence {
        let (client, namespace) = cluster::connect(cluster_args).await?;
        let params = cluster::get_params(&client, &namespace, name).await?;
        return Ok(Resolved {
            name: format!("idsequence {namespace}/{name}"),
            params,
        });
    }
    if let Some(path) = &args.file {
        return from_file(path);
    }
    from_flags(args)
}

/// The layout given by flags; flags not given take the IdSequence defaults.
pub fn from_flags(args: &LayoutArgs) -> Result<Resolved, CliError> {
    let mut spec = IdSequenceSpec::default();
    let layout = &mut spec.layout;
    layout.timestamp_bits = args.timestamp_bits.unwrap_or(layout.timestamp_bits);
    layout.datacenter_bits = args.datacenter_bits.unwrap_or(layout.datacenter_bits);
    layout.worker_bits = args.worker_bits.unwrap_or(layout.worker_bits);
    layout.sequence_bits = args.sequence_bits.unwrap_or(layout.sequence_bits);
    layout.total_bits = args.total_bits.unwrap_or(layout.total_bits);
    spec.time_unit = args.time_unit.unwrap_or(spec.time_unit);
    if let Some(epoch) = &args.epoch {
        spec.epoch = epoch.clone();
    }
    spec.datacenter_id = args.datacenter_id.unwrap_or(spec.datacenter_id);
    let name = "flags".to_string();
    let params = spec.params().map_err(|reason| CliError::BadLayout {
        source_name: name.clone(),
        reason,
    })?;
    Ok(Resolved { name, params })
}

/// The layout of an IdSequence manifest ("-" reads standard input).
pub fn from_file(path: &Path) -> Result<Resolved, CliError> {
    let shown = path.display().to_string();
    let bad = |reason: String| CliError::BadFile {
        path: shown.clone(),
        reason,
    };
    let text = if shown == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| bad(format!("cannot read standard input: {e}")))?;
        text
    } else {
        std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?
    };
    let seq: IdSequence =
        serde_yaml::from_str(&text).map_err(|e| bad(format!("not an IdSequence manifest: {e}")))?;
    let name = match seq.metadata.name.as_deref() {
        Some(n) => format!("-f {shown} (idsequence {n})"),
        None => format!("-f {shown}"),
    };
    let params = seq.spec.params().map_err(|reason| CliError::BadLayout {
        source_name: name.clone(),
        reason,
    })?;
    Ok(Resolved { name, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::Layout;

    #[test]
    fn no_flags_means_the_idsequence_defaults() {
        let r = from_flags(&LayoutArgs::default()).unwrap();
        assert_eq!(r.params, IdSequenceSpec::default().params().unwrap());
        assert_eq!(r.params.layout, Layout::default());
    }

    #[test]
    fn flags_that_do_not_add_up_give_the_layout_validation_message() {
        let args = LayoutArgs {
            worker_bits: Some(8),
            ..Default::default()
        };
        let err = from_flags(&args).unwrap_err();
        let expected = Layout::new(41, 0, 8, 12, 63).unwrap_err().to_string();
        assert!(err.to_string().contains(&expected), "{err}");
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
    }

    #[test]
    fn a_datacenter_id_too_large_for_its_bits_is_refused() {
        let args = LayoutArgs {
            datacenter_bits: Some(2),
            worker_bits: Some(8),
            datacenter_id: Some(4),
            ..Default::default()
        };
        let err = from_flags(&args).unwrap_err().to_string();
        assert!(err.contains("datacenterId is 4"), "{err}");
    }

    #[test]
    fn a_manifest_gives_its_layout_and_a_broken_one_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("orders.yaml");
        std::fs::write(
            &good,
            "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\n\
             spec: {layout: {timestampBits: 36, workerBits: 7, sequenceBits: 10, totalBits: 53}, timeUnit: 10ms}\n",
        )
        .unwrap();
        let r = from_file(&good).unwrap();
        assert_eq!(r.params.layout, Layout::new(36, 0, 7, 10, 53).unwrap());
        assert!(r.name.contains("idsequence orders"), "{}", r.name);

        let broken = dir.path().join("broken.yaml");
        std::fs::write(&broken, "kind: [").unwrap();
        let err = from_file(&broken).unwrap_err().to_string();
        assert!(err.contains("not an IdSequence manifest"), "{err}");
        let missing = from_file(&dir.path().join("nope.yaml")).unwrap_err();
        assert!(missing.to_string().contains("cannot read it"), "{missing}");
    }
}
