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
    files: Option<(WatchedFiles, String)>,
    client: ClientAuth,
}

/// Loads (or generates) the serving certificate; `client`: whether (and
/// whose) client certificates are required.
pub fn load(source: &TlsSource, client: ClientAuth) -> Result<Loaded, TlsError> {
    match source {
        TlsSource::Files { cert, key } => {
            let read = |p: &Path| std::fs::read(p).map_err(|e| TlsError::Read(p.to_owned(), e));
            let (cert_pem, key_pem) = (read(cert)?, read(key)?);
            let what = format!("{} + {}", cert.display(), key.display());
            let config = server_config(&cert_pem, &key_pem, &what, &client)?;
            Ok(Loaded {
                rustls: RustlsConfig::from_config(Arc::new(config)),
                ca_pem: None,
                ca_origin: None,
                files: Some((
                    WatchedFiles::new(vec![cert.clone(), key.clone()], vec![cert_pem, key_pem]),
                    what,
                )),
                client,
            })
        }
        TlsSource::SelfSigned { ca_out, extra_sans } => {
            let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            sans.extend(extra_sans.iter().cloned());
            let (bundle, origin) = crate::certs::dev_bundle(ca_out, &ca_key_path(ca_out), &sans)?;
            let config = server_config(
                bundle.cert_pem.as_bytes(),
                bundle.key_pem.as_bytes(),
                "generated certificate",
                &client,
            )?;
            Ok(Loaded {
                rustls: RustlsConfig::from_config(Arc::new(config)),
                ca_pem: Some(bundle.ca_pem),
                ca_origin: Some(origin),
                files: None,
                client,
            })
        }
    }
}

impl Loaded {
    /// For certificate files: a task that re-reads them every `interval`
    /// and swaps the certificate for new connections (open connections keep
    /// theirs). A pair that does not load — say the certificate was
    /// replaced and the key not yet — is logged and the old one kept until
    /// the files change again.
    pub(crate) fn spawn_reloader(
        &mut self,
        interval: Duration,
        metrics: Metrics,
    ) -> Option<JoinHandle<()>> {
        let (mut files, what) = self.files.take()?;
        let rustls = self.rustls.clone();
        let client = self.client.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(pair) = files.changed().await else {
                    continue;
                };
                match server_config(&pair[0], &pair[1], &what, &client) {
                    Ok(config) => {
                        rustls.reload_from_config(Arc::new(config));
                        metrics.tls_reload(true);
                        tracing::info!(files = %what, "TLS certificate reloaded");
                    }
                    Err(e) => {
                        metrics.tls_reload(false);
                        tracing::error!(
                            files = %what,
                            error = %Chain(&e),
                            "new TLS certificate does not load; keeping the previous one"
                        );
                    }
                }
            }
        }))
    }
}
