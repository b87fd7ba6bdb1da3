//! Attacks by a tenant who may write ConfigMaps, Secrets and the operator's resources in
//! their own namespace, tried on the real control plane: each must fail, and the operator
//! must keep serving everyone else.

use anyhow::{Context, ensure};
use clair_operator::api::Phase;
use clair_operator::api::labels::selects;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use crate::support::TestEnv;
use crate::support::clair::{
    apply_json, condition, create_clair, external_databases, external_inputs, external_spec,
    notifier_dropin, phase_is, wait_clair,
};

/// A JSON Patch drop-in (JSON is YAML) of `copies` operations that each double an array:
/// 2^`copies` elements if applied. About 3 KB.
fn doubling_patch(copies: usize) -> String {
    let mut operations =
        vec![json!({"op": "add", "path": "/bomb", "value": ["0123456789abcdef0123456789abcdef"]})];
    operations
        .extend((0..copies).map(|_| json!({"op": "copy", "from": "/bomb", "path": "/bomb/-"})));
    Value::Array(operations).to_string()
}

pub async fn config_bombs_are_refused_and_the_operator_keeps_serving(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("bombs").await?;
    external_inputs(env, &client, &ns).await?;
    apply_json::<ConfigMap>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bomb"},
               "data": {"bomb.yaml-patch": doubling_patch(40)}}),
    )
    .await?;

    // A Clair that takes the bomb as a drop-in: refused, naming the limit, nothing runs.
    let mut bombed = external_spec();
    bombed["dropins"]
        .as_array_mut()
        .context("dropins")?
        .push(json!({"configMap": {"name": "bomb", "key": "bomb.yaml-patch"}}));
    create_clair(&client, &ns, "bombed", bombed).await?;
    let clair = wait_clair(&client, &ns, "bombed", "ConfigValid=False", |c| {
        condition(c, "ConfigValid").is_some_and(|c| c.status == "False")
    })
    .await?;
    let config = condition(&clair, "ConfigValid").context("no ConfigValid")?;
    ensure!(
        config.message.contains("1 MiB") && config.message.contains("bomb.yaml-patch"),
        "the condition names neither the limit nor the drop-in: {config:?}"
    );
    ensure!(
        clair.status.as_ref().and_then(|s| s.phase) == Some(Phase::Pending),
        "{:?}",
        clair.status
    );

    // The operator is still there for everyone else.
    create_clair(&client, &ns, "fine", external_spec()).await?;
    wait_clair(
        &client,
        &ns,
        "fine",
        "the other Clair Available",
        phase_is(Phase::Available),
    )
    .await?;

    // The templating webhook refuses a template that repeats a large value ten thousand times.
    let _templating = crate::support::CLUSTER_WIDE_CHANGES.read().await;
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  value: {}\n",
        "x".repeat(200 * 1024)
    );
    let apply = ["apply", "--server-side", "-f", "-"];
    ensure!(env.kubectl_run(&ns, &apply, Some(&big))?.success);
    let references = vec!["configmap://big/value"; 10_000].join(", ");
    let template = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: exploded\n  labels:\n    clair.projectquay.io/template-config: \"true\"\n  annotations:\n    clair.projectquay.io/template-input: config.yaml.in\n    clair.projectquay.io/template-output: config.yaml\ndata:\n  config.yaml.in: |\n    a: [{references}]\n"
    );
    let refused = env.kubectl_run(&ns, &apply, Some(&template))?;
    ensure!(
        !refused.success && refused.stderr.contains("1 MiB"),
        "the template bomb was not refused for its size: {}",
        refused.stderr
    );
    Ok(())
}

/// The marker password planted in every malformed connection string below.
const MARKER: &str = "Pw9Marker";

/// Whether `text` holds four characters of [`MARKER`] in a row.
fn leaks(text: &str) -> bool {
    let chars: Vec<char> = MARKER.chars().collect();
    chars
        .windows(4)
        .any(|w| text.contains(&w.iter().collect::<String>()))
}

