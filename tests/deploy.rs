//! The install path as a user runs it: `dljob certs` then
//! `kubectl kustomize deploy/` (in a scratch copy of deploy/ and crds/, so no
//! private key lands in the checkout), and the cert-manager overlay. The
//! rendered manifests must hold the safety invariants with exact values, and
//! `dljob webhook-config` must print the same webhook configurations.
//!
//! kubectl is on every machine CI runs on: without it these tests fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use dljob::install::{self, Endpoint};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use serde_json::{json, Value};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dljob-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn dljob(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_dljob"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dljob {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "running `kubectl kustomize {}`: {e}. kubectl (with its built-in kustomize) \
             must be on PATH for these tests; install it, do not skip them",
            dir.display()
        ),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap())
        .expect("kubectl kustomize printed YAML serde-saphyr cannot read");
    docs
}

/// What `dljob certs && kubectl kustomize deploy/` produced.
struct Install {
    docs: Vec<Value>,
    /// `kubectl kustomize deploy/namespaced/` (no ClusterRole).
    namespaced: Vec<Value>,
    ca_pem: Vec<u8>,
    tls_crt: Vec<u8>,
    tls_key: Vec<u8>,
}

fn install() -> &'static Install {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    INSTALL.get_or_init(|| {
        let scratch = Scratch::new("deploy");
        copy_tree(&repo().join("deploy"), &scratch.0.join("deploy"));
        copy_tree(&repo().join("crds"), &scratch.0.join("crds"));
        let certs = scratch.0.join("certs");
        dljob(&["certs", "--out", certs.to_str().unwrap()]);
        let read = |f: &str| std::fs::read(certs.join(f)).unwrap();
        Install {
            docs: kustomize(&scratch.0.join("deploy")),
            namespaced: kustomize(&scratch.0.join("deploy/namespaced")),
            ca_pem: read("ca.pem"),
            tls_crt: read("tls.crt"),
            tls_key: read("tls.key"),
        }
    })
}

fn cert_manager() -> &'static [Value] {
    static DOCS: OnceLock<Vec<Value>> = OnceLock::new();
    DOCS.get_or_init(|| kustomize(&repo().join("deploy/cert-manager")))
}

/// The one object of type `K` named `name` in `docs`.
fn get<K>(docs: &[Value], name: &str) -> K
where
    K: k8s_openapi::Resource + serde::de::DeserializeOwned,
{
    let found: Vec<_> = docs
        .iter()
        .filter(|d| d["apiVersion"] == K::API_VERSION && d["kind"] == K::KIND)
        .filter(|d| d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "expected one {} {name}", K::KIND);
    serde_json::from_value(found[0].clone()).unwrap()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn rule(group: &str, resource: &str, operations: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(strings(&[group])),
        api_versions: Some(strings(&["v1"])),
        operations: Some(strings(operations)),
        resources: Some(strings(&[resource])),
        scope: Some("Namespaced".into()),
    }
}

fn only_labelled_objects() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "dljob.dev/job".into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    }
}

fn not_in_system_namespaces() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "NotIn".into(),
            values: Some(strings(&["kube-system", "dljob-system"])),
        }]),
        match_labels: None,
    }
}

/// The invariants of issue 5 point 1, exact, on one rendering; returns the
/// two client configs.
fn assert_webhook_invariants(docs: &[Value]) -> (WebhookClientConfig, WebhookClientConfig) {
    let m: MutatingWebhookConfiguration = get(docs, "dljob");
    let v: ValidatingWebhookConfiguration = get(docs, "dljob");
    let [m] = <[_; 1]>::try_from(m.webhooks.unwrap()).unwrap();
    let [v] = <[_; 1]>::try_from(v.webhooks.unwrap()).unwrap();

    assert_eq!(m.name, "mutate.dljob.dev");
    assert_eq!(
        m.rules.unwrap(),
        vec![
            rule("", "pods", &["CREATE"]),
            rule("apps", "statefulsets", &["CREATE", "UPDATE"]),
            rule("batch", "jobs", &["CREATE"]),
        ]
    );
    assert_eq!(m.object_selector, Some(only_labelled_objects()));
    assert_eq!(m.namespace_selector, Some(not_in_system_namespaces()));
    assert_eq!(m.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(m.side_effects, "None");
    assert_eq!(m.timeout_seconds, Some(5));
    assert_eq!(m.admission_review_versions, strings(&["v1"]));
    assert_eq!(m.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(m.reinvocation_policy.as_deref(), Some("IfNeeded"));
    assert_eq!(m.match_conditions, None);

    assert_eq!(v.name, "validate.dljob.dev");
    assert_eq!(
        v.rules.unwrap(),
        vec![
            rule("", "pods", &["CREATE", "UPDATE"]),
            rule("apps", "statefulsets", &["CREATE", "UPDATE"]),
            rule("batch", "jobs", &["CREATE", "UPDATE"]),
            rule("", "pods/ephemeralcontainers", &["UPDATE"]),
        ]
    );
    assert_eq!(v.object_selector, Some(only_labelled_objects()));
    assert_eq!(v.namespace_selector, Some(not_in_system_namespaces()));
    assert_eq!(v.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(v.side_effects, "None");
    assert_eq!(v.timeout_seconds, Some(5));
    assert_eq!(v.admission_review_versions, strings(&["v1"]));
    assert_eq!(v.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(v.match_conditions, None);

    for (cc, path) in [
        (&m.client_config, "/mutate"),
        (&v.client_config, "/validate"),
    ] {
        let service = cc.service.as_ref().expect("deploy/ points at the Service");
        assert_eq!(cc.url, None);
        assert_eq!(service.name, "dljob");
        assert_eq!(service.namespace, "dljob-system");
        assert_eq!(service.path.as_deref(), Some(path));
        assert_eq!(service.port, Some(443));
    }
    (m.client_config, v.client_config)
}

/// A webhook configuration as JSON with the parts that legitimately differ
/// between renderings (labels, annotations, clientConfig) removed.
fn without_client_config_and_labels(mut doc: Value) -> Value {
    let meta = doc["metadata"].as_object_mut().unwrap();
    meta.remove("labels");
    meta.remove("annotations");
    for webhook in doc["webhooks"].as_array_mut().unwrap() {
        webhook.as_object_mut().unwrap().remove("clientConfig");
    }
    doc
}

fn webhook_docs(docs: &[Value]) -> Vec<Value> {
    docs.iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .unwrap()
                .ends_with("WebhookConfiguration")
        })
        .cloned()
        .map(without_client_config_and_labels)
        .collect()
}

#[test]
fn install_renders_exactly_the_expected_objects() {
    let mut objects: Vec<(String, String, String)> = install()
        .docs
        .iter()
        .map(|d| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&d["kind"]),
                text(&d["metadata"]["namespace"]),
                text(&d["metadata"]["name"]),
            )
        })
        .collect();
    objects.sort();
    let expected: Vec<(String, String, String)> = [
        ("ClusterRole", "", "dljob"),
        ("ClusterRoleBinding", "", "dljob"),
        ("ConfigMap", "dljob-system", "dljob-config"),
        ("CustomResourceDefinition", "", "dljobs.dljob.dev"),
        ("Deployment", "dljob-system", "dljob"),
        ("MutatingWebhookConfiguration", "", "dljob"),
        ("Namespace", "", "dljob-system"),
        ("NetworkPolicy", "dljob-system", "dljob"),
        ("PodDisruptionBudget", "dljob-system", "dljob"),
        ("PriorityClass", "", "dljob-webhook"),
        ("Role", "dljob-system", "dljob-leader-election"),
        ("Role", "dljob-system", "dljob-own-pod"),
        ("RoleBinding", "dljob-system", "dljob-leader-election"),
        ("RoleBinding", "dljob-system", "dljob-own-pod"),
        ("Secret", "dljob-system", "dljob-tls"),
        ("Service", "dljob-system", "dljob"),
        ("ServiceAccount", "dljob-system", "dljob"),
        ("ValidatingAdmissionPolicy", "", "dljob-writes-only-jobs"),
        (
            "ValidatingAdmissionPolicyBinding",
            "",
            "dljob-writes-only-jobs",
        ),
        ("ValidatingWebhookConfiguration", "", "dljob"),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.into(), n.into(), m.into()))
    .collect();
    assert_eq!(objects, expected);
}

