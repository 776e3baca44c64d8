//! The install path: the webhook configurations (one definition, used by
//! `dljob webhook-config` and kept identical to `deploy/base/webhooks.yaml`
//! by tests/deploy.rs), `dljob certs` and `dljob webhook-config`.
//!
//! Safety comes from the selectors: the API server calls dljob only for
//! objects labelled `dljob.dev/job`, never in `kube-system` or dljob's own
//! namespace, so unlabelled workloads are untouched even while dljob is down.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::ByteString;
use serde::Serialize;

use crate::args::{CertsArgs, WebhookConfigArgs};
use crate::contract;

/// Name of both webhook configurations (they are cluster-scoped).
pub(crate) const WEBHOOK_CONFIGURATION_NAME: &str = "dljob";
/// The mutating webhook inside its configuration.
pub(crate) const MUTATING_WEBHOOK_NAME: &str = "mutate.dljob.dev";
/// The validating webhook inside its configuration.
pub(crate) const VALIDATING_WEBHOOK_NAME: &str = "validate.dljob.dev";
/// The Namespace deploy/ installs into.
pub(crate) const NAMESPACE: &str = "dljob-system";
/// The Service in front of the webhook pods.
pub(crate) const SERVICE: &str = "dljob";
/// The Secret the Deployment mounts its serving certificate from.
pub(crate) const TLS_SECRET: &str = "dljob-tls";
/// Seconds the API server waits for a review before failing it.
pub(crate) const TIMEOUT_SECONDS: i32 = 5;
/// Validity of the certificates `dljob certs` makes.
pub(crate) const CERT_DAYS: u32 = 3650;

/// Where the API server sends admission reviews.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// The in-cluster Service (what deploy/ uses), port 443.
    Service { namespace: String, name: String },
    /// A base URL, e.g. `https://192.0.2.10:8443`, for `dljob serve` running
    /// outside the cluster. `/mutate` and `/validate` are appended.
    Url(String),
}

impl Endpoint {
    /// The Service deploy/ installs.
    pub fn in_cluster() -> Self {
        Self::Service {
            namespace: NAMESPACE.to_owned(),
            name: SERVICE.to_owned(),
        }
    }

    /// Checks a base URL the way the API server will: https, a host, no user
    /// info, query or fragment. A trailing `/` is dropped.
    pub(crate) fn url(url: &str) -> Result<Self, InstallError> {
        let bad = |why: &str| InstallError::Url {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| bad("the API server only calls webhooks over https://"))?;
        if rest.contains(['?', '#']) {
            return Err(bad("it may not have a query or fragment"));
        }
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err(bad("it may not carry user info"));
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(bad("it needs a host, e.g. https://192.0.2.10:8443"));
        }
        Ok(Self::Url(url.trim_end_matches('/').to_owned()))
    }

    fn client_config(&self, path: &str, ca_bundle: Option<&[u8]>) -> WebhookClientConfig {
        let ca_bundle = ca_bundle.map(|ca| ByteString(ca.to_vec()));
        match self {
            Self::Service { namespace, name } => WebhookClientConfig {
                ca_bundle,
                service: Some(ServiceReference {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    path: Some(path.to_owned()),
                    port: Some(443),
                }),
                url: None,
            },
            Self::Url(base) => WebhookClientConfig {
                ca_bundle,
                service: None,
                url: Some(format!("{base}{path}")),
            },
        }
    }
}

/// Why an install command was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    #[error("--url {url}: {why}")]
    Url { url: String, why: String },
}

/// The workload kinds dljob admits: pods, StatefulSets and Jobs, each for
/// its operations.
fn rules(pods: &[&str], statefulsets: &[&str], jobs: &[&str]) -> Vec<RuleWithOperations> {
    [
        ("", "pods", pods),
        ("apps", "statefulsets", statefulsets),
        ("batch", "jobs", jobs),
    ]
    .into_iter()
    .map(|(group, resource, operations)| RuleWithOperations {
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec!["v1".to_owned()]),
        operations: Some(operations.iter().map(|&o| o.to_owned()).collect()),
        resources: Some(vec![resource.to_owned()]),
        scope: Some("Namespaced".to_owned()),
    })
    .collect()
}

