//! The serving certificate: loaded from PEM files and re-read when they
//! change, or generated self-signed for local use.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::reload::WatchedFiles;
use crate::telemetry::Chain;

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// PEM certificate chain and key, re-read when either changes.
    Files { cert: PathBuf, key: PathBuf },
    /// A certificate for `localhost`, `127.0.0.1` and `extra_sans` signed
    /// by a development CA: the one at `ca_out` (and its key beside it,
    /// [`ca_key_path`]) when it is still valid, else a new one written
    /// there, so that clients can trust it across restarts.
    SelfSigned {
        ca_out: PathBuf,
        extra_sans: Vec<String>,
    },
}

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: no PEM certificate found")]
    NoCertificate(String),
    #[error("{0}: not a PEM private key ({1})")]
    Key(String, String),
    #[error("certificate and key do not make a TLS config")]
    Rustls(#[from] rustls::Error),
    #[error("generating a self-signed certificate")]
    Generate(#[from] rcgen::Error),
    #[error("the self-signed CA")]
    DevCa(#[from] crate::certs::DevCaError),
    #[error("{0}: not a CA to verify client certificates with ({1})")]
    ClientCa(String, String),
}

/// Client certificates, when the server asks for them: the verifier of
/// those signed by the CA(s) in a PEM bundle.
pub type ClientAuth = Option<Arc<dyn ClientCertVerifier>>;

/// The verifier of client certificates signed by a CA in `pem` (read from
/// `what`): a client without one, or with another, fails the handshake.
pub fn client_verifier(pem: &[u8], what: &str) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let bad = |e: String| TlsError::ClientCa(what.to_owned(), e);
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate(what.to_owned()));
    }
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| bad(e.to_string()))
}

/// A rustls server config (ring provider, HTTP/2 and HTTP/1.1 by ALPN) from
/// a PEM chain and key, requiring client certificates when `client` says
/// so. Fails when the key does not match the certificate.
pub(crate) fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
    client: &ClientAuth,
) -> Result<ServerConfig, TlsError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::NoCertificate(what.to_owned()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(what.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::Key(what.to_owned(), e.to_string()))?;
    let builder =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?;
    let builder = match client {
        Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Where the development CA's key is kept: beside the CA, `.key` for its
/// extension (`dljob-ca.pem` → `dljob-ca.key`).
pub(crate) fn ca_key_path(ca_out: &Path) -> PathBuf {
    ca_out.with_extension("key")
}

/// The loaded certificate, and the self-signed CA when there is one.
pub struct Loaded {
    pub rustls: RustlsConfig,
    pub ca_pem: Option<String>,
    /// Whether the self-signed CA was reused or made, and why.
    pub ca_origin: Option<crate::certs::CaOrigin>,
    /// Whether client certificates are asked for.
    pub client_auth: bool,
    watch: Option<Watch>,
}

/// What a reload re-reads, and what it keeps.
struct Watch {
    files: WatchedFiles,
    /// The serving pair: re-read from its files, or the generated one.
    pair: Pair,
    /// The client CA's file, the last of the watched files.
    client_ca: Option<PathBuf>,
    client: ClientAuth,
    what: String,
}

enum Pair {
    Files,
    Generated { cert_pem: Vec<u8>, key_pem: Vec<u8> },
}

/// Loads (or generates) the serving certificate; `client_ca`: the PEM CA
/// bundle whose certificates clients must present, if any.
pub fn load(source: &TlsSource, client_ca: Option<&Path>) -> Result<Loaded, TlsError> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| TlsError::Read(p.to_owned(), e));
    let client_pem = client_ca.map(read).transpose()?;
    let client: ClientAuth = match (client_ca, &client_pem) {
        (Some(path), Some(pem)) => Some(client_verifier(pem, &path.display().to_string())?),
        _ => None,
    };
    let (config, ca_pem, ca_origin, pair, mut paths, mut contents, what) = match source {
        TlsSource::Files { cert, key } => {
            let (cert_pem, key_pem) = (read(cert)?, read(key)?);
            let what = format!("{} + {}", cert.display(), key.display());
            let config = server_config(&cert_pem, &key_pem, &what, &client)?;
            (
                config,
                None,
                None,
                Pair::Files,
                vec![cert.clone(), key.clone()],
                vec![cert_pem, key_pem],
                what,
            )
        }
        TlsSource::SelfSigned { ca_out, extra_sans } => {
            let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            sans.extend(extra_sans.iter().cloned());
            let (bundle, origin) = crate::certs::dev_bundle(ca_out, &ca_key_path(ca_out), &sans)?;
            let what = "generated certificate".to_owned();
            let config = server_config(
                bundle.cert_pem.as_bytes(),
                bundle.key_pem.as_bytes(),
                &what,
                &client,
            )?;
            (
                config,
                Some(bundle.ca_pem),
                Some(origin),
                Pair::Generated {
                    cert_pem: bundle.cert_pem.into_bytes(),
                    key_pem: bundle.key_pem.into_bytes(),
                },
                Vec::new(),
                Vec::new(),
                what,
            )
        }
    };
    if let (Some(path), Some(pem)) = (client_ca, client_pem) {
        paths.push(path.to_owned());
        contents.push(pem);
    }
    let watch = (!paths.is_empty()).then(|| Watch {
        files: WatchedFiles::new(paths, contents),
        pair,
        client_ca: client_ca.map(Path::to_owned),
        client: client.clone(),
        what,
    });
    Ok(Loaded {
        rustls: RustlsConfig::from_config(Arc::new(config)),
        ca_pem,
        ca_origin,
        client_auth: client.is_some(),
        watch,
    })
}

