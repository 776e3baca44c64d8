//! The validation of ARCHITECTURE.md §4: for each rule a rejected case with its exact
//! message and an accepted neighbour.

use dljob::config::Config;
use dljob::member::MemberSpec;
use dljob::object::Kind;
use dljob::object::Subject;
use dljob::validate::{peers_of, validate};
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission/");

fn review(name: &str) -> (Value, Option<Value>) {
    let text = std::fs::read_to_string(format!("{FIXTURES}{name}")).unwrap();
    let review: Value = serde_json::from_str(&text).unwrap();
    let req = &review["request"];
    (
        req["object"].clone(),
        req.get("oldObject").filter(|o| !o.is_null()).cloned(),
    )
}

fn pod(labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "img"}]}
    })
}

/// A TensorFlow worker pod with `annotations` merged over a valid base.
fn tf_pod(role: &str, extra: Value) -> Value {
    let mut ann =
        json!({"dljob.dev/framework": "tensorflow", "dljob.dev/replicas": "chief=1,worker=2"});
    if role == "worker" {
        ann["dljob.dev/index"] = json!("1");
    }
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            ann.as_object_mut().unwrap().remove(k);
        } else {
            ann[k] = v.clone();
        }
    }
    pod(
        json!({"dljob.dev/job": "mnist", "dljob.dev/role": role}),
        ann,
    )
}

fn sts(replicas: u32, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "w", "namespace": "ml", "labels": {"dljob.dev/job": "bert", "dljob.dev/role": "worker"}, "annotations": annotations},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c"}]}}}
    })
}

fn problems(kind: Kind, obj: &Value) -> Vec<String> {
    problems_with(kind, obj, None, &[])
}

fn problems_with(
    kind: Kind,
    obj: &Value,
    old: Option<&Value>,
    peers: &[MemberSpec],
) -> Vec<String> {
    match validate(
        Subject::new(kind, obj, Some("ml")).with_old(old),
        &Config::default(),
        peers,
    ) {
        Ok(_) => Vec::new(),
        Err(v) => v.0.into_iter().map(|v| v.message).collect(),
    }
}

fn accepted(kind: Kind, obj: &Value) {
    let p = problems(kind, obj);
    assert!(p.is_empty(), "expected acceptance, got {p:?}");
}

#[test]
fn unknown_framework_lists_the_frameworks() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/framework": "tensorflw"}))),
        vec!["dljob.dev/framework: unknown framework \"tensorflw\"; frameworks are tensorflow, pytorch, mxnet, mpi, chainer, jax, xgboost, paddle, generic"]
    );
    accepted(Kind::Pod, &tf_pod("worker", json!({})));
}

#[test]
fn missing_framework_or_role_is_refused() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/framework": null}))),
        vec!["annotation dljob.dev/framework is missing; set one of tensorflow, pytorch, mxnet, mpi, chainer, jax, xgboost, paddle, generic"]
    );
    let mut p = tf_pod("worker", json!({}));
    p["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/role");
    assert_eq!(
        problems(Kind::Pod, &p),
        vec!["label dljob.dev/role is missing: every member names its role"]
    );
}

#[test]
fn role_not_of_the_framework_lists_the_roles() {
    let p = pod(
        json!({"dljob.dev/job": "lin", "dljob.dev/role": "ps"}),
        json!({"dljob.dev/framework": "mxnet", "dljob.dev/replicas": "scheduler=1,server=1,worker=1"}),
    );
    assert_eq!(
        problems(Kind::Pod, &p),
        vec![
            "dljob.dev/role: \"ps\" is not a mxnet role; use one of scheduler, server, worker",
            "role \"ps\" is not in dljob.dev/replicas \"scheduler=1,server=1,worker=1\"; add it there or fix dljob.dev/role",
        ]
    );
    let ok = pod(
        json!({"dljob.dev/job": "lin", "dljob.dev/role": "server"}),
        json!({"dljob.dev/framework": "mxnet", "dljob.dev/replicas": "scheduler=1,server=1,worker=1"}),
    );
    accepted(Kind::Pod, &ok);
}

#[test]
fn unparsable_topology_says_where() {
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod(
                "chief",
                json!({"dljob.dev/replicas": "chief=1,worker=three"})
            )
        ),
        vec!["dljob.dev/replicas entry \"worker=three\": count \"three\" is not a number"]
    );
    accepted(
        Kind::Pod,
        &tf_pod("chief", json!({"dljob.dev/replicas": "chief=1,worker=3"})),
    );
}

#[test]
fn plain_pod_needs_a_topology() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("chief", json!({"dljob.dev/replicas": null}))),
        vec!["annotation dljob.dev/replicas is missing: declare the whole job's topology, e.g. \"worker=4\" (only a single-role StatefulSet or Indexed Job may leave it out)"]
    );
}

#[test]
fn statefulset_size_must_match_its_role_count() {
    let fw = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=4"});
    assert_eq!(
        problems(Kind::StatefulSet, &sts(3, fw.clone())),
        vec!["StatefulSet replicas is 3 but dljob.dev/replicas \"worker=4\" declares worker=4; make them equal (change the topology on every member of the job)"]
    );
    accepted(Kind::StatefulSet, &sts(4, fw));
    // A single-role StatefulSet may leave the topology out: it is inferred.
    accepted(
        Kind::StatefulSet,
        &sts(3, json!({"dljob.dev/framework": "pytorch"})),
    );
}

#[test]
fn statefulset_stopped_by_the_reconciler_keeps_its_size() {
    // Clean-up scales a finished job's StatefulSet to 0 and records the size
    // in dljob.dev/scaled-from; later updates of it are still accepted.
    let fw = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=4", "dljob.dev/scaled-from": "4"});
    let old = sts(
        4,
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=4"}),
    );
    assert!(problems_with(Kind::StatefulSet, &sts(0, fw.clone()), Some(&old), &[]).is_empty());
    // Without the annotation, 0 replicas contradict the topology.
    let bare = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=4"});
    assert_eq!(
        problems(Kind::StatefulSet, &sts(0, bare)),
        vec!["StatefulSet replicas is 0 but dljob.dev/replicas \"worker=4\" declares worker=4; make them equal (change the topology on every member of the job)"]
    );
}

#[test]
fn job_members_must_be_indexed_complete_and_fully_parallel() {
    let job = |mode: &str, completions: u32, parallelism: u32| {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "gpt-worker", "namespace": "ml", "labels": {"dljob.dev/job": "gpt", "dljob.dev/role": "worker"},
                         "annotations": {"dljob.dev/framework": "jax", "dljob.dev/replicas": "worker=2"}},
            "spec": {"completionMode": mode, "completions": completions, "parallelism": parallelism,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "jax"}]}}}
        })
    };
    assert_eq!(
        problems(Kind::Job, &job("NonIndexed", 2, 2)),
        vec!["a batch/v1 Job member needs spec.completionMode: Indexed (each pod needs a stable index)"]
    );
    assert_eq!(
        problems(Kind::Job, &job("Indexed", 3, 3)),
        vec!["Job completions is 3 but dljob.dev/replicas \"worker=2\" declares worker=2; make them equal (change the topology on every member of the job)"]
    );
    assert_eq!(
        problems(Kind::Job, &job("Indexed", 2, 1)),
        vec!["Job parallelism 1 is below completions 2: distributed training needs every replica running at once; set parallelism to 2"]
    );
    accepted(Kind::Job, &job("Indexed", 2, 2));
}

#[test]
fn plain_pod_index_must_be_present_and_in_range() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/index": "2"}))),
        vec!["dljob.dev/index 2 is out of range: role \"worker\" has 2 replicas in dljob.dev/replicas \"chief=1,worker=2\" (indexes 0 to 1)"]
    );
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/index": null}))),
        vec!["annotation dljob.dev/index is missing: role \"worker\" has 2 replicas, so each pod needs its index (0 to 1)"]
    );
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod("worker", json!({"dljob.dev/index": "one"}))
        ),
        vec!["dljob.dev/index \"one\" is not a number: use 0 to count-1"]
    );
    // A role with one replica needs no index.
    accepted(Kind::Pod, &tf_pod("chief", json!({})));
    accepted(
        Kind::Pod,
        &tf_pod("worker", json!({"dljob.dev/index": "0"})),
    );
}

#[test]
fn statefulset_pod_created_by_a_scale_up_is_refused() {
    let (obj, _) = review("validate-create-pod-resnet-worker-2.json");
    assert_eq!(
        problems(Kind::Pod, &obj),
        vec!["StatefulSet pod index 2 is out of range: role \"worker\" has 2 replicas in dljob.dev/replicas \"chief=1,worker=2,ps=1\"; scale StatefulSet \"resnet-worker\" back to 2, or change the topology on every member of the job"]
    );
    let (ok, _) = review("validate-create-pod-resnet-worker-1.json");
    assert!(problems(Kind::Pod, &ok).is_empty());
}

#[test]
fn coordinator_counts_are_enforced() {
    let mx = |t: &str| {
        pod(
            json!({"dljob.dev/job": "lin", "dljob.dev/role": "worker"}),
            json!({"dljob.dev/framework": "mxnet", "dljob.dev/replicas": t}),
        )
    };
    assert_eq!(
        problems(Kind::Pod, &mx("scheduler=2,server=1,worker=1")),
        vec!["dljob.dev/replicas: 2 scheduler replicas declared, but a mxnet job has exactly 1 scheduler"]
    );
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/replicas": "chief=2,worker=2"}))),
        vec!["dljob.dev/replicas: 2 chief replicas declared, but a tensorflow job has at most 1 chief"]
    );
    assert_eq!(
        problems(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/replicas": "worker=2,evaluator=2"}))),
        vec!["dljob.dev/replicas: 2 evaluator replicas declared, but a tensorflow job has at most 1 evaluator"]
    );
    accepted(Kind::Pod, &mx("scheduler=1,server=1,worker=1"));
}

#[test]
fn job_name_must_fit_the_hostnames() {
    let named = |job: &str| {
        pod(
            json!({"dljob.dev/job": job, "dljob.dev/role": "worker"}),
            json!({"dljob.dev/framework": "jax", "dljob.dev/replicas": "worker=1"}),
        )
    };
    let long = "a".repeat(41);
    assert_eq!(
        problems(Kind::Pod, &named(&long)),
        vec![format!("dljob.dev/job \"{long}\" is not a valid job name: use at most 40 lowercase letters, digits and '-', starting with a letter (it names the Service and every pod's hostname)")]
    );
    assert_eq!(problems(Kind::Pod, &named("1bert")).len(), 1);
    assert_eq!(problems(Kind::Pod, &named("Bert")).len(), 1);
    accepted(Kind::Pod, &named(&"a".repeat(40)));
    // A 40-char job with a long generic role overflows the 63-char label.
    let p = pod(
        json!({"dljob.dev/job": "a".repeat(40), "dljob.dev/role": "parameter-server-group"}),
        json!({"dljob.dev/framework": "generic", "dljob.dev/replicas": "parameter-server-group=1"}),
    );
    assert_eq!(
        problems(Kind::Pod, &p),
        vec![format!("hostname \"{}-parameter-server-group-N\" would be longer than 63 characters: shorten the job name or the role", "a".repeat(40))]
    );
}

