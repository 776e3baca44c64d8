//! The manifests under `examples/` are part of the contract users copy from:
//! every one must validate, mutate without warnings, mutate idempotently with
//! a patch that reproduces the mutation, and — for StatefulSet and Indexed
//! Job members — produce pods that mutate to the right identity. A few
//! examples are checked value by value against ARCHITECTURE.md §3, with the expected
//! values written by hand.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dljob::config::Config;
use dljob::manifest::{self, Document};
use dljob::member::MemberSpec;
use dljob::mutate::{self, Operation};
use dljob::object::Kind;
use dljob::object::Subject;
use dljob::validate;
use serde_json::{json, Value};

/// The namespace `kubectl apply` uses when a manifest names none.
const NS: &str = "default";

/// One manifest file under `examples/` with the webhook config that goes
/// with it (its directory's `config.yaml`, else the default).
struct Example {
    path: PathBuf,
    config: Config,
    docs: Vec<Document>,
}

impl Example {
    fn name(&self) -> String {
        self.path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&self.path)
            .display()
            .to_string()
    }

    /// The member documents: (kind, object).
    fn members(&self) -> Vec<(Kind, &Value)> {
        self.docs
            .iter()
            .filter_map(|d| d.value.as_ref())
            .filter_map(|v| Kind::of(v).map(|k| (k, v)))
            .collect()
    }

    fn peers(&self) -> Vec<MemberSpec> {
        validate::peers_of(self.members(), Some(NS), &self.config)
    }

    /// The member named `name`.
    fn member(&self, name: &str) -> (Kind, &Value) {
        self.members()
            .into_iter()
            .find(|(_, v)| v["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{}: no member named {name}", self.name()))
    }

    /// The member named `name`, mutated as the webhook would on CREATE.
    fn mutated(&self, name: &str) -> Value {
        let (kind, value) = self.member(name);
        mutate_clean(kind, value, &self.config, &self.name())
    }
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn is_config(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "config.yaml")
}

/// Every `.yaml`/`.yml` file under `dir`, recursively, in a stable order.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

fn load(path: &Path) -> Example {
    let config_path = path.with_file_name("config.yaml");
    let config = if config_path.is_file() {
        let text = std::fs::read_to_string(&config_path).expect("readable config");
        Config::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", config_path.display()))
    } else {
        Config::default()
    };
    let text = std::fs::read_to_string(path).expect("readable example");
    let docs = manifest::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Example {
        path: path.to_owned(),
        config,
        docs,
    }
}

fn all_examples() -> Vec<Example> {
    let mut files = Vec::new();
    yaml_files(&examples_dir(), &mut files);
    let examples: Vec<Example> = files
        .iter()
        .filter(|p| !is_config(p))
        .map(|p| load(p))
        .collect();
    assert!(!examples.is_empty(), "no manifests under examples/");
    examples
}

/// The example in `examples/<dir>/job.yaml`.
fn example(dir: &str) -> Example {
    load(&examples_dir().join(dir).join("job.yaml"))
}

/// Whether a pod's containers request an accelerator of `config`: dljob
/// then mounts the node's libraries and says what Pod Security that needs.
fn requests_configured_accelerator(kind: Kind, original: &Value, config: &Config) -> bool {
    kind == Kind::Pod
        && original["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                config
                    .accelerators
                    .keys()
                    .any(|r| dljob::object::requests_resource(c, r))
            })
}

