//! Certificates for the webhook: a CA and a serving certificate signed by it
//! (rcgen, ring). Used by `dljob certs` and by `dljob serve` when no
//! certificate is given.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A CA and a serving certificate, all PEM.
#[derive(Clone, Debug)]
pub struct CertBundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generates a fresh CA and a serving certificate for `sans` (DNS names or
/// IP addresses), valid for `days` days from now.
pub fn generate(sans: &[String], days: u32) -> Result<CertBundle, rcgen::Error> {
    let (ca, _) = new_ca(days)?;
    let (cert_pem, key_pem) = leaf(sans, days, &ca)?;
    Ok(CertBundle {
        ca_pem: ca.pem(),
        cert_pem,
        key_pem,
    })
}

/// A self-signed CA valid for `days` days, and its key (PEM).
fn new_ca(days: u32) -> Result<(CertifiedIssuer<'static, KeyPair>, String), rcgen::Error> {
    let now = time_now();
    let until = now + Duration::from_secs(u64::from(days) * 86_400);
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "dljob webhook CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = now.into();
    ca_params.not_after = until.into();
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    Ok((CertifiedIssuer::self_signed(ca_params, key)?, key_pem))
}

/// A serving certificate for `sans` signed by `ca`: (certificate, key) PEM.
fn leaf(
    sans: &[String],
    days: u32,
    ca: &Issuer<'_, KeyPair>,
) -> Result<(String, String), rcgen::Error> {
    let now = time_now();
    let until = now + Duration::from_secs(u64::from(days) * 86_400);
    let mut leaf = CertificateParams::new(sans.to_vec())?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        sans.first().map(String::as_str).unwrap_or("dljob"),
    );
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.not_before = now.into();
    leaf.not_after = until.into();
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Where the development CA of `dljob serve` came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaOrigin {
    /// Found where the last run wrote it, valid for at least a day more.
    Reused,
    /// Made now, for the reason given.
    Created(String),
}

/// Why the development CA could not be kept or made.
#[derive(Debug, thiserror::Error)]
pub enum DevCaError {
    #[error("generating a certificate")]
    Generate(#[from] rcgen::Error),
    #[error("writing {0}: {1}")]
    Write(std::path::PathBuf, std::io::Error),
}

/// How long a development CA is made for, and the least validity left for
/// it to be reused.
const DEV_CA_DAYS: u32 = 365;
const DEV_CA_MIN_LEFT: Duration = Duration::from_secs(86_400);

/// The self-signed CA of `dljob serve` without `--tls-cert`: the one at
/// `ca_path` (certificate) and `key_path` (its key) when both are there,
/// match and stay valid for a day more — so that a cluster told to trust it
/// keeps trusting the webhook across restarts — else a new one, written
/// there (the key with mode 0600). Either way a fresh serving certificate
/// for `sans` is signed by it.
pub(crate) fn dev_bundle(
    ca_path: &Path,
    key_path: &Path,
    sans: &[String],
) -> Result<(CertBundle, CaOrigin), DevCaError> {
    let (ca_pem, issuer, origin) = match reusable_ca(ca_path, key_path) {
        Ok((ca_pem, issuer)) => (ca_pem, issuer, CaOrigin::Reused),
        Err(why) => {
            let (ca, key_pem) = new_ca(DEV_CA_DAYS)?;
            let ca_pem = ca.pem();
            write_private(key_path, &key_pem)?;
            std::fs::write(ca_path, &ca_pem)
                .map_err(|e| DevCaError::Write(ca_path.to_owned(), e))?;
            let key = KeyPair::from_pem(&key_pem)?;
            let issuer = Issuer::from_ca_cert_pem(&ca_pem, key)?;
            (ca_pem, issuer, CaOrigin::Created(why))
        }
    };
    let (cert_pem, key_pem) = leaf(sans, DEV_CA_DAYS, &issuer)?;
    Ok((
        CertBundle {
            ca_pem,
            cert_pem,
            key_pem,
        },
        origin,
    ))
}

/// The CA at `ca_path` with its key, or why it cannot be reused.
fn reusable_ca(
    ca_path: &Path,
    key_path: &Path,
) -> Result<(String, Issuer<'static, KeyPair>), String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("{} not readable ({e})", p.display()))
    };
    let (ca_pem, key_pem) = (read(ca_path)?, read(key_path)?);
    let bad = |what: &str| format!("{} is not a {what}", ca_path.display());
    let der =
        CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(|_| bad("PEM certificate"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|_| bad("certificate"))?;
    let key = KeyPair::from_pem(&key_pem)
        .map_err(|_| format!("{} is not a PEM private key", key_path.display()))?;
    if cert.public_key().subject_public_key.data.as_ref() != rcgen::PublicKeyData::der_bytes(&key) {
        return Err(format!(
            "{} does not hold the key of {}",
            key_path.display(),
            ca_path.display()
        ));
    }
    let left = cert
        .validity()
        .time_to_expiration()
        .map(|d| Duration::from_secs(d.whole_seconds().max(0).unsigned_abs()));
    if left.is_none_or(|left| left < DEV_CA_MIN_LEFT) {
        return Err(format!(
            "{} has expired or expires within a day",
            ca_path.display()
        ));
    }
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, key).map_err(|_| bad("CA certificate"))?;
    Ok((ca_pem, issuer))
}

/// Writes a private key readable by its owner only.
fn write_private(path: &Path, pem: &str) -> Result<(), DevCaError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .map_err(|e| DevCaError::Write(path.to_owned(), e))?;
    file.write_all(pem.as_bytes())
        .map_err(|e| DevCaError::Write(path.to_owned(), e))
}

/// The SANs a webhook Service answers to.
pub fn service_sans(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

fn time_now() -> SystemTime {
    // One hour of slack for clocks that disagree.
    SystemTime::now() - Duration::from_secs(3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_has_ca_cert_and_key() {
        let b = generate(&service_sans("dljob", "dljob-system"), 365).unwrap();
        assert!(b.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(b.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(b.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(b.ca_pem, b.cert_pem);
    }

    #[test]
    fn service_sans_cover_every_in_cluster_name() {
        assert_eq!(
            service_sans("dljob", "dljob-system"),
            vec![
                "dljob",
                "dljob.dljob-system",
                "dljob.dljob-system.svc",
                "dljob.dljob-system.svc.cluster.local"
            ]
        );
    }
}
