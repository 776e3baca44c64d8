//! The objects the reconciler owns, declared as data by pure functions of
//! the job: the DLJob from a member, and [`owned`] — the headless Service,
//! the gang scheduler's PodGroup, the TensorBoard Deployment and Service,
//! the Volcano files' ConfigMap and the mpi/chainer SSH Secret, each with
//! how it is kept ([`Keep`]). The
//! controller applies them all with one generic step.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject};
use kube::Resource;
use serde_json::Value;

use crate::config::Config;
use crate::contract as c;
use crate::crd::DLJob;
use crate::frameworks;
use crate::member::MemberSpec;
use crate::mutate;
use crate::tensorboard;

/// How the reconciler keeps an object it owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Server-side applied whenever the cluster's copy lacks what it
    /// declares (missing, or changed by another writer): drift is repaired.
    Apply,
    /// Created once, then never read or rewritten: regenerating it would
    /// break what already uses it (the SSH key the pods have mounted). The
    /// DLJob status records it.
    CreateOnce,
}

/// An object the reconciler keeps for a job, as data.
#[derive(Clone, Debug)]
pub(crate) struct Owned {
    pub resource: ApiResource,
    pub object: DynamicObject,
    pub keep: Keep,
    /// For a kind the cluster may not serve (a scheduler's PodGroup): what
    /// to install, for the condition and Event that say it is missing.
    pub install_hint: Option<&'static str>,
}

impl Owned {
    fn of<K>(object: &K, keep: Keep) -> Self
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let value = serde_json::to_value(object).expect("a Kubernetes object serializes");
        Self {
            resource: ApiResource::erase::<K>(&()),
            object: serde_json::from_value(value).expect("a Kubernetes object is a DynamicObject"),
            keep,
            install_hint: None,
        }
    }

    /// `apiVersion/kind` — what the cluster must serve.
    pub(crate) fn kind(&self) -> String {
        format!("{} {}", self.resource.api_version, self.resource.kind)
    }

    pub(crate) fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }

    /// `Kind/name`, for logs and errors.
    pub(crate) fn describe(&self) -> String {
        format!("{}/{}", self.resource.kind, self.name())
    }
}

/// Everything the reconciler keeps for `job`: the headless Service, the
/// gang scheduler's PodGroup, the TensorBoard (see [`tensorboard`]; `now`
/// decides whether it still runs), and for frameworks that use SSH the
/// Secret (its key drawn by `new_key`) unless the status records it
/// already. Empty until the DLJob has a uid (an owner reference needs it).
pub(crate) fn owned(
    job: &DLJob,
    config: &Config,
    now: Timestamp,
    min_resources: Option<Value>,
    new_key: impl FnOnce() -> Result<ssh_key::PrivateKey, ssh_key::Error>,
) -> Result<Vec<Owned>, ssh_key::Error> {
    let mut out = Vec::new();
    let Some(svc) = service(job) else {
        return Ok(out);
    };
    out.push(Owned::of(&svc, Keep::Apply));
    out.extend(pod_group(job, min_resources.as_ref()));
    if let Some((deployment, service)) = tensorboard::objects(job, &config.tensorboard, now) {
        out.push(Owned::of(&deployment, Keep::Apply));
        out.push(Owned::of(&service, Keep::Apply));
    }
    let cluster_domain = config.cluster_domain.as_str();
    if let Some(files) = volcano_config_map(job, cluster_domain) {
        out.push(Owned::of(&files, Keep::Apply));
    }
    // The SSH Secret last: once it is created, only its record in the
    // status is left to write (see the reconciler's `ensure_owned`).
    let uses_ssh = job.spec.framework().is_some_and(|f| f.uses_ssh());
    let secret_name = mutate::ssh_secret_name(&job.metadata.name.clone().unwrap_or_default());
    let recorded = job.status.as_ref().and_then(|s| s.ssh_secret.as_deref()) == Some(&secret_name);
    if uses_ssh && !recorded {
        if let Some(secret) = ssh_secret(job, &new_key()?, cluster_domain) {
            out.push(Owned::of(&secret, Keep::CreateOnce));
        }
    }
    Ok(out)
}

