//! The mutation of ARCHITECTURE.md §2: (object, config) → (mutated object, warnings).
//! Pure: no I/O, no clock. Mutating a mutated object changes nothing.

use serde_json::{json, Value};

use crate::config::{Config, HostVolume};
use crate::contract as c;
pub use crate::edits::Patch;
use crate::edits::{Item, List, PodEdits, Seen};
use crate::frameworks::{self, Env, Member};
use crate::member::{self, MemberSpec, Parsed, PodOwner};
use crate::object::{self, Kind, Subject};
use crate::violation::{Rule, Violations};

pub use crate::contract::{
    HOSTFILE_DIR, HOSTFILE_FIELD, HOSTFILE_PATH, HOSTFILE_VOLUME, PORT_NAME, SSH_MODE, SSH_VOLUME,
};

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
pub(crate) fn ssh_secret_name(job: &str) -> String {
    format!("{job}-ssh")
}

/// What admission does to a member: the JSON Patch and the warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub patch: Patch,
    pub warnings: Vec<String>,
}

/// Mutates the subject's object and returns the RFC 6902 patch.
/// `Ok(None)`: not a member, nothing to do.
///
/// On UPDATE only what is still missing and still mutable is added: labels
/// and annotations, and a StatefulSet's pod template. Pod specs and Job
/// templates are immutable once created and are left alone. Knowing the
/// object before an UPDATE (`subject.old`), what admission resolved into a
/// workload at its creation (its port and gang) and the UPDATE no longer
/// carries — an applier that owned those fields dropped them — is kept as
/// it was, so its pod template does not change (and roll its pods) for it.
pub fn mutate_patch(
    subject: Subject<'_>,
    operation: Operation,
    config: &Config,
) -> Result<Option<Admission>, Violations> {
    let Subject {
        kind,
        object,
        old,
        namespace,
    } = subject;
    let Some(Parsed {
        member,
        mut warnings,
    }) = member::parse(kind, object, namespace, config)?
    else {
        return Ok(None);
    };
    // A pod's plan is made once: checked for size, then made into the patch.
    let plan = match (kind, member.index) {
        (Kind::Pod, Some(index)) => plan_pod_at(&member, object, config, index),
        _ => None,
    };
    let too_big = match &plan {
        Some(p) => plan_size_violations(&member, object, p),
        None => size_violations(&member, object, config),
    };
    if !too_big.is_empty() {
        let mut v = Violations::default();
        for problem in too_big {
            v.push(Rule::TooLarge, problem);
        }
        return Err(v);
    }
    let patch = match kind {
        Kind::Pod if operation == Operation::Create => {
            let plan = plan.or_else(|| plan_pod(&member, object, config));
            pod_patch(&member, object, plan, config, &mut warnings)
        }
        Kind::Pod => Patch(Vec::new()),
        Kind::StatefulSet | Kind::Job => {
            // Workloads are rare and small next to pods: edit a copy and diff.
            let mut out = object.clone();
            mutate_workload(&member, &mut out, operation, &mut warnings);
            // Its pods are created by its controller, whose warnings nobody
            // reads: said here, where the user applies the workload.
            if operation == Operation::Create {
                warnings.extend(template_image_env(kind, object, config));
            }
            if let (Operation::Update, Some(old)) = (operation, old) {
                keep_resolved(&member, &mut out, old);
            }
            patch(object, &out)
        }
    };
    Ok(Some(Admission { patch, warnings }))
}

/// Like [`mutate_patch`], returning the mutated object (the offline
/// commands print it).
pub fn mutate(
    subject: Subject<'_>,
    operation: Operation,
    config: &Config,
) -> Result<Option<Mutation>, Violations> {
    Ok(mutate_patch(subject, operation, config)?.map(|a| {
        let mut out = subject.object.clone();
        json_patch::patch(&mut out, &a.patch.to_json_patch())
            .expect("dljob's own patch applies to the object it was made from");
        Mutation {
            object: out,
            warnings: a.warnings,
        }
    }))
}

