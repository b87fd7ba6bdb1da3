//! PostgreSQL connection strings as Clair (pgx) reads them: `postgresql://` URLs and
//! `key=value` lists. Parsed here into settings, so that the operator can open a connection
//! with tokio-postgres (which refuses pgx's pool settings and the `verify-*` TLS modes) and
//! read the pool size. Pure; an error never quotes a password.

use std::collections::BTreeMap;
use std::time::Duration;

use percent_encoding::percent_decode_str;

/// What is wrong with a connection string. The string comes from a Secret and a malformed
/// one is exactly where a password ends up in the wrong place (an unquoted space, an
/// unencoded `/` or `@` in a URL): messages say where (the setting's position) and what to
/// do, and never quote any part of the string, not even a key, which may be a fragment of a
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnStringError {
    #[error("the connection string is empty")]
    Empty,
    #[error(
        "setting {0} of the connection string has no `=`: quote a value that holds spaces \
         (password='...')"
    )]
    MissingEquals(usize),
    #[error("setting {0} of the connection string has a quoted value without its closing `'`")]
    UnterminatedQuote(usize),
    #[error("the connection string URL is malformed: {0}")]
    BadUrl(&'static str),
    #[error("`{key}` has an invalid value: {why}")]
    InvalidValue { key: &'static str, why: String },
}

impl ConnStringError {
    pub fn reason(&self) -> &'static str {
        match self {
            ConnStringError::Empty => "Empty",
            ConnStringError::MissingEquals(_) => "MissingEquals",
            ConnStringError::UnterminatedQuote(_) => "UnterminatedQuote",
            ConnStringError::BadUrl(_) => "BadUrl",
            ConnStringError::InvalidValue { .. } => "InvalidValue",
        }
    }
}

/// libpq's `sslmode`, as pgx reads it. pgx's default is `prefer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    Disable,
    Allow,
    #[default]
    Prefer,
    Require,
    /// Verify the chain; libpq does not check the host name.
    VerifyCa,
    /// Verify the chain and the host name.
    VerifyFull,
}

impl TlsMode {
    fn parse(value: &str) -> Result<Self, ConnStringError> {
        Ok(match value {
            "disable" => TlsMode::Disable,
            "allow" => TlsMode::Allow,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => {
                return Err(ConnStringError::InvalidValue {
                    key: "sslmode",
                    why: "it is not one of disable, allow, prefer, require, verify-ca, verify-full"
                        .into(),
                });
            }
        })
    }
}

/// The settings of one connection string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnSettings {
    settings: BTreeMap<String, String>,
}

/// Settings a connection check passes on to tokio-postgres; the rest (pgx's pool settings,
/// `sslrootcert` paths inside the pods, ...) only matter to Clair.
const PASSED_ON: [&str; 6] = [
    "user",
    "password",
    "dbname",
    "application_name",
    "options",
    "target_session_attrs",
];

impl ConnSettings {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    /// The hosts and ports, paired (`host=a,b port=5432` gives both the one port).
    pub fn hosts(&self) -> Result<Vec<(String, u16)>, ConnStringError> {
        let hosts: Vec<&str> = self
            .get("host")
            .filter(|h| !h.is_empty())
            .map_or(vec!["localhost"], |h| h.split(',').collect());
        let ports: Vec<u16> = match self.get("port").filter(|p| !p.is_empty()) {
            None => vec![5432],
            Some(ports) => ports
                .split(',')
                .map(|p| {
                    p.parse().map_err(|_| ConnStringError::InvalidValue {
                        key: "port",
                        why: "it is not a port number (in a URL, a `:`, `/` or `@` in the \
                              password must be percent-encoded)"
                            .into(),
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        if hosts.iter().any(|h| h.starts_with('/')) {
            return Err(ConnStringError::InvalidValue {
                key: "host",
                why: "a host beginning with `/` is a Unix-socket directory, which the \
                      operator cannot check from its own pod: name a host reachable over TCP"
                    .into(),
            });
        }
        if ports.len() != 1 && ports.len() != hosts.len() {
            return Err(ConnStringError::InvalidValue {
                key: "port",
                why: format!("{} ports for {} hosts", ports.len(), hosts.len()),
            });
        }
        Ok(hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), ports[if ports.len() == 1 { 0 } else { i }]))
            .collect())
    }

    pub fn tls_mode(&self) -> Result<TlsMode, ConnStringError> {
        self.get("sslmode")
            .map_or(Ok(TlsMode::default()), TlsMode::parse)
    }

    /// `pool_max_conns`: the most connections one Clair process opens, when set.
    pub fn pool_max_conns(&self) -> Result<Option<u32>, ConnStringError> {
        self.get("pool_max_conns")
            .map(|v| {
                v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    ConnStringError::InvalidValue {
                        key: "pool_max_conns",
                        why: "it is not a positive whole number".into(),
                    }
                })
            })
            .transpose()
    }

