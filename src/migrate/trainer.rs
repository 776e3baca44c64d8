//! Kubeflow Trainer v2: a `TrainJob` (`trainer.kubeflow.org/v1alpha1`)
//! on the `ClusterTrainingRuntime` or `TrainingRuntime` it names. The
//! runtime is a JobSet template and an ML policy; Trainer's controller
//! makes one JobSet of the two, the TrainJob's `trainer` (image, command,
//! args, env, node count, resources) and its `runtimePatches` (2.2 and
//! later) or `podTemplateOverrides` (2.1) laid over the runtime's
//! template. The conversion does the same overlay (as Trainer 2.3 does
//! it), and each replicated Job becomes one dljob workload: the trainer
//! nodes one role, an MPI launcher another. What Trainer's plugins give
//! the containers (torch's `PET_*`, JAX's `JAX_*`, XGBoost's `DMLC_*`, the
//! MPI hostfile and SSH keys) is what dljob's frameworks give them; where
//! Trainer computes a value dljob would compute otherwise (torchrun's
//! processes per node), the value is written into the template; where
//! they cannot agree, the conversion stops and says why.

use serde_json::{json, Map, Value};

use super::kubeflow::{self, ConvertedJob, Keys, Replica, ReplicaSpec, TemplateEdits};
use crate::contract as c;
use crate::object;

const GROUP: &str = "trainer.kubeflow.org";
const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
const CLUSTER_RUNTIME: &str = "ClusterTrainingRuntime";
const RUNTIME: &str = "TrainingRuntime";

/// The label of a replicated Job that says which step of a TrainJob it
/// runs (`trainer`, `dataset-initializer`, `model-initializer`).
const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The container Trainer's plugins wire, in every runtime.
const NODE: &str = "node";
/// The MPI policy's launcher Job.
const LAUNCHER: &str = "launcher";
/// The port Trainer's plugins give the trainer (torch's master, JAX's
/// coordinator, XGBoost's tracker).
const TRAINER_PORT: u16 = 29500;
/// `spec.managedBy` of a TrainJob Trainer's own controller runs.
const TRAINER_CONTROLLER: &str = "trainer.kubeflow.org/trainjob-controller";

/// TrainJob spec fields dljob reads.
const FIELDS: &[&str] = &[
    "runtimeRef",
    "trainer",
    "runtimePatches",
    "podTemplateOverrides",
    "labels",
    "annotations",
    "initializer",
    "suspend",
    "activeDeadlineSeconds",
    "managedBy",
];

/// `spec.trainer` fields.
const TRAINER_FIELDS: &[&str] = &[
    "image",
    "command",
    "args",
    "env",
    "numNodes",
    "resourcesPerNode",
    "numProcPerNode",
];

/// The env Trainer refuses in `spec.trainer.env` (its plugins set them),
/// per policy (`constants.go`: TorchRunReservedEnvNames, …).
const TORCH_ENV: &[&str] = &[
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
];
const XGBOOST_ENV: &[&str] = &[
    "DMLC_TRACKER_URI",
    "DMLC_TRACKER_PORT",
    "DMLC_TASK_ID",
    "DMLC_NUM_WORKER",
];
const MPI_ENV: &[&str] = &[
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];

/// Whether `value` is a Trainer runtime, which a TrainJob may name.
pub(crate) fn is_runtime(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some(API_VERSION)
        && matches!(
            value.get("kind").and_then(Value::as_str),
            Some(CLUSTER_RUNTIME | RUNTIME)
        )
}

/// The items of a list of objects: a `kind: List`, or a typed list such as
/// `ClusterTrainingRuntimeList` (what `kubectl get …s -o yaml` prints).
fn list_items(value: &Value) -> Option<&[Value]> {
    let kind = value.get("kind").and_then(Value::as_str)?;
    if !kind.ends_with("List") {
        return None;
    }
    value.get("items")?.as_array().map(Vec::as_slice)
}

/// The runtimes among `docs`, lists' items included.
pub(crate) fn runtimes_in<'v>(docs: impl IntoIterator<Item = &'v Value>) -> Vec<&'v Value> {
    let mut out = Vec::new();
    for v in docs {
        match list_items(v) {
            Some(items) => out.extend(items.iter().filter(|i| is_runtime(i))),
            None if is_runtime(v) => out.push(v),
            None => {}
        }
    }
    out
}

/// What in `value` (a document `--runtime` read) is not a runtime.
pub(crate) fn not_runtimes(value: &Value) -> Vec<String> {
    match list_items(value) {
        Some(items) => items
            .iter()
            .filter(|i| !is_runtime(i))
            .map(crate::manifest::describe)
            .collect(),
        None if is_runtime(value) => Vec::new(),
        None => vec![crate::manifest::describe(value)],
    }
}

/// Converts one TrainJob on its runtime, found among `runtimes`, as named
/// steps: the TrainJob's own fields, its runtime, the job-wide keys, the
/// runtime's JobSet with the TrainJob laid over it, the members and their
/// keys, the workloads. Every problem found, not the first. `namespace`:
/// the job's when it names none (a TrainingRuntime is the job's
/// namespace's).
pub(crate) fn convert(
    job: &Value,
    namespace: &str,
    runtimes: &[&Value],
) -> Result<ConvertedJob, Vec<String>> {
    let mut p = Vec::new();
    let name = kubeflow::job_name(job, &mut p)?;
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    for key in spec.keys() {
        if !FIELDS.contains(&key.as_str()) {
            p.push(format!(
                "spec.{key} is not a field of TrainJob that dljob convert knows, so it cannot carry it over: remove it (or file an issue if it should map)"
            ));
        }
    }
    job_policies(job, spec, &mut p);
    let trainer = Trainer::read(spec.get("trainer"), &mut p);
    let ns = object::str_at(job, &["metadata", "namespace"]).unwrap_or(namespace);
    let runtime = match find_runtime(spec, ns, runtimes) {
        Ok(r) => r,
        Err(e) => {
            p.push(e);
            return Err(p);
        }
    };
    let Some((rt, rspec)) = runtime_spec(runtime, &mut p) else {
        return Err(p);
    };
    let policy = MlPolicy::read(rspec.get("mlPolicy"), &rt, &mut p);
    let mut out = ConvertedJob::default();
    let mut keys = job_keys(spec, &policy, &mut p);
    let Some((jobset, mut meta)) = jobset(spec, rspec, &rt, &mut p) else {
        return Err(p);
    };
    success_policy(&jobset, &policy, &rt, &mut p);
    failure_policy(&jobset, &rt, &mut keys, &mut out.warnings, &mut p);

    let members = members(&jobset, &policy, &trainer, &rt, &mut meta, &mut p);
    let mut edits = TemplateEdits::default();
    policy.keys(&members, &trainer, &rt, &mut keys, &mut edits, &mut p);
    let restart = restart_of(&members);
    if let Some(warning) = retries(&keys, restart) {
        out.warnings.push(warning);
    }
    gang(job, rspec, &rt, &mut keys, &mut p);
    let topology: Vec<String> = members
        .iter()
        .map(|m| format!("{}={}", m.role, m.count))
        .collect();
    keys.insert(c::REPLICAS, topology.join(","));
    if !p.is_empty() {
        return Err(p);
    }
    let job_meta = job_meta(job, meta);
    for m in &members {
        out.replicas
            .push(workload(name, &job_meta, m, restart, &keys, &edits));
    }
    Ok(out)
}

