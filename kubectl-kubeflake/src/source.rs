//! Where a command's layout comes from: flags, an IdSequence manifest, or the cluster.
//!
//! All three end in `IdSequenceSpec::params()`, the same validation the sidecar applies to
//! its `--sequence-file`, so a layout the plugin accepts is one a sequence can have. Its
//! errors are worded after what the user wrote: spec fields (`layout.workerBits`) for a
//! manifest or a sequence, flags (`--worker-bits`) for flags. A Segment sequence has no
//! layout to speak of (its values are plain counter values) and is refused.

use std::io::Read;
use std::path::Path;

use kubeflake_crds::LayoutError;
use kubeflake_crds::layout::{SequenceStart, Spread};
use kubeflake_crds::sequence::{
    IdSequenceSpec, Mode, SequenceParams, SequenceStartSpec, SpecError,
};
use kubeflake_crds::timebase::{EpochError, rfc3339};
use serde::Serialize;

use crate::cli::{LayoutArgs, SequenceStartArg};
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
    /// The key form (docs/layouts.md); absent for the default, time-ordered form.
    #[serde(skip_serializing_if = "is_zero")]
    pub shard_bits: u8,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bit_reversed: bool,
    #[serde(skip_serializing_if = "is_zero_start")]
    pub sequence_start: &'static str,
}

fn is_zero(v: &u8) -> bool {
    *v == 0
}

fn is_zero_start(v: &&'static str) -> bool {
    *v == SequenceStart::Zero.name()
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
            time_unit: p.timebase.unit().as_str(),
            epoch: rfc3339(p.timebase.epoch_unix_ms()),
            datacenter_id: p.datacenter.0,
            shard_bits: p.layout.spread().shard_bits(),
            bit_reversed: p.layout.spread() == Spread::BitReversed,
            sequence_start: p.layout.sequence_start().name(),
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
        let seq = cluster::get_sequence(&client, &namespace, name).await?;
        let params = cluster::snowflake_params(&seq, &namespace, name)?;
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
    key_form_from_flags(args, &mut spec);
    let params = spec
        .params()
        .map_err(|reason| CliError::BadLayoutFlags(in_flag_words(&spec, &reason)))?;
    Ok(Resolved {
        name: "flags".to_string(),
        params,
    })
}

/// The key-form flags (docs/layouts.md) in `spec`.
fn key_form_from_flags(args: &LayoutArgs, spec: &mut IdSequenceSpec) {
    let layout = &mut spec.layout;
    layout.shard_bits = args.shard_bits.unwrap_or(layout.shard_bits);
    layout.bit_reversed |= args.bit_reversed;
    if let Some(start) = args.sequence_start {
        layout.sequence_start = match start {
            SequenceStartArg::Zero => SequenceStartSpec::Zero,
            SequenceStartArg::Rotating => SequenceStartSpec::Rotating,
        };
    }
}

/// The command-line flag that sets a layout field of the spec.
fn flag_of(field: &str) -> &'static str {
    match field {
        "timestampBits" => "--timestamp-bits",
        "datacenterBits" => "--datacenter-bits",
        "workerBits" => "--worker-bits",
        "sequenceBits" => "--sequence-bits",
        "totalBits" => "--total-bits",
        "datacenterId" => "--datacenter-id",
        _ => "a layout flag",
    }
}