/// Workloads: the pod template carries the job's labels and annotations so
/// that the pods reach the pod webhook and the Service; the rest happens
/// per pod, where the index is known.
fn mutate_workload(m: &MemberSpec, obj: &mut Value, op: Operation, warnings: &mut Vec<String>) {
    if op == Operation::Create {
        // As for pods (see `forget_finished_run`).
        let annotations = obj
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut);
        if let Some(a) = annotations {
            if a.remove(c::FINISHED_RUN).is_some() {
                warnings.push(format!(
                    "annotation {} removed: the reconciler marks what a finished run left with it, and a new workload belongs to the job's next run",
                    c::FINISHED_RUN
                ));
            }
        }
    }
    if m.topology_inferred {
        set_missing(
            obj,
            &["metadata", "annotations"],
            c::REPLICAS,
            &m.spec.replicas.to_string(),
        );
    }
    // Only at creation: written into an existing StatefulSet's template they
    // would roll its pods.
    if op == Operation::Create {
        for (key, value) in resolved_defaults(m) {
            set_missing(obj, &["metadata", "annotations"], key, &value);
        }
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
        let propagated = c::JOB_WIDE_ANNOTATIONS.iter().chain(&[
            c::CONTAINER,
            c::INDEX_OFFSET,
            c::WAIT_FOR_NAMES,
        ]);
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
                &m.spec.replicas.to_string(),
            );
        }
    }
    // Kubernetes' own gang: the group is named in the pod template too (only
    // at creation: a Job's template is immutable and a StatefulSet's change
    // would roll its pods); the pods get it at their own admission anyway.
    if op == Operation::Create {
        let group = m.spec.scheduler().and_then(|s| {
            s.pod(&m.spec.gang_group(&m.job, m.framework))
                .scheduling_group
        });
        if let Some(group) = group {
            set_missing(
                obj,
                &["spec", "template", "spec", "schedulingGroup"],
                "podGroupName",
                &group,
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
    if m.kind == Kind::Job && op == Operation::Create {
        job_failure_policy(m, obj);
    }
}

/// A member Job's `podFailurePolicy`, where dljob decides what an exit
/// means and the user has set none: the framework container's permanent
/// exit (any non-zero one under `restart-policy: Never`; 1-127 under
/// `ExitCode` with restart scope Pod) fails the Job at once, instead of the
/// Job controller replacing the pod, up to its `backoffLimit`, to train
/// again behind dljob's back while dljob fails the job. Not under restart
/// scope Job, where a rank's exit 1 that follows a killed peer restarts the
/// whole job (a failed Job could not run again), and not where the pods
/// restart in place (`OnFailure`: the Job API allows it only for `Never`).
/// Set at creation only: the field is immutable.
fn job_failure_policy(m: &MemberSpec, obj: &mut Value) {
    let template = &obj["spec"]["template"];
    if obj["spec"].get("podFailurePolicy").is_some()
        || object::str_at(template, &["spec", "restartPolicy"]) != Some("Never")
    {
        return;
    }
    let policies = &m.spec.policies;
    let exit_codes = match (policies.restart, policies.restart_scope) {
        (c::RestartPolicy::Never, _) => json!({"operator": "NotIn", "values": [0]}),
        (c::RestartPolicy::ExitCode, c::RestartScope::Pod) => {
            json!({"operator": "In", "values": (1..=127).collect::<Vec<u8>>()})
        }
        (c::RestartPolicy::ExitCode, c::RestartScope::Job) => return,
    };
    let Some(i) = framework_container(m, template) else {
        return;
    };
    let containers = object::containers(&template["spec"]);
    let mut exit_codes = exit_codes;
    exit_codes["containerName"] = json!(object::name_of(&containers[i]));
    obj["spec"]["podFailurePolicy"] = json!({
        "rules": [{"action": "FailJob", "onExitCodes": exit_codes}]
    });
}

/// The resolved defaults `old` carried, on the workload and its template,
/// put back where `obj` lacks them.
fn keep_resolved(m: &MemberSpec, obj: &mut Value, old: &Value) {
    let places: [(&[&str], &[&str]); 2] = [
        (&[], &["metadata"]),
        (&["spec", "template"], &["spec", "template", "metadata"]),
    ];
    for (key, _) in resolved_defaults(m) {
        for (owner, meta) in places {
            let Some(was) = object::meta_str(old, owner, "annotations", key) else {
                continue;
            };
            if object::meta_str(obj, owner, "annotations", key).is_none() {
                let was = was.to_owned();
                set_missing_at(obj, meta, "annotations", key, &was);
            }
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

pub use crate::member::framework_container;

/// Everything dljob injects into one member pod, computed before editing.
struct PodPlan {
    /// The pod index planned for.
    index: u32,
    hostname: String,
    /// Downward-API vars (name, fieldPath), injected first.
    field_env: &'static [(&'static str, &'static str)],
    env: Env,
    hostfile: Option<String>,
    /// Under `dljob.dev/compat: volcano`: Volcano's files, the job's
    /// ConfigMap mounted at /etc/volcano.
    volcano: bool,
    /// The size of those files, keys and values.
    volcano_bytes: usize,
    container: usize,
}

fn plan_pod(m: &MemberSpec, pod: &Value, config: &Config) -> Option<PodPlan> {
    plan_pod_at(m, pod, config, m.index.unwrap_or(0))
}

fn plan_pod_at(m: &MemberSpec, pod: &Value, config: &Config, index: u32) -> Option<PodPlan> {
    let container = framework_container(m, pod)?;
    let gpus = object::gpu_count(&object::containers(&pod["spec"])[container]);
    let job = m.job_view(config);
    let member = Member {
        role: &m.role,
        index,
        gpus,
        host_network: pod["spec"]["hostNetwork"] == true,
    };
    let mut env = Env::with_capacity(24);
    m.framework.env(&job, &member, &mut env);
    m.framework.compat_env(&job, &member, &mut env);
    frameworks::volcano_env(m.framework, &job, &member, &mut env);
    frameworks::generic_env(m.framework, &job, &member, &mut env);
    let volcano = c::volcano_task(job.compat, &m.role).is_some();
    let volcano_bytes = if volcano {
        frameworks::volcano_files(m.framework, &job)
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum()
    } else {
        0
    };
    Some(PodPlan {
        index,
        volcano,
        volcano_bytes,
        hostname: c::pod_hostname(&m.job, &m.role, index),
        field_env: m.framework.field_env(&job, &member),
        hostfile: m.framework.hostfile(&job, &member),
        env,
        container,
    })
}

/// Linux refuses to start a process with any environment string (`NAME=value`
/// and its NUL) longer than `MAX_ARG_STRLEN`, 32 pages of 4 KiB: the
/// container would fail to start.
pub(crate) const MAX_ENV_STRING: usize = 32 * 4096;
/// The API server refuses an object whose annotations (keys and values)
/// exceed 256 KiB in all.
pub(crate) const MAX_ANNOTATIONS: usize = 256 * 1024;

/// What the API server stores of a ConfigMap's data at most (1 MiB).
const MAX_CONFIG_MAP: usize = 1024 * 1024;

/// What the member's pods would get that cannot work: an injected env string
/// over [`MAX_ENV_STRING`], annotations over [`MAX_ANNOTATIONS`] with the
/// hostfile, or Volcano's files over [`MAX_CONFIG_MAP`]. Checked for the member's own pod, or for a workload's pod of
/// the highest index (the longest values), so that the workload is refused
/// before it creates pods that cannot start. The total environment limit
/// (a quarter of the stack limit, 2 MiB by default) is not reached by what
/// dljob injects once each string is bounded: one list of hosts at most.
pub(crate) fn size_violations(m: &MemberSpec, object: &Value, config: &Config) -> Vec<String> {
    let Some(pod) = object::at(object, m.kind.pod_path()) else {
        return Vec::new();
    };
    plan_pod_at(m, pod, config, last_index(m))
        .map_or_else(Vec::new, |plan| plan_size_violations(m, pod, &plan))
}

/// The member's own index, or a workload's highest.
fn last_index(m: &MemberSpec) -> u32 {
    m.index
        .unwrap_or_else(|| m.spec.replicas.count_or_zero(&m.role).saturating_sub(1))
}

/// What the validating webhook refuses in a member's pod (or pod
/// template), from one plan: [`size_violations`], and dljob's reserved
/// volume names used otherwise than dljob uses them
/// ([`reserved_volume_names`]).
///
/// On a pod's UPDATE only what can still change is judged: its ephemeral
/// containers (`kubectl debug`); the rest of its spec is immutable and was
/// judged when it was created.
pub(crate) fn pod_violations(
    m: &MemberSpec,
    object: &Value,
    config: &Config,
    operation: Operation,
) -> Violations {
    let mut v = Violations::default();
    let Some(pod) = object::at(object, m.kind.pod_path()) else {
        return v;
    };
    let plan = plan_pod_at(m, pod, config, last_index(m));
    let whole = m.kind != Kind::Pod || operation == Operation::Create;
    if let (Some(plan), true) = (&plan, whole) {
        for problem in plan_size_violations(m, pod, plan) {
            v.push(Rule::TooLarge, problem);
        }
    }
    for problem in reserved_volume_problems(m, pod, config, plan.as_ref(), whole) {
        v.push(Rule::ReservedVolume, problem);
    }
    v
}

/// [`size_violations`] of a plan already made for `pod`.
fn plan_size_violations(m: &MemberSpec, pod: &Value, plan: &PodPlan) -> Vec<String> {
    let index = plan.index;
    let mut problems = Vec::new();
    let fix = format!(
        "use fewer replicas, or a shorter job name or namespace (every host is named {}-<role>-<index>.{}.{}.svc)",
        m.job, m.job, m.namespace
    );
    // Volcano's lists name hosts in its shorter form.
    let volcano_fix = format!(
        "use fewer replicas, or a shorter job name (Volcano's lists name every host {}-<role>-<index>.{})",
        m.job, m.job
    );
    if let Some((name, value)) = plan
        .env
        .iter()
        .max_by_key(|(n, v)| n.len() + v.len())
        .filter(|(n, v)| n.len() + 1 + v.len() + 1 > MAX_ENV_STRING)
    {
        let volcano = plan.volcano && (name.starts_with("VC_") || name == "MPI_HOST");
        problems.push(format!(
            "{name} would be {} bytes for {} {index}; Linux refuses to start a process with an environment string over {MAX_ENV_STRING} bytes, so the container could not start: {}",
            name.len() + 1 + value.len() + 1,
            m.role,
            if volcano { &volcano_fix } else { &fix },
        ));
    }
    if plan.volcano_bytes > MAX_CONFIG_MAP {
        problems.push(format!(
            "Volcano's host files would be {} bytes, in the ConfigMap {} the pods mount at {}; the API server refuses a ConfigMap over {MAX_CONFIG_MAP}: {volcano_fix}",
            plan.volcano_bytes,
            c::volcano_config_map(&m.job),
            c::VOLCANO_DIR
        ));
    }
    // The annotation that carries a host list: the hostfile.
    let mut ours: Vec<(String, usize)> = Vec::new();
    if let Some(hostfile) = &plan.hostfile {
        ours.push((c::HOSTFILE.to_owned(), hostfile.len()));
    }
    if !ours.is_empty() {
        let others: usize = object::string_map(pod, &[], "annotations")
            .into_iter()
            .flatten()
            .filter(|(k, _)| !ours.iter().any(|(o, _)| o == k.as_str()))
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        let values: usize = ours.iter().map(|(_, n)| n).sum();
        let total = others + values + ours.iter().map(|(k, _)| k.len()).sum::<usize>();
        if total > MAX_ANNOTATIONS {
            // Named up to three: a job of 32 Volcano tasks has 32.
            let mut names: Vec<&str> = ours.iter().take(3).map(|(k, _)| k.as_str()).collect();
            let more = format!("{} more", ours.len().saturating_sub(3));
            if ours.len() > 3 {
                names.push(&more);
            }
            problems.push(format!(
                "the {} annotation{} ({values} bytes, one line per host) would bring the pod's annotations to {total} bytes; the API server refuses more than {MAX_ANNOTATIONS}: {fix}",
                names.join(", "),
                if ours.len() == 1 { "" } else { "s" },
            ));
        }
    }
    problems
}

/// The pod's edits as a patch (the pod is not copied): one named step per
/// source of the pod's wiring.
fn pod_patch(
    m: &MemberSpec,
    pod: &Value,
    plan: Option<PodPlan>,
    config: &Config,
    warnings: &mut Vec<String>,
) -> Patch {
    let mut edits = PodEdits::new(pod);
    forget_finished_run(pod, &mut edits, warnings);
    let Some(plan) = plan else {
        warnings.push("the pod has no containers; dljob injected nothing".to_owned());
        return edits.into_patch();
    };
    let (index, fc) = (plan.index, plan.container);
    set_identity(m, pod, plan.hostname, &mut edits, warnings);
    write_defaults(m, pod, &mut edits);
    // The hostfile annotation where a launcher reads it, projected by a
    // downwardAPI volume; the SSH Secret where members use SSH.
    let has_hostfile = plan.hostfile.is_some();
    if let Some(hostfile) = plan.hostfile {
        edits.set_annotation(c::HOSTFILE, hostfile);
    }
    wire_framework_container(m, pod, fc, plan.field_env, &plan.env, &mut edits, warnings);
    let mut wanted = mount_dljob_volumes(
        fc,
        dljob_volumes(m, has_hostfile, plan.volcano),
        pod,
        &mut edits,
        warnings,
    );
    wire_accelerators(pod, config, &mut wanted, &mut edits, warnings);
    add_volumes(wanted, &mut edits, warnings);
    gang_marks(m, &mut edits, config, warnings);
    gate_launcher(m, pod, config, &mut edits);
    wait_for_names(m, pod, (index, fc), config, &mut edits, warnings);
    edits.into_patch()
}

/// Identity: the pod's host name and subdomain. Controllers set these for
/// their pods; a user's values on a plain pod are replaced with a word.
fn set_identity(
    m: &MemberSpec,
    pod: &Value,
    hostname: String,
    edits: &mut PodEdits<'_>,
    warnings: &mut Vec<String>,
) {
    if m.owner == PodOwner::None {
        for (field, ours) in [
            ("hostname", hostname.as_str()),
            ("subdomain", m.job.as_str()),
        ] {
            if let Some(old) = pod["spec"].get(field).and_then(Value::as_str) {
                if old != ours {
                    warnings.push(format!(
                        "spec.{field} \"{old}\" replaced by \"{ours}\": member pods are named by the job's topology"
                    ));
                }
            }
        }
    }
    edits.set_spec("hostname", Value::String(hostname));
    edits.set_spec("subdomain", Value::String(m.job.clone()));
}

/// The framework container (`fc`): its framework's env (downward-API vars
/// first), its port, and the MPI operator's worker with no command, which
/// runs sshd.
fn wire_framework_container<'a>(
    m: &MemberSpec,
    pod: &Value,
    fc: usize,
    field_env: &'static [(&'static str, &'static str)],
    env: &'a Env,
    edits: &mut PodEdits<'a>,
    warnings: &mut Vec<String>,
) {
    let container = &object::containers(&pod["spec"])[fc];
    let name = object::name_of(container);
    merge_field_env(edits, fc, name, field_env, warnings);
    merge_env(
        edits,
        fc,
        name,
        env.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        warnings,
    );
    merge_port(edits, fc, name, m.spec.port, warnings);
    let ssh_served = m
        .framework
        .ssh_client_role()
        .is_some_and(|client| client != m.role);
    let bare = ["command", "args"]
        .iter()
        .all(|k| container.get(*k).is_none_or(Value::is_null));
    if ssh_served && bare && m.spec.compat.as_deref() == Some(c::COMPAT_MPI_OPERATOR) {
        edits.set_container(fc, "command", json!(["/usr/sbin/sshd", "-De"]));
    }
}

/// dljob's volumes' mounts in the framework container; returns the
/// volumes something mounts.
fn mount_dljob_volumes(
    fc: usize,
    volumes: Vec<(Value, Vec<Value>)>,
    pod: &Value,
    edits: &mut PodEdits<'_>,
    warnings: &mut Vec<String>,
) -> Vec<Value> {
    let name = object::name_of(&object::containers(&pod["spec"])[fc]);
    let mut wanted: Vec<Value> = Vec::with_capacity(4);
    for (volume, mounts) in volumes {
        let mut mounted = false;
        for mount in mounts {
            mounted |= merge_mount(edits, fc, name, mount, warnings);
        }
        if mounted {
            wanted.push(volume);
        }
    }
    wanted
}

/// Accelerators: every container requesting a resource the config names
/// gets its env and host mounts (the volumes join `wanted`). An image's
/// own var replaced is said once per pod, when dljob injects it (not where
/// the user set the var, nor again on a re-invocation).
fn wire_accelerators<'a>(
    pod: &Value,
    config: &'a Config,
    wanted: &mut Vec<Value>,
    edits: &mut PodEdits<'a>,
    warnings: &mut Vec<String>,
) {
    let containers = object::containers(&pod["spec"]);
    let mut replaced_image_env: Vec<&str> = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        let name = object::name_of(container);
        for (resource, acc) in &config.accelerators {
            if !object::requests_resource(container, resource) {
                continue;
            }
            for e in &acc.env {
                let image_env = crate::config::IMAGE_ENV.contains(&e.name.as_str());
                if image_env && !replaced_image_env.contains(&e.name.as_str()) {
                    replaced_image_env.push(&e.name);
                }
            }
            merge_env(
                edits,
                i,
                name,
                acc.env.iter().map(|e| (e.name.as_str(), e.value.as_str())),
                warnings,
            );
            for hv in &acc.volumes {
                if merge_mount(edits, i, name, host_mount(hv), warnings)
                    && !wanted.iter().any(|v| object::name_of(v) == hv.name)
                {
                    wanted.push(host_volume(hv));
                }
            }
        }
    }
    for env in replaced_image_env {
        let injected = (0..containers.len()).any(|i| {
            edits
                .items(List::Env(i))
                .any(|e| matches!(e, Seen::Pending(_)) && e.name() == env)
        });
        if injected {
            warnings.push(crate::config::image_env_warning(
                env,
                "the webhook's config (accelerators)",
            ));
        }
    }
}

/// The volumes the mounts need, and a word on the node's paths among them
/// (said when dljob adds them, not again on a re-invocation).
fn add_volumes(wanted: Vec<Value>, edits: &mut PodEdits<'_>, warnings: &mut Vec<String>) {
    let host_paths: Vec<&str> = wanted
        .iter()
        .filter(|v| {
            !edits
                .items(List::Volumes)
                .any(|e| e.name() == object::name_of(v))
        })
        .filter_map(|v| object::str_at(v, &["hostPath", "path"]))
        .collect();
    if !host_paths.is_empty() {
        warnings.push(format!(
            "dljob mounts the node's {} (read-only hostPath, the accelerators of the webhook's config): Pod Security admits this pod only where the namespace's level is privileged, not baseline or restricted",
            host_paths.join(", ")
        ));
    }
    for volume in wanted {
        merge_volume(edits, volume, warnings);
    }
}

/// The launcher's scheduling gate, until its workers run. Not on a pod
/// bound to its node: the API server refuses a gate there
/// (member::parse warns).
fn gate_launcher(m: &MemberSpec, pod: &Value, config: &Config, edits: &mut PodEdits<'_>) {
    if config.launcher_gate()
        && m.framework.gated_role() == Some(m.role.as_str())
        && member::pinned_node(Kind::Pod, pod).is_none()
        && !edits
            .items(List::SchedulingGates)
            .any(|g| g.name() == c::WORKERS_READY_GATE)
    {
        edits.append(
            List::SchedulingGates,
            Item::Json(json!({"name": c::WORKERS_READY_GATE})),
        );
    }
}

/// How [`c::WAIT_FOR_NAMES_CONTAINER`] starts: the binary at the root of
/// dljob's image (the Dockerfile's), and its subcommand.
pub const WAIT_FOR_NAMES_COMMAND: [&str; 2] = ["/dljob", "wait-for-names"];

/// Members start only once their names resolve: an init container running
/// `dljob wait-for-names` from dljob's own image (`waitForNamesImage`, by
/// default the one dljob runs from) waits until the pod's own name and its
/// coordinator's resolve. The job's headless Service, which publishes them,
/// is made by the reconciler when it first sees the job's pods, and a name
/// resolves only once its pod has an address: a framework that resolves its
/// peers once at start (XGBoost's tracker) would otherwise fail at once,
/// permanently. dljob's image, not the framework's, so that it runs the same
/// on every image (one without a shell or `getent`, distroless, busybox).
///
/// Not for frameworks that reach their workers over SSH (the launcher waits
/// for its workers behind a scheduling gate; sshd resolves nothing), nor
/// with `dljob.dev/wait-for-names: "false"` or `waitForNamesSeconds: 0`, nor
/// on Windows nodes (the image is Linux's).
/// The init container takes the framework container's CPU and memory and
/// its securityContext, so that quotas, LimitRanges and Pod Security judge
/// it as they judge that container; a pod's requests are the larger of its
/// init containers' and the sum of its containers', so this adds none. A
/// wait that gave up leaves its reason in the termination message, which
/// the reconciler reports (`NameWaitFailed`).
fn wait_for_names(
    m: &MemberSpec,
    pod: &Value,
    (index, fc): (u32, usize),
    config: &Config,
    edits: &mut PodEdits<'_>,
    warnings: &mut Vec<String>,
) {
    let seconds = config.wait_for_names_seconds();
    if seconds == 0 || !m.wait_for_names || m.framework.uses_ssh() || runs_windows(pod) {
        return;
    }
    let job = m.job_view(config);
    let mut names = vec![job.host(&m.role, index)];
    if let Some((role, index)) = m.framework.coordinator(&m.spec.replicas) {
        let coordinator = job.host(role, index);
        if coordinator != names[0] {
            names.push(coordinator);
        }
    }
    let framework = &object::containers(&pod["spec"])[fc];
    let mut command = vec![
        WAIT_FOR_NAMES_COMMAND[0].to_owned(),
        WAIT_FOR_NAMES_COMMAND[1].to_owned(),
        format!("--timeout={seconds}"),
        format!("--namespace={}", m.namespace),
        format!("--service={}", m.job),
        "--".to_owned(),
    ];
    command.extend(names);
    let mut container = json!({
        "name": c::WAIT_FOR_NAMES_CONTAINER,
        "image": config.wait_for_names_image(),
        // Pulled once per node, like the install's own pods (a `:latest`
        // tag would otherwise be pulled for every member pod).
        "imagePullPolicy": "IfNotPresent",
        "command": command,
    });
    if let Some(v) = framework.get("securityContext") {
        container["securityContext"] = v.clone();
    }
    // Every resource but devices (extended resources): a LimitRange that
    // bounds one (ephemeral-storage, hugepages) judges this container too.
    let mut resources = serde_json::Map::new();
    for which in ["requests", "limits"] {
        let kept: serde_json::Map<String, Value> = framework
            .get("resources")
            .and_then(|r| r.get(which))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(r, _)| !object::is_extended_resource(r))
            .map(|(r, v)| (r.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            resources.insert(which.to_owned(), Value::Object(kept));
        }
    }
    if !resources.is_empty() {
        container["resources"] = Value::Object(resources);
    }
    let existing = edits
        .items(List::InitContainers)
        .find(|c| c.name() == c::WAIT_FOR_NAMES_CONTAINER)
        .map(|c| c.to_value());
    // dljob's own from an earlier invocation is known by its command, even
    // where another webhook changed its resources or image since; an
    // earlier release's ran a script from the framework's image, named
    // after the container ($0).
    let ours = |c: &Value| {
        let command = c["command"].as_array();
        command.is_some_and(|cmd| {
            cmd.iter()
                .take(2)
                .map(Value::as_str)
                .eq(WAIT_FOR_NAMES_COMMAND.map(Some))
                || cmd.get(3).and_then(Value::as_str) == Some(c::WAIT_FOR_NAMES_CONTAINER)
        })
    };
    // Before the user's own init containers that run to completion (one
    // may reach the coordinator), after the sidecars before them (which
    // keep running, as the framework's own do).
    let first_to_complete = edits
        .pod()
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .position(|c| c.get("restartPolicy").and_then(Value::as_str) != Some("Always"))
        });
    match existing {
        None => match first_to_complete {
            Some(at) => edits.insert_before(List::InitContainers, at, Item::Json(container)),
            None => edits.append(List::InitContainers, Item::Json(container)),
        },
        Some(theirs) if ours(&theirs) || object::contains(&theirs, &container) => {}
        Some(_) => warnings.push(format!(
            "init container \"{}\" is the user's and kept; dljob's would wait for the job's names before the framework starts",
            c::WAIT_FOR_NAMES_CONTAINER
        )),
    }
}

