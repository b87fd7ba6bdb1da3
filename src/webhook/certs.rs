//! The webhook's certificates: a CA (whose certificate is the webhook configuration's
//! `caBundle`) and a serving certificate it signs, renewed before they expire. Pure: takes
//! the time, returns PEM.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use time::{Duration, OffsetDateTime};

/// PEM texts and when the serving certificate expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
    /// Unix seconds.
    pub not_after: i64,
    /// Unix seconds.
    pub ca_not_after: i64,
}

const CA_LIFETIME: Duration = Duration::days(5 * 365);
const CERT_LIFETIME: Duration = Duration::days(365);

/// An existing CA to sign with, so the `caBundle` stays the same across renewals.
pub struct Authority<'a> {
    pub cert: &'a str,
    pub key: &'a str,
    /// Unix seconds.
    pub not_after: i64,
}

/// A serving certificate for `hosts` (DNS names or IP addresses), signed by `ca` or by a new
/// CA.
pub fn issue(
    hosts: &[String],
    ca: Option<Authority>,
    now: OffsetDateTime,
) -> Result<Bundle, rcgen::Error> {
    let (issuer, ca_key_pem, ca_cert_pem, ca_not_after) = match ca {
        Some(authority) => {
            let key = KeyPair::from_pem(authority.key)?;
            let issuer = Issuer::from_ca_cert_pem(authority.cert, key)?;
            (
                issuer,
                authority.key.to_string(),
                authority.cert.to_string(),
                authority.not_after,
            )
        }
        None => {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, "clair-operator webhook CA");
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params.not_before = now - Duration::hours(1);
            params.not_after = now + CA_LIFETIME;
            let cert = params.self_signed(&key)?;
            let not_after = params.not_after.unix_timestamp();
            let key_pem = key.serialize_pem();
            (Issuer::new(params, key), key_pem, cert.pem(), not_after)
        }
    };
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().cloned().unwrap_or_default(),
    );
    params.not_before = now - Duration::hours(1);
    // Never outlive the CA.
    let ca_end = OffsetDateTime::from_unix_timestamp(ca_not_after).unwrap_or(now + CERT_LIFETIME);
    params.not_after = (now + CERT_LIFETIME).min(ca_end);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_cert: ca_cert_pem,
        ca_key: ca_key_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
        not_after: params.not_after.unix_timestamp(),
        ca_not_after,
    })
}

/// What to do with the bundle found in the Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Valid for long enough.
    Keep,
    /// Issue a new serving certificate from the same CA.
    Certificate,
    /// The CA itself is close to expiry (or unusable): start over.
    Everything,
}

/// Renew a certificate when less than a third of a year of it is left.
pub fn renewal(bundle: &Bundle, now: OffsetDateTime) -> Renewal {
    let margin = Duration::days(120).whole_seconds();
    let now = now.unix_timestamp();
    if bundle.ca_not_after - now < margin {
        Renewal::Everything
    } else if bundle.not_after - now < margin {
        Renewal::Certificate
    } else {
        Renewal::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewed_certificate_keeps_its_ca() {
        let now = OffsetDateTime::now_utc();
        let hosts = vec!["127.0.0.1".to_string(), "webhook.ns.svc".to_string()];
        let first = issue(&hosts, None, now).expect("issue");
        assert_eq!(renewal(&first, now), Renewal::Keep);
        let later = now + Duration::days(300);
        assert_eq!(renewal(&first, later), Renewal::Certificate);
        let authority = Authority {
            cert: &first.ca_cert,
            key: &first.ca_key,
            not_after: first.ca_not_after,
        };
        let second = issue(&hosts, Some(authority), later).expect("renew");
        assert_eq!(second.ca_cert, first.ca_cert);
        assert_ne!(second.cert, first.cert);
        assert!(second.not_after > first.not_after);
        assert_eq!(
            renewal(&first, now + Duration::days(5 * 365 - 30)),
            Renewal::Everything
        );
    }
}
