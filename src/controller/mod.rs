//! The controllers. Every reconcile is the same pipeline:
//!
//! observe (reads only) → decide (the machine, pure) → desired (every object the resource
//! should own, pure) → apply (the one applier: server-side apply, skipped when unchanged;
//! unwanted owned objects deleted) → status (one write, only when it changed) and an Event
//! on each transition.
//!
//! A resource being deleted, or in a namespace being deleted, gets nothing applied.

pub mod absent;
pub mod apply;
pub mod capabilities;
pub mod clair;
pub mod contents;
pub mod contest;
pub mod decoded;
pub mod error;
pub mod events;
pub mod observer;
pub mod owned;
pub mod packed;
pub mod service;
pub mod stores;
pub mod templates;
pub mod versions;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::{Resource, ResourceExt};
use tracing::{debug, error, info, warn};

pub use crate::api::labels::FIELD_MANAGER;
pub use error::Error;
use error::{ApplyError, RetryPolicy, StatusError};

use crate::machine::Decision;

/// The objects of `store` in `namespace` that `matches` selects, as requests to reconcile:
/// how a change to a ConfigMap or Secret reaches the resources that use it.
fn related<K>(
    store: &kube::runtime::reflector::Store<K>,
    namespace: Option<&str>,
    matches: impl Fn(&K) -> bool,
) -> Vec<kube::runtime::reflector::ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|k| k.meta().namespace.as_deref() == namespace)
        .filter(|k| matches(k.as_ref()))
        .map(|k| kube::runtime::reflector::ObjectRef::from_obj(k.as_ref()))
        .collect()
}

/// Now, as `metav1.Time` holds it: second precision, so what the operator writes equals
/// what the apiserver gives back.
fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::from_second(now.as_second()).unwrap_or(now),
    )
}

/// `Kind namespace/name`, for logs, error messages and the retry policy.
fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{} {}/{}",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// Who owns the objects a reconcile applies: the resource, by name and UID.
struct Owner {
    namespace: String,
    name: String,
    uid: String,
    /// The controller owner reference every owned object carries.
    reference: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
}

impl Owner {
    fn of<K: Resource<DynamicType = ()>>(object: &K) -> Result<Self, Error> {
        Ok(Owner {
            namespace: object
                .namespace()
                .ok_or(Error::MissingField("metadata.namespace"))?,
            name: object.name_any(),
            uid: object.uid().ok_or(Error::MissingField("metadata.uid"))?,
            reference: object
                .controller_owner_ref(&())
                .ok_or(Error::MissingField("metadata.uid"))?,
        })
    }

    fn applier<'a>(&'a self, context: &'a Context) -> apply::Applier<'a> {
        apply::Applier {
            client: &context.client,
            namespace: &self.namespace,
            owner: &self.name,
            owner_uid: &self.uid,
            owner_kind: &self.reference.kind,
            known: &context.owned,
            contents: &context.contents,
            absent: &context.absent,
            metrics: &context.metrics,
            contests: &context.contests,
            wait: Default::default(),
        }
    }
}

/// Reconciles of one controller running at once. Unbounded (kube's default), 1,000 Clairs
/// made 3,000 services create their Services together; the apiserver allocates cluster IPs
/// one at a time, most creates waited past its 60 s timeout (504), and the retries kept it
/// so (the scale benchmark: 11 of 1,000 Available after 17 minutes, the baseline done in 12).
/// Four (twenty over the five controllers) keep both cores busy without queueing requests
/// past any deadline, and bound the work held in flight when a burst queues every resource
/// at once (a fleet-wide config roll): at 1,000 Clairs sixteen peaked at 68.0 MiB resident,
/// eight at 64.1 and four at 62.6, for the same convergence (722.6, 725.7 and 723.4 s, the
/// last beside a baseline of 726.1 s; docs/performance.md).
const CONCURRENT_RECONCILES: u16 = 4;