/// The accelerator env vars of [`crate::config::IMAGE_ENV`] that a
/// workload's pods will get, said once each: where a container of its pod
/// template requests the resource and does not set the var itself.
fn template_image_env(kind: Kind, object: &Value, config: &Config) -> Vec<String> {
    let Some(spec) = object::at(object, kind.pod_path()).and_then(|p| p.get("spec")) else {
        return Vec::new();
    };
    let mut names: Vec<&str> = Vec::new();
    for container in object::containers(spec) {
        let own = |name: &str| {
            container["env"]
                .as_array()
                .is_some_and(|env| env.iter().any(|e| object::name_of(e) == name))
        };
        for (resource, acc) in &config.accelerators {
            if !object::requests_resource(container, resource) {
                continue;
            }
            for e in &acc.env {
                let name = e.name.as_str();
                if crate::config::IMAGE_ENV.contains(&name) && !own(name) && !names.contains(&name)
                {
                    names.push(name);
                }
            }
        }
    }
    names
        .into_iter()
        .map(|name| crate::config::image_env_warning(name, "the webhook's config (accelerators)"))
        .collect()
}

/// A Windows pod (`spec.os.name`, the node selector `kubernetes.io/os`,
/// or a required node affinity every term of which asks for Windows
/// nodes only): no `sh` to wait with.
fn runs_windows(pod: &Value) -> bool {
    const OS: &str = "kubernetes.io/os";
    let windows_only = |term: &Value| {
        term["matchExpressions"].as_array().is_some_and(|exprs| {
            exprs.iter().any(|e| {
                e["key"] == OS
                    && e["operator"] == "In"
                    && e["values"]
                        .as_array()
                        .is_some_and(|v| !v.is_empty() && v.iter().all(|v| v == "windows"))
            })
        })
    };
    let affinity = pod.pointer(
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
    );
    object::str_at(pod, &["spec", "os", "name"]) == Some("windows")
        || object::str_at(pod, &["spec", "nodeSelector", OS]) == Some("windows")
        || affinity
            .and_then(Value::as_array)
            .is_some_and(|terms| !terms.is_empty() && terms.iter().all(windows_only))
}

