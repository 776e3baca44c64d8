//! The mutation of DESIGN §2: (object, config) → (mutated object, warnings).
//! Pure: no I/O, no clock. Mutating a mutated object changes nothing.

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::contract as c;
use crate::frameworks::{self, Env, Member};
use crate::member::{self, MemberSpec, Parsed, PodOwner, Violations};
use crate::object::{self, at, Kind};

/// Directory the hostfile volume is mounted at.
pub const HOSTFILE_DIR: &str = "/etc/dljob";
/// Path of the hostfile inside containers.
pub const HOSTFILE_PATH: &str = "/etc/dljob/hostfile";
/// Name of the downwardAPI volume that projects the hostfile annotation.
pub const HOSTFILE_VOLUME: &str = "dljob-hostfile";
/// Name of the Secret volume holding the job's SSH keys (mpi, chainer).
pub const SSH_VOLUME: &str = "dljob-ssh";
/// Name of the container port dljob adds.
pub const PORT_NAME: &str = "dljob";
/// File mode of the SSH Secret's files (0600).
pub const SSH_MODE: u32 = 0o600;

/// The admission operation, as far as mutation cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// A mutated object and what the user should be told.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// Name of the SSH Secret of job `job`.
pub fn ssh_secret_name(job: &str) -> String {
    format!("{job}-ssh")
}

/// Mutates `object` of `kind`. `Ok(None)`: not a member, nothing to do.
/// `namespace` is the request's namespace (used when the object has none).
///
/// On UPDATE only what is still missing and still mutable is added: labels
/// and annotations, and a StatefulSet's pod template. Pod specs and Job
/// templates are immutable once created and are left alone.
pub fn mutate(
    kind: Kind,
    object: &Value,
    namespace: Option<&str>,
    operation: Operation,
    config: &Config,
) -> Result<Option<Mutation>, Violations> {
    let Some(Parsed {
        member,
        mut warnings,
    }) = member::parse(kind, object, namespace, config)?
    else {
        return Ok(None);
    };
    let mut out = object.clone();
    match kind {
        Kind::Pod => {
            if operation == Operation::Create {
                mutate_pod(&member, &mut out, config, &mut warnings);
            }
        }
        Kind::StatefulSet | Kind::Job => {
            mutate_workload(&member, &mut out, operation, &mut warnings);
        }
    }
    Ok(Some(Mutation {
        object: out,
        warnings,
    }))
}

/// Workloads: the pod template carries the job's labels and annotations so
/// that the pods reach the pod webhook and the Service; the rest happens
/// per pod, where the index is known.
fn mutate_workload(m: &MemberSpec, obj: &mut Value, op: Operation, warnings: &mut Vec<String>) {
    if m.topology_inferred {
        set_missing(
            obj,
            &["metadata", "annotations"],
            c::REPLICAS,
            &m.topology.to_string(),
        );
    }
    let template_mutable = m.kind == Kind::StatefulSet || op == Operation::Create;
    if template_mutable {
        let own_labels = object::string_map(obj, &[], "labels")
            .cloned()
            .unwrap_or_default();
        let own_annotations = object::string_map(obj, &[], "annotations")
            .cloned()
            .unwrap_or_default();
        let tpl = &["spec", "template", "metadata"];
        for key in [c::JOB, c::ROLE] {
            if let Some(Value::String(v)) = own_labels.get(key) {
                set_missing_at(obj, tpl, "labels", key, v);
            }
        }
        let propagated = c::JOB_WIDE_ANNOTATIONS
            .iter()
            .chain(&[c::CONTAINER, c::SSH_PATH]);
        for key in propagated {
            if let Some(Value::String(v)) = own_annotations.get(*key) {
                set_missing_at(obj, tpl, "annotations", key, v);
            }
        }
        if m.topology_inferred {
            set_missing_at(
                obj,
                tpl,
                "annotations",
                c::REPLICAS,
                &m.topology.to_string(),
            );
        }
    }
    if m.kind == Kind::StatefulSet && op == Operation::Create {
        let spec = object::object_at_mut(obj, &["spec"]).expect("a StatefulSet has a spec object");
        match spec.get("serviceName").and_then(Value::as_str) {
            None | Some("") => {
                spec.insert("serviceName".into(), Value::String(m.job.clone()));
            }
            Some(s) if s != m.job => warnings.push(format!(
                "StatefulSet serviceName \"{s}\" kept; its pods are still reachable as {}-{}-N.{}.{}.svc through the job's Service \"{}\"",
                m.job, m.role, m.job, m.namespace, m.job
            )),
            Some(_) => {}
        }
        if !m.ordered_start {
            spec.insert(
                "podManagementPolicy".into(),
                Value::String("Parallel".into()),
            );
        }
    }
}

fn set_missing(obj: &mut Value, path: &[&str], key: &str, value: &str) {
    if let Some(map) = object::object_at_mut(obj, path) {
        map.entry(key.to_owned())
            .or_insert_with(|| Value::String(value.to_owned()));
    }
}

