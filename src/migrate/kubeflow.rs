//! The replica-spec operators: Kubeflow's training-operator kinds
//! (`kubeflow.org/v1` PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob,
//! MXJob, MPIJob; MXJob `v1beta1`) and the MPI operator's MPIJob
//! (`kubeflow.org/v2beta1`). Each names its replicas in one map of replica
//! type to `{replicas, restartPolicy, template}` and its policies in
//! `runPolicy`; each maps field by field onto dljob's keys, and a field
//! with no dljob equivalent stops the conversion naming it.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::contract as c;
use crate::object;

/// One operator's job kind: where its replicas are and how they map.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Operator {
    /// `kind`.
    pub(crate) kind: &'static str,
    /// The dljob framework its jobs become.
    pub(crate) framework: &'static str,
    /// The spec field holding the replica specs.
    specs: &'static str,
    /// Replica type (as the operator spells it; matched ignoring case) to
    /// dljob role.
    types: &'static [(&'static str, &'static str)],
    /// Replica types the operator knows that dljob has no role for, and why.
    unsupported_types: &'static [(&'static str, &'static str)],
    /// The container the operator wires (its default container name);
    /// `None`: the first.
    container: Option<&'static str>,
    /// The name of the port the operator reads from that container, and its
    /// default; `None`: the operator uses no port of its own (MPI: ssh).
    port: Option<(&'static str, u16)>,
    /// A replica's restartPolicy when the job gives none.
    default_restart: &'static str,
    /// Replica types whose default restartPolicy is another.
    restart_overrides: &'static [(&'static str, &'static str)],
    /// Spec fields besides the replica specs and `runPolicy`.
    extra_fields: &'static [&'static str],
    /// The compatibility mode whose env the operator's images read.
    pub(crate) compat: &'static str,
    /// What every job of this kind should know, said as a warning.
    note: Option<&'static str>,
    /// runPolicy fields this kind has at the top of its spec instead (or
    /// as well); `false` in `run_policy`: it has no runPolicy.
    top_level_policies: &'static [&'static str],
    run_policy: bool,
    /// The cleanPodPolicy of a job that names none.
    default_clean: &'static str,
    /// Spec fields the operator itself does not read, with why: dropped
    /// with a warning.
    ignored_fields: &'static [(&'static str, &'static str)],
    /// What its framework's own spec fields become.
    spec_fields: SpecFields,
}

/// The framework's own spec fields of a kind, each mapped or refused by
/// its step of [`convert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpecFields {
    /// None beyond the common ones.
    None,
    /// PyTorchJob's elastic policy and nprocPerNode.
    PyTorch,
    /// PaddleJob's.
    Paddle,
    /// TFJob's successPolicy and its dynamic workers.
    TensorFlow,
    /// MXJob's jobMode; `success_policy`: the v1beta1 MXJob's successPolicy
    /// too (the v1 controllers do not read it).
    MxNet { success_policy: bool },
    /// MPIJob's slots, SSH path, implementation and launcher policies.
    Mpi,
}

impl Operator {
    /// The spec field holding the replica specs.
    pub(crate) fn specs_field(&self) -> &'static str {
        self.specs
    }
}

const KUBEFLOW: &str = c::COMPAT_KUBEFLOW;

/// What the training-operator's `kubeflow.org/v1` kinds share; each kind
/// below sets the rest.
const KUBEFLOW_V1: Operator = Operator {
    kind: "",
    framework: "",
    spec_fields: SpecFields::None,
    specs: "",
    types: &[],
    unsupported_types: &[],
    container: None,
    port: None,
    default_restart: "Never",
    restart_overrides: &[],
    extra_fields: &[],
    compat: KUBEFLOW,
    note: None,
    top_level_policies: &[],
    run_policy: true,
    default_clean: "None",
    ignored_fields: &[],
};

pub(crate) const PYTORCH: Operator = Operator {
    kind: "PyTorchJob",
    framework: "pytorch",
    spec_fields: SpecFields::PyTorch,
    specs: "pytorchReplicaSpecs",
    types: &[("Master", "master"), ("Worker", "worker")],
    container: Some("pytorch"),
    port: Some(("pytorchjob-port", 23456)),
    default_restart: "OnFailure",
    extra_fields: &["elasticPolicy", "nprocPerNode"],
    ..KUBEFLOW_V1
};

pub(crate) const TENSORFLOW: Operator = Operator {
    kind: "TFJob",
    framework: "tensorflow",
    spec_fields: SpecFields::TensorFlow,
    specs: "tfReplicaSpecs",
    types: &[
        ("Chief", "chief"),
        ("Master", "master"),
        ("Worker", "worker"),
        ("PS", "ps"),
        ("Evaluator", "evaluator"),
    ],
    container: Some("tensorflow"),
    port: Some(("tfjob-port", 2222)),
    extra_fields: &["successPolicy", "enableDynamicWorker"],
    ..KUBEFLOW_V1
};

pub(crate) const XGBOOST: Operator = Operator {
    kind: "XGBoostJob",
    framework: "xgboost",
    specs: "xgbReplicaSpecs",
    types: &[("Master", "master"), ("Worker", "worker")],
    container: Some("xgboost"),
    port: Some(("xgboostjob-port", 9999)),
    extra_fields: &[],
    ..KUBEFLOW_V1
};

pub(crate) const PADDLE: Operator = Operator {
    kind: "PaddleJob",
    framework: "paddle",
    spec_fields: SpecFields::Paddle,
    specs: "paddleReplicaSpecs",
    types: &[("Master", "master"), ("Worker", "worker")],
    container: Some("paddle"),
    port: Some(("master", 36543)),
    default_restart: "OnFailure",
    extra_fields: &["elasticPolicy"],
    ..KUBEFLOW_V1
};

