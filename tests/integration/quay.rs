//! `spec.quay` on the test control plane: the generated config delivers to Quay and signs
//! with the key Quay is given, the Secret of Quay's side and `status.quay` agree with it, an
//! existing Quay's key is taken from the Secret named (and waited for while it is missing),
//! and an interval Clair would silently replace is refused with the field named.

use anyhow::{Context, ensure};
use clair_operator::api::{Clair, Phase};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};

use crate::support::TestEnv;
use crate::support::clair::{
    apply_json, available_clair, condition, create_clair, external_spec, patch_spec, phase_is,
    secret_text, wait_clair,
};

/// A Clair on external databases (the notifier's too), routed at `clair.example.com`, with
/// `quay` and no delivery drop-in: `spec.quay` is the delivery.
fn quay_spec(quay: Value) -> Value {
    let mut spec = external_spec();
    spec.as_object_mut().map(|s| s.remove("dropins"));
    spec["routing"] = json!({"kind": "Ingress", "host": "clair.example.com"});
    spec["quay"] = quay;
    spec
}

async fn generated_config(client: &kube::Client, ns: &str) -> anyhow::Result<Value> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get("clair-config")
        .await?;
    Ok(serde_json::from_str(&secret_text(&secret, "config.yaml")?)?)
}

async fn quay_side(client: &kube::Client, ns: &str) -> anyhow::Result<Value> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get("clair-quay")
        .await
        .context("Secret clair-quay")?;
    Ok(serde_saphyr::from_str(&secret_text(
        &secret,
        "config.yaml",
    )?)?)
}