impl Watch {
    /// The server config from the files' new `contents`: the serving pair
    /// (read, or the generated one) and the client CA (the last file).
    fn config(&mut self, mut contents: Vec<Vec<u8>>) -> Result<ServerConfig, TlsError> {
        if let Some(path) = &self.client_ca {
            let pem = contents.pop().unwrap_or_default();
            self.client = Some(client_verifier(&pem, &path.display().to_string())?);
        }
        let (cert, key) = match &self.pair {
            Pair::Files => (&contents[0], &contents[1]),
            Pair::Generated { cert_pem, key_pem } => (cert_pem, key_pem),
        };
        server_config(cert, key, &self.what, &self.client)
    }

    fn files(&self) -> String {
        match (&self.pair, &self.client_ca) {
            (Pair::Files, Some(ca)) => format!("{} + client CA {}", self.what, ca.display()),
            (Pair::Files, None) => self.what.clone(),
            (Pair::Generated { .. }, Some(ca)) => format!("client CA {}", ca.display()),
            (Pair::Generated { .. }, None) => String::new(),
        }
    }
}

impl Loaded {
    /// For certificate files and a client CA: a task that re-reads them
    /// every `interval` and swaps the TLS config for new connections (open
    /// connections keep theirs). Files that do not load — say the
    /// certificate was replaced and the key not yet, or a client CA that is
    /// not one — are logged and the old config kept until they change again.
    pub(crate) fn spawn_reloader(
        &mut self,
        interval: Duration,
        metrics: Metrics,
    ) -> Option<JoinHandle<()>> {
        let mut watch = self.watch.take()?;
        let rustls = self.rustls.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            let files = watch.files();
            loop {
                tick.tick().await;
                let Some(contents) = watch.files.changed().await else {
                    continue;
                };
                let before = watch.client.clone();
                match watch.config(contents) {
                    Ok(config) => {
                        rustls.reload_from_config(Arc::new(config));
                        metrics.tls_reload(true);
                        tracing::info!(files = %files, "TLS certificate reloaded");
                    }
                    Err(e) => {
                        watch.client = before;
                        metrics.tls_reload(false);
                        tracing::error!(
                            files = %files,
                            error = %Chain(&e),
                            "new TLS files do not load; keeping the previous ones"
                        );
                    }
                }
            }
        }))
    }
}
