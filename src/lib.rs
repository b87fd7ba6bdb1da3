//! clair-operator: runs Clair's indexer, matcher and notifier as separate, independently
//! scaled services on Kubernetes, each custom resource driven by a typed state machine.

pub mod allocator;
pub mod api;
pub mod apiclient;
pub mod clairconfig;
pub mod controller;
pub mod crdgen;
pub mod database;
pub mod generated;
pub mod images;
pub mod launch;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod offline;
pub mod olm;
pub mod platform;
pub mod render;
pub mod sources;
pub mod telemetry;
pub mod templating;
pub mod text;
pub mod tls;
pub mod webhook;

#[cfg(test)]
mod citations;
#[cfg(test)]
mod layers;
#[cfg(test)]
mod packaging;