#[test]
fn webhooks_see_only_labelled_workloads_outside_system_namespaces() {
    let (m, v) = assert_webhook_invariants(&install().docs);
    // `dljob certs` put its CA in both, so the API server trusts the Service.
    assert_eq!(m.ca_bundle, Some(ByteString(install().ca_pem.clone())));
    assert_eq!(v.ca_bundle, Some(ByteString(install().ca_pem.clone())));
}

#[test]
fn cert_manager_overlay_keeps_the_webhook_invariants_and_injects_the_ca() {
    let docs = cert_manager();
    let (m, v) = assert_webhook_invariants(docs);
    assert_eq!(m.ca_bundle, None, "the cainjector fills it in");
    assert_eq!(v.ca_bundle, None, "the cainjector fills it in");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let doc = docs.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(
            doc["metadata"]["annotations"],
            serde_json::json!({"cert-manager.io/inject-ca-from": "dljob-system/dljob"})
        );
    }
    // Same webhooks as the plain install, apart from how the CA arrives.
    assert_eq!(webhook_docs(docs), webhook_docs(&install().docs));
}

#[test]
fn cert_manager_overlay_issues_the_service_names_into_the_mounted_secret() {
    let docs = cert_manager();
    let by_name = |kind: &str, name: &str| -> Value {
        docs.iter()
            .find(|d| {
                d["apiVersion"] == "cert-manager.io/v1"
                    && d["kind"] == kind
                    && d["metadata"]["name"] == name
            })
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let serving = by_name("Certificate", "dljob");
    assert_eq!(serving["metadata"]["namespace"], "dljob-system");
    assert_eq!(
        serving["spec"]["dnsNames"],
        serde_json::json!(dljob::certs::service_sans("dljob", "dljob-system"))
    );
    assert_eq!(serving["spec"]["secretName"], "dljob-tls");
    assert_eq!(
        serving["spec"]["issuerRef"],
        serde_json::json!({"kind": "Issuer", "name": "dljob-ca"})
    );
    let ca_issuer = by_name("Issuer", "dljob-ca");
    assert_eq!(ca_issuer["metadata"]["namespace"], "dljob-system");
    let ca = by_name("Certificate", "dljob-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(
        ca["spec"]["secretName"],
        ca_issuer["spec"]["ca"]["secretName"]
    );
    assert_eq!(
        by_name("Issuer", "dljob-selfsigned")["metadata"]["namespace"],
        "dljob-system"
    );
    // cert-manager writes the Secret; kustomize must not.
    assert!(!docs.iter().any(|d| d["kind"] == "Secret"));
    let deployment: Deployment = get(docs, "dljob");
    let volumes = deployment.spec.template.spec.unwrap().volumes.unwrap();
    let tls = volumes.iter().find(|v| v.name == "tls").unwrap();
    assert_eq!(
        tls.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("dljob-tls")
    );
}

#[test]
fn rendered_webhook_configurations_are_the_rust_definition() {
    let docs = &install().docs;
    let (m, v) =
        install::webhook_configurations(&Endpoint::in_cluster(), Some(install().ca_pem.as_slice()));
    let rendered = |kind: &str| {
        let mut doc = docs.iter().find(|d| d["kind"] == kind).unwrap().clone();
        doc["metadata"].as_object_mut().unwrap().remove("labels");
        doc
    };
    assert_eq!(
        rendered("MutatingWebhookConfiguration"),
        serde_json::to_value(&m).unwrap()
    );
    assert_eq!(
        rendered("ValidatingWebhookConfiguration"),
        serde_json::to_value(&v).unwrap()
    );
}

#[test]
fn webhook_config_command_differs_from_deploy_only_in_client_config() {
    let scratch = Scratch::new("webhook-config");
    let ca = scratch.0.join("ca.pem");
    std::fs::write(&ca, &install().ca_pem).unwrap();
    let out = dljob(&[
        "webhook-config",
        "--url",
        "https://192.0.2.10:8443",
        "--ca",
        ca.to_str().unwrap(),
    ]);
    let printed: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(printed.len(), 2);
    assert_eq!(webhook_docs(&printed), webhook_docs(&install().docs));

    let m: MutatingWebhookConfiguration = get(&printed, "dljob");
    let v: ValidatingWebhookConfiguration = get(&printed, "dljob");
    let client = |url: &str| WebhookClientConfig {
        ca_bundle: Some(ByteString(install().ca_pem.clone())),
        service: None,
        url: Some(url.into()),
    };
    assert_eq!(
        m.webhooks.unwrap()[0].client_config,
        client("https://192.0.2.10:8443/mutate")
    );
    assert_eq!(
        v.webhooks.unwrap()[0].client_config,
        client("https://192.0.2.10:8443/validate")
    );
}

#[test]
fn webhook_config_refuses_a_plain_http_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_dljob"))
        .args(["webhook-config", "--url", "http://127.0.0.1:8443"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("https://"), "{stderr}");
}

/// Every base64 value the install renders (the Secret's data, the caBundle
/// copied from it) is on one line, as the API server returns it: a
/// secretGenerator's, wrapped at 70 columns, read as changed on every
/// `kubectl apply`, so a re-run of deploy/install reported the Secret and
/// both webhooks `configured` though nothing was.
#[test]
fn base64_values_render_on_one_line_so_a_reapply_changes_nothing() {
    let docs = &install().docs;
    let secret = docs.iter().find(|d| d["kind"] == "Secret").unwrap();
    let mut values: Vec<&Value> = secret["data"].as_object().unwrap().values().collect();
    for d in docs.iter().filter(|d| d["webhooks"].is_array()) {
        for w in d["webhooks"].as_array().unwrap() {
            values.push(&w["clientConfig"]["caBundle"]);
        }
    }
    assert_eq!(
        values.len(),
        3 + 2,
        "three keys, a webhook in each configuration"
    );
    for v in values {
        let text = v.as_str().unwrap();
        assert!(
            text.len() > 200 && !text.contains(char::is_whitespace),
            "{text}"
        );
    }
}

#[test]
fn generated_certificate_reaches_the_mounted_secret() {
    let install = install();
    let secret: Secret = get(&install.docs, "dljob-tls");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.unwrap();
    let bytes = |k: &str| data.get(k).map(|b| b.0.clone());
    assert_eq!(bytes("tls.crt"), Some(install.tls_crt.clone()));
    assert_eq!(bytes("tls.key"), Some(install.tls_key.clone()));
    assert_eq!(bytes("ca.crt"), Some(install.ca_pem.clone()));
    assert_eq!(data.len(), 3);
    assert!(install.tls_key.starts_with(b"-----BEGIN PRIVATE KEY-----"));
}

#[cfg(unix)]
#[test]
fn certs_writes_the_private_key_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("certs-mode");
    let out = scratch.0.join("certs");
    dljob(&["certs", "--out", out.to_str().unwrap()]);
    let mode = |f: &str| std::fs::metadata(out.join(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("tls.key"), 0o600);
    assert_eq!(mode("secret.yaml"), 0o600, "it holds the key too");
    assert_eq!(mode("tls.crt"), 0o644);
    let mut files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "ca.pem",
            "kustomization.yaml",
            "secret.yaml",
            "tls.crt",
            "tls.key"
        ]
    );
}

