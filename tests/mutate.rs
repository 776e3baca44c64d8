//! The mutation of ARCHITECTURE.md §2 on real-shaped objects: identity, env, ports,
//! hostfile, accelerators, workload templates, idempotence and the patch.
//! Expected values are written by hand from the contract.

use dljob::config::Config;
use dljob::mutate::{mutate, mutate_patch, patch, Mutation, Operation};
use dljob::object::Kind;
use dljob::object::Subject;
use dljob::violation::Violations;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission/");

/// The `object` of a captured AdmissionReview.
fn fixture(name: &str) -> (Value, Option<Value>) {
    let text = std::fs::read_to_string(format!("{FIXTURES}{name}"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let review: Value = serde_json::from_str(&text).unwrap();
    let req = &review["request"];
    let old = req.get("oldObject").filter(|o| !o.is_null()).cloned();
    (req["object"].clone(), old)
}

fn create(kind: Kind, obj: &Value, config: &Config) -> Mutation {
    mutate(
        Subject::new(kind, obj, Some("team-a")),
        Operation::Create,
        config,
    )
    .unwrap_or_else(|v| panic!("refused: {v}"))
    .expect("a member")
}

/// The violations for a pod the core refuses.
fn refused(pod: &Value) -> Violations {
    mutate(
        Subject::new(Kind::Pod, pod, Some("team-a")),
        Operation::Create,
        &Config::default(),
    )
    .expect_err("refused")
}

fn env_of(pod: &Value, container: usize) -> Vec<(String, String)> {
    pod["spec"]["containers"][container]["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    Some((
                        e["name"].as_str()?.to_owned(),
                        e.get("value")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn env(pod: &Value, name: &str) -> Option<String> {
    env_of(pod, 0)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// A plain pod member.
fn pod(job: &str, role: &str, framework: &str, replicas: &str, extra_annotations: Value) -> Value {
    let mut annotations = json!({"dljob.dev/framework": framework, "dljob.dev/replicas": replicas});
    for (k, v) in extra_annotations.as_object().unwrap() {
        annotations[k] = v.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{job}-{role}"),
            "namespace": "ml",
            "labels": {"dljob.dev/job": job, "dljob.dev/role": role},
            "annotations": annotations
        },
        "spec": {"containers": [{"name": framework, "image": "img"}]}
    })
}

fn assert_idempotent(kind: Kind, mutated: &Value, config: &Config) {
    let again = create(kind, mutated, config);
    assert_eq!(&again.object, mutated, "second mutation changed the object");
    assert!(patch(mutated, &again.object).0.is_empty());
    assert!(
        again.warnings.is_empty(),
        "second mutation warned: {:?}",
        again.warnings
    );
}

fn assert_patch_reproduces(original: &Value, mutated: &Value) {
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &patch(original, mutated).to_json_patch()).unwrap();
    assert_eq!(&patched, mutated);
}

#[test]
fn tensorflow_chief_pod_gets_identity_tf_config_and_port_but_no_hostfile() {
    let cfg = Config::default();
    let original = pod(
        "mnist",
        "chief",
        "tensorflow",
        "chief=1,worker=2,ps=1",
        json!({}),
    );
    let m = create(Kind::Pod, &original, &cfg);
    let p = &m.object;
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_eq!(p["spec"]["hostname"], "mnist-chief-0");
    assert_eq!(p["spec"]["subdomain"], "mnist");
    let tf: Value = serde_json::from_str(&env(p, "TF_CONFIG").unwrap()).unwrap();
    assert_eq!(
        tf,
        json!({
            "cluster": {
                "chief": ["mnist-chief-0.mnist.ml.svc:2222"],
                "worker": ["mnist-worker-0.mnist.ml.svc:2222", "mnist-worker-1.mnist.ml.svc:2222"],
                "ps": ["mnist-ps-0.mnist.ml.svc:2222"]
            },
            "task": {"type": "chief", "index": 0},
            "environment": "cloud"
        })
    );
    assert_eq!(env(p, "DLJOB_JOB").as_deref(), Some("mnist"));
    assert_eq!(env(p, "DLJOB_ROLE").as_deref(), Some("chief"));
    assert_eq!(env(p, "DLJOB_INDEX").as_deref(), Some("0"));
    assert_eq!(env(p, "DLJOB_RANK").as_deref(), Some("0"));
    assert_eq!(env(p, "DLJOB_WORLD_SIZE").as_deref(), Some("4"));
    assert_eq!(
        env(p, "DLJOB_REPLICAS").as_deref(),
        Some("chief=1,worker=2,ps=1")
    );
    assert_eq!(
        env(p, "DLJOB_HOST_PATTERN").as_deref(),
        Some("mnist-{role}-{index}.mnist.ml.svc")
    );
    assert_eq!(
        env(p, "DLJOB_COORDINATOR").as_deref(),
        Some("mnist-chief-0.mnist.ml.svc")
    );
    assert_eq!(
        p["spec"]["containers"][0]["ports"],
        json!([{"name": "dljob", "containerPort": 2222, "protocol": "TCP"}])
    );
    // TensorFlow reads no hostfile: none is injected, nor its volume.
    assert_eq!(p["metadata"]["annotations"].get("dljob.dev/hostfile"), None);
    assert_eq!(p["spec"].get("volumes"), None);
    assert_eq!(p["spec"]["containers"][0].get("volumeMounts"), None);
    assert_idempotent(Kind::Pod, p, &cfg);
    assert_patch_reproduces(&original, p);
}

#[test]
fn cluster_domain_and_port_overrides_reach_the_hosts() {
    let cfg = Config::from_yaml("clusterDomain: cluster.local\nports: {pytorch: 3000}\n").unwrap();
    let m = create(
        Kind::Pod,
        &pod(
            "ddp",
            "worker",
            "pytorch",
            "worker=2",
            json!({"dljob.dev/index": "1"}),
        ),
        &cfg,
    );
    assert_eq!(
        env(&m.object, "MASTER_ADDR").as_deref(),
        Some("ddp-worker-0.ddp.ml.svc.cluster.local")
    );
    assert_eq!(env(&m.object, "MASTER_PORT").as_deref(), Some("3000"));
    assert_eq!(env(&m.object, "RANK").as_deref(), Some("1"));
    let m = create(
        Kind::Pod,
        &pod(
            "ddp",
            "worker",
            "pytorch",
            "worker=2",
            json!({"dljob.dev/index": "1", "dljob.dev/port": "4000"}),
        ),
        &cfg,
    );
    assert_eq!(env(&m.object, "MASTER_PORT").as_deref(), Some("4000"));
}

#[test]
fn generate_name_pod_takes_the_request_namespace() {
    // Captured: a generateName pod with an empty name in the mutating review.
    let (mut obj, _) = fixture("mutate-create-pod-ddp-worker.json");
    assert!(obj["metadata"].get("name").is_none());
    obj["metadata"].as_object_mut().unwrap().remove("namespace");
    let m = create(Kind::Pod, &obj, &Config::default());
    assert_eq!(m.object["spec"]["hostname"], "ddp-worker-0");
    assert_eq!(
        env(&m.object, "MASTER_ADDR").as_deref(),
        Some("ddp-worker-0.ddp.team-a.svc")
    );
    assert_eq!(env(&m.object, "WORLD_SIZE").as_deref(), Some("1"));
    assert_eq!(env(&m.object, "RANK").as_deref(), Some("0"));
    assert_eq!(
        env(&m.object, "PET_NPROC_PER_NODE").as_deref(),
        Some("auto")
    );
    assert_patch_reproduces(&obj, &m.object);
}

#[test]
fn statefulset_pod_index_is_its_ordinal() {
    let (obj, _) = fixture("mutate-create-pod-resnet-worker-1.json");
    let cfg = Config::default();
    let m = create(Kind::Pod, &obj, &cfg);
    assert_eq!(m.object["spec"]["hostname"], "resnet-worker-1");
    assert_eq!(m.object["spec"]["subdomain"], "resnet");
    let tf: Value = serde_json::from_str(&env(&m.object, "TF_CONFIG").unwrap()).unwrap();
    assert_eq!(tf["task"], json!({"type": "worker", "index": 1}));
    assert_eq!(
        tf["cluster"],
        json!({
            "chief": ["resnet-chief-0.resnet.team-a.svc:2222"],
            "worker": ["resnet-worker-0.resnet.team-a.svc:2222", "resnet-worker-1.resnet.team-a.svc:2222"],
            "ps": ["resnet-ps-0.resnet.team-a.svc:2222"]
        })
    );
    assert_eq!(env(&m.object, "DLJOB_RANK").as_deref(), Some("2"));
    assert_idempotent(Kind::Pod, &m.object, &cfg);
    assert_patch_reproduces(&obj, &m.object);

    // Without the pod-index label the name suffix is the ordinal.
    let mut no_label = obj.clone();
    no_label["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("apps.kubernetes.io/pod-index");
    let m = create(Kind::Pod, &no_label, &cfg);
    assert_eq!(m.object["spec"]["hostname"], "resnet-worker-1");
    assert_eq!(env(&m.object, "DLJOB_INDEX").as_deref(), Some("1"));
}

#[test]
fn statefulset_pod_beyond_the_topology_is_refused() {
    // Captured: the pod a StatefulSet created after replicas went 2 → 3.
    let (obj, _) = fixture("mutate-create-pod-resnet-worker-2.json");
    let err = refused(&obj);
    assert_eq!(
        err.messages(),
        vec!["StatefulSet pod index 2 is out of range: role \"worker\" has 2 replicas in dljob.dev/replicas \"chief=1,worker=2,ps=1\"; scale StatefulSet \"resnet-worker\" back to 2, or change the topology on every member of the job"]
    );
}

#[test]
fn indexed_job_pod_takes_its_completion_index() {
    // Captured Job pods lack dljob.dev/replicas because the captured Job's
    // template was not mutated: dljob says so.
    let (obj, _) = fixture("mutate-create-pod-gpt-worker-1.json");
    let err = refused(&obj);
    assert_eq!(err.0.len(), 1);
    assert!(
        err.0[0]
            .message
            .starts_with("annotation dljob.dev/replicas is missing on a pod created by a Job"),
        "{err}"
    );

    // With the annotation the mutated template carries, the pod is wired.
    let mut pod = obj.clone();
    pod["metadata"]["annotations"]["dljob.dev/replicas"] = json!("worker=2");
    let m = create(Kind::Pod, &pod, &Config::default());
    assert_eq!(m.object["spec"]["hostname"], "gpt-worker-1");
    assert_eq!(m.object["spec"]["subdomain"], "gpt");
    assert_eq!(
        env(&m.object, "JAX_COORDINATOR_ADDRESS").as_deref(),
        Some("gpt-worker-0.gpt.team-a.svc:6666")
    );
    assert_eq!(env(&m.object, "JAX_NUM_PROCESSES").as_deref(), Some("2"));
    assert_eq!(env(&m.object, "JAX_PROCESS_ID").as_deref(), Some("1"));
    // The user's own env var stays, untouched, after dljob's (so that it
    // could name them as $(NAME)).
    let env = m.object["spec"]["containers"][0]["env"].as_array().unwrap();
    let user = &pod["spec"]["containers"][0]["env"][0];
    assert_eq!(user["name"], "JOB_COMPLETION_INDEX");
    assert_eq!(env.last(), Some(user));
    assert_patch_reproduces(&pod, &m.object);
}

#[test]
fn indexed_job_gets_inferred_topology_on_itself_and_its_template() {
    let (obj, _) = fixture("mutate-create-job-gpt-worker.json");
    let m = create(Kind::Job, &obj, &Config::default());
    assert_eq!(
        m.object["metadata"]["annotations"]["dljob.dev/replicas"],
        "worker=2"
    );
    let tpl = &m.object["spec"]["template"]["metadata"];
    assert_eq!(tpl["annotations"]["dljob.dev/replicas"], "worker=2");
    assert_eq!(tpl["annotations"]["dljob.dev/framework"], "jax");
    assert_eq!(
        tpl["labels"],
        json!({"dljob.dev/job": "gpt", "dljob.dev/role": "worker"})
    );
    let ops = serde_json::to_value(patch(&obj, &m.object)).unwrap();
    assert_eq!(
        ops,
        json!([
            // The port and gang the config gave, written where the pods
            // read them (JAX's 6666, no gang).
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1gang", "value": "none"},
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1port", "value": "6666"},
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1replicas", "value": "worker=2"},
            {"op": "add", "path": "/spec/template/metadata/annotations/dljob.dev~1gang", "value": "none"},
            {"op": "add", "path": "/spec/template/metadata/annotations/dljob.dev~1port", "value": "6666"},
            {"op": "add", "path": "/spec/template/metadata/annotations/dljob.dev~1replicas", "value": "worker=2"}
        ])
    );
    assert_idempotent(Kind::Job, &m.object, &Config::default());
}

/// A member Job gets a `podFailurePolicy` where dljob decides what an exit
/// means: the framework container's permanent exit fails the Job at once,
/// so the Job controller does not replace the pod and train again while
/// dljob fails the job. Not under restart scope Job (a whole-job restart
/// needs the Job to run again), not over the user's own policy, not for
/// pods that restart in place, and only at creation (it is immutable).
#[test]
fn member_jobs_fail_on_a_permanent_exit_instead_of_retrying_it() {
    let (obj, _) = fixture("mutate-create-job-gpt-worker.json");
    let with = |keys: &[(&str, &str)]| {
        let mut job = obj.clone();
        for (k, v) in keys {
            job["metadata"]["annotations"][*k] = json!(v);
        }
        create(Kind::Job, &job, &Config::default()).object
    };
    // JAX restarts the whole job on a retryable exit (scope Job): none.
    assert_eq!(with(&[])["spec"].get("podFailurePolicy"), None);
    let never = with(&[("dljob.dev/restart-policy", "Never")]);
    assert_eq!(
        never["spec"]["podFailurePolicy"],
        json!({"rules": [{"action": "FailJob",
            "onExitCodes": {"containerName": "jax", "operator": "NotIn", "values": [0]}}]})
    );
    let per_pod = with(&[("dljob.dev/restart-scope", "Pod")]);
    let rule = &per_pod["spec"]["podFailurePolicy"]["rules"][0];
    assert_eq!(rule["action"], "FailJob");
    assert_eq!(rule["onExitCodes"]["operator"], "In");
    assert_eq!(rule["onExitCodes"]["containerName"], "jax");
    let codes: Vec<u64> = rule["onExitCodes"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(codes, (1..=127).collect::<Vec<u64>>());
    // The API server's own limits on the field: at most 255 values, sorted
    // and unique, 0 not among them with In; the pods never restart in place.
    assert!(codes.len() <= 255 && codes.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        per_pod["spec"]["template"]["spec"]["restartPolicy"],
        "Never"
    );
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(per_pod.clone()).unwrap();
    assert!(job.spec.unwrap().pod_failure_policy.is_some());
    assert_idempotent(Kind::Job, &per_pod, &Config::default());
    // The user's own policy is kept as it is.
    let mut own = obj.clone();
    own["metadata"]["annotations"]["dljob.dev/restart-policy"] = json!("Never");
    let theirs =
        json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    own["spec"]["podFailurePolicy"] = theirs.clone();
    assert_eq!(
        create(Kind::Job, &own, &Config::default()).object["spec"]["podFailurePolicy"],
        theirs
    );
    // Pods restarted in place by their kubelet: the Job API refuses a
    // podFailurePolicy there.
    let mut on_failure = obj.clone();
    on_failure["metadata"]["annotations"]["dljob.dev/restart-policy"] = json!("Never");
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    assert_eq!(
        create(Kind::Job, &on_failure, &Config::default()).object["spec"].get("podFailurePolicy"),
        None
    );
    // An update leaves the (immutable) field alone.
    let mut old = obj.clone();
    old["metadata"]["annotations"]["dljob.dev/restart-policy"] = json!("Never");
    let updated = mutate(
        Subject::new(Kind::Job, &old, Some("team-a")),
        Operation::Update,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(updated.object["spec"].get("podFailurePolicy"), None);
}

#[test]
fn statefulset_template_gets_job_labels_service_and_parallel_start() {
    let sts = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "w",
            "namespace": "ml",
            "labels": {"dljob.dev/job": "bert", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/backoff-limit": "5"}
        },
        "spec": {
            "replicas": 3,
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "pytorch", "image": "img"}]}
            }
        }
    });
    let m = create(Kind::StatefulSet, &sts, &Config::default());
    let ops = serde_json::to_value(patch(&sts, &m.object)).unwrap();
    assert_eq!(
        ops,
        json!([
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1gang", "value": "none"},
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1port", "value": "23456"},
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1replicas", "value": "worker=3"},
            {"op": "replace", "path": "/spec/podManagementPolicy", "value": "Parallel"},
            {"op": "add", "path": "/spec/serviceName", "value": "bert"},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {
                "dljob.dev/framework": "pytorch",
                "dljob.dev/backoff-limit": "5",
                "dljob.dev/replicas": "worker=3",
                "dljob.dev/gang": "none",
                "dljob.dev/port": "23456"
            }},
            {"op": "add", "path": "/spec/template/metadata/labels/dljob.dev~1job", "value": "bert"},
            {"op": "add", "path": "/spec/template/metadata/labels/dljob.dev~1role", "value": "worker"}
        ])
    );
    assert_idempotent(Kind::StatefulSet, &m.object, &Config::default());
    assert_patch_reproduces(&sts, &m.object);

    let mut ordered = sts.clone();
    ordered["metadata"]["annotations"]["dljob.dev/ordered-start"] = json!("true");
    let m = create(Kind::StatefulSet, &ordered, &Config::default());
    assert_eq!(m.object["spec"]["podManagementPolicy"], "OrderedReady");
}

