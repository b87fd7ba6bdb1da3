//! The CAs the apiserver is told to trust for the webhook (`caBundle`): the one whose
//! certificate this replica serves, and, after a rotation, every CA a replica may still
//! serve a certificate of. The earlier ones stay until every replica behind the webhook is
//! seen serving a certificate of the current CA (`replicas::all_serve`), so no replica is
//! ever called by an apiserver that does not trust it. Pure: PEM text in, PEM text out.

/// The CA certificates of a PEM bundle, each as trimmed PEM text.
fn certificates(bundle: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter(|block| block.ends_with(END))
        .filter_map(|block| block.find(BEGIN).map(|at| block[at..].to_string()))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trusted {
    /// The CA (one or more certificates) of the certificate this replica serves.
    current: String,
    /// CAs other replicas may still serve certificates of, oldest first.
    previous: Vec<String>,
}

impl Trusted {
    /// At start: the serving CA, and every other CA of the bundle already published (a
    /// rotation under way, or replicas of an earlier installation still serving), kept until
    /// every replica is seen serving the current one. A replica that starts in the middle of
    /// a rotation therefore never takes trust away from the others.
    pub fn resumed(serving_ca: &str, published: Option<&str>) -> Self {
        let current = serving_ca.trim().to_string();
        let ours = certificates(&current);
        let previous = published
            .map(certificates)
            .unwrap_or_default()
            .into_iter()
            .filter(|ca| !ours.contains(ca))
            .collect();
        Self { current, previous }
    }

    /// After the serving CA became `ca`: the one before stays trusted beside it.
    pub fn rotated(&self, ca: &str) -> Self {
        let ca = ca.trim();
        if ca == self.current {
            return self.clone();
        }
        let mut previous: Vec<String> = self
            .previous
            .iter()
            .chain(std::iter::once(&self.current))
            .flat_map(|block| certificates(block))
            .collect();
        let ours = certificates(ca);
        previous.retain(|c| !ours.contains(c));
        previous.dedup();
        Self {
            current: ca.to_string(),
            previous,
        }
    }

    /// Every replica serves the current CA: the others are trusted no more.
    pub fn settled(&self) -> Self {
        Self {
            current: self.current.clone(),
            previous: Vec::new(),
        }
    }

    /// Whether earlier CAs are still trusted.
    pub fn overlapping(&self) -> bool {
        !self.previous.is_empty()
    }

    /// The CA whose certificates every replica must serve before the overlap ends.
    pub fn current(&self) -> &str {
        &self.current
    }

    /// The `caBundle`: the current CA first, then the earlier ones.
    pub fn bundle(&self) -> String {
        let mut bundle = String::new();
        for block in std::iter::once(&self.current).chain(&self.previous) {
            bundle.push_str(block);
            bundle.push('\n');
        }
        bundle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(name: &str) -> String {
        format!("-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----")
    }

    #[test]
    fn a_replaced_ca_stays_trusted_until_settled() {
        let (old, new) = (pem("OLD"), pem("NEW"));
        let trusted = Trusted::resumed(&format!("{old}\n"), None);
        assert!(!trusted.overlapping());
        assert_eq!(trusted.bundle(), format!("{old}\n"));
        let rotated = trusted.rotated(&new);
        assert!(rotated.overlapping());
        assert_eq!(rotated.bundle(), format!("{new}\n{old}\n"));
        assert_eq!(rotated.current(), new);
        // A renewed certificate of the same CA changes nothing.
        assert_eq!(rotated.rotated(&format!("{new}\n")), rotated);
        assert_eq!(rotated.settled().bundle(), format!("{new}\n"));
    }

    #[test]
    fn rotations_in_a_row_keep_every_earlier_ca_once() {
        let (a, b, c) = (pem("A"), pem("B"), pem("C"));
        let trusted = Trusted::resumed(&a, None).rotated(&b).rotated(&c);
        assert_eq!(trusted.bundle(), format!("{c}\n{a}\n{b}\n"));
        // Back to an earlier CA: it is current, not also previous.
        let back = trusted.rotated(&a);
        assert_eq!(back.bundle(), format!("{a}\n{b}\n{c}\n"));
    }

    #[test]
    fn a_replica_starting_mid_rotation_keeps_what_others_serve() {
        let (old, new) = (pem("OLD"), pem("NEW"));
        let published = format!("{new}\n{old}\n");
        let resumed = Trusted::resumed(&new, Some(&published));
        assert!(resumed.overlapping());
        assert_eq!(resumed.bundle(), published);
        // Nothing else published: nothing kept.
        assert!(!Trusted::resumed(&new, Some(&format!("{new}\n"))).overlapping());
        // Text around the certificates (comments some tools write) is not a certificate.
        let noisy = format!("# CA\n{new}\n\n{old}\ntrailing");
        assert_eq!(Trusted::resumed(&new, Some(&noisy)).bundle(), published);
    }
}