#[test]
fn policy_values_are_checked() {
    let cases = [
        ("dljob.dev/backoff-limit", "-1", "dljob.dev/backoff-limit \"-1\" is not a whole number from 0 to 10000"),
        ("dljob.dev/backoff-limit", "lots", "dljob.dev/backoff-limit \"lots\" is not a whole number from 0 to 10000"),
        ("dljob.dev/restart-policy", "Always", "dljob.dev/restart-policy \"Always\" is not a restart policy; use one of ExitCode, Never"),
        ("dljob.dev/clean-pod-policy", "Some", "dljob.dev/clean-pod-policy \"Some\" is not a clean-pod policy; use one of Running, All, None"),
        ("dljob.dev/ttl-seconds-after-finished", "1h", "dljob.dev/ttl-seconds-after-finished \"1h\" is not a whole number of seconds (0 or more)"),
        ("dljob.dev/active-deadline-seconds", "0", "dljob.dev/active-deadline-seconds \"0\" is not a whole number of seconds (1 or more)"),
        ("dljob.dev/port", "70000", "dljob.dev/port \"70000\" is not a port number (1-65535)"),
        ("dljob.dev/slots", "0", "dljob.dev/slots \"0\" is not a slot count (1-1024)"),
        ("dljob.dev/ordered-start", "yes", "dljob.dev/ordered-start \"yes\" must be \"true\" or \"false\""),
        ("dljob.dev/ssh-path", "ssh", "dljob.dev/ssh-path \"ssh\" must be a clean absolute directory path of letters, digits, '.', '_' and '-' (no '..', at most 255 bytes), e.g. /home/mpiuser/.ssh"),
        // A newline would start a directive of its own in the ssh config.
        ("dljob.dev/ssh-path", "/root/.ssh\n    ProxyCommand sh -c x", "dljob.dev/ssh-path \"/root/.ssh\\n    ProxyCommand sh -c x\" must be a clean absolute directory path of letters, digits, '.', '_' and '-' (no '..', at most 255 bytes), e.g. /home/mpiuser/.ssh"),
        ("dljob.dev/ssh-path", "/root/../etc", "dljob.dev/ssh-path \"/root/../etc\" must be a clean absolute directory path of letters, digits, '.', '_' and '-' (no '..', at most 255 bytes), e.g. /home/mpiuser/.ssh"),
        ("dljob.dev/ssh-path", "/home/%u/.ssh", "dljob.dev/ssh-path \"/home/%u/.ssh\" must be a clean absolute directory path of letters, digits, '.', '_' and '-' (no '..', at most 255 bytes), e.g. /home/mpiuser/.ssh"),
    ];
    for (key, bad, message) in cases {
        assert_eq!(
            problems(Kind::Pod, &tf_pod("chief", json!({key: bad}))),
            vec![message],
            "{key}"
        );
    }
    let good = json!({
        "dljob.dev/backoff-limit": "0", "dljob.dev/restart-policy": "Never", "dljob.dev/clean-pod-policy": "All",
        "dljob.dev/ttl-seconds-after-finished": "0", "dljob.dev/active-deadline-seconds": "3600",
        "dljob.dev/port": "2223", "dljob.dev/slots": "8", "dljob.dev/ordered-start": "false", "dljob.dev/ssh-path": "/home/u/.ssh"
    });
    accepted(Kind::Pod, &tf_pod("chief", good));
}

#[test]
fn the_mpi_implementation_is_one_hydra_or_openmpi_knows_and_mpis_only() {
    let mpi = |implementation: &str| {
        pod(
            json!({"dljob.dev/job": "pi", "dljob.dev/role": "launcher"}),
            json!({"dljob.dev/framework": "mpi", "dljob.dev/replicas": "launcher=1,worker=2",
                   "dljob.dev/index": "0", "dljob.dev/mpi-implementation": implementation}),
        )
    };
    for good in ["OpenMPI", "Intel", "MPICH"] {
        accepted(Kind::Pod, &mpi(good));
    }
    assert_eq!(
        problems(Kind::Pod, &mpi("mpich")),
        vec!["dljob.dev/mpi-implementation \"mpich\" is not an MPI implementation dljob wires; use one of OpenMPI, Intel, MPICH (the MPI operator's spelling)"]
    );
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod("chief", json!({"dljob.dev/mpi-implementation": "MPICH"}))
        ),
        vec!["annotation dljob.dev/mpi-implementation is only for mpi and chainer jobs (framework tensorflow runs no mpirun): remove it"]
    );
}

#[test]
fn elastic_is_pytorch_only_and_must_cover_the_topology() {
    let torch = |elastic: &str| {
        pod(
            json!({"dljob.dev/job": "el", "dljob.dev/role": "worker"}),
            json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=1", "dljob.dev/elastic": elastic}),
        )
    };
    assert_eq!(
        problems(Kind::Pod, &torch("2:4")),
        vec!["dljob.dev/elastic \"2:4\" does not include the 1 replicas of dljob.dev/replicas \"worker=1\""]
    );
    assert_eq!(
        problems(Kind::Pod, &torch("4:2")),
        vec!["dljob.dev/elastic \"4:2\" is not a range: write \"min:max\" with 1 <= min <= max, e.g. \"2:4\""]
    );
    accepted(Kind::Pod, &torch("1:4"));
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod("chief", json!({"dljob.dev/elastic": "1:4"}))
        ),
        vec!["annotation dljob.dev/elastic is only for pytorch jobs: remove it"]
    );
}

/// An elastic job's workers are any count its range allows, every other
/// role keeping its count (master=1 of master=1,worker=3 under 2:5: workers
/// 1 to 4): a pod of any index below the largest is a member, a StatefulSet
/// or an Indexed Job of any size of the range is accepted, at creation and
/// when it is resized (a Job's completions and parallelism together);
/// beyond the range each is refused with the range. The master does not
/// resize.
#[test]
fn an_elastic_role_is_any_size_of_its_range() {
    const EL: &str = "role \"worker\" may have 1 to 4 replicas under dljob.dev/elastic \"2:5\" (the job's other roles have 1)";
    let annotations = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=3", "dljob.dev/elastic": "2:5"});
    let worker = |index: u32| {
        let mut a = annotations.clone();
        a["dljob.dev/index"] = json!(index.to_string());
        pod(
            json!({"dljob.dev/job": "el", "dljob.dev/role": "worker"}),
            a,
        )
    };
    // Grown to 4 workers: index 3 is a member; 4 is beyond the largest.
    accepted(Kind::Pod, &worker(3));
    assert_eq!(
        problems(Kind::Pod, &worker(4)),
        vec![format!(
            "dljob.dev/index 4 is out of range: {EL} (indexes 0 to 3)"
        )]
    );
    // A StatefulSet pod past the range says so in the set's terms.
    let mut sts_pod = worker(4);
    sts_pod["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/index");
    sts_pod["metadata"]["name"] = json!("el-worker-4");
    sts_pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = json!("4");
    sts_pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "el-worker", "uid": "u", "controller": true}]);
    assert_eq!(
        problems(Kind::Pod, &sts_pod),
        vec![format!(
            "StatefulSet pod index 4 is out of range: {EL} (indexes 0 to 3)"
        )]
    );
    // The master keeps its count.
    let mut master = pod(
        json!({"dljob.dev/job": "el", "dljob.dev/role": "master"}),
        annotations.clone(),
    );
    master["metadata"]["annotations"]["dljob.dev/index"] = json!("1");
    assert_eq!(
        problems(Kind::Pod, &master),
        vec!["dljob.dev/index 1 is out of range: role \"master\" has 1 replica in dljob.dev/replicas \"master=1,worker=3\" (indexes 0 to 0)"]
    );

    // Workloads: any size of the range, at creation and on update.
    let mut set = sts(3, annotations.clone());
    set["metadata"]["labels"]["dljob.dev/job"] = json!("el");
    for n in [1, 3, 4] {
        set["spec"]["replicas"] = json!(n);
        accepted(Kind::StatefulSet, &set);
    }
    set["spec"]["replicas"] = json!(5);
    assert_eq!(
        problems(Kind::StatefulSet, &set),
        vec![format!(
            "StatefulSet replicas is 5 but {EL}; resize it within that range"
        )]
    );
    let job = |n: u32| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "el-worker", "namespace": "ml", "labels": {"dljob.dev/job": "el", "dljob.dev/role": "worker"}, "annotations": annotations.clone()},
            "spec": {"completionMode": "Indexed", "completions": n, "parallelism": n,
                "template": {"metadata": {"labels": {"dljob.dev/job": "el", "dljob.dev/role": "worker"}, "annotations": annotations.clone()},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "img"}]}}}
        })
    };
    // `kubectl patch job el-worker -p '{"spec":{"completions":4,"parallelism":4}}'`.
    assert!(problems_with(Kind::Job, &job(4), Some(&job(3)), &[]).is_empty());
    assert!(problems_with(Kind::Job, &job(2), Some(&job(3)), &[]).is_empty());
    assert_eq!(
        problems_with(Kind::Job, &job(5), Some(&job(3)), &[]),
        vec![format!(
            "Job completions is 5 but {EL}; resize it within that range"
        )]
    );
    // Not elastic: the count, exactly, as before.
    let mut fixed = job(4);
    for at in [
        "/metadata/annotations",
        "/spec/template/metadata/annotations",
    ] {
        fixed
            .pointer_mut(at)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("dljob.dev/elastic");
    }
    let mut fixed_old = fixed.clone();
    fixed_old["spec"]["completions"] = json!(3);
    fixed_old["spec"]["parallelism"] = json!(3);
    assert_eq!(
        problems_with(Kind::Job, &fixed, Some(&fixed_old), &[]),
        vec!["Job completions is 4 but dljob.dev/replicas \"master=1,worker=3\" declares worker=3; make them equal (change the topology on every member of the job)"]
    );
}

