//! One ID space across clusters, the member's side (issue 55;
//! docs/design/2026-11-29-multicluster.md, plan step 2): the operator keeps each
//! `IdSpaceMembership` in touch with its hub, off the pod path.
//!
//! | To change | Look in |
//! |---|---|
//! | how the hub is reached (the Secret, the kubeconfig, timeouts) | `hub/connect.rs` |
//! | this cluster's ID (ClusterProperty, else kube-system's UID) | `hub/cluster_id.rs` |
//! | what one contact decides (join, renew, reclaim, spare; refusals) | `hub/step.rs` (pure) |
//! | the reads and writes of a contact, the loop, the status | `hub/task.rs` |
//! | the membership's conditions and reasons | `hub/conditions.rs` |
//! | the membership status a contact keeps (copy, conditions, Events) | `hub/task/status.rs` |
//! | what a contact tells the metrics (`crate::metrics::hub`) | `hub/task/observe.rs` |
//! | the fence raise after the copy went back (`LocalBehind`) | `hub/fences.rs` |
//! | releasing the blocks of a deleted membership (its finalizer) | `hub/leave.rs` |
//! | a Segment space: ranges from the hub's counter into the local counter (rule 22) | `hub/segment.rs` (decisions: `crds::segment_counter::range::plan`) |

pub mod checks;
pub mod cluster_id;
pub mod conditions;
pub mod connect;
pub mod fences;
pub mod leave;
pub mod segment;
pub mod step;
pub mod task;

#[cfg(test)]
mod task_tests;
#[cfg(test)]
mod tests;