/// The captured StatefulSet says everything but the port and gang it is
/// wired with: those are written, on itself and on its template (TensorFlow's
/// 2222, no gang), and nothing else.
#[test]
fn captured_statefulset_gets_only_its_resolved_port_and_gang() {
    let (obj, _) = fixture("mutate-create-statefulset-resnet-worker.json");
    let m = create(Kind::StatefulSet, &obj, &Config::default());
    assert_eq!(
        serde_json::to_value(patch(&obj, &m.object)).unwrap(),
        json!([
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1gang", "value": "none"},
            {"op": "add", "path": "/metadata/annotations/dljob.dev~1port", "value": "2222"},
            {"op": "add", "path": "/spec/template/metadata/annotations/dljob.dev~1gang", "value": "none"},
            {"op": "add", "path": "/spec/template/metadata/annotations/dljob.dev~1port", "value": "2222"}
        ])
    );
    // A StatefulSet updated later gets neither: its template would change
    // and roll its pods.
    let updated = mutate_patch(
        Subject::new(Kind::StatefulSet, &obj, Some("team-a")),
        Operation::Update,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    assert!(updated.patch.0.is_empty(), "{:?}", updated.patch);
}

#[test]
fn user_env_port_and_volume_win_and_are_named_in_warnings() {
    let mut p = pod("ddp", "master", "pytorch", "master=1,worker=1", json!({}));
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "MASTER_PORT", "value": "1234"},
        {"name": "WORLD_SIZE", "value": "2"}
    ]);
    p["spec"]["containers"][0]["ports"] = json!([{"name": "dljob", "containerPort": 8080}]);
    let m = create(Kind::Pod, &p, &Config::default());
    assert_eq!(env(&m.object, "MASTER_PORT").as_deref(), Some("1234"));
    assert_eq!(env(&m.object, "WORLD_SIZE").as_deref(), Some("2"));
    assert_eq!(
        m.warnings,
        vec![
            "container \"pytorch\": env MASTER_PORT is set by the user and kept; dljob would set \"23456\"",
            "container \"pytorch\": port \"dljob\" is declared by the user as 8080 and kept; dljob would declare 23456",
        ]
    );
    // WORLD_SIZE "2" equals what dljob computes: not a conflict, no warning.
    assert!(!m.warnings.iter().any(|w| w.contains("WORLD_SIZE")));

    // A volume named like dljob's hostfile volume, on the pod that gets one.
    let mut launcher = pod("hvd", "launcher", "mpi", "launcher=1,worker=1", json!({}));
    launcher["spec"]["volumes"] = json!([{"name": "dljob-hostfile", "emptyDir": {}}]);
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert_eq!(
        m.warnings,
        vec![
            "volume \"dljob-hostfile\" is defined by the user and kept; dljob would define it as {\"downwardAPI\":{\"items\":[{\"fieldRef\":{\"fieldPath\":\"metadata.annotations['dljob.dev/hostfile']\"},\"path\":\"hostfile\"}]},\"name\":\"dljob-hostfile\"}",
        ]
    );
    assert_eq!(
        m.object["spec"]["volumes"][0],
        json!({"name": "dljob-hostfile", "emptyDir": {}})
    );
}

