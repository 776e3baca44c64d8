//! Kubeflow Trainer v2: a `TrainJob` (`trainer.kubeflow.org/v1alpha1`)
//! on the `ClusterTrainingRuntime` or `TrainingRuntime` it names. The
//! runtime is a JobSet template and an ML policy; Trainer's controller
//! makes one JobSet of the two, the TrainJob's `trainer` (image, command,
//! args, env, node count, resources) and its `runtimePatches` (2.2 and
//! later) or `podTemplateOverrides` (2.1) laid over the runtime's
//! template. The conversion does the same overlay, and each replicated Job
//! becomes one dljob workload: the trainer nodes one role, an MPI
//! launcher another. What Trainer's plugins give the containers (torch's
//! `PET_*`, JAX's `JAX_*`, XGBoost's `DMLC_*`, the MPI hostfile and SSH
//! keys) is what dljob's frameworks give them; where Trainer computes a
//! value dljob would compute otherwise (torchrun's processes per node on
//! a node without GPUs), the value is written into the template.

use serde_json::{json, Map, Value};

use super::kubeflow::{self, Converted, Keys, Replica, ReplicaSpec, TemplateEdits};
use crate::contract as c;
use crate::object;

const GROUP: &str = "trainer.kubeflow.org";
const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
pub(crate) const CLUSTER_RUNTIME: &str = "ClusterTrainingRuntime";
pub(crate) const RUNTIME: &str = "TrainingRuntime";

/// The label of a replicated Job that says which step of a TrainJob it
/// runs (`trainer`, `dataset-initializer`, `model-initializer`).
const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The container Trainer's plugins wire, in every runtime.
const NODE: &str = "node";
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

/// Whether `value` is a Trainer runtime, which a TrainJob in the same
/// input may name.
pub(crate) fn is_runtime(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some(API_VERSION)
        && matches!(
            value.get("kind").and_then(Value::as_str),
            Some(CLUSTER_RUNTIME | RUNTIME)
        )
}

/// The runtimes among `docs` (in `kind: List`s too).
pub(crate) fn runtimes_in<'v>(docs: impl IntoIterator<Item = &'v Value>) -> Vec<&'v Value> {
    let mut out = Vec::new();
    for v in docs {
        if crate::manifest::is_list(v) {
            out.extend(
                v["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|i| is_runtime(i)),
            );
        } else if is_runtime(v) {
            out.push(v);
        }
    }
    out
}