#[test]
fn cluster_role_grants_exact_verbs_and_no_wildcards() {
    let docs = &install().docs;
    let role: ClusterRole = get(docs, "dljob");
    let mut granted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for rule in role.rules.unwrap() {
        assert_eq!(rule.resource_names, None);
        assert_eq!(rule.non_resource_urls, None);
        for group in rule.api_groups.unwrap() {
            for resource in rule.resources.clone().unwrap() {
                let verbs = granted.entry((group.clone(), resource)).or_default();
                verbs.extend(rule.verbs.iter().cloned());
                verbs.sort();
            }
        }
    }
    let expected: BTreeMap<(String, String), Vec<String>> = [
        (
            ("dljob.dev", "dljobs"),
            &["create", "delete", "list", "watch"][..],
        ),
        (("dljob.dev", "dljobs/status"), &["patch"]),
        // get: a bare pod to recreate is read whole (the cache keeps no spec).
        (
            ("", "pods"),
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        (("apps", "statefulsets"), &["list", "patch", "watch"]),
        // Read (whose is it?) before any write; no reflector watches them.
        (("apps", "deployments"), &["create", "get", "patch"]),
        (("batch", "jobs"), &["list", "patch", "watch"]),
        (
            ("", "services"),
            &["create", "get", "list", "patch", "watch"],
        ),
        // Create only: no cluster-wide read of every Secret.
        (("", "secrets"), &["create"]),
        // Volcano's files: read (whose is it?) before any write.
        (("", "configmaps"), &["create", "get", "patch"]),
        // A bare pod's manifest while it is recreated.
        // No get: the API server names them (generateName), so there
        // is no one else's of the same name to read.
        (("", "podtemplates"), &["create", "delete", "list"]),
        (
            ("scheduling.volcano.sh", "podgroups"),
            &["create", "get", "patch"],
        ),
        (
            ("scheduling.x-k8s.io", "podgroups"),
            &["create", "get", "patch"],
        ),
        (
            ("scheduling.k8s.io", "podgroups"),
            &["create", "get", "patch"],
        ),
        (("events.k8s.io", "events"), &["create", "patch"]),
    ]
    .into_iter()
    .map(|((g, r), verbs)| ((g.into(), r.into()), strings(verbs)))
    .collect();
    assert_eq!(granted, expected);

    // Every rule says, in the comment right above it, which call needs it.
    let text = std::fs::read_to_string(repo().join("deploy/base/rbac.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("- apiGroups:") {
            assert!(
                i > 0 && lines[i - 1].starts_with('#'),
                "rbac.yaml line {}: a rule without a comment naming the call that needs it",
                i + 1
            );
        }
    }
    // The reconciler holds no Secret reflector: the grant follows the code.
    let reconciler = std::fs::read_to_string(repo().join("src/reconciler/mod.rs")).unwrap();
    assert!(
        !reconciler.contains("Secret>"),
        "src/reconciler/mod.rs watches Secrets again"
    );

    let lease: Role = get(docs, "dljob-leader-election");
    assert_eq!(
        serde_json::to_value(lease.rules.unwrap()).unwrap(),
        serde_json::json!([
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [dljob::reconciler::LEASE_NAME],
                "verbs": ["get", "patch"],
            },
        ])
    );

    // Its own pod, read once at start for its image, in its own namespace.
    let own: Role = get(docs, "dljob-own-pod");
    assert_eq!(own.metadata.namespace.as_deref(), Some("dljob-system"));
    assert_eq!(
        serde_json::to_value(own.rules.unwrap()).unwrap(),
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    );

    let crb: ClusterRoleBinding = get(docs, "dljob");
    let rb: RoleBinding = get(docs, "dljob-leader-election");
    let own_rb: RoleBinding = get(docs, "dljob-own-pod");
    assert_eq!(crb.role_ref.name, "dljob");
    assert_eq!(rb.role_ref.name, "dljob-leader-election");
    assert_eq!(own_rb.role_ref.name, "dljob-own-pod");
    for subjects in [
        crb.subjects.unwrap(),
        rb.subjects.unwrap(),
        own_rb.subjects.unwrap(),
    ] {
        assert_eq!(
            serde_json::to_value(subjects).unwrap(),
            serde_json::json!([{"kind": "ServiceAccount", "name": "dljob", "namespace": "dljob-system"}])
        );
    }

    // No wildcard in any RBAC object, in any field.
    for doc in docs
        .iter()
        .filter(|d| d["apiVersion"] == "rbac.authorization.k8s.io/v1")
    {
        assert!(!doc.to_string().contains("\"*\""), "wildcard in {doc}");
    }
}

