//! Reads only: everything a `Clair` reconcile needs to decide — its credentials (read, the
//! missing ones generated), its database, the generated config with the user's drop-ins,
//! its three service resources, its routing and where an upgrade stands.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;
use strum::VariantArray;

use super::credentials::read_or_generate;
use super::database::{self, DatabaseState};
use crate::api::clair::{ChildStatus, RoutingKind, UpgradeStep};
use crate::api::{Clair, ConfigSource, Indexer, Matcher, Notifier, Phase, ServiceKind};
use crate::clairconfig::{self, Document};
use crate::controller::Error;
use crate::controller::capabilities::OptionalApi;
use crate::controller::error::ObserveError;
use crate::controller::observer::{Credential, Observer};
use crate::controller::service::ServiceResource;
use crate::controller::service::observe::{judge, read, tracing_dropin};
use crate::database::budget;
use crate::database::probe::ProbeOptions;
use crate::images;
use crate::machine::clair::{ChildObservation, ClairSnapshot, RoutingObservation};
use crate::machine::notifications::DeliveriesObservation;
use crate::machine::observation::ConfigObservation;
use crate::machine::upgrade::{self, JobState, StepJobs, Upgrade};
use crate::render::clair::{self as render, ClairInput, ROOT_KEY};
use crate::render::clairctl::upgrade_job_name;
use crate::render::database as db;
use crate::render::routing;
use crate::sources::ObjectSource;

/// One service resource as observed.
pub struct ObservedChild {
    pub observation: ChildObservation,
    pub status: Option<ChildStatus>,
    /// Disabled, or Available (or Scaling) on the image the spec asks for.
    pub settled_on_desired_image: bool,
}

/// Everything one reconcile read about a `Clair`.
pub struct Observed {
    /// The PSK Secret's values (the key generated when missing).
    pub psk: BTreeMap<String, String>,
    /// The pre-shared key in use: Quay's (`spec.quay.psk`), else the generated one.
    pub key: String,
    /// The managed database's passwords (generated when missing); `None` for an external
    /// database.
    pub passwords: Option<BTreeMap<String, String>>,
    pub database: DatabaseState,
    /// The generated root config.
    pub root: Value,
    pub config: ConfigObservation,
    /// Indexer, matcher, notifier.
    pub children: [ObservedChild; 3],
    pub upgrade: Upgrade,
    /// The routing kind to apply, or why the cluster cannot serve the one asked for.
    pub routing: Result<RoutingKind, String>,
    pub served: routing::Served,
    /// The version the services ran so far (`status.version`) and the spec's.
    pub running_version: Option<String>,
    pub desired_version: Option<String>,
    /// Every image the spec names is one the operator may run (`--allowed-images`).
    pub images_allowed: bool,
    /// Who runs the updaters, and how the CronJob's runs went.
    pub updaters: crate::machine::updaters::UpdatersObservation,
    /// Whether the notifier's notifications are delivered.
    pub deliveries: DeliveriesObservation,
}