/// Where container 0 mounts its volumes, in order.
fn mount_paths(pod: &Value) -> Vec<&str> {
    pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["mountPath"].as_str().unwrap())
        .collect()
}

/// The names of container 0's env, in order.
fn env_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn injected_env_comes_before_the_users_so_that_theirs_can_name_it() {
    // An image reading PROCESS_ID: the user aliases dljob's var, which
    // Kubernetes expands only from a var earlier in the list.
    let mut p = pod(
        "j",
        "worker",
        "jax",
        "worker=2",
        json!({"dljob.dev/index": "1"}),
    );
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "PROCESS_ID", "value": "$(JAX_PROCESS_ID)"},
        {"name": "JAX_NUM_PROCESSES", "value": "2"}
    ]);
    let m = create(Kind::Pod, &p, &Config::default());
    let names = env_names(&m.object);
    let at = |n: &str| names.iter().position(|x| x == n).unwrap();
    assert!(at("JAX_PROCESS_ID") < at("PROCESS_ID"), "{names:?}");
    assert!(
        at("JAX_COORDINATOR_ADDRESS") < at("PROCESS_ID"),
        "{names:?}"
    );
    // The user's own value of a var dljob sets is still the one kept, once.
    assert_eq!(
        names.iter().filter(|n| *n == "JAX_NUM_PROCESSES").count(),
        1
    );
    assert_eq!(
        env(&m.object, "PROCESS_ID").as_deref(),
        Some("$(JAX_PROCESS_ID)")
    );
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
    assert_patch_reproduces(&p, &m.object);

    // A var of dljob's that names one the user sets goes after it.
    let mut p = pod("j", "master", "paddle", "master=1,worker=1", json!({}));
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs[0].ip"}}}
    ]);
    let m = create(Kind::Pod, &p, &Config::default());
    let names = env_names(&m.object);
    let at = |n: &str| names.iter().position(|x| x == n).unwrap();
    assert!(at("POD_IP") < at("PADDLE_MASTER"), "{names:?}");
    assert!(at("PADDLE_NNODES") < at("POD_IP"), "{names:?}");
}