/// What `.ci/image` runs the built image with and what the Dockerfile
/// makes are what deploy/ declares: the same arguments, the entrypoint they
/// follow, the uid and a version matching the image reference.
fn assert_image_runs_as_deployed(args: &[String]) {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap();
    let ci = read(".ci/image");
    let line = ci
        .lines()
        .find_map(|l| l.strip_prefix("args=(")?.strip_suffix(')'))
        .expect(".ci/image declares args=(…)");
    assert_eq!(line.split(' ').collect::<Vec<_>>(), args, ".ci/image args");
    for flag in [
        "--read-only",
        "--cap-drop=all",
        "--security-opt no-new-privileges",
        "--user 65532:65532",
        "$work/tls:/tls:ro",
        "$work/config:/etc/dljob:ro",
    ] {
        assert!(ci.contains(flag), ".ci/image runs the image with {flag}");
    }
    let dockerfile = read("Dockerfile");
    let last_stage = &dockerfile[dockerfile.rfind("\nFROM ").unwrap()..];
    assert!(last_stage.starts_with("\nFROM scratch\n"), "{last_stage}");
    assert!(last_stage.contains("\nUSER 65532:65532\n"), "{last_stage}");
    assert!(
        last_stage.contains("\nENTRYPOINT [\"/dljob\", \"serve\"]\n"),
        "{last_stage}"
    );
    assert!(last_stage.contains(concat!(
        "org.opencontainers.image.version=\"",
        env!("CARGO_PKG_VERSION"),
        "\""
    )));
}

#[test]
fn deployment_runs_two_restricted_probed_replicas_with_tls_and_config_mounted() {
    let deployment: Deployment = get(&install().docs, "dljob");
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("dljob"));
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(
        psc.seccomp_profile.unwrap().type_,
        "RuntimeDefault".to_owned()
    );

    let [c] = <[_; 1]>::try_from(pod.containers).unwrap();
    assert_eq!(
        c.image.as_deref(),
        Some(concat!("ghcr.io/dljob/dljob:", env!("CARGO_PKG_VERSION")))
    );
    // The image's entrypoint is `dljob serve` (Dockerfile); these follow.
    let args = c.args.unwrap();
    assert_eq!(
        args,
        strings(&[
            "--listen=0.0.0.0:8443",
            "--tls-cert=/tls/tls.crt",
            "--tls-key=/tls/tls.key",
            "--config=/etc/dljob/config.yaml",
            "--log-format=json",
            "--drain-seconds=10",
            "--metrics-listen=0.0.0.0:9090",
        ])
    );
    assert_image_runs_as_deployed(&args);
    // The pod is given time for the drain after SIGTERM plus the 25 s the
    // server lets in-flight reviews finish.
    assert_eq!(pod.termination_grace_period_seconds, Some(40));
    // Fail-closed: scheduled before the workloads it admits, with a class
    // of the install's own (not system-cluster-critical, which some
    // clusters admit in kube-system only), at the highest value a class
    // outside the system may have, preempting lower ones.
    assert_eq!(pod.priority_class_name.as_deref(), Some("dljob-webhook"));
    let class: k8s_openapi::api::scheduling::v1::PriorityClass =
        get(&install().docs, "dljob-webhook");
    assert_eq!(class.value, Some(1_000_000_000));
    assert_eq!(class.global_default, Some(false));
    assert_eq!(
        class.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    let probe_path = |p: Option<k8s_openapi::api::core::v1::Probe>| {
        let get = p.unwrap().http_get.unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
        assert_eq!(get.port, IntOrString::String("https".into()));
        get.path.unwrap()
    };
    assert_eq!(probe_path(c.readiness_probe), "/readyz");
    assert_eq!(probe_path(c.liveness_probe), "/healthz");
    let ports = c.ports.unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[0].container_port, 8443);
    assert_eq!(ports[0].name.as_deref(), Some("https"));
    assert_eq!(ports[1].container_port, 9090);
    assert_eq!(ports[1].name.as_deref(), Some("metrics"));

    let resources = c.resources.unwrap();
    for list in [resources.requests.unwrap(), resources.limits.unwrap()] {
        let mut keys: Vec<_> = list.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, strings(&["cpu", "memory"]));
    }

    let sc = c.security_context.unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.privileged, None);
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.drop, Some(strings(&["ALL"])));
    assert_eq!(caps.add, None);
    assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");

    let mounts: BTreeMap<_, _> = c
        .volume_mounts
        .unwrap()
        .into_iter()
        .map(|m| (m.name, (m.mount_path, m.read_only, m.sub_path)))
        .collect();
    assert_eq!(
        mounts,
        BTreeMap::from([
            ("config".into(), ("/etc/dljob".into(), Some(true), None)),
            ("tls".into(), ("/tls".into(), Some(true), None)),
        ])
    );
    let volumes = pod.volumes.unwrap();
    let volume = |n: &str| volumes.iter().find(|v| v.name == n).unwrap().clone();
    assert_eq!(
        volume("tls").secret.unwrap().secret_name.as_deref(),
        Some("dljob-tls")
    );
    assert_eq!(volume("config").config_map.unwrap().name, "dljob-config");
    let _: Secret = get(&install().docs, "dljob-tls");
    let _: ConfigMap = get(&install().docs, "dljob-config");

    let pdb: PodDisruptionBudget = get(&install().docs, "dljob");
    let pdb = pdb.spec.unwrap();
    assert_eq!(pdb.min_available, Some(IntOrString::Int(1)));
    assert_eq!(pdb.selector, Some(spec.selector));
}