pub async fn a_clair_with_quay_delivers_to_it_and_tells_quay_its_side(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let spec = quay_spec(json!({"url": "http://quay-app.quay.svc"}));
    // (Its delivery drop-in is made, and not named: `spec.quay` is the delivery.)
    let ns = available_clair(env, &client, "quay-wired", spec.clone()).await?;
    let clair = Api::<Clair>::namespaced(client.clone(), &ns)
        .get("clair")
        .await?;

    // The generated config: Quay's webhook, a callback under the endpoint, a minute's
    // delivery retries, and the key Quay signs with.
    let config = generated_config(&client, &ns).await?;
    let notifier = &config["notifier"];
    ensure!(
        notifier["webhook"]["target"] == "http://quay-app.quay.svc/secscan/notification",
        "{notifier}"
    );
    ensure!(
        notifier["webhook"]["callback"] == "http://clair.example.com/notifier/api/v1/notification/",
        "{notifier}"
    );
    ensure!(notifier["delivery_interval"] == "1m", "{notifier}");
    let psk = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("clair-psk")
        .await?;
    let generated = secret_text(&psk, "key")?;
    ensure!(config["auth"]["psk"]["key"] == generated.as_str());

    // Quay's side and the status say the same.
    let side = quay_side(&client, &ns).await?;
    ensure!(
        side == json!({
            "FEATURE_SECURITY_SCANNER": true,
            "FEATURE_SECURITY_NOTIFICATIONS": true,
            "SECURITY_SCANNER_V4_ENDPOINT": "http://clair.example.com",
            "SECURITY_SCANNER_V4_PSK": generated,
        }),
        "{side}"
    );
    let status = clair
        .status
        .as_ref()
        .and_then(|s| s.quay.as_ref())
        .context("status.quay")?;
    ensure!(status.endpoint == "http://clair.example.com", "{status:?}");
    ensure!(status.config_secret == "clair-quay", "{status:?}");
    // No Clair runs on kwok, so the notifier's tables never exist: its deliveries are not
    // counted, and the condition says so (the real node's scan test counts them).
    let deliveries = condition(&clair, "NotificationsDelivered")
        .context("a Clair with a notifier reports NotificationsDelivered")?;
    ensure!(
        deliveries.status == "Unknown"
            && deliveries.reason == "DeliveriesNotChecked"
            && deliveries.message.contains("tables"),
        "{deliveries:?}"
    );

    // An existing Quay's key: named but missing, the Clair waits and says which Secret;
    // once it exists, both sides use it.
    let mut with_key = spec.clone();
    with_key["quay"]["psk"] = json!({"name": "quay-keys", "key": "psk"});
    patch_spec(&client, &ns, "clair", with_key.clone()).await?;
    let waiting = wait_clair(
        &client,
        &ns,
        "clair",
        "ConfigValid False for the missing key",
        |c: &Clair| {
            condition(c, "ConfigValid")
                .is_some_and(|c| c.status == "False" && c.message.contains("spec.quay.psk"))
        },
    )
    .await?;
    let message = &condition(&waiting, "ConfigValid")
        .context("ConfigValid")?
        .message;
    ensure!(message.contains("quay-keys"), "{message}");
    let key = "cXVheSdzIG93biBrZXksIHRoaXJ0eS10d28gYnl0ZXMh";
    apply_json::<Secret>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "quay-keys"}, "stringData": {"psk": key}}),
    )
    .await?;
    wait_clair(
        &client,
        &ns,
        "clair",
        "clair Available on Quay's key",
        phase_is(Phase::Available),
    )
    .await?;
    crate::support::eventually(
        std::time::Duration::from_secs(60),
        "both sides on Quay's key",
        || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let config = generated_config(&client, &ns).await?;
                let side = quay_side(&client, &ns).await?;
                Ok(config["auth"]["psk"]["key"] == key && side["SECURITY_SCANNER_V4_PSK"] == key)
            }
        },
    )
    .await?;
    // The generated key is kept for when Quay's is no longer named.
    let psk = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("clair-psk")
        .await?;
    ensure!(
        secret_text(&psk, "key")? == generated,
        "the generated key was replaced"
    );

    // An interval Clair would replace with an hour, without a word, is refused.
    apply_json::<k8s_openapi::api::core::v1::ConfigMap>(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fast"},
               "data": {"fast.yaml": "notifier:\n  delivery_interval: 30s\n"}}),
    )
    .await?;
    let mut fast = with_key.clone();
    fast["dropins"] = json!([{"configMap": {"name": "fast", "key": "fast.yaml"}}]);
    patch_spec(&client, &ns, "clair", fast).await?;
    let refused = wait_clair(
        &client,
        &ns,
        "clair",
        "ConfigValid False for the interval",
        |c: &Clair| condition(c, "ConfigValid").is_some_and(|c| c.status == "False"),
    )
    .await?;
    let message = &condition(&refused, "ConfigValid")
        .context("ConfigValid")?
        .message;
    ensure!(
        message.contains("notifier.delivery_interval") && message.contains("under a minute"),
        "{message}"
    );
    // The running services kept their config: still Quay's key, a minute's retries.
    let config = generated_config(&client, &ns).await?;
    ensure!(
        config["notifier"]["delivery_interval"] == "1m",
        "{}",
        config["notifier"]
    );
    Ok(())
}

pub async fn quay_without_one_base_url_is_refused_by_the_schema(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let client = env.client().await?;
    let ns = env.namespace("quay-refused").await?;
    let mut no_host = quay_spec(json!({"url": "https://quay.example.com"}));
    no_host["routing"] = json!({"kind": "Ingress"});
    let error = create_clair(&client, &ns, "clair", no_host)
        .await
        .unwrap_err();
    ensure!(
        format!("{error:#}").contains("quay needs one base URL"),
        "{error:#}"
    );
    let with_path = quay_spec(
        json!({"url": "https://quay.example.com", "endpoint": "https://clair.example.com/clair"}),
    );
    let error = create_clair(&client, &ns, "clair", with_path)
        .await
        .unwrap_err();
    ensure!(
        format!("{error:#}").contains("quay.endpoint: a base URL with no path"),
        "{error:#}"
    );
    Ok(())
}