pub(crate) const JAX: Operator = Operator {
    kind: "JAXJob",
    framework: "jax",
    specs: "jaxReplicaSpecs",
    types: &[("Worker", "worker")],
    container: Some("jax"),
    port: Some(("jaxjob-port", 6666)),
    extra_fields: &[],
    ..KUBEFLOW_V1
};

pub(crate) const MXNET: Operator = Operator {
    kind: "MXJob",
    framework: "mxnet",
    spec_fields: SpecFields::MxNet {
        success_policy: false,
    },
    specs: "mxReplicaSpecs",
    types: &[
        ("Scheduler", "scheduler"),
        ("Server", "server"),
        ("Worker", "worker"),
    ],
    unsupported_types: &[
        ("TunerTracker", TUNING),
        ("TunerServer", TUNING),
        ("Tuner", TUNING),
    ],
    container: Some("mxnet"),
    port: Some(("mxjob-port", 9091)),
    extra_fields: &["jobMode"],
    ..KUBEFLOW_V1
};

/// Why MXJob's tuner replica types have no dljob role.
const TUNING: &str =
    "auto-tuning (jobMode MXTune) is not a dljob job: run the tuner as its own workload";

/// The mxnet-operator's MXJob v1beta1: no runPolicy, its policies at the
/// top of the spec, every pod deleted when the job ends.
pub(crate) const MXNET_V1BETA1: Operator = Operator {
    extra_fields: &[
        "jobMode",
        "cleanPodPolicy",
        "successPolicy",
        "ttlSecondsAfterFinished",
    ],
    top_level_policies: &["cleanPodPolicy", "ttlSecondsAfterFinished"],
    run_policy: false,
    default_clean: "All",
    spec_fields: SpecFields::MxNet {
        success_policy: true,
    },
    ..MXNET
};

/// The runPolicy fields, as a job written with them inline has them at
/// the top of its spec.
const RUN_POLICY_FIELDS: &[&str] = &[
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
];

/// The mxnet-operator's own `kubeflow.org/v1` MXJob (kubeflow/mxnet-operator,
/// before the training-operator took MXJob in): its run policy inlined at
/// the top of the spec, every pod deleted when the job ends unless it says
/// otherwise. Its examples keep v1beta1's `successPolicy`, which its v1
/// controller does not read.
pub(crate) const MXNET_V1_INLINE: Operator = Operator {
    extra_fields: &[
        "jobMode",
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
    ],
    top_level_policies: RUN_POLICY_FIELDS,
    run_policy: false,
    default_clean: "All",
    ignored_fields: &[(
        "successPolicy",
        "the mxnet-operator's v1 controller does not read it (a v1beta1 field); the job succeeds when its scheduler exits 0, as there",
    )],
    ..MXNET
};

/// Which MXJob `kubeflow.org/v1` a job is: the mxnet-operator's, with its
/// run policy inline (any runPolicy field at the top of the spec, and no
/// `runPolicy`), else the training-operator's.
pub(crate) fn mxnet_v1(job: &Value) -> &'static Operator {
    let spec = job.get("spec").and_then(Value::as_object);
    let inline = spec.is_some_and(|s| {
        !s.contains_key("runPolicy") && RUN_POLICY_FIELDS.iter().any(|f| s.contains_key(*f))
    });
    if inline {
        &MXNET_V1_INLINE
    } else {
        &MXNET
    }
}

/// The MPI operator's MPIJob (v2beta1): launcher and workers over ssh; it
/// names no container or port, and its launcher restarts OnFailure.
pub(crate) const MPI: Operator = Operator {
    restart_overrides: &[("Launcher", "OnFailure")],
    extra_fields: &[
        "slotsPerWorker",
        "sshAuthMountPath",
        "launcherCreationPolicy",
        "mpiImplementation",
        "runLauncherAsWorker",
    ],
    note: None,
    top_level_policies: &[],
    ..MPI_V1
};

/// The training-operator's MPIJob (v1).
pub(crate) const MPI_V1: Operator = Operator {
    kind: "MPIJob",
    framework: "mpi",
    spec_fields: SpecFields::Mpi,
    specs: "mpiReplicaSpecs",
    types: &[("Launcher", "launcher"), ("Worker", "worker")],
    extra_fields: &[
        "slotsPerWorker",
        "sshAuthMountPath",
        "launcherCreationPolicy",
        "mpiImplementation",
        "runLauncherAsWorker",
        "mainContainer",
        "cleanPodPolicy",
    ],
    compat: c::COMPAT_MPI_OPERATOR,
    note: Some("the training-operator's v1 MPIJob reached its workers with kubectl exec (its workers with no command slept); dljob's launcher reaches them over ssh, so the workers' image needs sshd (a worker with no command runs /usr/sbin/sshd -De) and the launcher's an ssh client"),
    top_level_policies: &["cleanPodPolicy"],
    ..KUBEFLOW_V1
};

/// One replica type of a job, converted.
#[derive(Debug)]
pub(crate) struct Replica {
    /// The dljob role.
    pub(crate) role: String,
    /// The workload, as it will be printed.
    pub(crate) workload: Value,
    /// Where in the job its pod template came from, e.g.
    /// `["spec", "pytorchReplicaSpecs", "Worker", "template"]`.
    pub(crate) template_path: Vec<String>,
}

/// What a job converts to: one workload per replica type, in the
/// framework's role order, and what the reader should know.
#[derive(Debug, Default)]
pub(crate) struct ConvertedJob {
    pub(crate) replicas: Vec<Replica>,
    pub(crate) warnings: Vec<String>,
}

/// The policies of a job, as dljob annotations.
pub(crate) type Keys = BTreeMap<&'static str, String>;

