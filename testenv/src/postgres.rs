//! A real PostgreSQL server on loopback for the database tests: the machine's PostgreSQL
//! server binaries, a fresh data directory in a temporary folder, password (SCRAM) auth,
//! TLS with a self-signed certificate, stopped on drop and killed with the process that
//! started it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::controlplane::free_ports;
use crate::process::Process;
use crate::{Error, Result, io_error};

/// The superuser the server is initialised with.
pub const SUPERUSER: &str = "postgres";

/// A running server.
pub struct Postgres {
    process: Process,
    bin: PathBuf,
    pub port: u16,
    /// The address connection strings name: loopback, or the address pods reach.
    host: String,
    password: String,
    /// The private CA that signed the server's certificate.
    ca_pem: String,
    /// How to start the server again after [`Postgres::stop`].
    server: Server,
    _dir: tempfile::TempDir,
}

/// The server's command line, kept to start it again on the same data.
struct Server {
    bin: PathBuf,
    data: PathBuf,
    listen: String,
    port: u16,
    sockets: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
    owner: Option<(u32, u32)>,
    log_dir: PathBuf,
}

impl Server {
    fn command(&self) -> Command {
        let mut server = Command::new(self.bin.join("postgres"));
        server
            .arg("-D")
            .arg(&self.data)
            .args(["-c", &format!("listen_addresses={}", self.listen)])
            .args(["-c", &format!("port={}", self.port)])
            .args([
                "-c",
                &format!("unix_socket_directories={}", self.sockets.display()),
            ])
            .args([
                "-c",
                "max_connections=50",
                "-c",
                "fsync=off",
                "-c",
                "ssl=on",
            ])
            .args(["-c", "log_connections=on"])
            .arg("-c")
            .arg(format!("ssl_cert_file={}", self.cert_file.display()))
            .arg("-c")
            .arg(format!("ssl_key_file={}", self.key_file.display()));
        as_server_user(&mut server, self.owner);
        server
    }
}

/// A CA, and a serving certificate it signs for `hosts`: (CA PEM, certificate PEM, key PEM).
fn private_ca_certificate(hosts: Vec<String>) -> Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "clair-testenv private CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "clair-testenv PostgreSQL");
    let cert = params.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

/// The newest `/usr/lib/postgresql/N/bin` holding `initdb` and `postgres`.
fn server_binaries() -> Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        Error::Missing(
            "PostgreSQL server binaries (/usr/lib/postgresql/N/bin/initdb and postgres) are not \
             installed: run scripts/install-deps, or apt-get install postgresql"
                .into(),
        )
    })
}

/// PostgreSQL refuses to run as root: when the tests run as root, the server runs as
/// `nobody`.
fn unprivileged() -> Option<(u32, u32)> {
    // SAFETY: getuid has no preconditions.
    (unsafe { libc::getuid() } == 0).then_some((65534, 65534))
}

