//! TLS to PostgreSQL with rustls, set as libpq reads it from the store URL:
//! `sslmode` (`disable`, `allow`, `prefer` — the default —, `require`,
//! `verify-ca`, `verify-full`), `sslrootcert` (the CA file; for the
//! verifying modes libpq's default `~/.postgresql/root.crt`), `sslcert` and
//! `sslkey` (a client certificate). tokio-postgres knows only the first
//! three modes and none of the files, so these parameters are taken off the
//! URL here and the rest is its to parse.
//!
//! As libpq: `prefer` and `allow` try TLS and verify nothing (a server
//! without TLS is used in clear); `require` insists on TLS and verifies the
//! chain only when a CA file is given; `verify-ca` verifies the chain;
//! `verify-full` also the host name — the setting for several machines.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// The TLS settings of a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    pub root: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// How the store reaches PostgreSQL: where (tokio-postgres' config) and
/// with which TLS.
#[derive(Clone)]
pub(crate) struct Conn {
    pub pg: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
    pub settings: Settings,
    /// Shared by every connection of the store: since when none could be
    /// made.
    pub health: Arc<Health>,
}

/// Whether the store reaches PostgreSQL: the first failed connection of
/// an outage (unix seconds) and the last reason, until one succeeds.
#[derive(Debug, Default)]
pub struct Health(std::sync::Mutex<Option<(i64, String)>>);

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(i64, String)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection could not be made.
    pub fn failed(&self, why: &str) {
        let mut state = self.lock();
        let since = state
            .as_ref()
            .map_or_else(tinycode_base::clock::now_unix, |(s, _)| *s);
        *state = Some((since, why.to_string()));
    }

    /// A connection was made: the outage, if any, is over.
    pub fn reached(&self) {
        if self.lock().take().is_some() {
            tracing::info!("PostgreSQL is reachable again");
        }
    }

    /// Since when and why the store cannot reach PostgreSQL.
    pub fn unreachable(&self) -> Option<(i64, String)> {
        self.lock().clone()
    }
}

impl Conn {
    /// Read a store URL (`postgres://…?sslmode=verify-full&sslrootcert=…`
    /// or libpq's `key=value` form); a setting that cannot be used is an
    /// error naming it.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (rest, settings) = split(url)?;
        let mut pg: tokio_postgres::Config = rest.parse().map_err(|e| format!("{e}"))?;
        pg.ssl_mode(match settings.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Allow | Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        });
        let tls = MakeRustlsConnect::new(client_config(&settings)?);
        Ok(Self {
            pg,
            tls,
            settings,
            health: Arc::default(),
        })
    }
}

/// The URL without its TLS parameters, and those parameters.
pub fn split(url: &str) -> Result<(String, Settings), String> {
    let mut settings = Settings {
        mode: Mode::Prefer,
        root: None,
        cert: None,
        key: None,
    };
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => settings.mode = Mode::parse(value)?,
            "sslrootcert" => settings.root = Some(PathBuf::from(value)),
            "sslcert" => settings.cert = Some(PathBuf::from(value)),
            "sslkey" => settings.key = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if let Some((base, query)) = url.split_once('?').filter(|_| url.contains("://")) {
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(key, &percent_decode(value))? {
                kept.push(pair);
            }
        }
        if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else if url.contains("://") {
        url.to_string()
    } else {
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(key, value.trim_matches('\''))? {
                kept.push(pair);
            }
        }
        kept.join(" ")
    };
    Ok((rest, settings))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libpq's default CA file: `~/.postgresql/root.crt`.
fn default_root() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql/root.crt"))
}

fn client_config(s: &Settings) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match s.mode {
        // libpq verifies nothing in these modes, whatever root.crt holds.
        Mode::Disable | Mode::Allow | Mode::Prefer => Arc::new(Unverified(provider.clone())),
        Mode::Require => match &s.root {
            // With a CA file, `require` verifies the chain (as verify-ca).
            Some(root) => Arc::new(ChainOnly(webpki(root, &provider)?)),
            None => Arc::new(Unverified(provider.clone())),
        },
        Mode::VerifyCa | Mode::VerifyFull => {
            let root = s.root.clone().or_else(default_root).ok_or(
                "sslmode=verify-ca/verify-full needs sslrootcert (the CA file); no HOME for ~/.postgresql/root.crt",
            )?;
            let full = webpki(&root, &provider)?;
            if s.mode == Mode::VerifyFull {
                full
            } else {
                Arc::new(ChainOnly(full))
            }
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&s.cert, &s.key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("sslcert/sslkey: {e}"))
        }
        _ => Err("sslcert and sslkey go together: give both, or neither".into()),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let name = path.display();
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{name}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{name}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{name} holds no PEM certificate"));
    }
    Ok(certs)
}

/// The standard verifier (chain and host name) with the CA file's roots.
fn webpki(
    root: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(root).map_err(|e| format!("sslrootcert {e}"))? {
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {}: {e}", root.display()))?;
    }
    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| format!("sslrootcert {}: {e}", root.display()))
}

/// `verify-ca`: the chain must lead to the CA; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer`, `allow`, `require` without a CA: encrypted, not
/// authenticated (the handshake's signatures are still checked).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_come_off_the_url_as_libpq_names_them() {
        let (rest, s) = split(
            "postgres://u:p@db.internal:5432/desk?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p@db.internal:5432/desk?application_name=x"
        );
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root.as_deref(), Some(Path::new("/etc/ca.pem")));
        let (rest, s) = split("postgres://u@h/db").unwrap();
        assert_eq!((rest.as_str(), s.mode), ("postgres://u@h/db", Mode::Prefer));
        let (rest, s) = split("host=h dbname=d sslmode=require sslcert=/c sslkey=/k").unwrap();
        assert_eq!(rest, "host=h dbname=d");
        assert_eq!(s.mode, Mode::Require);
        assert_eq!(s.key.as_deref(), Some(Path::new("/k")));
        let err = split("postgres://h/d?sslmode=maybe").unwrap_err();
        assert!(err.contains("sslmode=maybe"), "{err}");
    }

    #[test]
    fn a_verifying_mode_needs_a_readable_ca_and_a_key_needs_its_certificate() {
        let missing =
            Conn::parse("postgres://h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
                .err()
                .unwrap();
        assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
        let half = Conn::parse("postgres://h/d?sslmode=require&sslkey=/k")
            .err()
            .unwrap();
        assert!(half.contains("sslcert and sslkey go together"), "{half}");
        // The default needs no file.
        assert!(Conn::parse("postgres://h/d").is_ok());
        assert!(Conn::parse("postgres://h/d?sslmode=disable").is_ok());
    }
}
