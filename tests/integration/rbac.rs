//! The operator's roles (`deploy/base/roles.yaml`) grant what the code uses, and no
//! more: checked once the whole suite has run, against every request the operator made (the
//! test control plane's audit log records all of the operator's requests, reads included).

use std::collections::BTreeSet;

use anyhow::{Context, ensure};
use serde_json::Value;

use crate::support::TestEnv;

/// Grants the suite cannot exercise, each with why it is needed anyway.
const NOT_EXERCISED: &[(&str, &str, &str, &str)] = &[
    // (group, resource, verb, why)
    (
        "clair.projectquay.io",
        "matchers",
        "get",
        "read as Indexers are (clair::someone_elses_indexer_of_a_clairs_name_is_not_taken_over): only when one of the name exists that the Clair's watch does not show, or the Matcher controller's cache stays behind the Clair's watch for 250 ms",
    ),
    (
        "clair.projectquay.io",
        "notifiers",
        "get",
        "read as Indexers are: only when one of the name exists that the Clair's watch does not show, or the Notifier controller's cache stays behind the Clair's watch for 250 ms",
    ),
    (
        "keda.sh",
        "scaledobjects",
        "get",
        "engine KEDA: this suite's cluster serves no KEDA; the real-node tier, which runs KEDA, writes and switches ScaledObjects (tests/realnode/autoscaling.rs)",
    ),
    (
        "keda.sh",
        "scaledobjects",
        "list",
        "engine KEDA: the applier lists the ScaledObjects a service owns (real-node tier)",
    ),
    (
        "keda.sh",
        "scaledobjects",
        "create",
        "engine KEDA: a service's ScaledObject, created by server-side apply (real-node tier)",
    ),
    (
        "keda.sh",
        "scaledobjects",
        "patch",
        "engine KEDA: the ScaledObject applied (real-node tier)",
    ),
    (
        "keda.sh",
        "scaledobjects",
        "delete",
        "engine KEDA: switching back to HPA or dropping autoscaling deletes it (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "clusters",
        "get",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; read before its first apply, and a Cluster's status each reconcile (real-node tier, tests/realnode/cloudnative_pg.rs)",
    ),
    (
        "postgresql.cnpg.io",
        "clusters",
        "list",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; the applier lists those a Clair owns (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "clusters",
        "create",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; created by server-side apply (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "clusters",
        "patch",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; applied (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "databases",
        "get",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; read before its first apply, and a Cluster's status each reconcile (real-node tier, tests/realnode/cloudnative_pg.rs)",
    ),
    (
        "postgresql.cnpg.io",
        "databases",
        "list",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; the applier lists those a Clair owns (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "databases",
        "create",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; created by server-side apply (real-node tier)",
    ),
    (
        "postgresql.cnpg.io",
        "databases",
        "patch",
        "engine CloudNativePG: this suite's cluster serves no CloudNativePG; applied (real-node tier)",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "get",
        "leader election runs in the operator's own process (tests/standalone), not in this suite's in-process operator",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "create",
        "leader election: the first replica creates the Lease (tests/standalone)",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "update",
        "leader election: renewing and taking over the Lease (tests/standalone)",
    ),
    (
        "discovery.k8s.io",
        "endpointslices",
        "list",
        "the replicas behind the webhook Service are asked which CA they serve; this suite's operator is called by URL (the real-node tier lists them)",
    ),
    (
        "route.openshift.io",
        "routes/custom-host",
        "create",
        "OpenShift checks it before a new Route names its host; the test cluster is not OpenShift",
    ),
    (
        "route.openshift.io",
        "routes/custom-host",
        "update",
        "OpenShift checks it before a Route's host changes",
    ),
    (
        "route.openshift.io",
        "routes",
        "delete",
        "the pruner removes Routes when routing moves to another kind; no test runs Routes",
    ),
    (
        "",
        "configmaps",
        "delete",
        "the pruner removes a managed database's bootstrap script it no longer wants",
    ),
    (
        "",
        "services",
        "delete",
        "the pruner removes the Services of engines no longer wanted",
    ),
    (
        "apps",
        "statefulsets",
        "delete",
        "the pruner removes engines no longer wanted",
    ),
    (
        "batch",
        "cronjobs",
        "delete",
        "the pruner removes the updater CronJob when the matcher runs the updaters again",
    ),
    (
        "clair.projectquay.io",
        "indexers",
        "delete",
        "the pruner removes a Clair's stray indexer",
    ),
    (
        "clair.projectquay.io",
        "matchers",
        "delete",
        "the pruner removes a Clair's stray matcher",
    ),
    (
        "policy",
        "poddisruptionbudgets",
        "delete",
        "the pruner removes a service's stray budget",
    ),
    (
        "monitoring.coreos.com",
        "servicemonitors",
        "delete",
        "the pruner removes a service's stray ServiceMonitor",
    ),
];

/// `(group, resource, verb)` of every grant of the roles in `deploy/base/roles.yaml`.
fn granted() -> anyhow::Result<BTreeSet<(String, String, String)>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/roles.yaml");
    let text = std::fs::read_to_string(path)?;
    let mut grants = BTreeSet::new();
    for document in text.split("\n---\n") {
        let value: Value = serde_saphyr::from_str(document)?;
        if value["kind"] != "ClusterRole" && value["kind"] != "Role" {
            continue;
        }
        for rule in value["rules"].as_array().context("rules")? {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        grants.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    Ok(grants)
}

/// `(group, resource[/subresource], verb)` of every request the operator made.
fn used(env: &TestEnv) -> anyhow::Result<BTreeSet<(String, String, String)>> {
    let text = std::fs::read_to_string(env.plane.audit_log())?;
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if entry["user"]["username"] != clair_testenv::OPERATOR {
            continue;
        }
        let object = &entry["objectRef"];
        let Some(resource) = object["resource"].as_str() else {
            continue;
        };
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        let group = object["apiGroup"].as_str().unwrap_or_default().to_string();
        let verb = entry["verb"].as_str().unwrap_or_default().to_string();
        // A server-side apply that creates is audited as `patch` but also needs `create`.
        if verb == "patch" {
            used.insert((group.clone(), resource.clone(), "create".to_string()));
        }
        used.insert((group, resource, verb));
    }
    Ok(used)
}

pub fn every_grant_is_used(env: &TestEnv) -> anyhow::Result<()> {
    let granted = granted()?;
    let used = used(env)?;
    let unused: Vec<String> = granted
        .iter()
        .filter(|grant| !used.contains(*grant))
        .filter(|(g, r, v)| {
            !NOT_EXERCISED
                .iter()
                .any(|(eg, er, ev, _)| eg == g && er == r && ev == v)
        })
        .map(|(g, r, v)| format!("{v} {r} ({g})"))
        .collect();
    ensure!(
        unused.is_empty(),
        "the ClusterRole grants what the operator never used in the suite: {}; drop them from \
         deploy/base/roles.yaml, or list them in tests/integration/rbac.rs NOT_EXERCISED with \
         why they are needed",
        unused.join(", ")
    );
    Ok(())
}