/// The gang scheduler's PodGroup, for schedulers that read one: owned by
/// the DLJob, `minMember` from the topology (see [`gang::Group`]),
/// `minResources` as [`min_resources`] found them.
pub(crate) fn pod_group(job: &DLJob, min_resources: Option<&Value>) -> Option<Owned> {
    let scheduler = job.spec.scheduler()?;
    let kind = scheduler.pod_group_kind()?;
    let framework = job.spec.framework()?;
    let name = job.metadata.name.clone()?;
    let group = job.spec.gang_group(&name, framework);
    let api_version = format!("{}/{}", kind.group, kind.version);
    let object = DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: api_version.clone(),
            kind: kind.kind.to_owned(),
        }),
        metadata: job.owned_meta(name.clone())?,
        data: serde_json::json!({"spec": scheduler.pod_group_spec(&group, min_resources)}),
    };
    Some(Owned {
        resource: ApiResource {
            group: kind.group.to_owned(),
            version: kind.version.to_owned(),
            api_version,
            kind: kind.kind.to_owned(),
            plural: kind.plural.to_owned(),
        },
        object,
        keep: Keep::Apply,
        install_hint: Some(scheduler.install_hint()),
    })
}

/// What the gang's `min_member` pods request together: the roles in rank
/// order (the gated role left out, as in [`gang::Group`]), each member
/// (a workload over its own size, a plain pod once) as one of its pods
/// requests. None when no member says, or when a quantity does not parse
/// or is absurdly large (the PodGroup then goes without `minResources`;
/// the requests are the user's, and summing them must never panic).
pub(crate) fn min_resources<'m>(
    spec: &crate::crd::JobSpec,
    members: impl Iterator<Item = &'m MemberSpec>,
) -> Option<Value> {
    use kube_quantity::ParsedQuantity;
    /// Past this many base units (1e15 bytes, a million cores) a sum is
    /// not a request but an error; it also keeps the decimal arithmetic
    /// far from overflowing.
    const LIMIT: f64 = 1e15;
    let framework = spec.framework()?;
    let mut members: Vec<&MemberSpec> = members.filter(|m| !m.pod_requests.is_empty()).collect();
    members.sort_by_key(|m| (m.index_offset.or(m.index).unwrap_or(0), m.name.clone()));
    let group = spec.gang_group("", framework);
    let mut left = group.min_member;
    let mut total: BTreeMap<String, ParsedQuantity> = BTreeMap::new();
    for role in frameworks::rank_order(framework, &spec.replicas) {
        if Some(role) == framework.gated_role() {
            continue;
        }
        for member in members.iter().filter(|m| m.role == role) {
            let pods = match member.kind {
                crate::object::Kind::Pod => 1,
                _ => member.size.unwrap_or(0),
            }
            .min(left);
            if pods == 0 {
                continue;
            }
            left -= pods;
            for (resource, quantity) in &member.pod_requests {
                let q = ParsedQuantity::try_from(quantity.as_str()).ok()?;
                let each = q.to_bytes_f64()?;
                if !(0.0..=LIMIT / f64::from(pods)).contains(&each) {
                    return None;
                }
                let q = q * pods;
                let sum = match total.remove(resource) {
                    Some(before) => {
                        if before.to_bytes_f64()? + each * f64::from(pods) > LIMIT {
                            return None;
                        }
                        before + q
                    }
                    None => q,
                };
                total.insert(resource.clone(), sum);
            }
        }
    }
    (!total.is_empty()).then(|| {
        Value::Object(
            total
                .into_iter()
                .map(|(k, v)| (k, Value::String(v.to_string())))
                .collect(),
        )
    })
}

/// Whether the cluster's copy of an object (`current`) holds everything
/// `desired` declares: every field of an object, and for a list every
/// element in some element of the current list. What the API server
/// defaults or another writer adds beside it is not drift.
pub(crate) fn satisfies(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| c.get(k).is_some_and(|cv| satisfies(cv, dv))),
        (Value::Array(c), Value::Array(d)) => {
            d.iter().all(|dv| c.iter().any(|cv| satisfies(cv, dv)))
        }
        (c, d) => c == d,
    }
}

/// The DLJob for the job `member` belongs to, from its annotations. A job
/// with a TensorBoard also gets the volume its TensorBoard mounts
/// (`tensorboard_volume`, from this member's pod spec) in the annotation
/// [`c::TENSORBOARD_VOLUME`]: the DLJob then holds all its TensorBoard needs
/// for its whole life, even once the clean-pod policy removed the members,
/// and the volume is fixed at first sight, as the spec is.
pub(crate) fn dljob_for(member: &MemberSpec, tensorboard_volume: Option<&Value>) -> DLJob {
    let mut job = DLJob::new(&member.job, crate::crd::JobSpec::clone(&member.spec));
    job.metadata.namespace = Some(member.namespace.clone());
    job.metadata.labels = Some(BTreeMap::from([(c::JOB.to_owned(), member.job.clone())]));
    if let Some(volume) = tensorboard_volume {
        tensorboard::record_volume(&mut job, volume);
    }
    job
}