/// Labels and annotations that describe the job object itself, not its
/// replicas: not copied onto the workloads.
const NOT_COPIED: &[&str] = &["kubectl.kubernetes.io/last-applied-configuration"];

/// Converts one job of `op`'s kind; every problem found, not the first.
pub(crate) fn convert(op: &Operator, job: &Value) -> Result<ConvertedJob, Vec<String>> {
    convert_with_port(op, job, None)
}

/// [`convert`], the job's port given (a form that names it outside the
/// containers' ports) rather than read from the operator's named port.
pub(crate) fn convert_with_port(
    op: &Operator,
    job: &Value,
    port: Option<u16>,
) -> Result<ConvertedJob, Vec<String>> {
    let mut problems = Vec::new();
    let mut out = ConvertedJob::default();
    let name = job_name(job, &mut problems)?;
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    for key in spec.keys() {
        let known = key == op.specs
            || (key == "runPolicy" && op.run_policy)
            || op.extra_fields.contains(&key.as_str())
            || op.ignored_fields.iter().any(|(f, _)| f == key);
        if !known {
            problems.push(format!(
                "spec.{key} is not a field of {} that dljob convert knows, so it cannot carry it over: remove it (or file an issue if it should map)",
                op.kind
            ));
        }
    }
    let mut keys = Keys::new();
    keys.insert(c::FRAMEWORK, op.framework.to_owned());
    keys.insert(c::COMPAT, op.compat.to_owned());
    if let Some(note) = op.note {
        out.warnings.push(note.to_owned());
    }
    for (field, why) in op.ignored_fields {
        if let Some(v) = spec.get(*field) {
            out.warnings
                .push(format!("spec.{field} {v} is not carried over: {why}"));
        }
    }

    let replicas = replica_specs(op, spec, &mut problems);
    let total: u32 = replicas.iter().map(|r| r.count).sum();
    let topology = replicas
        .iter()
        .map(|r| format!("{}={}", r.role, r.count))
        .collect::<Vec<_>>()
        .join(",");
    keys.insert(c::REPLICAS, topology);
    restart_policy(
        &format!("spec.{}", op.specs),
        &replicas,
        &mut keys,
        &mut out.warnings,
    );

    let run_policy = run_policy_of(op, spec, &mut problems);
    let mut template_edits = TemplateEdits::default();
    if let Some(rp) = &run_policy {
        let at = |field: &str| {
            if op.top_level_policies.contains(&field) && spec.contains_key(field) {
                format!("spec.{field}")
            } else {
                format!("spec.runPolicy.{field}")
            }
        };
        run_policy_keys(rp, op.default_clean, &at, &mut keys, &mut problems);
    }
    match op.spec_fields {
        SpecFields::PyTorch => pytorch(
            spec,
            &replicas,
            &mut keys,
            &mut template_edits,
            &mut problems,
        ),
        SpecFields::Paddle => paddle(spec, &mut problems),
        SpecFields::TensorFlow => tensorflow(spec, &mut problems),
        SpecFields::MxNet { success_policy } => {
            mxnet(spec, &mut problems);
            if success_policy {
                tensorflow(spec, &mut problems);
            }
        }
        SpecFields::Mpi => mpi(spec, &mut keys, &mut problems, &mut out.warnings),
        SpecFields::None => {}
    }
    retries_said(op, &replicas, &keys, &mut out.warnings);
    gang(
        job,
        run_policy.as_ref(),
        &replicas,
        total,
        &mut keys,
        &mut template_edits,
        &mut problems,
        &mut out.warnings,
    );
    let named = match port {
        Some(p) => Some((p, true)),
        None => port_of(op, &replicas, &mut problems),
    };
    match (keys.get(c::PORT), named) {
        // PyTorch's elasticPolicy.rdzvPort, where no port is named.
        (Some(_), Some((_, false)) | None) => {}
        (Some(rdzv), Some((p, true))) if *rdzv != p.to_string() => problems.push(format!(
            "spec.elasticPolicy.rdzvPort ({rdzv}) and the named port {} ({p}) differ: dljob's rendezvous is on the job's one port (dljob.dev/port); make them equal",
            op.port.map_or("", |(n, _)| n)
        )),
        (_, Some((p, _))) => {
            keys.insert(c::PORT, p.to_string());
        }
        (None, None) => {}
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let meta = job.get("metadata").and_then(Value::as_object);
    for r in replicas {
        let workload = workload(name, meta, &r, &keys, &template_edits, op.container);
        out.replicas.push(Replica {
            role: r.role.clone(),
            workload,
            template_path: vec![
                "spec".into(),
                op.specs.into(),
                r.type_name.clone(),
                "template".into(),
            ],
        });
    }
    Ok(out)
}

/// The job's name, which names the dljob job: `Err` when there is none.
pub(crate) fn job_name<'v>(
    job: &'v Value,
    problems: &mut Vec<String>,
) -> Result<&'v str, Vec<String>> {
    let name = object::str_at(job, &["metadata", "name"]).unwrap_or("");
    if name.is_empty() {
        return Err(vec![
            "metadata.name is missing: a dljob job is named by it (its pods' host names start with it); give the job a name (generateName is not enough)".into(),
        ]);
    }
    if !c::is_dns1035_label(name) || name.len() > c::MAX_JOB_NAME {
        problems.push(format!(
            "metadata.name \"{}\" cannot name a dljob job: job names are DNS labels of at most {} characters that start with a letter (each pod's host name is <job>-<role>-<index>); rename the job",
            c::quoted(name),
            c::MAX_JOB_NAME
        ));
    }
    Ok(name)
}