#[test]
fn accelerator_config_applies_to_every_container_requesting_the_resource() {
    let cfg = Config::from_yaml(
        "accelerators:\n  nvidia.com/gpu:\n    volumes:\n    - {name: nvidia-libraries, hostPath: /home/kubernetes/bin/nvidia/lib64, mountPath: /usr/local/nvidia/lib64}\n    env:\n    - {name: LD_LIBRARY_PATH, value: /usr/local/nvidia/lib64}\n",
    )
    .unwrap();
    let mut p = pod(
        "cifar",
        "worker",
        "mxnet",
        "scheduler=1,server=1,worker=1",
        json!({}),
    );
    p["spec"]["containers"] = json!([
        {"name": "mxnet", "image": "mx", "resources": {"limits": {"nvidia.com/gpu": 1}}},
        {"name": "sidecar", "image": "s"},
        {"name": "eval", "image": "e", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    ]);
    let m = create(Kind::Pod, &p, &cfg);
    let lib_mount = json!({"name": "nvidia-libraries", "mountPath": "/usr/local/nvidia/lib64", "readOnly": true});
    let c = &m.object["spec"]["containers"];
    assert!(c[0]["volumeMounts"]
        .as_array()
        .unwrap()
        .contains(&lib_mount));
    assert_eq!(c[2]["volumeMounts"], json!([lib_mount]));
    assert_eq!(
        c[2]["env"],
        json!([{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}])
    );
    assert!(c[1].get("volumeMounts").is_none() && c[1].get("env").is_none());
    let volumes = m.object["spec"]["volumes"].as_array().unwrap();
    let libs: Vec<&Value> = volumes
        .iter()
        .filter(|v| v["name"] == "nvidia-libraries")
        .collect();
    assert_eq!(
        libs,
        vec![
            &json!({"name": "nvidia-libraries", "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64", "type": "Directory"}})
        ]
    );
    // The image's own LD_LIBRARY_PATH is replaced: said once for the pod,
    // however many containers get it. The pod now needs Pod Security's
    // privileged level: said once, when the volume is added.
    assert_eq!(
        m.warnings,
        vec![
            "the webhook's config (accelerators) sets LD_LIBRARY_PATH: in every container it is injected into, that value replaces the image's own LD_LIBRARY_PATH (its ENV) whole, and dljob cannot see what the image had (Kubernetes expands $(LD_LIBRARY_PATH) only from the container's earlier env entries, not the image's). CUDA images' own ENV LD_LIBRARY_PATH already lists /usr/local/nvidia/lib64: mount the driver libraries there and leave the env out.",
            "dljob mounts the node's /home/kubernetes/bin/nvidia/lib64 (read-only hostPath, the accelerators of the webhook's config): Pod Security admits this pod only where the namespace's level is privileged, not baseline or restricted",
        ]
    );
    // A workload's pods are created by its controller: said when the
    // workload itself is applied, once.
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "cifar-worker", "namespace": "ml",
            "labels": {"dljob.dev/job": "cifar", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "mxnet", "dljob.dev/replicas": "scheduler=1,server=1,worker=1"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": p["spec"]["containers"].clone()}}}
    });
    let w = create(Kind::StatefulSet, &sts, &cfg);
    assert_eq!(
        w.warnings
            .iter()
            .filter(|w| w.contains("replaces the image's own LD_LIBRARY_PATH"))
            .count(),
        1,
        "{:?}",
        w.warnings
    );
    // Where the user set it in every GPU container, dljob injects none and
    // says only that the user's value is kept.
    let mut own = p.clone();
    for i in [0, 2] {
        own["spec"]["containers"][i]["env"] =
            json!([{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64:/opt/lib"}]);
    }
    let kept = create(Kind::Pod, &own, &cfg);
    assert!(
        kept.warnings
            .iter()
            .all(|w| !w.contains("replaces the image's own")),
        "{:?}",
        kept.warnings
    );
    // A zero count is no request, however it is written.
    for zero in ["0", "0m", "0.0", "0k"] {
        let mut idle = p.clone();
        idle["spec"]["containers"] = json!([{"name": "mxnet", "image": "mx", "resources": {"limits": {"nvidia.com/gpu": zero}}}]);
        let m = create(Kind::Pod, &idle, &cfg);
        assert!(
            !m.object["spec"]["volumes"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v["name"] == "nvidia-libraries")),
            "{zero}: {}",
            m.object["spec"]
        );
        assert!(m.warnings.is_empty(), "{zero}: {:?}", m.warnings);
    }
    assert!(env_of(&m.object, 0)
        .contains(&("LD_LIBRARY_PATH".into(), "/usr/local/nvidia/lib64".into())));
    assert_idempotent(Kind::Pod, &m.object, &cfg);
    assert_patch_reproduces(&p, &m.object);
}

#[test]
fn mpi_worker_gets_ssh_secret_and_a_slots_warning_and_the_launcher_the_hostfile() {
    let mut p = pod(
        "hvd",
        "worker",
        "mpi",
        "launcher=1,worker=2",
        json!({"dljob.dev/index": "1", "dljob.dev/ssh-path": "/home/mpi/.ssh"}),
    );
    p["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "4"}});
    let m = create(Kind::Pod, &p, &Config::default());
    // Workers run sshd: no hostfile, no hostfile settings.
    assert_eq!(
        m.object["metadata"]["annotations"].get("dljob.dev/hostfile"),
        None
    );
    // Their sshd reads authorized_keys; the private key stays with the
    // launcher.
    assert_eq!(
        m.object["spec"]["volumes"],
        json!([{"name": "dljob-ssh", "secret": {
            "secretName": "hvd-ssh", "defaultMode": 384,
            "items": [{"key": "authorized_keys", "path": "authorized_keys"}]
        }}])
    );
    assert_eq!(
        m.object["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "dljob-ssh", "mountPath": "/home/mpi/.ssh/authorized_keys", "subPath": "authorized_keys", "readOnly": true}])
    );
    assert_eq!(env(&m.object, "K_MPI_JOB_ROLE").as_deref(), Some("worker"));
    assert_eq!(env(&m.object, "OMPI_MCA_orte_default_hostfile"), None);
    assert_eq!(
        m.warnings,
        vec!["the worker's framework container requests 4 GPUs but the hostfile gives each worker 1 slot; set dljob.dev/slots: \"4\" on every member"]
    );
    // With slots set to the GPU count the warning goes and slots reach the
    // launcher's hostfile.
    p["metadata"]["annotations"]["dljob.dev/slots"] = json!("4");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    let launcher = pod(
        "hvd",
        "launcher",
        "mpi",
        "launcher=1,worker=2",
        json!({"dljob.dev/slots": "4"}),
    );
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert_eq!(
        m.object["metadata"]["annotations"]["dljob.dev/hostfile"],
        "hvd-worker-0.hvd.ml.svc slots=4\nhvd-worker-1.hvd.ml.svc slots=4\n"
    );
    // The launcher runs mpirun: the whole Secret (key, client config).
    let ssh = m.object["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dljob-ssh")
        .unwrap();
    assert_eq!(
        ssh,
        &json!({"name": "dljob-ssh", "secret": {"secretName": "hvd-ssh", "defaultMode": 384}})
    );
    assert_eq!(
        env(&m.object, "OMPI_MCA_orte_default_hostfile").as_deref(),
        Some("/etc/dljob/hostfile")
    );
    assert_eq!(
        env(&m.object, "OMPI_MCA_orte_set_default_slots").as_deref(),
        Some("4")
    );
}

/// The mpi launcher and the chainer master wait for their workers: each
/// gets dljob's scheduling gate (kept beside the user's own), the workers
/// none, and a second mutation adds nothing.
#[test]
fn mpi_operator_compat_lays_the_secret_out_as_the_operators_images_read_it() {
    let compat = json!({
        "dljob.dev/compat": "mpi-operator",
        "dljob.dev/ssh-path": "/home/mpiuser/.ssh",
        "dljob.dev/index": "0",
    });
    let mut worker = pod("pi", "worker", "mpi", "launcher=1,worker=2", compat.clone());
    worker["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 1000});
    let m = create(Kind::Pod, &worker, &Config::default());
    // Every member has the key as id_rsa (the images' sshd host key) and
    // the public key twice, readable by the images' non-root user.
    let items = json!([
        {"key": "id_ed25519", "path": "id_rsa"},
        {"key": "id_ed25519.pub", "path": "id_rsa.pub"},
        {"key": "authorized_keys", "path": "authorized_keys"}
    ]);
    assert_eq!(
        m.object["spec"]["volumes"],
        json!([{"name": "dljob-ssh", "secret": {"secretName": "pi-ssh", "defaultMode": 0o644, "items": items}}])
    );
    let mounts = mount_paths(&m.object);
    assert_eq!(
        mounts,
        [
            "/home/mpiuser/.ssh/id_rsa",
            "/home/mpiuser/.ssh/id_rsa.pub",
            "/home/mpiuser/.ssh/authorized_keys"
        ]
    );
    // A worker with no command runs sshd, as the operator's do; no warning
    // about the fsGroup the operator's layout does not need.
    assert_eq!(
        m.object["spec"]["containers"][0]["command"],
        json!(["/usr/sbin/sshd", "-De"])
    );
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
    assert_patch_reproduces(&worker, &m.object);

    // Under /root/.ssh the operator's mode is 0600.
    let mut root = worker.clone();
    root["metadata"]["annotations"]["dljob.dev/ssh-path"] = json!("/root/.ssh");
    root["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("securityContext");
    let m = create(Kind::Pod, &root, &Config::default());
    assert_eq!(
        m.object["spec"]["volumes"][0]["secret"]["defaultMode"],
        0o600
    );

    // The launcher: the hostfile where the operator mounts it too, and the
    // node's GPUs hidden from a launcher that runs no ranks.
    let launcher = pod(
        "pi",
        "launcher",
        "mpi",
        "launcher=1,worker=2",
        json!({
            "dljob.dev/compat": "mpi-operator",
            "dljob.dev/ssh-path": "/home/mpiuser/.ssh",
        }),
    );
    let m = create(Kind::Pod, &launcher, &Config::default());
    let mounts = mount_paths(&m.object);
    assert!(
        mounts.contains(&"/etc/dljob") && mounts.contains(&"/etc/mpi"),
        "{mounts:?}"
    );
    assert_eq!(
        env(&m.object, "NVIDIA_VISIBLE_DEVICES").as_deref(),
        Some("")
    );
    assert_eq!(
        env(&m.object, "NVIDIA_DRIVER_CAPABILITIES").as_deref(),
        Some("")
    );
    assert_eq!(m.object["spec"]["containers"][0].get("command"), None);

    // Without compat: dljob's own layout, no command given.
    let mut plain = worker.clone();
    plain["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/compat");
    let m = create(Kind::Pod, &plain, &Config::default());
    assert_eq!(m.object["spec"]["containers"][0].get("command"), None);
    assert_eq!(
        m.object["spec"]["volumes"][0]["secret"]["defaultMode"],
        0o600
    );
}

#[test]
fn volcano_compat_is_idempotent_and_its_patch_reproduces_the_pod() {
    // Worker 1 of a generic job of two workers and a parameter server.
    let member = |compat: &str| {
        pod(
            "vc",
            "worker",
            "generic",
            "worker=2,ps=1",
            json!({"dljob.dev/compat": compat, "dljob.dev/index": "1"}),
        )
    };
    let p = member("volcano:ps=param-server");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    // Volcano's host names: the pod's under the job's Service.
    assert_eq!(
        env(&m.object, "VC_PARAM_SERVER_HOSTS").as_deref(),
        Some("vc-ps-0.vc")
    );
    assert_eq!(
        env(&m.object, "VC_WORKER_HOSTS").as_deref(),
        Some("vc-worker-0.vc,vc-worker-1.vc")
    );
    assert_eq!(env(&m.object, "VC_PARAM_SERVER_NUM").as_deref(), Some("1"));
    assert_eq!(env(&m.object, "VK_TASK_INDEX").as_deref(), Some("1"));
    // Volcano's files are the job's ConfigMap, mounted whole at
    // /etc/volcano (`dljob mutate --owned` prints what it holds); the pod
    // carries no copy of them.
    let volume = m.object["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dljob-volcano")
        .unwrap();
    assert_eq!(volume["configMap"], json!({"name": "vc-volcano"}));
    let annotations = m.object["metadata"]["annotations"].as_object().unwrap();
    assert!(
        !annotations
            .keys()
            .any(|k| k.starts_with("volcano.dljob.dev/")),
        "{annotations:?}"
    );
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
    assert_patch_reproduces(&p, &m.object);
    // Volcano's names resolve through the pod's DNS search path: a pod
    // without it is told.
    for (dns, warned) in [
        (json!({"dnsPolicy": "Default"}), true),
        (json!({"hostNetwork": true}), true),
        (
            json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}),
            false,
        ),
        (
            json!({"dnsPolicy": "None", "dnsConfig": {"searches": ["ml.svc.cluster.local"]}}),
            false,
        ),
        (
            json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"]}}),
            true,
        ),
    ] {
        let mut q = p.clone();
        for (k, v) in dns.as_object().unwrap() {
            q["spec"][k] = v.clone();
        }
        let m = create(Kind::Pod, &q, &Config::default());
        let said = m.warnings.iter().any(|w| {
            w.contains(
                "Volcano's host names (<host>.vc, in VC_*_HOSTS and /etc/volcano) do not resolve",
            )
        });
        assert_eq!(said, warned, "{dns}: {:?}", m.warnings);
    }
    // Two roles may not be one task, nor may the mapping name a role the
    // job has not.
    for compat in ["volcano:ps=worker", "volcano:chief=c"] {
        let bad = member(compat);
        let err = refused(&bad).to_string();
        assert!(
            err.contains("give each role its own task"),
            "{compat}: {err}"
        );
    }
    // A task name too long for its annotation is refused where it is set.
    let long = format!("volcano:ps={}", "p".repeat(59));
    let bad = member(&long);
    let err = refused(&bad);
    assert!(
        err.to_string().contains("the task at most 58 characters"),
        "{err}"
    );
}

#[test]
fn an_mpi_worker_whose_command_starts_no_sshd_is_warned_about() {
    let mut worker = pod("pi", "worker", "mpi", "launcher=1,worker=1", json!({}));
    worker["spec"]["containers"][0]["command"] = json!(["sleep", "infinity"]);
    let m = create(Kind::Pod, &worker, &Config::default());
    assert_eq!(
        m.warnings,
        vec!["the worker's framework container runs \"sleep infinity\", which does not start sshd; the launcher reaches it over ssh and would be refused: run /usr/sbin/sshd -De (in the foreground), as the MPI operator's workers do"]
    );
    worker["spec"]["containers"][0]["command"] = json!(["/usr/sbin/sshd"]);
    worker["spec"]["containers"][0]["args"] = json!(["-De", "-f", "/home/mpiuser/.sshd_config"]);
    assert!(create(Kind::Pod, &worker, &Config::default())
        .warnings
        .is_empty());
    // An sshd told another port than the job's, which the launcher dials.
    worker["spec"]["containers"][0]["args"] = json!(["-De", "-p", "2222"]);
    assert_eq!(
        create(Kind::Pod, &worker, &Config::default()).warnings,
        vec!["the worker's sshd listens on port 2222 (its command line) but the job's port is 22 (dljob.dev/port), which the launcher's ssh dials: set dljob.dev/port: \"2222\" on every member"]
    );
    worker["metadata"]["annotations"]["dljob.dev/port"] = json!("2222");
    assert!(create(Kind::Pod, &worker, &Config::default())
        .warnings
        .is_empty());
    // Only sshd's own arguments count.
    worker["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", "python t.py -p 8; /usr/sbin/sshd -D"]);
    worker["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("args");
    assert!(create(Kind::Pod, &worker, &Config::default())
        .warnings
        .is_empty());
    worker["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        "mkdir -p /run/sshd; /usr/sbin/sshd -D -oPort=2200;"
    ]);
    worker["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("args");
    assert!(
        create(Kind::Pod, &worker, &Config::default()).warnings[0].contains("listens on port 2200")
    );
    // An inline script that ends in exec sshd starts it.
    worker["spec"]["containers"][0]["command"] = json!([
        "/bin/bash",
        "-ec",
        "cp /cfg/* /etc/; exec /usr/sbin/sshd -De"
    ]);
    assert!(create(Kind::Pod, &worker, &Config::default())
        .warnings
        .is_empty());
    // A script file, or an entrypoint of the image's: dljob cannot see what
    // it runs, and says so rather than that it starts no sshd.
    for command in [
        json!(["/bin/bash", "/opt/start-worker.sh"]),
        json!(["/entrypoint.sh"]),
    ] {
        worker["spec"]["containers"][0]["command"] = command.clone();
        let warnings = create(Kind::Pod, &worker, &Config::default()).warnings;
        assert_eq!(warnings.len(), 1, "{command}: {warnings:?}");
        assert!(
            warnings[0].contains("dljob cannot tell whether that starts sshd"),
            "{command}: {warnings:?}"
        );
    }
    // An inline script with no sshd is sure not to start it.
    worker["spec"]["containers"][0]["command"] = json!(["sh", "-c", "python train.py"]);
    assert!(create(Kind::Pod, &worker, &Config::default()).warnings[0]
        .contains("which does not start sshd"));
}

#[test]
fn launchers_get_the_workers_ready_gate_and_workers_do_not() {
    let mut launcher = pod("hvd", "launcher", "mpi", "launcher=1,worker=2", json!({}));
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert_eq!(
        m.object["spec"]["schedulingGates"],
        json!([{"name": "dljob.dev/workers-ready"}])
    );
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
    launcher["spec"]["schedulingGates"] = json!([{"name": "example.com/quota"}]);
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert_eq!(
        m.object["spec"]["schedulingGates"],
        json!([{"name": "example.com/quota"}, {"name": "dljob.dev/workers-ready"}])
    );
    let master = pod("cmn", "master", "chainer", "master=1,worker=2", json!({}));
    let m = create(Kind::Pod, &master, &Config::default());
    assert_eq!(
        m.object["spec"]["schedulingGates"],
        json!([{"name": "dljob.dev/workers-ready"}])
    );
    for (framework, replicas) in [
        ("mpi", "launcher=1,worker=2"),
        ("chainer", "master=1,worker=2"),
    ] {
        let worker = pod(
            "j",
            "worker",
            framework,
            replicas,
            json!({"dljob.dev/index": "1"}),
        );
        let m = create(Kind::Pod, &worker, &Config::default());
        assert_eq!(m.object["spec"].get("schedulingGates"), None, "{framework}");
    }
    // A webhook without any reconciler turns the gate off.
    let no_gate = Config::from_yaml("launcherGate: false\n").unwrap();
    assert_eq!(
        create(Kind::Pod, &master, &no_gate).object["spec"].get("schedulingGates"),
        None
    );
    let tf = pod("tf", "chief", "tensorflow", "chief=1,worker=1", json!({}));
    assert_eq!(
        create(Kind::Pod, &tf, &Config::default()).object["spec"].get("schedulingGates"),
        None
    );
}

/// An Intel MPI launcher whose hosts have different slot counts is told
/// that Intel's mpiexec reads them only from a machine file, unless its
/// command passes one; MPICH reads them from the hostfile: no word.
#[test]
fn an_intel_launcher_with_counts_per_host_is_told_to_pass_a_machine_file() {
    let launcher = |implementation: &str, command: Value| {
        let mut p = pod(
            "cmn",
            "launcher",
            "mpi",
            "launcher=1,worker=2",
            json!({"dljob.dev/mpi-implementation": implementation, "dljob.dev/slots": "1,0=4"}),
        );
        p["spec"]["containers"][0]["command"] = command;
        create(Kind::Pod, &p, &Config::default()).warnings
    };
    let plain = json!(["mpiexec", "-n", "5", "python3", "train.py"]);
    assert_eq!(
        launcher("Intel", plain.clone()),
        vec!["dljob.dev/slots gives hosts different slot counts, which Intel MPI's mpiexec reads only from a machine file: run `mpiexec -machinefile /etc/dljob/hostfile -n $DLJOB_MPI_NP …`; from the hostfile alone it places the same number of ranks on every host"]
    );
    let in_script = json!([
        "sh",
        "-c",
        "mpiexec -machinefile /etc/dljob/hostfile -n 5 python3 train.py"
    ]);
    assert_eq!(launcher("Intel", in_script), Vec::<String>::new());
    assert_eq!(launcher("MPICH", plain), Vec::<String>::new());
}

/// A launcher bound to its node (`spec.nodeName`, as a user pinning it
/// writes): the API server refuses a pod with both nodeName and a
/// scheduling gate ("spec.nodeName: Forbidden: cannot be set until all
/// schedulingGates have been cleared"), so dljob adds none and says why,
/// both when the pod is admitted and when its Job's template is.
#[test]
fn a_launcher_bound_to_a_node_gets_no_gate_and_a_warning() {
    let mut launcher = pod("hvd", "launcher", "mpi", "launcher=1,worker=2", json!({}));
    launcher["spec"]["nodeName"] = json!("node-7");
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert_eq!(m.object["spec"].get("schedulingGates"), None);
    let expected = "the launcher sets spec.nodeName \"node-7\": the API server refuses a pod bound to a node that also has a scheduling gate, so dljob does not hold it back with dljob.dev/workers-ready until the workers run; it may start before their sshd listens (ssh retries ConnectionAttempts=10 times). Leave nodeName out and use a nodeSelector or node affinity to keep the wait";
    assert_eq!(m.warnings, vec![expected]);
    // The same launcher as an Indexed Job: said of its template.
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "hvd-launcher", "namespace": "ml",
            "labels": {"dljob.dev/job": "hvd", "dljob.dev/role": "launcher"},
            "annotations": {"dljob.dev/framework": "mpi", "dljob.dev/replicas": "launcher=1,worker=2"}},
        "spec": {"completions": 1, "parallelism": 1, "completionMode": "Indexed",
            "template": {"spec": {"nodeName": "node-7", "restartPolicy": "Never",
                "containers": [{"name": "mpi", "image": "mpi"}]}}}
    });
    assert_eq!(
        create(Kind::Job, &job, &Config::default()).warnings,
        vec![expected]
    );
    // A worker bound to a node is not held back anyway: no word.
    let mut worker = pod(
        "hvd",
        "worker",
        "mpi",
        "launcher=1,worker=2",
        json!({"dljob.dev/index": "0"}),
    );
    worker["spec"]["nodeName"] = json!("node-7");
    assert!(create(Kind::Pod, &worker, &Config::default())
        .warnings
        .is_empty());
}