/// The job-wide keys whose default comes from the webhook's config
/// (`ports`, `gang`), resolved and written into a new member that does not
/// set them, as the API server writes its own defaults: the object then
/// says what it was wired with, and a config reloaded later (a changed port
/// or gang) cannot make the reconciler, or a restarted dljob, read an
/// existing member differently from how it was wired. A new member under
/// the new config that disagrees with the job's is refused by `/validate`,
/// naming both values.
pub(crate) fn resolved_defaults(m: &MemberSpec) -> [(&'static str, String); 2] {
    [
        (c::PORT, m.spec.port.to_string()),
        (c::GANG, m.spec.gang.clone()),
    ]
}

fn write_defaults(m: &MemberSpec, pod: &Value, edits: &mut PodEdits<'_>) {
    for (key, value) in resolved_defaults(m) {
        if object::meta_str(pod, &[], "annotations", key).is_none() {
            edits.set_annotation(key, value);
        }
    }
}

/// A new pod carrying [`c::FINISHED_RUN`] (copied from a pod the reconciler
/// marked, say with `kubectl get -o yaml`) loses it: the mark is the
/// reconciler's on what a finished run left, and a new pod is the job's
/// next run.
fn forget_finished_run(pod: &Value, edits: &mut PodEdits<'_>, warnings: &mut Vec<String>) {
    if object::meta_str(pod, &[], "annotations", c::FINISHED_RUN).is_some() {
        edits.remove_annotation(c::FINISHED_RUN);
        warnings.push(format!(
            "annotation {} removed: the reconciler marks what a finished run left with it, and a new pod belongs to the job's next run",
            c::FINISHED_RUN
        ));
    }
}

/// What the job's gang scheduler reads on each pod: its labels and
/// annotations (a different value the user set is kept, with a warning)
/// and its scheduler name (replacing the API server's `default-scheduler`,
/// not a name the user chose).
fn gang_marks(
    m: &MemberSpec,
    edits: &mut PodEdits<'_>,
    config: &Config,
    warnings: &mut Vec<String>,
) {
    let Some(scheduler) = m.spec.scheduler() else {
        return;
    };
    let marks = scheduler.pod(&m.spec.gang_group(&m.job, m.framework));
    let pod = edits.pod();
    for (which, keys) in [("labels", marks.labels), ("annotations", marks.annotations)] {
        for (key, value) in keys {
            match object::meta_str(pod, &[], which, key) {
                None => {
                    if which == "labels" {
                        edits.set_label(key, value);
                    } else {
                        edits.set_annotation(key, value);
                    }
                }
                Some(theirs) if theirs != value => warnings.push(format!(
                    "{} {key} \"{theirs}\" is set by the user and kept; the {} gang would set \"{value}\"",
                    &which[..which.len() - 1],
                    scheduler.name()
                )),
                Some(_) => {}
            }
        }
    }
    if let Some(group) = marks.scheduling_group {
        match object::str_at(pod, &["spec", "schedulingGroup", "podGroupName"]) {
            None => edits.set_spec("schedulingGroup", json!({"podGroupName": group})),
            Some(theirs) if theirs != group => warnings.push(format!(
                "spec.schedulingGroup.podGroupName \"{theirs}\" is set by the user and kept; the {} gang's group is \"{group}\", so this pod is not in the job's gang",
                scheduler.name()
            )),
            Some(_) => {}
        }
    }
    let name = config
        .scheduler_names
        .get(scheduler.name())
        .map(String::as_str)
        .or(marks.scheduler_name)
        .filter(|n| !n.is_empty());
    if let Some(name) = name {
        match pod["spec"].get("schedulerName").and_then(Value::as_str) {
            None | Some("default-scheduler") => {
                edits.set_spec("schedulerName", Value::String(name.to_owned()))
            }
            Some(theirs) if theirs != name => warnings.push(format!(
                "spec.schedulerName \"{theirs}\" is set by the user and kept; the {} gang schedules with \"{name}\", so this pod is not gang-scheduled",
                scheduler.name()
            )),
            Some(_) => {}
        }
    }
}

/// Every volume dljob adds to a member's pod, with its mounts in the
/// framework container: [`framework_volumes`] and Volcano's host files.
fn dljob_volumes(m: &MemberSpec, hostfile: bool, volcano: bool) -> Vec<(Value, Vec<Value>)> {
    let mut volumes = framework_volumes(m, hostfile);
    if volcano {
        volumes.push(volcano_volume(&m.job));
    }
    volumes
}

/// Volcano's files ([`frameworks::volcano_files`]): the job's ConfigMap,
/// which the reconciler keeps, mounted whole at /etc/volcano as Volcano
/// mounts its own. The pod starts once it is there.
fn volcano_volume(job: &str) -> (Value, Vec<Value>) {
    (
        json!({"name": c::VOLCANO_VOLUME, "configMap": {"name": c::volcano_config_map(job)}}),
        vec![json!({"name": c::VOLCANO_VOLUME, "mountPath": c::VOLCANO_DIR, "readOnly": true})],
    )
}

/// Where the MPI operator mounts its launcher's hostfile
/// (`/etc/mpi/hostfile`).
const MPI_OPERATOR_CONFIG_DIR: &str = "/etc/mpi";

/// The hostfile volume (where the framework's launcher reads one) and the
/// SSH Secret's (where members use SSH), each with its mounts in the
/// framework container. The Secret is whole (private key, client config)
/// in the pods of the role that runs `mpirun`, and only its
/// `authorized_keys` in the others, whose sshd needs nothing else.
///
/// The Secret's files are mounted one by one (`subPath`) into the SSH
/// directory, never the volume as that directory: the kubelet makes a
/// Secret volume's own directory world-writable (1777, 2777 with an
/// fsGroup), and sshd's default `StrictModes yes` then refuses every key
/// in it ("bad ownership or modes for directory"). Mounted by file, the
/// directory is the image's own, or one the container runtime makes (root,
/// 0755). The Secret is created once, so a file mount's missing updates
/// cost nothing.
fn framework_volumes(m: &MemberSpec, hostfile: bool) -> Vec<(Value, Vec<Value>)> {
    let mut volumes = Vec::with_capacity(2);
    if hostfile {
        volumes.push((
            json!({
                "name": HOSTFILE_VOLUME,
                "downwardAPI": {"items": [{
                    "path": "hostfile",
                    "fieldRef": {"fieldPath": HOSTFILE_FIELD}
                }]}
            }),
            if m.spec.compat.as_deref() == Some(c::COMPAT_MPI_OPERATOR) {
                // Where the MPI operator's launcher has it too.
                vec![
                    json!({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR, "readOnly": true}),
                    json!({"name": HOSTFILE_VOLUME, "mountPath": MPI_OPERATOR_CONFIG_DIR, "readOnly": true}),
                ]
            } else {
                vec![json!({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR, "readOnly": true})]
            },
        ));
    }
    let dir = m.ssh_path().trim_end_matches('/');
    let operator_layout = match m.spec.compat.as_deref() {
        Some(c::COMPAT_MPI_OPERATOR) => Some(false),
        compat if c::volcano_task(compat, &m.role).is_some() => Some(true),
        _ => None,
    };
    if let (true, Some(with_config)) = (m.framework.ssh_client_role().is_some(), operator_layout) {
        // The MPI operator's layout, which its images read: every member
        // has the key as id_rsa (its sshd's host key too) and the public
        // key as id_rsa.pub and authorized_keys; 0600 under /root/.ssh,
        // else readable by all (the images' user is not root, and their
        // sshd has StrictModes no). No ssh config: the images' own sets
        // the port (2222) and host-key checking.
        // Volcano's ssh plugin lays it out the same way, with an ssh
        // config.
        let mode = if dir == "/root/.ssh" { SSH_MODE } else { 0o644 };
        let mut items = vec![
            (c::SSH_PRIVATE_KEY, "id_rsa"),
            (c::SSH_PUBLIC_KEY, "id_rsa.pub"),
            (c::SSH_AUTHORIZED_KEYS, c::SSH_AUTHORIZED_KEYS),
        ];
        if with_config {
            // dljob's ssh config names the key by its own name.
            items.push((c::SSH_PRIVATE_KEY, c::SSH_PRIVATE_KEY));
            items.push((c::SSH_CONFIG, c::SSH_CONFIG));
        }
        let secret = json!({
            "secretName": ssh_secret_name(&m.job),
            "defaultMode": mode,
            "items": items.iter().map(|(k, p)| json!({"key": k, "path": p})).collect::<Vec<_>>(),
        });
        let mounts = items
            .iter()
            .map(|(_, file)| {
                json!({"name": SSH_VOLUME, "mountPath": format!("{dir}/{file}"), "subPath": file, "readOnly": true})
            })
            .collect();
        volumes.push((json!({"name": SSH_VOLUME, "secret": secret}), mounts));
    } else if let Some(client) = m.framework.ssh_client_role() {
        let mut secret = json!({"secretName": ssh_secret_name(&m.job), "defaultMode": SSH_MODE});
        let files: &[&str] = if m.role == client {
            &c::SSH_FILES
        } else {
            secret["items"] =
                json!([{"key": c::SSH_AUTHORIZED_KEYS, "path": c::SSH_AUTHORIZED_KEYS}]);
            &[c::SSH_AUTHORIZED_KEYS]
        };
        let mounts = files
            .iter()
            .map(|file| {
                json!({"name": SSH_VOLUME, "mountPath": format!("{dir}/{file}"), "subPath": file, "readOnly": true})
            })
            .collect();
        volumes.push((json!({"name": SSH_VOLUME, "secret": secret}), mounts));
    }
    volumes
}

/// An accelerator's host directory as a volume: it must already exist on
/// the node (`type: Directory`: never created by the kubelet).
fn host_volume(hv: &HostVolume) -> Value {
    json!({"name": hv.name, "hostPath": {"path": hv.host_path, "type": "Directory"}})
}

/// Every mount of an accelerator's host directory is read-only.
fn host_mount(hv: &HostVolume) -> Value {
    json!({"name": hv.name, "mountPath": hv.mount_path, "readOnly": true})
}

/// The names of the volumes dljob adds to member pods: reserved, a user's
/// volume or mount may not use one for anything else.
pub(crate) fn reserved_volume_names(config: &Config) -> Vec<&str> {
    let mut names = vec![HOSTFILE_VOLUME, SSH_VOLUME, c::VOLCANO_VOLUME];
    for acc in config.accelerators.values() {
        names.extend(acc.volumes.iter().map(|hv| hv.name.as_str()));
    }
    names
}

/// What a member's pod (or pod template) does with dljob's reserved volume
/// names that dljob would not: a volume of that name defined otherwise,
/// or a mount of it in a container dljob does not mount it in, or
/// mounted otherwise (read-write, elsewhere) — e.g. a sidecar that would get
/// the node's driver directory read-write by naming it. One message per
/// volume or mount, naming it and the fix.
fn reserved_volume_problems(
    m: &MemberSpec,
    pod: &Value,
    config: &Config,
    plan: Option<&PodPlan>,
    whole: bool,
) -> Vec<String> {
    let reserved = reserved_volume_names(config);
    let spec = &pod["spec"];
    let list = |v: &'_ Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    // dljob's own: (volume, [(container index, mount)]).
    let mut ours: Vec<(Value, Vec<(usize, Value)>)> = Vec::new();
    if let Some(plan) = plan {
        for (volume, mounts) in dljob_volumes(m, plan.hostfile.is_some(), plan.volcano) {
            ours.push((
                volume,
                mounts
                    .into_iter()
                    .map(|mount| (plan.container, mount))
                    .collect(),
            ));
        }
    }
    for (i, container) in object::containers(spec).iter().enumerate() {
        for (resource, acc) in &config.accelerators {
            if !object::requests_resource(container, resource) {
                continue;
            }
            for hv in &acc.volumes {
                match ours.iter_mut().find(|(v, _)| object::name_of(v) == hv.name) {
                    Some((_, mounts)) => mounts.push((i, host_mount(hv))),
                    None => ours.push((host_volume(hv), vec![(i, host_mount(hv))])),
                }
            }
        }
    }
    let what = |name: &str| -> String {
        if name == HOSTFILE_VOLUME {
            "the job's hostfile".to_owned()
        } else if name == SSH_VOLUME {
            format!("the job's SSH Secret {}", ssh_secret_name(&m.job))
        } else if name == c::VOLCANO_VOLUME {
            format!("Volcano's host files in {}", c::VOLCANO_DIR)
        } else {
            let resources: Vec<&str> = config
                .accelerators
                .iter()
                .filter(|(_, acc)| acc.volumes.iter().any(|hv| hv.name == name))
                .map(|(r, _)| r.as_str())
                .collect();
            format!(
                "the node's driver libraries of containers that request {}",
                resources.join(" or ")
            )
        }
    };
    let mut problems = Vec::new();
    let volumes = if whole {
        list(spec, "volumes")
    } else {
        Vec::new()
    };
    for volume in volumes {
        let name = object::name_of(&volume);
        if !reserved.contains(&name) {
            continue;
        }
        let same = ours
            .iter()
            .any(|(v, _)| object::name_of(v) == name && object::contains(&volume, v));
        if !same {
            problems.push(format!(
                "volume \"{name}\" is a name dljob reserves for {}, and this one is defined otherwise: rename the volume (dljob adds its own)",
                what(name)
            ));
        }
    }
    let containers = object::containers(spec);
    let groups = [
        ("container", containers.to_vec()),
        ("init container", list(spec, "initContainers")),
        ("ephemeral container", list(spec, "ephemeralContainers")),
    ];
    for (group, items) in groups
        .iter()
        .filter(|(g, _)| whole || *g == "ephemeral container")
    {
        for (i, container) in items.iter().enumerate() {
            for mount in list(container, "volumeMounts") {
                let name = object::name_of(&mount);
                if !reserved.contains(&name) {
                    continue;
                }
                let as_ours = *group == "container"
                    && ours.iter().any(|(v, mounts)| {
                        object::name_of(v) == name
                            && mounts
                                .iter()
                                .any(|(c, ours)| *c == i && object::contains(&mount, ours))
                    });
                if !as_ours {
                    let path = mount.get("mountPath").and_then(Value::as_str).unwrap_or("");
                    problems.push(format!(
                        "{group} \"{}\" mounts volume \"{name}\" at {path}, which dljob reserves for {} and mounts read-only only where it wires it: remove the mount, or use a volume of your own",
                        object::name_of(container),
                        what(name)
                    ));
                }
            }
        }
    }
    problems
}

/// Env dljob sets as a default the user may well choose otherwise (how
/// many processes torchrun starts per node, Python's output buffering),
/// unlike the wiring (addresses, ranks, sizes): a user's value is kept
/// without a warning.
const USER_TUNED_ENV: &[&str] = &["PET_NPROC_PER_NODE", "PYTHONUNBUFFERED"];

/// Adds each var, before the container's own, unless the container sets
/// it; a different user value is kept and named in a warning (but for
/// [`USER_TUNED_ENV`]).
fn merge_env<'a>(
    edits: &mut PodEdits<'a>,
    container: usize,
    cname: &str,
    vars: impl Iterator<Item = (&'a str, &'a str)>,
    warnings: &mut Vec<String>,
) {
    let list = List::Env(container);
    // Each entry's name is read once: a pod gets some twenty vars, and
    // looking each one up in every entry's JSON object added up.
    let mut ours: Vec<(&str, &str)> = Vec::new();
    {
        let theirs: Vec<(&str, Seen<'_, '_>)> = edits.items(list).map(|e| (e.name(), e)).collect();
        for (name, value) in vars {
            let same = match theirs.iter().find(|(n, _)| *n == name) {
                Some((_, e)) => Some(e.literal_value() == Some(value)),
                None => ours
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| *v == value),
            };
            match same {
                None => ours.push((name, value)),
                Some(true) => {}
                // A default that is the user's to choose: theirs is kept
                // without a word.
                Some(false) if USER_TUNED_ENV.contains(&name) => {}
                Some(false) => warnings.push(format!(
                    "container \"{cname}\": env {name} is set by the user and kept; dljob would set {}",
                    shorten(value)
                )),
            }
        }
    }
    // Before the user's vars, so that theirs can name ours as `$(NAME)`;
    // after them a var of ours that names one of theirs, for the same
    // reason (Kubernetes expands a reference from earlier vars only).
    for (name, value) in ours {
        let item = Item::Env { name, value };
        if names_theirs(edits, list, value) {
            edits.append(list, item);
        } else {
            edits.prepend(list, item);
        }
    }
}