/// Reads everything about `input`'s `Clair` (`clair`, read fresh).
pub async fn observe(
    source: &impl Observer,
    input: &ClairInput<'_>,
    clair: &Clair,
) -> Result<Observed, Error> {
    let psk = read_or_generate(
        source,
        input.namespace,
        &input.psk_secret_name(),
        &[render::PSK_KEY.to_string()],
        Credential::Psk,
    )
    .await?;
    // A restarted operator has no connection check yet: a database ready before stays so
    // until its check ends (a Clair must not flap because the operator restarted).
    let ready_before = clair.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "DatabaseReady" && c.status == "True")
    });
    let (database, passwords) = match (&input.spec.database.managed, &input.spec.database.external)
    {
        (Some(managed), _) => {
            let passwords = read_or_generate(
                source,
                input.namespace,
                &db::passwords_secret_name(input),
                &db::password_keys(),
                Credential::Password,
            )
            .await?;
            let state = database::managed(source, input, managed, &passwords, ready_before).await?;
            (state, Some(passwords))
        }
        (None, Some(external)) => {
            let state = database::external(
                source,
                input,
                external,
                ProbeOptions::default(),
                ready_before,
            )
            .await?;
            (state, None)
        }
        (None, None) => return Err(Error::MissingField("spec.database.managed or .external")),
    };
    // A Quay that has a key already keeps it: Clair takes Quay's.
    let quay_key = match input.spec.quay.as_ref().and_then(|q| q.psk.as_ref()) {
        Some(reference) => {
            let source_of = ConfigSource {
                config_map: None,
                secret: Some(reference.clone()),
            };
            let read = read(source, input.namespace, &source_of).await?;
            Some(read.map(|document| document.text.trim().to_string()))
        }
        None => None,
    };
    let key = match &quay_key {
        Some(Ok(key)) => key.clone(),
        _ => psk.get(render::PSK_KEY).cloned().unwrap_or_default(),
    };
    let root = render::root_config(input, &database.connections, &key);
    let image_refusal = source
        .platform()
        .images
        .refusal(&images::clair_images(input.spec));
    let images_allowed = image_refusal.is_none();
    let (config, delivery_interval) = match (image_refusal, quay_key) {
        (Some(refusal), _) => (ConfigObservation::Invalid { message: refusal }, None),
        (None, Some(Err(what))) => (
            ConfigObservation::Missing {
                what: format!("spec.quay.psk: {what}"),
            },
            None,
        ),
        (None, _) => config(source, input, &root).await?,
    };
    let deliveries = deliveries(input, &database, delivery_interval);
    let children = [
        child::<Indexer>(source, input).await?,
        child::<Matcher>(source, input).await?,
        child::<Notifier>(source, input).await?,
    ];
    let running_version = clair.status.as_ref().and_then(|s| s.version.clone());
    let desired_version = crate::images::version(&input.image());
    let jobs = match (&running_version, &desired_version) {
        (Some(from), Some(to)) if from != to => Some(step_jobs(source, input, to).await?),
        _ => None,
    };
    let upgrade = upgrade::assess(
        running_version.as_deref(),
        desired_version.as_deref(),
        children.iter().all(|c| c.settled_on_desired_image),
        jobs.as_ref(),
    );
    let http_routes = source.serves(OptionalApi::HttpRoute).await;
    let served = routing::Served {
        routes: source.serves(OptionalApi::Route).await,
        http_routes,
        // The CRD is read only where HTTPRoutes are served and this Clair routes through one.
        http_route_timeouts: http_routes
            && input
                .spec
                .routing
                .as_ref()
                .is_some_and(|r| r.gateway.is_some())
            && source.serves(OptionalApi::HttpRouteTimeouts).await,
    };
    Ok(Observed {
        psk,
        key,
        passwords,
        database,
        root,
        config,
        children,
        upgrade,
        routing: routing::resolve(input.spec.routing.as_ref(), served),
        served,
        running_version,
        desired_version,
        images_allowed,
        updaters: super::updaters::observe(source, input, &super::super::now()).await?,
        deliveries,
    })
}

/// What is known of the notifier's deliveries: none without a notifier; counted from its
/// database, against the delivery interval of a valid config (without one, the notifier
/// keeps the config it runs, whose interval is not read here: not judged).
fn deliveries(
    input: &ClairInput<'_>,
    database: &DatabaseState,
    interval: Option<Duration>,
) -> DeliveriesObservation {
    if !input.notifier_enabled() {
        return DeliveriesObservation::Off;
    }
    match (&database.deliveries, interval) {
        (Err(why), _) => DeliveriesObservation::Unchecked(why.clone()),
        (Ok(_), None) => DeliveriesObservation::Unchecked(
            "not judged while the config is not valid (ConfigValid says why)".to_string(),
        ),
        (Ok(undelivered), Some(interval)) => DeliveriesObservation::Checked {
            undelivered: *undelivered,
            interval,
        },
    }
}

impl Observed {
    /// The connection budget of each engine, for the metrics. External engines are named
    /// `external-N` (their hosts come from Secrets and stay out of labels).
    pub fn budgets(&self, input: &ClairInput) -> Vec<crate::metrics::resources::EngineBudget> {
        let mut demand: BTreeMap<String, u32> = BTreeMap::new();
        for d in database::demands(input, &self.database) {
            let total = demand.entry(d.engine).or_default();
            *total = total.saturating_add(d.pool.saturating_mul(d.max_replicas));
        }
        let managed = input.spec.database.managed.is_some();
        demand
            .into_iter()
            .enumerate()
            .map(
                |(i, (engine, demand))| crate::metrics::resources::EngineBudget {
                    limit: self.database.limits.get(&engine).copied().flatten(),
                    engine: if managed {
                        engine
                    } else {
                        format!("external-{}", i + 1)
                    },
                    demand,
                },
            )
            .collect()
    }