/// The job's headless Service `j`: every member pod gets the DNS name
/// `j-r-i.j.ns.svc`, ready or not. None when the DLJob has no uid yet.
pub(crate) fn service(job: &DLJob) -> Option<Service> {
    let name = job.metadata.name.clone()?;
    Some(Service {
        metadata: job.owned_meta(name.clone())?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(BTreeMap::from([(c::JOB.to_owned(), name)])),
            ports: Some(vec![ServicePort {
                name: Some(mutate::PORT_NAME.to_owned()),
                port: i32::from(job.spec.port),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// An ed25519 key pair for the job.
pub(crate) fn generate_key() -> Result<ssh_key::PrivateKey, ssh_key::Error> {
    ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
}

/// The job as the frameworks see it. None without a name and namespace.
fn view<'j>(job: &'j DLJob, cluster_domain: &'j str) -> Option<frameworks::JobView<'j>> {
    Some(frameworks::JobView {
        name: job.metadata.name.as_deref()?,
        namespace: job.metadata.namespace.as_deref()?,
        cluster_domain,
        topology: &job.spec.replicas,
        port: job.spec.port,
        slots: &job.spec.slots,
        elastic: job.spec.elastic,
        backoff_limit: job.spec.policies.backoff_limit,
        compat: job.spec.compat.as_deref(),
        mpi: job.spec.mpi_implementation.unwrap_or_default(),
    })
}

/// The ConfigMap of the job's Volcano files (`<job>-volcano`, what
/// Volcano's svc plugin puts in its own), which its pods mount at
/// /etc/volcano; None unless the job is under `dljob.dev/compat: volcano`
/// (or the DLJob has no uid yet).
pub(crate) fn volcano_config_map(job: &DLJob, cluster_domain: &str) -> Option<ConfigMap> {
    let framework = job.spec.framework()?;
    let view = view(job, cluster_domain)?;
    let files = frameworks::volcano_files(framework, &view);
    if files.is_empty() {
        return None;
    }
    Some(ConfigMap {
        metadata: job.owned_meta(c::volcano_config_map(view.name))?,
        data: Some(files.into_iter().collect()),
        ..ConfigMap::default()
    })
}

/// The ssh client config: every host of the topology (by its host name,
/// its name under the Service, as Volcano writes it, and in full), no host
/// key checks (the hosts' keys are generated at pod start and unknown in
/// advance).
pub(crate) fn ssh_config(job: &DLJob, ssh_path: &str, cluster_domain: &str) -> Option<String> {
    let view = view(job, cluster_domain)?;
    let mut out = String::new();
    for (role, count) in view.topology.roles() {
        for index in 0..count {
            let short = c::pod_hostname(view.name, role, index);
            let under_service = view.short_host(role, index);
            let fqdn = view.host(role, index);
            out.push_str(&format!(
                "Host {short} {under_service} {fqdn}\n    HostName {fqdn}\n    Port {}\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    IdentityFile {ssh_path}/{}\n\n",
                job.spec.port,
                c::SSH_PRIVATE_KEY
            ));
        }
    }
    Some(out)
}

/// The Secret `j-ssh` the webhook mounts on mpi/chainer pods: the key
/// pair, `authorized_keys` and the ssh `config`.
pub(crate) fn ssh_secret(
    job: &DLJob,
    key: &ssh_key::PrivateKey,
    cluster_domain: &str,
) -> Option<Secret> {
    let name = job.metadata.name.as_deref()?;
    let ssh_path = job
        .spec
        .ssh_path
        .as_deref()
        .unwrap_or(crate::member::DEFAULT_SSH_PATH);
    let private = key.to_openssh(ssh_key::LineEnding::LF).ok()?.to_string();
    let public = key.public_key().to_openssh().ok()?;
    let string_data = BTreeMap::from([
        (c::SSH_PRIVATE_KEY.to_owned(), private),
        (c::SSH_PUBLIC_KEY.to_owned(), format!("{public}\n")),
        (c::SSH_AUTHORIZED_KEYS.to_owned(), format!("{public}\n")),
        (
            c::SSH_CONFIG.to_owned(),
            ssh_config(job, ssh_path, cluster_domain)?,
        ),
    ]);
    Some(Secret {
        metadata: job.owned_meta(mutate::ssh_secret_name(name))?,
        string_data: Some(string_data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{TensorBoard, Topology};
    use crate::crd::JobSpec;
    use serde_json::json;

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn job(framework: &str, replicas: &str, port: u16) -> DLJob {
        let mut j = DLJob::new(
            "mnist",
            JobSpec::new(framework, Topology::parse(replicas).unwrap(), port),
        );
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("u1".into());
        j
    }

    #[test]
    fn service_is_headless_owned_and_selects_the_job() {
        let svc =
            serde_json::to_value(service(&job("pytorch", "master=1,worker=2", 23456)).unwrap())
                .unwrap();
        assert_eq!(
            svc,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "mnist", "namespace": "ml",
                    "labels": {"dljob.dev/job": "mnist"},
                    "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "u1", "controller": true}]
                },
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": true,
                    "selector": {"dljob.dev/job": "mnist"},
                    "ports": [{"name": "dljob", "port": 23456, "protocol": "TCP"}]
                }
            })
        );
    }

    /// The captured Service a real API server held for `tf-ps`: dljob's
    /// fields plus the server's defaults (clusterIPs, targetPort, …).
    fn captured_service() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/cluster/services.json"
        );
        let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        list["items"][0].clone()
    }

    fn tf_ps() -> DLJob {
        let mut j = job("tensorflow", "chief=1,worker=2,ps=1", 2222);
        j.metadata.name = Some("tf-ps".into());
        j.metadata.namespace = Some("capture-397557".into());
        j.metadata.uid = Some("55041422-aea7-49a9-8c94-f34a36d0b255".into());
        j
    }

    #[test]
    fn a_defaulted_service_satisfies_the_declared_one_and_an_edited_one_does_not() {
        let desired = serde_json::to_value(service(&tf_ps()).unwrap()).unwrap();
        let current = captured_service();
        assert!(satisfies(&current, &desired));
        // A label another writer added is not drift.
        let mut labelled = current.clone();
        labelled["metadata"]["labels"]["team"] = "vision".into();
        assert!(satisfies(&labelled, &desired));
        // A changed selector, a removed owner, another port are.
        let mut selector = current.clone();
        selector["spec"]["selector"] = serde_json::json!({"app": "x"});
        assert!(!satisfies(&selector, &desired));
        let mut orphaned = current.clone();
        orphaned["metadata"]["ownerReferences"] = serde_json::json!([]);
        assert!(!satisfies(&orphaned, &desired));
        let mut port = current;
        port["spec"]["ports"][0]["port"] = 2300.into();
        assert!(!satisfies(&port, &desired));
    }

    fn member(
        framework: &str,
        replicas: &str,
        role: &str,
        gang: &str,
        resources: Value,
    ) -> MemberSpec {
        let sts = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": role, "namespace": "ml",
                "labels": {"dljob.dev/job": "j", "dljob.dev/role": role},
                "annotations": {"dljob.dev/framework": framework, "dljob.dev/replicas": replicas, "dljob.dev/gang": gang}
            },
            "spec": {
                "replicas": c::Topology::parse(replicas).unwrap().count(role).unwrap(),
                "template": {"spec": {"containers": [
                    {"name": framework, "resources": resources},
                    {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}}
                ]}}
            }
        });
        crate::member::parse(
            crate::object::Kind::StatefulSet,
            &sts,
            None,
            &crate::config::Config::default(),
        )
        .unwrap()
        .unwrap()
        .member
    }

    /// The volcano-tensorflow example's shape: every pod's requests (a
    /// GPU container's limits count as its requests), sidecars included,
    /// times each role's count.
    #[test]
    fn min_resources_sum_what_the_gang_requests() {
        let topology = "chief=1,worker=4,ps=2";
        let members = [
            member(
                "tensorflow",
                topology,
                "chief",
                "volcano",
                serde_json::json!({"limits": {"nvidia.com/gpu": 1}}),
            ),
            member(
                "tensorflow",
                topology,
                "worker",
                "volcano",
                serde_json::json!({"limits": {"nvidia.com/gpu": "1"}}),
            ),
            member(
                "tensorflow",
                topology,
                "ps",
                "volcano",
                serde_json::json!({"requests": {"cpu": "2", "memory": "4Gi"}}),
            ),
        ];
        assert_eq!(
            min_resources(&members[0].spec, members.iter()),
            Some(serde_json::json!({"cpu": "4700m", "memory": "8Gi", "nvidia.com/gpu": "5"}))
        );
        // mpi: the gated launcher is not in the gang, nor in its resources.
        let mpi = [
            member(
                "mpi",
                "launcher=1,worker=2",
                "launcher",
                "coscheduling",
                serde_json::json!({"requests": {"cpu": "1"}}),
            ),
            member(
                "mpi",
                "launcher=1,worker=2",
                "worker",
                "coscheduling",
                serde_json::json!({"limits": {"nvidia.com/gpu": "4"}}),
            ),
        ];
        assert_eq!(
            min_resources(&mpi[0].spec, mpi.iter()),
            Some(serde_json::json!({"cpu": "200m", "nvidia.com/gpu": "8"}))
        );
        // Worker sets count each over its own size: 2 × 8 + 4 × 4 GPUs.
        let set = |name: &str, size: u32, offset: u32, gpus: &str| {
            let mut m = member(
                "pytorch",
                "worker=6",
                "worker",
                "volcano",
                serde_json::json!({"limits": {"nvidia.com/gpu": gpus}}),
            );
            m.name = name.into();
            m.size = Some(size);
            m.index_offset = Some(offset);
            m
        };
        let sets = [set("gpu8", 2, 0, "8"), set("gpu4", 4, 2, "4")];
        assert_eq!(
            min_resources(&sets[0].spec, sets.iter()),
            Some(serde_json::json!({"cpu": "600m", "nvidia.com/gpu": "32"}))
        );
        // Absurd requests (the API server takes 1e27) give no minResources
        // rather than an overflow.
        let huge = member(
            "pytorch",
            "worker=6",
            "worker",
            "volcano",
            serde_json::json!({"requests": {"memory": "1e27"}}),
        );
        assert_eq!(min_resources(&huge.spec, [&huge].into_iter()), None);
        // Without a PodGroup (kueue) members keep no requests: nothing.
        let kueue = member(
            "pytorch",
            "worker=2",
            "worker",
            "kueue",
            serde_json::json!({"limits": {"nvidia.com/gpu": "1"}}),
        );
        assert!(kueue.pod_requests.is_empty());
        assert_eq!(min_resources(&kueue.spec, [&kueue].into_iter()), None);
    }

    #[test]
    fn owned_objects_are_the_service_and_for_ssh_frameworks_the_secret_once() {
        let key = || {
            Ok(ssh_key::PrivateKey::from(
                ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]),
            ))
        };
        let kinds = |owned: &[Owned]| -> Vec<(String, Keep)> {
            owned.iter().map(|o| (o.describe(), o.keep)).collect()
        };
        let tf = owned(&tf_ps(), &Config::default(), t(0), None, key).unwrap();
        assert_eq!(kinds(&tf), [("Service/tf-ps".to_owned(), Keep::Apply)]);
        assert_eq!(tf[0].resource.plural, "services");
        let mut mpi = job("mpi", "launcher=1,worker=2", 22);
        assert_eq!(
            kinds(&owned(&mpi, &Config::default(), t(0), None, key).unwrap()),
            [
                ("Service/mnist".to_owned(), Keep::Apply),
                ("Secret/mnist-ssh".to_owned(), Keep::CreateOnce)
            ]
        );
        // Recorded in the status: never generated again.
        mpi.status = Some(crate::crd::DLJobStatus {
            ssh_secret: Some("mnist-ssh".into()),
            ..Default::default()
        });
        let never = || -> Result<ssh_key::PrivateKey, ssh_key::Error> { panic!("a key was drawn") };
        assert_eq!(
            kinds(&owned(&mpi, &Config::default(), t(0), None, never).unwrap()),
            [("Service/mnist".to_owned(), Keep::Apply)]
        );
        // The Secret comes last, after a gang's PodGroup: the reconciler
        // creates it after every other owned object, so that only its
        // record in the status remains to be written.
        let mut gang = job("mpi", "launcher=1,worker=2", 22);
        gang.spec.gang = "volcano".into();
        let all = owned(&gang, &Config::default(), t(0), None, key).unwrap();
        assert_eq!(
            kinds(&all),
            [
                ("Service/mnist".to_owned(), Keep::Apply),
                ("PodGroup/mnist".to_owned(), Keep::Apply),
                ("Secret/mnist-ssh".to_owned(), Keep::CreateOnce)
            ]
        );
        // No uid yet: nothing can be owned.
        mpi.metadata.uid = None;
        assert!(owned(&mpi, &Config::default(), t(0), None, never)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn ssh_secret_holds_keys_and_a_config_per_host() {
        let key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]));
        let s = ssh_secret(&job("mpi", "launcher=1,worker=2", 22), &key, "").unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("mnist-ssh"));
        let data = s.string_data.unwrap();
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub"]
        );
        assert!(data["id_ed25519"].starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(data["authorized_keys"].starts_with("ssh-ed25519 "));
        assert_eq!(data["authorized_keys"], data["id_ed25519.pub"]);
        assert_eq!(
            data["config"].split("\n\n").next().unwrap(),
            "Host mnist-launcher-0 mnist-launcher-0.mnist mnist-launcher-0.mnist.ml.svc\n    HostName mnist-launcher-0.mnist.ml.svc\n    Port 22\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    IdentityFile /root/.ssh/id_ed25519"
        );
        assert_eq!(
            data["config"].matches("StrictHostKeyChecking no").count(),
            3
        );
        assert!(data["config"]
            .contains("Host mnist-worker-1 mnist-worker-1.mnist mnist-worker-1.mnist.ml.svc\n"));
        // A generated key is a different one every time.
        assert_ne!(
            generate_key().unwrap().public_key(),
            generate_key().unwrap().public_key()
        );
    }

    /// The DLJob made from a member with `dljob.dev/tensorboard:
    /// logs:runs/mnist` whose volume `logs` is an nfs export.
    fn with_tensorboard() -> DLJob {
        let member = crate::member::parse(
            crate::object::Kind::Pod,
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "mnist-master", "namespace": "ml",
                    "labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "master"},
                    "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=2",
                        "dljob.dev/port": "23456", "dljob.dev/tensorboard": "logs:runs/mnist"}},
                "spec": {"containers": [{"name": "pytorch"}]}
            }),
            None,
            &Config::default(),
        )
        .unwrap()
        .unwrap()
        .member;
        assert_eq!(
            member.spec.tensorboard,
            Some(TensorBoard::parse("logs:runs/mnist").unwrap())
        );
        let volume = json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}});
        let mut j = dljob_for(&member, Some(&volume));
        j.metadata.uid = Some("u1".into());
        j
    }

    #[test]
    fn a_dljob_records_the_tensorboard_volume_of_the_member_it_is_made_from() {
        let j = with_tensorboard();
        assert_eq!(
            j.metadata.annotations.as_ref().unwrap()[c::TENSORBOARD_VOLUME],
            r#"{"name":"logs","nfs":{"path":"/exports/ml","server":"nfs.example.internal"}}"#
        );
        assert_eq!(
            tensorboard::recorded_volume(&j).unwrap(),
            Some(
                json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}})
            )
        );
        // A job without a TensorBoard records nothing, whatever the member has.
        let plain = dljob_for(
            &plain_member(),
            Some(&json!({"name": "logs", "emptyDir": {}})),
        );
        assert_eq!(plain.metadata.annotations, None);
        assert_eq!(tensorboard::recorded_volume(&plain), Ok(None));
    }

    /// A pytorch worker without a TensorBoard.
    fn plain_member() -> crate::member::MemberSpec {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "namespace": "ml",
                "labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=1"}},
            "spec": {"containers": [{"name": "pytorch"}]}
        });
        crate::member::parse(crate::object::Kind::Pod, &pod, None, &Config::default())
            .unwrap()
            .unwrap()
            .member
    }

    #[test]
    fn the_tensorboard_objects_are_kept_after_the_headless_service() {
        let j = with_tensorboard();
        let kinds: Vec<(String, Keep)> = owned(&j, &Config::default(), t(0), None, generate_key)
            .unwrap()
            .iter()
            .map(|o| (o.describe(), o.keep))
            .collect();
        assert_eq!(
            kinds,
            [
                ("Service/mnist".to_owned(), Keep::Apply),
                ("Deployment/mnist-tensorboard".to_owned(), Keep::Apply),
                ("Service/mnist-tensorboard".to_owned(), Keep::Apply),
            ]
        );
    }

    #[test]
    fn a_job_without_a_usable_tensorboard_volume_keeps_the_rest() {
        let mut j = with_tensorboard();
        j.metadata.annotations = None;
        // The rest of the job is kept as ever.
        let kinds: Vec<String> = owned(&j, &Config::default(), t(0), None, generate_key)
            .unwrap()
            .iter()
            .map(Owned::describe)
            .collect();
        assert_eq!(kinds, ["Service/mnist"]);
    }
}