/// Connection strings a hurried user writes: a password with a space, a quote left open, an
/// unencoded `/`, `?`, `#` or `@` in a URL, a password where a port or a mode belongs.
fn malformed_strings() -> Vec<String> {
    let m = MARKER;
    vec![
        format!("host=db user=u password={m} x"),
        format!("host=db user=u password=a {m}"),
        format!("host=db user=u password='{m}"),
        format!("host=db port={m} user=u"),
        format!("host=db sslmode={m} user=u password=p"),
        format!("host=db pool_max_conns={m} user=u"),
        format!("postgres://u:{m}/x@db/clair"),
        format!("postgres://u:{m}?x@db/clair"),
        format!("postgres://u:{m}#x@db/clair"),
        format!("postgres://u:a/{m}@db/clair"),
        format!("postgres://u:{m}@db:{m}/clair"),
        format!("postgres://u:p@db/clair?{m}"),
    ]
}

pub async fn no_malformed_connection_string_leaks_its_password(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Event, Secret};
    use kube::api::{Api, ListParams};

    let client = env.client().await?;
    let ns = env.namespace("leaks").await?;
    notifier_dropin(&client, &ns, "http://quay.example.com/notify").await?;
    let strings = malformed_strings();
    for (i, text) in strings.iter().enumerate() {
        apply_json::<Secret>(
            &client,
            &ns,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("db-{i}")},
                   "stringData": {"indexer": text, "matcher": text, "notifier": text}}),
        )
        .await?;
        let mut spec = external_spec();
        for service in ["indexer", "matcher", "notifier"] {
            spec["database"]["external"][service]["name"] = json!(format!("db-{i}"));
        }
        create_clair(&client, &ns, &format!("c-{i}"), spec).await?;
    }
    for (i, text) in strings.iter().enumerate() {
        let clair = wait_clair(
            &client,
            &ns,
            &format!("c-{i}"),
            "DatabaseReady=False",
            |c| condition(c, "DatabaseReady").is_some_and(|d| d.status == "False"),
        )
        .await?;
        let database = condition(&clair, "DatabaseReady").context("DatabaseReady")?;
        ensure!(
            database.reason == "DatabaseMisconfigured",
            "c-{i} ({text}): {database:?}"
        );
    }
    // A drop-in kept in a Secret with a bad value: the condition names the field, not the
    // value.
    external_databases(env, &client, &ns).await?;
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret-dropin"},
               "stringData": {"extra.yaml": format!("log_level: {MARKER}\n")}}),
    )
    .await?;
    let mut spec = external_spec();
    spec["dropins"]
        .as_array_mut()
        .context("dropins")?
        .push(json!({"secret": {"name": "secret-dropin", "key": "extra.yaml"}}));
    create_clair(&client, &ns, "dropin", spec).await?;
    let clair = wait_clair(&client, &ns, "dropin", "ConfigValid=False", |c| {
        condition(c, "ConfigValid").is_some_and(|c| c.status == "False")
    })
    .await?;
    let config = condition(&clair, "ConfigValid").context("ConfigValid")?;
    ensure!(config.message.contains("log_level"), "{config:?}");

    // Everything the operator wrote that others may read, and everything it logged.
    let mut readable = Vec::new();
    let clairs: Api<clair_operator::api::Clair> = Api::namespaced(client.clone(), &ns);
    for clair in clairs.list(&ListParams::default()).await? {
        readable.push(serde_json::to_string(&clair.status)?);
    }
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    for event in events.list(&ListParams::default()).await? {
        readable.push(serde_json::to_string(&event)?);
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for map in maps.list(&ListParams::default()).await? {
        readable.push(serde_json::to_string(&map.data)?);
    }
    readable.push(std::fs::read_to_string(
        env.plane.dir().join("logs/operator.log"),
    )?);
    let leaked: Vec<&String> = readable.iter().filter(|t| leaks(t)).collect();
    ensure!(
        leaked.is_empty(),
        "a fragment of the password appeared in: {}",
        leaked
            .iter()
            .map(|t| t.chars().take(400).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    Ok(())
}

pub async fn a_resource_may_not_name_a_secret_its_writer_cannot_read(
    env: &TestEnv,
) -> anyhow::Result<()> {
    crate::webhook::webhook_registered(env).await?;
    let client = env.client().await?;
    let ns = env.namespace("borrowed-secret").await?;
    external_databases(env, &client, &ns).await?;
    // alice may write Clairs here, and read ConfigMaps, but no Secret.
    let rbac = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: clair-writer\nrules:\n- apiGroups: [clair.projectquay.io]\n  resources: [clairs]\n  verbs: [create, get, update, patch]\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: alice-clair-writer\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: clair-writer\nsubjects:\n- kind: User\n  name: alice\n";
    let apply = ["apply", "--server-side", "-f", "-"];
    ensure!(env.kubectl_run(&ns, &apply, Some(rbac))?.success);
    let clair = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Clair\nmetadata:\n  name: borrowed\nspec:\n  notifier:\n    enabled: false\n  database:\n    external:\n      indexer: {name: databases, key: indexer}\n      matcher: {name: databases, key: matcher}\n";
    for dry_run in [true, false] {
        let mut args = vec!["create", "-f", "-"];
        if dry_run {
            args.push("--dry-run=server");
        }
        let refused = env.kubectl_run_as("alice", &ns, &args, Some(clair))?;
        ensure!(
            !refused.success
                && refused.stderr.contains("Secret databases")
                && refused.stderr.contains("may not get"),
            "alice named a Secret she may not read (dry run {dry_run}): {}",
            refused.stderr
        );
        ensure!(
            !leaks(&refused.stderr) && !refused.stderr.contains("password"),
            "{}",
            refused.stderr
        );
    }
    // The administrator, who may read it, may name it.
    let created = env.kubectl_run(&ns, &["create", "-f", "-"], Some(clair))?;
    ensure!(created.success, "{}", created.stderr);
    // The operator reads a caBundle Secret too (to check the databases), and the tracing
    // headers Secret (its values go into the pods' config and out to the collector the writer
    // names): the same rule. A service resource's headers Secret is in `other_secrets` alike
    // (unit test in src/webhook/resources.rs).
    let managed = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Clair\nmetadata:\n  name: other\nspec:\n  notifier:\n    enabled: false\n  database:\n    managed: {}\n";
    for (field, secret, extra) in [
        (
            "caBundle",
            "corporate-ca",
            "  pod:\n    caBundle: {secret: corporate-ca}\n",
        ),
        (
            "tracing headers",
            "databases",
            "  tracing:\n    endpoint: http://collector.observability:4318\n    headersSecret: databases\n",
        ),
    ] {
        let refused = env.kubectl_run_as(
            "alice",
            &ns,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&format!("{managed}{extra}")),
        )?;
        ensure!(
            !refused.success
                && refused.stderr.contains(&format!("Secret {secret}"))
                && refused.stderr.contains("may not get"),
            "alice named a {field} Secret she may not read: {}",
            refused.stderr
        );
    }
    Ok(())
}

pub async fn images_outside_the_allow_list_are_refused(env: &TestEnv) -> anyhow::Result<()> {
    crate::webhook::webhook_registered(env).await?;
    let ns = env.namespace("images").await?;
    let indexer = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: evil\nspec:\n  image: evil.example/clair:1\n  config:\n    root:\n      configMap: {name: cfg, key: config.yaml}\n";
    for dry_run in [true, false] {
        let mut args = vec!["create", "-f", "-"];
        if dry_run {
            args.push("--dry-run=server");
        }
        let refused = env.kubectl_run(&ns, &args, Some(indexer))?;
        ensure!(
            !refused.success
                && refused.stderr.contains("spec.image evil.example/clair:1")
                && refused.stderr.contains("--allowed-images"),
            "an image outside the allow-list was accepted (dry run {dry_run}): {}",
            refused.stderr
        );
    }
    let allowed = indexer.replace("evil.example/clair:1", "quay.io/projectquay/clair:4.9.0");
    let created = env.kubectl_run(&ns, &["create", "-f", "-"], Some(&allowed))?;
    ensure!(created.success, "{}", created.stderr);
    Ok(())
}

/// A KEDA address that would have replaced KEDA's own query with the writer's (issue 54
/// point 2: `.../api/v1/query?query=<PromQL>#` made KEDA run any PromQL against a shared
/// Prometheus): refused when written, naming the field, for a service resource and a
/// Clair's service alike. The webhook and the controllers ask the same rule
/// (`render::autoscaling::prometheus_address`, unit-tested), for objects the CRD's pattern
/// of an older install let in.
pub async fn a_keda_address_cannot_carry_a_query(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("keda-address").await?;
    let attack = "http://prometheus-k8s.monitoring.svc:9090/api/v1/query?query=count(kube_secret_info%7Bnamespace%3D%22victim%22%7D)#";
    let keda = |address: &str| json!({"engine": "KEDA", "maxReplicas": 3, "keda": {"prometheusAddress": address}});
    let indexer = |address: &str| {
        json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Indexer",
               "metadata": {"name": "scaled"},
               "spec": {"config": {"root": {"configMap": {"name": "cfg", "key": "config.yaml"}}},
                        "autoscaling": keda(address)}})
    };
    let clair = |address: &str| {
        let mut spec = external_spec();
        spec["indexer"] = json!({"autoscaling": keda(address)});
        json!({"apiVersion": "clair.projectquay.io/v1alpha1", "kind": "Clair",
               "metadata": {"name": "scaled"}, "spec": spec})
    };
    let cases = [
        (
            indexer(attack),
            indexer("http://prometheus.monitoring.svc:9090/"),
            "spec.autoscaling.keda.prometheusAddress",
        ),
        (
            clair(attack),
            clair("http://prometheus.monitoring.svc:9090"),
            "spec.indexer.autoscaling.keda.prometheusAddress",
        ),
    ];
    for (bad, good, field) in cases {
        let refused = env.kubectl_run(
            &ns,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&bad.to_string()),
        )?;
        ensure!(
            !refused.success && refused.stderr.contains(field),
            "a KEDA address carrying a query was not refused naming {field}: {}",
            refused.stderr
        );
        let accepted = env.kubectl_run(
            &ns,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&good.to_string()),
        )?;
        ensure!(
            accepted.success,
            "a plain KEDA address was refused: {}",
            accepted.stderr
        );
    }
    Ok(())
}