/// Only objects carrying the job label are sent to dljob.
fn object_selector() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: contract::JOB.to_owned(),
            operator: "Exists".to_owned(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// Never in kube-system, nor in dljob's own namespace (its pods must not
/// wait on themselves).
fn namespace_selector() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(vec!["kube-system".to_owned(), NAMESPACE.to_owned()]),
        }]),
        match_labels: None,
    }
}

fn metadata() -> ObjectMeta {
    ObjectMeta {
        name: Some(WEBHOOK_CONFIGURATION_NAME.to_owned()),
        ..ObjectMeta::default()
    }
}

/// Both webhook configurations: mutate on CREATE (and on UPDATE of
/// StatefulSets: relabelling an existing StatefulSet must reach its pod
/// template; pod specs and Job templates cannot change after creation),
/// validate on CREATE and UPDATE, of pods, StatefulSets and Jobs labelled
/// `dljob.dev/job`; failing closed for those, within [`TIMEOUT_SECONDS`].
pub fn webhook_configurations(
    endpoint: &Endpoint,
    ca_bundle: Option<&[u8]>,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let mutating = MutatingWebhookConfiguration {
        metadata: metadata(),
        webhooks: Some(vec![MutatingWebhook {
            name: MUTATING_WEBHOOK_NAME.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: endpoint.client_config("/mutate", ca_bundle),
            rules: Some(rules(&["CREATE"], &["CREATE", "UPDATE"], &["CREATE"])),
            object_selector: Some(object_selector()),
            namespace_selector: Some(namespace_selector()),
            match_policy: Some("Equivalent".to_owned()),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            // Another webhook may add a container after dljob ran; dljob's
            // mutation is idempotent, so running again is safe.
            reinvocation_policy: Some("IfNeeded".to_owned()),
            match_conditions: None,
        }]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: metadata(),
        webhooks: Some(vec![ValidatingWebhook {
            name: VALIDATING_WEBHOOK_NAME.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: endpoint.client_config("/validate", ca_bundle),
            rules: Some({
                let mut rules = rules(
                    &["CREATE", "UPDATE"],
                    &["CREATE", "UPDATE"],
                    &["CREATE", "UPDATE"],
                );
                // `kubectl debug` adds a container through this subresource,
                // which the pods rule does not cover: it may not mount
                // dljob's reserved volumes either.
                rules.push(RuleWithOperations {
                    api_groups: Some(vec![String::new()]),
                    api_versions: Some(vec!["v1".to_owned()]),
                    operations: Some(vec!["UPDATE".to_owned()]),
                    resources: Some(vec!["pods/ephemeralcontainers".to_owned()]),
                    scope: Some("Namespaced".to_owned()),
                });
                rules
            }),
            object_selector: Some(object_selector()),
            namespace_selector: Some(namespace_selector()),
            match_policy: Some("Equivalent".to_owned()),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_conditions: None,
        }]),
    };
    (mutating, validating)
}

/// Both configurations as one multi-document YAML stream.
pub(crate) fn webhook_configurations_yaml(
    endpoint: &Endpoint,
    ca_bundle: Option<&[u8]>,
) -> Result<String, serde_saphyr::SerializeError> {
    let (mutating, validating) = webhook_configurations(endpoint, ca_bundle);
    Ok(format!(
        "{}---\n{}",
        serde_saphyr::to_string(&mutating)?,
        serde_saphyr::to_string(&validating)?
    ))
}

/// `dljob webhook-config`.
pub fn webhook_config(args: &WebhookConfigArgs) -> anyhow::Result<ExitCode> {
    let endpoint = Endpoint::url(&args.url)?;
    let ca = match &args.ca {
        Some(path) => {
            let pem =
                std::fs::read(path).with_context(|| format!("reading --ca {}", path.display()))?;
            if !pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
                anyhow::bail!(
                    "--ca {}: expected a PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                );
            }
            Some(pem)
        }
        None => {
            eprintln!(
                "note: no --ca given, so the API server must trust the webhook's certificate \
                 through its system roots; for `dljob serve` without --tls-cert pass \
                 --ca dljob-ca.pem"
            );
            None
        }
    };
    let yaml = webhook_configurations_yaml(&endpoint, ca.as_deref())?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The kustomize Component `dljob certs` writes beside the PEM files: the
/// TLS Secret (`secret.yaml`), and the CA (already base64 in the Secret's
/// `ca.crt`) copied into both webhook configurations' caBundle.
///
/// The Secret is a resource dljob writes, not a kustomize secretGenerator:
/// the generator wraps its base64 at 70 columns, and so did the caBundle
/// copied from it, which the API server decodes but stores unwrapped — so
/// every `kubectl apply` found the Secret and both webhooks changed
/// (`configured`) though nothing was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CertsComponent {
    pub api_version: String,
    pub kind: String,
    pub resources: Vec<String>,
    pub replacements: Vec<Replacement>,
}

/// The file of the Secret in the Component.
pub(crate) const SECRET_FILE: &str = "secret.yaml";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Replacement {
    pub source: ReplacementSource,
    pub targets: Vec<ReplacementTarget>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplacementSource {
    pub kind: String,
    pub name: String,
    pub field_path: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplacementTarget {
    pub select: Selector,
    pub field_paths: Vec<String>,
    pub options: TargetOptions,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Selector {
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct TargetOptions {
    pub create: bool,
}

/// The Component (whose Secret is in `namespace`: [`tls_secret`]).
pub(crate) fn certs_component() -> CertsComponent {
    let target = |kind: &str| ReplacementTarget {
        select: Selector {
            kind: kind.to_owned(),
            name: WEBHOOK_CONFIGURATION_NAME.to_owned(),
        },
        field_paths: vec!["webhooks.*.clientConfig.caBundle".to_owned()],
        options: TargetOptions { create: true },
    };
    CertsComponent {
        api_version: "kustomize.config.k8s.io/v1alpha1".to_owned(),
        kind: "Component".to_owned(),
        resources: vec![SECRET_FILE.to_owned()],
        replacements: vec![Replacement {
            source: ReplacementSource {
                kind: "Secret".to_owned(),
                name: TLS_SECRET.to_owned(),
                field_path: "data.[ca.crt]".to_owned(),
            },
            targets: vec![
                target("MutatingWebhookConfiguration"),
                target("ValidatingWebhookConfiguration"),
            ],
        }],
    }
}

/// The TLS Secret of the Component: the serving pair and the CA, named as
/// `dljob serve` reads them from its mount (a fixed name: `dljob serve`
/// re-reads the mounted files, so re-running `dljob certs &&
/// deploy/install` rotates the certificate without a restart or an
/// orphaned Secret).
pub(crate) fn tls_secret(namespace: &str, bundle: &crate::certs::CertBundle) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(TLS_SECRET.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            [
                ("tls.crt".to_owned(), bytes(&bundle.cert_pem)),
                ("tls.key".to_owned(), bytes(&bundle.key_pem)),
                ("ca.crt".to_owned(), bytes(&bundle.ca_pem)),
            ]
            .into(),
        ),
        ..Secret::default()
    }
}

/// `dljob certs`.
pub fn certs(args: &CertsArgs) -> anyhow::Result<ExitCode> {
    let sans = crate::certs::service_sans(&args.service, &args.namespace);
    let bundle = crate::certs::generate(&sans, CERT_DAYS).context("generating certificates")?;
    let component = serde_saphyr::to_string(&certs_component())?;
    let secret = serde_saphyr::to_string(&tls_secret(&args.namespace, &bundle))?;

    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    write_file(&out.join("ca.pem"), bundle.ca_pem.as_bytes(), 0o644)?;
    write_file(&out.join("tls.crt"), bundle.cert_pem.as_bytes(), 0o644)?;
    write_file(&out.join("tls.key"), bundle.key_pem.as_bytes(), 0o600)?;
    // It holds the key too.
    write_file(&out.join(SECRET_FILE), secret.as_bytes(), 0o600)?;
    write_file(&out.join("kustomization.yaml"), component.as_bytes(), 0o644)?;

    let mut stderr = std::io::stderr().lock();
    writeln!(
        stderr,
        "wrote {0}/ca.pem, {0}/tls.crt, {0}/tls.key, {0}/secret.yaml and {0}/kustomization.yaml: \
         a CA and a serving certificate for {1}, valid {2} days",
        out.display(),
        sans.join(", "),
        CERT_DAYS
    )?;
    if args.namespace != NAMESPACE || args.service != SERVICE {
        writeln!(
            stderr,
            "note: deploy/ installs Service {SERVICE} in namespace {NAMESPACE}; \
             your overlay must rename them to match this certificate"
        )?;
    }
    writeln!(
        stderr,
        "next: deploy/install   (applies deploy/, which includes ../certs as a kustomize \
         Component, and registers the fail-closed webhooks only once a replica is ready; \
         keep {} out of git)",
        out.join("tls.key").display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn write_file(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(mode);
        // `mode` applies only to new files: tighten an existing one too.
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting permissions of {}", path.display()))?;
        }
    }
    #[cfg(not(unix))]
    let _ = mode;
    options
        .open(path)
        .and_then(|mut f| f.write_all(contents))
        .with_context(|| format!("writing {}", path.display()))
}

/// The ClusterRole deploy/ installs, compiled in: `dljob rbac` gives each
/// namespace exactly its rules.
const CLUSTER_ROLE_YAML: &str = include_str!("../deploy/base/rbac.yaml");

/// Why `dljob rbac` refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RbacError {
    #[error("\"{0}\" is not a namespace name (a DNS label)")]
    Namespace(String),
    #[error("deploy/base/rbac.yaml (compiled in) has no ClusterRole dljob: {0}")]
    Missing(String),
}

/// The Roles and RoleBindings that give dljob's service account (in
/// `sa_namespace`) the ClusterRole's rules in each of `namespaces` only.
pub(crate) fn namespaced_rbac(
    namespaces: &[String],
    sa_namespace: &str,
) -> Result<Vec<serde_json::Value>, RbacError> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    for ns in namespaces.iter().chain([&sa_namespace.to_owned()]) {
        if !contract::is_dns_label(ns) {
            return Err(RbacError::Namespace(ns.clone()));
        }
    }
    let role: ClusterRole = serde_saphyr::from_multiple::<serde_json::Value>(CLUSTER_ROLE_YAML)
        .map_err(|e| RbacError::Missing(e.to_string()))?
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "dljob")
        .and_then(|d| serde_json::from_value(d).ok())
        .ok_or_else(|| RbacError::Missing("not found".to_owned()))?;
    let labels = serde_json::json!({"app.kubernetes.io/part-of": "dljob"});
    let mut out = Vec::new();
    for ns in namespaces {
        out.push(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "dljob", "namespace": ns, "labels": labels},
            "rules": role.rules,
        }));
        out.push(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "dljob", "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dljob"},
            "subjects": [{"kind": "ServiceAccount", "name": "dljob", "namespace": sa_namespace}],
        }));
    }
    Ok(out)
}

