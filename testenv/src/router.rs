//! A stand-in ingress controller for the real-node tier (issue 30): no real ingress
//! controller builds here (`../shared/notes/clair-load.md`), so Debian's nginx, configured
//! from the Ingress objects the operator rendered, carries the requests, following
//! ingress-nginx's documented behaviour for exactly what the operator uses. This module
//! holds the pure translation ([`nginx::render`]); the process that watches the cluster,
//! writes the config and reloads nginx comes with the real-node test that uses it.

pub mod nginx;