/// Mutates like the webhook on CREATE and checks what every mutation must
/// satisfy: no error, no warning (but the Pod Security one of a pod that
/// gets the node's accelerator libraries), idempotent, and a JSON Patch
/// that turns the original into the mutated object.
fn mutate_clean(kind: Kind, original: &Value, config: &Config, context: &str) -> Value {
    let what = format!("{context}: {}", manifest::describe(original));
    let first = mutate::mutate(
        Subject::new(kind, original, Some(NS)),
        Operation::Create,
        config,
    )
    .unwrap_or_else(|v| panic!("{what}: refused: {v}"))
    .unwrap_or_else(|| panic!("{what}: not treated as a member"));
    let expected: Vec<&str> = if requests_configured_accelerator(kind, original, config) {
        vec!["dljob mounts the node's /home/kubernetes/bin/nvidia/lib64 (read-only hostPath, the accelerators of the webhook's config): Pod Security admits this pod only where the namespace's level is privileged, not baseline or restricted"]
    } else {
        vec![]
    };
    assert_eq!(first.warnings, expected, "{what}: unexpected warnings");

    let second = mutate::mutate(
        Subject::new(kind, &first.object, Some(NS)),
        Operation::Create,
        config,
    )
    .unwrap_or_else(|v| panic!("{what}: mutated object refused: {v}"))
    .expect("still a member");
    assert_eq!(
        second.object, first.object,
        "{what}: mutating twice changed the object"
    );
    assert!(
        second.warnings.is_empty(),
        "{what}: re-mutation warned {:?}",
        second.warnings
    );
    let again = mutate::patch(&first.object, &second.object);
    assert!(
        again.0.is_empty(),
        "{what}: re-mutation patch not empty: {again:?}"
    );

    // Re-applying the manifest reaches the webhook as an UPDATE of the
    // stored (mutated) object: nothing more to do.
    let update = mutate::mutate(
        Subject::new(kind, &first.object, Some(NS)),
        Operation::Update,
        config,
    )
    .unwrap_or_else(|v| panic!("{what}: UPDATE refused: {v}"))
    .expect("still a member");
    assert_eq!(update.object, first.object, "{what}: UPDATE changed it");
    assert!(
        update.warnings.is_empty(),
        "{what}: UPDATE warned {:?}",
        update.warnings
    );

    let patch = mutate::patch(original, &first.object);
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &patch.to_json_patch())
        .unwrap_or_else(|e| panic!("{what}: patch does not apply: {e}"));
    assert_eq!(
        patched, first.object,
        "{what}: the patch does not reproduce the mutation"
    );
    first.object
}

/// The pods a controller creates from a mutated StatefulSet or Indexed Job,
/// as the API server hands them to the pod webhook (what `dljob mutate
/// --pods` previews).
fn controller_pods(kind: Kind, workload: &Value) -> Vec<(u32, Value)> {
    (0..)
        .zip(dljob::preview::pods_of(kind, workload, NS))
        .collect()
}

/// The pod `i` a controller creates from workload `name` of `ex`, mutated.
fn controller_pod(ex: &Example, name: &str, i: u32) -> Value {
    let (kind, _) = ex.member(name);
    let workload = ex.mutated(name);
    let (_, pod) = controller_pods(kind, &workload)
        .into_iter()
        .find(|(j, _)| *j == i)
        .unwrap_or_else(|| panic!("{name} has no pod {i}"));
    mutate_clean(Kind::Pod, &pod, &ex.config, &ex.name())
}

/// The container dljob wired: the one carrying `DLJOB_INDEX`.
fn wired_container(pod: &Value) -> &Value {
    let wired: Vec<&Value> = pod["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter(|c| env_in(c, "DLJOB_INDEX").is_some())
        .collect();
    assert_eq!(
        wired.len(),
        1,
        "{}: exactly one container gets the DLJOB_* vars",
        manifest::describe(pod)
    );
    wired[0]
}

fn env_in<'v>(container: &'v Value, name: &str) -> Option<&'v str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?
        .get("value")?
        .as_str()
}

/// The value of `name` in the wired container of `pod`.
fn env(pod: &Value, name: &str) -> Option<String> {
    env_in(wired_container(pod), name).map(str::to_owned)
}

fn hostfile(pod: &Value) -> &str {
    pod["metadata"]["annotations"]["dljob.dev/hostfile"]
        .as_str()
        .expect("hostfile annotation")
}

fn framework_of(kind: Kind, value: &Value) -> Option<String> {
    let own = value["metadata"]["annotations"]["dljob.dev/framework"].as_str();
    let tpl = match kind {
        Kind::Pod => None,
        _ => value["spec"]["template"]["metadata"]["annotations"]["dljob.dev/framework"].as_str(),
    };
    own.or(tpl).map(str::to_owned)
}

// ---------------------------------------------------------------------------
// Every example
// ---------------------------------------------------------------------------

#[test]
fn every_example_validates_without_problems_or_warnings() {
    for ex in all_examples() {
        let (problems, warnings) = manifest::validate(&ex.docs, Some(NS), &ex.config);
        assert!(problems.is_empty(), "{}: {problems:?}", ex.name());
        assert!(warnings.is_empty(), "{}: {warnings:?}", ex.name());
        assert!(!ex.members().is_empty(), "{}: no members", ex.name());
    }
}