/// The runtime's name as messages give it (`ClusterTrainingRuntime torch`)
/// and its spec, whose fields dljob knows. None when it has no spec.
fn runtime_spec<'v>(
    runtime: &'v Value,
    p: &mut Vec<String>,
) -> Option<(String, &'v Map<String, Value>)> {
    let rt = format!(
        "{} {}",
        object::str_at(runtime, &["kind"]).unwrap_or(""),
        object::str_at(runtime, &["metadata", "name"]).unwrap_or("")
    );
    let Some(rspec) = mapping(runtime.get("spec"), &format!("{rt}: spec"), p) else {
        p.push(format!("{rt}: spec is missing"));
        return None;
    };
    for key in rspec.keys() {
        if !matches!(key.as_str(), "mlPolicy" | "podGroupPolicy" | "template") {
            p.push(format!(
                "{rt}: spec.{key} is not a field of a training runtime that dljob convert knows: remove it"
            ));
        }
    }
    Some((rt, rspec))
}

/// The job-wide keys every TrainJob has: the framework of its ML policy,
/// the node container, clean-pod policy `None` (a finished TrainJob's
/// JobSet and pods stay until the TrainJob is deleted), and its deadline.
fn job_keys(spec: &Map<String, Value>, policy: &MlPolicy, p: &mut Vec<String>) -> Keys {
    let mut keys = Keys::new();
    keys.insert(c::FRAMEWORK, policy.framework().to_owned());
    keys.insert(c::CONTAINER, NODE.to_owned());
    keys.insert(c::CLEAN_POD_POLICY, "None".into());
    if let Some(n) = whole(
        spec.get("activeDeadlineSeconds"),
        "spec.activeDeadlineSeconds",
        p,
    ) {
        keys.insert(c::ACTIVE_DEADLINE_SECONDS, n.to_string());
    }
    keys
}

/// The runtime's JobSet template with the TrainJob's patches laid over it,
/// as Trainer lays them: its spec (whose fields dljob knows) and the
/// labels and annotations of its metadata and of the TrainJob's
/// `spec.labels` and `spec.annotations` (Trainer 2.1). None without a
/// template.
fn jobset(
    spec: &Map<String, Value>,
    rspec: &Map<String, Value>,
    rt: &str,
    p: &mut Vec<String>,
) -> Option<(Map<String, Value>, Meta)> {
    let Some(template) = mapping(rspec.get("template"), &format!("{rt}: spec.template"), p) else {
        p.push(format!(
            "{rt}: spec.template is missing: a runtime's pods are its JobSet template"
        ));
        return None;
    };
    let mut template = Value::Object(template.clone());
    let mut meta = Meta::default();
    meta.add(
        template.get("metadata"),
        &format!("{rt}: spec.template.metadata"),
        p,
    );
    for which in ["labels", "annotations"] {
        if let Some(m) = string_map(spec.get(which), &format!("spec.{which}"), p) {
            meta.get(which).extend(m);
        }
    }
    let names: Vec<String> = template
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|rj| object::str_at(rj, &["name"]).map(str::to_owned))
        .collect();
    runtime_patches(spec, &names, &mut template, &mut meta, p);
    pod_template_overrides(spec, &names, &mut template, p);
    let jobset = template
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for key in jobset.keys() {
        if !matches!(
            key.as_str(),
            "replicatedJobs" | "network" | "successPolicy" | "failurePolicy"
        ) {
            p.push(format!(
                "{rt}: spec.template.spec.{key} is a JobSet field dljob convert does not carry over: remove it"
            ));
        }
    }
    Some((jobset, meta))
}

/// The workloads' metadata: the TrainJob's, over the JobSet's labels and
/// annotations (the job's own win).
fn job_meta(job: &Value, meta: Meta) -> Map<String, Value> {
    let mut job_meta = job
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (which, mut all) in [("labels", meta.labels), ("annotations", meta.annotations)] {
        all.extend(
            job_meta
                .get(which)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        );
        job_meta.insert(which.into(), Value::Object(all));
    }
    job_meta
}

/// One member's workload. A plain runtime's other Jobs are the user's own,
/// with their own containers: dljob picks theirs as for any member.
fn workload(
    name: &str,
    job_meta: &Map<String, Value>,
    m: &Member,
    restart: &str,
    keys: &Keys,
    edits: &TemplateEdits,
) -> Replica {
    let r = ReplicaSpec {
        type_name: m.job.clone(),
        role: m.role.clone(),
        count: m.count,
        restart,
        template: &m.pod,
    };
    let mut workload = kubeflow::workload(name, Some(job_meta), &r, keys, edits, Some(NODE));
    let has_node = object::containers(&m.pod["spec"])
        .iter()
        .any(|c| object::name_of(c) == NODE);
    if !has_node {
        if let Some(a) = workload["metadata"]["annotations"].as_object_mut() {
            a.remove(c::CONTAINER);
        }
    }
    Replica {
        role: m.role.clone(),
        workload,
        template_path: Vec::new(),
    }
}

/// A value as a message shows it.
fn shown(v: &Value) -> String {
    c::quoted(&v.to_string()).into_owned()
}

/// `v` as a mapping: `None` when absent or null, and a problem when it is
/// something else.
fn mapping<'v>(
    v: Option<&'v Value>,
    at: &str,
    p: &mut Vec<String>,
) -> Option<&'v Map<String, Value>> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(other) => {
            p.push(format!("{at} is {}, not a mapping", shown(other)));
            None
        }
    }
}

/// `v` as a list, as [`mapping`].
fn list<'v>(v: Option<&'v Value>, at: &str, p: &mut Vec<String>) -> Option<&'v [Value]> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(a),
        Some(other) => {
            p.push(format!("{at} is {}, not a list", shown(other)));
            None
        }
    }
}

/// `v` as a count of pods (1 to [`c::MAX_REPLICAS`]), as [`mapping`].
fn count(v: Option<&Value>, at: &str, p: &mut Vec<String>) -> Option<u32> {
    let v = v.filter(|v| !v.is_null())?;
    match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
        Some(n) if (1..=c::MAX_REPLICAS).contains(&n) => Some(n),
        _ => {
            p.push(format!(
                "{at} is {}, not a count from 1 to {}",
                shown(v),
                c::MAX_REPLICAS
            ));
            None
        }
    }
}

/// `v` as a whole number of at least 0, as [`mapping`].
fn whole(v: Option<&Value>, at: &str, p: &mut Vec<String>) -> Option<u64> {
    let v = v.filter(|v| !v.is_null())?;
    let n = v.as_u64();
    if n.is_none() {
        p.push(format!("{at} is {}, not a whole number", shown(v)));
    }
    n
}