    /// What the machine takes.
    pub fn snapshot(&self, input: &ClairInput, generation: i64) -> ClairSnapshot {
        let [indexer, matcher, notifier] = &self.children;
        ClairSnapshot {
            generation,
            config: self.config.clone(),
            database: self.database.observation.clone(),
            children: [
                indexer.observation.clone(),
                matcher.observation.clone(),
                notifier.observation.clone(),
            ],
            connections: budget::check(
                &database::demands(input, &self.database),
                &self.database.limits,
            ),
            routing: self.routing_observation(input),
            upgrade: self.upgrade.observation.clone(),
            updaters: self.updaters.clone(),
            deliveries: self.deliveries.clone(),
        }
    }

    fn routing_observation(&self, input: &ClairInput) -> RoutingObservation {
        let name = input.name;
        match &self.routing {
            Err(message) => RoutingObservation::Unsupported {
                message: message.clone(),
            },
            Ok(RoutingKind::None) => RoutingObservation::Disabled,
            Ok(kind) => RoutingObservation::Applied {
                what: match kind {
                    RoutingKind::Route => {
                        format!("one Route per service path ({name}-indexer, ...)")
                    }
                    RoutingKind::HttpRoute => format!("HTTPRoute {name}"),
                    _ => format!("Ingress {name}"),
                },
                url: input
                    .spec
                    .routing
                    .as_ref()
                    .and_then(routing::external_url)
                    .unwrap_or_else(|| "any host".to_string()),
            },
        }
    }
}

/// The generated config with the trace section of `spec.tracing` and the user's drop-ins,
/// validated for every enabled service, as each service resource will merge it.
pub async fn config(
    objects: &impl ObjectSource,
    input: &ClairInput<'_>,
    root: &Value,
) -> Result<(ConfigObservation, Option<Duration>), ObserveError> {
    let mut delivery_interval = None;
    let root = Document {
        name: format!(
            "the generated config (Secret {})",
            input.config_secret_name()
        ),
        key: ROOT_KEY.to_string(),
        text: root.to_string(),
        // It holds the connection strings and the PSK.
        secret: true,
    };
    let mut dropins = Vec::new();
    if let Some(tracing) = &input.spec.tracing {
        match tracing_dropin(objects, input.namespace, tracing, ROOT_KEY).await? {
            Ok(document) => dropins.push(document),
            Err(problem) => return Ok((problem, None)),
        }
    }
    for (index, source) in input.spec.dropins.iter().enumerate() {
        // Clair applies a drop-in only when its extension matches the root's; one that
        // would be silently ignored is refused here instead.
        let key = source.key().map(|k| k.key.as_str()).unwrap_or_default();
        if !(key.ends_with(".yaml") || key.ends_with(".yaml-patch")) {
            return Ok((
                ConfigObservation::Invalid {
                    message: format!(
                        "spec.dropins[{index}]: key {key} would be ignored next to the generated \
                         {ROOT_KEY}: name it .yaml (merge patch) or .yaml-patch (JSON patch)"
                    ),
                },
                None,
            ));
        }
        match read(objects, input.namespace, source).await? {
            Ok(document) => dropins.push(document),
            Err(what) => {
                return Ok((
                    ConfigObservation::Missing {
                        what: format!("spec.dropins[{index}]: {what}"),
                    },
                    None,
                ));
            }
        }
    }
    let mut hashes = Vec::new();
    for &kind in ServiceKind::VARIANTS {
        if !input.enabled(kind) {
            continue;
        }
        match judge(&root, &dropins, kind) {
            (ConfigObservation::Valid { hash }, Some(snapshot)) => {
                if kind == ServiceKind::Notifier
                    && let Some(problem) = notifier_delivery_missing(&snapshot.json)
                {
                    return Ok((ConfigObservation::Invalid { message: problem }, None));
                }
                if kind == ServiceKind::Notifier {
                    delivery_interval = Some(notifier_delivery_interval(&snapshot.json));
                }
                hashes.push(hash);
            }
            (ConfigObservation::Invalid { message }, _) => {
                return Ok((
                    ConfigObservation::Invalid {
                        message: format!("in {kind} mode: {message}"),
                    },
                    None,
                ));
            }
            (other, _) => return Ok((other, None)),
        }
    }
    Ok((
        ConfigObservation::Valid {
            hash: clairconfig::hash(&Value::from(hashes)),
        },
        delivery_interval,
    ))
}