/// A controller's settings: [`CONCURRENT_RECONCILES`] at once.
fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENT_RECONCILES)
}

/// How long a `Clair`'s reconcile waits for its triggers to settle (each new one restarts
/// the wait). A Clair hears every event of the seventeen objects it makes and of its three
/// services' status: undebounced, its reconciles saw each service's step apart and wrote
/// each into its status (8.9 status writes a Clair at 1,000 Clairs, the scale benchmark,
/// issue 27). A fifth of a second folds a burst into one reconcile and delays each
/// transition by as much. Only the Clair controller waits: the service controllers, which
/// revert a second writer's edit of a Deployment, act on each event at once.
const CLAIR_DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(200);

/// A status with conditions: the `Contested` one is added to it at the end of a reconcile.
trait Conditioned {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

impl Conditioned for crate::api::ClairStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl Conditioned for crate::api::ServiceStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// After the apply: the `Contested` condition while another writer fights over an owned
/// object, and the requeue shortened to the next deferred revert (or to when the fight is
/// forgotten, so the condition goes).
fn contested(
    context: &Context,
    applier: &apply::Applier<'_>,
    conditions: &mut Vec<Condition>,
    previous: &[Condition],
    requeue: Duration,
) -> Duration {
    let at = std::time::Instant::now();
    let fights = context.contests.of(applier.owner_uid, at);
    if let Some(condition) = contest::condition(&fights, previous, &now()) {
        conditions.push(condition);
    }
    let deferred = applier.wait.lock().ok().and_then(|w| *w);
    [
        Some(requeue),
        deferred,
        context.contests.settles_in(applier.owner_uid, at),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(requeue)
}

/// Whether the resource is being deleted: nothing is applied for it any more (its owned
/// objects go with it through their owner references).
fn being_deleted(object: &impl Resource) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// The retry after a failed reconcile, for every controller: the error logged with what
/// failed, the delay from the object's backoff (see [`error::RetryPolicy`]).
fn error_policy<K: Resource<DynamicType = ()>>(
    object: Arc<K>,
    failure: &Error,
    context: Arc<Context>,
) -> Action {
    let described = describe(object.as_ref());
    let note = failure.to_string();
    if failure.needs_action() && context.retries.to_say(&described, &note) {
        let reference = object.object_ref(&());
        let reason = failure.reason();
        let context = context.clone();
        tokio::spawn(async move { publish_failure(&context, reason, note, &reference).await });
    }
    let object = described;
    match context.retries.failed(&object, failure) {
        Some(delay) if failure.is_transient() => {
            warn!(%object, reason = failure.reason(), error = %failure, ?delay, "reconcile failed; retrying");
            Action::requeue(delay)
        }
        Some(delay) => {
            error!(%object, reason = failure.reason(), error = %failure, ?delay, "reconcile failed; retrying slowly: the operator's permissions refuse it");
            Action::requeue(delay)
        }
        None => {
            error!(%object, reason = failure.reason(), error = %failure, "reconcile failed; waiting for the resource to change: what it asks for was refused");
            Action::await_change()
        }
    }
}

/// What the apply step came to: `false` when the namespace is being deleted and nothing
/// more should be written there.
fn applied(result: Result<(), ApplyError>, object: &str) -> Result<bool, Error> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.namespace_terminating() => {
            debug!(
                object,
                "the namespace is being deleted; nothing more is applied"
            );
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs one reconcile of `object` in a span naming it (and, once decided, its phase), and
/// counts it and how long it took.
async fn measured<K: Resource<DynamicType = ()>>(
    object: &K,
    metrics: &crate::metrics::Metrics,
    reconcile: impl std::future::Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    use tracing::Instrument;
    let kind = K::kind(&());
    let span = tracing::info_span!(
        "reconcile",
        kind = %kind,
        namespace = %object.namespace().unwrap_or_default(),
        name = %object.name_any(),
        phase = tracing::field::Empty,
    );
    let start = std::time::Instant::now();
    let result = reconcile.instrument(span).await;
    metrics.reconciled(
        &kind,
        start.elapsed(),
        result.as_ref().err().map(Error::reason),
    );
    result
}

/// Registers a controller's cache with the metrics (sampled at each scrape) and with the
/// health checks (ready once the cache has synced); dropping the returned guards (its task
/// ended) marks the controller dead and stops the sampling.
fn watched<K>(
    context: &Context,
    name: String,
    store: kube::runtime::reflector::Store<K>,
) -> (
    crate::metrics::health::Alive,
    crate::metrics::resources::Sampling,
)
where
    K: crate::metrics::resources::Sampled,
{
    let sampling = context.metrics.resources.watch(store.clone());
    (synced(context, name, store), sampling)
}

/// The health group of the controllers: forgotten when a replica stops leading.
pub const HEALTH_GROUP: &str = "controllers";

/// Registers a controller with the health checks: ready once its cache has synced, dead
/// once the returned guard drops (its task ended).
fn synced<K>(
    context: &Context,
    name: String,
    store: kube::runtime::reflector::Store<K>,
) -> crate::metrics::health::Alive
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let alive = context.health.alive_in(HEALTH_GROUP, name);
    let ready = alive.readiness();
    tokio::spawn(async move {
        // Polled again every half second rather than awaited once: the store's readiness
        // is a oneshot channel whose waker a second waiter would replace.
        loop {
            let waited = tokio::time::timeout(Duration::from_millis(500), store.wait_until_ready());
            match waited.await {
                Ok(Ok(())) => {
                    debug!(part = ready.name(), "cache synced");
                    ready.set();
                    break;
                }
                Ok(Err(_)) => {
                    debug!(part = ready.name(), "cache never synced: its writer went");
                    break;
                }
                Err(_) => debug!(
                    part = ready.name(),
                    objects = store.state().len(),
                    "cache not synced yet"
                ),
            }
        }
    });
    alive
}

/// What a reconcile does when the cache is older than this process's own last status
/// write of the resource (`Versions::behind`): nothing yet. The write's watch event
/// reconciles it again as soon as the cache holds it; deciding from the older status would
/// write the same status again, and a `Clair` would read itself fresh. The requeue is a
/// fallback in case the event never decodes.
fn wait_for_own_write() -> Action {
    Action::requeue(Duration::from_secs(10))
}

/// The end of every reconcile: the `Contested` condition while another writer fights over
/// what `applier` wrote, the status written (server-side apply of the status subresource)
/// only when it changed, the Event of a transition, and when to look again.
async fn conclude<K, S>(
    context: &Context,
    object: &K,
    applier: &apply::Applier<'_>,
    previous: Option<&S>,
    mut status: S,
    decision: &Decision,
    requeue: Duration,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: serde::Serialize + PartialEq + Conditioned,
{
    let requeue = contested(
        context,
        applier,
        status.conditions_mut(),
        previous.map(Conditioned::conditions).unwrap_or_default(),
        requeue,
    );
    let described = describe(object);
    tracing::Span::current().record("phase", decision.phase.as_str());
    if previous != Some(&status) {
        let api: kube::Api<K> = kube::Api::namespaced(
            context.client.clone(),
            &object.namespace().unwrap_or_default(),
        );
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        let written = api
            .patch_status(
                &object.name_any(),
                &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
                &kube::api::Patch::Apply(&patch),
            )
            .await;
        match written {
            Ok(written) => context.versions.seen(&written),
            // Deleted since it was read (its namespace going, most often): nothing to report.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                debug!(object = %described, "gone before its status was written");
                return Ok(Action::await_change());
            }
            Err(source) => {
                return Err(StatusError {
                    object: described,
                    source,
                }
                .into());
            }
        }
    }
    // Counted once the status holds it: a failed write retries and would count it twice.
    if let Some((from, to)) = decision.transition {
        context
            .metrics
            .transition(&K::kind(&()), from.as_str(), to.as_str());
    }
    if let Some(event) = &decision.event {
        info!(object = %described, note = %event.note, "phase transition");
        publish_transition(context, event, decision.transition, &object.object_ref(&())).await;
    }
    context.retries.succeeded(&described);
    Ok(Action::requeue(requeue))
}

/// Records the Event of a phase transition on `object`.
async fn publish_transition(
    context: &Context,
    event: &crate::machine::EventSpec,
    transition: Option<(crate::api::Phase, crate::api::Phase)>,
    object: &k8s_openapi::api::core::v1::ObjectReference,
) {
    use kube::runtime::events::{Event, EventType};
    let published = context
        .events
        .publish(
            &Event {
                type_: if event.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: event.reason.as_str().to_string(),
                note: Some(event.note.clone()),
                // The edge, so a reader filtering on the action sees each kind of
                // transition.
                action: match transition {
                    Some((from, to)) => format!("{from}To{to}"),
                    None => "Reconcile".to_string(),
                },
                secondary: None,
            },
            object,
        )
        .await;
    match published {
        Ok(()) => {}
        // Its namespace is going: so is the resource, and nobody will read the Event.
        Err(e) if error::namespace_terminating(&e) => {
            debug!(object = ?object.name, "no Event: the namespace is being deleted");
        }
        Err(e) => warn!(object = ?object.name, error = %e, "cannot record the transition Event"),
    }
}

/// The longest Event note written (the apiserver refuses notes over 1,024 bytes).
const EVENT_NOTE_BYTES: usize = 1000;

/// Records a failed reconcile that needs someone to act as a Warning Event on `object`
/// (once per run of the same failure an hour: `RetryPolicy::to_say`). The note is cut to
/// what the apiserver takes (1,024 bytes).
async fn publish_failure(
    context: &Context,
    reason: &str,
    note: String,
    object: &k8s_openapi::api::core::v1::ObjectReference,
) {
    use kube::runtime::events::{Event, EventType};
    let note = crate::text::cut(&note, EVENT_NOTE_BYTES);
    let published = context
        .events
        .publish(
            &Event {
                type_: EventType::Warning,
                reason: reason.to_string(),
                note: Some(note),
                action: "Reconcile".to_string(),
                secondary: None,
            },
            object,
        )
        .await;
    if let Err(e) = published
        && !error::namespace_terminating(&e)
    {
        warn!(object = ?object.name, error = %e, "cannot record the failure Event");
    }
}

/// The kind of object a ConfigMap or Secret watch hears of, to match it to the resources
/// that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Referenced {
    ConfigMap,
    Secret,
}

impl Referenced {
    /// Whether a config source names the object `name` of this kind.
    fn by_source(self, source: &crate::api::ConfigSource, name: &str) -> bool {
        let reference = match self {
            Referenced::ConfigMap => source.config_map.as_ref(),
            Referenced::Secret => source.secret.as_ref(),
        };
        reference.is_some_and(|r| r.name == name)
    }