fn set_missing_at(obj: &mut Value, meta: &[&str], which: &str, key: &str, value: &str) {
    let mut path: Vec<&str> = meta.to_vec();
    path.push(which);
    set_missing(obj, &path, key, value);
}

/// Chooses the framework container: `dljob.dev/container`, else
/// `kubectl.kubernetes.io/default-container`, else one named after the
/// framework, else the first.
pub fn framework_container(m: &MemberSpec, pod: &Value) -> Option<usize> {
    let spec = pod.get("spec")?;
    let containers = object::containers(spec);
    let by_name = |n: &str| containers.iter().position(|c| object::name_of(c) == n);
    if let Some(n) = &m.container {
        return by_name(n);
    }
    object::meta_str(pod, &[], "annotations", c::K8S_DEFAULT_CONTAINER)
        .and_then(by_name)
        .or_else(|| by_name(m.framework.name()))
        .or(if containers.is_empty() { None } else { Some(0) })
}

/// Everything dljob injects into one member pod, computed before editing.
struct PodPlan {
    hostname: String,
    env: Env,
    hostfile: String,
    container: usize,
}

fn plan_pod(m: &MemberSpec, pod: &Value, config: &Config) -> Option<PodPlan> {
    let container = framework_container(m, pod)?;
    let gpus = object::gpu_count(&object::containers(&pod["spec"])[container]);
    let index = m.index.unwrap_or(0);
    let job = m.job_view(config);
    let member = Member {
        role: &m.role,
        index,
        gpus,
    };
    let mut env = Env::with_capacity(24);
    m.framework.env(&job, &member, &mut env);
    frameworks::generic_env(m.framework, &job, &member, &mut env);
    Some(PodPlan {
        hostname: c::pod_hostname(&m.job, &m.role, index),
        hostfile: m.framework.hostfile(&job, &member),
        env,
        container,
    })
}

fn mutate_pod(m: &MemberSpec, pod: &mut Value, config: &Config, warnings: &mut Vec<String>) {
    let Some(plan) = plan_pod(m, pod, config) else {
        warnings.push("the pod has no containers; dljob injected nothing".to_owned());
        return;
    };
    if m.framework.uses_slots() && m.role == "worker" {
        let gpus =
            object::gpu_count(&object::containers(&pod["spec"])[plan.container]).unwrap_or(0);
        if gpus > 0 && gpus != m.slots {
            warnings.push(format!(
                "the worker's framework container requests {gpus} GPUs but the hostfile gives each worker {} slot{}; set {}: \"{gpus}\" on every member",
                m.slots,
                if m.slots == 1 { "" } else { "s" },
                c::SLOTS
            ));
        }
    }

    // Identity.
    {
        let spec = object::object_at_mut(pod, &["spec"]).expect("pod spec is an object");
        if m.owner == PodOwner::None {
            if let Some(old) = spec.get("hostname").and_then(Value::as_str) {
                if old != plan.hostname {
                    warnings.push(format!(
                        "spec.hostname \"{old}\" replaced by \"{}\": member hostnames follow the topology",
                        plan.hostname
                    ));
                }
            }
        }
        spec.insert("hostname".into(), Value::String(plan.hostname));
        spec.insert("subdomain".into(), Value::String(m.job.clone()));
    }

    // The hostfile annotation, projected by a downwardAPI volume.
    {
        let ann = object::object_at_mut(pod, &["metadata", "annotations"])
            .expect("metadata is an object");
        ann.insert(c::HOSTFILE.into(), Value::String(plan.hostfile));
    }
    let mut volumes: Vec<(Value, Value)> = Vec::with_capacity(4);
    volumes.push((
        json!({
            "name": HOSTFILE_VOLUME,
            "downwardAPI": {"items": [{
                "path": "hostfile",
                "fieldRef": {"fieldPath": format!("metadata.annotations['{}']", c::HOSTFILE)}
            }]}
        }),
        json!({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR, "readOnly": true}),
    ));
    if matches!(m.framework.name(), "mpi" | "chainer") {
        volumes.push((
            json!({
                "name": SSH_VOLUME,
                "secret": {"secretName": ssh_secret_name(&m.job), "defaultMode": SSH_MODE}
            }),
            json!({"name": SSH_VOLUME, "mountPath": m.ssh_path, "readOnly": true}),
        ));
    }

    let spec = object::object_at_mut(pod, &["spec"]).expect("pod spec is an object");
    let mut pod_volumes_wanted: Vec<Value> = Vec::new();
    let containers = spec
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .expect("checked by plan_pod");
    {
        let fc = containers[plan.container]
            .as_object_mut()
            .expect("a container is an object");
        let cname = fc
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        merge_env(
            fc,
            &cname,
            plan.env.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            warnings,
        );
        merge_port(fc, &cname, m.port, warnings);
        for (volume, mount) in volumes {
            if merge_mount(fc, &cname, mount, warnings) {
                pod_volumes_wanted.push(volume);
            }
        }
    }
    // Accelerators: every container requesting a configured resource.
    for container in containers.iter_mut() {
        for (resource, acc) in &config.accelerators {
            if !object::requests_resource(container, resource) {
                continue;
            }
            let fc = container.as_object_mut().expect("a container is an object");
            let cname = fc
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            merge_env(
                fc,
                &cname,
                acc.env.iter().map(|e| (e.name.as_str(), e.value.as_str())),
                warnings,
            );
            for hv in &acc.volumes {
                let mount = json!({"name": hv.name, "mountPath": hv.mount_path, "readOnly": true});
                if merge_mount(fc, &cname, mount, warnings) {
                    let volume = json!({"name": hv.name, "hostPath": {"path": hv.host_path}});
                    if !pod_volumes_wanted
                        .iter()
                        .any(|v| object::name_of(v) == hv.name)
                    {
                        pod_volumes_wanted.push(volume);
                    }
                }
            }
        }
    }
    for volume in pod_volumes_wanted {
        merge_volume(spec, volume, warnings);
    }
}