/// How often the notifier tries a waiting notification again: the merged config's
/// `notifier.delivery_interval`, else Clair's default hour (under a minute is refused by the
/// validator before this is asked).
fn notifier_delivery_interval(merged: &str) -> Duration {
    let hour = Duration::from_secs(3600);
    let Ok(config) = serde_json::from_str::<Value>(merged) else {
        return hour;
    };
    config
        .pointer("/notifier/delivery_interval")
        .and_then(Value::as_str)
        .and_then(|text| clairconfig::parse_go_duration(text).ok())
        .filter(|seconds| *seconds >= 60.0)
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
        .unwrap_or(hour)
}

/// Clair's notifier exits at start without a delivery method; Clair's own validation only
/// warns. Refused here so a notifier never crash-loops on a config the operator rolled.
fn notifier_delivery_missing(merged: &str) -> Option<String> {
    let config: Value = serde_json::from_str(merged).ok()?;
    let notifier = config.get("notifier")?;
    let has = |key: &str| notifier.get(key).is_some_and(|v| !v.is_null());
    (!(has("webhook") || has("amqp") || has("stomp"))).then(|| {
        "notifier: no delivery is configured (notifier.webhook, notifier.amqp or notifier.stomp) \
         and Clair's notifier exits without one: add a drop-in with one, or set \
         spec.notifier.enabled to false"
            .to_string()
    })
}

/// Reads one service resource: absent, or present in the phase its status reports for its
/// current generation (`None` until its controller has caught up).
async fn child<K: ServiceResource>(
    source: &impl Observer,
    input: &ClairInput<'_>,
) -> Result<ObservedChild, ObserveError> {
    let kind = K::KIND;
    if !input.enabled(kind) {
        return Ok(ObservedChild {
            observation: ChildObservation::Disabled,
            status: None,
            settled_on_desired_image: true,
        });
    }
    let name = input.child_name(kind);
    let read: Option<K> = source
        .service(input.namespace, &name)
        .await
        .map_err(ObserveError::reading(format!("{} {name}", K::kind(&()))))?;
    let Some(child) = read else {
        return Ok(ObservedChild {
            observation: ChildObservation::Absent,
            status: None,
            settled_on_desired_image: false,
        });
    };
    let status = child.service_status();
    let current = status.and_then(|s| s.observed_generation) == child.meta().generation;
    let phase = status.and_then(|s| s.phase).filter(|_| current);
    let child_status = ChildStatus {
        name: name.clone(),
        phase,
        ready_replicas: status.map_or(0, |s| s.ready_replicas),
        url: status.and_then(|s| s.url.clone()),
    };
    let on_desired_image =
        child.service_spec().image.as_deref() == Some(&input.service_image(kind));
    Ok(ObservedChild {
        observation: ChildObservation::Present { name, phase },
        status: Some(child_status),
        settled_on_desired_image: on_desired_image
            && matches!(phase, Some(Phase::Available | Phase::Scaling)),
    })
}

/// The two step Jobs of the move to `version`.
async fn step_jobs(
    source: &impl Observer,
    input: &ClairInput<'_>,
    version: &str,
) -> Result<StepJobs, ObserveError> {
    let read = |step| {
        let name = upgrade_job_name(input, step, version);
        async move {
            let job: Option<Job> = source
                .owned(input.namespace, &name)
                .await
                .map_err(ObserveError::reading(format!("Job {name}")))?;
            Ok::<_, ObserveError>((name, job_state(job.as_ref())))
        }
    };
    Ok(StepJobs {
        pre: read(UpgradeStep::Pre).await?,
        post: read(UpgradeStep::Post).await?,
    })
}

fn job_state(job: Option<&Job>) -> JobState {
    let Some(job) = job else {
        return JobState::Absent;
    };
    let condition = |type_: &str| {
        job.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
    };
    if condition("Failed") {
        JobState::Failed
    } else if condition("Complete") {
        JobState::Succeeded
    } else {
        JobState::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notifier_needs_a_delivery() {
        assert!(notifier_delivery_missing(r#"{"notifier":{"connstring":"x"}}"#).is_some());
        assert!(
            notifier_delivery_missing(r#"{"notifier":{"webhook":{"target":"http://t/"}}}"#)
                .is_none()
        );
    }
}