/// Names that would have written forged labels into `/metrics` (a path segment taken as a
/// subresource) or broken its parsing (a trailing quote or backslash): refused by the CRDs'
/// name patterns before the operator sees them; the label values are a closed set anyway
/// (unit test `a_name_in_the_path_never_becomes_a_label` in `src/metrics/client.rs`).
pub async fn names_that_would_forge_metrics_are_refused(env: &TestEnv) -> anyhow::Result<()> {
    let ns = env.namespace("names").await?;
    let cases = [
        (
            "x/y\\\",namespace=\\\"kube-system",
            "spec.config.root.configMap.name",
        ),
        ("ends-in-a-quote\\\"", "spec.config.root.configMap.name"),
        ("ends-in-a-backslash\\\\", "spec.config.root.configMap.name"),
    ];
    for (name, field) in cases {
        let indexer = format!(
            "{{\"apiVersion\": \"clair.projectquay.io/v1alpha1\", \"kind\": \"Indexer\", \"metadata\": {{\"name\": \"forger\"}}, \"spec\": {{\"config\": {{\"root\": {{\"configMap\": {{\"name\": \"{name}\", \"key\": \"config.yaml\"}}}}}}}}}}"
        );
        let refused = env.kubectl_run(
            &ns,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&indexer),
        )?;
        ensure!(
            !refused.success
                && refused.stderr.contains(field)
                && refused.stderr.contains("should match"),
            "a config name {name:?} was not refused naming {field}: {}",
            refused.stderr
        );
    }
    let fine = "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: fine\nspec:\n  config:\n    root:\n      configMap: {name: clair.config-1, key: config.yaml}\n";
    let accepted = env.kubectl_run(&ns, &["create", "--dry-run=server", "-f", "-"], Some(fine))?;
    ensure!(accepted.success, "{}", accepted.stderr);
    Ok(())
}