/// An elastic role's whole-role workload covers the size it has, not the
/// declared count: grown over an index a plain pod of the role holds, it
/// is refused, since its pod of that index would be.
#[test]
fn an_elastic_workload_grown_over_a_plain_pods_index_is_refused() {
    let cfg = Config::default();
    let annotations = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=3", "dljob.dev/elastic": "2:5"});
    let mut a = annotations.clone();
    a["dljob.dev/index"] = json!("3");
    let plain = pod(
        json!({"dljob.dev/job": "el", "dljob.dev/role": "worker"}),
        a,
    );
    accepted(Kind::Pod, &plain);
    let peers = peers_of([(Kind::Pod, &plain)], Some("ml"), &cfg);
    let mut set = sts(3, annotations);
    set["metadata"]["labels"]["dljob.dev/job"] = json!("el");
    assert!(problems_with(Kind::StatefulSet, &set, None, &peers).is_empty());
    set["spec"]["replicas"] = json!(4);
    assert_eq!(
        problems_with(Kind::StatefulSet, &set, None, &peers),
        vec!["this StatefulSet covers worker 0 to 3 but Pod \"p\" of job \"el\" already covers worker 3: move this set's range (dljob.dev/index-offset) past it"]
    );
}

/// Under Kueue the group is the declared total on every pod, and Kueue
/// deletes pods beyond it: an elastic role may shrink there, not grow.
#[test]
fn an_elastic_role_does_not_grow_under_kueue() {
    let worker = |index: u32| {
        pod(
            json!({"dljob.dev/job": "el", "dljob.dev/role": "worker"}),
            json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=3", "dljob.dev/elastic": "2:5",
                "dljob.dev/gang": "kueue", "dljob.dev/queue": "team", "dljob.dev/index": index.to_string()}),
        )
    };
    accepted(Kind::Pod, &worker(2));
    assert_eq!(
        problems(Kind::Pod, &worker(3)),
        vec!["role \"worker\" would have 4 replicas, more than the 3 of dljob.dev/replicas \"worker=3\": under gang kueue the job is one group of its declared 3 pods and pods beyond it are deleted as excess, so an elastic job there keeps at most its declared size (it may shrink)"]
    );
}

#[test]
fn an_elastic_range_is_bounded_by_the_replica_limit() {
    let p = pod(
        json!({"dljob.dev/job": "el", "dljob.dev/role": "worker"}),
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=1", "dljob.dev/elastic": "1:10001"}),
    );
    assert_eq!(
        problems(Kind::Pod, &p),
        vec!["dljob.dev/elastic \"1:10001\": a job has at most 10000 replicas in all"]
    );
}

#[test]
fn container_annotation_must_name_a_container() {
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod("chief", json!({"dljob.dev/container": "trainer"}))
        ),
        vec!["dljob.dev/container \"trainer\" names no container of this Pod; containers are main"]
    );
    accepted(
        Kind::Pod,
        &tf_pod("chief", json!({"dljob.dev/container": "main"})),
    );
}

#[test]
fn workloads_may_not_carry_a_pod_index() {
    let s = sts(
        2,
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/index": "0"}),
    );
    assert_eq!(
        problems(Kind::StatefulSet, &s),
        vec!["annotation dljob.dev/index is for plain Pods; a StatefulSet's pods take their index from the ordinal: remove it"]
    );
}

#[test]
fn template_and_workload_must_agree() {
    let mut s = sts(2, json!({"dljob.dev/framework": "pytorch"}));
    s["spec"]["template"]["metadata"] = json!({"labels": {"dljob.dev/role": "master"}});
    assert_eq!(
        problems(Kind::StatefulSet, &s),
        vec!["label dljob.dev/role is \"worker\" on the workload but \"master\" in its pod template; make them equal"]
    );
}

#[test]
fn unknown_dljob_annotations_warn() {
    let p = tf_pod("chief", json!({"dljob.dev/replica": "chief=1"}));
    let warnings = validate(
        Subject::new(Kind::Pod, &p, Some("ml")),
        &Config::default(),
        &[],
    )
    .unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].starts_with("annotation dljob.dev/replica is not a dljob annotation and is ignored; known ones are dljob.dev/framework, dljob.dev/replicas"), "{warnings:?}");
}

#[test]
fn update_changing_identity_keys_is_denied() {
    let old = tf_pod("worker", json!({}));
    let mut changed_role = old.clone();
    changed_role["metadata"]["labels"]["dljob.dev/role"] = json!("chief");
    changed_role["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/index");
    assert_eq!(
        problems_with(Kind::Pod, &changed_role, Some(&old), &[]),
        vec![
            "dljob.dev/role cannot change on an existing member (\"worker\" → \"chief\"): delete and recreate the job's members to change it",
            "dljob.dev/index cannot change on an existing member (\"1\" → (unset)): delete and recreate the job's members to change it",
        ]
    );
    let mut changed_topology = old.clone();
    changed_topology["metadata"]["annotations"]["dljob.dev/replicas"] = json!("chief=1,worker=3");
    assert_eq!(
        problems_with(Kind::Pod, &changed_topology, Some(&old), &[]),
        vec!["dljob.dev/replicas cannot change on an existing member (\"chief=1,worker=2\" → \"chief=1,worker=3\"): delete and recreate the job's members to change it"]
    );
    let mut reordered = old.clone();
    reordered["metadata"]["annotations"]["dljob.dev/replicas"] = json!("worker=2,chief=1");
    assert!(problems_with(Kind::Pod, &reordered, Some(&old), &[]).is_empty());
    let mut changed_framework = old.clone();
    changed_framework["metadata"]["annotations"]["dljob.dev/framework"] = json!("pytorch");
    changed_framework["metadata"]["annotations"]["dljob.dev/replicas"] = json!("master=1,worker=2");
    changed_framework["metadata"]["labels"]["dljob.dev/role"] = json!("worker");
    assert_eq!(
        problems_with(Kind::Pod, &changed_framework, Some(&old), &[]),
        vec![
            "dljob.dev/framework cannot change on an existing member (\"tensorflow\" → \"pytorch\"): delete and recreate the job's members to change it",
            "dljob.dev/replicas cannot change on an existing member (\"chief=1,worker=2\" → \"master=1,worker=2\"): delete and recreate the job's members to change it",
        ]
    );
    let mut unlabelled = old.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/job");
    assert_eq!(
        problems_with(Kind::Pod, &unlabelled, Some(&old), &[]),
        vec!["dljob.dev/job cannot change on an existing member (\"mnist\" → (unset)): delete and recreate the job's members to change it"]
    );
}

#[test]
fn update_making_an_existing_pod_a_member_is_denied() {
    // An unrelated pod (say a finished one) relabelled into a job: it was
    // never wired, and its exit would count as the job's.
    let member = tf_pod("worker", json!({}));
    let mut old = member.clone();
    old["metadata"]["labels"] = json!({"app": "batch"});
    old["metadata"]["annotations"] = json!({});
    assert_eq!(
        problems_with(Kind::Pod, &member, Some(&old), &[]),
        vec!["an existing pod cannot join job \"mnist\": dljob wires a member pod when it is created; create the pod with dljob.dev/job, dljob.dev/role and dljob.dev/index instead of adding them"]
    );
    // Its index is as fixed as its role.
    let mut moved = member.clone();
    moved["metadata"]["annotations"]["dljob.dev/index"] = json!("0");
    assert_eq!(
        problems_with(Kind::Pod, &moved, Some(&member), &[]),
        vec!["dljob.dev/index cannot change on an existing member (\"1\" → \"0\"): delete and recreate the job's members to change it"]
    );
    // An annotation of its own is still any member's to add.
    let mut noted = member.clone();
    noted["metadata"]["annotations"]["team.example/owner"] = json!("ada");
    assert!(problems_with(Kind::Pod, &noted, Some(&member), &[]).is_empty());
    // A StatefulSet still joins by UPDATE: its template is rewritten and its
    // pods come again, wired.
    let joined = sts(2, json!({"dljob.dev/framework": "pytorch"}));
    let mut before = joined.clone();
    before["metadata"]["labels"] = json!({"app": "bert"});
    before["metadata"]["annotations"] = json!({});
    assert!(problems_with(Kind::StatefulSet, &joined, Some(&before), &[]).is_empty());
}

#[test]
fn captured_updates_are_judged_on_what_changed() {
    // An annotation added to a pod: fine.
    let (obj, old) = review("validate-update-pod-resnet-chief.json");
    assert!(problems_with(Kind::Pod, &obj, old.as_ref(), &[]).is_empty());
    // A StatefulSet patched from 2 to 3 replicas against worker=2: refused.
    let (obj, old) = review("validate-update-statefulset-resnet-worker.json");
    assert_eq!(
        problems_with(Kind::StatefulSet, &obj, old.as_ref(), &[]),
        vec!["StatefulSet replicas is 3 but dljob.dev/replicas \"chief=1,worker=2,ps=1\" declares worker=2; make them equal (change the topology on every member of the job)"]
    );
}

/// An UPDATE is refused only for what it breaks. A StatefulSet `kubectl
/// scale`d past its role (the scale subresource never reaches the webhook)
/// can still be annotated, marked and scaled to 0 by the reconciler; an
/// update that scales it further is refused.
#[test]
fn an_update_is_refused_for_what_it_breaks_not_for_what_was_broken() {
    let declared = json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2"});
    let scaled = sts(3, declared.clone());
    let mismatch = "StatefulSet replicas is 3 but dljob.dev/replicas \"worker=2\" declares worker=2; make them equal (change the topology on every member of the job)";
    assert_eq!(problems(Kind::StatefulSet, &scaled), vec![mismatch]);
    let mut noted = scaled.clone();
    noted["metadata"]["annotations"]["dljob.dev/finished-run"] = json!("uid-1");
    assert!(problems_with(Kind::StatefulSet, &noted, Some(&scaled), &[]).is_empty());
    // The clean-up: replicas 0 with the size it had, in one patch.
    let mut stopped = scaled.clone();
    stopped["spec"]["replicas"] = json!(0);
    stopped["metadata"]["annotations"]["dljob.dev/scaled-from"] = json!("3");
    assert!(problems_with(Kind::StatefulSet, &stopped, Some(&scaled), &[]).is_empty());
    // Further from the topology: refused for that.
    let further = sts(4, declared.clone());
    assert_eq!(
        problems_with(Kind::StatefulSet, &further, Some(&scaled), &[]),
        vec!["StatefulSet replicas is 4 but dljob.dev/replicas \"worker=2\" declares worker=2; make them equal (change the topology on every member of the job)"]
    );
    // And a sound set is still refused a bad update.
    let sound = sts(2, declared);
    assert_eq!(
        problems_with(Kind::StatefulSet, &scaled, Some(&sound), &[]),
        vec![mismatch]
    );
}

#[test]
fn scaling_a_single_role_workload_is_a_topology_change() {
    let old = sts(3, json!({"dljob.dev/framework": "pytorch"}));
    let new = sts(4, json!({"dljob.dev/framework": "pytorch"}));
    assert_eq!(
        problems_with(Kind::StatefulSet, &new, Some(&old), &[]),
        vec!["dljob.dev/replicas cannot change on an existing member (\"worker=3\" → \"worker=4\"): delete and recreate the job's members to change it"]
    );
}