/// Converts one TrainJob on its runtime, found among `runtimes`; every
/// problem found, not the first. `namespace`: the job's when it names
/// none (a TrainingRuntime is the job's namespace's).
pub(crate) fn convert(
    job: &Value,
    namespace: &str,
    runtimes: &[&Value],
) -> Result<Converted, Vec<String>> {
    let mut problems = Vec::new();
    let mut out = Converted::default();
    let name = kubeflow::job_name(job, &mut problems)?;
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    for key in spec.keys() {
        if !FIELDS.contains(&key.as_str()) {
            problems.push(format!(
                "spec.{key} is not a field of TrainJob that dljob convert knows, so it cannot carry it over: remove it (or file an issue if it should map)"
            ));
        }
    }
    job_policies(job, spec, &mut problems);
    let ns = object::str_at(job, &["metadata", "namespace"]).unwrap_or(namespace);
    let runtime = match find_runtime(spec, ns, runtimes) {
        Ok(r) => r,
        Err(p) => {
            problems.push(p);
            return Err(problems);
        }
    };
    let runtime_name = format!(
        "{} {}",
        object::str_at(runtime, &["kind"]).unwrap_or(""),
        object::str_at(runtime, &["metadata", "name"]).unwrap_or("")
    );
    let mut at_runtime = |p: String| problems.push(format!("{runtime_name}: {p}"));
    let Some(rspec) = runtime.get("spec").and_then(Value::as_object) else {
        return Err(vec![format!("{runtime_name}: spec is missing")]);
    };
    for key in rspec.keys() {
        if !matches!(key.as_str(), "mlPolicy" | "podGroupPolicy" | "template") {
            at_runtime(format!(
                "spec.{key} is not a field of a training runtime that dljob convert knows: remove it"
            ));
        }
    }
    let trainer = spec
        .get("trainer")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for key in trainer.keys() {
        if !TRAINER_FIELDS.contains(&key.as_str()) {
            problems.push(format!(
                "spec.trainer.{key} is not a field of TrainJob's trainer that dljob convert knows: remove it"
            ));
        }
    }
    let policy = MlPolicy::read(rspec.get("mlPolicy"), &mut problems, &runtime_name);
    let mut keys = Keys::new();
    keys.insert(c::FRAMEWORK, policy.framework().to_owned());
    keys.insert(c::CONTAINER, NODE.to_owned());
    // A finished TrainJob's JobSet and pods stay until the TrainJob is
    // deleted.
    keys.insert(c::CLEAN_POD_POLICY, "None".into());
    if let Some(v) = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        match v.as_u64() {
            Some(n) => {
                keys.insert(c::ACTIVE_DEADLINE_SECONDS, n.to_string());
            }
            None => problems.push(format!(
                "spec.activeDeadlineSeconds is {v}, not a whole number"
            )),
        }
    }

    // The JobSet template, with the TrainJob's patches laid over it.
    let mut template = rspec.get("template").cloned().unwrap_or(json!({}));
    let mut workload_labels = Map::new();
    let mut workload_annotations = Map::new();
    for (which, into) in [
        ("labels", &mut workload_labels),
        ("annotations", &mut workload_annotations),
    ] {
        if let Some(m) = template.pointer(&format!("/metadata/{which}")) {
            into.extend(m.as_object().cloned().unwrap_or_default());
        }
        // Trainer 2.1's spec.labels and spec.annotations: the JobSet's.
        if let Some(m) = spec.get(which).and_then(Value::as_object) {
            into.extend(m.clone());
        }
    }
    apply_runtime_patches(
        spec,
        &mut template,
        &mut workload_labels,
        &mut workload_annotations,
        &mut problems,
    );
    apply_pod_template_overrides(spec, &mut template, &mut problems);

    let jobset = template.get("spec").cloned().unwrap_or(json!({}));
    let jobset_spec = jobset.as_object().cloned().unwrap_or_default();
    for key in jobset_spec.keys() {
        match key.as_str() {
            "replicatedJobs" | "network" | "successPolicy" | "failurePolicy" => {}
            _ => problems.push(format!(
                "{runtime_name}: spec.template.spec.{key} is a JobSet field dljob convert does not carry over: remove it"
            )),
        }
    }
    failure_policy(&jobset_spec, &mut keys, &mut out.warnings, &mut problems);

    let num_nodes = trainer
        .get("numNodes")
        .and_then(Value::as_u64)
        .or(policy.num_nodes)
        .unwrap_or(1);
    let num_nodes = u32::try_from(num_nodes).unwrap_or(u32::MAX);
    if num_nodes == 0 {
        problems.push("spec.trainer.numNodes is 0: a job has at least one node".into());
    }
    let jobs = jobset_spec
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut members: Vec<(String, String, u32, Value)> = Vec::new();
    for (i, rj) in jobs.iter().enumerate() {
        let rj_name = object::str_at(rj, &["name"]).unwrap_or("").to_owned();
        let at = format!("{runtime_name}: spec.template.spec.replicatedJobs[{i}] ({rj_name})");
        let ancestor = object::str_at(rj, &["template", "metadata", "labels", ANCESTOR]);
        match ancestor {
            Some(step @ ("dataset-initializer" | "model-initializer")) => {
                problems.push(format!(
                    "{at} is the {step}, a step Trainer runs before the trainer (JobSet dependsOn); a dljob job has no steps: run the initializer as a Job of its own first (or as an init container of the trainer's pods), and convert with a runtime without it"
                ));
                continue;
            }
            Some("trainer") | None => {}
            Some(other) => {
                problems.push(format!(
                    "{at}: {ANCESTOR} {} is no step dljob convert knows",
                    c::quoted(other)
                ));
                continue;
            }
        }
        let trainer_step = ancestor == Some("trainer");
        let Some((role, count)) = policy.role_of(&rj_name, trainer_step, num_nodes) else {
            problems.push(format!(
                "{at}: the {} policy has no replicated Job {}; its are {}",
                policy.framework(),
                c::quoted(&rj_name),
                policy.job_names()
            ));
            continue;
        };
        for key in rj.as_object().map(Map::keys).into_iter().flatten() {
            match key.as_str() {
                "name" | "template" | "dependsOn" => {}
                "replicas" if rj["replicas"].as_u64().unwrap_or(1) == 1 => {}
                _ => problems.push(format!(
                    "{at}.{key} is not carried over (Trainer runs one Job per replicated Job): remove it"
                )),
            }
        }
        for key in rj
            .pointer("/template/spec")
            .and_then(Value::as_object)
            .map(Map::keys)
            .into_iter()
            .flatten()
        {
            if !matches!(key.as_str(), "template" | "parallelism" | "completions") {
                problems.push(format!(
                    "{at}.template.spec.{key} is a Job field dljob convert does not carry over (dljob sets its member Jobs' policies): remove it"
                ));
            }
        }
        let Some(mut pod) = rj.pointer("/template/spec/template").cloned() else {
            problems.push(format!("{at}.template.spec.template is missing"));
            continue;
        };
        if let Some(labels) = rj
            .pointer("/template/metadata/labels")
            .and_then(Value::as_object)
        {
            workload_labels.extend(
                labels
                    .iter()
                    .filter(|(k, _)| !k.starts_with(GROUP))
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        let gets_trainer = trainer_step || policy.node_is_trainer(&rj_name);
        if let Err(p) = apply_trainer(&mut pod, &trainer, trainer_step, gets_trainer) {
            problems.push(format!("{at}: {p}"));
            continue;
        }
        members.push((rj_name, role.to_owned(), count, pod));
    }
    if members.is_empty() && problems.is_empty() {
        problems.push(format!(
            "{runtime_name}: spec.template.spec.replicatedJobs has no trainer (a replicated Job labelled {ANCESTOR}: trainer)"
        ));
    }
    let mut edits = TemplateEdits::default();
    policy.keys(&members, &trainer, &mut keys, &mut edits, &mut problems);
    let restart = restart_of(&members);
    if let Some(warning) = retries(&keys, restart) {
        out.warnings.push(warning);
    }
    gang(job, rspec, &mut keys, &mut problems);
    let topology: Vec<String> = members
        .iter()
        .map(|(_, role, count, _)| format!("{role}={count}"))
        .collect();
    keys.insert(c::REPLICAS, topology.join(","));
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut meta = job
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (which, extra) in [
        ("labels", workload_labels),
        ("annotations", workload_annotations),
    ] {
        let mut all = extra;
        all.extend(
            meta.get(which)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        );
        meta.insert(which.into(), Value::Object(all));
    }
    for (rj_name, role, count, pod) in &members {
        let r = ReplicaSpec {
            type_name: rj_name.clone(),
            role: role.clone(),
            count: *count,
            restart,
            template: pod,
        };
        let workload = kubeflow::workload(name, Some(&meta), &r, &keys, &edits, Some(NODE));
        out.replicas.push(Replica {
            role: role.clone(),
            workload,
            template_path: Vec::new(),
        });
    }
    Ok(out)
}

/// `spec.initializer`, `suspend` and `managedBy`: what stops a conversion.
fn job_policies(job: &Value, spec: &Map<String, Value>, problems: &mut Vec<String>) {
    if spec.get("initializer").is_some_and(|v| !v.is_null()) {
        problems.push("spec.initializer: the dataset and model initializers are steps Trainer runs before the trainer; a dljob job has no steps: run them as a Job of their own first (or as init containers of the trainer's pods), and remove it".into());
    }
    // A job queued with Kueue is created suspended for Kueue to admit;
    // Kueue suspends and admits dljob's member Jobs itself.
    let queued =
        object::str_at(job, &["metadata", "labels", crate::gang::kueue::QUEUE_NAME]).is_some();
    if spec.get("suspend").and_then(Value::as_bool) == Some(true) && !queued {
        problems.push("spec.suspend is true: a dljob job has no suspended state of its own; apply the converted workloads when the job should run (or queue them with Kueue), and remove suspend".into());
    }
    if let Some(m) = spec.get("managedBy").and_then(Value::as_str) {
        if m != TRAINER_CONTROLLER {
            problems.push(format!(
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
    let Some(r) = spec.get("runtimeRef").and_then(Value::as_object) else {
        return Err("spec.runtimeRef is missing: a TrainJob runs on a runtime".into());
    };
    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
    let kind = r
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or(CLUSTER_RUNTIME);
    let group = r.get("apiGroup").and_then(Value::as_str).unwrap_or(GROUP);
    if group != GROUP || !matches!(kind, CLUSTER_RUNTIME | RUNTIME) {
        return Err(format!(
            "spec.runtimeRef names a {} of {}: dljob convert reads Trainer's runtimes ({CLUSTER_RUNTIME}, {RUNTIME} of {GROUP})",
            c::quoted(kind),
            c::quoted(group)
        ));
    }
    let found = runtimes.iter().find(|v| {
        object::str_at(v, &["kind"]) == Some(kind)
            && object::str_at(v, &["metadata", "name"]) == Some(name)
            && (kind == CLUSTER_RUNTIME
                || object::str_at(v, &["metadata", "namespace"]).unwrap_or(namespace) == namespace)
    });
    found.copied().ok_or_else(|| {
        let get = if kind == CLUSTER_RUNTIME {
            format!("kubectl get clustertrainingruntime {name} -o yaml")
        } else {
            format!("kubectl get trainingruntime {name} -n {namespace} -o yaml")
        };
        format!(
            "spec.runtimeRef names the {kind} {}, which is not in the input: the job's pods are its template. Fetch it and give it with --runtime: `{get} > runtime.yaml`, then `dljob convert -f FILE --runtime runtime.yaml`",
            c::quoted(name)
        )
    })
}

/// The runtime's `mlPolicy`.
#[derive(Debug, Default)]
struct MlPolicy {
    num_nodes: Option<u64>,
    kind: Kind,
    /// torch: `numProcPerNode` (Trainer 2.1: `auto`, `cpu`, `gpu` or a
    /// number); MPI: `numProcPerNode`.
    num_proc: Option<Value>,
    mpi: Map<String, Value>,
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
    fn read(v: Option<&Value>, problems: &mut Vec<String>, runtime: &str) -> Self {
        let mut p = Self::default();
        let Some(v) = v.and_then(Value::as_object) else {
            return p;
        };
        p.num_nodes = v.get("numNodes").and_then(Value::as_u64);
        for (key, body) in v {
            let body = body.as_object().cloned().unwrap_or_default();
            let known: &[&str] = match key.as_str() {
                "numNodes" => continue,
                "torch" => {
                    p.kind = Kind::Torch;
                    p.num_proc = body.get("numProcPerNode").cloned();
                    for field in ["elasticPolicy", "envInjection"] {
                        if body.get(field).is_some_and(|v| !v.is_null()) {
                            problems.push(format!(
                                "{runtime}: spec.mlPolicy.torch.{field} is not carried over yet: convert with a runtime without it"
                            ));
                        }
                    }
                    &["numProcPerNode", "elasticPolicy", "envInjection"]
                }
                "mpi" => {
                    p.kind = Kind::Mpi;
                    p.num_proc = body.get("numProcPerNode").cloned();
                    p.mpi = body.clone();
                    &[
                        "numProcPerNode",
                        "mpiImplementation",
                        "sshAuthMountPath",
                        "runLauncherAsNode",
                    ]
                }
                "jax" => {
                    p.kind = Kind::Jax;
                    &[]
                }
                "xgboost" => {
                    p.kind = Kind::XgBoost;
                    &[]
                }
                "flux" => {
                    problems.push(format!(
                        "{runtime}: spec.mlPolicy.flux: the job runs under the Flux framework, which Trainer starts in the pods itself; dljob does not run Flux"
                    ));
                    continue;
                }
                other => {
                    problems.push(format!(
                        "{runtime}: spec.mlPolicy.{other} is no ML policy dljob convert knows (torch, mpi, jax, xgboost)"
                    ));
                    continue;
                }
            };
            for field in body.keys() {
                if !known.contains(&field.as_str()) {
                    problems.push(format!(
                        "{runtime}: spec.mlPolicy.{key}.{field} is not a field dljob convert knows: remove it"
                    ));
                }
            }
        }
        p
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

    fn job_names(&self) -> &'static str {
        match self.kind {
            Kind::Mpi => "launcher and node",
            _ => "the trainer's only",
        }
    }

    /// The dljob role and pod count of the replicated Job `name`.
    fn role_of(&self, name: &str, trainer: bool, num_nodes: u32) -> Option<(&'static str, u32)> {
        match self.kind {
            Kind::Mpi => match name {
                "launcher" => Some(("launcher", 1)),
                // With runLauncherAsNode the launcher is one of the nodes.
                NODE if self.launcher_as_node() => {
                    Some(("worker", num_nodes.saturating_sub(1).max(1)))
                }
                NODE => Some(("worker", num_nodes)),
                _ => None,
            },
            Kind::Plain if trainer => Some(("node", num_nodes)),
            _ if trainer => Some(("worker", num_nodes)),
            _ => None,
        }
    }

    fn launcher_as_node(&self) -> bool {
        self.mpi.get("runLauncherAsNode").and_then(Value::as_bool) == Some(true)
    }

    /// Whether the replicated Job `name` gets the trainer's env and
    /// resources besides the trainer step (MPI nodes with the launcher
    /// among them).
    fn node_is_trainer(&self, name: &str) -> bool {
        self.kind == Kind::Mpi && self.launcher_as_node() && name == NODE
    }

    /// The policy's dljob keys and template edits.
    fn keys(
        &self,
        members: &[(String, String, u32, Value)],
        trainer: &Map<String, Value>,
        keys: &mut Keys,
        edits: &mut TemplateEdits,
        problems: &mut Vec<String>,
    ) {
        let node = members
            .iter()
            .find(|(_, role, _, _)| role != "launcher")
            .map(|(_, _, _, pod)| pod);
        let node_container = node.and_then(|pod| {
            object::containers(&pod["spec"])
                .iter()
                .find(|c| object::name_of(c) == NODE)
        });
        match self.kind {
            Kind::Torch => {
                keys.insert(c::PORT, TRAINER_PORT.to_string());
                let nproc = trainer
                    .get("numProcPerNode")
                    .or(self.num_proc.as_ref())
                    .cloned()
                    .unwrap_or(json!("auto"));
                let gpus = node_container.and_then(object::gpu_count).unwrap_or(0);
                let text = match &nproc {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) if s == "cpu" || (s == "auto" && gpus == 0) => {
                        cpus_of(node_container).to_string()
                    }
                    Value::String(s) => s.clone(),
                    other => {
                        problems.push(format!(
                            "numProcPerNode is {other}: a count, auto, cpu or gpu"
                        ));
                        return;
                    }
                };
                // dljob gives a node with GPUs as many processes as it has
                // GPUs, which is what torchrun's auto does there; anything
                // else is Trainer's own choice, written down.
                if !(text == "auto" && gpus > 0) {
                    edits.env.push(("PET_NPROC_PER_NODE", text));
                }
                if let Some(cmd) = trainer.get("command").and_then(Value::as_array) {
                    if cmd.first().and_then(Value::as_str) == Some("tune") {
                        problems.push("spec.trainer.command is torchtune's `tune run`, whose recipe and config Trainer chooses from the model and the node count: write the `tune run` command in full (with --rdzv-endpoint from PET_MASTER_ADDR) and convert again".into());
                    }
                }
            }
            Kind::Jax | Kind::XgBoost => {
                keys.insert(c::PORT, TRAINER_PORT.to_string());
            }
            Kind::Mpi => {
                keys.insert(c::COMPAT, c::COMPAT_MPI_OPERATOR.into());
                if let Some(i) = self.mpi.get("mpiImplementation").and_then(Value::as_str) {
                    if i != "OpenMPI" {
                        problems.push(format!(
                            "spec.mlPolicy.mpi.mpiImplementation \"{}\": dljob writes an OpenMPI hostfile and OpenMPI's env; Intel MPI and MPICH read other formats. Run OpenMPI",
                            c::quoted(i)
                        ));
                    }
                }
                if let Some(p) = self.mpi.get("sshAuthMountPath").and_then(Value::as_str) {
                    keys.insert(c::SSH_PATH, p.to_owned());
                }
                if self.launcher_as_node() {
                    problems.push("spec.mlPolicy.mpi.runLauncherAsNode: dljob's hostfile lists the workers only, and its launcher runs no sshd; in a runtime of your own, set it false (numNodes then counts the nodes besides the launcher), and convert again".into());
                }
                let gpus = node_container.and_then(object::gpu_count).unwrap_or(0);
                let runtime_slots = self.num_proc.as_ref().and_then(Value::as_u64);
                // The TrainJob's count, else the runtime's; Trainer gives a
                // node of several GPUs one process per GPU when the runtime
                // says 1 (or nothing) and the TrainJob nothing.
                let slots = match trainer.get("numProcPerNode").and_then(Value::as_u64) {
                    Some(n) => n,
                    None if gpus > 1 && runtime_slots.unwrap_or(1) == 1 => u64::from(gpus),
                    None => runtime_slots.unwrap_or(1),
                };
                keys.insert(c::SLOTS, slots.to_string());
            }
            Kind::Plain => {}
        }
    }
}

/// CPUs per node as Trainer counts them: the request (else the limit),
/// rounded up, at least 1.
fn cpus_of(container: Option<&Value>) -> u64 {
    let Some(resources) = container.map(|c| &c["resources"]) else {
        return 1;
    };
    let cpu = resources
        .pointer("/requests/cpu")
        .filter(|q| object::quantity_value(q).is_some_and(|v| v > 0.0))
        .or_else(|| resources.pointer("/limits/cpu"));
    let n = cpu.and_then(object::quantity_value).unwrap_or(0.0).ceil();
    // A count of CPUs fits in u64 and is not negative.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = n.max(1.0) as u64;
    n
}

/// Trainer's `spec.trainer` on a replicated Job's pod template: image,
/// command and args on the trainer step's `node` container; env and
/// resources on every pod that is a training node.
fn apply_trainer(
    pod: &mut Value,
    trainer: &Map<String, Value>,
    trainer_step: bool,
    node_pod: bool,
) -> Result<(), String> {
    if !trainer_step && !node_pod {
        return Ok(());
    }
    let Some(containers) = pod
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
    else {
        return Err("template.spec.template.spec.containers is missing".into());
    };
    let Some(node) = containers
        .iter_mut()
        .find(|c| object::name_of(c) == NODE)
        .and_then(Value::as_object_mut)
    else {
        return Err(format!(
            "no container is named {NODE}, the container Trainer gives the trainer's image, command and env"
        ));
    };
    if trainer_step {
        for field in ["image", "command", "args"] {
            if let Some(v) = trainer.get(field).filter(|v| !v.is_null()) {
                node.insert(field.into(), v.clone());
            }
        }
    }
    if let Some(env) = trainer.get("env").and_then(Value::as_array) {
        merge_by(node, "env", env, "name");
    }
    if let Some(r) = trainer.get("resourcesPerNode").and_then(Value::as_object) {
        let resources = node.entry("resources").or_insert_with(|| json!({}));
        for kind in ["limits", "requests"] {
            if let Some(given) = r.get(kind).and_then(Value::as_object) {
                let into = resources
                    .as_object_mut()
                    .map(|m| m.entry(kind).or_insert_with(|| json!({})));
                if let Some(Value::Object(into)) = into {
                    into.extend(given.clone());
                }
            }
        }
    }
    Ok(())
}

/// Lists merged by a key field, as the API server's strategic merge patch
/// merges them.
const MERGE_KEYS: &[(&str, &str)] = &[
    ("replicatedJobs", "name"),
    ("containers", "name"),
    ("initContainers", "name"),
    ("env", "name"),
    ("volumes", "name"),
    ("imagePullSecrets", "name"),
    ("schedulingGates", "name"),
    ("volumeMounts", "mountPath"),
];

/// `patch` merged into `target` as a strategic merge patch of these types
/// does: mappings key by key (null removes), the lists of [`MERGE_KEYS`]
/// entry by entry, every other list replaced.
fn strategic_merge(target: &mut Value, patch: &Value) {
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let key = MERGE_KEYS.iter().find(|(f, _)| f == k).map(|(_, key)| *key);
        match (key, v.as_array()) {
            (Some(key), Some(items)) => merge_by(t, k, items, key),
            _ => strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v),
        }
    }
}

/// `items` merged into the list `field` of `map` by their `key`.
fn merge_by(map: &mut Map<String, Value>, field: &str, items: &[Value], key: &str) {
    let list = map.entry(field).or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for item in items {
        let id = item.get(key);
        match list.iter_mut().find(|e| id.is_some() && e.get(key) == id) {
            Some(existing) => strategic_merge(existing, item),
            None => list.push(item.clone()),
        }
    }
}

/// Trainer 2.2's `spec.runtimePatches`, in order: the JobSet template's
/// metadata onto the workloads, its spec merged into the template.
fn apply_runtime_patches(
    spec: &Map<String, Value>,
    template: &mut Value,
    labels: &mut Map<String, Value>,
    annotations: &mut Map<String, Value>,
    problems: &mut Vec<String>,
) {
    let Some(patches) = spec.get("runtimePatches").and_then(Value::as_array) else {
        return;
    };
    for (i, patch) in patches.iter().enumerate() {
        let at = format!("spec.runtimePatches[{i}]");
        for key in patch.as_object().map(Map::keys).into_iter().flatten() {
            if !matches!(key.as_str(), "manager" | "time" | "trainingRuntimeSpec") {
                problems.push(format!("{at}.{key} is not a field dljob convert knows"));
            }
        }
        let Some(t) = patch.pointer("/trainingRuntimeSpec/template") else {
            continue;
        };
        for (which, into) in [("labels", &mut *labels), ("annotations", &mut *annotations)] {
            if let Some(m) = t
                .pointer(&format!("/metadata/{which}"))
                .and_then(Value::as_object)
            {
                into.extend(m.clone());
            }
        }
        if let Some(s) = t.get("spec") {
            let target = template
                .as_object_mut()
                .map(|m| m.entry("spec").or_insert_with(|| json!({})));
            if let Some(target) = target {
                strategic_merge(target, s);
            }
        }
    }
}

/// Trainer 2.1's `spec.podTemplateOverrides`: each onto the pod template
/// of the replicated Jobs it targets.
fn apply_pod_template_overrides(
    spec: &Map<String, Value>,
    template: &mut Value,
    problems: &mut Vec<String>,
) {
    let Some(overrides) = spec.get("podTemplateOverrides").and_then(Value::as_array) else {
        return;
    };
    for (i, o) in overrides.iter().enumerate() {
        let targets: Vec<&str> = o["targetJobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect();
        let mut pod = Map::new();
        for key in ["metadata", "spec"] {
            if let Some(v) = o.get(key) {
                pod.insert(key.into(), v.clone());
            }
        }
        let pod = Value::Object(pod);
        let jobs = template
            .pointer_mut("/spec/replicatedJobs")
            .and_then(Value::as_array_mut);
        let mut found = 0;
        for rj in jobs.into_iter().flatten() {
            if !targets.contains(&object::str_at(rj, &["name"]).unwrap_or("")) {
                continue;
            }
            if let Some(t) = rj.pointer_mut("/template/spec/template") {
                strategic_merge(t, &pod);
                found += 1;
            }
        }
        if found < targets.len() {
            problems.push(format!(
                "spec.podTemplateOverrides[{i}].targetJobs names a replicated Job the runtime does not have"
            ));
        }
    }
}

/// The JobSet's `failurePolicy`: `maxRestarts` is how often the whole
/// job is started again, dljob's backoff limit.
fn failure_policy(
    jobset: &Map<String, Value>,
    keys: &mut Keys,
    warnings: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    let Some(fp) = jobset.get("failurePolicy").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in fp {
        match k.as_str() {
            "maxRestarts" => match v.as_u64() {
                Some(n) => {
                    keys.insert(c::BACKOFF_LIMIT, n.to_string());
                }
                None => problems.push(format!(
                    "the runtime's spec.template.spec.failurePolicy.maxRestarts is {v}, not a count"
                )),
            },
            "rules" | "restartStrategy" => warnings.push(format!(
                "the runtime's JobSet failurePolicy.{k} is not carried over: dljob restarts the whole job after a retryable exit (dljob.dev/restart-policy)"
            )),
            _ => problems.push(format!(
                "the runtime's spec.template.spec.failurePolicy.{k} is not a field dljob convert knows"
            )),
        }
    }
}

/// The pods' restart policy: the templates', where they name one, else
/// JobSet's default (OnFailure).
fn restart_of(members: &[(String, String, u32, Value)]) -> &'static str {
    let named: Vec<&str> = members
        .iter()
        .filter_map(|(_, _, _, pod)| object::str_at(pod, &["spec", "restartPolicy"]))
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
fn gang(job: &Value, rspec: &Map<String, Value>, keys: &mut Keys, problems: &mut Vec<String>) {
    if let Some(q) = object::str_at(job, &["metadata", "labels", crate::gang::kueue::QUEUE_NAME]) {
        keys.insert(c::QUEUE, q.to_owned());
        keys.insert(c::GANG, "kueue".into());
        return;
    }
    let Some(pg) = rspec.get("podGroupPolicy").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in pg {
        match k.as_str() {
            "coscheduling" => {
                keys.insert(c::GANG, "coscheduling".into());
            }
            "volcano" => {
                keys.insert(c::GANG, "volcano".into());
                if v.get("networkTopology").is_some_and(|t| !t.is_null()) {
                    problems.push("the runtime's spec.podGroupPolicy.volcano.networkTopology is not carried over: dljob's Volcano PodGroup has no network topology; remove it".into());
                }
            }
            other => problems.push(format!(
                "the runtime's spec.podGroupPolicy.{other} is no gang scheduler dljob knows (coscheduling, volcano)"
            )),
        }
    }
}