/// `v` as a string, as [`mapping`].
fn text<'v>(v: Option<&'v Value>, at: &str, p: &mut Vec<String>) -> Option<&'v str> {
    let v = v.filter(|v| !v.is_null())?;
    let s = v.as_str();
    if s.is_none() {
        p.push(format!("{at} is {}, not a string", shown(v)));
    }
    s
}

/// `v` as a boolean, as [`mapping`].
fn flag(v: Option<&Value>, at: &str, p: &mut Vec<String>) -> Option<bool> {
    let v = v.filter(|v| !v.is_null())?;
    let b = v.as_bool();
    if b.is_none() {
        p.push(format!("{at} is {}, not true or false", shown(v)));
    }
    b
}

/// `v` as a mapping of strings (labels, annotations), as [`mapping`].
fn string_map(v: Option<&Value>, at: &str, p: &mut Vec<String>) -> Option<Map<String, Value>> {
    let m = mapping(v, at, p)?;
    if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
        p.push(format!("{at}.{k} is {}, not a string", shown(v)));
        return None;
    }
    Some(m.clone())
}

/// The labels and annotations the workloads get besides the job's own.
#[derive(Debug, Default)]
struct Meta {
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
}

impl Meta {
    fn get(&mut self, which: &str) -> &mut Map<String, Value> {
        if which == "labels" {
            &mut self.labels
        } else {
            &mut self.annotations
        }
    }

    /// A metadata's labels and annotations, Trainer's own labels left out.
    fn add(&mut self, metadata: Option<&Value>, at: &str, p: &mut Vec<String>) {
        let Some(metadata) = mapping(metadata, at, p) else {
            return;
        };
        for which in ["labels", "annotations"] {
            if let Some(m) = string_map(metadata.get(which), &format!("{at}.{which}"), p) {
                self.get(which)
                    .extend(m.into_iter().filter(|(k, _)| !k.starts_with(GROUP)));
            }
        }
    }
}

/// `spec.trainer`, read and checked.
#[derive(Debug, Default)]
struct Trainer {
    image: Option<Value>,
    command: Option<Value>,
    args: Option<Value>,
    env: Vec<Value>,
    num_nodes: Option<u32>,
    resources: Option<Map<String, Value>>,
    num_proc: Option<NumProc>,
}

/// Processes per node: a count, or torch's `auto`, `cpu` or `gpu`
/// (Trainer 2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
enum NumProc {
    Count(u32),
    Word(String),
}

impl NumProc {
    fn read(v: Option<&Value>, at: &str, words: bool, p: &mut Vec<String>) -> Option<Self> {
        let v = v.filter(|v| !v.is_null())?;
        if let Some(w) = v
            .as_str()
            .filter(|w| words && matches!(*w, "auto" | "cpu" | "gpu"))
        {
            return Some(Self::Word(w.to_owned()));
        }
        match v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
        {
            Some(n) => Some(Self::Count(n)),
            None => {
                p.push(format!(
                    "{at} is {}, not a count{}",
                    shown(v),
                    if words { ", auto, cpu or gpu" } else { "" }
                ));
                None
            }
        }
    }
}

impl Trainer {
    fn read(v: Option<&Value>, p: &mut Vec<String>) -> Self {
        let mut t = Self::default();
        let Some(m) = mapping(v, "spec.trainer", p) else {
            return t;
        };
        for key in m.keys() {
            if !TRAINER_FIELDS.contains(&key.as_str()) {
                p.push(format!(
                    "spec.trainer.{key} is not a field of TrainJob's trainer that dljob convert knows: remove it"
                ));
            }
        }
        t.image = text(m.get("image"), "spec.trainer.image", p).map(|s| json!(s));
        for (field, into) in [("command", &mut t.command), ("args", &mut t.args)] {
            let at = format!("spec.trainer.{field}");
            if let Some(words) = list(m.get(field), &at, p) {
                match words.iter().position(|w| !w.is_string()) {
                    Some(i) => p.push(format!("{at}[{i}] is {}, not a string", shown(&words[i]))),
                    None => *into = Some(Value::Array(words.to_vec())),
                }
            }
        }
        for (i, e) in list(m.get("env"), "spec.trainer.env", p)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if e.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            {
                t.env.push(e.clone());
            } else {
                p.push(format!(
                    "spec.trainer.env[{i}] is {}: an env var has a name",
                    shown(e)
                ));
            }
        }
        t.num_nodes = count(m.get("numNodes"), "spec.trainer.numNodes", p);
        if let Some(r) = mapping(
            m.get("resourcesPerNode"),
            "spec.trainer.resourcesPerNode",
            p,
        ) {
            for (k, v) in r {
                if !matches!(k.as_str(), "limits" | "requests" | "claims") {
                    p.push(format!("spec.trainer.resourcesPerNode.{k} is not a field of a container's resources"));
                }
                mapping(Some(v), &format!("spec.trainer.resourcesPerNode.{k}"), p);
            }
            t.resources = Some(r.clone());
        }
        t.num_proc = NumProc::read(
            m.get("numProcPerNode"),
            "spec.trainer.numProcPerNode",
            true,
            p,
        );
        t
    }

    /// The names of `spec.trainer.env` that Trainer refuses for `policy`.
    fn reserved(&self, names: &[&str]) -> Vec<String> {
        self.env
            .iter()
            .filter_map(|e| e.get("name").and_then(Value::as_str))
            .filter(|n| names.contains(n))
            .map(str::to_owned)
            .collect()
    }
}

/// `spec.initializer`, `suspend` and `managedBy`: what stops a conversion.
fn job_policies(job: &Value, spec: &Map<String, Value>, p: &mut Vec<String>) {
    if spec.get("initializer").is_some_and(|v| !v.is_null()) {
        p.push("spec.initializer: the dataset and model initializers are steps Trainer runs before the trainer; a dljob job has no steps: run them as a Job of their own first (or as init containers of the trainer's pods), and remove it".into());
    }
    // A job queued with Kueue is created suspended for Kueue to admit;
    // Kueue suspends and admits dljob's member Jobs itself.
    let queued =
        object::str_at(job, &["metadata", "labels", crate::gang::kueue::QUEUE_NAME]).is_some();
    if flag(spec.get("suspend"), "spec.suspend", p) == Some(true) && !queued {
        p.push("spec.suspend is true: a dljob job has no suspended state of its own; apply the converted workloads when the job should run (or queue them with Kueue), and remove suspend".into());
    }
    if let Some(m) = text(spec.get("managedBy"), "spec.managedBy", p) {
        if m != TRAINER_CONTROLLER {
            p.push(format!(
                "spec.managedBy is \"{}\": the job is another controller's (MultiKueue dispatches it); dljob convert does not take it over",
                c::quoted(m)
            ));
        }
    }
}