/// Names the operator derives must be valid, and what it did not make is never taken over:
/// a name whose derived names cannot be made is refused when written, naming the limit; an
/// object of the same name someone else made is left as it is.
pub async fn names_that_cannot_be_derived_are_refused_and_nothing_is_adopted(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let ns = env.namespace("derived").await?;
    let create = ["create", "--dry-run=server", "-f", "-"];
    let clair = |name: &str, per_service: bool| {
        format!(
            "apiVersion: clair.projectquay.io/v1alpha1\nkind: Clair\nmetadata:\n  name: {name}\nspec:\n  database:\n    managed: {{perService: {per_service}}}\n"
        )
    };
    for (name, per_service, limit) in [
        ("a".repeat(44), false, "at most 43 characters"),
        ("b".repeat(35), true, "at most 34 characters"),
        ("1clair".to_string(), false, "begins with a letter"),
    ] {
        let refused = env.kubectl_run(&ns, &create, Some(&clair(&name, per_service)))?;
        ensure!(
            !refused.success && refused.stderr.contains(limit),
            "a Clair named {name:?} (perService {per_service}) was not refused naming {limit:?}: {}",
            refused.stderr
        );
    }
    let fine = env.kubectl_run(&ns, &create, Some(&clair(&"c".repeat(43), false)))?;
    ensure!(fine.success, "{}", fine.stderr);
    // A valid config, so the Indexer goes on to write its Service (and meets the guard).
    crate::services::config_map(env, &ns, "cfg", crate::services::CONFIG).await?;
    let indexer = |name: &str| {
        format!(
            "apiVersion: clair.projectquay.io/v1alpha1\nkind: Indexer\nmetadata:\n  name: {name}\nspec:\n  config:\n    root:\n      configMap: {{name: cfg, key: config.yaml}}\n"
        )
    };
    let refused = env.kubectl_run(&ns, &create, Some(&indexer("9lives")))?;
    ensure!(
        !refused.success && refused.stderr.contains("begins with a letter"),
        "{}",
        refused.stderr
    );
    // Someone else's Service named as the Indexer's would be: left alone.
    let theirs = "apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\nspec:\n  selector: {app: theirs}\n  ports: [{port: 1234}]\n";
    ensure!(
        env.kubectl_run(&ns, &["create", "-f", "-"], Some(theirs))?
            .success
    );
    let created = env.kubectl_run(&ns, &["create", "-f", "-"], Some(&indexer("taken")))?;
    ensure!(created.success, "{}", created.stderr);
    // The reconcile that met the Service says so on the Indexer.
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "a Warning that the Service is not the Indexer's",
        || async {
            let notes = crate::services::event_notes(env, &ns, "taken").await?;
            Ok(notes
                .iter()
                .any(|n| n.contains("Service taken exists and is not this resource's")))
        },
    )
    .await?;
    let service = kube::Api::<Service>::namespaced(env.client().await?, &ns)
        .get("taken")
        .await?;
    ensure!(
        service.metadata.owner_references.is_none()
            && service
                .spec
                .as_ref()
                .and_then(|s| s.ports.as_ref())
                .is_some_and(|p| p[0].port == 1234),
        "someone else's Service was taken over: {:?}",
        service.metadata
    );
    Ok(())
}

