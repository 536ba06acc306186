//! A PostgreSQL instance of a test's own, with TLS: a test CA (and another
//! one, to be refused), a server certificate for the name `localhost` only,
//! a client certificate for the role `certuser`; `initdb` into a temp dir
//! (as the `postgres` user when the tests run as root), `pg_ctl` on a free
//! port, `hostssl` lines only — a connection in clear is refused. Stopped
//! (immediately) when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TlsServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// PostgreSQL's server binaries (`initdb`, `pg_ctl`), newest version first.
pub fn server_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args…`, as the `postgres` user when we are root.
fn as_postgres(program: &Path) -> Command {
    if root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run(
        Command::new("openssl").current_dir(dir).args(args),
        &format!("openssl {}", args.join(" ")),
    );
}

/// A key and a certificate signed by `ca` (`name`: the file stem).
fn signed(dir: &Path, ca: &str, name: &str, subject: &str, ext: Option<&str>) {
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ],
    );
    let mut args = vec![
        "x509".to_string(),
        "-req".into(),
        "-in".into(),
        format!("{name}.csr"),
        "-CA".into(),
        format!("{ca}.crt"),
        "-CAkey".into(),
        format!("{ca}.key"),
        "-CAcreateserial".into(),
        "-days".into(),
        "2".into(),
        "-out".into(),
        format!("{name}.crt"),
    ];
    if let Some(ext) = ext {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        args.extend(["-extfile".into(), format!("{name}.ext")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    openssl(dir, &args);
}

fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TlsServer {
    pub fn start() -> Self {
        let bin = server_bin().expect("PostgreSQL's server binaries under /usr/lib/postgresql");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ca(d, "test-ca");
        ca(d, "other-ca");
        signed(
            d,
            "test-ca",
            "server",
            "/CN=localhost",
            Some("subjectAltName=DNS:localhost\n"),
        );
        // Extensions make it X.509 v3 (rustls takes no v1 certificate).
        let client =
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";
        signed(d, "test-ca", "client", "/CN=certuser", Some(client));
        own(d);
        run(
            Command::new("chmod")
                .args(["600", "server.key", "client.key"])
                .current_dir(d),
            "chmod keys",
        );
        let data = d.join("data");
        run(
            as_postgres(&bin.join("initdb"))
                .args(["-U", "postgres", "--auth=trust", "-D"])
                .arg(&data),
            "initdb",
        );
        let port = free_port();
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'\nfsync = off\n",
            d.display(),
            d.join("server.crt").display(),
            d.join("server.key").display(),
            d.join("test-ca.crt").display(),
        );
        append(&data.join("postgresql.conf"), &conf);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             local replication all trust\n\
             hostssl all certuser 127.0.0.1/32 cert\n\
             hostssl all postgres 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let server = Self {
            port,
            ca: d.join("test-ca.crt"),
            other_ca: d.join("other-ca.crt"),
            client_cert: d.join("client.crt"),
            client_key: d.join("client.key"),
            bin,
            dir,
        };
        server.start_again();
        server.psql("CREATE ROLE certuser LOGIN SUPERUSER");
        server
    }

    /// A streaming standby of this instance (`pg_basebackup -R`) on a port
    /// of its own, with the primary's certificates and `pg_hba.conf`. The
    /// primary then acknowledges a commit only once the standby has
    /// flushed it (`synchronous_standby_names = '*'`), so a failover loses
    /// nothing acknowledged. Returns once the standby replicates in sync.
    pub fn standby(&self) -> Self {
        let dir = tempfile::tempdir().unwrap();
        own(dir.path());
        let data = dir.path().join("data");
        run(
            as_postgres(&self.bin.join("pg_basebackup"))
                .arg("-h")
                .arg(self.dir.path())
                .args(["-p", &self.port.to_string(), "-U", "postgres"])
                .args(["-X", "stream", "-R", "-D"])
                .arg(&data),
            "pg_basebackup",
        );
        let port = free_port();
        append(
            &data.join("postgresql.conf"),
            &format!(
                "port = {port}\nunix_socket_directories = '{}'\n",
                dir.path().display()
            ),
        );
        let standby = Self {
            dir,
            bin: self.bin.clone(),
            port,
            ca: self.ca.clone(),
            other_ca: self.other_ca.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        };
        standby.start_again();
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.psql("SELECT pg_reload_conf()");
        let in_sync = crate::wait_until(std::time::Duration::from_secs(30), || {
            self.query("SELECT sync_state FROM pg_stat_replication") == "sync"
        });
        assert!(
            in_sync,
            "the standby did not replicate in sync\n{}",
            standby.log()
        );
        standby
    }

    /// `pg_ctl promote`: this standby becomes a primary that takes writes.
    pub fn promote(&self) {
        run(
            as_postgres(&self.bin.join("pg_ctl"))
                .args(["-w", "-t", "30", "-D"])
                .arg(self.dir.path().join("data"))
                .arg("promote"),
            "pg_ctl promote",
        );
    }

    /// `pg_ctl start` (the instance was stopped, crashed, or is new).
    pub fn start_again(&self) {
        let out = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-w", "-t", "30", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .arg("start")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n--- server log ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            self.log()
        );
    }

    /// `kill -9` of the postmaster, as a crash or the OOM killer does; its
    /// backends follow it. Returns once no process of the instance is
    /// left, so [`Self::start_again`] can start it (crash recovery).
    pub fn crash(&self) {
        let data = self.dir.path().join("data");
        let pid: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let children = || -> Vec<u32> {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                        s.rsplit(')')
                            .next()
                            .and_then(|r| r.split_whitespace().nth(1))
                            == Some(pid.to_string().as_str())
                    })
                })
                .collect()
        };
        let backends = children();
        crate::kill(pid, "KILL");
        let gone = crate::wait_until(std::time::Duration::from_secs(30), || {
            !crate::alive(pid) && backends.iter().all(|b| !crate::alive(*b))
        });
        assert!(
            gone,
            "the instance's processes did not end after its postmaster was killed"
        );
        // A killed postmaster nobody reaped yet (a container's init may be
        // slow to) still answers `kill(pid, 0)`, and PostgreSQL would take
        // its lock file for a running server: every process of it is gone,
        // so its files are stale: the data dir's and the socket's locks.
        let _ = std::fs::remove_file(data.join("postmaster.pid"));
        let socket = self.dir.path().join(format!(".s.PGSQL.{}", self.port));
        let _ = std::fs::remove_file(socket.with_extension(format!("{}.lock", self.port)));
        let _ = std::fs::remove_file(&socket);
    }

    /// `pg_ctl stop -m fast`: every connection is closed, none accepted.
    pub fn stop(&self) {
        run(
            as_postgres(&self.bin.join("pg_ctl"))
                .args(["-w", "-m", "fast", "-D"])
                .arg(self.dir.path().join("data"))
                .arg("stop"),
            "pg_ctl stop",
        );
    }

    /// Run `sql` over the instance's Unix socket; its unaligned output.
    pub fn query(&self, sql: &str) -> String {
        let out = as_postgres(Path::new("psql"))
            .args(["-h"])
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-Atc",
                sql,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Run `sql` over the instance's Unix socket.
    pub fn psql(&self, sql: &str) {
        self.query(sql);
    }

    /// A store URL of this instance: `host` as written (the name TLS
    /// checks) reached at 127.0.0.1, with `params` after it.
    pub fn url(&self, user: &str, host: &str, params: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
            self.port
        )
    }

    /// What the server wrote to its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

/// `dir` the `postgres` user's (when we are root), closed to others.
fn own(dir: &Path) {
    if root() {
        run(
            Command::new("chown").args(["-R", "postgres"]).arg(dir),
            "chown",
        );
    }
    run(
        Command::new("chmod").args(["700", "."]).current_dir(dir),
        "chmod",
    );
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .output();
    }
}