/// The runtime `spec.runtimeRef` names, among `runtimes`; else what to do.
fn find_runtime<'v>(
    spec: &Map<String, Value>,
    namespace: &str,
    runtimes: &[&'v Value],
) -> Result<&'v Value, String> {
    let mut p = Vec::new();
    let r = mapping(spec.get("runtimeRef"), "spec.runtimeRef", &mut p);
    let Some(r) = r else {
        return Err(p
            .pop()
            .unwrap_or_else(|| "spec.runtimeRef is missing: a TrainJob runs on a runtime".into()));
    };
    let name = text(r.get("name"), "spec.runtimeRef.name", &mut p).unwrap_or("");
    let kind = text(r.get("kind"), "spec.runtimeRef.kind", &mut p).unwrap_or(CLUSTER_RUNTIME);
    let group = text(r.get("apiGroup"), "spec.runtimeRef.apiGroup", &mut p).unwrap_or(GROUP);
    if let Some(e) = p.pop() {
        return Err(e);
    }
    if name.is_empty() {
        return Err("spec.runtimeRef.name is missing: it names the runtime".into());
    }
    if group != GROUP || !matches!(kind, CLUSTER_RUNTIME | RUNTIME) {
        return Err(format!(
            "spec.runtimeRef names a {} of {}: dljob convert reads Trainer's runtimes ({CLUSTER_RUNTIME}, {RUNTIME} of {GROUP})",
            c::quoted(kind),
            c::quoted(group)
        ));
    }
    let mut found: Vec<&&Value> = runtimes
        .iter()
        .filter(|v| {
            object::str_at(v, &["kind"]) == Some(kind)
                && object::str_at(v, &["metadata", "name"]) == Some(name)
                && (kind == CLUSTER_RUNTIME
                    || object::str_at(v, &["metadata", "namespace"]).unwrap_or(namespace)
                        == namespace)
        })
        .collect();
    // The same runtime given twice (in the input and with --runtime) is
    // one.
    found.dedup_by(|a, b| a == b);
    match found[..] {
        [one] => Ok(one),
        [] => {
            let get = if kind == CLUSTER_RUNTIME {
                format!("kubectl get clustertrainingruntime {name} -o yaml")
            } else {
                format!("kubectl get trainingruntime {name} -n {namespace} -o yaml")
            };
            Err(format!(
                "spec.runtimeRef names the {kind} {}, which is not in the input: the job's pods are its template. Fetch it and give it with --runtime: `{get} > runtime.yaml`, then `dljob convert -f FILE --runtime runtime.yaml`",
                c::quoted(name)
            ))
        }
        _ => Err(format!(
            "spec.runtimeRef names the {kind} {}, which the input gives {} times, not alike: give it once",
            c::quoted(name),
            found.len()
        )),
    }
}

/// The runtime's `mlPolicy`.
#[derive(Debug, Default)]
struct MlPolicy {
    /// Whether the runtime has an `mlPolicy` at all (Trainer then takes
    /// the trainer's node count from it, else from its Job).
    present: bool,
    num_nodes: Option<u32>,
    kind: Kind,
    num_proc: Option<NumProc>,
    mpi_implementation: Option<String>,
    ssh_path: Option<String>,
    launcher_as_node: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No framework policy: Trainer sets no env (plain ML).
    #[default]
    Plain,
    Torch,
    Mpi,
    Jax,
    XgBoost,
}

impl MlPolicy {
    fn read(v: Option<&Value>, rt: &str, p: &mut Vec<String>) -> Self {
        let mut out = Self::default();
        let Some(m) = mapping(v, &format!("{rt}: spec.mlPolicy"), p) else {
            return out;
        };
        out.present = true;
        let mut kinds = Vec::new();
        for (key, body) in m {
            let at = format!("{rt}: spec.mlPolicy.{key}");
            if key == "numNodes" {
                out.num_nodes = count(Some(body), &at, p);
                continue;
            }
            let body = mapping(Some(body), &at, p).cloned().unwrap_or_default();
            let known: &[&str] = match key.as_str() {
                "torch" => {
                    out.kind = Kind::Torch;
                    out.num_proc = NumProc::read(
                        body.get("numProcPerNode"),
                        &format!("{at}.numProcPerNode"),
                        true,
                        p,
                    );
                    for field in ["elasticPolicy", "envInjection"] {
                        if body.get(field).is_some_and(|v| !v.is_null()) {
                            p.push(format!(
                                "{at}.{field} is not carried over yet: convert with a runtime without it"
                            ));
                        }
                    }
                    &["numProcPerNode", "elasticPolicy", "envInjection"]
                }
                "mpi" => {
                    out.kind = Kind::Mpi;
                    out.num_proc = NumProc::read(
                        body.get("numProcPerNode"),
                        &format!("{at}.numProcPerNode"),
                        false,
                        p,
                    );
                    out.mpi_implementation = text(
                        body.get("mpiImplementation"),
                        &format!("{at}.mpiImplementation"),
                        p,
                    )
                    .map(str::to_owned);
                    out.ssh_path = text(
                        body.get("sshAuthMountPath"),
                        &format!("{at}.sshAuthMountPath"),
                        p,
                    )
                    .map(str::to_owned);
                    out.launcher_as_node = flag(
                        body.get("runLauncherAsNode"),
                        &format!("{at}.runLauncherAsNode"),
                        p,
                    ) == Some(true);
                    &[
                        "numProcPerNode",
                        "mpiImplementation",
                        "sshAuthMountPath",
                        "runLauncherAsNode",
                    ]
                }
                "jax" => {
                    out.kind = Kind::Jax;
                    &[]
                }
                "xgboost" => {
                    out.kind = Kind::XgBoost;
                    &[]
                }
                "flux" => {
                    p.push(format!(
                        "{at}: the job runs under the Flux framework, which Trainer starts in the pods itself; dljob does not run Flux"
                    ));
                    continue;
                }
                other => {
                    p.push(format!(
                        "{rt}: spec.mlPolicy.{other} is no ML policy dljob convert knows (torch, mpi, jax, xgboost)"
                    ));
                    continue;
                }
            };
            kinds.push(key.clone());
            for field in body.keys() {
                if !known.contains(&field.as_str()) {
                    p.push(format!(
                        "{at}.{field} is not a field dljob convert knows: remove it"
                    ));
                }
            }
        }
        if kinds.len() > 1 {
            p.push(format!(
                "{rt}: spec.mlPolicy has {}: a runtime has one policy",
                kinds.join(" and ")
            ));
        }
        out
    }