/// Adds each var unless the container sets it; a different user value is
/// kept and named in a warning.
fn merge_env<'a>(
    container: &mut Map<String, Value>,
    cname: &str,
    vars: impl Iterator<Item = (&'a str, &'a str)>,
    warnings: &mut Vec<String>,
) {
    let had_env = container.contains_key("env");
    let env = object::array_mut(container, "env").expect("env is a list");
    for (name, value) in vars {
        match env.iter().find(|e| object::name_of(e) == name) {
            None => env.push(json!({"name": name, "value": value})),
            Some(existing) => {
                let same = existing.get("valueFrom").is_none()
                    && existing.get("value").and_then(Value::as_str).unwrap_or("") == value;
                if !same {
                    warnings.push(format!(
                        "container \"{cname}\": env {name} is set by the user and kept; dljob would set {}",
                        shorten(value)
                    ));
                }
            }
        }
    }
    if env.is_empty() && !had_env {
        container.remove("env");
    }
}

fn shorten(value: &str) -> String {
    const MAX: usize = 80;
    if value.len() <= MAX {
        format!("\"{value}\"")
    } else {
        let cut = (0..=MAX)
            .rev()
            .find(|i| value.is_char_boundary(*i))
            .unwrap_or(0);
        format!("\"{}…\"", &value[..cut])
    }
}

/// Adds the named port unless the container already declares that port.
fn merge_port(
    container: &mut Map<String, Value>,
    cname: &str,
    port: u16,
    warnings: &mut Vec<String>,
) {
    let ports = object::array_mut(container, "ports").expect("ports is a list");
    let number = |p: &Value| p.get("containerPort").and_then(Value::as_u64);
    if ports.iter().any(|p| number(p) == Some(u64::from(port))) {
        return;
    }
    if let Some(existing) = ports.iter().find(|p| object::name_of(p) == PORT_NAME) {
        warnings.push(format!(
            "container \"{cname}\": port \"{PORT_NAME}\" is declared by the user as {} and kept; dljob would declare {port}",
            number(existing).unwrap_or(0)
        ));
        return;
    }
    ports.push(json!({"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}));
}

/// Adds a volume mount unless that path is taken. Returns whether the
/// mount (and so its volume) is in place.
fn merge_mount(
    container: &mut Map<String, Value>,
    cname: &str,
    mount: Value,
    warnings: &mut Vec<String>,
) -> bool {
    let mounts = object::array_mut(container, "volumeMounts").expect("volumeMounts is a list");
    let path = mount["mountPath"].as_str().unwrap_or("");
    match mounts
        .iter()
        .find(|m| m.get("mountPath").and_then(Value::as_str) == Some(path))
    {
        None => {
            mounts.push(mount);
            true
        }
        Some(existing) if object::contains(existing, &mount) => true,
        Some(existing) => {
            warnings.push(format!(
                "container \"{cname}\": mount path {path} is used by the user's volume \"{}\" and kept; dljob would mount \"{}\" there",
                object::name_of(existing),
                object::name_of(&mount)
            ));
            false
        }
    }
}

/// Adds a pod volume unless one of that name exists; a different user
/// volume of the same name is kept and named in a warning.
fn merge_volume(spec: &mut Map<String, Value>, volume: Value, warnings: &mut Vec<String>) {
    let volumes = object::array_mut(spec, "volumes").expect("volumes is a list");
    let name = object::name_of(&volume);
    match volumes.iter().find(|v| object::name_of(v) == name) {
        None => volumes.push(volume),
        Some(existing) if object::contains(existing, &volume) => {}
        Some(_) => warnings.push(format!(
            "volume \"{name}\" is defined by the user and kept; dljob would define it as {volume}"
        )),
    }
}

/// The RFC 6902 patch that turns `original` into `mutated`. Parents are
/// added whole only where they were absent; pointer escaping (`~1`) is the
/// json-patch crate's.
pub fn patch(original: &Value, mutated: &Value) -> json_patch::Patch {
    json_patch::diff(original, mutated)
}

/// Test and bench helper: the pod spec at `kind`'s pod path.
pub fn pod_spec_of(kind: Kind, object: &Value) -> Option<&Value> {
    at(object, kind.pod_path())?.get("spec")
}