#[test]
fn members_must_agree_with_their_peers() {
    let cfg = Config::default();
    let mut chief = tf_pod("chief", json!({}));
    chief["metadata"]["name"] = json!("chief");
    let peers = peers_of([(Kind::Pod, &chief)], Some("ml"), &cfg);
    assert_eq!(peers.len(), 1);
    // Agreeing worker: accepted.
    assert!(problems_with(Kind::Pod, &tf_pod("worker", json!({})), None, &peers).is_empty());
    // Same topology written in another order: still agrees.
    assert!(problems_with(
        Kind::Pod,
        &tf_pod("worker", json!({"dljob.dev/replicas": "worker=2,chief=1"})),
        None,
        &peers
    )
    .is_empty());
    // Different topology.
    assert_eq!(
        problems_with(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/replicas": "chief=1,worker=3"})), None, &peers),
        vec!["dljob.dev/replicas is chief=1,worker=3 here but chief=1,worker=2 on Pod \"chief\" of job \"mnist\"; every member of a job must agree"]
    );
    // Different policy.
    assert_eq!(
        problems_with(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/backoff-limit": "5"})), None, &peers),
        vec!["dljob.dev/backoff-limit is 5 here but 3 on Pod \"chief\" of job \"mnist\"; every member of a job must agree"]
    );
    // Every key that differs is named, with both values.
    assert_eq!(
        problems_with(
            Kind::Pod,
            &tf_pod("worker", json!({"dljob.dev/port": "2300", "dljob.dev/ttl-seconds-after-finished": "60"})),
            None,
            &peers
        ),
        vec![
            "dljob.dev/port is 2300 here but 2222 on Pod \"chief\" of job \"mnist\"; every member of a job must agree",
            "dljob.dev/ttl-seconds-after-finished is 60 here but unset on Pod \"chief\" of job \"mnist\"; every member of a job must agree",
        ]
    );
    // Two pods claiming the same replica.
    let mut w1 = tf_pod("worker", json!({}));
    w1["metadata"]["name"] = json!("w1");
    let peers = peers_of([(Kind::Pod, &w1)], Some("ml"), &cfg);
    let mut w1_again = tf_pod("worker", json!({}));
    w1_again["metadata"]["name"] = json!("w1-copy");
    assert_eq!(
        problems_with(Kind::Pod, &w1_again, None, &peers),
        vec!["Pod \"w1\" already is worker 1 of job \"mnist\"; give this pod another dljob.dev/index"]
    );
    // The object itself (UPDATE) is not its own peer.
    assert!(problems_with(Kind::Pod, &w1, None, &peers).is_empty());
}

/// A generic job's ranks follow the declared order of its roles, so two
/// members that order them differently would both have a rank 0: they
/// disagree. A framework with fixed roles ranks them its own way, and any
/// order agrees (the tensorflow case above).
#[test]
fn generic_members_must_declare_roles_in_the_same_order() {
    let cfg = Config::default();
    let generic = |role: &str, name: &str, replicas: &str| {
        let mut p = pod(
            json!({"dljob.dev/job": "sim", "dljob.dev/role": role}),
            json!({"dljob.dev/framework": "generic", "dljob.dev/replicas": replicas, "dljob.dev/index": "0"}),
        );
        p["metadata"]["name"] = json!(name);
        p
    };
    let trainer = generic("trainer", "t0", "trainer=1,reader=1");
    let peers = peers_of([(Kind::Pod, &trainer)], Some("ml"), &cfg);
    assert!(problems_with(
        Kind::Pod,
        &generic("reader", "r0", "trainer=1,reader=1"),
        None,
        &peers
    )
    .is_empty());
    assert_eq!(
        problems_with(Kind::Pod, &generic("reader", "r0", "reader=1,trainer=1"), None, &peers),
        vec!["dljob.dev/replicas is reader=1,trainer=1 here but trainer=1,reader=1 on Pod \"t0\" of job \"sim\"; every member of a job must agree"]
    );
}

#[test]
fn objects_without_the_job_label_are_allowed() {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]}});
    assert!(problems(Kind::Pod, &p).is_empty());
}

#[test]
fn a_statefulset_whose_pods_could_not_start_is_refused_before_it_makes_them() {
    let mut w = sts(
        1400,
        json!({"dljob.dev/framework": "tensorflow", "dljob.dev/replicas": "chief=1,worker=1400"}),
    );
    w["metadata"]["namespace"] = json!("ml-research-team-a");
    w["metadata"]["labels"]["dljob.dev/job"] = json!("resnet50-imagenet-hparam-sweep-trial7");
    // Checked at the highest ordinal, whose TF_CONFIG is the longest.
    assert_eq!(
        problems(Kind::StatefulSet, &w),
        vec!["TF_CONFIG would be 164309 bytes for worker 1399; Linux refuses to start a process with an environment string over 131072 bytes, so the container could not start: use fewer replicas, or a shorter job name or namespace (every host is named resnet50-imagenet-hparam-sweep-trial7-<role>-<index>.resnet50-imagenet-hparam-sweep-trial7.ml-research-team-a.svc)"]
    );
    // The same topology as a PyTorch job injects no host list: accepted.
    w["metadata"]["annotations"] =
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=1400"});
    accepted(Kind::StatefulSet, &w);
}

/// The rules behind the refusals, with their stable reasons (what a metric
/// label or a condition reason carries).
fn rules(kind: Kind, obj: &Value, old: Option<&Value>) -> Vec<&'static str> {
    match validate(
        Subject::new(kind, obj, Some("ml")).with_old(old),
        &Config::default(),
        &[],
    ) {
        Ok(_) => Vec::new(),
        Err(v) => v.0.iter().map(|v| v.rule.reason()).collect(),
    }
}

#[test]
fn every_refusal_names_its_rule() {
    assert_eq!(
        rules(
            Kind::Pod,
            &pod(
                json!({"dljob.dev/job": "j", "dljob.dev/role": "worker"}),
                json!({"dljob.dev/framework": "tensorflw", "dljob.dev/replicas": "worker=1"})
            ),
            None
        ),
        vec!["UnknownFramework"]
    );
    assert_eq!(
        rules(
            Kind::StatefulSet,
            &sts(
                3,
                json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=2"})
            ),
            None
        ),
        vec!["SizeMismatch"]
    );
    assert_eq!(
        rules(
            Kind::Pod,
            &pod(
                json!({"dljob.dev/job": "j", "dljob.dev/role": "worker", "dljob.dev/framework": "jax"}),
                json!({"dljob.dev/replicas": "worker=1"})
            ),
            None
        ),
        vec!["MisplacedKey"]
    );
    let (obj, old) = review("validate-update-statefulset-resnet-worker.json");
    assert_eq!(
        rules(Kind::StatefulSet, &obj, old.as_ref()),
        vec!["SizeMismatch"]
    );
    let mut changed = obj.clone();
    changed["spec"]["replicas"] = json!(2);
    changed["metadata"]["labels"]["dljob.dev/role"] = json!("ps");
    let got = rules(Kind::StatefulSet, &changed, old.as_ref());
    assert_eq!(got[0], "ImmutableKey", "{got:?}");
}

#[test]
fn gang_values_are_checked() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("chief", json!({"dljob.dev/gang": "yunikorn"}))),
        vec!["dljob.dev/gang \"yunikorn\" is not a gang scheduler; use one of none, kueue, volcano, coscheduling, kubernetes"]
    );
    assert_eq!(
        problems(Kind::Pod, &tf_pod("chief", json!({"dljob.dev/gang": "coscheduling", "dljob.dev/queue": "q"}))),
        vec!["dljob.dev/queue \"q\" is for the kueue and volcano gang schedulers; dljob.dev/gang is \"coscheduling\""]
    );
    assert_eq!(
        problems(Kind::Pod, &tf_pod("chief", json!({"dljob.dev/gang": "kubernetes", "dljob.dev/queue": "q"}))),
        vec!["dljob.dev/queue \"q\" is for the kueue and volcano gang schedulers; dljob.dev/gang is \"kubernetes\""]
    );
    accepted(
        Kind::Pod,
        &tf_pod("chief", json!({"dljob.dev/gang": "kubernetes"})),
    );
    accepted(
        Kind::Pod,
        &tf_pod(
            "chief",
            json!({"dljob.dev/gang": "volcano", "dljob.dev/queue": "q"}),
        ),
    );
}

/// `dljob.dev/topology`: a label key, declared only where the job's gang
/// scheduler can keep the job in one domain of it (each in its own terms,
/// see src/gang/); members agree on it like every job-wide key.
#[test]
fn topology_is_a_label_key_that_the_gang_scheduler_can_declare() {
    let with = |gang: &str, topology: &str| {
        problems(
            Kind::Pod,
            &tf_pod(
                "chief",
                json!({"dljob.dev/gang": gang, "dljob.dev/topology": topology}),
            ),
        )
    };
    assert!(with("kubernetes", "topology.kubernetes.io/zone").is_empty());
    assert!(with("kubernetes", "required:example.com/rack").is_empty());
    assert!(with("kueue", "preferred:example.com/rack").is_empty());
    assert_eq!(
        with("kubernetes", "preferred:example.com/rack"),
        vec!["dljob.dev/topology \"preferred:example.com/rack\" cannot be declared: the kubernetes gang's topology constraint is a requirement only (every pod in one domain); write dljob.dev/topology without \"preferred:\""]
    );
    assert_eq!(
        with("volcano", "example.com/rack"),
        vec!["dljob.dev/topology \"example.com/rack\" cannot be declared: Volcano keeps a job together by tiers of its HyperNodes (the PodGroup's spec.networkTopology), not by a node label, and dljob does not declare those; use dljob.dev/gang: kubernetes or kueue for a node label"]
    );
    assert_eq!(
        with("coscheduling", "example.com/rack"),
        vec!["dljob.dev/topology \"example.com/rack\" cannot be declared: the coscheduling gang has no way to keep a job in one domain of a node label; use dljob.dev/gang: kubernetes or kueue"]
    );
    assert_eq!(
        with("none", "example.com/rack"),
        vec!["dljob.dev/topology \"example.com/rack\" cannot be declared: without a gang scheduler nothing places the job as one; set dljob.dev/gang: kubernetes or kueue"]
    );
    assert_eq!(
        with("kubernetes", "Rack Of/Nodes"),
        vec!["dljob.dev/topology \"Rack Of/Nodes\": \"Rack Of/Nodes\" is not a label key (an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric), e.g. \"topology.kubernetes.io/zone\""]
    );
    assert_eq!(
        with("kubernetes", "rack:example.com/rack"),
        vec!["dljob.dev/topology \"rack:example.com/rack\": \"rack\" is not a mode; write KEY, required:KEY or preferred:KEY with a node label key, e.g. \"topology.kubernetes.io/zone\""]
    );
    // Members agree on it (the plain key is the required form).
    let cfg = Config::default();
    let mut chief = tf_pod(
        "chief",
        json!({"dljob.dev/gang": "kueue", "dljob.dev/topology": "example.com/rack"}),
    );
    chief["metadata"]["name"] = json!("chief");
    let peers = peers_of([(Kind::Pod, &chief)], Some("ml"), &cfg);
    assert!(problems_with(
        Kind::Pod,
        &tf_pod(
            "worker",
            json!({"dljob.dev/gang": "kueue", "dljob.dev/topology": "required:example.com/rack"})
        ),
        None,
        &peers
    )
    .is_empty());
    assert_eq!(
        problems_with(Kind::Pod, &tf_pod("worker", json!({"dljob.dev/gang": "kueue"})), None, &peers),
        vec!["dljob.dev/topology is unset here but required:example.com/rack on Pod \"chief\" of job \"mnist\"; every member of a job must agree"]
    );
}