#[test]
fn every_member_mutates_idempotently_with_a_patch_that_reproduces_it() {
    for ex in all_examples() {
        for (kind, value) in ex.members() {
            mutate_clean(kind, value, &ex.config, &ex.name());
        }
        // The whole-file path of `dljob mutate` agrees and warns nothing.
        let out = manifest::mutate(&ex.docs, Some(NS), &ex.config)
            .unwrap_or_else(|(n, v)| panic!("{}: {n} refused: {v}", ex.name()));
        assert!(out.warnings.is_empty(), "{}: {:?}", ex.name(), out.warnings);
    }
}

#[test]
fn workload_pods_get_the_hostname_and_index_of_their_ordinal() {
    let mut pods_seen = 0;
    for ex in all_examples() {
        let peers = ex.peers();
        for (kind, value) in ex.members() {
            if kind == Kind::Pod {
                continue;
            }
            let workload = mutate_clean(kind, value, &ex.config, &ex.name());
            let job = value["metadata"]["labels"]["dljob.dev/job"]
                .as_str()
                .expect("job label");
            let role = value["metadata"]["labels"]["dljob.dev/role"]
                .as_str()
                .expect("role label");
            // One of several sets of its role: its pods start at its offset.
            let offset: u32 = value["metadata"]["annotations"]["dljob.dev/index-offset"]
                .as_str()
                .map_or(0, |s| s.parse().expect("a numeric offset"));
            for (ordinal, pod) in controller_pods(kind, &workload) {
                let context = format!("{} {}[{ordinal}]", ex.name(), manifest::describe(value));
                let i = offset + ordinal;
                let mutated = mutate_clean(Kind::Pod, &pod, &ex.config, &context);
                assert_eq!(
                    mutated["spec"]["hostname"],
                    format!("{job}-{role}-{i}"),
                    "{context}"
                );
                assert_eq!(mutated["spec"]["subdomain"], job, "{context}");
                assert_eq!(
                    env(&mutated, "DLJOB_INDEX").as_deref(),
                    Some(i.to_string().as_str()),
                    "{context}"
                );
                assert_eq!(
                    env(&mutated, "DLJOB_ROLE").as_deref(),
                    Some(role),
                    "{context}"
                );
                let accepted = validate::validate(
                    Subject::new(Kind::Pod, &mutated, Some(NS)),
                    &ex.config,
                    &peers,
                );
                assert_eq!(accepted, Ok(Vec::new()), "{context}");
                pods_seen += 1;
            }
        }
    }
    assert!(pods_seen > 0, "no StatefulSet or Job members in examples/");
}