/// The notifier's undelivered notifications, as the external database's check counts them in
/// a real PostgreSQL: not before Clair's tables exist (and said so), then the waiting
/// receipts (not the delivered ones) and the oldest's age, a failed one aged from its update
/// operation; a `receipt` a tenant shaped otherwise is "not known" with the server's reason,
/// never a crash, and the connection check stands.
pub async fn the_notifiers_undelivered_notifications_are_counted_from_its_receipts(
    env: &TestEnv,
) -> anyhow::Result<()> {
    use crate::support::clair::PASSWORD;
    use clair_operator::database::probe::{ProbeOptions, Undelivered, probe};
    let role = format!(
        "{}_notifier",
        env.namespace("receipts").await?.replace('-', "_")
    );
    env.postgres.create_role_and_database(&role, PASSWORD)?;
    let string = env.postgres.connstring(&role, PASSWORD, &role);
    let options = ProbeOptions {
        notifications: true,
        ..Default::default()
    };
    let check = || async {
        probe(&string, options, &crate::support::platform().databases)
            .await
            .map_err(|f| anyhow::anyhow!("the check failed: {}", f.message))?
            .undelivered
            .context("the notifier's check counts its notifications")
    };
    let counted: Result<Undelivered, String> = check().await?;
    ensure!(
        counted
            .as_ref()
            .is_err_and(|why| why.contains("tables are not there yet")),
        "no receipt table yet: {counted:?}"
    );
    // Clair's notifier schema (notifier/migrations/01-init.sql), the parts counted.
    env.postgres.sql_in(
        &role,
        &format!(
            "CREATE TYPE receiptstatus AS ENUM ('created', 'delivered', 'delivery_failed', 'deleted');
             CREATE TABLE notifier_update_operation (uo_id uuid PRIMARY KEY, updater text, ts timestamptz);
             CREATE TABLE receipt (notification_id uuid PRIMARY KEY, uo_id uuid,
                                   status receiptstatus NOT NULL, ts timestamptz, details jsonb);
             ALTER TABLE receipt OWNER TO \"{role}\";
             ALTER TABLE notifier_update_operation OWNER TO \"{role}\";
             INSERT INTO receipt VALUES
               (gen_random_uuid(), gen_random_uuid(), 'created', now() - interval '3 minutes', NULL),
               (gen_random_uuid(), gen_random_uuid(), 'created', now(), NULL),
               (gen_random_uuid(), gen_random_uuid(), 'delivered', now() - interval '1 hour', NULL),
               (gen_random_uuid(), gen_random_uuid(), 'deleted', now() - interval '2 hours', NULL);"
        ),
    )?;
    let undelivered = check().await?.map_err(anyhow::Error::msg)?;
    let oldest = undelivered.oldest.context("the oldest waiting one")?;
    ensure!(
        undelivered.count == 2 && (175..240).contains(&oldest.age.as_secs()),
        "two waiting, the oldest about three minutes old: {undelivered:?}"
    );
    // A receipt marked failed carries the time of its last attempt: its age is its update
    // operation's.
    env.postgres.sql_in(
        &role,
        "INSERT INTO notifier_update_operation VALUES
           ('0b6f2d7e-3a8c-4a51-9d6e-5f1c2b3a4d09', 'u', now() - interval '10 minutes');
         INSERT INTO receipt VALUES (gen_random_uuid(), '0b6f2d7e-3a8c-4a51-9d6e-5f1c2b3a4d09',
           'delivery_failed', now(), NULL);",
    )?;
    let undelivered = check().await?.map_err(anyhow::Error::msg)?;
    let oldest = undelivered.oldest.context("the oldest waiting one")?;
    ensure!(
        undelivered.count == 3 && (595..660).contains(&oldest.age.as_secs()),
        "three waiting, the failed one ten minutes old: {undelivered:?}"
    );
    // Not asked (another service's database): not counted.
    let plain = probe(
        &string,
        Default::default(),
        &crate::support::platform().databases,
    )
    .await
    .map_err(|f| anyhow::anyhow!("{}", f.message))?;
    ensure!(plain.undelivered.is_none(), "{plain:?}");
    // A tenant's own `receipt` of another shape: the check still succeeds, nothing counted,
    // and the server's reason is kept.
    env.postgres.sql_in(
        &role,
        &format!(
            "DROP TABLE receipt; CREATE TABLE receipt (status text, ts text, uo_id uuid);
             ALTER TABLE receipt OWNER TO \"{role}\";
             INSERT INTO receipt VALUES ('created', 'yesterday', NULL);"
        ),
    )?;
    let counted = check().await?;
    ensure!(
        counted
            .as_ref()
            .is_err_and(|why| why.starts_with("counting them failed")),
        "a receipt table of another shape counts nothing, and says why: {counted:?}"
    );
    Ok(())
}