/// A replica spec, read.
#[derive(Debug)]
pub(crate) struct ReplicaSpec<'v> {
    /// The replica type as the job spells it.
    pub(crate) type_name: String,
    pub(crate) role: String,
    pub(crate) count: u32,
    pub(crate) restart: &'v str,
    pub(crate) template: &'v Value,
}

/// The job's replica specs in the framework's role order.
fn replica_specs<'v>(
    op: &Operator,
    spec: &'v Map<String, Value>,
    problems: &mut Vec<String>,
) -> Vec<ReplicaSpec<'v>> {
    let field = op.specs;
    let Some(specs) = spec.get(field).and_then(Value::as_object) else {
        problems.push(format!(
            "spec.{field} is missing: a {} names its replicas there",
            op.kind
        ));
        return Vec::new();
    };
    let mut out: Vec<ReplicaSpec<'v>> = Vec::new();
    for (type_name, rs) in specs {
        let at = format!("spec.{field}.{type_name}");
        let role = op
            .types
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(type_name))
            .map(|(_, r)| (*r).to_owned());
        let Some(role) = role else {
            match op
                .unsupported_types
                .iter()
                .find(|(t, _)| t.eq_ignore_ascii_case(type_name))
            {
                Some((_, why)) => problems.push(format!("{at}: {why}")),
                None => problems.push(format!(
                    "{at}: {} has no replica type \"{}\"; its types are {}",
                    op.kind,
                    c::quoted(type_name),
                    op.types
                        .iter()
                        .map(|(t, _)| *t)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
            continue;
        };
        if out.iter().any(|r| r.role == role) {
            problems.push(format!(
                "{at}: replica type {type_name} is given twice (the operator matches types ignoring case)"
            ));
            continue;
        }
        let Some(rs) = rs.as_object() else {
            problems.push(format!("{at} is not a mapping"));
            continue;
        };
        if let Some(label) = rs
            .get("label")
            .and_then(Value::as_str)
            .filter(|_| !op.run_policy)
        {
            if !label.is_empty() {
                problems.push(format!(
                    "{at}.label \"{}\": a tuner's label is for auto-tuning (MXTune), which is not a dljob job; remove it",
                    c::quoted(label)
                ));
            }
        }
        for key in rs.keys() {
            let label = key == "label" && !op.run_policy;
            if !label && !matches!(key.as_str(), "replicas" | "template" | "restartPolicy") {
                problems.push(format!(
                    "{at}.{key} is not a replica spec field dljob convert knows: remove it"
                ));
            }
        }
        let count = match rs.get("replicas") {
            None | Some(Value::Null) => 1,
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => n,
                None => {
                    problems.push(format!("{at}.replicas is {v}, not a count"));
                    continue;
                }
            },
        };
        if count == 0 {
            problems.push(format!(
                "{at}.replicas is 0: a dljob role has at least one replica; remove the replica type"
            ));
            continue;
        }
        let default_restart = op
            .restart_overrides
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(type_name))
            .map_or(op.default_restart, |(_, p)| *p);
        let restart = match rs.get("restartPolicy") {
            None | Some(Value::Null) => default_restart,
            Some(v) => match v.as_str() {
                Some(p @ ("Always" | "OnFailure" | "Never" | "ExitCode")) => p,
                _ => {
                    problems.push(format!(
                        "{at}.restartPolicy is {v}: the operator's policies are Always, OnFailure, Never and ExitCode"
                    ));
                    continue;
                }
            },
        };
        let Some(template) = rs.get("template").filter(|t| t.is_object()) else {
            problems.push(format!(
                "{at}.template is missing: a replica needs a pod template"
            ));
            continue;
        };
        if object::containers(template.get("spec").unwrap_or(&Value::Null)).is_empty() {
            problems.push(format!("{at}.template.spec.containers is empty"));
            continue;
        }
        out.push(ReplicaSpec {
            type_name: type_name.clone(),
            role,
            count,
            restart,
            template,
        });
    }
    let order: Vec<&str> = op.types.iter().map(|(_, r)| *r).collect();
    out.sort_by_key(|r| order.iter().position(|o| *o == r.role));
    out
}