#[test]
fn examples_cover_all_nine_frameworks() {
    let mut seen = BTreeSet::new();
    for ex in all_examples() {
        for (kind, value) in ex.members() {
            seen.insert(
                framework_of(kind, value)
                    .unwrap_or_else(|| panic!("{}: member without framework", ex.name())),
            );
        }
    }
    let nine: BTreeSet<String> = [
        "tensorflow",
        "pytorch",
        "mxnet",
        "mpi",
        "chainer",
        "jax",
        "xgboost",
        "paddle",
        "generic",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(seen, nine);
    // And a framework added to the registry needs an example too.
    let registered: BTreeSet<String> = dljob::frameworks::ALL
        .iter()
        .map(|f| f.name().to_owned())
        .collect();
    assert_eq!(seen, registered);
}

#[test]
fn examples_show_every_member_kind() {
    let mut kinds = BTreeSet::new();
    for ex in all_examples() {
        for (kind, _) in ex.members() {
            kinds.insert(kind.as_str());
        }
    }
    assert_eq!(
        kinds,
        BTreeSet::from(["Job", "Pod", "StatefulSet"]),
        "examples should show plain Pods, StatefulSets and Indexed Jobs"
    );
}

#[test]
fn every_example_directory_has_a_short_readme() {
    for entry in std::fs::read_dir(examples_dir()).expect("examples/") {
        let dir = entry.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{}/README.md: {e}", dir.display()));
        let lines = readme.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(
            (3..=7).contains(&lines),
            "{}/README.md has {lines} non-empty lines; keep it to a heading and 3-6 lines",
            dir.display()
        );
        assert!(
            readme.contains("kubectl apply") || readme.contains("dljob mutate"),
            "{}/README.md should say how to apply it",
            dir.display()
        );
    }
}

/// What the API server's defaulting adds to a pod before the webhook is
/// reinvoked (`reinvocationPolicy: IfNeeded`) or a controller copies it.
fn api_defaults(pod: &mut Value) {
    let spec = pod["spec"].as_object_mut().expect("pod spec");
    for (k, v) in [
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("terminationGracePeriodSeconds", json!(30)),
        ("enableServiceLinks", json!(true)),
        ("serviceAccountName", json!("default")),
        ("priority", json!(0)),
    ] {
        spec.entry(k).or_insert(v);
    }
    for c in spec["containers"].as_array_mut().expect("containers") {
        let c = c.as_object_mut().expect("container");
        c.entry("imagePullPolicy").or_insert(json!("IfNotPresent"));
        c.entry("terminationMessagePath")
            .or_insert(json!("/dev/termination-log"));
        c.entry("terminationMessagePolicy").or_insert(json!("File"));
        c.entry("resources").or_insert(json!({}));
    }
    for v in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let v = v.as_object_mut().expect("volume");
        if let Some(d) = v.get_mut("downwardAPI").and_then(Value::as_object_mut) {
            d.entry("defaultMode").or_insert(json!(420));
            for item in d["items"].as_array_mut().expect("items") {
                item["fieldRef"]
                    .as_object_mut()
                    .expect("fieldRef")
                    .entry("apiVersion")
                    .or_insert(json!("v1"));
            }
        }
        if let Some(c) = v.get_mut("configMap").and_then(Value::as_object_mut) {
            c.entry("defaultMode").or_insert(json!(420));
        }
        if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
            h.entry("type").or_insert(json!(""));
        }
    }
}