/// The SSH Secret's files are root-owned and 0600 as the kubelet mounts
/// them (0640 in the fsGroup with one): a non-root sshd or ssh needs the
/// fsGroup and its own ~/.ssh, and root's ssh refuses a key its group can
/// read. Each case is said, once, where the user writes the pod.
#[test]
fn ssh_members_are_told_what_their_user_cannot_read() {
    const T: &str = "launcher=1,worker=2";
    let worker = |security: Value, extra: Value| {
        let mut annotations = json!({"dljob.dev/index": "0"});
        for (k, v) in extra.as_object().unwrap() {
            annotations[k] = v.clone();
        }
        let mut p = pod("hvd", "worker", "mpi", T, annotations);
        p["spec"]["securityContext"] = security;
        create(Kind::Pod, &p, &Config::default()).warnings
    };
    assert_eq!(
        worker(json!({"runAsUser": 1000}), json!({})),
        vec![
            "the worker's framework container runs as uid 1000 and the pod sets no fsGroup: the SSH Secret's files are mounted root-owned and 0600, so sshd cannot read authorized_keys; set spec.securityContext.fsGroup to the user's group (e.g. 1000): the kubelet then makes them 0640 in that group, which sshd and ssh accept",
            "the worker's framework container runs as uid 1000 but dljob.dev/ssh-path is /root/.ssh: ssh and sshd read the .ssh directory of the user they run as; set dljob.dev/ssh-path to that user's (e.g. /home/mpiuser/.ssh) on every member",
        ]
    );
    // The fsGroup and the user's own .ssh: nothing to say.
    let fine = worker(
        json!({"runAsUser": 1000, "fsGroup": 1000}),
        json!({"dljob.dev/ssh-path": "/home/mpiuser/.ssh"}),
    );
    assert!(fine.is_empty(), "{fine:?}");
    // runAsNonRoot alone: the image's user, which dljob cannot see.
    assert_eq!(
        worker(json!({"runAsNonRoot": true}), json!({"dljob.dev/ssh-path": "/home/mpiuser/.ssh"})),
        vec!["the worker's framework container runs as a non-root user (runAsNonRoot) and the pod sets no fsGroup: the SSH Secret's files are mounted root-owned and 0600, so sshd cannot read authorized_keys; set spec.securityContext.fsGroup to the user's group (e.g. 1000): the kubelet then makes them 0640 in that group, which sshd and ssh accept"]
    );
    // A root sshd reads a 0640 authorized_keys: no word for a worker.
    assert!(worker(json!({"fsGroup": 1000}), json!({})).is_empty());
    // Root's ssh with an fsGroup: the key would be 0640.
    let mut launcher = pod("hvd", "launcher", "mpi", T, json!({}));
    launcher["spec"]["securityContext"] = json!({"fsGroup": 1000});
    assert_eq!(
        create(Kind::Pod, &launcher, &Config::default()).warnings,
        vec!["the launcher sets fsGroup 1000 and its framework container runs as root (unless its image's USER is another): the kubelet makes the SSH private key 0640 in group 1000, and root's ssh refuses a key its group can read (\"bad permissions\"); run the container as the non-root user the fsGroup is for (runAsUser), or leave fsGroup out"]
    );
    // The container's own runAsUser wins over the pod's.
    launcher["spec"]["securityContext"] = json!({"fsGroup": 1000, "runAsUser": 0});
    launcher["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 1000});
    launcher["metadata"]["annotations"]["dljob.dev/ssh-path"] = json!("/home/mpiuser/.ssh");
    let m = create(Kind::Pod, &launcher, &Config::default());
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    // Frameworks without SSH are not concerned.
    let mut tf = pod("tf", "chief", "tensorflow", "chief=1,worker=1", json!({}));
    tf["spec"]["securityContext"] = json!({"runAsUser": 1000});
    assert!(create(Kind::Pod, &tf, &Config::default())
        .warnings
        .is_empty());
}

/// Every member waits, before its framework starts, for its own name and
/// its coordinator's to resolve: an init container from the framework
/// container's image, pulled as it is, with its CPU, memory and
/// securityContext, before the user's own init containers that run to
/// completion (one may reach the coordinator) and after the sidecars
/// before them. Not for the SSH frameworks, nor Windows pods, nor when the
/// member or the config says not to.
#[test]
fn members_wait_for_their_names_in_an_init_container() {
    const T: &str = "master=1,worker=2";
    let mut worker = pod(
        "xg",
        "worker",
        "xgboost",
        T,
        json!({"dljob.dev/index": "1"}),
    );
    worker["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "4Gi", "ephemeral-storage": "2Gi", "nvidia.com/gpu": "1"}
    });
    worker["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 1000});
    worker["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
    worker["spec"]["initContainers"] = json!([
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always"},
        {"name": "fetch", "image": "busybox"},
        {"name": "log", "image": "fluent", "restartPolicy": "Always"}
    ]);
    let m = create(Kind::Pod, &worker, &Config::default());
    let inits: Vec<&str> = m.object["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(inits, ["proxy", "dljob-wait-for-names", "fetch", "log"]);
    let wait = &m.object["spec"]["initContainers"][1];
    assert_eq!(wait["name"], "dljob-wait-for-names");
    // dljob's own image (this release's without a config or a serving pod
    // that says another), pulled once per node, whatever the framework's
    // image and its pull policy.
    assert_eq!(wait["image"], dljob::contract::DEFAULT_IMAGE);
    assert_eq!(
        dljob::contract::DEFAULT_IMAGE,
        format!("ghcr.io/dljob/dljob:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(wait["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        wait["command"],
        json!([
            "/dljob",
            "wait-for-names",
            "--timeout=600",
            "--namespace=ml",
            "--service=xg",
            "--",
            "xg-worker-1.xg.ml.svc",
            "xg-master-0.xg.ml.svc"
        ])
    );
    assert_eq!(
        wait["resources"],
        json!({"requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"}, "limits": {"memory": "4Gi", "ephemeral-storage": "2Gi"}})
    );
    assert_eq!(wait["securityContext"], json!({"runAsUser": 1000}));
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
    // Another webhook changed dljob's init container since (its resources,
    // a mirror's image): still dljob's.
    let mut changed = m.object.clone();
    changed["spec"]["initContainers"][1]["resources"] = json!({"requests": {"cpu": "100m"}});
    changed["spec"]["initContainers"][1]["image"] = json!("mirror.example/dljob:0.1.0");
    let again = create(Kind::Pod, &changed, &Config::default());
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    assert_eq!(again.object, changed);
    // An earlier release's (a script from the framework's image, named
    // after the container) is dljob's too: not a second one, no warning.
    let mut earlier = m.object.clone();
    earlier["spec"]["initContainers"][1]["command"] = json!([
        "sh",
        "-c",
        "script",
        "dljob-wait-for-names",
        "600",
        "ml",
        "xg",
        "n"
    ]);
    let again = create(Kind::Pod, &earlier, &Config::default());
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    assert_eq!(again.object, earlier);
    // The user's own container of that name is kept, with a warning.
    let mut theirs = m.object.clone();
    theirs["spec"]["initContainers"][1]["command"] = json!(["/bin/wait"]);
    let again = create(Kind::Pod, &theirs, &Config::default());
    assert_eq!(again.object, theirs);
    assert_eq!(again.warnings.len(), 1, "{:?}", again.warnings);
    assert!(
        again.warnings[0].contains("is the user's and kept"),
        "{:?}",
        again.warnings
    );

    // The coordinator waits for its own name only; the config sets the
    // bound and the image, which wins over the one dljob runs from.
    let master = pod("xg", "master", "xgboost", T, json!({}));
    let cfg = Config::from_yaml(
        "waitForNamesSeconds: 30\nwaitForNamesImage: mirror.example/dljob:0.1.0\n",
    )
    .unwrap()
    .with_serving_image(Some("ghcr.io/dljob/dljob@sha256:00".to_owned()));
    let m = create(Kind::Pod, &master, &cfg);
    let wait = &m.object["spec"]["initContainers"][0];
    assert_eq!(
        wait["command"].as_array().unwrap()[2..],
        [
            json!("--timeout=30"),
            json!("--namespace=ml"),
            json!("--service=xg"),
            json!("--"),
            json!("xg-master-0.xg.ml.svc")
        ]
    );
    assert_eq!(wait["image"], "mirror.example/dljob:0.1.0");
    // Without waitForNamesImage: the image dljob runs from.
    let serving =
        Config::default().with_serving_image(Some("ghcr.io/dljob/dljob@sha256:00".to_owned()));
    assert_eq!(
        create(Kind::Pod, &master, &serving).object["spec"]["initContainers"][0]["image"],
        "ghcr.io/dljob/dljob@sha256:00"
    );
    assert_eq!(
        Config::from_yaml("waitForNamesImage: \"\"\n").unwrap_err().to_string(),
        format!("config: waitForNamesImage \"\" is not an image reference: name dljob's image (e.g. {}, or your mirror of it), or leave the key out for the image dljob runs from", dljob::contract::DEFAULT_IMAGE)
    );

    // Not where the member, the config or the framework says not to.
    let off = pod(
        "xg",
        "master",
        "xgboost",
        T,
        json!({"dljob.dev/wait-for-names": "false"}),
    );
    assert_eq!(
        create(Kind::Pod, &off, &Config::default()).object["spec"].get("initContainers"),
        None
    );
    let none = Config::from_yaml("waitForNamesSeconds: 0\n").unwrap();
    assert_eq!(
        create(Kind::Pod, &master, &none).object["spec"].get("initContainers"),
        None
    );
    let launcher = pod("hvd", "launcher", "mpi", "launcher=1,worker=2", json!({}));
    assert_eq!(
        create(Kind::Pod, &launcher, &Config::default()).object["spec"].get("initContainers"),
        None
    );
    let windows_term = json!({"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]});
    let affinity = |terms: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
    for windows in [
        json!({"os": {"name": "windows"}}),
        json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
        affinity(json!([windows_term])),
    ] {
        let mut w = master.clone();
        for (k, v) in windows.as_object().unwrap() {
            w["spec"][k] = v.clone();
        }
        assert_eq!(
            create(Kind::Pod, &w, &Config::default()).object["spec"].get("initContainers"),
            None,
            "{windows}"
        );
    }
    // A term that allows Linux nodes too: the pod may run on Linux.
    let either = json!({"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]});
    let mut maybe_linux = master.clone();
    maybe_linux["spec"]["affinity"] = affinity(json!([windows_term, either]))["affinity"].clone();
    assert_eq!(
        create(Kind::Pod, &maybe_linux, &Config::default()).object["spec"]["initContainers"][0]
            ["name"],
        "dljob-wait-for-names"
    );
    let bad = pod(
        "xg",
        "master",
        "xgboost",
        T,
        json!({"dljob.dev/wait-for-names": "no"}),
    );
    assert_eq!(
        refused(&bad).to_string(),
        "dljob.dev/wait-for-names \"no\" must be \"true\" or \"false\""
    );

    // An init container of that name the user wrote is theirs.
    let mut theirs = master.clone();
    theirs["spec"]["initContainers"] = json!([{"name": "dljob-wait-for-names", "image": "mine"}]);
    let m = create(Kind::Pod, &theirs, &Config::default());
    assert_eq!(
        m.object["spec"]["initContainers"],
        json!([{"name": "dljob-wait-for-names", "image": "mine"}])
    );
    assert_eq!(
        m.warnings,
        vec!["init container \"dljob-wait-for-names\" is the user's and kept; dljob's would wait for the job's names before the framework starts"]
    );
}

/// `dljob.dev/wait-for-names` on a workload reaches its pod template, and
/// so its pods.
#[test]
fn a_workloads_wait_for_names_reaches_its_pods() {
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "xg-worker", "namespace": "ml",
            "labels": {"dljob.dev/job": "xg", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "xgboost", "dljob.dev/replicas": "master=1,worker=2",
                "dljob.dev/wait-for-names": "false"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "xgboost", "image": "img"}]}}}
    });
    let m = create(Kind::StatefulSet, &sts, &Config::default());
    assert_eq!(
        m.object["spec"]["template"]["metadata"]["annotations"]["dljob.dev/wait-for-names"],
        "false"
    );
}

#[test]
fn framework_container_is_chosen_by_annotation_default_container_name_then_first() {
    let mut p = pod("j", "worker", "jax", "worker=1", json!({}));
    p["spec"]["containers"] = json!([{"name": "proxy"}, {"name": "trainer"}, {"name": "jax"}]);
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(env_of(&m.object, 2)
        .iter()
        .any(|(n, _)| n == "JAX_PROCESS_ID"));
    assert!(env_of(&m.object, 0).is_empty());

    p["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] = json!("proxy");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(env_of(&m.object, 0)
        .iter()
        .any(|(n, _)| n == "JAX_PROCESS_ID"));

    p["metadata"]["annotations"]["dljob.dev/container"] = json!("trainer");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(env_of(&m.object, 1)
        .iter()
        .any(|(n, _)| n == "JAX_PROCESS_ID"));
    assert!(env_of(&m.object, 0).is_empty());
}

#[test]
fn framework_container_is_the_one_requesting_an_accelerator_else_a_named_guess() {
    let mut p = pod("j", "worker", "pytorch", "worker=1", json!({}));
    p["spec"]["containers"] = json!([
        {"name": "sidecar", "image": "proxy"},
        {"name": "trainer", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    ]);
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(env_of(&m.object, 0).is_empty());
    assert!(env_of(&m.object, 1).contains(&("PET_NPROC_PER_NODE".into(), "2".into())));
    assert_eq!(m.object["spec"]["containers"][0].get("ports"), None);
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);

    // No container stands out: the first is wired, and the user is told.
    p["spec"]["containers"][1]["resources"] = json!({});
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(env_of(&m.object, 0).contains(&("PET_NPROC_PER_NODE".into(), "auto".into())));
    assert_eq!(
        m.warnings,
        vec!["the pod has containers sidecar, trainer; dljob wires \"sidecar\" as the framework container (a guess: none is named pytorch, marked kubectl.kubernetes.io/default-container, or the only one requesting an accelerator); set dljob.dev/container: <name> to choose"]
    );
    p["metadata"]["annotations"]["dljob.dev/container"] = json!("trainer");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert!(env_of(&m.object, 1).contains(&("PET_NPROC_PER_NODE".into(), "auto".into())));
}

/// A GPU as a DRA claim (`resources.claims` naming one of the pod's
/// `resourceClaims`, no `nvidia.com/gpu` limit) makes its container the
/// framework container as a device limit would; a claim the pod does not
/// have does not. The host-library injection is not for claims (the DRA
/// driver's CDI spec mounts the driver).
#[test]
fn a_container_using_a_pod_dra_claim_is_the_framework_container() {
    let mut p = pod("j", "worker", "pytorch", "worker=1", json!({}));
    p["spec"]["resourceClaims"] =
        json!([{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}]);
    p["spec"]["containers"] = json!([
        {"name": "sidecar", "image": "proxy"},
        {"name": "trainer", "image": "img", "resources": {"claims": [{"name": "gpus"}]}}
    ]);
    let config = Config::from_yaml(
        "accelerators:\n  nvidia.com/gpu:\n    volumes:\n    - {name: nvidia-libraries, hostPath: /usr/lib/nvidia, mountPath: /usr/local/nvidia/lib64}\n",
    )
    .unwrap();
    let m = create(Kind::Pod, &p, &config);
    assert!(env_of(&m.object, 0).is_empty());
    assert!(env_of(&m.object, 1).iter().any(|(n, _)| n == "MASTER_ADDR"));
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_eq!(
        m.object["spec"].get("volumes"),
        None,
        "no host libraries for a claim"
    );
    // A claim name the pod does not declare is no accelerator: a guess.
    p["spec"]["containers"][1]["resources"]["claims"] = json!([{"name": "other"}]);
    let m = create(Kind::Pod, &p, &config);
    assert!(env_of(&m.object, 0).iter().any(|(n, _)| n == "MASTER_ADDR"));
    assert_eq!(
        m.warnings,
        vec!["the pod has containers sidecar, trainer; dljob wires \"sidecar\" as the framework container (a guess: none is named pytorch, marked kubectl.kubernetes.io/default-container, or the only one requesting an accelerator); set dljob.dev/container: <name> to choose"]
    );
}

/// Bytes dljob adds to a pod: every injected env var's `NAME=value` and the
/// annotations it writes.
fn injected_bytes(original: &Value, mutated: &Value) -> usize {
    let before: Vec<(String, String)> = env_of(original, 0);
    let env: usize = env_of(mutated, 0)
        .iter()
        .filter(|e| !before.contains(e))
        .map(|(n, v)| n.len() + 1 + v.len())
        .sum();
    let annotations: usize = mutated["metadata"]["annotations"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            original["metadata"]["annotations"]
                .get(k.as_str())
                .is_none()
        })
        .map(|(k, v)| k.len() + v.as_str().unwrap().len())
        .sum();
    env + annotations
}