#[test]
fn service_sends_443_to_the_webhook_port_of_the_deployment_pods() {
    let docs = &install().docs;
    let service: Service = get(docs, "dljob");
    let spec = service.spec.unwrap();
    let [port, metrics] = <[_; 2]>::try_from(spec.ports.unwrap()).unwrap();
    assert_eq!(port.port, 443);
    assert_eq!(port.target_port, Some(IntOrString::String("https".into())));
    assert_eq!(metrics.port, 9090);
    assert_eq!(
        metrics.target_port,
        Some(IntOrString::String("metrics".into()))
    );
    let deployment: Deployment = get(docs, "dljob");
    let template = deployment.spec.template;
    let pod_labels = template.metadata.unwrap().labels.unwrap();
    let selector = spec.selector.unwrap();
    assert!(!selector.is_empty());
    for (k, v) in &selector {
        assert_eq!(pod_labels.get(k), Some(v), "pods lack selector label {k}");
    }
    let container = &template.spec.unwrap().containers[0];
    let named = container.ports.as_ref().unwrap();
    assert_eq!(named[0].name.as_deref(), Some("https"));
    assert_eq!(named[0].container_port, 8443);
    assert_eq!(named[1].name.as_deref(), Some("metrics"));
    assert_eq!(named[1].container_port, 9090);
}

/// The pods take connections on their two named ports only: the webhook's
/// from anywhere (the API server has no address a selector can name), the
/// metrics' from the `monitoring` namespace only; the ports are the
/// container's own names, and the metrics one is where --metrics-listen
/// serves.
#[test]
fn a_network_policy_admits_the_webhook_port_and_metrics_from_monitoring_only() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let docs = &install().docs;
    let policy: NetworkPolicy = get(docs, "dljob");
    let spec = policy.spec.unwrap();
    let deployment: Deployment = get(docs, "dljob");
    let labels = deployment.spec.template.metadata.unwrap().labels.unwrap();
    let selected = spec.pod_selector.unwrap().match_labels.unwrap();
    assert!(selected.iter().all(|(k, v)| labels.get(k) == Some(v)));
    assert_eq!(spec.policy_types, Some(strings(&["Ingress"])));
    let rules = spec.ingress.unwrap();
    let ports = |i: usize| -> Vec<IntOrString> {
        rules[i]
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| p.port.unwrap())
            .collect()
    };
    assert_eq!(rules.len(), 2);
    assert_eq!(ports(0), [IntOrString::String("https".into())]);
    assert_eq!(rules[0].from, None);
    assert_eq!(ports(1), [IntOrString::String("metrics".into())]);
    let from = rules[1].from.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&from).unwrap(),
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    let container = &deployment.spec.template.spec.unwrap().containers[0];
    assert!(container
        .args
        .as_ref()
        .unwrap()
        .contains(&"--metrics-listen=0.0.0.0:9090".to_owned()));
}

#[test]
fn shipped_config_and_its_commented_nvidia_example_parse() {
    let config: ConfigMap = get(&install().docs, "dljob-config");
    let text = config.data.unwrap().remove("config.yaml").unwrap();
    assert_eq!(
        dljob::config::Config::from_yaml(&text).unwrap(),
        dljob::config::Config::default()
    );
    // Uncomment the accelerators example the way an admin would.
    let start = text.find("# accelerators:").unwrap();
    let example: String = text[start..]
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let config = dljob::config::Config::from_yaml(&example).unwrap();
    let gpu = &config.accelerators["nvidia.com/gpu"];
    assert_eq!(gpu.volumes[0].mount_path, "/usr/local/nvidia/lib64");
    // No env: LD_LIBRARY_PATH would replace the image's own.
    assert!(gpu.env.is_empty());
    assert!(config.warnings().is_empty());
    // And the tensorboard one.
    let start = text.find("# tensorboard:").unwrap();
    let example: String = text[start..]
        .lines()
        .take(3)
        .map(|l| l.strip_prefix("# ").unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let config = dljob::config::Config::from_yaml(&example).unwrap();
    assert_eq!(config.tensorboard.image, "tensorflow/tensorflow:2.20.0");
    assert_eq!(config.tensorboard.ttl_seconds_after_finished, Some(3600));
}

#[test]
fn dockerfile_builds_a_release_binary_into_a_non_root_image() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let froms = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert!(froms >= 2, "multi-stage build expected");
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.lines().any(|l| l.trim() == "USER 65532:65532"));
    assert!(dockerfile.contains(concat!("version=\"", env!("CARGO_PKG_VERSION"), "\"")));
}

/// How the stand-in kubectl of [`install_script`] answers.
#[derive(Default)]
struct Cluster {
    /// `rollout status` fails (no replica ready).
    rollout_fails: bool,
    /// cert-manager's CRDs are installed.
    cert_manager: bool,
    /// Namespaces that exist besides `dljob-system`.
    namespaces: &'static [&'static str],
    /// `dljob certs` was run (certs/ in the copy of the repository).
    certs: bool,
}