#[test]
fn reinvocation_after_api_defaulting_changes_nothing() {
    for ex in all_examples() {
        let mut pods = Vec::new();
        for (kind, value) in ex.members() {
            let mutated = mutate_clean(kind, value, &ex.config, &ex.name());
            match kind {
                Kind::Pod => pods.push(mutated),
                _ => pods.extend(controller_pods(kind, &mutated).into_iter().map(|(i, pod)| {
                    let context = format!("{} {}[{i}]", ex.name(), manifest::describe(value));
                    mutate_clean(Kind::Pod, &pod, &ex.config, &context)
                })),
            }
        }
        for mut pod in pods {
            api_defaults(&mut pod);
            let what = format!("{}: {}", ex.name(), manifest::describe(&pod));
            let again = mutate::mutate(
                Subject::new(Kind::Pod, &pod, Some(NS)),
                Operation::Create,
                &ex.config,
            )
            .unwrap_or_else(|v| panic!("{what}: refused: {v}"))
            .expect("member");
            assert!(again.warnings.is_empty(), "{what}: {:?}", again.warnings);
            let patch = mutate::patch(&pod, &again.object);
            assert!(patch.0.is_empty(), "{what}: {patch:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Exact values (ARCHITECTURE.md §3; hosts are j-r-i.j.ns.svc, ns = default)
// ---------------------------------------------------------------------------

#[test]
fn tensorflow_chief_tf_config_lists_chief_workers_and_ps() {
    let ex = example("tensorflow-ps");
    let chief = ex.mutated("tf-ps-chief");
    let tf: Value =
        serde_json::from_str(&env(&chief, "TF_CONFIG").expect("TF_CONFIG")).expect("JSON");
    assert_eq!(
        tf,
        json!({
            "cluster": {
                "chief": ["tf-ps-chief-0.tf-ps.default.svc:2222"],
                "worker": [
                    "tf-ps-worker-0.tf-ps.default.svc:2222",
                    "tf-ps-worker-1.tf-ps.default.svc:2222"
                ],
                "ps": [
                    "tf-ps-ps-0.tf-ps.default.svc:2222",
                    "tf-ps-ps-1.tf-ps.default.svc:2222"
                ]
            },
            "task": {"type": "chief", "index": 0},
            "environment": "cloud"
        })
    );
    assert_eq!(chief["spec"]["hostname"], "tf-ps-chief-0");
    assert_eq!(chief["spec"]["subdomain"], "tf-ps");
    let ports = &wired_container(&chief)["ports"];
    assert_eq!(
        ports,
        &json!([{"name": "dljob", "containerPort": 2222, "protocol": "TCP"}])
    );
}

#[test]
fn tensorflow_ps_pod_task_is_its_ordinal() {
    let ex = example("tensorflow-ps");
    let ps1 = controller_pod(&ex, "tf-ps-ps", 1);
    let tf: Value = serde_json::from_str(&env(&ps1, "TF_CONFIG").unwrap()).unwrap();
    assert_eq!(tf["task"], json!({"type": "ps", "index": 1}));
    assert_eq!(ps1["spec"]["hostname"], "tf-ps-ps-1");
    // The StatefulSet itself: Service name and parallel start (ARCHITECTURE.md §2).
    let sts = ex.mutated("tf-ps-ps");
    assert_eq!(sts["spec"]["serviceName"], "tf-ps");
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    assert_eq!(
        sts["spec"]["template"]["metadata"]["annotations"],
        json!({
            "dljob.dev/framework": "tensorflow",
            "dljob.dev/replicas": "chief=1,worker=2,ps=2",
            // Resolved at creation (TensorFlow's port, no gang): the pods
            // say what they were wired with whatever the config becomes.
            "dljob.dev/port": "2222",
            "dljob.dev/gang": "none"
        })
    );
}

#[test]
fn mxnet_linear_worker_finds_the_scheduler_and_counts() {
    let ex = example("mxnet-linear");
    let worker = ex.mutated("mxnet-linear-worker");
    let get = |n| env(&worker, n);
    assert_eq!(get("DMLC_ROLE").as_deref(), Some("worker"));
    assert_eq!(
        get("DMLC_PS_ROOT_URI").as_deref(),
        Some("mxnet-linear-scheduler-0.mxnet-linear.default.svc")
    );
    assert_eq!(get("DMLC_PS_ROOT_PORT").as_deref(), Some("9091"));
    assert_eq!(get("DMLC_NUM_SERVER").as_deref(), Some("1"));
    assert_eq!(get("DMLC_NUM_WORKER").as_deref(), Some("1"));
    assert_eq!(get("DMLC_USE_KUBERNETES").as_deref(), Some("1"));
    assert_eq!(get("DMLC_WORKER_ID").as_deref(), Some("0"));
    assert_eq!(get("DLJOB_WORLD_SIZE").as_deref(), Some("3"));
    assert_eq!(worker["spec"]["hostname"], "mxnet-linear-worker-0");
    // The scheduler is not a worker: no worker id.
    let scheduler = ex.mutated("mxnet-linear-scheduler");
    assert_eq!(env(&scheduler, "DMLC_ROLE").as_deref(), Some("scheduler"));
    assert_eq!(env(&scheduler, "DMLC_WORKER_ID"), None);
}

#[test]
fn chainermn_hostfile_lists_workers_then_master_with_gpu_slots() {
    let ex = example("chainermn");
    let want = "chainermn-worker-0.chainermn.default.svc slots=2\n\
                chainermn-worker-1.chainermn.default.svc slots=2\n\
                chainermn-master-0 slots=2\n";
    let master = ex.mutated("chainermn-master");
    assert_eq!(hostfile(&master), want);
    // Only the master runs mpiexec: workers get no hostfile and no
    // hostfile settings.
    let worker1 = controller_pod(&ex, "chainermn-worker", 1);
    assert_eq!(
        worker1["metadata"]["annotations"].get("dljob.dev/hostfile"),
        None
    );
    assert_eq!(env(&worker1, "OMPI_MCA_orte_default_hostfile"), None);
    assert_eq!(env(&worker1, "K_MPI_JOB_ROLE").as_deref(), Some("worker"));
    assert_eq!(
        env(&master, "OMPI_MCA_orte_default_hostfile").as_deref(),
        Some("/etc/dljob/hostfile")
    );
    assert_eq!(
        env(&master, "OMPI_MCA_orte_set_default_slots").as_deref(),
        Some("2")
    );
    // The hostfile is projected from the annotation, and the SSH Secret mounted.
    let volumes = master["spec"]["volumes"].as_array().expect("volumes");
    assert!(volumes.contains(&json!({
        "name": "dljob-hostfile",
        "downwardAPI": {"items": [{
            "path": "hostfile",
            "fieldRef": {"fieldPath": "metadata.annotations['dljob.dev/hostfile']"}
        }]}
    })));
    assert!(volumes.contains(&json!({
        "name": "dljob-ssh",
        "secret": {"secretName": "chainermn-ssh", "defaultMode": 0o600}
    })));
    // File by file (subPath), so that the directory is not the Secret
    // volume's world-writable one, which sshd's StrictModes refuses.
    let mounts: Vec<&Value> = wired_container(&master)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == "dljob-ssh")
        .collect();
    let file = |f: &str| json!({"name": "dljob-ssh", "mountPath": format!("/root/.ssh/{f}"), "subPath": f, "readOnly": true});
    assert_eq!(
        mounts,
        [
            &file("id_ed25519"),
            &file("id_ed25519.pub"),
            &file("authorized_keys"),
            &file("config")
        ]
    );
}

#[test]
fn cifar10_gpu_worker_gets_the_nvidia_libraries() {
    let ex = example("mxnet-cifar10-gpu");
    let worker = controller_pod(&ex, "cifar10-worker", 1);
    assert_eq!(worker["spec"]["hostname"], "cifar10-worker-1");
    assert_eq!(env(&worker, "DMLC_WORKER_ID").as_deref(), Some("1"));
    assert_eq!(env(&worker, "DMLC_NUM_WORKER").as_deref(), Some("2"));
    // Found through CUDA images' own ENV LD_LIBRARY_PATH, which is left
    // as it is.
    assert_eq!(env(&worker, "LD_LIBRARY_PATH"), None);
    let volumes = worker["spec"]["volumes"].as_array().expect("volumes");
    assert!(
        volumes.contains(&json!({
            "name": "nvidia-libraries",
            "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64", "type": "Directory"}
        })),
        "{volumes:?}"
    );
    let mounts = wired_container(&worker)["volumeMounts"]
        .as_array()
        .expect("mounts");
    assert!(
        mounts.contains(&json!({
            "name": "nvidia-libraries",
            "mountPath": "/usr/local/nvidia/lib64",
            "readOnly": true
        })),
        "{mounts:?}"
    );
    // The scheduler requests no GPU and gets no host libraries.
    let scheduler = ex.mutated("cifar10-scheduler");
    assert_eq!(env(&scheduler, "LD_LIBRARY_PATH"), None);
    assert!(!scheduler["spec"]["volumes"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v["name"] == "nvidia-libraries")));
}

#[test]
fn pytorch_ddp_worker_rank_counts_the_master_first() {
    let ex = example("pytorch-ddp");
    let w1 = controller_pod(&ex, "pytorch-ddp-worker", 1);
    let get = |n| env(&w1, n);
    assert_eq!(
        get("MASTER_ADDR").as_deref(),
        Some("pytorch-ddp-master-0.pytorch-ddp.default.svc")
    );
    assert_eq!(get("MASTER_PORT").as_deref(), Some("23456"));
    assert_eq!(get("WORLD_SIZE").as_deref(), Some("3"));
    assert_eq!(get("RANK").as_deref(), Some("2"));
    assert_eq!(get("PET_NODE_RANK").as_deref(), Some("2"));
    assert_eq!(get("PET_NPROC_PER_NODE").as_deref(), Some("1"));
    assert_eq!(w1["spec"]["hostname"], "pytorch-ddp-worker-1");
    let master = controller_pod(&ex, "pytorch-ddp-master", 0);
    assert_eq!(env(&master, "RANK").as_deref(), Some("0"));
}

#[test]
fn pytorch_elastic_infers_the_topology_and_uses_rendezvous() {
    let ex = example("pytorch-elastic");
    let job = ex.mutated("imagenet-elastic");
    assert_eq!(
        job["metadata"]["annotations"]["dljob.dev/replicas"],
        "worker=3"
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["annotations"]["dljob.dev/replicas"],
        "worker=3"
    );
    let w2 = controller_pod(&ex, "imagenet-elastic", 2);
    let get = |n| env(&w2, n);
    assert_eq!(get("PET_NNODES").as_deref(), Some("2:4"));
    assert_eq!(get("PET_RDZV_BACKEND").as_deref(), Some("c10d"));
    assert_eq!(
        get("PET_RDZV_ENDPOINT").as_deref(),
        Some("imagenet-elastic-worker-0.imagenet-elastic.default.svc:23456")
    );
    assert_eq!(get("PET_RDZV_ID").as_deref(), Some("imagenet-elastic"));
    assert_eq!(get("PET_NPROC_PER_NODE").as_deref(), Some("2"));
    // torchrun assigns ranks at rendezvous.
    assert_eq!(get("RANK"), None);
    assert_eq!(w2["spec"]["hostname"], "imagenet-elastic-worker-2");
}

#[test]
fn horovod_hostfile_lists_the_workers_only() {
    let ex = example("horovod");
    let want = "horovod-worker-0.horovod.default.svc slots=1\n\
                horovod-worker-1.horovod.default.svc slots=1\n";
    let launcher = controller_pod(&ex, "horovod-launcher", 0);
    assert_eq!(hostfile(&launcher), want);
    assert_eq!(launcher["spec"]["hostname"], "horovod-launcher-0");
    assert_eq!(
        env(&launcher, "K_MPI_JOB_ROLE").as_deref(),
        Some("launcher")
    );
    let worker = controller_pod(&ex, "horovod-worker", 0);
    assert_eq!(
        worker["metadata"]["annotations"].get("dljob.dev/hostfile"),
        None
    );
}

#[test]
fn jax_processes_find_worker_zero() {
    let ex = example("jax");
    let p1 = controller_pod(&ex, "jax-psum", 1);
    assert_eq!(
        env(&p1, "JAX_COORDINATOR_ADDRESS").as_deref(),
        Some("jax-psum-worker-0.jax-psum.default.svc:6666")
    );
    assert_eq!(env(&p1, "JAX_NUM_PROCESSES").as_deref(), Some("2"));
    assert_eq!(env(&p1, "JAX_PROCESS_ID").as_deref(), Some("1"));
}

#[test]
fn paddle_pods_take_their_index_from_the_annotation() {
    let ex = example("paddle");
    let p1 = ex.mutated("paddle-check-1");
    assert_eq!(p1["spec"]["hostname"], "paddle-check-worker-1");
    assert_eq!(
        env(&p1, "PADDLE_MASTER").as_deref(),
        Some("paddle-check-worker-0.paddle-check.default.svc:36543")
    );
    assert_eq!(env(&p1, "PADDLE_NNODES").as_deref(), Some("2"));
}

#[test]
fn generic_workers_can_reach_the_head() {
    let ex = example("generic-ray");
    let w0 = controller_pod(&ex, "ray-squares-worker", 0);
    assert_eq!(
        env(&w0, "DLJOB_COORDINATOR").as_deref(),
        Some("ray-squares-head-0.ray-squares.default.svc")
    );
    assert_eq!(env(&w0, "DLJOB_RANK").as_deref(), Some("1"));
    assert_eq!(env(&w0, "DLJOB_WORLD_SIZE").as_deref(), Some("3"));
    let ports = &wired_container(&w0)["ports"];
    assert_eq!(
        ports,
        &json!([{"name": "dljob", "containerPort": 29500, "protocol": "TCP"}])
    );
}

/// ARCHITECTURE.md §1: "when a worker's framework container requests N GPUs and
/// slots ≠ N, admission warns and names the annotation to set". For a
/// worker StatefulSet or Job the only admission the user sees is the
/// workload's own (its pods are created by the controller), so the warning
/// comes with the workload.
#[test]
fn chainermn_worker_statefulset_without_slots_warns_at_its_own_admission() {
    let ex = example("chainermn");
    let (kind, value) = ex.member("chainermn-worker");
    let mut without_slots = value.clone();
    without_slots["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/slots");
    let m = mutate::mutate(
        Subject::new(kind, &without_slots, Some(NS)),
        Operation::Create,
        &ex.config,
    )
    .expect("accepted")
    .expect("member");
    assert_eq!(
        m.warnings,
        vec!["the worker's framework container requests 2 GPUs but the hostfile gives each worker 1 slot; set dljob.dev/slots: \"2\" on every member"]
    );

    // Its pods are created by the controller, where a warning reaches
    // nobody: they do not repeat it.
    let (_, pod) = controller_pods(kind, &m.object).remove(0);
    let p = mutate::mutate(
        Subject::new(Kind::Pod, &pod, Some(NS)),
        Operation::Create,
        &ex.config,
    )
    .expect("accepted")
    .expect("member");
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}
