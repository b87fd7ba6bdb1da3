//! After the whole suite: no Secret value the suite planted (its database passwords) or the
//! operator generated (pre-shared keys, managed database passwords) appears in anything the
//! operator writes where others may read it (Events, the status of every resource,
//! ConfigMaps) or in its log or metrics. Templated ConfigMaps are left out: rendering a
//! Secret's value into them is what their author asked for.

use std::collections::BTreeSet;

use anyhow::ensure;
use clair_operator::api::{Clair, Indexer, Matcher, Notifier, keys};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::support::TestEnv;

/// The values to look for: the suite's own passwords and every generated secret value.
async fn planted_and_generated(client: &Client) -> anyhow::Result<BTreeSet<String>> {
    let mut atoms: BTreeSet<String> = [crate::support::clair::PASSWORD, crate::faults::PASSWORD]
        .map(String::from)
        .into();
    for secret in Api::<Secret>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        let name = secret.name_any();
        // The pre-shared key (`NAME-psk`, key `key`); the passwords (`NAME-database`).
        let secret_key = |key: &str| {
            (name.ends_with("-psk") && key == clair_operator::render::clair::PSK_KEY)
                || (name.ends_with("-database") && key.ends_with("-password"))
        };
        for (key, value) in secret.data.unwrap_or_default() {
            let text = String::from_utf8_lossy(&value.0).into_owned();
            if secret_key(&key) && text.len() >= 12 {
                atoms.insert(text);
            }
        }
    }
    Ok(atoms)
}

async fn statuses<K>(client: &Client, into: &mut Vec<(String, String)>) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Serialize
        + serde::de::DeserializeOwned,
{
    for object in Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        let value = serde_json::to_value(&object)?;
        into.push((
            format!(
                "{} {}/{} status",
                K::kind(&()),
                object.namespace().unwrap_or_default(),
                object.name_any()
            ),
            value["status"].to_string(),
        ));
    }
    Ok(())
}

pub fn no_secret_value_appears_anywhere(env: &TestEnv) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = env.client().await?;
        let atoms = planted_and_generated(&client).await?;
        ensure!(
            atoms.len() > 5,
            "only {} secret values found to look for: the scan would prove little",
            atoms.len()
        );
        let mut places: Vec<(String, String)> = Vec::new();
        for event in Api::<Event>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
        {
            places.push((
                format!(
                    "Event {}/{}",
                    event.namespace().unwrap_or_default(),
                    event.name_any()
                ),
                serde_json::to_string(&event)?,
            ));
        }
        statuses::<Clair>(&client, &mut places).await?;
        statuses::<Indexer>(&client, &mut places).await?;
        statuses::<Matcher>(&client, &mut places).await?;
        statuses::<Notifier>(&client, &mut places).await?;
        for map in Api::<ConfigMap>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
        {
            if map.labels().contains_key(keys::TEMPLATE_CONFIG) {
                continue;
            }
            places.push((
                format!(
                    "ConfigMap {}/{}",
                    map.namespace().unwrap_or_default(),
                    map.name_any()
                ),
                serde_json::to_string(&map.data)?,
            ));
        }
        places.push((
            "the operator's log".to_string(),
            std::fs::read_to_string(env.plane.dir().join("logs/operator.log"))?,
        ));
        places.push((
            "the operator's metrics".to_string(),
            crate::metrics::metrics_text(env)?,
        ));
        let leaks: Vec<String> = places
            .iter()
            .filter(|(_, text)| atoms.iter().any(|atom| text.contains(atom.as_str())))
            .map(|(place, _)| place.clone())
            .collect();
        ensure!(
            leaks.is_empty(),
            "a Secret value appears in: {leaks:?} ({} values looked for in {} places)",
            atoms.len(),
            places.len()
        );
        eprintln!(
            "leak scan: {} secret values, {} places, none found",
            atoms.len(),
            places.len()
        );
        Ok(())
    })
}