/// What `deploy/install` asks kubectl for, run from a copy of deploy/ and
/// crds/ (with certs/ when `cluster.certs`), with a stand-in kubectl that
/// records its arguments (DEPLOY for the copy's deploy/), renders with the
/// real `kubectl kustomize`, and answers the rest as `cluster` says.
fn install_script(args: &[&str], cluster: Cluster) -> (Option<i32>, Vec<String>, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch = Scratch::new(&format!("install-{run}"));
    copy_tree(&repo().join("deploy"), &scratch.0.join("deploy"));
    copy_tree(&repo().join("crds"), &scratch.0.join("crds"));
    if cluster.certs {
        dljob(&["certs", "--out", scratch.0.join("certs").to_str().unwrap()]);
    }
    let log = scratch.0.join("calls");
    let fake = scratch.0.join("kubectl");
    std::fs::write(
        &fake,
        format!(
            r#"#!/bin/sh
echo "$*" >> '{log}'
case "$1 $2" in
    "kustomize "*) exec kubectl "$@" ;;
    "get crd") [ -n "$CERT_MANAGER" ] || exit 1 ;;
    "get namespace") case " $NAMESPACES " in *" $3 "*) ;; *) exit 1 ;; esac ;;
esac
if [ "$3" = rollout ] && [ -n "$ROLLOUT_FAILS" ]; then exit 1; fi
"#,
            log = log.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = Command::new(scratch.0.join("deploy/install"));
    cmd.args(args)
        .env("KUBECTL", &fake)
        .env("NAMESPACES", cluster.namespaces.join(" "));
    if cluster.rollout_fails {
        cmd.env("ROLLOUT_FAILS", "1");
    }
    if cluster.cert_manager {
        cmd.env("CERT_MANAGER", "1");
    }
    let out = cmd.output().unwrap();
    let deploy = scratch.0.join("deploy").display().to_string();
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.replace(&deploy, "DEPLOY"))
        .collect();
    (
        out.status.code(),
        calls,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn install_registers_the_webhooks_only_after_a_replica_is_ready() {
    let ready = Cluster {
        certs: true,
        ..Cluster::default()
    };
    let (code, calls, _) = install_script(&[], ready);
    assert_eq!(code, Some(0));
    assert_eq!(
        calls,
        vec![
            "kustomize DEPLOY",
            "apply -k DEPLOY -l app.kubernetes.io/component!=admission-webhooks",
            "-n dljob-system rollout status deployment/dljob --timeout=5m",
            "apply -k DEPLOY -l app.kubernetes.io/component=admission-webhooks",
        ]
    );
    // No replica ready: the webhooks are not registered, and the user is
    // told nothing is refused and where to look.
    let not_ready = Cluster {
        rollout_fails: true,
        cert_manager: true,
        ..Cluster::default()
    };
    let (code, calls, stderr) = install_script(&["cert-manager"], not_ready);
    assert_eq!(code, Some(1));
    assert_eq!(
        calls,
        vec![
            "get crd certificates.cert-manager.io issuers.cert-manager.io",
            "kustomize DEPLOY/cert-manager",
            "apply -k DEPLOY/cert-manager -l app.kubernetes.io/component!=admission-webhooks",
            "-n dljob-system rollout status deployment/dljob --timeout=5m",
        ]
    );
    assert!(
        stderr.contains("the webhooks were NOT registered and\nnothing is refused"),
        "{stderr}"
    );
}

/// What a layout needs is checked before anything is applied: certs/ (a
/// kustomize error before), cert-manager's CRDs (a half install with pods
/// waiting forever for their certificate before), the namespaces the
/// namespaced layout puts Roles in (the apply failed after registering the
/// webhooks before: that layout could only go in all at once).
#[test]
fn install_checks_what_the_layout_needs_before_applying_anything() {
    let applied = |calls: &[String]| calls.iter().any(|c| c.starts_with("apply"));

    let (code, calls, stderr) = install_script(&[], Cluster::default());
    assert_eq!(code, Some(1));
    assert!(!applied(&calls), "{calls:?}");
    assert!(
        stderr.contains("no certificate yet: run `dljob certs` first"),
        "{stderr}"
    );

    let (code, calls, stderr) = install_script(&["cert-manager"], Cluster::default());
    assert_eq!(code, Some(1));
    assert!(!applied(&calls), "{calls:?}");
    assert!(stderr.contains("cert-manager is not installed"), "{stderr}");

    let only_a = Cluster {
        certs: true,
        namespaces: &["team-a"],
        ..Cluster::default()
    };
    let (code, calls, stderr) = install_script(&["namespaced"], only_a);
    assert_eq!(code, Some(1));
    assert!(!applied(&calls), "{calls:?}");
    assert!(
        stderr.contains("namespace(s) that do not\nexist: team-b."),
        "{stderr}"
    );
    let both = Cluster {
        certs: true,
        namespaces: &["team-a", "team-b"],
        ..Cluster::default()
    };
    let (code, calls, _) = install_script(&["namespaced"], both);
    assert_eq!(code, Some(0));
    assert!(
        calls.contains(&"get namespace team-a".to_owned()),
        "{calls:?}"
    );
    assert_eq!(
        calls.last().map(String::as_str),
        Some("apply -k DEPLOY/namespaced -l app.kubernetes.io/component=admission-webhooks")
    );

    let (code, calls, stderr) = install_script(&["everything"], Cluster::default());
    assert_eq!(code, Some(2));
    assert!(calls.is_empty());
    assert!(stderr.starts_with("usage: deploy/install"), "{stderr}");
}

#[test]
fn only_the_webhook_configurations_carry_the_label_install_registers_last() {
    for docs in [&install().docs[..], cert_manager()] {
        let labelled: Vec<String> = docs
            .iter()
            .filter(|d| {
                d["metadata"]["labels"]["app.kubernetes.io/component"] == "admission-webhooks"
            })
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            labelled,
            vec![
                "MutatingWebhookConfiguration/dljob",
                "ValidatingWebhookConfiguration/dljob"
            ]
        );
    }
}

// ---- the ValidatingAdmissionPolicy, evaluated --------------------------------