/// Whether `value` names, as `$(NAME)`, a var the container itself sets.
fn names_theirs(edits: &PodEdits<'_>, list: List, value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = rest.find("$(") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let name = &rest[..end];
        if edits
            .items(list)
            .any(|e| matches!(e, Seen::Original(_)) && e.name() == name)
        {
            return true;
        }
        rest = &rest[end + 1..];
    }
    false
}

/// Adds each downward-API var unless the container sets it; a different
/// user value is kept and named in a warning.
fn merge_field_env<'a>(
    edits: &mut PodEdits<'a>,
    container: usize,
    cname: &str,
    vars: &[(&'a str, &'a str)],
    warnings: &mut Vec<String>,
) {
    let list = List::Env(container);
    for &(name, field) in vars {
        let ours = Item::FieldEnv {
            name,
            field_path: field,
        };
        let existing = edits
            .items(list)
            .find(|e| e.name() == name)
            .map(|e| object::contains(&e.to_value(), &ours.to_value()));
        match existing {
            None => edits.prepend(list, ours),
            Some(true) => {}
            Some(false) => warnings.push(format!(
                "container \"{cname}\": env {name} is set by the user and kept; dljob would set it from the pod's {field}"
            )),
        }
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
    edits: &mut PodEdits<'_>,
    container: usize,
    cname: &str,
    port: u16,
    warnings: &mut Vec<String>,
) {
    let list = List::Ports(container);
    if edits
        .items(list)
        .any(|p| p.container_port() == Some(u64::from(port)))
    {
        return;
    }
    if let Some(existing) = edits.items(list).find(|p| p.name() == PORT_NAME) {
        warnings.push(format!(
            "container \"{cname}\": port \"{PORT_NAME}\" is declared by the user as {} and kept; dljob would declare {port}",
            existing.container_port().unwrap_or(0)
        ));
        return;
    }
    edits.append(
        list,
        Item::Port {
            name: PORT_NAME,
            container_port: port,
            protocol: "TCP",
        },
    );
}

/// Adds a volume mount unless that path is taken. Returns whether the
/// mount (and so its volume) is in place.
fn merge_mount(
    edits: &mut PodEdits<'_>,
    container: usize,
    cname: &str,
    mount: Value,
    warnings: &mut Vec<String>,
) -> bool {
    let list = List::Mounts(container);
    let path = mount["mountPath"].as_str().unwrap_or("");
    let existing = edits
        .items(list)
        .map(Seen::to_value)
        .find(|m| m.get("mountPath").and_then(Value::as_str) == Some(path));
    match existing {
        None => {
            edits.append(list, Item::Json(mount));
            true
        }
        Some(existing) if object::contains(&existing, &mount) => true,
        Some(existing) => {
            warnings.push(format!(
                "container \"{cname}\": mount path {path} is used by the user's volume \"{}\" and kept; dljob would mount \"{}\" there",
                object::name_of(&existing),
                object::name_of(&mount)
            ));
            false
        }
    }
}

/// Adds a pod volume unless one of that name exists; a different user
/// volume of the same name is kept and named in a warning.
fn merge_volume(edits: &mut PodEdits<'_>, volume: Value, warnings: &mut Vec<String>) {
    let name = object::name_of(&volume);
    let existing = edits.items(List::Volumes).find(|v| v.name() == name);
    match existing {
        None => edits.append(List::Volumes, Item::Json(volume)),
        Some(existing) if object::contains(&existing.to_value(), &volume) => {}
        Some(_) => warnings.push(format!(
            "volume \"{name}\" is defined by the user and kept; dljob would define it as {volume}"
        )),
    }
}

/// The RFC 6902 patch that turns `original` into `mutated`. Parents are
/// added whole only where they were absent; pointer escaping (`~1`) is the
/// json-patch crate's.
pub fn patch(original: &Value, mutated: &Value) -> Patch {
    Patch::from(json_patch::diff(original, mutated))
}