/// `dljob.dev/restart-policy` from the replicas' policies. Always and
/// OnFailure are the kubelet's (the container restarts in place) and agree
/// with either of dljob's; ExitCode is dljob's `ExitCode`, Never its
/// `Never`; a job that mixes the two gets `ExitCode`, with a warning that
/// says what changes for the `Never` replicas.
pub(crate) fn restart_policy(
    at: &str,
    replicas: &[ReplicaSpec<'_>],
    keys: &mut Keys,
    warnings: &mut Vec<String>,
) {
    let with = |p: &str| -> Vec<&str> {
        replicas
            .iter()
            .filter(|r| r.restart == p)
            .map(|r| r.type_name.as_str())
            .collect()
    };
    let (exit_code, never) = (with("ExitCode"), with("Never"));
    match (exit_code.is_empty(), never.is_empty()) {
        // The training-operator's own XGBoost and LightGBM examples: Master
        // Never, Worker ExitCode. dljob's retry policy is one for the job;
        // ExitCode keeps the workers' retries, and changes what an exit of
        // 128-255 does to the others.
        (false, false) => {
            keys.insert(c::RESTART_POLICY, "ExitCode".into());
            warnings.push(format!(
                "{at}: restartPolicy is ExitCode for {} and Never for {}; dljob's retry policy is one for the whole job, ExitCode here: an exit of 128-255 (a kill, an out-of-memory, a preemption) of {} is retried as {}'s are, where the operator failed the job; an exit of 1-127 still fails it. Set dljob.dev/restart-policy: Never to fail on any exit instead",
                exit_code.join(", "),
                never.join(", "),
                never.join(", "),
                exit_code.join(", ")
            ));
        }
        (false, true) => {
            keys.insert(c::RESTART_POLICY, "ExitCode".into());
        }
        (true, false) => {
            keys.insert(c::RESTART_POLICY, "Never".into());
        }
        (true, true) => {}
    }
}

/// What the operator did, with no `backoffLimit`, that dljob's default
/// (3 retries) does not: said, not guessed at. The training-operator
/// restarted an `OnFailure` replica's containers without limit (a Job counts
/// them against its `backoffLimit`); the MPI operator's launcher was a Job
/// with Kubernetes' default of 6.
/// How [`retries_said`]'s warnings start, for forms that name the limit
/// otherwise.
pub(crate) const NO_BACKOFF_LIMIT: &str = "runPolicy.backoffLimit is not set";

fn retries_said(
    op: &Operator,
    replicas: &[ReplicaSpec<'_>],
    keys: &Keys,
    warnings: &mut Vec<String>,
) {
    if keys.contains_key(c::BACKOFF_LIMIT) {
        return;
    }
    let field = if op.run_policy {
        "runPolicy.backoffLimit"
    } else {
        "backoffLimit"
    };
    if *op == MPI {
        warnings.push(format!(
            "{field} is not set: the MPI operator's launcher Job took Kubernetes' default of 6 retries; the converted Jobs allow dljob's default of 3 (dljob.dev/backoff-limit): set {field} to keep 6"
        ));
        return;
    }
    let on_failure: Vec<&str> = replicas
        .iter()
        .filter(|r| r.restart == "OnFailure")
        .map(|r| r.type_name.as_str())
        .collect();
    if !on_failure.is_empty() {
        warnings.push(format!(
            "{field} is not set: the operator restarted {} (restartPolicy OnFailure) without limit; the converted Jobs fail after dljob's default of 3 restarts (dljob.dev/backoff-limit): set {field} to the restarts the job may take",
            on_failure.join(", ")
        ));
    }
}

/// `runPolicy` and the policies a kind has at the top of its spec (the v1
/// MPIJob's deprecated `cleanPodPolicy`, the v1beta1 MXJob's), checked for
/// unknown fields.
fn run_policy_of(
    op: &Operator,
    spec: &Map<String, Value>,
    problems: &mut Vec<String>,
) -> Option<Map<String, Value>> {
    let mut rp = match spec.get("runPolicy") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            problems.push("spec.runPolicy is not a mapping".into());
            return None;
        }
    };
    for field in op.top_level_policies {
        if let Some(p) = spec.get(*field) {
            if rp.get(*field).is_some_and(|q| q != p) {
                problems.push(format!(
                    "spec.{field} and spec.runPolicy.{field} differ: keep one"
                ));
            }
            rp.insert((*field).into(), p.clone());
        }
    }
    for key in rp.keys() {
        let known = matches!(
            key.as_str(),
            "cleanPodPolicy"
                | "ttlSecondsAfterFinished"
                | "activeDeadlineSeconds"
                | "backoffLimit"
                | "schedulingPolicy"
                | "suspend"
                | "managedBy"
        );
        if !known {
            problems.push(format!(
                "spec.runPolicy.{key} is not a runPolicy field dljob convert knows: remove it"
            ));
        }
    }
    Some(rp)
}

/// runPolicy's own fields as dljob keys (schedulingPolicy is [`gang`]'s).
fn run_policy_keys(
    rp: &Map<String, Value>,
    default_clean: &str,
    at: &dyn Fn(&str) -> String,
    keys: &mut Keys,
    problems: &mut Vec<String>,
) {
    // The operators default to None (leave every pod as it is) or All;
    // dljob to Running. The job keeps its operator's behaviour.
    keys.insert(c::CLEAN_POD_POLICY, default_clean.into());
    if let Some(v) = rp.get("cleanPodPolicy").filter(|v| !v.is_null()) {
        match v.as_str() {
            Some(p @ ("Running" | "All" | "None")) => {
                keys.insert(c::CLEAN_POD_POLICY, p.to_owned());
            }
            _ => problems.push(format!(
                "{} is {v}: dljob's are Running, All and None",
                at("cleanPodPolicy")
            )),
        }
    }
    for (field, key) in [
        ("ttlSecondsAfterFinished", c::TTL_SECONDS_AFTER_FINISHED),
        ("activeDeadlineSeconds", c::ACTIVE_DEADLINE_SECONDS),
        ("backoffLimit", c::BACKOFF_LIMIT),
    ] {
        match rp.get(field) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) => {
                    keys.insert(key, n.to_string());
                }
                None => problems.push(format!("{} is {v}, not a whole number", at(field))),
            },
        }
    }
    if rp.get("suspend").and_then(Value::as_bool) == Some(true) {
        problems.push("spec.runPolicy.suspend is true: a dljob job has no suspended state of its own; apply the converted workloads when the job should run (or queue them with Kueue), and remove suspend".into());
    }
    if let Some(m) = rp.get("managedBy").and_then(Value::as_str) {
        if m != "kubeflow.org/training-operator" && m != "kubeflow.org/mpi-operator" {
            problems.push(format!(
                "spec.runPolicy.managedBy is \"{}\": the job is another controller's; dljob convert does not take it over",
                c::quoted(m)
            ));
        }
    }
}

