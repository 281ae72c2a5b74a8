//! Who a member is: its identity (the cluster's ID) and the name people call it by.
//!
//! A member's identity is never a number a person chooses. It is the cluster's ID in the
//! sense of KEP-2149: the value of the `cluster.clusterset.k8s.io` ClusterProperty when the
//! cluster has one (older drafts called it `id.k8s.io`), else the UID of the cluster's
//! `kube-system` namespace. Both are RFC 1123 DNS subdomains; a UID is 36 characters. The
//! name is a DNS label a person gives at join, for messages and commands only: safety never
//! depends on it, but two members may not share one (docs/design/2026-11-29-multicluster.md).

use std::fmt;

/// The longest identity accepted (KEP-2149 recommends fewer than 128 characters).
pub const MAX_ID_LEN: usize = 128;
/// The longest member name (a DNS label).
pub const MAX_NAME_LEN: usize = 63;

/// Why a text is not a member identity or name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "member identity {0:?} is not a cluster ID: use the UID of the cluster's kube-system \
         namespace (`kubectl get namespace kube-system -o jsonpath='{{.metadata.uid}}'`) or its \
         cluster.clusterset.k8s.io ClusterProperty: lower-case letters, digits, '-' and '.', \
         starting and ending with a letter or digit, at most 128 characters"
    )]
    BadId(String),
    #[error(
        "member name {0:?} is not a DNS label: use lower-case letters, digits and '-', starting \
         and ending with a letter or digit, at most 63 characters (for example prod-eu)"
    )]
    BadName(String),
}

/// A member's identity: its cluster ID (see the module docs). Valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(String);

impl MemberId {
    /// Checks `text` is a cluster ID: an RFC 1123 DNS subdomain of at most [`MAX_ID_LEN`].
    pub fn new(text: &str) -> Result<MemberId, IdentityError> {
        let ok = !text.is_empty() && text.len() <= MAX_ID_LEN && text.split('.').all(is_dns_label);
        if ok {
            Ok(MemberId(text.to_string()))
        } else {
            Err(IdentityError::BadId(text.to_string()))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A member's name, for people: a DNS label. Valid by construction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberName(String);

impl MemberName {
    pub fn new(text: &str) -> Result<MemberName, IdentityError> {
        if is_dns_label(text) && text.len() <= MAX_NAME_LEN {
            Ok(MemberName(text.to_string()))
        } else {
            Err(IdentityError::BadName(text.to_string()))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_dns_label(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_NAME_LEN
                && alnum(first)
                && alnum(last)
                && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}
