//! The rules of the webhook certificate loop, apart from its I/O: from what one check found
//! (the certificate the Secret holds now) and what the loop remembers, the one thing to do
//! next; and how the outcome of doing it changes what is remembered. A new certificate's CA
//! is published beside the CAs replicas may still serve, and the certificate is served one
//! check later, once the apiserver has had time to see the CA; the earlier CAs go when every
//! replica is seen serving the current one. `register::run` performs the actions.

use super::certs::Bundle;
use super::trust::Trusted;

/// After this many checks finding a replica that still serves an earlier CA, say so.
pub const LONG_OVERLAP: u32 = 10;

/// What the loop remembers between checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// The certificate this replica serves.
    serving: Bundle,
    /// A new certificate whose CA is published but which is not served yet.
    pending: Option<Bundle>,
    /// The CAs the published `caBundle` holds.
    trusted: Trusted,
    /// Checks of an overlap that found a replica still serving an earlier CA.
    waited: u32,
}

/// The one thing to do after a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Serve `0` (its CA was published a check ago); then [`Rotation::served`].
    Serve(Bundle),
    /// Publish `bundle`: the new certificate's CA beside those still trusted; then
    /// [`Rotation::published`] with `certificate`.
    Publish { bundle: String, certificate: Bundle },
    /// Ask the replicas whether every one serves the CA `0`; then [`Rotation::answered`].
    AskReplicas(String),
    /// Check that the configurations still trust `ca`, and restore `bundle` if not (someone
    /// deleted one, or changed its CA): a read each time, a write only then.
    Verify { ca: String, bundle: String },
}

/// What follows the replicas' answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    /// Publish `0`, the current CA alone; then [`Rotation::settled`].
    Settle(String),
    /// Keep the overlap; `warn` once it has lasted [`LONG_OVERLAP`] checks.
    Wait { warn: bool },
}

impl Rotation {
    /// At start: serving `serving`, with the CAs of the bundle already published (a rotation
    /// under way) still trusted.
    pub fn resumed(serving: Bundle, published: Option<&str>) -> Self {
        let trusted = Trusted::resumed(&serving.ca_cert, published);
        Self {
            serving,
            pending: None,
            trusted,
            waited: 0,
        }
    }

    /// The certificate served now.
    pub fn serving(&self) -> &Bundle {
        &self.serving
    }

    /// The `caBundle` to publish.
    pub fn bundle(&self) -> String {
        self.trusted.bundle()
    }

    /// What to do, the Secret now holding `found`.
    pub fn next(&self, found: &Bundle) -> Action {
        if *found != self.serving && self.pending.as_ref() == Some(found) {
            return Action::Serve(found.clone());
        }
        if *found != self.serving {
            return Action::Publish {
                bundle: self.trusted.rotated(&found.ca_cert).bundle(),
                certificate: found.clone(),
            };
        }
        if self.trusted.overlapping() {
            return Action::AskReplicas(self.trusted.current().to_string());
        }
        Action::Verify {
            ca: self.serving.ca_cert.clone(),
            bundle: self.trusted.bundle(),
        }
    }

    /// `certificate` is served.
    pub fn served(&mut self, certificate: Bundle) {
        self.serving = certificate;
        self.pending = None;
    }

    /// The CA of `certificate` is published beside the others: served at the next check.
    pub fn published(&mut self, certificate: Bundle) {
        self.trusted = self.trusted.rotated(&certificate.ca_cert);
        self.pending = Some(certificate);
    }

    /// The replicas' answer to [`Action::AskReplicas`]: whether every one serves the CA.
    pub fn answered(&mut self, all_serve: bool) -> Answered {
        if all_serve {
            return Answered::Settle(self.trusted.settled().bundle());
        }
        self.waited += 1;
        Answered::Wait {
            warn: self.waited == LONG_OVERLAP,
        }
    }

    /// The current CA alone is published: earlier ones are trusted no more.
    pub fn settled(&mut self) {
        self.trusted = self.trusted.settled();
        self.waited = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(ca: &str) -> Bundle {
        Bundle {
            ca_cert: format!("-----BEGIN CERTIFICATE-----\n{ca}\n-----END CERTIFICATE-----"),
            ca_key: String::new(),
            cert: format!("cert of {ca}"),
            key: String::new(),
            not_after: 0,
            ca_not_after: 0,
        }
    }

    #[test]
    fn a_new_ca_is_published_then_served_then_alone_once_every_replica_serves_it() {
        let (old, new) = (certificate("old"), certificate("new"));
        let mut rotation = Rotation::resumed(old.clone(), None);
        assert_eq!(
            rotation.next(&old),
            Action::Verify {
                ca: old.ca_cert.clone(),
                bundle: format!("{}\n", old.ca_cert)
            },
            "nothing changed: the configurations are only checked"
        );
        // The Secret holds a new certificate: its CA is published first, beside the old.
        let Action::Publish {
            bundle,
            certificate,
        } = rotation.next(&new)
        else {
            panic!("a new certificate is published first");
        };
        assert!(bundle.contains(&new.ca_cert) && bundle.contains(&old.ca_cert));
        assert_eq!(certificate, new);
        // A failed publication changes nothing: the same is asked again.
        assert!(matches!(rotation.next(&new), Action::Publish { .. }));
        rotation.published(new.clone());
        // Served at the next check, not before.
        assert_eq!(rotation.serving(), &old);
        assert_eq!(rotation.next(&new), Action::Serve(new.clone()));
        rotation.served(new.clone());
        // Both CAs stay trusted until the replicas all serve the new one.
        assert_eq!(
            rotation.next(&new),
            Action::AskReplicas(new.ca_cert.clone())
        );
        assert_eq!(rotation.answered(false), Answered::Wait { warn: false });
        let Answered::Settle(alone) = rotation.answered(true) else {
            panic!("every replica serves the new CA");
        };
        assert_eq!(alone, format!("{}\n", new.ca_cert));
        rotation.settled();
        assert_eq!(rotation.bundle(), alone);
        assert!(matches!(rotation.next(&new), Action::Verify { .. }));
    }

    #[test]
    fn a_long_overlap_is_warned_of_once() {
        let (old, new) = (certificate("old"), certificate("new"));
        let mut rotation = Rotation::resumed(new.clone(), Some(&old.ca_cert));
        assert_eq!(
            rotation.next(&new),
            Action::AskReplicas(new.ca_cert.clone()),
            "a replica starting mid-rotation keeps the CA others may serve"
        );
        let warnings = (0..3 * LONG_OVERLAP)
            .filter(|_| rotation.answered(false) == Answered::Wait { warn: true })
            .count();
        assert_eq!(warnings, 1);
    }

    #[test]
    fn a_certificate_replaced_again_before_it_was_served_is_published_again() {
        let (old, first, second) = (certificate("old"), certificate("a"), certificate("b"));
        let mut rotation = Rotation::resumed(old.clone(), None);
        rotation.published(first.clone());
        let Action::Publish { bundle, .. } = rotation.next(&second) else {
            panic!("the second certificate's CA is published too");
        };
        for ca in [&old.ca_cert, &first.ca_cert, &second.ca_cert] {
            assert!(bundle.contains(ca.as_str()), "{bundle}");
        }
    }
}