/// Edits every replica's pod template gets.
#[derive(Debug, Default)]
pub(crate) struct TemplateEdits {
    /// `spec.priorityClassName` when the template has none.
    pub(crate) priority_class: Option<String>,
    /// Env of the framework container (name, value) when it sets none.
    pub(crate) env: Vec<(&'static str, String)>,
}

/// PyTorchJob's `elasticPolicy` and `nprocPerNode`.
fn pytorch(
    spec: &Map<String, Value>,
    replicas: &[ReplicaSpec<'_>],
    keys: &mut Keys,
    edits: &mut TemplateEdits,
    problems: &mut Vec<String>,
) {
    let mut nproc = spec.get("nprocPerNode").filter(|v| !v.is_null()).cloned();
    if let Some(ep) = spec.get("elasticPolicy").filter(|v| !v.is_null()) {
        let Some(ep) = ep.as_object() else {
            problems.push("spec.elasticPolicy is not a mapping".into());
            return;
        };
        let workers: u32 = replicas
            .iter()
            .filter(|r| r.role == "worker")
            .map(|r| r.count)
            .sum();
        let number = |field: &str, problems: &mut Vec<String>| -> Option<u32> {
            let v = ep.get(field).filter(|v| !v.is_null())?;
            let n = v.as_u64().and_then(|n| u32::try_from(n).ok());
            if n.is_none() {
                problems.push(format!("spec.elasticPolicy.{field} is {v}, not a count"));
            }
            n
        };
        let min = number("minReplicas", problems).unwrap_or(workers);
        let max = number("maxReplicas", problems).unwrap_or(workers);
        keys.insert(c::ELASTIC, format!("{min}:{max}"));
        if let Some(n) = number("maxRestarts", problems) {
            // dljob's one limit is both torchrun's in-place restarts
            // (PET_MAX_RESTARTS) and the job's retries.
            match keys.get(c::BACKOFF_LIMIT) {
                Some(b) if *b != n.to_string() => problems.push(format!(
                    "spec.elasticPolicy.maxRestarts ({n}) and spec.runPolicy.backoffLimit ({b}) differ: dljob has one limit for both torchrun's in-place restarts (PET_MAX_RESTARTS) and the job's retries (dljob.dev/backoff-limit); make them equal or remove one"
                )),
                _ => {
                    keys.insert(c::BACKOFF_LIMIT, n.to_string());
                }
            }
        }
        if let Some(b) = ep.get("rdzvBackend").and_then(Value::as_str) {
            if b != "c10d" {
                problems.push(format!("spec.elasticPolicy.rdzvBackend \"{}\": dljob's rendezvous is torchrun's c10d store on the first worker, with no etcd; remove it", c::quoted(b)));
            }
        }
        for (field, why) in [
            (
                "rdzvHost",
                "dljob's rendezvous host is the job's first worker",
            ),
            ("rdzvId", "dljob's rendezvous id is the job's name"),
            ("rdzvConf", "dljob sets the rendezvous configuration itself"),
            (
                "metrics",
                "dljob does not autoscale a job (no HorizontalPodAutoscaler)",
            ),
        ] {
            if ep.get(field).is_some_and(|v| !v.is_null()) {
                problems.push(format!("spec.elasticPolicy.{field}: {why}; remove it"));
            }
        }
        if let Some(p) = number("rdzvPort", problems) {
            keys.insert(c::PORT, p.to_string());
        }
        if ep.get("standalone").and_then(Value::as_bool) == Some(true) {
            problems.push("spec.elasticPolicy.standalone: a standalone rendezvous runs on one node only, which is not a distributed job; remove it".into());
        }
        if let Some(n) = ep.get("nProcPerNode").filter(|v| !v.is_null()) {
            if nproc.as_ref().is_some_and(|m| m != n) {
                problems.push(
                    "spec.elasticPolicy.nProcPerNode and spec.nprocPerNode differ: keep one".into(),
                );
            }
            nproc = Some(n.clone());
        }
        for key in ep.keys() {
            let known = matches!(
                key.as_str(),
                "minReplicas"
                    | "maxReplicas"
                    | "maxRestarts"
                    | "rdzvBackend"
                    | "rdzvHost"
                    | "rdzvId"
                    | "rdzvConf"
                    | "rdzvPort"
                    | "metrics"
                    | "standalone"
                    | "nProcPerNode"
            );
            if !known {
                problems.push(format!(
                    "spec.elasticPolicy.{key} is not an elasticPolicy field dljob convert knows: remove it"
                ));
            }
        }
    }
    if let Some(n) = nproc {
        let text = match &n {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                problems.push(format!(
                    "spec.nprocPerNode is {other}: a count, auto, cpu or gpu"
                ));
                return;
            }
        };
        edits.env.push(("PET_NPROC_PER_NODE", text));
    }
}

/// PaddleJob's `elasticPolicy`.
fn paddle(spec: &Map<String, Value>, problems: &mut Vec<String>) {
    if spec.get("elasticPolicy").is_some_and(|v| !v.is_null()) {
        problems.push("spec.elasticPolicy: dljob has no elastic paddle training (its PADDLE_* env is fixed-size): remove it to run the job at its replicas' size".into());
    }
}

/// MXJob's `jobMode`.
fn mxnet(spec: &Map<String, Value>, problems: &mut Vec<String>) {
    if let Some(mode) = spec.get("jobMode").and_then(Value::as_str) {
        if mode != "MXTrain" {
            problems.push(format!("spec.jobMode \"{}\": only MXTrain (distributed training) is a dljob job; auto-tuning (MXTune) is not", c::quoted(mode)));
        }
    }
}

/// TFJob's `successPolicy` and `enableDynamicWorker`.
fn tensorflow(spec: &Map<String, Value>, problems: &mut Vec<String>) {
    if let Some(p) = spec.get("successPolicy").and_then(Value::as_str) {
        if !p.is_empty() {
            problems.push(format!(
                "spec.successPolicy \"{}\": a dljob job succeeds when its coordinator (the chief, else the master, else worker 0) exits 0, as the operator's default policy does; remove it",
                c::quoted(p)
            ));
        }
    }
    if spec.get("enableDynamicWorker").and_then(Value::as_bool) == Some(true) {
        problems.push(
            "spec.enableDynamicWorker: dljob's TF_CONFIG lists a fixed set of workers; remove it"
                .into(),
        );
    }
}

/// MPIJob's fields.
fn mpi(
    spec: &Map<String, Value>,
    keys: &mut Keys,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    if let Some(v) = spec.get("slotsPerWorker").filter(|v| !v.is_null()) {
        match v.as_u64() {
            Some(n) if n > 0 => {
                keys.insert(c::SLOTS, n.to_string());
            }
            _ => problems.push(format!("spec.slotsPerWorker is {v}, not a count")),
        }
    }
    if let Some(p) = spec.get("sshAuthMountPath").and_then(Value::as_str) {
        keys.insert(c::SSH_PATH, p.to_owned());
    }
    if let Some(i) = spec.get("mpiImplementation").and_then(Value::as_str) {
        mpi_implementation(i, "spec.mpiImplementation", keys, problems);
    }
    if spec.get("runLauncherAsWorker").and_then(Value::as_bool) == Some(true) {
        problems.push("spec.runLauncherAsWorker: dljob's hostfile lists the workers only; remove it (and add a worker) to run ranks on the launcher's node too".into());
    }
    if let Some(p) = spec.get("launcherCreationPolicy").and_then(Value::as_str) {
        if p == "AtStartup" {
            warnings.push("spec.launcherCreationPolicy AtStartup: dljob creates the launcher pod at once but holds it unscheduled (a scheduling gate) until every worker runs, as WaitForWorkersReady does".into());
        }
    }
    if let Some(name) = spec.get("mainContainer").and_then(Value::as_str) {
        keys.insert(c::CONTAINER, name.to_owned());
    }
}

/// An MPI implementation the operator names (`at`), as
/// `dljob.dev/mpi-implementation` (OpenMPI, the default, as nothing).
pub(crate) fn mpi_implementation(
    text: &str,
    at: &str,
    keys: &mut Keys,
    problems: &mut Vec<String>,
) {
    match c::MpiImplementation::parse(text) {
        Some(c::MpiImplementation::OpenMpi) => {}
        Some(other) => {
            keys.insert(c::MPI_IMPLEMENTATION, other.as_str().to_owned());
        }
        None => problems.push(format!(
            "{at} \"{}\" is not an MPI implementation dljob wires: {}",
            c::quoted(text),
            c::MpiImplementation::VALUES
        )),
    }
}

/// The gang: from a Kueue queue label on the job, else the replicas'
/// `schedulerName`; and runPolicy.schedulingPolicy.
#[allow(clippy::too_many_arguments)]
fn gang(
    job: &Value,
    run_policy: Option<&Map<String, Value>>,
    replicas: &[ReplicaSpec<'_>],
    total: u32,
    keys: &mut Keys,
    edits: &mut TemplateEdits,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let kueue_queue = object::str_at(job, &["metadata", "labels", crate::gang::kueue::QUEUE_NAME]);
    let schedulers: Vec<&str> = replicas
        .iter()
        .filter_map(|r| object::str_at(r.template, &["spec", "schedulerName"]))
        .collect();
    let scheduler = schedulers.first().copied();
    if schedulers.iter().any(|s| Some(*s) != scheduler)
        || (scheduler.is_some() && schedulers.len() != replicas.len())
    {
        problems.push("the replica templates name different schedulerNames: a gang is scheduled by one scheduler; give every replica the same one".into());
    }
    let gang = if let Some(q) = kueue_queue {
        keys.insert(c::QUEUE, q.to_owned());
        Some("kueue")
    } else {
        match scheduler {
            Some("volcano") => Some("volcano"),
            Some("scheduler-plugins-scheduler") => Some("coscheduling"),
            _ => None,
        }
    };
    if let Some(g) = gang {
        keys.insert(c::GANG, g.to_owned());
    }
    let Some(sp) = run_policy
        .and_then(|rp| rp.get("schedulingPolicy"))
        .filter(|v| !v.is_null())
    else {
        return;
    };
    let Some(sp) = sp.as_object() else {
        problems.push("spec.runPolicy.schedulingPolicy is not a mapping".into());
        return;
    };
    if gang.is_none() {
        problems.push("spec.runPolicy.schedulingPolicy asks for gang scheduling, but the job names no gang scheduler (the operator's --gang-scheduler-name is the operator's flag, not the job's): set schedulerName volcano or scheduler-plugins-scheduler in every replica template, or label the job kueue.x-k8s.io/queue-name, and convert again; or remove schedulingPolicy".into());
    }
    for key in sp.keys() {
        match key.as_str() {
            "minAvailable" => {
                let v = &sp[key];
                let elastic_min = keys
                    .get(c::ELASTIC)
                    .and_then(|e| e.split(':').next())
                    .and_then(|m| m.parse::<u64>().ok());
                match v.as_u64() {
                    Some(n) if n == u64::from(total) || Some(n) == elastic_min => {}
                    _ => problems.push(format!(
                        "spec.runPolicy.schedulingPolicy.minAvailable is {v}: a dljob gang is the whole job ({total} pods); remove it"
                    )),
                }
            }
            "queue" => {
                let q = sp[key].as_str().unwrap_or("");
                match keys.get(c::QUEUE) {
                    Some(old) if old != q => problems.push(format!(
                        "spec.runPolicy.schedulingPolicy.queue \"{}\" and the job's label {} \"{}\" differ: keep one",
                        c::quoted(q),
                        crate::gang::kueue::QUEUE_NAME,
                        c::quoted(old)
                    )),
                    _ => {
                        keys.insert(c::QUEUE, q.to_owned());
                    }
                }
            }
            "priorityClass" => {
                if let Some(p) = sp[key].as_str() {
                    edits.priority_class = Some(p.to_owned());
                    for r in replicas {
                        let own = object::str_at(r.template, &["spec", "priorityClassName"]);
                        if own.is_some_and(|o| o != p) {
                            problems.push(format!(
                                "spec.runPolicy.schedulingPolicy.priorityClass \"{}\" and {}'s template's priorityClassName differ: keep one",
                                c::quoted(p),
                                r.type_name
                            ));
                        }
                    }
                }
            }
            "minResources" => warnings.push(
                "spec.runPolicy.schedulingPolicy.minResources is not carried over: dljob computes the PodGroup's minResources from the pods' requests".into(),
            ),
            "scheduleTimeoutSeconds" => problems.push(
                "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds: dljob's gang has no schedule timeout of its own; remove it".into(),
            ),
            other => problems.push(format!(
                "spec.runPolicy.schedulingPolicy.{other} is not a schedulingPolicy field dljob convert knows: remove it"
            )),
        }
    }
}

/// The index of the container the operator wires in `template`.
fn container_index(default: Option<&str>, template: &Value, main: Option<&str>) -> usize {
    let containers = object::containers(template.get("spec").unwrap_or(&Value::Null));
    let wanted = main.or(default);
    wanted
        .and_then(|w| containers.iter().position(|c| object::name_of(c) == w))
        .unwrap_or(0)
}

/// The port the operator reads: its named port in each replica's wired
/// container (`true`: named), else its default. Every replica must agree.
fn port_of(
    op: &Operator,
    replicas: &[ReplicaSpec<'_>],
    problems: &mut Vec<String>,
) -> Option<(u16, bool)> {
    let (port_name, default) = op.port?;
    let mut found: Option<(u16, &str)> = None;
    for r in replicas {
        let i = container_index(op.container, r.template, None);
        let container = &object::containers(&r.template["spec"])[i];
        let named = container
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| object::name_of(p) == port_name)
            .and_then(|p| p.get("containerPort"))
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = named else { continue };
        match found {
            Some((other, by)) if other != port => {
                problems.push(format!(
                    "port {port_name} is {port} in {} and {other} in {by}: every replica listens on the job's one port (dljob.dev/port); make them equal",
                    r.type_name
                ));
            }
            None => found = Some((port, &r.type_name)),
            _ => {}
        }
    }
    Some(found.map_or((default, false), |(p, _)| (p, true)))
}

/// The workload for one replica type: an Indexed Job for a replica that
/// runs to completion (restartPolicy OnFailure, Never, ExitCode), a
/// StatefulSet for one the kubelet restarts forever (Always: the only
/// policy a StatefulSet allows, and one a Job refuses).
pub(crate) fn workload(
    name: &str,
    meta: Option<&Map<String, Value>>,
    r: &ReplicaSpec<'_>,
    keys: &Keys,
    edits: &TemplateEdits,
    default_container: Option<&str>,
) -> Value {
    let labels = job_labels(name, &r.role);
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(format!("{name}-{}", r.role)));
    if let Some(ns) = meta.and_then(|m| m.get("namespace")) {
        metadata.insert("namespace".into(), ns.clone());
    }
    let mut all_labels = copied(meta, "labels");
    all_labels.remove(crate::gang::kueue::QUEUE_NAME);
    all_labels.extend(labels.clone());
    metadata.insert("labels".into(), Value::Object(all_labels));
    let mut annotations = copied(meta, "annotations");
    for (k, v) in keys {
        annotations.insert((*k).to_owned(), json!(v));
    }
    metadata.insert("annotations".into(), Value::Object(annotations));

    let mut template = r.template.clone();
    if let Some(tl) = object::object_at_mut(&mut template, &["metadata", "labels"]) {
        tl.extend(labels.clone());
    }
    let pod_restart = match r.restart {
        "ExitCode" => "Never",
        p => p,
    };
    if let Some(spec) = object::object_at_mut(&mut template, &["spec"]) {
        spec.insert("restartPolicy".into(), json!(pod_restart));
        if let Some(p) = &edits.priority_class {
            spec.entry("priorityClassName").or_insert_with(|| json!(p));
        }
    }
    if !edits.env.is_empty() {
        let main = keys.get(c::CONTAINER).map(String::as_str);
        let i = container_index(default_container, r.template, main);
        if let Some(container) = template
            .pointer_mut(&format!("/spec/containers/{i}"))
            .and_then(Value::as_object_mut)
        {
            let env = container.entry("env").or_insert_with(|| json!([]));
            if let Some(env) = env.as_array_mut() {
                for (n, v) in &edits.env {
                    if !env.iter().any(|e| object::name_of(e) == *n) {
                        env.push(json!({"name": n, "value": v}));
                    }
                }
            }
        }
    }
    let selector = json!({"matchLabels": labels});
    if r.restart == "Always" {
        json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": metadata,
            "spec": {
                "replicas": r.count,
                "serviceName": name,
                "podManagementPolicy": "Parallel",
                "selector": selector,
                "template": template,
            }
        })
    } else {
        let backoff = keys
            .get(c::BACKOFF_LIMIT)
            .and_then(|b| b.parse::<u64>().ok())
            .unwrap_or(3);
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "completionMode": "Indexed",
                "completions": r.count,
                "parallelism": r.count,
                "backoffLimit": backoff,
                "template": template,
            }
        })
    }
}

fn job_labels(name: &str, role: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(c::JOB.into(), json!(name));
    m.insert(c::ROLE.into(), json!(role));
    m
}

/// The job's own labels or annotations, to copy onto its workloads.
fn copied(meta: Option<&Map<String, Value>>, which: &str) -> Map<String, Value> {
    let mut m = meta
        .and_then(|m| m.get(which))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    m.retain(|k, _| !NOT_COPIED.contains(&k.as_str()));
    m
}