#[test]
fn a_1000_member_pytorch_worker_gets_less_than_4_kib() {
    let mut p = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "worker",
        "pytorch",
        "master=1,worker=999",
        json!({"dljob.dev/index": "998"}),
    );
    p["metadata"]["namespace"] = json!("ml-research-team-a");
    let m = create(Kind::Pod, &p, &Config::default());
    let bytes = injected_bytes(&p, &m.object);
    assert!(bytes <= 4096, "{bytes} bytes injected");
    assert_eq!(env(&m.object, "RANK").as_deref(), Some("999"));
    assert_eq!(env(&m.object, "WORLD_SIZE").as_deref(), Some("1000"));
    // The 1400-worker job that used to carry a 154 308-byte
    // DLJOB_HOSTS_WORKER (too long for Linux to start) is fine now.
    p["metadata"]["annotations"]["dljob.dev/replicas"] = json!("master=1,worker=1400");
    let m = create(Kind::Pod, &p, &Config::default());
    assert!(injected_bytes(&p, &m.object) <= 4096);
}

/// The mutation of a pod CREATE in namespace `ml`, as `/mutate` answers it.
fn pod_patch_in_ml(
    pod: &Value,
) -> Result<Option<dljob::mutate::Admission>, dljob::violation::Violations> {
    mutate_patch(
        Subject::new(Kind::Pod, pod, Some("ml")),
        Operation::Create,
        &Config::default(),
    )
}

