//! Where the operator's database checks may connect. A check is a connection from the
//! operator's own network position, past the tenant's egress policies: the platform team
//! names the networks it may reach (`--database-networks`, any by default) and those it never
//! reaches (`--database-networks-refused`), which by default are the operator's own pod
//! (loopback, the unspecified address) and link-local addresses (a cloud's metadata service).
//! The rule is kept on the addresses a name resolves to, the ones then connected to.

use std::net::IpAddr;

use ipnet::IpNet;

/// The networks refused unless the platform says otherwise.
pub const REFUSED_BY_DEFAULT: &[&str] = &[
    "127.0.0.0/8",
    "::1/128",
    "0.0.0.0/8",
    "::/128",
    "169.254.0.0/16",
    "fe80::/10",
];

/// What `--database-networks-refused` takes for "refuse nothing".
pub const NOTHING: &str = "none";

/// The networks checks may reach: in `allowed` (any when empty) and in no `refused` one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Networks {
    allowed: Vec<IpNet>,
    refused: Vec<IpNet>,
}

impl Default for Networks {
    fn default() -> Self {
        Networks {
            allowed: Vec::new(),
            refused: REFUSED_BY_DEFAULT
                .iter()
                .map(|net| net.parse().expect("a valid network"))
                .collect(),
        }
    }
}

impl Networks {
    /// Every address, loopback and link-local too: for an operator run on a workstation
    /// against local databases.
    pub fn any() -> Self {
        Networks {
            allowed: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// The flags' values, each a network (`10.0.0.0/8`) or an address (`10.0.0.5`);
    /// `refused` unset keeps [`REFUSED_BY_DEFAULT`], and [`NOTHING`] refuses nothing.
    pub fn parse(allowed: &[String], refused: Option<&[String]>) -> Result<Self, String> {
        let networks = |flag: &str, values: &[String]| -> Result<Vec<IpNet>, String> {
            values
                .iter()
                .map(|value| value.trim())
                .filter(|value| !value.is_empty() && *value != NOTHING)
                .map(|value| {
                    value
                        .parse::<IpNet>()
                        .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
                        .map(|net| net.trunc())
                        .map_err(|_| {
                            format!(
                                "{flag}: {value:?} is not a network; give networks as \
                                 10.0.0.0/8 or fd00::/8, or addresses, separated by commas"
                            )
                        })
                })
                .collect()
        };
        Ok(Networks {
            allowed: networks("--database-networks", allowed)?,
            refused: match refused {
                Some(refused) => networks("--database-networks-refused", refused)?,
                None => Networks::default().refused,
            },
        })
    }

    /// Whether a check may connect to `address` (an IPv4 address mapped into IPv6 is judged
    /// as the IPv4 one it is).
    pub fn allows(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        !self.refused.iter().any(|net| net.contains(&address))
            && (self.allowed.is_empty() || self.allowed.iter().any(|net| net.contains(&address)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_operators_own_pod_and_link_local_are_refused_by_default() {
        let networks = Networks::default();
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "::",
            "169.254.169.254",
            "fe80::1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!networks.allows(ip(refused)), "{refused}");
        }
        for allowed in ["10.0.0.5", "192.168.1.1", "203.0.113.7", "fd00::5"] {
            assert!(networks.allows(ip(allowed)), "{allowed}");
        }
        assert_eq!(Networks::parse(&[], None).unwrap(), networks);
    }

    #[test]
    fn the_flags_narrow_and_widen_the_reach() {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        let narrowed = Networks::parse(&strings(&["10.0.0.0/8", "fd00::1"]), None).unwrap();
        assert!(narrowed.allows(ip("10.1.2.3")));
        assert!(narrowed.allows(ip("fd00::1")));
        assert!(!narrowed.allows(ip("192.168.1.1")));
        let carved =
            Networks::parse(&strings(&["10.0.0.0/8"]), Some(&strings(&["10.0.5.0/24"]))).unwrap();
        assert!(!carved.allows(ip("10.0.5.9")));
        assert!(!carved.allows(ip("127.0.0.1")));
        let open = Networks::parse(&[], Some(&strings(&[NOTHING]))).unwrap();
        assert_eq!(open, Networks::any());
        assert!(open.allows(ip("127.0.0.1")));
        let refused = Networks::parse(&strings(&["10.0.0.0/33"]), None).unwrap_err();
        assert!(refused.contains("--database-networks:") && refused.contains("10.0.0.0/8"));
    }
}