    /// A tokio-postgres config for a connection check, with `timeout` to connect. TLS is
    /// left to the caller ([`ConnSettings::tls_mode`]).
    pub fn to_client_config(
        &self,
        timeout: Duration,
    ) -> Result<tokio_postgres::Config, ConnStringError> {
        let mut config = tokio_postgres::Config::new();
        for (host, port) in self.hosts()? {
            config.host(&host);
            config.port(port);
        }
        for key in PASSED_ON {
            let Some(value) = self.get(key) else { continue };
            match key {
                "user" => config.user(value),
                "password" => config.password(value),
                "dbname" => config.dbname(value),
                "application_name" => config.application_name(value),
                "options" => config.options(value),
                _ => match value {
                    "any" => {
                        config.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::Any)
                    }
                    "read-write" => config.target_session_attrs(
                        tokio_postgres::config::TargetSessionAttrs::ReadWrite,
                    ),
                    _ => &mut config,
                },
            };
        }
        if config.get_user().is_none() {
            return Err(ConnStringError::InvalidValue {
                key: "user",
                why: "no user is named; Clair's pods would fall back to their PGUSER".into(),
            });
        }
        config.connect_timeout(timeout);
        config.application_name("clair-operator");
        Ok(config)
    }

    /// Where the database is, for messages: `host:port/dbname`, no credentials.
    pub fn describe(&self) -> String {
        let hosts = self.hosts().unwrap_or_default();
        let hosts: Vec<String> = hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        format!(
            "{}/{}",
            hosts.join(","),
            self.get("dbname")
                .or(self.get("user"))
                .unwrap_or("(default database)")
        )
    }
}

/// Parses a connection string in either form.
pub fn parse(text: &str) -> Result<ConnSettings, ConnStringError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ConnStringError::Empty);
    }
    let settings = if let Some(rest) = text
        .strip_prefix("postgresql://")
        .or_else(|| text.strip_prefix("postgres://"))
    {
        parse_url(rest)?
    } else {
        parse_key_values(text)?
    };
    let parsed = ConnSettings { settings };
    parsed.tls_mode()?;
    parsed.hosts()?;
    parsed.pool_max_conns()?;
    Ok(parsed)
}

fn decode(part: &str) -> Result<String, ConnStringError> {
    percent_decode_str(part)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ConnStringError::BadUrl("a part is not UTF-8 once percent-decoded"))
}

/// `[user[:password]@][host[:port][,...]][/dbname][?key=value&...]`, after the scheme.
fn parse_url(rest: &str) -> Result<BTreeMap<String, String>, ConnStringError> {
    let mut settings = BTreeMap::new();
    if rest.contains('#') {
        return Err(ConnStringError::BadUrl(
            "a `#` must be percent-encoded (%23), in the password too",
        ));
    }
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    // An `@` after the first `/` or `?` is a password cut short by an unencoded `/` or `?`:
    // reading on would put the rest of it into the database name or a setting.
    if path.contains('@') || query.contains('@') {
        return Err(ConnStringError::BadUrl(
            "an `@` after the host list: a `/` or `?` in the user name or password must be \
             percent-encoded (%2F, %3F)",
        ));
    }
    let (userinfo, hostlist) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        if !user.is_empty() {
            settings.insert("user".into(), decode(user)?);
        }
        if let Some(password) = password {
            settings.insert("password".into(), decode(password)?);
        }
    }
    if !hostlist.is_empty() {
        let mut hosts = Vec::new();
        let mut ports = Vec::new();
        for entry in hostlist.split(',') {
            // `[::1]:5432`: brackets around an IPv6 address.
            let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
                let (host, after) = v6.split_once(']').ok_or(ConnStringError::BadUrl(
                    "an IPv6 host lacks its closing `]`",
                ))?;
                (host, after.strip_prefix(':'))
            } else {
                match entry.rsplit_once(':') {
                    Some((h, p)) => (h, Some(p)),
                    None => (entry, None),
                }
            };
            hosts.push(decode(host)?);
            ports.push(port.unwrap_or("5432").to_string());
        }
        settings.insert("host".into(), hosts.join(","));
        settings.insert("port".into(), ports.join(","));
    }
    if !path.is_empty() {
        settings.insert("dbname".into(), decode(path)?);
    }
    for (index, pair) in query.split('&').filter(|p| !p.is_empty()).enumerate() {
        let (key, value) = pair
            .split_once('=')
            .ok_or(ConnStringError::MissingEquals(index + 1))?;
        settings.insert(decode(key)?, decode(value)?);
    }
    Ok(settings)
}

