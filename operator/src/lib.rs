//! The kubeflake operator: reconciles `IdSequence`s and assigns worker slots.
//!
//! Not implemented yet beyond this skeleton; see the operator issue.