fn chown(path: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io_error("path")(std::io::Error::other(e)))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::chown(c.as_ptr(), uid, gid) } != 0 {
        return Err(io_error(format!("chown {}", path.display()))(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn as_server_user(command: &mut Command, owner: Option<(u32, u32)>) {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

impl Postgres {
    /// Initialises and starts a server on loopback; its log goes to `log_dir/postgres.log`.
    pub fn start(log_dir: &Path) -> Result<Self> {
        Self::start_reachable(log_dir, None)
    }

    /// As [`Postgres::start`], also listening on `address` and accepting password logins
    /// from `clients` (a CIDR): pods on a real node reach it on the node's address.
    pub fn start_reachable(log_dir: &Path, from: Option<(&str, &str)>) -> Result<Self> {
        let bin = server_binaries()?;
        let owner = unprivileged();
        let dir = tempfile::Builder::new()
            .prefix("clair-testenv-pg-")
            .tempdir()
            .map_err(io_error("create the PostgreSQL folder"))?;
        chown(dir.path(), owner)?;
        let data = dir.path().join("data");
        let password = random_password()?;
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, &password).map_err(io_error("write the password file"))?;
        chown(&pwfile, owner)?;
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("--pgdata")
            .arg(&data)
            .args(["--username", SUPERUSER, "--auth", "scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--encoding", "UTF8", "--no-sync"])
            .stdin(Stdio::null());
        as_server_user(&mut initdb, owner);
        let output = initdb.output().map_err(io_error("run initdb"))?;
        if !output.status.success() {
            return Err(Error::Missing(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        // TLS on, with a certificate of a private CA (`ca_pem`) for loopback and the address
        // pods reach: clients choose with sslmode, and trust it only when given the CA.
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        hosts.extend(from.map(|(address, _)| address.to_string()));
        let (ca_pem, cert_pem, key_pem) = private_ca_certificate(hosts)?;
        let cert_file = dir.path().join("server.crt");
        let key_file = dir.path().join("server.key");
        std::fs::write(&cert_file, cert_pem).map_err(io_error("write server.crt"))?;
        std::fs::write(&key_file, key_pem).map_err(io_error("write server.key"))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))
                .map_err(io_error("chmod server.key"))?;
        }
        chown(&cert_file, owner)?;
        chown(&key_file, owner)?;
        let mut listen = "127.0.0.1".to_string();
        if let Some((address, clients)) = from {
            listen = format!("{listen},{address}");
            let hba = data.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).map_err(io_error("read pg_hba.conf"))?;
            // Pods, and the host itself when it connects to that address.
            text.push_str(&format!(
                "host all all {clients} scram-sha-256\nhost all all {address}/32 scram-sha-256\n"
            ));
            std::fs::write(&hba, text).map_err(io_error("write pg_hba.conf"))?;
        }
        let [port] = free_ports()?;
        let server = Server {
            bin: bin.clone(),
            data,
            listen,
            port,
            sockets: dir.path().to_path_buf(),
            cert_file,
            key_file,
            owner,
            log_dir: log_dir.to_path_buf(),
        };
        let process = Process::spawn_command("postgres", server.command(), log_dir)?;
        let mut postgres = Self {
            process,
            server,
            bin,
            port,
            host: from.map_or("127.0.0.1", |(address, _)| address).to_string(),
            password,
            ca_pem,
            _dir: dir,
        };
        postgres.wait_ready(Duration::from_secs(60))?;
        Ok(postgres)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.process.check_running()?;
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: "PostgreSQL to accept connections".into(),
                    seconds: timeout.as_secs(),
                    detail: format!("; log:\n{}", self.process.tail(20)),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `sql` as the superuser in database `postgres` with `psql`; returns its output.
    pub fn sql(&self, sql: &str) -> Result<String> {
        self.sql_in("postgres", sql)
    }

    /// Runs `sql` as the superuser in `database`; returns its output.
    pub fn sql_in(&self, database: &str, sql: &str) -> Result<String> {
        let output = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-tA",
            ])
            .args(["-c", sql])
            .env("PGPASSWORD", &self.password)
            .stdin(Stdio::null())
            .output()
            .map_err(io_error("run psql"))?;
        if !output.status.success() {
            return Err(Error::Missing(format!(
                "psql failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// Creates role `name` with `password`, owning a database of the same name.
    pub fn create_role_and_database(&self, name: &str, password: &str) -> Result<()> {
        self.sql(&format!(
            "CREATE ROLE \"{name}\" LOGIN PASSWORD '{}'",
            password.replace('\'', "''")
        ))?;
        self.sql(&format!("CREATE DATABASE \"{name}\" OWNER \"{name}\""))?;
        Ok(())
    }

    /// The folder of the server's binaries (`psql` among them).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The superuser's generated password.
    /// Stops the server (a database outage); [`Postgres::start_again`] brings it back with
    /// its data, on the same port.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Starts the server stopped by [`Postgres::stop`] again and waits until it answers.
    pub fn start_again(&mut self) -> Result<()> {
        self.process =
            Process::spawn_command("postgres", self.server.command(), &self.server.log_dir)?;
        self.wait_ready(Duration::from_secs(60))
    }

    /// The private CA (PEM) that signed the server's certificate: what a client needs to
    /// connect with `sslmode=verify-full`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn superuser_password(&self) -> &str {
        &self.password
    }

    /// A `key=value` connection string for `user` to `dbname` on loopback.
    pub fn connstring(&self, user: &str, password: &str, dbname: &str) -> String {
        format!(
            "host={} port={} user={user} password='{}' dbname={dbname} sslmode=disable",
            self.host,
            self.port,
            password.replace('\\', "\\\\").replace('\'', "\\'")
        )
    }
}

fn random_password() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| io_error("generate a password")(std::io::Error::other(e.to_string())))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