pub async fn a_template_the_webhook_never_saw_is_not_rendered(env: &TestEnv) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

    crate::webhook::webhook_registered(env).await?;
    // The templating webhook goes away for a moment: no other test may need it meanwhile.
    let _exclusive = crate::support::CLUSTER_WIDE_CHANGES.write().await;
    let client = env.client().await?;
    let ns = env.namespace("unsealed").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "victim"},
               "stringData": {"dsn": "first-value"}}),
    )
    .await?;
    let template = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name,
                            "labels": {"clair.projectquay.io/template-config": "true"},
                            "annotations": {"clair.projectquay.io/template-input": "config.yaml.in",
                                            "clair.projectquay.io/template-output": "config.yaml"}},
               "stringData": {"config.yaml.in": "matcher:\n  connstring: secret://victim/dsn\n"}})
    };
    // Through the webhook: rendered (the writer may read the Secret) and sealed.
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(template("honest"))?,
        )
        .await?;
    // The webhook seals it; the re-render controller writes the output.
    crate::support::eventually(
        std::time::Duration::from_secs(30),
        "honest rendered",
        || {
            let ns = ns.clone();
            async move {
                Ok(crate::webhook::output_of(env, &ns, "honest")
                    .await?
                    .is_some_and(|t| t.contains("first-value")))
            }
        },
    )
    .await?;

    // Past the webhook: written while its configuration is gone (the operator restores it
    // within a second, so try until one write lands in the gap).
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut unseen = false;
    for _ in 0..20 {
        let _ = configurations
            .delete(
                clair_operator::webhook::CONFIGURATION_NAME,
                &DeleteParams::default(),
            )
            .await;
        let created = secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(template("sneaky"))?,
            )
            .await?;
        // The webhook seals all it admits: no seal, no webhook.
        if !created
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(clair_operator::templating::seal::SEAL))
        {
            unseen = true;
            break;
        }
        secrets.delete("sneaky", &DeleteParams::default()).await?;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    ensure!(unseen, "no write got past the webhook in twenty tries");
    crate::support::eventually(
        std::time::Duration::from_secs(30),
        "the templating webhook back",
        || {
            let configurations = configurations.clone();
            async move {
                Ok(configurations
                    .get_opt(clair_operator::webhook::CONFIGURATION_NAME)
                    .await?
                    .is_some())
            }
        },
    )
    .await?;

    // The referenced value changes: the sealed template follows, the unsealed one is never
    // filled in with the operator's access.
    secrets
        .patch(
            "victim",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"dsn": "second-value"}})),
        )
        .await?;
    crate::support::eventually(
        std::time::Duration::from_secs(30),
        "the sealed template re-rendered",
        || {
            let ns = ns.clone();
            async move {
                Ok(crate::webhook::output_of(env, &ns, "honest")
                    .await?
                    .is_some_and(|t| t.contains("second-value")))
            }
        },
    )
    .await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    ensure!(
        crate::webhook::output_of(env, &ns, "sneaky")
            .await?
            .is_none(),
        "a template the webhook never saw was filled in with the operator's access"
    );
    Ok(())
}