    fn framework(&self) -> &'static str {
        match self.kind {
            Kind::Plain => "generic",
            Kind::Torch => "pytorch",
            Kind::Mpi => "mpi",
            Kind::Jax => "jax",
            Kind::XgBoost => "xgboost",
        }
    }

    /// The policy as the runtime names it.
    fn named(&self) -> &'static str {
        match self.kind {
            Kind::Plain => "plain (no framework policy)",
            Kind::Torch => "torch",
            Kind::Mpi => "mpi",
            Kind::Jax => "jax",
            Kind::XgBoost => "xgboost",
        }
    }

    /// The policy's dljob keys and template edits.
    fn keys(
        &self,
        members: &[Member],
        trainer: &Trainer,
        rt: &str,
        keys: &mut Keys,
        edits: &mut TemplateEdits,
        p: &mut Vec<String>,
    ) {
        let reserved = match self.kind {
            Kind::Torch => TORCH_ENV,
            Kind::XgBoost => XGBOOST_ENV,
            Kind::Mpi => MPI_ENV,
            Kind::Plain | Kind::Jax => &[],
        };
        let set = trainer.reserved(reserved);
        if !set.is_empty() {
            p.push(format!(
                "spec.trainer.env sets {}, which Trainer's {} plugin sets itself (and refuses there): remove {}",
                set.join(", "),
                self.named(),
                if set.len() == 1 { "it" } else { "them" }
            ));
        }
        // What Trainer counts a node's processes from: the TrainJob's
        // resources where it gives them, else the runtime's.
        let node_resources = trainer.resources.clone().map(Value::Object).or_else(|| {
            members
                .iter()
                .find(|m| m.trainer_resources)
                .and_then(|m| m.runtime_resources.clone())
        });
        let gpus = node_resources.as_ref().map_or(0, trainer_gpus);
        match self.kind {
            Kind::Torch => {
                keys.insert(c::PORT, TRAINER_PORT.to_string());
                let nproc = trainer
                    .num_proc
                    .clone()
                    .or_else(|| self.num_proc.clone())
                    .unwrap_or_else(|| NumProc::Word("auto".into()));
                let text = match nproc {
                    NumProc::Count(n) => n.to_string(),
                    NumProc::Word(w) if w == "cpu" || (w == "auto" && gpus == 0) => {
                        cpus_of(node_resources.as_ref()).to_string()
                    }
                    NumProc::Word(w) => w,
                };
                // Written as Trainer computes it (torchrun reads it as is).
                edits.env.push(("PET_NPROC_PER_NODE", text));
                if let Some(Value::Array(cmd)) = &trainer.command {
                    if cmd.first().and_then(Value::as_str) == Some("tune") {
                        p.push("spec.trainer.command is torchtune's `tune run`, whose recipe and config Trainer chooses from the model and the node count: write the `tune run` command in full (with --rdzv-endpoint from PET_MASTER_ADDR) and convert again".into());
                    }
                }
            }
            Kind::Jax => {
                keys.insert(c::PORT, TRAINER_PORT.to_string());
            }
            Kind::XgBoost => {
                keys.insert(c::PORT, TRAINER_PORT.to_string());
                if gpus > 1 {
                    p.push(format!(
                        "Trainer's xgboost plugin counts one worker per GPU, {gpus} a node (DMLC_NUM_WORKER is nodes × GPUs), where dljob's counts one per pod: run one pod per GPU (numNodes × {gpus}, a GPU each) and convert again"
                    ));
                }
            }
            Kind::Mpi => self.mpi_keys(trainer, members, gpus, rt, keys, p),
            Kind::Plain => {}
        }
    }

    fn mpi_keys(
        &self,
        trainer: &Trainer,
        members: &[Member],
        gpus: u64,
        rt: &str,
        keys: &mut Keys,
        p: &mut Vec<String>,
    ) {
        let at = format!("{rt}: spec.mlPolicy.mpi");
        keys.insert(c::COMPAT, c::COMPAT_MPI_OPERATOR.into());
        if let Some(i) = self.mpi_implementation.as_deref() {
            kubeflow::mpi_implementation(i, &format!("{at}.mpiImplementation"), keys, p);
        }
        if let Some(path) = &self.ssh_path {
            keys.insert(c::SSH_PATH, path.clone());
        }
        // dljob lists the launcher in its hostfile (by its own host name:
        // mpirun runs its ranks there itself, no sshd) when it asks for
        // GPUs, as dljob counts them.
        let launcher_gpus = members
            .iter()
            .find(|m| m.role == LAUNCHER)
            .and_then(|m| {
                object::containers(&m.pod["spec"])
                    .iter()
                    .find(|c| object::name_of(c) == NODE)
                    .and_then(object::gpu_count)
            })
            .unwrap_or(0);
        match (self.launcher_as_node, launcher_gpus > 0) {
            (true, false) => p.push(format!(
                "{at}.runLauncherAsNode: the launcher runs ranks, and dljob's hostfile lists a launcher only when it asks for GPUs (this one asks for none): give spec.trainer.resourcesPerNode a node's GPUs (Trainer gives them to the launcher and the nodes alike), or set runLauncherAsNode false in a runtime of your own (numNodes then counts the nodes besides the launcher)"
            )),
            (false, true) => p.push("the launcher asks for GPUs (spec.trainer.resourcesPerNode, which Trainer gives the launcher, the trainer step, and not the nodes; or the runtime's launcher template), so dljob's hostfile would list it as a host, where Trainer's does not: set the GPUs in the runtime's node template instead".into()),
            _ => {}
        }
        // The TrainJob's count, else the runtime's; Trainer gives a node of
        // several GPUs one process per GPU when the runtime says 1.
        let slots = match (&trainer.num_proc, &self.num_proc) {
            (Some(NumProc::Count(n)), _) => u64::from(*n),
            (_, Some(NumProc::Count(1)) | None) if gpus > 1 => gpus,
            (_, Some(NumProc::Count(n))) => u64::from(*n),
            _ => 1,
        };
        if let Some(NumProc::Word(w)) = &trainer.num_proc {
            p.push(format!(
                "spec.trainer.numProcPerNode is {w}: an MPI job's is a count"
            ));
        }
        keys.insert(c::SLOTS, slots.to_string());
    }
}

/// GPUs per node as Trainer counts them (`GetNumGPUPerNode`): the first
/// resource whose name holds "gpu", requested, else limited; rounded up.
fn trainer_gpus(resources: &Value) -> u64 {
    let of = |which: &str| {
        resources
            .get(which)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .find(|(name, _)| name.to_lowercase().contains("gpu"))
            .and_then(|(_, q)| object::quantity_value(q))
            .map_or(0, rounded_up)
    };
    match of("requests") {
        0 => of("limits"),
        n => n,
    }
}

/// A quantity as Kubernetes' `Quantity.Value()`: rounded up, at least 0.
fn rounded_up(q: f64) -> u64 {
    // A count of CPUs or GPUs fits in u64 and is not negative.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = q.ceil().max(0.0) as u64;
    n
}

/// CPUs per node as Trainer counts them: the request (else the limit),
/// rounded up, at least 1.
fn cpus_of(resources: Option<&Value>) -> u64 {
    let Some(resources) = resources else {
        return 1;
    };
    let cpu = resources
        .pointer("/requests/cpu")
        .filter(|q| object::quantity_value(q).is_some_and(|v| v > 0.0))
        .or_else(|| resources.pointer("/limits/cpu"));
    cpu.and_then(object::quantity_value)
        .map_or(0, rounded_up)
        .max(1)
}

/// One replicated Job, as the workload it becomes.
#[derive(Debug)]
struct Member {
    /// The replicated Job's name.
    job: String,
    role: String,
    count: u32,
    pod: Value,
    /// Whether Trainer counts its node container's resources (the trainer
    /// step; an MPI runtime's `node` Job), and those resources as the
    /// runtime wrote them.
    trainer_resources: bool,
    runtime_resources: Option<Value>,
}