#[test]
fn a_tf_config_too_long_for_linux_is_refused_at_admission() {
    let p = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "worker",
        "tensorflow",
        "chief=1,worker=2400",
        json!({"dljob.dev/index": "5"}),
    );
    let v = pod_patch_in_ml(&p).expect_err("refused");
    assert_eq!(
        v.messages(),
        vec!["TF_CONFIG would be 243890 bytes for worker 5; Linux refuses to start a process with an environment string over 131072 bytes, so the container could not start: use fewer replicas, or a shorter job name or namespace (every host is named resnet50-imagenet-hparam-sweep-trial7-<role>-<index>.resnet50-imagenet-hparam-sweep-trial7.ml.svc)"]
    );
    // The same job under a short name fits.
    let short = pod(
        "r",
        "worker",
        "tensorflow",
        "chief=1,worker=2400",
        json!({"dljob.dev/index": "5"}),
    );
    assert!(pod_patch_in_ml(&short).is_ok());
}

#[test]
fn a_hostfile_over_the_annotation_limit_is_refused_at_the_launcher() {
    let launcher = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "launcher",
        "mpi",
        "launcher=1,worker=3000",
        json!({}),
    );
    let v = pod_patch_in_ml(&launcher).expect_err("refused");
    assert_eq!(v.0.len(), 1, "{v}");
    assert!(
        v.0[0].message.starts_with("the dljob.dev/hostfile annotation (307890 bytes, one line per host) would bring the pod's annotations to 307970 bytes; the API server refuses more than 262144: "),
        "{}",
        v.0[0].message
    );
    // Volcano's host lists are every pod's env (one string per task, under
    // Linux's limit) and the job's ConfigMap (all of them, under the API
    // server's 1 MiB).
    let volcano = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "worker",
        "generic",
        "ps=1,worker=3000",
        json!({"dljob.dev/index": "0", "dljob.dev/compat": "volcano"}),
    );
    let v = pod_patch_in_ml(&volcano).expect_err("refused");
    assert!(
        v.0.iter().any(|p| p
            .message
            .starts_with("VC_WORKER_HOSTS would be 262906 bytes for worker 0; Linux refuses")),
        "{v}"
    );
    let tasks = "a=1000,b=1000,c=1000,d=1000,e=1000,f=1000,g=1000,h=1000,i=1000,k=1000";
    let many = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "a",
        "generic",
        tasks,
        json!({"dljob.dev/index": "0", "dljob.dev/compat": "volcano"}),
    );
    let v = pod_patch_in_ml(&many).expect_err("refused");
    assert_eq!(v.0.len(), 1, "{v}");
    assert!(
        v.0[0].message.starts_with(
            "Volcano's host files would be 1638060 bytes, in the ConfigMap resnet50-imagenet-hparam-sweep-trial7-volcano the pods mount at /etc/volcano; the API server refuses a ConfigMap over 1048576: "
        ),
        "{v}"
    );
    // 2000 workers of a job of a 24-character name: the launcher's hostfile
    // (153 KB) and Volcano's lists in Volcano's shorter form (123 KB a
    // string) fit, where the hostfile and the full host lists as
    // annotations (290 KB together) did not, nor the full list as one env
    // string (137 KB).
    let launcher = pod(
        "imagenet-hparam-sweep-t7",
        "launcher",
        "mpi",
        "launcher=1,worker=2000",
        json!({"dljob.dev/compat": "volcano:launcher=mpimaster,worker=mpiworker"}),
    );
    let m = pod_patch_in_ml(&launcher);
    assert!(m.is_ok(), "{:?}", m.err().map(|v| v.to_string()));
    // Workers carry no hostfile: they are not refused for it.
    let worker = pod(
        "resnet50-imagenet-hparam-sweep-trial7",
        "worker",
        "mpi",
        "launcher=1,worker=3000",
        json!({"dljob.dev/index": "0"}),
    );
    assert!(pod_patch_in_ml(&worker).is_ok());
}

#[test]
fn parents_are_added_only_when_absent() {
    let mut p = pod("j", "launcher", "mpi", "launcher=1,worker=1", json!({}));
    p["metadata"].as_object_mut().unwrap().remove("annotations");
    p["metadata"]["annotations"] = json!({"dljob.dev/framework": "mpi", "dljob.dev/replicas": "launcher=1,worker=1", "keep": "me"});
    p["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    let m = create(Kind::Pod, &p, &Config::default());
    let ops = patch(&p, &m.object);
    let paths: Vec<String> = ops
        .0
        .iter()
        .map(|op| {
            serde_json::to_value(op).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        paths.contains(&"/metadata/annotations/dljob.dev~1hostfile".to_owned()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/spec/containers/0/env/1".to_owned()),
        "{paths:?}"
    );
    assert!(paths.contains(&"/spec/volumes".to_owned()), "{paths:?}");
    assert!(!paths.contains(&"/metadata/annotations".to_owned()));
    assert!(!paths.contains(&"/spec/containers/0/env".to_owned()));
    assert_patch_reproduces(&p, &m.object);
    assert_eq!(m.object["metadata"]["annotations"]["keep"], "me");
}

#[test]
fn update_mutates_only_what_is_missing_and_mutable() {
    // A pod UPDATE (captured: an annotation added) changes nothing.
    let (obj, old) = fixture("mutate-update-pod-resnet-chief.json");
    assert!(old.is_some());
    let m = mutate(
        Subject::new(Kind::Pod, &obj, Some("team-a")),
        Operation::Update,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(m.object, obj);

    // A StatefulSet UPDATE gets missing template labels but keeps its
    // (immutable) serviceName and podManagementPolicy.
    let (sts, _) = fixture("mutate-create-statefulset-resnet-worker.json");
    let mut stripped = sts.clone();
    stripped["spec"]["template"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/role");
    stripped["spec"]["podManagementPolicy"] = json!("OrderedReady");
    let m = mutate(
        Subject::new(Kind::StatefulSet, &stripped, Some("team-a")),
        Operation::Update,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    let ops = serde_json::to_value(patch(&stripped, &m.object)).unwrap();
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/spec/template/metadata/labels/dljob.dev~1role", "value": "worker"}])
    );
}

#[test]
fn objects_without_the_job_label_are_not_members() {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}});
    assert!(mutate(
        Subject::new(Kind::Pod, &p, Some("ns")),
        Operation::Create,
        &Config::default()
    )
    .unwrap()
    .is_none());
}

#[test]
fn every_captured_mutating_create_review_is_idempotent() {
    let cfg = Config::default();
    let mut checked = 0;
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !name.starts_with("mutate-create-") {
            continue;
        }
        let (obj, _) = fixture(&name);
        let kind = Kind::of(&obj).unwrap();
        let Ok(Some(m)) = mutate(
            Subject::new(kind, &obj, Some("team-a")),
            Operation::Create,
            &cfg,
        ) else {
            continue; // refused fixtures are asserted above
        };
        assert_patch_reproduces(&obj, &m.object);
        assert_idempotent(kind, &m.object, &cfg);
        checked += 1;
    }
    // chief, ps, worker-0, worker-1, ddp, the StatefulSet and the Job.
    assert_eq!(checked, 7);
}

/// Kueue: every pod names the group, its total size and its LocalQueue
/// (from dljob.dev/queue); no scheduler name, nothing of Kueue's own.
#[test]
fn kueue_pods_declare_one_plain_pod_group() {
    let p = pod(
        "bert",
        "worker",
        "pytorch",
        "master=1,worker=3",
        json!({"dljob.dev/index": "2", "dljob.dev/gang": "kueue", "dljob.dev/queue": "team-a"}),
    );
    let m = create(Kind::Pod, &p, &Config::default());
    assert_eq!(
        m.object["metadata"]["labels"],
        json!({
            "dljob.dev/job": "bert", "dljob.dev/role": "worker",
            "kueue.x-k8s.io/pod-group-name": "bert", "kueue.x-k8s.io/queue-name": "team-a"
        })
    );
    assert_eq!(
        m.object["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"],
        "4"
    );
    assert_eq!(m.object["spec"].get("schedulerName"), None);
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
}

/// Volcano: the group annotation and the `volcano` scheduler, replacing
/// the API server's default; a scheduler the user chose is kept, with a
/// warning. The config picks the gang of jobs that do not say, and can
/// rename the scheduler.
#[test]
fn volcano_pods_name_their_group_and_scheduler() {
    let mut p = pod(
        "resnet",
        "worker",
        "tensorflow",
        "chief=1,worker=2",
        json!({"dljob.dev/index": "0"}),
    );
    p["spec"]["schedulerName"] = json!("default-scheduler");
    let config = Config::from_yaml("gang: volcano\n").unwrap();
    let m = create(Kind::Pod, &p, &config);
    assert_eq!(
        m.object["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
        "resnet"
    );
    assert_eq!(m.object["spec"]["schedulerName"], "volcano");
    assert_idempotent(Kind::Pod, &m.object, &config);
    // Without the config's default: no gang at all.
    let plain = create(Kind::Pod, &p, &Config::default());
    assert_eq!(plain.object["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(
        plain.object["metadata"]["annotations"].get("scheduling.k8s.io/group-name"),
        None
    );
    // The user's own scheduler is kept and named.
    p["spec"]["schedulerName"] = json!("my-scheduler");
    let m = create(Kind::Pod, &p, &config);
    assert_eq!(m.object["spec"]["schedulerName"], "my-scheduler");
    assert_eq!(
        m.warnings,
        vec!["spec.schedulerName \"my-scheduler\" is set by the user and kept; the volcano gang schedules with \"volcano\", so this pod is not gang-scheduled"]
    );
    // Renamed in the config.
    p["spec"]["schedulerName"] = json!("default-scheduler");
    let renamed =
        Config::from_yaml("gang: volcano\nschedulerNames: {volcano: vc-scheduler}\n").unwrap();
    assert_eq!(
        create(Kind::Pod, &p, &renamed).object["spec"]["schedulerName"],
        "vc-scheduler"
    );
}

/// An UPDATE that no longer carries the port and gang admission resolved
/// at creation (a server-side applier that owned them dropped them) gets
/// them back as they were — not as the config would resolve them now — on
/// the StatefulSet and its template, whose pods therefore do not roll; a
/// StatefulSet created before dljob resolved them gets nothing.
#[test]
fn an_update_keeps_what_admission_resolved_at_creation() {
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "w", "namespace": "ml",
            "labels": {"dljob.dev/job": "bert", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2"}
        },
        "spec": {
            "replicas": 2, "serviceName": "bert", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {"labels": {"app": "w", "dljob.dev/job": "bert", "dljob.dev/role": "worker"},
                    "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2"}},
                "spec": {"containers": [{"name": "pytorch", "image": "img"}]}
            }
        }
    });
    let created = create(Kind::StatefulSet, &sts, &Config::default()).object;
    assert_eq!(
        created["spec"]["template"]["metadata"]["annotations"]["dljob.dev/port"],
        "23456"
    );
    // The config changed since; the applier's UPDATE lacks both keys.
    let reloaded = Config::from_yaml("ports: {pytorch: 3333}\ngang: coscheduling\n").unwrap();
    let update = |old: Option<&Value>| {
        let a = dljob::mutate::mutate_patch(
            Subject::new(Kind::StatefulSet, &sts, Some("ml")).with_old(old),
            Operation::Update,
            &reloaded,
        )
        .unwrap()
        .unwrap();
        let mut out = sts.clone();
        json_patch::patch(&mut out, &a.patch.to_json_patch()).unwrap();
        out
    };
    let kept = update(Some(&created));
    assert_eq!(
        kept["metadata"]["annotations"],
        created["metadata"]["annotations"]
    );
    assert_eq!(
        kept["spec"]["template"], created["spec"]["template"],
        "the template as created: no roll"
    );
    // Created before dljob resolved them: nothing to keep, nothing added.
    let before = update(Some(&sts));
    assert_eq!(before["spec"]["template"], sts["spec"]["template"]);
    assert_eq!(
        before["metadata"]["annotations"].get("dljob.dev/port"),
        None
    );
}