/// The rendered ValidatingAdmissionPolicy's CEL, run by a CEL interpreter on
/// admission requests shaped as the API server builds them (`request`,
/// `object`, `oldObject`, `variables`): None when it admits the request, or
/// the message of the first validation that refuses it. A request not from
/// dljob's service account, or of a resource the policy does not match,
/// is not evaluated (None).
fn policy_verdict(
    user: &str,
    (group, resource, sub): (&str, &str, &str),
    operation: &str,
    namespace: &str,
    object: Value,
    old: Value,
) -> Option<String> {
    use cel_interpreter::{Context, Program, Value as Cel};
    let policy = install()
        .docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the install ships the policy")
        .clone();
    let spec = &policy["spec"];
    let full = if sub.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{sub}")
    };
    let matched = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().unwrap().iter().any(|x| x == v);
            has("apiGroups", group) && has("resources", &full) && has("operations", operation)
        });
    let request = json!({
        "operation": operation, "namespace": namespace,
        "userInfo": {"username": user},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": sub,
    });
    let run = |expr: &str, variables: &Value| -> Cel {
        let program = Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut ctx = Context::default();
        ctx.add_variable("request", request.clone()).unwrap();
        ctx.add_variable("object", object.clone()).unwrap();
        ctx.add_variable("oldObject", old.clone()).unwrap();
        ctx.add_variable("variables", variables.clone()).unwrap();
        program
            .execute(&ctx)
            .unwrap_or_else(|e| panic!("{expr}: {e:?}"))
    };
    let none = json!({});
    for condition in spec["matchConditions"].as_array().unwrap() {
        if run(condition["expression"].as_str().unwrap(), &none) != Cel::Bool(true) {
            return None;
        }
    }
    if !matched {
        return None;
    }
    let mut variables = serde_json::Map::new();
    for v in spec["variables"].as_array().unwrap() {
        let value = run(
            v["expression"].as_str().unwrap(),
            &Value::Object(variables.clone()),
        )
        .json()
        .unwrap();
        variables.insert(v["name"].as_str().unwrap().to_owned(), value);
    }
    let variables = Value::Object(variables);
    for v in spec["validations"].as_array().unwrap() {
        match run(v["expression"].as_str().unwrap(), &variables) {
            Cel::Bool(true) => {}
            Cel::Bool(false) => return Some(v["message"].as_str().unwrap().to_owned()),
            other => panic!("{}: {other:?}", v["expression"]),
        }
    }
    None
}

const DLJOB_SA: &str = "system:serviceaccount:dljob-system:dljob";

fn labelled(kind: &str, labels: Value, owners: Value) -> Value {
    json!({"kind": kind, "metadata": {"name": "x", "namespace": "ml", "labels": labels, "ownerReferences": owners}})
}

#[test]
fn the_admission_policy_admits_dljobs_own_writes_and_refuses_the_rest() {
    let ours = || labelled("Pod", json!({"dljob.dev/job": "mnist"}), json!([]));
    let owned = || {
        labelled(
            "Service",
            json!({"app": "x"}),
            json!([{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "u", "controller": true}]),
        )
    };
    let foreign = || labelled("Service", json!({"app": "prod"}), json!([]));
    let null = Value::Null;
    // What the reconciler writes: created, patched, deleted, scaled, Events.
    for (what, gvr, op, object, old) in [
        (
            "create a job's Service",
            ("", "services", ""),
            "CREATE",
            ours(),
            null.clone(),
        ),
        (
            "mark a job's pod",
            ("", "pods", ""),
            "UPDATE",
            ours(),
            ours(),
        ),
        (
            "delete a job's pod",
            ("", "pods", ""),
            "DELETE",
            null.clone(),
            ours(),
        ),
        (
            "apply an owned Service",
            ("", "services", ""),
            "UPDATE",
            owned(),
            owned(),
        ),
        (
            "save a pod's manifest",
            ("", "podtemplates", ""),
            "CREATE",
            ours(),
            null.clone(),
        ),
        (
            "scale a job's set to 0",
            ("apps", "statefulsets", ""),
            "UPDATE",
            labelled("StatefulSet", json!({"dljob.dev/job": "mnist"}), json!([])),
            labelled("StatefulSet", json!({"dljob.dev/job": "mnist"}), json!([])),
        ),
        (
            "write a DLJob's status",
            ("dljob.dev", "dljobs", "status"),
            "UPDATE",
            ours(),
            ours(),
        ),
        (
            "an Event about a DLJob",
            ("events.k8s.io", "events", ""),
            "CREATE",
            json!({"kind": "Event", "metadata": {"name": "e"}, "regarding": {"kind": "DLJob", "name": "mnist"}}),
            null.clone(),
        ),
    ] {
        assert_eq!(
            policy_verdict(DLJOB_SA, gvr, op, "ml", object, old),
            None,
            "{what}"
        );
    }
    let only_jobs = Some(
        "dljob writes only the objects of a job (labelled dljob.dev/job or owned by a DLJob)"
            .to_owned(),
    );
    // Take-overs: a foreign Service patched (even into carrying the label),
    // a foreign pod deleted, an unlabelled Secret created.
    for (what, gvr, op, object, old) in [
        (
            "patch a foreign Service",
            ("", "services", ""),
            "UPDATE",
            foreign(),
            foreign(),
        ),
        (
            "label a foreign Service into a job",
            ("", "services", ""),
            "UPDATE",
            labelled("Service", json!({"dljob.dev/job": "victim"}), json!([])),
            foreign(),
        ),
        (
            "delete a foreign pod",
            ("", "pods", ""),
            "DELETE",
            null.clone(),
            foreign(),
        ),
        (
            "create an unlabelled Secret",
            ("", "secrets", ""),
            "CREATE",
            foreign(),
            null.clone(),
        ),
        (
            "scale a foreign Deployment",
            ("apps", "deployments", ""),
            "UPDATE",
            foreign(),
            foreign(),
        ),
    ] {
        assert_eq!(
            policy_verdict(DLJOB_SA, gvr, op, "ml", object, old),
            only_jobs,
            "{what}"
        );
    }
    // Nothing in the system namespaces, labelled or not.
    for ns in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "dljob-system",
    ] {
        assert_eq!(
            policy_verdict(
                DLJOB_SA,
                ("", "pods", ""),
                "CREATE",
                ns,
                ours(),
                null.clone()
            ),
            Some("dljob writes nothing in kube-system, kube-public, kube-node-lease or its own namespace".to_owned())
        );
    }
    // The scale subresource is not among what dljob writes: RBAC does not
    // grant it, and the policy has no exception for its label-less Scale.
    let rules = install()
        .docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap()["spec"]["matchConstraints"]["resourceRules"]
        .to_string();
    assert!(!rules.contains("scale"), "{rules}");
    assert_eq!(
        policy_verdict(
            DLJOB_SA,
            ("events.k8s.io", "events", ""),
            "CREATE",
            "ml",
            json!({"kind": "Event", "metadata": {"name": "e"}, "regarding": {"kind": "Pod", "name": "p"}}),
            null.clone()
        ),
        Some("dljob's Events are about DLJobs".to_owned())
    );
    // Anyone else's requests are not this policy's business.
    assert_eq!(
        policy_verdict(
            "system:serviceaccount:team-a:deployer",
            ("", "services", ""),
            "UPDATE",
            "kube-system",
            foreign(),
            foreign()
        ),
        None
    );
    // And the binding enforces it.
    let binding = install()
        .docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .unwrap();
    assert_eq!(binding["spec"]["policyName"], "dljob-writes-only-jobs");
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
}