/// The replicated Jobs as workloads: each one's role and pod count by the
/// policy, its pod template with the trainer's overlay.
fn members(
    jobset: &Map<String, Value>,
    policy: &MlPolicy,
    trainer: &Trainer,
    rt: &str,
    meta: &mut Meta,
    p: &mut Vec<String>,
) -> Vec<Member> {
    let at_jobs = format!("{rt}: spec.template.spec.replicatedJobs");
    let Some(jobs) = list(jobset.get("replicatedJobs"), &at_jobs, p) else {
        if !jobset.contains_key("replicatedJobs") {
            p.push(format!(
                "{at_jobs} is missing: a runtime's pods are its replicated Jobs"
            ));
        }
        return Vec::new();
    };
    let trainers = jobs
        .iter()
        .filter(|rj| {
            object::str_at(rj, &["template", "metadata", "labels", ANCESTOR]) == Some("trainer")
        })
        .count();
    if trainers > 1 {
        p.push(format!("{at_jobs}: {trainers} replicated Jobs are labelled {ANCESTOR}: trainer; a runtime has one trainer"));
        return Vec::new();
    }
    let mut out: Vec<Member> = Vec::new();
    for (i, rj) in jobs.iter().enumerate() {
        let at = format!("{at_jobs}[{i}]");
        if let Some(m) = member(rj, &at, (policy, trainer), meta, &out, p) {
            out.push(m);
        }
    }
    if out.is_empty() && p.is_empty() {
        p.push(format!(
            "{at_jobs} has no trainer: a replicated Job labelled {ANCESTOR}: trainer"
        ));
    }
    out
}

/// The replicated Job `rj` (at `at`) as a member: a trainer step or a plain
/// Job (an initializer step is refused), its known fields, its pod template
/// (the trainer's laid over the node's), its role and count, none of
/// `taken`'s roles. None when it cannot be one (said).
fn member(
    rj: &Value,
    at: &str,
    (policy, trainer): (&MlPolicy, &Trainer),
    meta: &mut Meta,
    taken: &[Member],
    p: &mut Vec<String>,
) -> Option<Member> {
    let rjm = mapping(Some(rj), at, p)?;
    let Some(name) = text(rjm.get("name"), &format!("{at}.name"), p).map(str::to_owned) else {
        p.push(format!("{at} has no name"));
        return None;
    };
    let at = format!("{at} ({name})");
    let ancestor = object::str_at(rj, &["template", "metadata", "labels", ANCESTOR]);
    match ancestor {
        Some(step @ ("dataset-initializer" | "model-initializer")) => {
            p.push(format!(
                "{at} is the {step}, a step Trainer runs before the trainer (JobSet dependsOn); a dljob job has no steps: run the initializer as a Job of its own first (or as an init container of the trainer's pods), and convert with a runtime without it"
            ));
            return None;
        }
        Some("trainer") | None => {}
        Some(other) => {
            p.push(format!(
                "{at}: {ANCESTOR} {} is no step dljob convert knows",
                c::quoted(other)
            ));
            return None;
        }
    }
    let trainer_step = ancestor == Some("trainer");
    for key in rjm.keys() {
        match key.as_str() {
            "name" | "template" | "dependsOn" => {}
            "replicas" if rj["replicas"].as_u64() == Some(1) => {}
            _ => p.push(format!(
                "{at}.{key} is not carried over (dljob makes one Job of each replicated Job): remove it"
            )),
        }
    }
    let Some(job) = mapping(rjm.get("template"), &format!("{at}.template"), p) else {
        p.push(format!(
            "{at}.template is missing: a replicated Job is a Job template"
        ));
        return None;
    };
    meta.add(job.get("metadata"), &format!("{at}.template.metadata"), p);
    let job_spec = mapping(job.get("spec"), &format!("{at}.template.spec"), p)
        .cloned()
        .unwrap_or_default();
    for key in job_spec.keys() {
        if !matches!(key.as_str(), "template" | "parallelism" | "completions") {
            p.push(format!(
                "{at}.template.spec.{key} is a Job field dljob convert does not carry over (dljob sets its member Jobs' policies): remove it"
            ));
        }
    }
    let parallelism = count(
        job_spec.get("parallelism"),
        &format!("{at}.template.spec.parallelism"),
        p,
    );
    let Some(pod) = mapping(
        job_spec.get("template"),
        &format!("{at}.template.spec.template"),
        p,
    ) else {
        p.push(format!(
            "{at}.template.spec.template is missing: a Job has a pod template"
        ));
        return None;
    };
    let mut pod = Value::Object(pod.clone());
    if object::containers(&pod["spec"]).is_empty() {
        p.push(format!(
            "{at}.template.spec.template.spec.containers is empty"
        ));
        return None;
    }
    let Some((role, count)) = role_of(policy, trainer, &name, trainer_step, parallelism) else {
        p.push(format!(
            "{at}: a replicated Job besides the trainer's; the {} policy's job is {} only: run it as a Job of its own",
            policy.named(),
            if policy.kind == Kind::Mpi { "a launcher and its nodes" } else { "the trainer's nodes" }
        ));
        return None;
    };
    if taken.iter().any(|m| m.role == role) {
        p.push(format!(
            "{at}: its role {role} is another replicated Job's; rename one"
        ));
        return None;
    }
    let node_pod = trainer_step || (policy.launcher_as_node && name == NODE);
    let counted = trainer_step || (policy.kind == Kind::Mpi && name == NODE);
    let runtime_resources = object::containers(&pod["spec"])
        .iter()
        .find(|c| object::name_of(c) == NODE)
        .and_then(|c| c.get("resources"))
        .cloned();
    if node_pod {
        if let Err(e) = overlay(&mut pod, trainer, trainer_step) {
            p.push(format!("{at}: {e}"));
            return None;
        }
    }
    Some(Member {
        job: name,
        role,
        count,
        pod,
        trainer_resources: counted,
        runtime_resources,
    })
}

/// The dljob role and pod count of the replicated Job `name` (None: it
/// has no place in the policy's job), as Trainer counts its pods: the
/// trainer's from the TrainJob's numNodes, else the policy's, else (no
/// mlPolicy) its Job's parallelism; an MPI runtime's nodes from numNodes
/// (less the launcher when it is one of them), else their Job's.
fn role_of(
    policy: &MlPolicy,
    trainer: &Trainer,
    name: &str,
    trainer_step: bool,
    parallelism: Option<u32>,
) -> Option<(String, u32)> {
    let nodes = || {
        trainer.num_nodes.unwrap_or(if policy.present {
            policy.num_nodes.unwrap_or(1)
        } else {
            parallelism.unwrap_or(1)
        })
    };
    match policy.kind {
        Kind::Mpi => match name {
            LAUNCHER => Some((LAUNCHER.to_owned(), 1)),
            NODE => {
                let n = match trainer.num_nodes {
                    Some(n) if policy.launcher_as_node => n.saturating_sub(1).max(1),
                    Some(n) => n,
                    None => parallelism.unwrap_or(1),
                };
                Some(("worker".to_owned(), n))
            }
            _ => None,
        },
        Kind::Plain if trainer_step => Some((NODE.to_owned(), nodes())),
        // Plain ML: another replicated Job is another role, as Trainer
        // runs it (no env of Trainer's either way).
        Kind::Plain if c::is_dns_label(name) => Some((name.to_owned(), parallelism.unwrap_or(1))),
        _ if trainer_step => Some(("worker".to_owned(), nodes())),
        _ => None,
    }
}