    /// Whether `tracing` reads its headers from the object `name` of this kind.
    fn by_tracing(self, tracing: Option<&crate::api::TracingSpec>, name: &str) -> bool {
        self == Referenced::Secret
            && tracing.and_then(|t| t.headers_secret.as_deref()) == Some(name)
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub events: events::Events,
    pub capabilities: capabilities::Capabilities,
    pub retries: RetryPolicy,
    /// What tenants may name.
    pub platform: crate::platform::Platform,
    /// The key the templating webhook seals what it admitted with.
    pub template_seal: Option<crate::templating::seal::Seal>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub health: Arc<crate::metrics::health::Health>,
    /// How often an Available `Clair` is reconciled again without a change.
    pub available_recheck: Duration,
    /// Owned objects another writer keeps changing.
    pub contests: contest::Contests,
    /// External databases' connection checks, run apart from the reconciles.
    pub probes: Arc<clair::probes::Probes>,
    /// What the watches show of the objects the operator owns (the applier's answers).
    pub owned: Arc<owned::OwnedObjects>,
    /// The resourceVersion of each resource as last written or read here.
    pub versions: versions::Versions,
    /// The service controllers' caches, for the Clair controller.
    pub stores: stores::Stores,
    /// The referenced ConfigMaps and Secrets as last read, while unchanged.
    pub contents: Arc<contents::Contents>,
    /// What observe steps just read and found absent, for their appliers.
    pub absent: absent::Absent,
}

impl Context {
    pub fn new(client: Client, controllers: &Controllers) -> Arc<Self> {
        let kinds = ["Clair", "Indexer", "Matcher", "Notifier"];
        controllers
            .telemetry
            .metrics
            .expect_reconciles(&kinds, Error::REASONS);
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Self {
            events: events::Events::new(client.clone(), reporter),
            capabilities: capabilities::Capabilities::new(client.clone()),
            retries: RetryPolicy::default(),
            platform: controllers.platform.clone(),
            template_seal: controllers.template_seal.clone(),
            metrics: controllers.telemetry.metrics.clone(),
            available_recheck: controllers.available_recheck,
            contests: Default::default(),
            probes: Default::default(),
            owned: Default::default(),
            versions: Default::default(),
            stores: Default::default(),
            contents: Default::default(),
            absent: Default::default(),
            health: controllers.telemetry.health.clone(),
            client,
        })
    }
}

/// Which controllers run, and how.
#[derive(Clone, Debug)]
pub struct Controllers {
    /// What tenants may name (`--allowed-images`, `--allowed-prometheus`, the database
    /// networks).
    pub platform: crate::platform::Platform,
    /// With the templating webhook's key: re-render templated ConfigMaps and Secrets when
    /// what they reference changes, those the webhook sealed only (the re-render uses the
    /// operator's access, safe only for templates whose author the webhook checked).
    /// `None` (no webhook): no re-rendering.
    pub template_seal: Option<crate::templating::seal::Seal>,
    /// The namespaces watched and written (`--namespaces`); the whole cluster when empty.
    pub namespaces: Vec<String>,
    /// Where the controllers count, and report their caches' readiness.
    pub telemetry: crate::metrics::Telemetry,
    /// How often an Available `Clair` is looked at again without a change (its external
    /// databases probed): `--available-recheck-seconds`.
    pub available_recheck: std::time::Duration,
}

/// Runs the controllers (`Clair`, the three service kinds, and template re-rendering when
/// asked), one set per namespace in scope, until `shutdown` resolves.
pub async fn run(
    client: Client,
    controllers: Controllers,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    let context = Context::new(client, &controllers);
    let shutdown = Box::pin(shutdown).shared();
    if controllers.template_seal.is_none() {
        info!("no template re-rendering: it runs only with the templating webhook");
    }
    let mut sets = Vec::new();
    for scope in watch::Scope::of(&controllers.namespaces) {
        info!(?scope, "watching");
        let (c, s) = (context.clone(), shutdown.clone());
        sets.push(clair::run(c.clone(), scope.clone(), s.clone()).boxed());
        sets.push(service::run::<crate::api::Indexer>(c.clone(), scope.clone(), s.clone()).boxed());
        sets.push(service::run::<crate::api::Matcher>(c.clone(), scope.clone(), s.clone()).boxed());
        sets.push(
            service::run::<crate::api::Notifier>(c.clone(), scope.clone(), s.clone()).boxed(),
        );
        if controllers.template_seal.is_some() {
            sets.push(templates::run::<ConfigMap>(c.clone(), scope.clone(), s.clone()).boxed());
            sets.push(templates::run::<Secret>(c, scope, s).boxed());
        }
    }
    futures::future::join_all(sets).await;
}