/// `key=value key='quoted \' value'`, as libpq reads it.
fn parse_key_values(text: &str) -> Result<BTreeMap<String, String>, ConnStringError> {
    let mut settings = BTreeMap::new();
    let mut chars = text.chars().peekable();
    for position in 1.. {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(ConnStringError::MissingEquals(position));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(ConnStringError::UnterminatedQuote(position)),
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(ConnStringError::UnterminatedQuote(position)),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        settings.insert(key, value);
    }
    Ok(settings)
}

/// A key=value connection string with each value quoted, for the strings the operator
/// writes itself.
pub fn render(settings: &[(&str, &str)]) -> String {
    settings
        .iter()
        .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` with `key=value` added when it sets no `key` (a string that does not parse is
/// returned as it is: the database check reports it). Key/value strings get ` key=value`;
/// URLs get `?key=value` or `&key=value`.
pub fn with_default(text: &str, key: &str, value: &str) -> String {
    let Ok(settings) = parse(text) else {
        return text.to_string();
    };
    if settings.get(key).is_some() {
        return text.to_string();
    }
    let trimmed = text.trim();
    let added = if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        let separator = if trimmed.contains('?') { '&' } else { '?' };
        format!("{trimmed}{separator}{key}={value}")
    } else {
        format!("{trimmed} {key}={value}")
    };
    // Kept only if it reads back as the same settings plus this one: a string whose end
    // swallows what follows (a dangling escape in a last value) is left as it was.
    let mut expected = settings.settings.clone();
    expected.insert(key.to_string(), value.to_string());
    match parse(&added) {
        Ok(read) if read.settings == expected => added,
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_is_added_only_where_the_string_has_none() {
        for (text, wanted) in [
            ("host=h user=u", "host=h user=u pool_max_conns=6"),
            ("host=h pool_max_conns=12", "host=h pool_max_conns=12"),
            ("postgresql://u@h/d", "postgresql://u@h/d?pool_max_conns=6"),
            (
                "postgres://u@h/d?sslmode=verify-full",
                "postgres://u@h/d?sslmode=verify-full&pool_max_conns=6",
            ),
            (
                "postgresql://u@h/d?pool_max_conns=2",
                "postgresql://u@h/d?pool_max_conns=2",
            ),
            ("", ""),
            // A dangling escape would take the added setting into the password.
            (r"host=h password=abc\", r"host=h password=abc\"),
        ] {
            let rendered = with_default(text, "pool_max_conns", "6");
            assert_eq!(rendered, wanted, "{text}");
            if !text.is_empty() && !text.ends_with('\\') {
                let parsed = parse(&rendered).unwrap();
                assert!(parsed.pool_max_conns().unwrap().is_some(), "{rendered}");
            }
        }
    }

    #[test]
    fn url_form() {
        let s = parse("postgresql://clair:p%40ss@db.example.com:6432/indexer?sslmode=verify-full&pool_max_conns=12").unwrap();
        assert_eq!(s.get("user"), Some("clair"));
        assert_eq!(s.get("password"), Some("p@ss"));
        assert_eq!(s.hosts().unwrap(), vec![("db.example.com".into(), 6432)]);
        assert_eq!(s.get("dbname"), Some("indexer"));
        assert_eq!(s.tls_mode().unwrap(), TlsMode::VerifyFull);
        assert_eq!(s.pool_max_conns().unwrap(), Some(12));
        assert_eq!(s.describe(), "db.example.com:6432/indexer");
    }

    #[test]
    fn key_value_form_with_quotes() {
        let s = parse(r"host=10.0.0.1 port = 5433 user=matcher password='it\'s secret' dbname=m sslmode=disable").unwrap();
        assert_eq!(s.get("password"), Some("it's secret"));
        assert_eq!(s.hosts().unwrap(), vec![("10.0.0.1".into(), 5433)]);
        assert_eq!(s.tls_mode().unwrap(), TlsMode::Disable);
        assert_eq!(s.pool_max_conns().unwrap(), None);
    }

    #[test]
    fn rendered_strings_read_back() {
        let text = render(&[("host", "h"), ("password", r"a'b\c d"), ("user", "u")]);
        let s = parse(&text).unwrap();
        assert_eq!(s.get("password"), Some(r"a'b\c d"));
        assert_eq!(s.get("user"), Some("u"));
    }

    #[test]
    fn multiple_hosts_and_ipv6() {
        let s = parse("postgres://u@[::1]:5432,db2:5433/x").unwrap();
        assert_eq!(
            s.hosts().unwrap(),
            vec![("::1".into(), 5432), ("db2".into(), 5433)]
        );
    }

    #[test]
    fn errors_say_where_never_the_password() {
        for (text, needle) in [
            ("", "empty"),
            ("host=h password", "setting 2"),
            ("host=h password='hunter2", "setting 2"),
            ("host=h sslmode=sometimes password=hunter2", "sslmode"),
            ("postgres://u:hunter2@h:notaport/db", "port"),
            ("host=h pool_max_conns=0 password=hunter2", "pool_max_conns"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
            assert!(!e.contains("hunter2"), "{text}: {e}");
        }
    }

    /// Malformed strings with a marker password in every awkward place: no error message may
    /// hold four characters of it in a row.
    pub(crate) const MARKER: &str = "Pw9Marker";

    pub(crate) fn malformed_corpus() -> Vec<String> {
        let m = MARKER;
        vec![
            format!("host=h user=u password={m} x"),
            format!("host=h user=u password=a {m}"),
            format!("host=h user=u password=a {m}='b"),
            format!("host=h user=u password='{m}"),
            format!("host=h user=u password={m}\\ sslmode={m}"),
            format!("host=h port={m} user=u"),
            format!("host=h pool_max_conns={m} user=u"),
            format!("host=h sslmode={m} user=u"),
            format!("postgres://u:{m}/x@h/db"),
            format!("postgres://u:{m}?x@h/db"),
            format!("postgres://u:{m}#x@h/db"),
            format!("postgres://u:{m}@h:{m}/db"),
            format!("postgres://u:a/{m}@h/db"),
            format!("postgres://u:{m}@h/db?{m}"),
            format!("postgres://u:{m}@h/db?sslmode={m}"),
            format!("postgres://u:{m}@h,h2:1,2,3/db"),
            format!("postgres://u:{m}@[::1/db"),
            format!("postgres://u:%ff{m}@h/db"),
            format!("{m}"),
            format!("{m} {m}"),
        ]
    }

    pub(crate) fn leaks(message: &str) -> bool {
        let chars: Vec<char> = MARKER.chars().collect();
        chars
            .windows(4)
            .any(|w| message.contains(&w.iter().collect::<String>()))
    }

    #[test]
    fn no_malformed_string_puts_its_password_in_a_message() {
        for text in malformed_corpus() {
            let message = match parse(&text) {
                Err(e) => e.to_string(),
                Ok(settings) => match settings.to_client_config(Duration::from_secs(1)) {
                    Err(e) => e.to_string(),
                    Ok(_) => settings.describe(),
                },
            };
            assert!(!leaks(&message), "{text}: {message}");
        }
    }

    #[test]
    fn a_unix_socket_host_is_refused() {
        for text in [
            "host=/var/run/postgresql user=u",
            "postgresql://u@%2Ftmp/db",
        ] {
            let error = parse(text).unwrap_err();
            assert!(
                matches!(error, ConnStringError::InvalidValue { key: "host", .. }),
                "{text}: {error}"
            );
        }
        assert!(parse("host=db,/tmp user=u").is_err());
        assert!(parse("host=db user=u").is_ok());
    }

    #[test]
    fn a_client_config_needs_a_user() {
        let e = parse("host=h dbname=d")
            .unwrap()
            .to_client_config(Duration::from_secs(1))
            .unwrap_err();
        assert!(e.to_string().contains("user"), "{e}");
        let config = parse("host=h user=u dbname=d pool_max_conns=4 sslmode=verify-full")
            .unwrap()
            .to_client_config(Duration::from_secs(1))
            .unwrap();
        assert_eq!(config.get_dbname(), Some("d"));
    }
}