/// Trainer's `spec.trainer` on a training node's pod template: image,
/// command and args on the trainer step's `node` container; env (each
/// entry replacing the one of its name) and resources (key by key, as
/// Trainer 2.3 merges them) on every training node's.
fn overlay(pod: &mut Value, trainer: &Trainer, trainer_step: bool) -> Result<(), String> {
    let node = pod
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .and_then(|cs| cs.iter_mut().find(|c| object::name_of(c) == NODE))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            format!("no container is named {NODE}, the container Trainer gives the trainer's image, command and env")
        })?;
    if trainer_step {
        for (field, v) in [
            ("image", &trainer.image),
            ("command", &trainer.command),
            ("args", &trainer.args),
        ] {
            if let Some(v) = v {
                node.insert(field.into(), v.clone());
            }
        }
    }
    if !trainer.env.is_empty() {
        let env = node.entry("env").or_insert_with(|| json!([]));
        if !env.is_array() {
            return Err("the node container's env is not a list".into());
        }
        if let Some(env) = env.as_array_mut() {
            for e in &trainer.env {
                let name = e.get("name");
                match env.iter_mut().find(|x| x.get("name") == name) {
                    Some(existing) => *existing = e.clone(),
                    None => env.push(e.clone()),
                }
            }
        }
    }
    if let Some(r) = &trainer.resources {
        let resources = node.entry("resources").or_insert_with(|| json!({}));
        let Some(resources) = resources.as_object_mut() else {
            return Err("the node container's resources are not a mapping".into());
        };
        for (kind, given) in r {
            match (resources.get_mut(kind), given) {
                (Some(Value::Object(into)), Value::Object(given)) => into.extend(given.clone()),
                _ => {
                    resources.insert(kind.clone(), given.clone());
                }
            }
        }
    }
    Ok(())
}

/// Lists a strategic merge patch of these types merges by a key field, and
/// that key.
const MERGE_KEYS: &[(&str, &str)] = &[
    ("replicatedJobs", "name"),
    ("containers", "name"),
    ("initContainers", "name"),
    ("env", "name"),
    ("volumes", "name"),
    ("imagePullSecrets", "name"),
    ("schedulingGates", "name"),
    ("resourceClaims", "name"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("ports", "containerPort"),
    ("hostAliases", "ip"),
    ("topologySpreadConstraints", "topologyKey"),
];

/// `patch` merged into `target` as a strategic merge patch of these types
/// does: mappings key by key (null removes), the lists of [`MERGE_KEYS`]
/// entry by entry, every other list replaced. A patch directive (`$patch`,
/// `$retainKeys`, …) is refused: the error says where.
fn strategic_merge(target: &mut Value, patch: &Value, at: &str) -> Result<(), String> {
    if let Some(at) = directive(patch, at) {
        return Err(format!(
            "{at}: a strategic merge patch directive, which dljob convert does not apply: write the result instead"
        ));
    }
    merge(target, patch, at)
}

/// Where in `v` a patch directive (a key starting with `$`) is, if any.
fn directive(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let at = format!("{at}.{k}");
            if k.starts_with('$') {
                Some(at)
            } else {
                directive(v, &at)
            }
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| directive(v, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// [`strategic_merge`] of a patch without directives.
fn merge(target: &mut Value, patch: &Value, at: &str) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else {
        return Ok(());
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let key = MERGE_KEYS.iter().find(|(f, _)| f == k).map(|(_, key)| *key);
        match key {
            Some(key) => {
                let Some(items) = v.as_array() else {
                    return Err(format!("{at}.{k} is {}, not a list", shown(v)));
                };
                merge_by(t, k, items, key, &format!("{at}.{k}"))?;
            }
            None => strategic_merge(
                t.entry(k.clone()).or_insert(Value::Null),
                v,
                &format!("{at}.{k}"),
            )?,
        }
    }
    Ok(())
}

/// `items` merged into the list `field` of `map` by their `key`.
fn merge_by(
    map: &mut Map<String, Value>,
    field: &str,
    items: &[Value],
    key: &str,
    at: &str,
) -> Result<(), String> {
    let list = map.entry(field).or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return Ok(());
    };
    for (i, item) in items.iter().enumerate() {
        let Some(id) = item
            .as_object()
            .and_then(|o| o.get(key))
            .filter(|v| !v.is_null())
        else {
            return Err(format!(
                "{at}[{i}] is {}: each entry is a mapping with its {key}",
                shown(item)
            ));
        };
        match list.iter_mut().find(|e| e.get(key) == Some(id)) {
            Some(existing) => merge(existing, item, &format!("{at}[{i}]"))?,
            None => list.push(item.clone()),
        }
    }
    Ok(())
}

/// Trainer 2.2's `spec.runtimePatches`, in order: the JobSet template's
/// metadata onto the workloads, its spec merged into the template.
fn runtime_patches(
    spec: &Map<String, Value>,
    names: &[String],
    template: &mut Value,
    meta: &mut Meta,
    p: &mut Vec<String>,
) {
    let Some(patches) = list(spec.get("runtimePatches"), "spec.runtimePatches", p) else {
        return;
    };
    for (i, patch) in patches.iter().enumerate() {
        let at = format!("spec.runtimePatches[{i}]");
        let Some(patch) = mapping(Some(patch), &at, p) else {
            continue;
        };
        for key in patch.keys() {
            if !matches!(key.as_str(), "manager" | "time" | "trainingRuntimeSpec") {
                p.push(format!("{at}.{key} is not a field dljob convert knows"));
            }
        }
        let at = format!("{at}.trainingRuntimeSpec");
        let Some(trs) = mapping(patch.get("trainingRuntimeSpec"), &at, p) else {
            continue;
        };
        for key in trs.keys().filter(|k| *k != "template") {
            p.push(format!("{at}.{key} is not a field dljob convert knows"));
        }
        let at = format!("{at}.template");
        let Some(t) = mapping(trs.get("template"), &at, p) else {
            continue;
        };
        meta.add(t.get("metadata"), &format!("{at}.metadata"), p);
        let at = format!("{at}.spec");
        let Some(s) = mapping(t.get("spec"), &at, p) else {
            continue;
        };
        let mut unknown = false;
        for (j, rj) in list(s.get("replicatedJobs"), &format!("{at}.replicatedJobs"), p)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            // One without a name is said by the merge.
            let Some(name) = object::str_at(rj, &["name"]) else {
                continue;
            };
            if !names.iter().any(|n| n == name) {
                unknown = true;
                p.push(format!(
                    "{at}.replicatedJobs[{j}]: the runtime has no replicated Job {}; it has {}",
                    c::quoted(name),
                    names.join(", ")
                ));
            }
        }
        if unknown {
            continue;
        }
        let target = template
            .as_object_mut()
            .map(|m| m.entry("spec").or_insert_with(|| json!({})));
        if let Some(target) = target {
            if let Err(e) = strategic_merge(target, &Value::Object(s.clone()), &at) {
                p.push(e);
            }
        }
    }
}