/// `dljob rbac`.
pub fn rbac(args: &crate::args::RbacArgs) -> anyhow::Result<ExitCode> {
    let docs = namespaced_rbac(&args.namespaces, &args.service_account_namespace)?;
    let mut text = String::from(
        "# dljob without a ClusterRole: its rules in each namespace it works in\n# (dljob rbac; list the same namespaces in the config's `namespaces:`).\n",
    );
    for d in &docs {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(d)?);
    }
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_endpoint_appends_the_paths_and_drops_a_trailing_slash() {
        let endpoint = Endpoint::url("https://192.0.2.10:8443/").unwrap();
        let (m, v) = webhook_configurations(&endpoint, Some(b"CA"));
        let m = &m.webhooks.unwrap()[0].client_config;
        let v = &v.webhooks.unwrap()[0].client_config;
        assert_eq!(m.url.as_deref(), Some("https://192.0.2.10:8443/mutate"));
        assert_eq!(v.url.as_deref(), Some("https://192.0.2.10:8443/validate"));
        assert_eq!(m.service, None);
        assert_eq!(m.ca_bundle, Some(ByteString(b"CA".to_vec())));
    }

    #[test]
    fn url_endpoint_refuses_what_the_api_server_refuses() {
        for url in [
            "http://192.0.2.10:8443",
            "192.0.2.10:8443",
            "https://",
            "https://:8443",
            "https://host:8443/?x=1",
            "https://host:8443/#f",
            "https://user@host:8443",
        ] {
            assert!(Endpoint::url(url).is_err(), "{url} was accepted");
        }
    }

    #[test]
    fn service_endpoint_is_port_443_of_the_in_cluster_service() {
        let (m, _) = webhook_configurations(&Endpoint::in_cluster(), None);
        assert_eq!(
            m.webhooks.unwrap()[0].client_config,
            WebhookClientConfig {
                ca_bundle: None,
                service: Some(ServiceReference {
                    name: "dljob".into(),
                    namespace: "dljob-system".into(),
                    path: Some("/mutate".into()),
                    port: Some(443),
                }),
                url: None,
            }
        );
    }

    #[test]
    fn yaml_has_both_configurations_as_two_documents() {
        let yaml = webhook_configurations_yaml(&Endpoint::in_cluster(), None).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        let kinds: Vec<_> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration"
            ]
        );
        assert_eq!(docs[0]["apiVersion"], "admissionregistration.k8s.io/v1");
    }

    #[test]
    fn certs_component_holds_the_secret_in_its_namespace() {
        let c = certs_component();
        assert_eq!(c.resources, [SECRET_FILE]);
        assert_eq!(c.replacements[0].targets.len(), 2);
        let bundle = crate::certs::generate(&["a.b.svc".to_owned()], 1).unwrap();
        let secret = tls_secret("elsewhere", &bundle);
        assert_eq!(secret.metadata.namespace.as_deref(), Some("elsewhere"));
        assert_eq!(secret.metadata.name.as_deref(), Some(TLS_SECRET));
        // As YAML: each value base64 on one line, as the API server
        // returns it (a wrapped one reads as changed on every apply).
        let yaml = serde_saphyr::to_string(&secret).unwrap();
        let read: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        let ca = read["data"]["ca.crt"].as_str().expect("ca.crt");
        assert!(
            ca.len() > 500 && !ca.contains(char::is_whitespace),
            "{yaml}"
        );
    }

    /// The reconciler may read, create and repair the PodGroup of every
    /// gang scheduler dljob knows: a kind it cannot read would fail the
    /// reconcile of every job using that gang (403), not just its group.
    #[test]
    fn the_cluster_role_grants_every_gang_schedulers_pod_group() {
        use k8s_openapi::api::rbac::v1::ClusterRole;
        let role: ClusterRole = serde_saphyr::from_str(
            CLUSTER_ROLE_YAML
                .split("\n---\n")
                .find(|d| d.contains("kind: ClusterRole\n"))
                .unwrap(),
        )
        .unwrap();
        for scheduler in crate::gang::ALL {
            let Some(kind) = scheduler.pod_group_kind() else {
                continue;
            };
            let granted = role.rules.iter().flatten().any(|r| {
                let has =
                    |list: &Option<Vec<String>>, x: &str| list.iter().flatten().any(|v| v == x);
                has(&r.api_groups, kind.group)
                    && has(&r.resources, kind.plural)
                    && ["get", "create", "patch"]
                        .iter()
                        .all(|v| r.verbs.iter().any(|g| g == v))
            });
            assert!(granted, "{} podgroups of {}", kind.group, scheduler.name());
        }
    }

    #[test]
    fn namespaced_rbac_refuses_what_is_not_a_namespace() {
        let e = namespaced_rbac(&["team-a".into(), "Team_B".into()], "dljob-system").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"Team_B\" is not a namespace name (a DNS label)"
        );
        let docs = namespaced_rbac(&["team-a".into()], "ops").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["subjects"][0]["namespace"], "ops");
    }
}