/// deploy/namespaced/: no ClusterRole; in each namespace its config lists,
/// a Role with exactly the ClusterRole's rules (what `dljob rbac` prints:
/// roles.yaml is its output), bound to dljob's service account; the
/// webhooks see those namespaces only.
#[test]
fn the_namespaced_install_has_roles_in_its_namespaces_only() {
    let docs = &install().namespaced;
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "ClusterRole" || d["kind"] == "ClusterRoleBinding"),
        "a ClusterRole in the namespaced install"
    );
    let config: ConfigMap = get(docs, "dljob-config");
    let config = dljob::config::Config::from_yaml(&config.data.unwrap()["config.yaml"]).unwrap();
    let namespaces = config.namespaces.clone();
    assert_eq!(namespaces, ["team-a", "team-b"]);
    let cluster: ClusterRole = get(&install().docs, "dljob");
    for ns in &namespaces {
        let in_ns = |kind: &str| {
            docs.iter()
                .find(|d| d["kind"] == kind && d["metadata"]["namespace"] == ns.as_str())
                .unwrap_or_else(|| panic!("no {kind} in {ns}"))
                .clone()
        };
        let role: Role = serde_json::from_value(in_ns("Role")).unwrap();
        assert_eq!(role.rules, cluster.rules, "{ns}");
        let binding: RoleBinding = serde_json::from_value(in_ns("RoleBinding")).unwrap();
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(binding.role_ref.name, "dljob");
        let [subject] = <[_; 1]>::try_from(binding.subjects.unwrap()).unwrap();
        assert_eq!(
            (
                subject.kind.as_str(),
                subject.name.as_str(),
                subject.namespace.as_deref()
            ),
            ("ServiceAccount", "dljob", Some("dljob-system"))
        );
    }
    let roles = docs
        .iter()
        .filter(|d| d["kind"] == "Role" && d["metadata"]["name"] == "dljob")
        .count();
    assert_eq!(roles, namespaces.len());
    let m: MutatingWebhookConfiguration = get(docs, "dljob");
    let v: ValidatingWebhookConfiguration = get(docs, "dljob");
    let only = serde_json::to_value(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(namespaces.clone()),
        }]),
        match_labels: None,
    })
    .unwrap();
    for selector in [
        &m.webhooks.unwrap()[0].namespace_selector,
        &v.webhooks.unwrap()[0].namespace_selector,
    ] {
        assert_eq!(serde_json::to_value(selector).unwrap(), only);
    }
    // roles.yaml is what `dljob rbac` prints for those namespaces.
    let mut args = vec!["rbac"];
    for ns in &namespaces {
        args.extend(["-n", ns.as_str()]);
    }
    let printed = String::from_utf8(dljob(&args).stdout).unwrap();
    assert_eq!(
        printed,
        std::fs::read_to_string(repo().join("deploy/namespaced/roles.yaml")).unwrap(),
        "deploy/namespaced/roles.yaml is stale: run dljob rbac -n team-a -n team-b > deploy/namespaced/roles.yaml"
    );
}

/// The DLJob's scale subresource: the workers' replicas of an elastic
/// job, its selector for an autoscaler; and the CRD's own rule, run by a
/// CEL interpreter as the API server runs it on every write (the scale
/// subresource's too), refuses a size on a job that is not elastic.
#[test]
fn the_dljob_scales_only_when_elastic() {
    use cel_interpreter::{Context, Program, Value as Cel};
    let text = std::fs::read_to_string(repo().join("crds/dljob.yaml")).unwrap();
    let crd: Value = serde_saphyr::from_str(&text).unwrap();
    let version = &crd["spec"]["versions"][0];
    assert_eq!(
        version["subresources"]["scale"],
        json!({
            "specReplicasPath": ".spec.elasticReplicas",
            "statusReplicasPath": ".status.replicas.worker.replicas",
            "labelSelectorPath": ".status.selector",
        })
    );
    let rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["x-kubernetes-validations"]
        .as_array()
        .expect("the spec has its CEL rules");
    assert_eq!(rules.len(), 1);
    let program = Program::compile(rules[0]["rule"].as_str().unwrap()).unwrap();
    let admits = |spec: Value| {
        let mut ctx = Context::default();
        ctx.add_variable("self", spec).unwrap();
        program.execute(&ctx).unwrap() == Cel::Bool(true)
    };
    let base = json!({"framework": "pytorch", "replicas": "worker=3", "port": 23456});
    let with = |extra: Value| {
        let mut spec = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    assert!(admits(base.clone()));
    assert!(admits(with(json!({"elastic": "2:4"}))));
    assert!(admits(with(
        json!({"elastic": "2:4", "elasticReplicas": 4})
    )));
    assert!(!admits(with(json!({"elasticReplicas": 4}))));
    assert_eq!(
        rules[0]["message"],
        "only an elastic job (dljob.dev/elastic) can be scaled: the size of any other job is its members' (dljob.dev/replicas)"
    );
}