/// Trainer 2.1's `spec.podTemplateOverrides`: each onto the pod template
/// of the replicated Jobs it targets.
fn pod_template_overrides(
    spec: &Map<String, Value>,
    names: &[String],
    template: &mut Value,
    p: &mut Vec<String>,
) {
    let Some(overrides) = list(
        spec.get("podTemplateOverrides"),
        "spec.podTemplateOverrides",
        p,
    ) else {
        return;
    };
    for (i, o) in overrides.iter().enumerate() {
        let at = format!("spec.podTemplateOverrides[{i}]");
        let Some(o) = mapping(Some(o), &at, p) else {
            continue;
        };
        let mut targets = Vec::new();
        let before = p.len();
        let given = list(o.get("targetJobs"), &format!("{at}.targetJobs"), p).unwrap_or_default();
        if given.is_empty() && p.len() == before {
            p.push(format!("{at}.targetJobs names no replicated Job"));
        }
        for (j, t) in given.iter().enumerate() {
            match object::str_at(t, &["name"]) {
                Some(n) if names.iter().any(|x| x == n) => targets.push(n.to_owned()),
                other => p.push(format!(
                    "{at}.targetJobs[{j}]: the runtime has no replicated Job {}; it has {}",
                    c::quoted(other.unwrap_or("")),
                    names.join(", ")
                )),
            }
        }
        let mut pod = Map::new();
        for (key, v) in o {
            match key.as_str() {
                "metadata" | "spec" => {
                    pod.insert(key.clone(), v.clone());
                }
                "targetJobs" => {}
                _ => p.push(format!("{at}.{key} is not a field dljob convert knows")),
            }
        }
        let pod = Value::Object(pod);
        let jobs = template
            .pointer_mut("/spec/replicatedJobs")
            .and_then(Value::as_array_mut);
        for rj in jobs.into_iter().flatten() {
            if !targets
                .iter()
                .any(|t| Some(t.as_str()) == object::str_at(rj, &["name"]))
            {
                continue;
            }
            if let Some(t) = rj.pointer_mut("/template/spec/template") {
                if let Err(e) = strategic_merge(t, &pod, &at) {
                    p.push(e);
                }
            }
        }
    }
}

/// The JobSet's `successPolicy`: none (every Job completes), or an MPI
/// runtime's "the launcher completes", which is dljob's (the job follows
/// its coordinator).
fn success_policy(jobset: &Map<String, Value>, policy: &MlPolicy, rt: &str, p: &mut Vec<String>) {
    let Some(sp) = jobset.get("successPolicy").filter(|v| !v.is_null()) else {
        return;
    };
    let launcher = json!({"operator": "All", "targetReplicatedJobs": [LAUNCHER]});
    if policy.kind == Kind::Mpi && *sp == launcher {
        return;
    }
    p.push(format!(
        "{rt}: spec.template.spec.successPolicy {} is not carried over: a dljob job succeeds when its coordinator exits 0 (an MPI job's launcher, else the first node); remove it",
        shown(sp)
    ));
}

/// The JobSet's `failurePolicy`: `maxRestarts` is how often the whole
/// job is started again, dljob's backoff limit.
fn failure_policy(
    jobset: &Map<String, Value>,
    rt: &str,
    keys: &mut Keys,
    warnings: &mut Vec<String>,
    p: &mut Vec<String>,
) {
    let at = format!("{rt}: spec.template.spec.failurePolicy");
    let Some(fp) = mapping(jobset.get("failurePolicy"), &at, p) else {
        return;
    };
    for (k, v) in fp {
        match k.as_str() {
            "maxRestarts" => {
                if let Some(n) = whole(Some(v), &format!("{at}.maxRestarts"), p) {
                    keys.insert(c::BACKOFF_LIMIT, n.to_string());
                }
            }
            "rules" | "restartStrategy" => warnings.push(format!(
                "{at}.{k} is not carried over: dljob restarts the whole job after a retryable exit (dljob.dev/restart-policy)"
            )),
            _ => p.push(format!("{at}.{k} is not a field dljob convert knows")),
        }
    }
}

/// The pods' restart policy: the templates', where they name one, else
/// JobSet's default (OnFailure).
fn restart_of(members: &[Member]) -> &'static str {
    let named: Vec<&str> = members
        .iter()
        .filter_map(|m| object::str_at(&m.pod, &["spec", "restartPolicy"]))
        .collect();
    if !named.is_empty() && named.iter().all(|p| *p == "Never") {
        "Never"
    } else {
        "OnFailure"
    }
}

/// What retries become: Trainer restarts a failed container in place up to
/// its Job's backoffLimit (Kubernetes' default, 6) and starts the whole job
/// again only `failurePolicy.maxRestarts` times (none by default).
fn retries(keys: &Keys, restart: &str) -> Option<String> {
    if restart != "OnFailure" {
        return None;
    }
    Some(match keys.get(c::BACKOFF_LIMIT) {
        Some(n) => format!(
            "a failed container restarts in place (restartPolicy OnFailure, JobSet's default) up to {n} times, the member Job's backoffLimit, where Trainer's Jobs allowed Kubernetes' default of 6; the whole job is started again up to {n} times (the runtime's failurePolicy.maxRestarts, dljob.dev/backoff-limit)"
        ),
        None => "a failed container restarts in place (restartPolicy OnFailure, JobSet's default) up to 3 times, dljob's default backoff limit, where Trainer's Jobs allowed Kubernetes' default of 6; and the whole job is started again up to 3 times, where Trainer's JobSet never was (no failurePolicy.maxRestarts). Set dljob.dev/backoff-limit to choose".to_owned(),
    })
}

/// The gang: Trainer's podGroupPolicy, or a Kueue queue label on the job.
fn gang(job: &Value, rspec: &Map<String, Value>, rt: &str, keys: &mut Keys, p: &mut Vec<String>) {
    if let Some(q) = object::str_at(job, &["metadata", "labels", crate::gang::kueue::QUEUE_NAME]) {
        keys.insert(c::QUEUE, q.to_owned());
        keys.insert(c::GANG, "kueue".into());
        return;
    }
    let at = format!("{rt}: spec.podGroupPolicy");
    let Some(pg) = mapping(rspec.get("podGroupPolicy"), &at, p) else {
        return;
    };
    for (k, v) in pg {
        let body = mapping(Some(v), &format!("{at}.{k}"), p)
            .cloned()
            .unwrap_or_default();
        let (gang, known): (&str, &[&str]) = match k.as_str() {
            "coscheduling" => ("coscheduling", &[]),
            "volcano" => ("volcano", &[]),
            other => {
                p.push(format!(
                    "{at}.{other} is no gang scheduler dljob knows (coscheduling, volcano)"
                ));
                continue;
            }
        };
        keys.insert(c::GANG, gang.into());
        for field in body.keys().filter(|f| !known.contains(&f.as_str())) {
            p.push(format!(
                "{at}.{k}.{field} is not carried over: dljob's PodGroup has none (a dljob gang waits as long as its scheduler does); remove it"
            ));
        }
    }
}