/// Kueue would admit a StatefulSet carrying its queue label as a workload
/// of its own: the job's pod group would never be whole.
#[test]
fn a_kueue_queue_label_on_a_workload_itself_is_refused() {
    let mut s = sts(
        2,
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/gang": "kueue"}),
    );
    accepted(Kind::StatefulSet, &s);
    s["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
    assert_eq!(
        problems(Kind::StatefulSet, &s),
        vec!["label kueue.x-k8s.io/queue-name on the StatefulSet itself makes Kueue admit it as a workload of its own, outside the job's pod group: remove it and set dljob.dev/queue (or put the label on the pod template)"]
    );
    // Without the kueue gang it is Kueue's business, not dljob's.
    s["metadata"]["annotations"]["dljob.dev/gang"] = json!("none");
    accepted(Kind::StatefulSet, &s);
}

#[test]
fn members_must_agree_on_the_gang() {
    let cfg = Config::default();
    let mut chief = tf_pod("chief", json!({"dljob.dev/gang": "volcano"}));
    chief["metadata"]["name"] = json!("chief");
    let peers = peers_of([(Kind::Pod, &chief)], Some("ml"), &cfg);
    assert_eq!(
        problems_with(Kind::Pod, &tf_pod("worker", json!({})), None, &peers),
        vec!["dljob.dev/gang is none here but volcano on Pod \"chief\" of job \"mnist\"; every member of a job must agree"]
    );
}

/// Admission writes the port and the gang it resolved from the config into
/// a member that did not set them, so a config reloaded later (another
/// default port, a default gang) neither changes how the reconciler or a
/// restarted dljob reads the members already running nor lets a new member
/// join with other wiring unnoticed.
#[test]
fn a_config_reload_cannot_split_a_running_job() {
    use dljob::mutate::{mutate, Operation};
    let before = Config::default();
    let after = Config::from_yaml("ports:\n  tensorflow: 3333\ngang: coscheduling\n").unwrap();
    let admitted = |role: &str, config: &Config| {
        let mut p = tf_pod(role, json!({}));
        p["metadata"]["name"] = json!(role);
        mutate(
            Subject::new(Kind::Pod, &p, Some("ml")),
            Operation::Create,
            config,
        )
        .unwrap()
        .unwrap()
        .object
    };
    let chief = admitted("chief", &before);
    let annotations = &chief["metadata"]["annotations"];
    assert_eq!(annotations["dljob.dev/port"], json!("2222"));
    assert_eq!(annotations["dljob.dev/gang"], json!("none"));
    // Read again under the reloaded config: still what it was wired with.
    let peers = peers_of([(Kind::Pod, &chief)], Some("ml"), &after);
    assert_eq!(peers[0].spec.port, 2222);
    assert_eq!(peers[0].spec.gang, "none");
    // A worker admitted under the new config disagrees, and is told how.
    let worker = admitted("worker", &after);
    let refused = match validate(Subject::new(Kind::Pod, &worker, Some("ml")), &after, &peers) {
        Ok(_) => Vec::new(),
        Err(v) => v.0.into_iter().map(|v| v.message).collect(),
    };
    assert_eq!(
        refused,
        vec![
            "dljob.dev/gang is coscheduling here but none on Pod \"chief\" of job \"mnist\"; every member of a job must agree",
            "dljob.dev/port is 3333 here but 2222 on Pod \"chief\" of job \"mnist\"; every member of a job must agree",
        ]
    );
    // One that says what the job uses joins.
    let mut worker = tf_pod(
        "worker",
        json!({"dljob.dev/port": "2222", "dljob.dev/gang": "none"}),
    );
    worker["metadata"]["name"] = json!("worker");
    let worker = mutate(
        Subject::new(Kind::Pod, &worker, Some("ml")),
        Operation::Create,
        &after,
    )
    .unwrap()
    .unwrap()
    .object;
    assert!(validate(Subject::new(Kind::Pod, &worker, Some("ml")), &after, &peers).is_ok());
}

/// Collective frameworks restart every member by default, parameter-server
/// and generic jobs the failed pod; the annotation says otherwise.
#[test]
fn restart_scope_defaults_per_framework_and_is_checked() {
    let scope = |framework: &str, replicas: &str, role: &str, extra: Value| {
        let mut ann = json!({"dljob.dev/framework": framework, "dljob.dev/replicas": replicas});
        for (k, v) in extra.as_object().unwrap() {
            ann[k] = v.clone();
        }
        let p = pod(json!({"dljob.dev/job": "j", "dljob.dev/role": role}), ann);
        dljob::member::parse(Kind::Pod, &p, Some("ml"), &Config::default())
            .unwrap()
            .unwrap()
            .member
            .spec
            .policies
            .restart_scope
            .as_str()
    };
    assert_eq!(scope("pytorch", "master=1", "master", json!({})), "Job");
    assert_eq!(
        scope("mpi", "launcher=1,worker=1", "launcher", json!({})),
        "Job"
    );
    assert_eq!(scope("jax", "worker=1", "worker", json!({})), "Job");
    assert_eq!(scope("tensorflow", "chief=1", "chief", json!({})), "Pod");
    assert_eq!(
        scope(
            "mxnet",
            "scheduler=1,server=1,worker=1",
            "scheduler",
            json!({})
        ),
        "Pod"
    );
    assert_eq!(scope("generic", "a=1", "a", json!({})), "Pod");
    assert_eq!(
        scope(
            "tensorflow",
            "chief=1",
            "chief",
            json!({"dljob.dev/restart-scope": "Job"})
        ),
        "Job"
    );
    assert_eq!(
        problems(
            Kind::Pod,
            &tf_pod("chief", json!({"dljob.dev/restart-scope": "job"}))
        ),
        vec!["dljob.dev/restart-scope \"job\" is not a restart scope; use one of Pod, Job"]
    );
}

/// A ChainerMN job whose 6 workers are two StatefulSets: 2 from index 0
/// and 4 from index 2 (`dljob.dev/index-offset`).
fn worker_set(name: &str, replicas: u32, offset: Option<u32>) -> Value {
    let mut annotations =
        json!({"dljob.dev/framework": "chainer", "dljob.dev/replicas": "master=1,worker=6"});
    if let Some(o) = offset {
        annotations["dljob.dev/index-offset"] = json!(o.to_string());
    }
    let mut s = sts(replicas, annotations);
    s["metadata"]["name"] = json!(name);
    s["metadata"]["labels"]["dljob.dev/job"] = json!("cmn");
    s
}

#[test]
fn a_role_split_over_sets_is_checked_range_by_range() {
    let cfg = Config::default();
    let a = worker_set("gpu8", 2, Some(0));
    let b = worker_set("gpu4", 4, Some(2));
    accepted(Kind::StatefulSet, &a);
    accepted(Kind::StatefulSet, &b);
    let peers = peers_of([(Kind::StatefulSet, &a)], Some("ml"), &cfg);
    assert!(problems_with(Kind::StatefulSet, &b, None, &peers).is_empty());
    // Overlapping ranges name both members.
    let overlapping = worker_set("gpu4", 4, Some(1));
    assert_eq!(
        problems_with(Kind::StatefulSet, &overlapping, None, &peers),
        vec!["this StatefulSet covers worker 1 to 4 but StatefulSet \"gpu8\" of job \"cmn\" already covers worker 0 to 1: give each set its own range with dljob.dev/index-offset"]
    );
    // A set without an offset is the whole role.
    assert_eq!(
        problems_with(Kind::StatefulSet, &worker_set("all", 6, None), None, &peers),
        vec!["this StatefulSet covers worker 0 to 5 but StatefulSet \"gpu8\" of job \"cmn\" already covers worker 0 to 1: a role split over several workloads needs dljob.dev/index-offset on each (the first index it covers)"]
    );
    // Past the role's count.
    assert_eq!(
        problems(Kind::StatefulSet, &worker_set("gpu4", 4, Some(3))),
        vec!["StatefulSet replicas 4 from dljob.dev/index-offset 3 covers worker indexes 3 to 6 but dljob.dev/replicas \"master=1,worker=6\" declares worker=6 (indexes 0 to 5); make the sets of role worker add up to 6"]
    );
    // A pod of the second set past the role's count (the set scaled from 4
    // to 5): told the size the set can have, named, not the role's count.
    let beyond = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "gpu4-4", "namespace": "ml",
            "labels": {"dljob.dev/job": "cmn", "dljob.dev/role": "worker", "apps.kubernetes.io/pod-index": "4"},
            "annotations": {"dljob.dev/framework": "chainer", "dljob.dev/replicas": "master=1,worker=6", "dljob.dev/index-offset": "2"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "gpu4", "uid": "u", "controller": true}]
        },
        "spec": {"containers": [{"name": "c", "image": "img"}]}
    });
    assert_eq!(
        problems(Kind::Pod, &beyond),
        vec!["StatefulSet pod index 6 (its ordinal 4 + dljob.dev/index-offset 2) is out of range: role \"worker\" has 6 replicas in dljob.dev/replicas \"master=1,worker=6\"; scale StatefulSet \"gpu4\" back to 4 (the role's indexes 2 to 5), or change the topology on every member of the job"]
    );
    // A plain pod in a set's range.
    let mut pod = tf_pod("worker", json!({}));
    pod["metadata"]["labels"]["dljob.dev/job"] = json!("cmn");
    pod["metadata"]["annotations"] = json!({"dljob.dev/framework": "chainer", "dljob.dev/replicas": "master=1,worker=6", "dljob.dev/index": "1"});
    assert_eq!(
        problems_with(Kind::Pod, &pod, None, &peers),
        vec!["this Pod covers worker 1 but StatefulSet \"gpu8\" of job \"cmn\" already covers worker 0 to 1: give this pod another dljob.dev/index"]
    );
    // Not on a plain pod; a number.
    pod["metadata"]["annotations"]["dljob.dev/index-offset"] = json!("2");
    assert_eq!(
        problems(Kind::Pod, &pod),
        vec!["annotation dljob.dev/index-offset is for StatefulSets and Indexed Jobs that are one of several sets of a role; a plain pod gives its own dljob.dev/index: remove it"]
    );
    let mut bad = worker_set("x", 2, None);
    bad["metadata"]["annotations"]["dljob.dev/index-offset"] = json!("two");
    assert_eq!(
        problems(Kind::StatefulSet, &bad),
        vec![
            "dljob.dev/index-offset \"two\" is not an index (0 to 9999)",
            "StatefulSet replicas is 2 but dljob.dev/replicas \"master=1,worker=6\" declares worker=6; make them equal (change the topology on every member of the job)"
        ]
    );
}