pub async fn a_managed_database_can_be_closed_to_all_but_its_clair(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use kube::api::Api;

    let client = env.client().await?;
    let ns = env.namespace("db-policy").await?;
    notifier_dropin(&client, &ns, "http://quay.example.com/notify").await?;
    let spec = json!({
        "database": {"managed": {"networkPolicy": true}},
        "dropins": [{"configMap": {"name": "delivery", "key": "notifier.yaml"}}],
    });
    create_clair(&client, &ns, "clair", spec).await?;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "the database's NetworkPolicy",
        || {
            let policies = policies.clone();
            async move { Ok(policies.get_opt("clair-database").await?.is_some()) }
        },
    )
    .await?;
    let policy = policies.get("clair-database").await?.spec.context("spec")?;
    let peer = policy.ingress.context("ingress")?[0]
        .from
        .clone()
        .context("from")?[0]
        .pod_selector
        .clone()
        .context("selector")?;
    let instances = peer.match_expressions.context("expressions")?[0]
        .values
        .clone()
        .unwrap_or_default();
    ensure!(
        instances == ["clair", "clair-indexer", "clair-matcher", "clair-notifier"],
        "{instances:?}"
    );
    // The policy covers the engine's real pods (their StatefulSet's template labels).
    let engine = Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), &ns);
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "the engine's StatefulSet",
        || {
            let engine = engine.clone();
            async move { Ok(engine.get_opt("clair-database").await?.is_some()) }
        },
    )
    .await?;
    let engine_labels = engine
        .get("clair-database")
        .await?
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.labels)
        .unwrap_or_default();
    ensure!(
        selects(
            &policy.pod_selector.clone().context("podSelector")?,
            &engine_labels
        ),
        "the policy does not cover the engine's pods {engine_labels:?}"
    );
    // Switched off: the policy goes.
    crate::support::clair::patch_spec(
        &client,
        &ns,
        "clair",
        json!({"database": {"managed": {"networkPolicy": false}}}),
    )
    .await?;
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "the NetworkPolicy gone",
        || {
            let policies = policies.clone();
            async move { Ok(policies.get_opt("clair-database").await?.is_none()) }
        },
    )
    .await
}

