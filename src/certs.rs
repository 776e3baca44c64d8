//! Certificates for the webhook: a CA and a serving certificate signed by it
//! (rcgen, ring). Used by `dljob certs` and by `dljob serve` when no
//! certificate is given.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

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
    let now = time_now();
    let until = now + std::time::Duration::from_secs(u64::from(days) * 86_400);

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
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

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
    let cert = leaf.signed_by(&key, &ca)?;
    Ok(CertBundle {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
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

fn time_now() -> std::time::SystemTime {
    // One hour of slack for clocks that disagree.
    std::time::SystemTime::now() - std::time::Duration::from_secs(3600)
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