#[test]
fn slots_per_worker_range_are_checked_against_the_workers_and_their_gpus() {
    let mut s = worker_set("gpu4", 4, Some(2));
    s["metadata"]["annotations"]["dljob.dev/slots"] = json!("0-1=8,2-6=4");
    assert_eq!(
        problems(Kind::StatefulSet, &s),
        vec!["dljob.dev/slots \"0-1=8,2-6=4\" names worker 6, but the job has 6 workers (0 to 5)"]
    );
    // A set whose GPUs differ from its range's slots is warned about.
    s["metadata"]["annotations"]["dljob.dev/slots"] = json!("0-1=8,2-5=2");
    s["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "4"}});
    let warnings = validate(
        Subject::new(Kind::StatefulSet, &s, Some("ml")),
        &Config::default(),
        &[],
    )
    .unwrap();
    assert_eq!(
        warnings,
        vec!["the worker's framework container requests 4 GPUs but dljob.dev/slots \"0-1=8,2-5=2\" gives worker 2 2 slots; give the range 2-5 4 slots on every member"]
    );
    s["metadata"]["annotations"]["dljob.dev/slots"] = json!("0-1=8,2-5=4");
    accepted(Kind::StatefulSet, &s);
}

// ---- dljob.dev/tensorboard ---------------------------------------------------

/// A TensorFlow chief with `dljob.dev/tensorboard: logs:runs/mnist`, the
/// volume `volume` in its spec and, when `mounted`, in its container.
fn tensorboard_pod(volume: Value, mounted: bool) -> Value {
    let mut p = tf_pod("chief", json!({"dljob.dev/tensorboard": "logs:runs/mnist"}));
    p["spec"]["volumes"] = json!([{"name": "cache", "emptyDir": {}}, volume]);
    if mounted {
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "logs", "mountPath": "/var/log/train"}]);
    }
    p
}