/// `spec.networkPolicy` (issue 54 point 7): a NetworkPolicy over the Clair's service pods,
/// selecting the labels their Deployments really give them, admitting the Clair's own pods
/// and the named namespaces to the API and the monitoring namespaces to the introspection
/// port; pruned when the field goes (an external database: the engines' objects are left
/// alone). The harness's CNI enforces no policy: what it would admit is read from the objects.
pub async fn a_clairs_services_can_be_closed_to_all_but_whom_it_names(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use kube::api::Api;

    let client = env.client().await?;
    let ns = env.namespace("svc-policy").await?;
    external_inputs(env, &client, &ns).await?;
    let mut spec = crate::support::clair::external_spec();
    spec["networkPolicy"] = json!({"clients": ["quay"], "routers": ["openshift-ingress"]});
    create_clair(&client, &ns, "clair", spec).await?;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    crate::support::eventually(
        std::time::Duration::from_secs(90),
        "the services' NetworkPolicy and the three Deployments",
        || {
            let (policies, deployments) = (policies.clone(), deployments.clone());
            async move {
                let mut all = policies.get_opt("clair-services").await?.is_some();
                for name in ["clair-indexer", "clair-matcher", "clair-notifier"] {
                    all &= deployments.get_opt(name).await?.is_some();
                }
                Ok(all)
            }
        },
    )
    .await?;
    let policy = policies.get("clair-services").await?.spec.context("spec")?;
    let covered = policy.pod_selector.clone().context("podSelector")?;
    let ingress = policy.ingress.clone().context("ingress")?;
    let api_peers = ingress[0].from.clone().context("from")?;
    let own = api_peers[0].pod_selector.clone().context("own pods")?;
    for name in ["clair-indexer", "clair-matcher", "clair-notifier"] {
        let labels = deployments
            .get(name)
            .await?
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.labels)
            .unwrap_or_default();
        ensure!(
            selects(&covered, &labels),
            "the policy does not cover {name}'s pods {labels:?}"
        );
        ensure!(selects(&own, &labels), "{name}'s pods may not call the API");
    }
    let callers = api_peers[1].namespace_selector.clone().context("callers")?;
    let namespace = |name: &str| {
        std::collections::BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            name.to_string(),
        )])
    };
    ensure!(
        selects(&callers, &namespace("quay")) && selects(&callers, &namespace("openshift-ingress"))
    );
    ensure!(
        !selects(&callers, &namespace(&ns)),
        "the namespace itself let in"
    );
    let scrapers = ingress[1].from.clone().context("scrapers")?[0]
        .namespace_selector
        .clone()
        .context("monitoring")?;
    ensure!(selects(&scrapers, &namespace("monitoring")));
    // Switched off: the policy goes.
    crate::support::clair::patch_spec(&client, &ns, "clair", json!({"networkPolicy": null}))
        .await?;
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "the services' NetworkPolicy gone",
        || {
            let policies = policies.clone();
            async move { Ok(policies.get_opt("clair-services").await?.is_none()) }
        },
    )
    .await
}