/// kubernetes: the pod joins the job's PodGroup through
/// `spec.schedulingGroup` (settable only at creation) and keeps
/// kube-scheduler; a StatefulSet's template names the group too, at
/// creation only.
#[test]
fn native_gang_pods_and_templates_name_their_pod_group() {
    let mut p = pod(
        "resnet",
        "worker",
        "tensorflow",
        "chief=1,worker=2",
        json!({"dljob.dev/index": "0", "dljob.dev/gang": "kubernetes"}),
    );
    p["spec"]["schedulerName"] = json!("default-scheduler");
    let config = Config::default();
    let m = create(Kind::Pod, &p, &config);
    let ops = serde_json::to_value(patch(&p, &m.object)).unwrap();
    assert!(
        ops.as_array()
            .unwrap()
            .contains(&json!({"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "resnet"}})),
        "{ops}"
    );
    assert_eq!(m.object["spec"]["schedulerName"], "default-scheduler");
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_idempotent(Kind::Pod, &m.object, &config);
    // A group the user named is kept, and said to leave the pod out.
    p["spec"]["schedulingGroup"] = json!({"podGroupName": "other"});
    let m = create(Kind::Pod, &p, &config);
    assert_eq!(
        m.object["spec"]["schedulingGroup"],
        json!({"podGroupName": "other"})
    );
    assert_eq!(
        m.warnings,
        vec!["spec.schedulingGroup.podGroupName \"other\" is set by the user and kept; the kubernetes gang's group is \"resnet\", so this pod is not in the job's gang"]
    );

    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "w", "namespace": "ml",
            "labels": {"dljob.dev/job": "bert", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/gang": "kubernetes", "dljob.dev/replicas": "worker=2"}
        },
        "spec": {
            "replicas": 2, "serviceName": "bert", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "pytorch", "image": "img"}]}
            }
        }
    });
    let m = create(Kind::StatefulSet, &sts, &config);
    assert_eq!(
        m.object["spec"]["template"]["spec"]["schedulingGroup"],
        json!({"podGroupName": "bert"})
    );
    assert_idempotent(Kind::StatefulSet, &m.object, &config);
    // An existing StatefulSet updated: its template is not changed (that
    // would roll its pods; they get the group at their own admission).
    let updated = mutate_patch(
        Subject::new(Kind::StatefulSet, &sts, Some("ml")),
        Operation::Update,
        &config,
    )
    .unwrap()
    .unwrap();
    assert!(
        !updated
            .patch
            .0
            .iter()
            .any(|op| op.path.contains("schedulingGroup")),
        "{:?}",
        updated.patch
    );
}

/// `dljob.dev/topology` with Kueue: each pod carries Kueue TAS's annotation
/// for its PodSet; a workload's template carries the key itself, so its
/// pods get the same at their admission.
#[test]
fn kueue_pods_carry_the_tas_annotation_of_the_job_topology() {
    let p = pod(
        "resnet",
        "worker",
        "tensorflow",
        "chief=1,worker=2",
        json!({"dljob.dev/index": "0", "dljob.dev/gang": "kueue", "dljob.dev/topology": "preferred:example.com/rack"}),
    );
    let m = create(Kind::Pod, &p, &Config::default());
    let annotations = &m.object["metadata"]["annotations"];
    assert_eq!(
        annotations["kueue.x-k8s.io/podset-preferred-topology"],
        "example.com/rack"
    );
    assert_eq!(
        annotations.get("kueue.x-k8s.io/podset-required-topology"),
        None
    );
    assert_idempotent(Kind::Pod, &m.object, &Config::default());
}

/// coscheduling: the PodGroup label and the plugin's second scheduler,
/// unless the config says the default scheduler runs the plugin.
#[test]
fn coscheduling_pods_carry_the_pod_group_label() {
    let p = pod(
        "hvd",
        "worker",
        "mpi",
        "launcher=1,worker=2",
        json!({"dljob.dev/index": "1", "dljob.dev/gang": "coscheduling"}),
    );
    let m = create(Kind::Pod, &p, &Config::default());
    assert_eq!(
        m.object["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
        "hvd"
    );
    assert_eq!(
        m.object["spec"]["schedulerName"],
        "scheduler-plugins-scheduler"
    );
    let in_default = Config::from_yaml("schedulerNames: {coscheduling: \"\"}\n").unwrap();
    assert_eq!(
        create(Kind::Pod, &p, &in_default).object["spec"].get("schedulerName"),
        None
    );
}

/// The reconciler's mark on what a finished run left is not carried into
/// a new member by a copied manifest: removed, with a word.
#[test]
fn a_new_member_loses_a_copied_finished_run_mark() {
    let marked = pod(
        "mnist",
        "master",
        "pytorch",
        "master=1",
        json!({"dljob.dev/finished-run": "uid-old"}),
    );
    let m = create(Kind::Pod, &marked, &Config::default());
    assert_eq!(
        m.object["metadata"]["annotations"].get("dljob.dev/finished-run"),
        None
    );
    assert_eq!(
        m.warnings,
        vec!["annotation dljob.dev/finished-run removed: the reconciler marks what a finished run left with it, and a new pod belongs to the job's next run"]
    );
    assert_patch_reproduces(&marked, &m.object);
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "w", "namespace": "ml",
            "labels": {"dljob.dev/job": "bert", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/finished-run": "uid-old"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}
    });
    let m = create(Kind::StatefulSet, &sts, &Config::default());
    assert_eq!(
        m.object["metadata"]["annotations"].get("dljob.dev/finished-run"),
        None
    );
    assert_eq!(
        m.warnings,
        vec!["annotation dljob.dev/finished-run removed: the reconciler marks what a finished run left with it, and a new workload belongs to the job's next run"]
    );
    // On UPDATE (the reconciler's own mark) it stays.
    let updated = mutate(
        Subject::new(Kind::StatefulSet, &sts, Some("ml")),
        Operation::Update,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        updated.object["metadata"]["annotations"]["dljob.dev/finished-run"],
        "uid-old"
    );
}

/// A framework container that takes env from a ConfigMap or Secret is told
/// that dljob's variables win over it (Kubernetes gives env precedence over
/// envFrom), and how to keep a value; its own env entries are kept.
#[test]
fn env_from_on_the_framework_container_is_said_to_lose_to_dljobs_env() {
    let mut p = pod("mnist", "master", "pytorch", "master=1,worker=1", json!({}));
    p["spec"]["containers"][0]["envFrom"] = json!([
        {"configMapRef": {"name": "training-env"}},
        {"secretRef": {"name": "creds"}},
        {"prefix": "X_", "configMapRef": {"name": "more"}}
    ]);
    let m = create(Kind::Pod, &p, &Config::default());
    assert_eq!(
        m.warnings,
        ["container \"pytorch\" takes env from ConfigMap training-env, Secret creds, ConfigMap more (envFrom); a variable there that dljob also sets is dljob's, since env comes before envFrom: to keep your value, set it in the container's env, which dljob keeps"]
    );
    // A sidecar's envFrom is not the framework's: nothing said.
    let mut q = pod("mnist", "master", "pytorch", "master=1,worker=1", json!({}));
    q["spec"]["containers"].as_array_mut().unwrap().push(
        json!({"name": "sidecar", "image": "s", "envFrom": [{"configMapRef": {"name": "x"}}]}),
    );
    assert!(create(Kind::Pod, &q, &Config::default())
        .warnings
        .is_empty());
}