#[test]
fn a_tensorboard_volume_of_shared_storage_is_accepted() {
    for source in [
        json!({"persistentVolumeClaim": {"claimName": "team-logs"}}),
        json!({"nfs": {"server": "nfs.example.internal", "path": "/exports/logs"}}),
        json!({"cephfs": {"monitors": ["10.0.0.1:6789"], "path": "/logs"}}),
        json!({"csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}}),
    ] {
        let mut volume = source;
        volume["name"] = json!("logs");
        accepted(Kind::Pod, &tensorboard_pod(volume, true));
    }
}

#[test]
fn a_tensorboard_volume_each_pod_has_for_itself_is_refused_with_why() {
    const FIX: &str = "TensorBoard, in a pod of its own, would not see what the training writes there; use storage every member and TensorBoard can mount: a ReadWriteMany persistentVolumeClaim, nfs, cephfs or a CSI driver's shared volume";
    for (source, why) in [
        (
            json!({"emptyDir": {}}),
            "an emptyDir, which each pod has for itself",
        ),
        (json!({}), "an emptyDir, which each pod has for itself"),
        (
            json!({"hostPath": {"path": "/var/log"}}),
            "a hostPath, a directory of whichever node each pod runs on",
        ),
        (
            json!({"ephemeral": {"volumeClaimTemplate": {"spec": {}}}}),
            "an ephemeral volume, a claim made for each pod and deleted with it",
        ),
        (
            json!({"configMap": {"name": "c"}}),
            "a configMap volume, read-only and filled from the ConfigMap",
        ),
        (
            json!({"secret": {"secretName": "s"}}),
            "a secret volume, read-only and filled from the Secret",
        ),
        (
            json!({"downwardAPI": {"items": []}}),
            "a downwardAPI volume, which holds the pod's own fields",
        ),
        (
            json!({"projected": {"sources": []}}),
            "a projected volume, read-only and filled by the kubelet",
        ),
    ] {
        let mut volume = source;
        volume["name"] = json!("logs");
        assert_eq!(
            problems(Kind::Pod, &tensorboard_pod(volume, true)),
            vec![format!(
                "dljob.dev/tensorboard \"logs:runs/mnist\": volume \"logs\" is {why}: {FIX}"
            )]
        );
    }
}

#[test]
fn a_tensorboard_volume_must_exist_and_be_mounted_by_the_framework_container() {
    let nfs = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/logs"}});
    let mut missing = tensorboard_pod(nfs.clone(), true);
    missing["spec"]["volumes"] = json!([{"name": "cache", "emptyDir": {}}]);
    assert_eq!(
        problems(Kind::Pod, &missing),
        vec!["dljob.dev/tensorboard \"logs:runs/mnist\": the pod has no volume \"logs\" (its volumes are cache): add the shared volume the training writes its logs to, or name it"]
    );
    missing["spec"].as_object_mut().unwrap().remove("volumes");
    assert_eq!(
        problems(Kind::Pod, &missing),
        vec!["dljob.dev/tensorboard \"logs:runs/mnist\": the pod has no volume \"logs\" (it has none): add the shared volume the training writes its logs to, or name it"]
    );
    assert_eq!(
        problems(Kind::Pod, &tensorboard_pod(nfs.clone(), false)),
        vec!["dljob.dev/tensorboard \"logs:runs/mnist\": the framework container \"main\" does not mount volume \"logs\": mount it where the training writes its logs"]
    );
    // A sidecar mounting it is not enough: the framework container writes.
    let mut sidecar = tensorboard_pod(nfs, false);
    sidecar["spec"]["containers"] = json!([
        {"name": "tensorflow", "image": "tf"},
        {"name": "shipper", "image": "s", "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}
    ]);
    assert_eq!(rules(Kind::Pod, &sidecar, None), vec!["TensorBoardVolume"]);
}

#[test]
fn a_tensorboard_volume_from_volume_claim_templates_is_refused() {
    let mut s = sts(
        2,
        json!({"dljob.dev/framework": "pytorch", "dljob.dev/tensorboard": "logs:runs"}),
    );
    s["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "logs", "mountPath": "/logs"}]);
    s["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "logs"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    assert_eq!(
        problems(Kind::StatefulSet, &s),
        vec!["dljob.dev/tensorboard \"logs:runs\": volume \"logs\" comes from the StatefulSet's volumeClaimTemplates, which give each pod a claim of its own: TensorBoard, in a pod of its own, would see none of them; use storage every member and TensorBoard can mount: a ReadWriteMany persistentVolumeClaim, nfs, cephfs or a CSI driver's shared volume"]
    );
    // The same name from one shared claim in the pod template is accepted.
    s["spec"]
        .as_object_mut()
        .unwrap()
        .remove("volumeClaimTemplates");
    s["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "logs", "persistentVolumeClaim": {"claimName": "shared-logs"}}]);
    accepted(Kind::StatefulSet, &s);
}

#[test]
fn a_malformed_tensorboard_value_is_refused_and_members_must_agree_on_it() {
    assert_eq!(
        problems(Kind::Pod, &tf_pod("chief", json!({"dljob.dev/tensorboard": "/mnt/logs"}))),
        vec!["dljob.dev/tensorboard \"/mnt/logs\" is not VOLUME:PATH: name the volume holding the logs and the log directory inside it, e.g. \"logs:runs/resnet\""]
    );
    let cfg = Config::default();
    let nfs = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/logs"}});
    let mut chief = tensorboard_pod(nfs.clone(), true);
    chief["metadata"]["name"] = json!("chief");
    let peers = peers_of([(Kind::Pod, &chief)], Some("ml"), &cfg);
    let mut worker = tf_pod(
        "worker",
        json!({"dljob.dev/tensorboard": "logs:runs/other"}),
    );
    worker["spec"] = tensorboard_pod(nfs, true)["spec"].clone();
    assert_eq!(
        problems_with(Kind::Pod, &worker, None, &peers),
        vec!["dljob.dev/tensorboard is logs:runs/other here but logs:runs/mnist on Pod \"chief\" of job \"mnist\"; every member of a job must agree"]
    );
}

/// The webhook config of a GPU cluster: the node's driver libraries for
/// every container that requests `nvidia.com/gpu`.
fn gpu_config() -> Config {
    Config::from_yaml(
        "accelerators:\n  nvidia.com/gpu:\n    volumes:\n    - {name: nvidia-libraries, hostPath: /home/kubernetes/bin/nvidia/lib64, mountPath: /usr/local/nvidia/lib64}\n",
    )
    .unwrap()
}

fn problems_under(config: &Config, kind: Kind, obj: &Value, old: Option<&Value>) -> Vec<String> {
    match validate(
        Subject::new(kind, obj, Some("ml")).with_old(old),
        config,
        &[],
    ) {
        Ok(_) => Vec::new(),
        Err(v) => v.0.into_iter().map(|v| v.message).collect(),
    }
}

/// A TensorFlow worker with a GPU trainer and a sidecar, as admission
/// left it: the libraries mounted read-only in the trainer only.
fn gpu_worker(config: &Config) -> Value {
    let mut p = tf_pod("worker", json!({}));
    p["spec"]["containers"] = json!([
        {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "sidecar", "image": "s"}
    ]);
    dljob::mutate::mutate(
        Subject::new(Kind::Pod, &p, Some("ml")),
        dljob::mutate::Operation::Create,
        config,
    )
    .unwrap()
    .unwrap()
    .object
}

#[test]
fn dljobs_volume_names_are_reserved_for_what_dljob_mounts() {
    let config = gpu_config();
    let wired = gpu_worker(&config);
    assert_eq!(
        problems_under(&config, Kind::Pod, &wired, None),
        Vec::<String>::new()
    );

    // A sidecar naming the volume would get the node's directory.
    let mut sidecar = wired.clone();
    sidecar["spec"]["containers"][1]["volumeMounts"] =
        json!([{"name": "nvidia-libraries", "mountPath": "/host-libs"}]);
    assert_eq!(
        problems_under(&config, Kind::Pod, &sidecar, None),
        vec!["container \"sidecar\" mounts volume \"nvidia-libraries\" at /host-libs, which dljob reserves for the node's driver libraries of containers that request nvidia.com/gpu and mounts read-only only where it wires it: remove the mount, or use a volume of your own"]
    );
    // The GPU container itself, read-write.
    let mut writable = wired.clone();
    writable["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .filter(|m| m["name"] == "nvidia-libraries")
        .for_each(|m| m["readOnly"] = json!(false));
    assert_eq!(
        problems_under(&config, Kind::Pod, &writable, None),
        vec!["container \"tensorflow\" mounts volume \"nvidia-libraries\" at /usr/local/nvidia/lib64, which dljob reserves for the node's driver libraries of containers that request nvidia.com/gpu and mounts read-only only where it wires it: remove the mount, or use a volume of your own"]
    );
    // An init container, or a debug container added later.
    let mut init = wired.clone();
    init["spec"]["initContainers"] = json!([{"name": "fetch", "image": "f", "volumeMounts": [{"name": "dljob-hostfile", "mountPath": "/h"}]}]);
    assert_eq!(
        problems_under(&config, Kind::Pod, &init, None),
        vec!["init container \"fetch\" mounts volume \"dljob-hostfile\" at /h, which dljob reserves for the job's hostfile and mounts read-only only where it wires it: remove the mount, or use a volume of your own"]
    );
    let mut debugged = wired.clone();
    debugged["spec"]["ephemeralContainers"] = json!([{"name": "debugger-x", "image": "busybox",
        "volumeMounts": [{"name": "nvidia-libraries", "mountPath": "/libs"}]}]);
    assert_eq!(
        problems_under(&config, Kind::Pod, &debugged, Some(&wired)),
        vec!["ephemeral container \"debugger-x\" mounts volume \"nvidia-libraries\" at /libs, which dljob reserves for the node's driver libraries of containers that request nvidia.com/gpu and mounts read-only only where it wires it: remove the mount, or use a volume of your own"]
    );
    // A user's own volume under one of the names, whatever it holds.
    let mut own = tf_pod("worker", json!({}));
    own["spec"]["volumes"] = json!([
        {"name": "nvidia-libraries", "hostPath": {"path": "/"}},
        {"name": "dljob-ssh", "emptyDir": {}}
    ]);
    assert_eq!(
        problems_under(&config, Kind::Pod, &own, None),
        vec![
            "volume \"nvidia-libraries\" is a name dljob reserves for the node's driver libraries of containers that request nvidia.com/gpu, and this one is defined otherwise: rename the volume (dljob adds its own)",
            "volume \"dljob-ssh\" is a name dljob reserves for the job's SSH Secret mnist-ssh, and this one is defined otherwise: rename the volume (dljob adds its own)",
        ]
    );
    // The same in a StatefulSet's pod template.
    let mut set = sts(2, json!({"dljob.dev/framework": "pytorch"}));
    set["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "dljob-hostfile", "emptyDir": {}}]);
    assert_eq!(
        problems_under(&config, Kind::StatefulSet, &set, None),
        vec!["volume \"dljob-hostfile\" is a name dljob reserves for the job's hostfile, and this one is defined otherwise: rename the volume (dljob adds its own)"]
    );
    // Any other name is the user's business.
    let mut other = wired.clone();
    other["spec"]["containers"][1]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": "/s"}]);
    other["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "scratch", "emptyDir": {}}));
    assert_eq!(
        problems_under(&config, Kind::Pod, &other, None),
        Vec::<String>::new()
    );
}

/// A member a finished run left running (marked `dljob.dev/finished-run`)
/// binds the job's next run to nothing — another topology or policy is
/// fine — but still holds its replica's hostname.
#[test]
fn a_member_left_by_a_finished_run_only_keeps_its_replica() {
    let cfg = Config::default();
    let mut old = tf_pod("worker", json!({"dljob.dev/finished-run": "uid-old"}));
    old["metadata"]["name"] = json!("w-old");
    let peers = peers_of([(Kind::Pod, &old)], Some("ml"), &cfg);
    let mut rerun = tf_pod("worker", json!({"dljob.dev/backoff-limit": "5"}));
    rerun["metadata"]["annotations"]["dljob.dev/index"] = json!("0");
    assert!(problems_with(Kind::Pod, &rerun, None, &peers).is_empty());
    let mut same = rerun.clone();
    same["metadata"]["annotations"]["dljob.dev/index"] = json!("1");
    assert_eq!(
        problems_with(Kind::Pod, &same, None, &peers),
        vec!["Pod \"w-old\" (left running by a finished run of the job: delete it first) already is worker 1 of job \"mnist\"; give this pod another dljob.dev/index"]
    );
}

/// The reconciler's mark of a finished run is added once (by it) and never
/// taken off: the leftovers would count toward the next run again.
#[test]
fn the_finished_run_mark_cannot_change_or_go() {
    let member = tf_pod("worker", json!({}));
    let mut marked = member.clone();
    marked["metadata"]["annotations"]["dljob.dev/finished-run"] = json!("uid-1");
    assert!(problems_with(Kind::Pod, &marked, Some(&member), &[]).is_empty());
    assert_eq!(
        problems_with(Kind::Pod, &member, Some(&marked), &[]),
        vec!["dljob.dev/finished-run marks what a finished run left and cannot change or be removed (\"uid-1\" → (unset)): delete this member to start the job again"]
    );
    let mut other = marked.clone();
    other["metadata"]["annotations"]["dljob.dev/finished-run"] = json!("uid-2");
    assert_eq!(
        problems_with(Kind::Pod, &other, Some(&marked), &[]).len(),
        1
    );
}

/// What dljob wrote on a member pod for the kubelet to project into its
/// files cannot change on UPDATE: changed, the kubelet would rewrite
/// /etc/dljob/hostfile or /etc/volcano/*.host inside the running pod.
#[test]
fn the_annotations_dljob_projects_into_a_running_pod_cannot_change() {
    let mut member = tf_pod("worker", json!({}));
    member["metadata"]["annotations"]["dljob.dev/hostfile"] = json!("mnist-worker-0 slots=1\n");
    member["metadata"]["annotations"]["volcano.dljob.dev/worker.host"] = json!("mnist-worker-0");
    // Another annotation may change.
    let mut noted = member.clone();
    noted["metadata"]["annotations"]["note"] = json!("hello");
    assert!(problems_with(Kind::Pod, &noted, Some(&member), &[]).is_empty());
    let mut hostfile = member.clone();
    hostfile["metadata"]["annotations"]["dljob.dev/hostfile"] = json!("evil slots=64\n");
    assert_eq!(
        problems_with(Kind::Pod, &hostfile, Some(&member), &[]),
        vec!["dljob.dev/hostfile is written by dljob when a member pod is created, and the kubelet keeps a file of the running pod equal to it: it cannot change (\"mnist-worker-0 slots=1\n\" → \"evil slots=64\n\"); delete the pod to have it created again"]
    );
    // Added or removed, a Volcano host list is refused as well.
    let mut added = member.clone();
    added["metadata"]["annotations"]["volcano.dljob.dev/ps.host"] = json!("evil");
    assert_eq!(
        problems_with(Kind::Pod, &added, Some(&member), &[]).len(),
        1
    );
    let mut removed = member.clone();
    removed["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("volcano.dljob.dev/worker.host");
    assert_eq!(
        problems_with(Kind::Pod, &removed, Some(&member), &[]).len(),
        1
    );
    // A pod that is no member is not dljob's.
    let plain = pod(json!({}), json!({"dljob.dev/hostfile": "a"}));
    let mut changed = plain.clone();
    changed["metadata"]["annotations"]["dljob.dev/hostfile"] = json!("b");
    assert!(problems_with(Kind::Pod, &changed, Some(&plain), &[]).is_empty());
}

/// An UPDATE judges the old object and the new one against the same
/// members: the webhook's source of peers is read once for both (a member
/// that comes or goes between two reads would otherwise make a problem the
/// object already had look new).
#[test]
fn an_update_reads_its_peers_once_for_both_objects() {
    use dljob::validate::PeerSource;
    use std::sync::Mutex;

    struct Recorded {
        peers: Vec<MemberSpec>,
        calls: Mutex<Vec<String>>,
    }
    impl PeerSource for Recorded {
        fn peers(&self, _: &str, _: &str) -> Vec<MemberSpec> {
            self.calls.lock().unwrap().push("peers".into());
            self.peers.clone()
        }
        fn relevant_peers(&self, _: &MemberSpec) -> Vec<MemberSpec> {
            self.calls.lock().unwrap().push("relevant_peers".into());
            self.peers.clone()
        }
        fn relevant_peers_to_each(&self, ms: &[&MemberSpec]) -> Vec<Vec<MemberSpec>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("relevant_peers_to_each of {}", ms.len()));
            ms.iter().map(|_| self.peers.clone()).collect()
        }
    }
    let config = Config::default();
    // The chief says port 2300; the worker (old and new) the default.
    let mut chief = tf_pod("chief", json!({"dljob.dev/port": "2300"}));
    chief["metadata"]["name"] = json!("mnist-chief-0");
    let source = Recorded {
        peers: peers_of([(Kind::Pod, &chief)], Some("ml"), &config),
        calls: Mutex::default(),
    };
    let old = tf_pod("worker", json!({}));
    let mut new = old.clone();
    new["metadata"]["annotations"]["note"] = json!("an annotation added");
    // The disagreement is one the worker already had: not the update's.
    let answer = validate(
        Subject::new(Kind::Pod, &new, Some("ml")).with_old(Some(&old)),
        &config,
        &source,
    );
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(
        *source.calls.lock().unwrap(),
        ["relevant_peers_to_each of 2"]
    );
    // A CREATE asks for the one object.
    source.calls.lock().unwrap().clear();
    let refused = validate(Subject::new(Kind::Pod, &new, Some("ml")), &config, &source);
    assert!(refused.is_err());
    assert_eq!(
        *source.calls.lock().unwrap(),
        ["relevant_peers_to_each of 1"]
    );
}

/// A TensorBoard volume dljob could not record on the DLJob (its JSON over
/// 8 KiB) is refused at admission, where the user can fix it; one of
/// 8 KiB is admitted. Before, a 300 KB one was admitted and the DLJob's
/// create then failed with 422 every 2 s.
#[test]
fn a_tensorboard_volume_dljob_cannot_record_is_refused() {
    let mut volume = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/"}});
    let room = 8192 - volume.to_string().len();
    volume["nfs"]["path"] = json!(format!("/{}", "l".repeat(room)));
    assert!(problems(Kind::Pod, &tensorboard_pod(volume.clone(), true)).is_empty());
    volume["nfs"]["path"] = json!(format!("/{}", "l".repeat(300_000)));
    assert_eq!(
        problems(Kind::Pod, &tensorboard_pod(volume, true)),
        vec!["dljob.dev/tensorboard \"logs:runs/mnist\": volume \"logs\" is 300049 bytes as JSON; dljob records at most 8192 of it on the DLJob for TensorBoard to mount: give the shared volume a shorter source (a persistentVolumeClaim names it in a line)"]
    );
}

/// A dljob annotation longer than 4 KiB is refused (none means anything
/// at that length, and every cache of members would hold it), and not read
/// further: no other message quotes it. 4 KiB passes this check (and is
/// then refused, quoted, as no boolean).
#[test]
fn a_dljob_annotation_over_4_kib_is_refused() {
    let mut pod = tf_pod(
        "worker",
        json!({"dljob.dev/wait-for-names": " ".repeat(4097)}),
    );
    assert_eq!(
        problems(Kind::Pod, &pod),
        vec!["annotation dljob.dev/wait-for-names is 4097 bytes; dljob reads values of at most 4096 bytes and ignores this one"]
    );
    pod["metadata"]["annotations"]["dljob.dev/wait-for-names"] = json!(" ".repeat(4096));
    assert!(
        !problems(Kind::Pod, &pod)
            .iter()
            .any(|p| p.contains("bytes; dljob reads values")),
        "{:?}",
        problems(Kind::Pod, &pod)
    );
}

/// A pod's index cannot change by UPDATE through any of its sources
/// (issue 30, finding 8): the StatefulSet's pod-index label, the Job's
/// completion index, a controller reference added to a bare pod; nor a
/// set's dljob.dev/index-offset. And a pod may not carry both a set's index
/// and dljob.dev/index (it was read as the set's, silently).
#[test]
fn no_source_of_a_pods_index_changes_it() {
    let cfg = Config::default();
    let worker = |labels: Value, annotations: Value| {
        let mut p = tf_pod("worker", json!({"dljob.dev/index": null}));
        for (k, v) in labels.as_object().unwrap() {
            p["metadata"]["labels"][k] = v.clone();
        }
        for (k, v) in annotations.as_object().unwrap() {
            p["metadata"]["annotations"][k] = v.clone();
        }
        p
    };
    let owned_by = |mut p: Value, kind: &str, name: &str| {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": kind, "name": name, "uid": "o", "controller": true}]);
        p
    };
    let refused = "the pod's index cannot change on an existing member";

    // A StatefulSet's worker 1 relabelled 0.
    let old = owned_by(
        worker(json!({"apps.kubernetes.io/pod-index": "1"}), json!({})),
        "StatefulSet",
        "w",
    );
    let new = owned_by(
        worker(json!({"apps.kubernetes.io/pod-index": "0"}), json!({})),
        "StatefulSet",
        "w",
    );
    let got = problems_under(&cfg, Kind::Pod, &new, Some(&old));
    assert_eq!(
        got,
        vec!["the pod's index cannot change on an existing member (1 → 0, from its dljob.dev/index, apps.kubernetes.io/pod-index, batch.kubernetes.io/job-completion-index or controller): delete the pod to change it"]
    );
    // An unrelated label change is fine.
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["team"] = json!("a");
    assert_eq!(
        problems_under(&cfg, Kind::Pod, &relabelled, Some(&old)),
        Vec::<String>::new()
    );

    // An Indexed Job's worker 1 given completion index 0.
    let old = owned_by(
        worker(
            json!({}),
            json!({"batch.kubernetes.io/job-completion-index": "1"}),
        ),
        "Job",
        "w",
    );
    let new = owned_by(
        worker(
            json!({}),
            json!({"batch.kubernetes.io/job-completion-index": "0"}),
        ),
        "Job",
        "w",
    );
    let got = problems_under(&cfg, Kind::Pod, &new, Some(&old));
    assert!(got.len() == 1 && got[0].starts_with(refused), "{got:?}");

    // A bare worker 1 given a StatefulSet as controller, whose name says 0.
    let mut old = worker(json!({}), json!({"dljob.dev/index": "1"}));
    old["metadata"]["name"] = json!("w-0");
    let mut new = owned_by(old.clone(), "StatefulSet", "w");
    new["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("dljob.dev/index");
    let got = problems_under(&cfg, Kind::Pod, &new, Some(&old));
    assert_eq!(
        got,
        vec!["dljob.dev/index cannot change on an existing member (\"1\" → (unset)): delete and recreate the job's members to change it"]
    );
    // Keeping the annotation beside the new controller: refused as two
    // answers to one question.
    let mut kept = owned_by(old.clone(), "StatefulSet", "w");
    kept["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = json!("1");
    let got = problems_under(&cfg, Kind::Pod, &kept, Some(&old));
    assert!(
        got[0].starts_with("annotation dljob.dev/index \"1\" is for plain pods"),
        "{got:?}"
    );

    // A bare pod with dljob.dev/index 1 and a pod-index label 0: refused
    // at creation, and by UPDATE.
    let both = worker(
        json!({"apps.kubernetes.io/pod-index": "0"}),
        json!({"dljob.dev/index": "1"}),
    );
    assert_eq!(
        problems_under(&cfg, Kind::Pod, &both, None),
        vec!["annotation dljob.dev/index \"1\" is for plain pods; this pod's index comes from its StatefulSet (apps.kubernetes.io/pod-index): remove the annotation"]
    );
    let bare = worker(json!({}), json!({"dljob.dev/index": "1"}));
    assert!(!problems_under(&cfg, Kind::Pod, &both, Some(&bare)).is_empty());

    // A set's offset.
    let set = |offset: &str| {
        sts(
            2,
            json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=4",
            "dljob.dev/index-offset": offset}),
        )
    };
    assert_eq!(
        problems_under(&cfg, Kind::StatefulSet, &set("0"), Some(&set("2"))),
        vec!["dljob.dev/index-offset cannot change on an existing member (\"2\" → \"0\"): delete and recreate the job's members to change it"]
    );
    // Written only in the pod template, as the member is read too.
    let in_template = |offset: &str| {
        let mut s = sts(
            2,
            json!({"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "master=1,worker=4"}),
        );
        s["spec"]["template"]["metadata"] =
            json!({"annotations": {"dljob.dev/index-offset": offset}});
        s
    };
    assert_eq!(
        problems_under(&cfg, Kind::StatefulSet, &in_template("0"), Some(&in_template("2"))),
        vec!["dljob.dev/index-offset cannot change on an existing member (\"2\" → \"0\"): delete and recreate the job's members to change it"]
    );
}

/// A server whose clients are not authenticated does not name a job's
/// other members, nor their values or ranges (issue 30, finding 7): whoever
/// reaches it could ask about any namespace. The denial still says what is
/// wrong with the object and how to list the members.
#[test]
fn peers_are_named_only_to_an_authenticated_client() {
    use dljob::validate::{PeerSource, Withheld};

    struct Fixed(Vec<MemberSpec>);
    impl PeerSource for Fixed {
        fn peers(&self, _: &str, _: &str) -> Vec<MemberSpec> {
            self.0.clone()
        }
    }
    let config = Config::default();
    let mut chief = tf_pod("chief", json!({"dljob.dev/port": "2300"}));
    chief["metadata"]["name"] = json!("secret-chief-0");
    let mut worker = tf_pod("worker", json!({}));
    worker["metadata"]["name"] = json!("secret-worker-1");
    let source = std::sync::Arc::new(Fixed(peers_of(
        [(Kind::Pod, &chief), (Kind::Pod, &worker)],
        Some("ml"),
        &config,
    )));
    let mut pod = tf_pod("worker", json!({}));
    pod["metadata"]["name"] = json!("mine");
    let denial = |named: bool| -> Vec<String> {
        let withheld = Withheld(source.clone());
        let peers: &dyn PeerSource = if named { source.as_ref() } else { &withheld };
        match validate(Subject::new(Kind::Pod, &pod, Some("ml")), &config, peers) {
            Err(v) => v.0.iter().map(|v| v.message.clone()).collect(),
            Ok(w) => panic!("admitted: {w:?}"),
        }
    };
    assert_eq!(
        denial(true),
        vec![
            "dljob.dev/port is 2222 here but 2300 on Pod \"secret-chief-0\" of job \"mnist\"; every member of a job must agree",
            "Pod \"secret-worker-1\" already is worker 1 of job \"mnist\"; give this pod another dljob.dev/index",
        ]
    );
    assert_eq!(
        denial(false),
        vec![
            "dljob.dev/port is 2222 here but another value on another Pod of job \"mnist\"; every member of a job must agree (kubectl get pods,statefulsets,jobs -l dljob.dev/job=mnist lists them)",
            "another Pod already is worker 1 of job \"mnist\"; give this pod another dljob.dev/index (kubectl get pods,statefulsets,jobs -l dljob.dev/job=mnist lists them)",
        ]
    );
}

/// A value dljob refuses is quoted in at most 64 bytes and its length,
/// whichever key it is (a 4 KiB value passes the size check and was quoted
/// whole by the slots, elastic, topology, TensorBoard, policy and index
/// parsers, and the framework, gang, queue and container names). An
/// UPDATE's changed value is quoted so too.
#[test]
fn a_refused_value_is_quoted_in_64_bytes() {
    for (key, value) in [
        ("dljob.dev/slots", "1".repeat(4000)),
        ("dljob.dev/topology", format!("{}:zone", "m".repeat(4000))),
        ("dljob.dev/restart-policy", "x".repeat(4000)),
        ("dljob.dev/index", "9".repeat(4000)),
        ("dljob.dev/ordered-start", "y".repeat(4000)),
        ("dljob.dev/framework", "f".repeat(4000)),
        ("dljob.dev/gang", "g".repeat(4000)),
        ("dljob.dev/queue", "q".repeat(4000)),
        ("dljob.dev/container", "c".repeat(4000)),
    ] {
        let got = problems(Kind::Pod, &tf_pod("worker", json!({ key: value })));
        assert!(!got.is_empty(), "{key}");
        for p in &got {
            assert!(p.len() < 400, "{key}: {} bytes: {p}", p.len());
            assert!(
                p.contains("(4000 bytes)") || p.contains("(4005 bytes)"),
                "{key}: {p}"
            );
        }
    }
}

/// Thousands of unknown dljob.dev/ keys (a pod under 256 KiB carries ten
/// thousand) make three warnings and a count, not a warning each, found
/// once each (the check was quadratic in the keys: each looked through the
/// ones before it).
#[test]
fn ten_thousand_unknown_keys_are_three_warnings_and_a_count() {
    let mut pod = tf_pod("worker", json!({}));
    for i in 0..10_000 {
        pod["metadata"]["annotations"][format!("dljob.dev/k{i:05}")] = json!("");
    }
    let warnings = validate(
        Subject::new(Kind::Pod, &pod, Some("ml")),
        &Config::default(),
        &[],
    )
    .unwrap();
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(warnings[0].starts_with("annotation dljob.dev/k00000 is not a dljob annotation"));
    assert_eq!(
        warnings[3],
        "9997 more dljob.dev/ keys are not dljob's and are ignored"
    );
}
