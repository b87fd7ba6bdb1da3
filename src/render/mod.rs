//! Pure builders: the desired owned objects of a resource, from its spec and what the
//! reconcile observed. No client here; each builder is tested on its own.

pub mod autoscaling;
pub mod clair;
pub mod clairctl;
pub mod cloudnative_pg;
pub mod database;
pub mod owned;
pub mod pod;
pub mod policy;
pub mod quay;
pub mod routing;
pub mod service;
pub mod settings;
pub mod sizing;
pub mod traces;
