//! Reading the IdSpace on the hub, and writing it back by compare-and-swap: a `replace`
//! carrying the `resourceVersion` read (docs/safety.md rule 1). Members write the same
//! object; on a conflict the change is computed again from a fresh read, a bounded number
//! of times.

use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use kubeflake_crds::id_space::records::RecordError;
use kubeflake_crds::id_space::{IdSpace, IdSpaceSpec, Registry, Space, SpaceError};
use kubeflake_crds::sequence::Mode;

use crate::error::CliError;

/// Reads and writes before giving up on a contended space.
pub const ATTEMPTS: u32 = 5;

/// The IdSpace as read, with its validated blocks and registry for a space of blocks
/// (refused whole when broken); a Segment space has no blocks: its registry is used as
/// stored ([`super::segment`]).
pub struct Read {
    pub object: IdSpace,
    pub blocks: Option<(Space, Registry)>,
}

impl Read {
    /// A Segment space (`sequence.mode: Segment`): ranges of one counter, no blocks.
    pub fn is_segment(&self) -> bool {
        self.blocks.is_none()
    }

    /// The blocks and the registry; a Segment space is refused as before, for the commands
    /// that show or change blocks.
    pub fn blocks(&self) -> Result<(&Space, &Registry), CliError> {
        self.blocks
            .as_ref()
            .map(|(s, r)| (s, r))
            .ok_or_else(|| CliError::BadSpace {
                name: self.object.metadata.name.clone().unwrap_or_default(),
                namespace: self.object.metadata.namespace.clone().unwrap_or_default(),
                reason: RecordError::from(SpaceError::NotSnowflake),
            })
    }
}

pub async fn read(api: &Api<IdSpace>, namespace: &str, name: &str) -> Result<Read, CliError> {
    let not_found = || CliError::SpaceNotFound {
        name: name.to_string(),
        namespace: namespace.to_string(),
    };
    let object = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Err(not_found()),
        // Without the IdSpace CRD the resource itself is unknown: the space is not there.
        Err(kube::Error::Api(s)) if s.is_not_found() => return Err(not_found()),
        Err(source) => {
            return Err(CliError::Api {
                what: format!("read idspace {name} in namespace {namespace}"),
                source,
            });
        }
    };
    let bad = |reason| CliError::BadSpace {
        name: name.to_string(),
        namespace: namespace.to_string(),
        reason,
    };
    if object.spec.sequence.mode == Mode::Segment {
        object.spec.space_sequence().map_err(bad)?;
        return Ok(Read {
            object,
            blocks: None,
        });
    }
    let space = object.spec.space().map_err(bad)?;
    let registry = object.spec.registry(&space).map_err(bad)?;
    Ok(Read {
        object,
        blocks: Some((space, registry)),
    })
}

/// Reads the space, lets `change` compute the new spec and its report from what was read,
/// and writes it by compare-and-swap (not with `dry_run`). A conflict reads again, up to
/// [`ATTEMPTS`] times. Returns the report of the read that was written.
pub async fn change<R>(
    client: &Client,
    (name, namespace): (&str, &str),
    dry_run: bool,
    change: impl Fn(&Read) -> Result<(IdSpaceSpec, R), CliError>,
) -> Result<R, CliError> {
    let api: Api<IdSpace> = Api::namespaced(client.clone(), namespace);
    for attempt in 1..=ATTEMPTS {
        let read = read(&api, namespace, name).await?;
        let (spec, report) = change(&read)?;
        if dry_run {
            return Ok(report);
        }
        let mut object = read.object;
        object.spec = spec;
        tracing::debug!(attempt, rv = ?object.resource_version(), "replacing the idspace");
        match api.replace(name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(report),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => {
                return Err(CliError::Api {
                    what: format!("update idspace {name} in namespace {namespace}"),
                    source,
                });
            }
        }
    }
    Err(CliError::Contended {
        space: format!("{namespace}/{name}"),
        attempts: ATTEMPTS,
    })
}