/// A spec validation error reworded for a layout given by flags (the spec built from them
/// is `spec`, defaults filled in), naming the flags rather than spec fields.
fn in_flag_words(spec: &IdSequenceSpec, reason: &SpecError) -> String {
    let l = &spec.layout;
    match reason {
        SpecError::Layout(LayoutError::BitsOutOfRange {
            field,
            value,
            min,
            max,
        }) => format!(
            "{} is {value}, but it must be between {min} and {max}",
            flag_of(field)
        ),
        SpecError::Layout(LayoutError::BadTotal(total)) => format!(
            "--total-bits is {total}, but it must be 63 (full 64-bit range) or 53 (JavaScript-safe IDs)"
        ),
        SpecError::Layout(LayoutError::BadSum { sum, total }) => format!(
            "--timestamp-bits {} + --datacenter-bits {} + --worker-bits {} + --sequence-bits {} \
             + --shard-bits {} add up to {sum}, but they must add up to --total-bits {total}; \
             change one of them (flags not given take the defaults 41, 0, 10, 12, 0 and 63)",
            l.timestamp_bits, l.datacenter_bits, l.worker_bits, l.sequence_bits, l.shard_bits
        ),
        SpecError::Layout(LayoutError::ShardBitsOutOfRange(bits)) => {
            format!("--shard-bits is {bits}, but it must be between 1 and 10 (or left out)")
        }
        SpecError::Layout(LayoutError::TwoSpreads) => {
            "--shard-bits and --bit-reversed are two ways to spread IDs: choose one".to_string()
        }
        SpecError::Layout(LayoutError::NothingToRotate) => {
            "--sequence-start rotating needs --sequence-bits above 0".to_string()
        }
        SpecError::Layout(LayoutError::FieldTooLarge { field, value, max }) => format!(
            "{} is {value}, but --datacenter-bits {} allows at most {max}; raise \
             --datacenter-bits or choose a smaller {}",
            flag_of(field),
            l.datacenter_bits,
            flag_of(field)
        ),
        SpecError::NegativeDatacenter(value) => {
            format!("--datacenter-id is {value}, but it must be 0 or more")
        }
        SpecError::Epoch(EpochError::NotRfc3339(text)) => {
            format!("--epoch {text:?} is not an RFC 3339 time such as 2025-01-01T00:00:00Z")
        }
        SpecError::Epoch(EpochError::BeforeUnixEpoch(text)) => {
            format!("--epoch {text} is before 1970-01-01T00:00:00Z")
        }
        // Not reachable from flags (no flag sets them); the spec's own words then.
        other => other.to_string(),
    }
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
    let seq = kubeflake_crds::manifest::parse(&text).map_err(|e| bad(e.to_string()))?;
    let name = match seq.metadata.name.as_deref() {
        Some(n) => format!("-f {shown} (idsequence {n})"),
        None => format!("-f {shown}"),
    };
    if seq.spec.mode == Mode::Segment {
        return Err(CliError::SegmentSequence {
            source_name: name,
            name: seq.metadata.name.unwrap_or_else(|| "NAME".to_string()),
        });
    }
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
    fn flags_that_do_not_add_up_are_refused_naming_the_flags_and_their_values() {
        let args = LayoutArgs {
            worker_bits: Some(8),
            ..Default::default()
        };
        let err = from_flags(&args).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
        let text = err.to_string();
        assert!(
            text.contains(
                "--timestamp-bits 41 + --datacenter-bits 0 + --worker-bits 8 + --sequence-bits 12 \
                 + --shard-bits 0 add up to 61, but they must add up to --total-bits 63"
            ),
            "{text}"
        );
        assert!(!text.contains("workerBits"), "no spec field names: {text}");
    }

    #[test]
    fn each_flag_error_names_the_flag_not_the_spec_field() {
        let cases = [
            (
                LayoutArgs {
                    timestamp_bits: Some(29),
                    ..Default::default()
                },
                "--timestamp-bits is 29, but it must be between 30 and 55",
            ),
            (
                LayoutArgs {
                    total_bits: Some(64),
                    ..Default::default()
                },
                "--total-bits is 64, but it must be 63",
            ),
            (
                LayoutArgs {
                    datacenter_bits: Some(2),
                    worker_bits: Some(8),
                    datacenter_id: Some(4),
                    ..Default::default()
                },
                "--datacenter-id is 4, but --datacenter-bits 2 allows at most 3",
            ),
            (
                LayoutArgs {
                    datacenter_id: Some(-1),
                    ..Default::default()
                },
                "--datacenter-id is -1, but it must be 0 or more",
            ),
            (
                LayoutArgs {
                    epoch: Some("yesterday".into()),
                    ..Default::default()
                },
                "--epoch \"yesterday\" is not an RFC 3339 time",
            ),
            (
                LayoutArgs {
                    epoch: Some("1969-12-31T00:00:00Z".into()),
                    ..Default::default()
                },
                "--epoch 1969-12-31T00:00:00Z is before 1970",
            ),
        ];
        for (args, expected) in cases {
            let text = from_flags(&args).unwrap_err().to_string();
            assert!(text.starts_with("invalid layout flags: "), "{text}");
            assert!(text.contains(expected), "{expected:?} in {text}");
            for field in ["timestampBits", "totalBits", "datacenterId", "layout."] {
                assert!(!text.contains(field), "{field} in {text}");
            }
        }
    }

    #[test]
    fn a_manifest_keeps_the_spec_field_names_in_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: wide}\n\
         spec: {layout: {workerBits: 40}}\n",
        )
        .unwrap();
        let err = from_file(&path).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
        let text = err.to_string();
        let expected = Layout::new(41, 0, 40, 12, 63).unwrap_err().to_string();
        assert!(text.contains(&expected), "{text}");
        assert!(text.contains("layout.workerBits is 40"), "{text}");
    }

    #[test]
    fn a_segment_manifest_is_refused_because_its_values_have_no_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("invoices.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: invoices}\n\
             spec: {mode: Segment, segment: {blockSize: 500}}\n",
        )
        .unwrap();
        let err = from_file(&path).unwrap_err();
        assert!(matches!(err, CliError::SegmentSequence { .. }), "{err}");
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
        let text = err.to_string();
        assert!(
            text.contains("(idsequence invoices) is a Segment sequence"),
            "{text}"
        );
        assert!(text.contains("plain counter values with no time"), "{text}");
        assert!(
            text.contains("`kubectl kubeflake slots invoices`"),
            "{text}"
        );
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
