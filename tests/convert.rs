//! `dljob convert` as a user runs it on the operators' jobs (fixtures
//! written in each operator's documented form, `tests/fixtures/operators/`):
//! what each field becomes, what stops the conversion, that the output
//! validates, is a fixed point and keeps the input's comments, and that
//! the other offline commands point at `convert`.

use dljob::manifest;
use serde_json::{json, Value};

mod common;
use common::{dljob, scratch_dir, values};

const OPERATORS: &str = "tests/fixtures/operators";

fn fixture(name: &str) -> String {
    format!("{OPERATORS}/{name}")
}

fn convert(file: &str) -> common::Run {
    dljob(&["convert", "-f", file], None)
}

/// Each pod `dljob mutate --pods` printed passes `dljob validate` on its
/// own (the pods carry no names, so they are not each other's peers).
fn assert_each_pod_validates(pods: &str) {
    for doc in manifest::parse(pods).expect("parses") {
        let check = dljob(&["validate", "-f", "-"], Some(&doc.text));
        assert!(check.success(), "{check:?}\n{}", doc.text);
    }
}

/// `dljob convert` of a fixture, which must succeed: the run and the
/// objects it printed.
fn converted(name: &str) -> (common::Run, Vec<Value>) {
    let run = convert(&fixture(name));
    assert!(run.success(), "{name}: {run:?}");
    let out = values(&run.stdout);
    (run, out)
}

/// Each object's kind and name, in order.
fn kinds_and_names(out: &[Value]) -> Vec<(&str, &str)> {
    out.iter()
        .map(|v| {
            let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap();
            (s("/kind"), s("/metadata/name"))
        })
        .collect()
}

/// `dljob convert` of `job` on standard input refuses it: exit 1, nothing
/// printed, and each of `said` on standard error.
fn assert_refused(job: &str, said: &[&str]) {
    let run = dljob(&["convert", "-f", "-"], Some(job));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "", "nothing is printed");
    for said in said {
        assert!(run.stderr.contains(said), "{said}: {run:?}");
    }
    assert!(run.stderr.contains("; nothing was printed"), "{run:?}");
}

fn annotations(v: &Value) -> Value {
    v["metadata"]["annotations"].clone()
}

#[test]
fn a_pytorchjob_becomes_one_indexed_job_per_replica_type_with_its_comments() {
    let run = convert(&fixture("pytorchjob-simple.yaml"));
    assert!(run.success(), "{run:?}");
    // What changes with the conversion, said: the operator restarted its
    // OnFailure replicas without limit; dljob's default is 3.
    assert_eq!(
        run.stderr,
        "Warning: PyTorchJob/pytorch-simple: runPolicy.backoffLimit is not set: the operator restarted Master, Worker (restartPolicy OnFailure) without limit; the converted Jobs fail after dljob's default of 3 restarts (dljob.dev/backoff-limit): set runPolicy.backoffLimit to the restarts the job may take\n"
    );
    let out = values(&run.stdout);
    assert_eq!(out.len(), 2);
    let wanted_annotations = json!({
        // The operator's default, not dljob's (Running).
        "dljob.dev/clean-pod-policy": "None",
        "dljob.dev/compat": "kubeflow",
        "dljob.dev/framework": "pytorch",
        "dljob.dev/port": "23456",
        "dljob.dev/replicas": "master=1,worker=1",
    });
    for (v, role) in out.iter().zip(["master", "worker"]) {
        assert_eq!(v["apiVersion"], "batch/v1");
        assert_eq!(v["kind"], "Job");
        assert_eq!(v["metadata"]["name"], format!("pytorch-simple-{role}"));
        assert_eq!(v["metadata"]["namespace"], "kubeflow");
        let labels = json!({"dljob.dev/job": "pytorch-simple", "dljob.dev/role": role});
        assert_eq!(v["metadata"]["labels"], labels);
        assert_eq!(annotations(v), wanted_annotations);
        assert_eq!(v["spec"]["completionMode"], "Indexed");
        assert_eq!(v["spec"]["completions"], 1);
        assert_eq!(v["spec"]["parallelism"], 1);
        assert_eq!(v["spec"]["template"]["metadata"]["labels"], labels);
        // The replica's restartPolicy, as the operator sets it on its pods.
        assert_eq!(v["spec"]["template"]["spec"]["restartPolicy"], "OnFailure");
        let container = &v["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], "pytorch");
        assert_eq!(
            container["command"],
            json!(["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])
        );
    }
    // The job's leading comment and the comment inside its template stay.
    assert!(run
        .stdout
        .starts_with("# The training-operator's PyTorchJob example"));
    assert!(run
        .stdout
        .contains("          # One epoch: the example's smoke run.\n"));
    assert!(run.stdout.contains(
        "# dljob convert: PyTorchJob/pytorch-simple, spec.pytorchReplicaSpecs.Worker (role worker)\n"
    ));
}

#[test]
fn every_fixture_converts_to_a_job_that_validates_and_converts_to_itself() {
    let mut seen = 0;
    for entry in std::fs::read_dir(OPERATORS).unwrap() {
        let path = entry.unwrap().path();
        let file = path.to_str().unwrap();
        let run = convert(file);
        assert!(run.success(), "{file}: {run:?}");
        let dir = scratch_dir("convert-tests", path.file_stem().unwrap().to_str().unwrap());
        let converted = dir.join("converted.yaml");
        std::fs::write(&converted, &run.stdout).unwrap();
        let converted = converted.to_str().unwrap();
        let check = dljob(&["validate", "-f", converted], None);
        assert!(check.success(), "{file}: {check:?}");
        let again = convert(converted);
        assert!(again.success(), "{file}: {again:?}");
        assert_eq!(again.stdout, run.stdout, "{file}: not a fixed point");
        assert!(again.stderr.contains("nothing to convert"), "{again:?}");
        // Deterministic.
        assert_eq!(convert(file).stdout, run.stdout, "{file}");
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} fixtures");
}

#[test]
fn tfjob_parameter_servers_restarted_forever_are_a_statefulset() {
    let (_, out) = converted("tfjob-dist-mnist.yaml");
    let kinds = kinds_and_names(&out);
    // In the framework's role order, whatever the job's.
    assert_eq!(
        kinds,
        [
            ("Job", "dist-mnist-worker"),
            ("StatefulSet", "dist-mnist-ps")
        ]
    );
    let wanted = json!({
        "dljob.dev/backoff-limit": "2",
        "dljob.dev/clean-pod-policy": "Running",
        "dljob.dev/compat": "kubeflow",
        "dljob.dev/framework": "tensorflow",
        "dljob.dev/port": "2222",
        "dljob.dev/replicas": "worker=4,ps=2",
        "dljob.dev/restart-policy": "ExitCode",
    });
    for v in &out {
        assert_eq!(annotations(v), wanted);
        // The job's own labels are carried over.
        assert_eq!(v["metadata"]["labels"]["team"], "vision");
    }
    let (worker, ps) = (&out[0], &out[1]);
    // ExitCode: the pod never restarts in place; dljob retries 128-255.
    assert_eq!(worker["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(worker["spec"]["backoffLimit"], 2);
    assert_eq!(worker["spec"]["completions"], 4);
    assert_eq!(ps["spec"]["replicas"], 2);
    assert_eq!(ps["spec"]["serviceName"], "dist-mnist");
    assert_eq!(ps["spec"]["podManagementPolicy"], "Parallel");
    assert_eq!(
        ps["spec"]["selector"]["matchLabels"],
        json!({"dljob.dev/job": "dist-mnist", "dljob.dev/role": "ps"})
    );
    assert_eq!(ps["spec"]["template"]["spec"]["restartPolicy"], "Always");
}

#[test]
fn elastic_and_mpi_policies_map_to_dljob_keys() {
    let (_, out) = converted("pytorchjob-elastic.yaml");
    assert_eq!(out.len(), 1);
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/elastic"], "1:2");
    // torchrun's in-place restarts: dljob's one limit.
    assert_eq!(a["dljob.dev/backoff-limit"], "100");
    assert_eq!(out[0]["spec"]["backoffLimit"], 100);
    assert_eq!(a["dljob.dev/replicas"], "worker=2");

    let (run, out) = converted("mpijob-pi.yaml");
    let a = annotations(&out[0]);
    // The MPI operator's defaults: the launcher restarts OnFailure, the
    // workers not at all.
    let restart = |v: &Value| v["spec"]["template"]["spec"]["restartPolicy"].clone();
    assert_eq!(restart(&out[0]), "OnFailure");
    assert_eq!(restart(&out[1]), "Never");
    assert_eq!(a["dljob.dev/restart-policy"], "Never");
    assert_eq!(a["dljob.dev/clean-pod-policy"], "Running");
    assert_eq!(a["dljob.dev/slots"], "1");
    assert_eq!(a["dljob.dev/ssh-path"], "/home/mpiuser/.ssh");
    assert_eq!(a["dljob.dev/ttl-seconds-after-finished"], "60");
    assert_eq!(a["dljob.dev/compat"], "mpi-operator");
    assert_eq!(a.get("dljob.dev/port"), None, "MPI has no port of its own");
    // Under compat the Secret is laid out as the operator does, readable
    // by the images' uid 1000: no fsGroup needed, nothing to warn about
    // but the launcher's retries.
    assert_eq!(
        run.stderr,
        "Warning: MPIJob/pi: runPolicy.backoffLimit is not set: the MPI operator's launcher Job took Kubernetes' default of 6 retries; the converted Jobs allow dljob's default of 3 (dljob.dev/backoff-limit): set runPolicy.backoffLimit to keep 6\n"
    );
}

#[test]
fn the_mpi_operators_intel_and_mpich_jobs_come_across_as_hydra_jobs() {
    for (file, implementation, hostfile_var) in [
        ("mpijob-pi-intel.yaml", "Intel", "I_MPI_HYDRA_HOST_FILE"),
        ("mpijob-pi-mpich.yaml", "MPICH", "HYDRA_HOST_FILE"),
    ] {
        let (run, out) = converted(file);
        for workload in &out {
            let a = annotations(workload);
            assert_eq!(a["dljob.dev/mpi-implementation"], implementation, "{file}");
            assert_eq!(a["dljob.dev/compat"], "mpi-operator", "{file}");
        }
        // The launcher's pod: Hydra's hostfile, at the operator's path too,
        // and Hydra's own names for it.
        let text = run.stdout;
        let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&text));
        assert!(pods.success(), "{pods:?}");
        assert_each_pod_validates(&pods.stdout);
        let pods = values(&pods.stdout);
        let launcher = &pods[0];
        assert_eq!(
            launcher["metadata"]["annotations"]["dljob.dev/hostfile"],
            "pi-worker-0.pi.default.svc:1\npi-worker-1.pi.default.svc:1\n",
            "{file}"
        );
        let env = &pods_env(&text)[0].1;
        assert_eq!(
            env_value(env, hostfile_var),
            ["/etc/dljob/hostfile"],
            "{file}"
        );
        assert!(
            env_value(env, "OMPI_MCA_orte_default_hostfile").is_empty(),
            "{file}"
        );
        let mounts = launcher["spec"]["containers"][0]["volumeMounts"].to_string();
        assert!(mounts.contains("\"/etc/mpi\""), "{file}: {mounts}");
    }
    let refused = std::fs::read_to_string(fixture("mpijob-pi-mpich.yaml"))
        .unwrap()
        .replace("mpiImplementation: MPICH", "mpiImplementation: MVAPICH");
    assert_refused(
        &refused,
        &["MPIJob/pi: spec.mpiImplementation \"MVAPICH\" is not an MPI implementation dljob wires: OpenMPI, Intel, MPICH"],
    );
}

#[test]
fn the_converted_pods_get_the_framework_wiring() {
    let run = convert(&fixture("xgboostjob.yaml"));
    assert!(run.success(), "{run:?}");
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    // The validating webhook accepts what admission made of them (the
    // /etc/volcano volume is dljob's own).
    assert_each_pod_validates(&pods.stdout);
    let pods = values(&pods.stdout);
    assert_eq!(pods.len(), 3);
    let env = |pod: &Value, name: &str| -> Option<String> {
        pod["spec"]["containers"][0]["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_owned)
    };
    let master = "xgboost-dist-iris-test-train-master-0.xgboost-dist-iris-test-train.default.svc";
    for (i, pod) in pods.iter().enumerate() {
        assert_eq!(env(pod, "MASTER_ADDR").as_deref(), Some(master));
        // The operator's named port, 9991, not dljob's default.
        assert_eq!(env(pod, "MASTER_PORT").as_deref(), Some("9991"));
        assert_eq!(env(pod, "WORLD_SIZE").as_deref(), Some("3"));
        assert_eq!(env(pod, "RANK"), Some(i.to_string()));
    }
}

#[test]
fn what_dljob_cannot_honour_stops_the_conversion_naming_each_field() {
    let job = r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tf
spec:
  successPolicy: AllWorkers
  enableDynamicWorker: true
  someNewField: 1
  runPolicy:
    suspend: true
    schedulingPolicy:
      minAvailable: 1
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
    PS:
      restartPolicy: Never
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
    Cheif:
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
"#;
    assert_refused(
        job,
        &[
        "TFJob/tf: spec.successPolicy \"AllWorkers\"",
        "TFJob/tf: spec.enableDynamicWorker",
        "TFJob/tf: spec.someNewField is not a field of TFJob",
        "TFJob/tf: spec.runPolicy.suspend is true",
        "TFJob/tf: spec.runPolicy.schedulingPolicy asks for gang scheduling",
        "TFJob/tf: spec.tfReplicaSpecs.Cheif: TFJob has no replica type \"Cheif\"; its types are Chief, Master, Worker, PS, Evaluator",
        ],
    );
}

#[test]
fn other_documents_pass_through_byte_for_byte_and_in_place_rewrites_only_jobs() {
    let dir = scratch_dir("convert-tests", "in-place");
    let other = "# keep me\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata:\n  k:   'v'   # odd spacing\n";
    let job = std::fs::read_to_string(fixture("jaxjob-cpu.yaml")).unwrap();
    let mixed = dir.join("a-mixed.yaml");
    std::fs::write(&mixed, format!("{other}---\n{job}")).unwrap();
    let untouched = dir.join("b-other.yaml");
    std::fs::write(&untouched, other).unwrap();

    let printed = dljob(&["convert", "-f", dir.to_str().unwrap()], None);
    assert!(printed.success(), "{printed:?}");
    assert!(printed.stdout.starts_with(other), "{printed:?}");

    let run = dljob(
        &["convert", "-f", dir.to_str().unwrap(), "--in-place"],
        None,
    );
    assert!(run.success(), "{run:?}");
    assert_eq!(run.stdout, "");
    let retries = "JAXJob/jaxjob-simple: runPolicy.backoffLimit is not set: the operator restarted Worker (restartPolicy OnFailure) without limit; the converted Jobs fail after dljob's default of 3 restarts (dljob.dev/backoff-limit): set runPolicy.backoffLimit to the restarts the job may take";
    assert_eq!(
        run.stderr,
        format!(
            "Warning: {}: {retries}\nconverted {}\n",
            mixed.display(),
            mixed.display()
        )
    );
    let rewritten = std::fs::read_to_string(&mixed).unwrap();
    assert!(rewritten.starts_with(&format!("{other}---\n# The training-operator's JAXJob")));
    let out = values(&rewritten);
    assert_eq!(out[1]["kind"], "Job");
    assert_eq!(out[1]["metadata"]["name"], "jaxjob-simple-worker");
    assert_eq!(std::fs::read_to_string(&untouched).unwrap(), other);

    let refused = dljob(&["convert", "-f", "-", "--in-place"], Some(&job));
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(refused.stderr.contains("--in-place rewrites files"));
}

/// --in-place writes only the directory's own regular files, each whole
/// through a file beside it and a rename: a symbolic link in it (its
/// target may be anywhere) is skipped and said so, a link named as the
/// file is refused, and a read-only file is refused before anything is
/// written. Before, the link's target outside the directory was truncated
/// and rewritten, read-only or not.
#[test]
fn in_place_rewrites_regular_files_only_whole_and_never_through_a_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("convert-tests", "in-place-links");
    let outside = scratch_dir("convert-tests", "in-place-outside");
    let job = std::fs::read_to_string(fixture("jaxjob-cpu.yaml")).unwrap();
    let target = outside.join("job.yaml");
    std::fs::write(&target, &job).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("a-link.yaml")).unwrap();
    let own = dir.join("b-own.yaml");
    std::fs::write(&own, &job).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o640)).unwrap();

    let run = dljob(
        &["convert", "-f", dir.to_str().unwrap(), "--in-place"],
        None,
    );
    assert!(run.success(), "{run:?}");
    assert_eq!(
        run.stderr,
        format!(
            "skipped {}: a symbolic link (--in-place rewrites regular files only)\nWarning: JAXJob/jaxjob-simple: runPolicy.backoffLimit is not set: the operator restarted Worker (restartPolicy OnFailure) without limit; the converted Jobs fail after dljob's default of 3 restarts (dljob.dev/backoff-limit): set runPolicy.backoffLimit to the restarts the job may take\nconverted {}\n",
            dir.join("a-link.yaml").display(),
            own.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        job,
        "the link's target"
    );
    assert_eq!(
        values(&std::fs::read_to_string(&own).unwrap())[0]["kind"],
        "Job"
    );
    let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the rewritten file keeps its mode");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");

    let named = dljob(
        &[
            "convert",
            "-f",
            dir.join("a-link.yaml").to_str().unwrap(),
            "--in-place",
        ],
        None,
    );
    assert!(!named.success(), "{named:?}");
    assert!(
        named
            .stderr
            .contains("is a symbolic link: nothing was written"),
        "{named:?}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), job);

    // A read-only file (root may write it anyway): refused, nothing written.
    let read_only = dir.join("c-read-only.yaml");
    std::fs::write(&read_only, &job).unwrap();
    std::fs::set_permissions(&read_only, std::fs::Permissions::from_mode(0o444)).unwrap();
    let refused = dljob(
        &["convert", "-f", read_only.to_str().unwrap(), "--in-place"],
        None,
    );
    assert!(!refused.success(), "{refused:?}");
    assert!(
        refused.stderr.contains("is read-only: nothing was written"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(&read_only).unwrap(), job);
    for d in [dir, outside] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A name or value a manifest carries reaches the terminal escaped: a bidi
/// override (which would show the rest of the line reversed) or a newline
/// (which would forge a line) is written as `\u{…}`.
#[test]
fn refusals_echo_names_with_their_control_characters_escaped() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"evil\\u202Egpj.exe\"\n  labels: {dljob.dev/job: j, dljob.dev/role: worker}\n  annotations: {dljob.dev/framework: \"py\\ntorch\"}\nspec:\n  containers: [{name: c, image: i}]\n";
    let run = dljob(&["validate", "-f", "-"], Some(pod));
    assert!(!run.success(), "{run:?}");
    assert!(!run.stdout.contains('\u{202e}'), "{run:?}");
    assert!(run.stdout.contains("evil\\u{202e}gpj.exe"), "{run:?}");
    assert!(run.stdout.contains("py\\u{000a}torch"), "{run:?}");
    assert_eq!(
        run.stdout.lines().count(),
        run.stdout.matches("evil").count(),
        "{run:?}"
    );
}

#[test]
fn validate_mutate_and_label_point_at_convert() {
    let file = fixture("pytorchjob-simple.yaml");
    let said = "PyTorchJob/pytorch-simple: this is a PyTorchJob (kubeflow.org/v1), which dljob does not read: `dljob convert -f FILE` makes it a dljob job";
    let validate = dljob(&["validate", "-f", &file], None);
    assert_eq!(validate.code, Some(1), "{validate:?}");
    assert!(validate.stdout.contains(said), "{validate:?}");

    let mutate = dljob(&["mutate", "--pods", "-f", &file], None);
    assert!(mutate.stderr.contains(said), "{mutate:?}");

    let label = dljob(
        &["label", "-f", &file, "--job", "j", "--framework", "pytorch"],
        None,
    );
    assert_eq!(label.code, Some(1), "{label:?}");
    assert!(label.stderr.contains(said), "{label:?}");

    let old = "apiVersion: kubeflow.org/v1beta2\nkind: TFJob\nmetadata: {name: tf}\nspec: {}\n";
    let run = dljob(&["validate", "-f", "-"], Some(old));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stdout
            .contains("TFJob/tf: this is a TFJob (kubeflow.org, another version), which dljob does not read, and `dljob convert` does not convert yet"),
        "{run:?}"
    );
}

/// The framework container's env of every pod the converted job makes, by
/// pod name, as `dljob mutate --pods` prints it.
fn pod_env(fixture_name: &str) -> Vec<(String, Vec<(String, String)>)> {
    let run = convert(&fixture(fixture_name));
    assert!(run.success(), "{run:?}");
    pods_env(&run.stdout)
}

/// The env of each pod of `manifest` (converted) as `dljob mutate --pods`
/// prints it: (host name, the first container's env, a `valueFrom` as
/// `<from>`).
fn pods_env(manifest: &str) -> Vec<(String, Vec<(String, String)>)> {
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(manifest));
    assert!(pods.success(), "{pods:?}");
    values(&pods.stdout)
        .iter()
        .map(|pod| {
            let env = pod["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let value = e.get("value").and_then(Value::as_str).unwrap_or("<from>");
                    (e["name"].as_str().unwrap().to_owned(), value.to_owned())
                })
                .collect();
            (pod["spec"]["hostname"].as_str().unwrap().to_owned(), env)
        })
        .collect()
}

/// Every value `env` gives `name` (one, where the pod is right).
fn env_value<'e>(env: &'e [(String, String)], name: &str) -> Vec<&'e str> {
    env.iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Checks that each pod's env holds exactly the values the operator's
/// source sets for that replica (read from training-operator v1.9.0
/// `pkg/controller.v1/*/`, mpi-operator v0.8 `pkg/controller/`). Where the
/// operator names a host `<job>-<type>-<i>` (reached through the per-pod
/// Service it creates), dljob's value is that host's name under the job's
/// headless Service, `<job>-<type>-<i>.<job>.<ns>.svc`: `expected` writes
/// those.
fn assert_operator_env(fixture_name: &str, expected: &[(&str, &[(&str, &str)])]) {
    let pods = pod_env(fixture_name);
    assert_eq!(pods.len(), expected.len(), "{fixture_name}: {pods:?}");
    for ((host, env), (want_host, want)) in pods.iter().zip(expected) {
        assert_eq!(host, want_host);
        for (name, value) in *want {
            assert_eq!(
                env_value(env, name),
                [*value],
                "{fixture_name}: {host}: {name}"
            );
        }
    }
}

#[test]
fn each_pod_gets_the_env_the_operators_source_sets_for_its_replica() {
    // pytorch/envvar.go and master.go: no elasticPolicy, no nprocPerNode.
    let master = "pytorch-simple-master-0.pytorch-simple.kubeflow.svc";
    let pytorch = |rank: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("PYTHONUNBUFFERED", "1"),
            ("MASTER_PORT", "23456"),
            ("PET_MASTER_PORT", "23456"),
            ("MASTER_ADDR", master),
            ("PET_MASTER_ADDR", master),
            ("WORLD_SIZE", "2"),
            ("RANK", rank),
            ("PET_NODE_RANK", rank),
            ("PET_NNODES", "2"),
        ]
    };
    let (m, w) = (pytorch("0"), pytorch("1"));
    assert_operator_env(
        "pytorchjob-simple.yaml",
        &[
            ("pytorch-simple-master-0", &m),
            ("pytorch-simple-worker-0", &w),
        ],
    );

    // jax/envvar.go.
    let coordinator = "jaxjob-simple-worker-0.jaxjob-simple.default.svc";
    let jax = |id: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("PYTHONUNBUFFERED", "1"),
            ("COORDINATOR_PORT", "6666"),
            ("COORDINATOR_ADDRESS", coordinator),
            ("NUM_PROCESSES", "2"),
            ("PROCESS_ID", id),
        ]
    };
    let (w0, w1) = (jax("0"), jax("1"));
    assert_operator_env(
        "jaxjob-cpu.yaml",
        &[
            ("jaxjob-simple-worker-0", &w0),
            ("jaxjob-simple-worker-1", &w1),
        ],
    );

    // xgboost/xgboost.go: the named port (9991), workers listed after the
    // master.
    let job = "xgboost-dist-iris-test-train";
    let master = format!("{job}-master-0.{job}.default.svc");
    let workers = format!("{job}-worker-0.{job}.default.svc,{job}-worker-1.{job}.default.svc");
    let xgb = |rank: &'static str| -> Vec<(&str, &str)> {
        vec![
            ("MASTER_PORT", "9991"),
            ("MASTER_ADDR", master.as_str()),
            ("WORLD_SIZE", "3"),
            ("RANK", rank),
            ("PYTHONUNBUFFERED", "1"),
            ("WORKER_PORT", "9991"),
            ("WORKER_ADDRS", workers.as_str()),
        ]
    };
    let (m, w0, w1) = (xgb("0"), xgb("1"), xgb("2"));
    let names = [
        format!("{job}-master-0"),
        format!("{job}-worker-0"),
        format!("{job}-worker-1"),
    ];
    assert_operator_env(
        "xgboostjob.yaml",
        &[(&names[0], &m), (&names[1], &w0), (&names[2], &w1)],
    );

    // mpi-operator pkg/controller/mpi_job_controller.go: the launcher's
    // OpenMPI settings (its hostfile is at /etc/dljob/hostfile, and at
    // /etc/mpi/hostfile where the operator's is), the workers' role.
    let launcher: &[(&str, &str)] = &[
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "1"),
        ("NVIDIA_VISIBLE_DEVICES", ""),
        ("NVIDIA_DRIVER_CAPABILITIES", ""),
    ];
    let worker: &[(&str, &str)] = &[("K_MPI_JOB_ROLE", "worker")];
    assert_operator_env(
        "mpijob-pi.yaml",
        &[
            ("pi-launcher-0", launcher),
            ("pi-worker-0", worker),
            ("pi-worker-1", worker),
        ],
    );
}

#[test]
fn a_tfjobs_tf_config_is_the_operators() {
    // tensorflow/tensorflow.go genTFConfigJSONStr: every replica type's
    // hosts (lower-case type), the task, environment "cloud".
    let pods = pod_env("tfjob-dist-mnist.yaml");
    let host = |r: &str, i: u32| format!("dist-mnist-{r}-{i}.dist-mnist.default.svc:2222");
    let cluster = json!({
        "ps": [host("ps", 0), host("ps", 1)],
        "worker": (0..4).map(|i| host("worker", i)).collect::<Vec<_>>(),
    });
    assert_eq!(pods.len(), 6);
    for (hostname, env) in &pods {
        let (role, index) = {
            let rest = hostname.strip_prefix("dist-mnist-").unwrap();
            let (r, i) = rest.rsplit_once('-').unwrap();
            (r.to_owned(), i.parse::<u32>().unwrap())
        };
        let tf: Value = env
            .iter()
            .find(|(n, _)| n == "TF_CONFIG")
            .map(|(_, v)| serde_json::from_str(v).unwrap())
            .unwrap();
        assert_eq!(
            tf,
            json!({"cluster": cluster, "task": {"type": role, "index": index}, "environment": "cloud"}),
            "{hostname}"
        );
    }
}

#[test]
fn the_migration_guides_before_and_after_are_the_fixture_and_its_conversion() {
    let doc = std::fs::read_to_string(common::repo().join("docs/migration.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    let before = std::fs::read_to_string(fixture("pytorchjob-simple.yaml")).unwrap();
    let after = convert(&fixture("pytorchjob-simple.yaml"));
    assert!(after.success(), "{after:?}");
    assert_eq!(blocks, [before.as_str(), after.stdout.as_str()]);
}

#[test]
fn the_first_operators_list_forms_convert_by_their_own_field_names() {
    let (run, out) = converted("tfjob-mlkube-v1beta1.yaml");
    let names: Vec<&str> = out
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tf-smoke-master", "tf-smoke-worker", "tf-smoke-ps"]);
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/replicas"], "master=1,worker=1,ps=2");
    assert_eq!(a["dljob.dev/port"], "2222");
    // These operators deleted every pod of a finished job.
    assert_eq!(a["dljob.dev/clean-pod-policy"], "All");
    assert!(run
        .stdout
        .contains("# dljob convert: TfJob/tf-smoke, spec.replica_specs[2] (role ps)\n"));
    assert!(run
        .stdout
        .contains("\n        # The parameter servers serve until the job ends.\n"));

    let (_, out) = converted("mxjob-v1alpha1.yaml");
    let a = annotations(&out[0]);
    // The scheduler's PsRootPort is the job's port.
    assert_eq!(a["dljob.dev/port"], "9000");
    assert_eq!(a["dljob.dev/replicas"], "scheduler=1,server=1,worker=2");
    assert_eq!(a["dljob.dev/framework"], "mxnet");

    let bad = r#"
apiVersion: kubeflow.org/v1alpha1
kind: TFJob
metadata: {name: old}
spec:
  terminationPolicy: {chief: {replicaName: WORKER, replicaIndex: 1}}
  tensorboard: {logDir: /tmp}
  replicaSpecs:
    - tfReplicaType: MASTER
      template:
        spec:
          containers: [{name: tensorflow, image: tf}]
    - tfReplicaType: CHIEF
      template: {spec: {containers: [{name: tensorflow, image: tf}], restartPolicy: Never}}
    - tfReplicaType: PS
      tfPort: 2223
      template: {spec: {containers: [{name: tensorflow, image: tf}], restartPolicy: Never}}
    - tfReplicaType: WORKER
      tfPort: 2222
      template: {spec: {containers: [{name: tensorflow, image: tf}], restartPolicy: Never}}
"#;
    assert_refused(
        bad,
        &[
        "TFJob/old: spec.tensorboard is not a field of TFJob that dljob convert knows",
        "TFJob/old: spec.replicaSpecs[0].template.spec.restartPolicy is missing: the operator ran each replica as a Job of the template's policy; set OnFailure or Never",
        "TFJob/old: spec.replicaSpecs[1].tfReplicaType: TFJob has no replica type \"CHIEF\"; its types are MASTER, WORKER, PS",
        "TFJob/old: spec.replicaSpecs[3].tfPort is 2222 and spec.replicaSpecs[2].tfPort is 2223",
        "TFJob/old: spec.terminationPolicy.chief is WORKER 1: a dljob job ends when its coordinator (WORKER 0) exits",
        ],
    );
}

#[test]
fn a_volcano_job_becomes_a_job_whose_pods_get_volcanos_files_and_env() {
    let (run, out) = converted("volcano-tensorflow.yaml");
    // The worker task completes the job (TaskCompleted → CompleteJob): it
    // is the generic job's coordinator, so its role comes first.
    let names: Vec<&str> = out
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["tensorflow-dist-mnist-worker", "tensorflow-dist-mnist-ps"]
    );
    assert_eq!(
        annotations(&out[0]),
        json!({
            "dljob.dev/backoff-limit": "3",
            "dljob.dev/compat": "volcano",
            "dljob.dev/framework": "generic",
            "dljob.dev/gang": "volcano",
            "dljob.dev/queue": "default",
            "dljob.dev/replicas": "worker=2,ps=1",
            // PodEvicted → RestartJob.
            "dljob.dev/restart-scope": "Job",
        })
    );
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    // The validating webhook accepts what admission made of them (the
    // /etc/volcano volume is dljob's own).
    assert_each_pod_validates(&pods.stdout);
    let pods = values(&pods.stdout);
    // Volcano's names: each pod's under the job's Service, resolved through
    // the pod's DNS search path.
    let host = |r: &str, i: u32| format!("tensorflow-dist-mnist-{r}-{i}.tensorflow-dist-mnist");
    for pod in &pods {
        let index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap()
            .to_owned();
        let env: Vec<(String, String)> = pod["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_owned(),
                    e["value"].as_str()?.to_owned(),
                ))
            })
            .collect();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        // The env plugin's and the svc plugin's names.
        assert_eq!(get("VK_TASK_INDEX"), Some(index.clone()));
        assert_eq!(get("VC_TASK_INDEX"), Some(index));
        assert_eq!(get("VC_PS_HOSTS"), Some(host("ps", 0)));
        assert_eq!(get("VC_PS_NUM").as_deref(), Some("1"));
        assert_eq!(
            get("VC_WORKER_HOSTS"),
            Some(format!("{},{}", host("worker", 0), host("worker", 1)))
        );
        assert_eq!(get("VC_WORKER_NUM").as_deref(), Some("2"));
        // The svc plugin's ConfigMap, the job's, mounted whole.
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "dljob-volcano")
            .unwrap();
        assert_eq!(
            volume["configMap"],
            json!({"name": "tensorflow-dist-mnist-volcano"})
        );
        assert!(pod["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(
                &json!({"name": "dljob-volcano", "mountPath": "/etc/volcano", "readOnly": true})
            ));
    }
    // What the ConfigMap holds, as Volcano's svc plugin fills its own: the
    // host files one host a line, and the env's values.
    let workers = [host("worker", 0), host("worker", 1)];
    assert_eq!(
        volcano_files(&run.stdout),
        json!({
            "worker.host": workers.join("\n"),
            "VC_WORKER_HOSTS": workers.join(","),
            "VC_WORKER_NUM": "2",
            "ps.host": host("ps", 0),
            "VC_PS_HOSTS": host("ps", 0),
            "VC_PS_NUM": "1",
        })
    );
}

/// The data of the Volcano files' ConfigMap that `dljob mutate --owned`
/// says the reconciler keeps for the jobs of `manifest`.
fn volcano_files(manifest: &str) -> Value {
    let owned = dljob(&["mutate", "--owned", "-f", "-"], Some(manifest));
    assert!(owned.success(), "{owned:?}");
    let maps: Vec<Value> = values(&owned.stdout)
        .into_iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .collect();
    assert_eq!(maps.len(), 1, "{}", owned.stdout);
    maps[0]["data"].clone()
}

#[test]
fn volcano_plugins_name_the_framework_and_map_task_names_to_its_roles() {
    let job = r#"
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: lm-mpi-job}
spec:
  minAvailable: 3
  plugins:
    ssh: []
    svc: []
    mpi: ["--master=mpimaster", "--worker=mpiworker", "--port=22"]
  tasks:
    - replicas: 1
      name: mpimaster
      policies:
        - event: TaskCompleted
          action: CompleteJob
      template:
        spec:
          containers: [{name: mpimaster, image: volcanosh/example-mpi:0.0.3, command: [mpiexec, --allow-run-as-root, --host, "${MPI_HOST}", -np, "2", mpi_hello_world]}]
          restartPolicy: OnFailure
    - replicas: 2
      name: mpiworker
      template:
        spec:
          containers: [{name: mpiworker, image: volcanosh/example-mpi:0.0.3, command: [/bin/sh, -c, "mkdir -p /var/run/sshd; /usr/sbin/sshd -D;"]}]
          restartPolicy: OnFailure
"#;
    let run = dljob(&["convert", "-f", "-"], Some(job));
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/framework"], "mpi");
    assert_eq!(a["dljob.dev/replicas"], "launcher=1,worker=2");
    assert_eq!(a["dljob.dev/port"], "22");
    // Volcano's env and files are named by task.
    assert_eq!(
        a["dljob.dev/compat"],
        "volcano:launcher=mpimaster,worker=mpiworker"
    );
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    let launcher = &values(&pods.stdout)[0].clone();
    let env = launcher["spec"]["containers"][0]["env"].as_array().unwrap();
    let get = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
    };
    let workers = "lm-mpi-job-worker-0.lm-mpi-job,lm-mpi-job-worker-1.lm-mpi-job";
    assert_eq!(get("MPI_HOST"), Some(json!(workers)));
    assert_eq!(get("VC_MPIWORKER_HOSTS"), Some(json!(workers)));
    assert_eq!(get("VC_MPIMASTER_NUM"), Some(json!("1")));
    assert_eq!(
        volcano_files(&run.stdout)["mpiworker.host"],
        json!(workers.replace(',', "\n"))
    );
    assert_each_pod_validates(&pods.stdout);
    // Volcano's ssh plugin's layout: the key as id_rsa, with an ssh config
    // (dljob's, which names the key id_ed25519: mounted under that name
    // too).
    let ssh = launcher["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dljob-ssh")
        .unwrap();
    let paths: Vec<&str> = ssh["secret"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "id_rsa",
            "id_rsa.pub",
            "authorized_keys",
            "id_ed25519",
            "config"
        ]
    );

    // What has no dljob equivalent is named.
    let bad = r#"
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vc}
spec:
  minAvailable: 1
  volumes: [{mountPath: /data, volumeClaimName: data}]
  plugins: {pytorch: ["--master=master", "--wrker=worker"], ray: [], ssh: ["--ssh-private-key=xyz"]}
  policies:
    - {exitCode: 3, action: RestartJob}
    - {event: PodFailed, action: CompleteJob}
  tasks:
    - name: master
      template: {spec: {containers: [{name: c, image: i}], restartPolicy: OnFailure}}
    - name: trainer
      replicas: 2
      template: {spec: {containers: [{name: c, image: i}], restartPolicy: OnFailure}}
"#;
    assert_refused(
        bad,
        &[
        "Job/vc: spec.volumes is not a field of a Volcano Job that dljob convert knows",
        "Job/vc: spec.plugins.ray: dljob has no equivalent of Volcano's ray plugin",
        "Job/vc: spec.plugins.pytorch: --wrker is not a flag of the plugin",
        "Job/vc: spec.plugins.ssh: \"--ssh-private-key=xyz\" has no dljob equivalent",
        "Job/vc: spec.tasks[1]: task \"trainer\" is none of the pytorch plugin's (master, worker)",
        "Job/vc: spec.policies[0]: a policy on an exit code or a timeout has no dljob equivalent",
        "Job/vc: spec.policies[1]: PodFailed → CompleteJob has no dljob equivalent",
        ],
    );
}

#[test]
fn a_chainerjobs_worker_sets_become_statefulsets_running_sshd() {
    let (run, out) = converted("chainerjob-mn.yaml");
    let kinds = kinds_and_names(&out);
    assert_eq!(
        kinds,
        [
            ("Job", "example-job-mn-master"),
            ("StatefulSet", "example-job-mn-worker-ws0"),
            ("StatefulSet", "example-job-mn-worker-ws1"),
        ]
    );
    for v in &out {
        let a = annotations(v);
        assert_eq!(a["dljob.dev/framework"], "chainer");
        assert_eq!(a["dljob.dev/replicas"], "master=1,worker=3");
        // The master's 1 slot; ws0's 1 each (workers 0-1); ws1's 2, from
        // its container's GPU limit as the operator defaults it.
        assert_eq!(a["dljob.dev/slots"], "1,0-1=1,2=2");
        assert_eq!(a["dljob.dev/backoff-limit"], "60");
        assert_eq!(a["dljob.dev/active-deadline-seconds"], "6000");
    }
    assert_eq!(annotations(&out[1])["dljob.dev/index-offset"], "0");
    assert_eq!(annotations(&out[2])["dljob.dev/index-offset"], "2");
    assert_eq!(
        out[1]["spec"]["selector"]["matchLabels"]["chainerjob.kubeflow.org/workersetname"],
        "ws0"
    );
    // The sleeping workers run sshd now, and the user is told.
    let container = &out[1]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        json!([
            "sh",
            "-c",
            "mkdir -p /run/sshd 2>/dev/null; exec /usr/sbin/sshd -De"
        ])
    );
    assert!(run.stderr.contains(
        "ChainerJob/example-job-mn: spec.workerSets.ws0: the workers' command (\"sh -c while true; do sleep 1 & wait; done\") is replaced by `mkdir -p /run/sshd 2>/dev/null; exec /usr/sbin/sshd -De`"
    ), "{run:?}");
    // The master's hostfile: the workers with their slots, the master last,
    // by its own host name (mpiexec runs its ranks there itself).
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    let master = &values(&pods.stdout)[0];
    let host = |r: &str, i: u32| format!("example-job-mn-{r}-{i}.example-job-mn.default.svc");
    assert_eq!(
        master["metadata"]["annotations"]["dljob.dev/hostfile"],
        format!(
            "{} slots=1\n{} slots=1\n{} slots=2\n{} slots=1\n",
            host("worker", 0),
            host("worker", 1),
            host("worker", 2),
            "example-job-mn-master-0"
        )
    );
}

#[test]
fn paddle_and_mxnet_pods_get_what_the_operators_source_sets() {
    // paddlepaddle/envvar.go, collective mode (no master): the rendezvous
    // on worker 0, which the operator gives its own IP as
    // `$(POD_IP_DUMMY):port` and dljob as `$(POD_IP):port` (the same
    // address once the kubelet expands it).
    let w0 = "paddle-simple-cpu-worker-0.paddle-simple-cpu.kubeflow.svc:37777";
    let first: &[(&str, &str)] = &[
        ("PYTHONUNBUFFERED", "1"),
        ("PADDLE_JOB_ID", "paddle-simple-cpu"),
        ("PADDLE_NNODES", "2"),
        ("PADDLE_MASTER", "$(POD_IP):37777"),
    ];
    let second: &[(&str, &str)] = &[
        ("PYTHONUNBUFFERED", "1"),
        ("PADDLE_JOB_ID", "paddle-simple-cpu"),
        ("PADDLE_NNODES", "2"),
        ("PADDLE_MASTER", w0),
    ];
    assert_operator_env(
        "paddlejob.yaml",
        &[
            ("paddle-simple-cpu-worker-0", first),
            ("paddle-simple-cpu-worker-1", second),
        ],
    );

    // mxnet/mxnet.go (training-operator v1.7.0, the last with MXJob): the
    // DMLC_* of ps-lite and MX_CONFIG.
    let pods = pod_env("mxjob-v1.yaml");
    let host = |r: &str| format!("mxnet-job-{r}-0.mxnet-job.default.svc");
    let url = |r: &str| json!([{"url": host(r), "port": 9991}]);
    assert_eq!(pods.len(), 3);
    for ((hostname, env), role) in pods.iter().zip(["scheduler", "server", "worker"]) {
        assert_eq!(hostname, &format!("mxnet-job-{role}-0"));
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("DMLC_PS_ROOT_PORT").as_deref(), Some("9991"));
        assert_eq!(get("DMLC_PS_ROOT_URI"), Some(host("scheduler")));
        assert_eq!(get("DMLC_NUM_SERVER").as_deref(), Some("1"));
        assert_eq!(get("DMLC_NUM_WORKER").as_deref(), Some("1"));
        assert_eq!(get("DMLC_ROLE").as_deref(), Some(role));
        assert_eq!(get("DMLC_USE_KUBERNETES").as_deref(), Some("1"));
        let worker_id = (role == "worker").then(|| "0".to_owned());
        assert_eq!(get("DMLC_WORKER_ID"), worker_id);
        let config: Value = serde_json::from_str(&get("MX_CONFIG").unwrap()).unwrap();
        assert_eq!(
            config,
            json!({
                "cluster": {"scheduler": url("scheduler"), "server": url("server"), "worker": url("worker")},
                "labels": {"scheduler": "", "server": "", "worker": ""},
                "task": {"type": role, "index": 0},
            })
        );
    }
}

#[test]
fn an_mxjob_v1beta1_has_its_policies_at_the_top_and_cleans_all() {
    let run = convert(&fixture("mxjob-v1beta1.yaml"));
    assert!(run.success(), "{run:?}");
    let a = annotations(&values(&run.stdout)[0]);
    assert_eq!(a["dljob.dev/clean-pod-policy"], "All");
    assert_eq!(a["dljob.dev/ttl-seconds-after-finished"], "600");
    assert_eq!(a["dljob.dev/port"], "9091");
    assert_eq!(a["dljob.dev/replicas"], "scheduler=1,server=1,worker=2");
    let text = std::fs::read_to_string(fixture("mxjob-v1beta1.yaml"))
        .unwrap()
        .replace(
            "  jobMode: MXTrain\n",
            "  jobMode: MXTrain\n  runPolicy: {backoffLimit: 2}\n  successPolicy: AllWorkers\n",
        );
    assert_refused(
        &text,
        &[
            "MXJob/mxnet-job: spec.runPolicy is not a field of MXJob",
            "MXJob/mxnet-job: spec.successPolicy \"AllWorkers\"",
        ],
    );
}

#[test]
fn help_says_what_convert_reads_and_why_each_kind_of_workload() {
    let help = dljob(&["convert", "--help"], None);
    assert!(help.success(), "{help:?}");
    for said in [
        "ChainerJob and Volcano's batch.volcano.sh/v1alpha1 Job",
        "an Indexed Job (completions = parallelism = replicas) for a replica type whose restartPolicy is OnFailure, Never or ExitCode",
        "a StatefulSet for one whose restartPolicy is Always",
        "A field dljob cannot honour stops the conversion",
        "docs/migration.md maps every field of every operator.",
    ] {
        assert!(help.stdout.contains(said), "{said}: {help:?}");
    }
    // label's own explanation is in its --help too.
    let label = dljob(&["label", "--help"], None);
    assert!(label.stdout.contains("Roles: --role wins"), "{label:?}");
}

/// The first MXJob (the mx-operator's `fioravanzo.org/v1alpha1`): its list
/// of replicas typed by `mxReplicaType`, each replica's port `mxPort`
/// (9000 when none is given), and the env its `pkg/trainer/replicas.go`
/// sets: `DMLC_ROLE`, `DMLC_PS_ROOT_URI` (the scheduler), `DMLC_PS_ROOT_PORT`,
/// `DMLC_NUM_SERVER`, `DMLC_NUM_WORKER`; its `PS_VERBOSE=2` is said, not set.
#[test]
fn the_first_mxjob_converts_with_its_own_port_field_and_default() {
    let (run, out) = converted("mxjob-fioravanzo.yaml");
    assert_eq!(
        kinds_and_names(&out),
        [
            ("Job", "mx-test-dist-scheduler"),
            ("Job", "mx-test-dist-server"),
            ("Job", "mx-test-dist-worker")
        ]
    );
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/framework"], "mxnet");
    assert_eq!(a["dljob.dev/port"], "9000");
    assert_eq!(a["dljob.dev/replicas"], "scheduler=1,server=1,worker=1");
    assert_eq!(a["dljob.dev/clean-pod-policy"], "All");
    assert!(
        run.stderr
            .contains("MXJob/mx-test-dist: the operator also set PS_VERBOSE=2"),
        "{run:?}"
    );
    // Its retries, said by the key it has (it has no runPolicy).
    assert!(
        run.stderr.contains("MXJob/mx-test-dist: this MXJob sets no retry limit, and the operator restarted its OnFailure replicas' pods; the converted Jobs fail after dljob's default of 3 restarts: set dljob.dev/backoff-limit on them"),
        "{run:?}"
    );
    assert!(!run.stderr.contains("runPolicy"), "{run:?}");
    let host = "mx-test-dist-scheduler-0.mx-test-dist.default.svc";
    for (hostname, env) in pod_env("mxjob-fioravanzo.yaml") {
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let role = hostname.rsplit('-').nth(1).unwrap();
        assert_eq!(get("DMLC_ROLE"), Some(role), "{hostname}");
        assert_eq!(get("DMLC_PS_ROOT_URI"), Some(host));
        assert_eq!(get("DMLC_PS_ROOT_PORT"), Some("9000"));
        assert_eq!(get("DMLC_NUM_SERVER"), Some("1"));
        assert_eq!(get("DMLC_NUM_WORKER"), Some("1"));
    }
    // mxPort given: that is the job's port; two different ones are refused.
    let text = std::fs::read_to_string(fixture("mxjob-fioravanzo.yaml")).unwrap();
    let ported = text.replacen(
        "      mxReplicaType: SCHEDULER\n",
        "      mxReplicaType: SCHEDULER\n      mxPort: 9100\n",
        1,
    );
    let run = dljob(&["convert", "-f", "-"], Some(&ported));
    assert!(run.success(), "{run:?}");
    assert_eq!(
        annotations(&values(&run.stdout)[0])["dljob.dev/port"],
        "9100"
    );
    let clash = ported.replacen(
        "      mxReplicaType: WORKER\n",
        "      mxReplicaType: WORKER\n      mxPort: 9200\n",
        1,
    );
    assert_refused(
        &clash,
        &["MXJob/mx-test-dist: spec.replicaSpecs[2].mxPort is 9200 and spec.replicaSpecs[0].mxPort is 9100"],
    );
}

/// The first operators' GPU resource, `alpha.kubernetes.io/nvidia-gpu`,
/// which no current node advertises: it becomes `nvidia.com/gpu` in the
/// template as written (its comments kept), with a warning.
#[test]
fn the_alpha_gpu_resource_becomes_nvidia_com_gpu_with_a_warning() {
    let (run, out) = converted("mxjob-fioravanzo-gpu.yaml");
    let worker = &out[2];
    assert_eq!(
        worker["spec"]["template"]["spec"]["containers"][0]["resources"],
        json!({"limits": {"nvidia.com/gpu": 1}})
    );
    // The job's leading comment, which names it, is kept; no resource is.
    assert!(
        !run.stdout.contains("alpha.kubernetes.io/nvidia-gpu: 1"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("          # Add GPU resource\n          resources:\n            limits:\n              nvidia.com/gpu: 1\n"),
        "{}",
        run.stdout
    );
    assert!(!run.stderr.contains("written anew"), "{run:?}");
    assert!(
        run.stderr.contains("MXJob/mx-cifar-gpu: alpha.kubernetes.io/nvidia-gpu is asked for 1 time and becomes nvidia.com/gpu"),
        "{run:?}"
    );
    // A job without it says nothing of it.
    let (run, _) = converted("mxjob-fioravanzo.yaml");
    assert!(!run.stderr.contains("nvidia"), "{run:?}");
}

/// The mxnet-operator's own `kubeflow.org/v1` MXJob has its run policy at
/// the top of the spec and cleans every pod by default; the
/// training-operator's nests it under `runPolicy` and cleans none.
#[test]
fn an_mxjob_v1_is_read_in_both_operators_layouts_with_their_defaults() {
    let (run, out) = converted("mxjob-v1-inline.yaml");
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/clean-pod-policy"], "Running");
    assert_eq!(a["dljob.dev/replicas"], "scheduler=1,server=2,worker=2");
    assert!(
        run.stderr.contains("MXJob/byteps-mxnet-job: spec.successPolicy \"AllWorkers\" is not carried over: the mxnet-operator's v1 controller does not read it"),
        "{run:?}"
    );
    // BytePS's workers read DMLC_WORKER_ID, as the operator sets it.
    let pods = pod_env("mxjob-v1-inline.yaml");
    let w1 = pods
        .iter()
        .find(|(h, _)| h == "byteps-mxnet-job-worker-1")
        .unwrap();
    assert!(
        w1.1.contains(&("DMLC_WORKER_ID".to_owned(), "1".to_owned())),
        "{w1:?}"
    );
    // Inline with nothing said of cleaning: the mxnet-operator's All.
    let text = std::fs::read_to_string(fixture("mxjob-v1-inline.yaml")).unwrap();
    let inline = text.replace(
        "  cleanPodPolicy: Running\n",
        "  ttlSecondsAfterFinished: 60\n",
    );
    let run = dljob(&["convert", "-f", "-"], Some(&inline));
    assert!(run.success(), "{run:?}");
    let a = annotations(&values(&run.stdout)[0]);
    assert_eq!(a["dljob.dev/clean-pod-policy"], "All");
    assert_eq!(a["dljob.dev/ttl-seconds-after-finished"], "60");
    // Nested: the training-operator's, whose default is None; successPolicy
    // is no field of its MXJob, said once.
    let nested = text
        .replace(
            "  cleanPodPolicy: Running\n",
            "  runPolicy: {backoffLimit: 2}\n",
        )
        .replace("  successPolicy: AllWorkers\n", "");
    let run = dljob(&["convert", "-f", "-"], Some(&nested));
    assert!(run.success(), "{run:?}");
    let a = annotations(&values(&run.stdout)[0]);
    assert_eq!(a["dljob.dev/clean-pod-policy"], "None");
    assert_eq!(a["dljob.dev/backoff-limit"], "2");
    let both = text.replace(
        "  cleanPodPolicy: Running\n",
        "  runPolicy: {backoffLimit: 2}\n",
    );
    let run = dljob(&["convert", "-f", "-"], Some(&both));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stderr.matches("successPolicy").count(), 1, "{run:?}");
    // A value dljob cannot take is named where it is.
    let bad = text.replace("cleanPodPolicy: Running", "cleanPodPolicy: Sometimes");
    assert_refused(
        &bad,
        &["MXJob/byteps-mxnet-job: spec.cleanPodPolicy is \"Sometimes\""],
    );
}

/// A directory's conversion says where each problem is: messages name the
/// file; two jobs of one name in two files are one refusal naming both; a
/// JSON file is not rewritten as YAML; a subdirectory is skipped and said.
#[test]
fn a_directorys_problems_name_their_files_and_nothing_is_lost() {
    let dir = scratch_dir("convert-tests", "directory");
    let job = std::fs::read_to_string(fixture("jaxjob-cpu.yaml")).unwrap();
    let a = dir.join("a.yaml");
    let b = dir.join("b.yaml");
    std::fs::write(&a, &job).unwrap();
    std::fs::write(&b, &job).unwrap();
    std::fs::create_dir_all(dir.join("more")).unwrap();
    let run = dljob(&["convert", "-f", dir.to_str().unwrap()], None);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "");
    // One problem, naming both files, not the converted workloads' clashes.
    assert_eq!(
        run.stderr.matches("\n").count(),
        3,
        "a skipped line, one problem and the count: {run:?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "{}: JAXJob/jaxjob-simple: {}: JAXJob/jaxjob-simple has the same name in namespace default",
            b.display(),
            a.display()
        )),
        "{run:?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "skipped {}: -f DIR reads the files directly in DIR, not its subdirectories",
            dir.join("more").display()
        )),
        "{run:?}"
    );
    // A problem of one file is said with its file.
    std::fs::write(
        &b,
        job.replace("jaxjob-simple", "other")
            .replace("jaxReplicaSpecs", "jaxSpecs"),
    )
    .unwrap();
    let run = dljob(&["convert", "-f", dir.to_str().unwrap()], None);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "{}: JAXJob/other: spec.jaxSpecs is not a field of JAXJob",
            b.display()
        )),
        "{run:?}"
    );
    // JSON in place: refused before anything is written.
    std::fs::remove_file(&b).unwrap();
    let value: Value = values(&job).remove(0);
    let json_file = dir.join("c.json");
    let json_text = serde_json::to_string_pretty(&value).unwrap();
    std::fs::write(&json_file, &json_text).unwrap();
    std::fs::write(
        &a,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
    )
    .unwrap();
    let run = dljob(
        &["convert", "-f", dir.to_str().unwrap(), "--in-place"],
        None,
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "{} is JSON, and dljob writes YAML: nothing was written",
            json_file.display()
        )),
        "{run:?}"
    );
    assert_eq!(std::fs::read_to_string(&json_file).unwrap(), json_text);
    // Printed, the JSON job converts.
    let run = dljob(&["convert", "-f", json_file.to_str().unwrap()], None);
    assert!(run.success(), "{run:?}");
}

/// A `kubeflow.org` job of a kind dljob does not know, and Kubeflow
/// Trainer v2's TrainJob, are refused by name, never passed over as
/// "nothing to convert" with exit 0; other kubeflow.org kinds pass.
#[test]
fn unknown_kubeflow_job_kinds_are_refused_by_name() {
    let fancy = "apiVersion: kubeflow.org/v1\nkind: FancyJob\nmetadata: {name: f}\nspec: {}\n";
    assert_refused(
        fancy,
        &["FancyJob/f: FancyJob (kubeflow.org/v1) is no kind of job dljob convert knows; it converts PyTorchJob (kubeflow.org/v1), TFJob (kubeflow.org/v1)"],
    );
    let train = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: t}\nspec: {runtimeRef: {name: torch-distributed}}\n";
    assert_refused(
        train,
        &["TrainJob/t: spec.runtimeRef names the ClusterTrainingRuntime torch-distributed, which is not in the input"],
    );
    let notebook = "apiVersion: kubeflow.org/v1\nkind: Notebook\nmetadata: {name: n}\nspec: {}\n";
    let run = dljob(&["convert", "-f", "-"], Some(notebook));
    assert!(run.success(), "{run:?}");
    assert!(run.stderr.contains("nothing to convert"), "{run:?}");
}

/// Volcano's MPI example as its repository has it: the ssh and svc plugins
/// and no mpi plugin, the master building its host list from
/// /etc/volcano/mpiworker.host. It becomes an MPI job whose tasks the mpi
/// plugin would have named, every command kept; its launcher's pod gets
/// that file with the workers' hosts, one a line.
#[test]
fn volcanos_mpi_examples_without_the_mpi_plugin_convert() {
    let (run, out) = converted("volcano-mpi-ssh-svc.yaml");
    assert_eq!(
        kinds_and_names(&out),
        [("Job", "lm-mpi-job-launcher"), ("Job", "lm-mpi-job-worker")]
    );
    let a = annotations(&out[0]);
    assert_eq!(a["dljob.dev/framework"], "mpi");
    assert_eq!(
        a["dljob.dev/compat"],
        "volcano:launcher=mpimaster,worker=mpiworker"
    );
    assert_eq!(a["dljob.dev/replicas"], "launcher=1,worker=2");
    assert!(
        run.stderr
            .contains("Job/lm-mpi-job: no mpi plugin: read as an MPI job"),
        "{run:?}"
    );
    let script = out[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
        .as_str()
        .unwrap();
    assert!(
        script.starts_with("MPI_HOST=`cat /etc/volcano/mpiworker.host | tr \"\\n\" \",\"`;\n"),
        "{script}"
    );
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    let pods = values(&pods.stdout);
    let launcher = pods
        .iter()
        .find(|p| p["spec"]["hostname"] == "lm-mpi-job-launcher-0")
        .unwrap();
    assert_eq!(
        volcano_files(&run.stdout)["mpiworker.host"],
        "lm-mpi-job-worker-0.lm-mpi-job\nlm-mpi-job-worker-1.lm-mpi-job"
    );
    assert!(launcher["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "dljob-volcano" && m["mountPath"] == "/etc/volcano"));

    // Which task launches must be plain: by its name, else by the policy
    // that completes the job.
    let text = std::fs::read_to_string(fixture("volcano-mpi-ssh-svc.yaml")).unwrap();
    let renamed = text.replace("name: mpimaster", "name: head");
    let run = dljob(&["convert", "-f", "-"], Some(&renamed));
    assert!(run.success(), "by its policy: {run:?}");
    assert_eq!(
        annotations(&values(&run.stdout)[0])["dljob.dev/compat"],
        "volcano:launcher=head,worker=mpiworker"
    );
    let neither = renamed
        .replace(
            "          action: CompleteJob\n",
            "          action: RestartJob\n",
        )
        .replace("event: TaskCompleted", "event: PodFailed");
    assert_refused(
        &neither,
        &["Job/lm-mpi-job: spec.plugins.ssh without a framework plugin is read as an MPI job, and neither task \"head\" nor \"mpiworker\" is told to be the launcher"],
    );
    // Said once, not also as "ssh keys only as an MPI job".
    let run = dljob(&["convert", "-f", "-"], Some(&neither));
    assert!(!run.stderr.contains("ssh keys only"), "{run:?}");
    // With the mpi plugin but its default task names: the hint names the
    // flag for each task, and no second error follows.
    let plugin = text.replace("    svc: []\n", "    svc: []\n    mpi: []\n");
    let run = dljob(&["convert", "-f", "-"], Some(&plugin));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("(e.g. --master=mpimaster)"), "{run:?}");
    assert!(run.stderr.contains("(e.g. --worker=mpiworker)"), "{run:?}");
    assert!(!run.stderr.contains("minAvailable"), "{run:?}");
}

/// The training-operator's XGBoost example as written there (Master
/// `Never`, Worker `ExitCode`) converts: the job's policy is `ExitCode`,
/// the Master's pods are never restarted by the kubelet, and the warning
/// says exactly what changes for the Master.
#[test]
fn replicas_of_different_retry_policies_convert_with_what_changes_said() {
    let (run, out) = converted("xgboostjob.yaml");
    for w in &out {
        assert_eq!(annotations(w)["dljob.dev/restart-policy"], "ExitCode");
        assert_eq!(w["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }
    assert!(
        run.stderr.contains("XGBoostJob/xgboost-dist-iris-test-train: spec.xgbReplicaSpecs: restartPolicy is ExitCode for Worker and Never for Master; dljob's retry policy is one for the whole job, ExitCode here: an exit of 128-255 (a kill, an out-of-memory, a preemption) of Master is retried as Worker's are, where the operator failed the job"),
        "{run:?}"
    );
    // One policy for all: nothing to say.
    let text = std::fs::read_to_string(fixture("xgboostjob.yaml"))
        .unwrap()
        .replace("restartPolicy: ExitCode", "restartPolicy: Never");
    let run = dljob(&["convert", "-f", "-"], Some(&text));
    assert!(run.success(), "{run:?}");
    assert!(!run.stderr.contains("retry policy"), "{run:?}");
    assert_eq!(
        annotations(&values(&run.stdout)[0])["dljob.dev/restart-policy"],
        "Never"
    );
}

/// PyTorchJob's `nprocPerNode` becomes `PET_NPROC_PER_NODE` in the
/// framework container's env, written into the template as the job has it
/// (its comments kept), and the converted pods get no warning about a
/// variable the user never set: the processes per node are the user's to
/// choose, a default of dljob's otherwise.
#[test]
fn nproc_per_node_is_env_in_the_template_as_written_and_warns_about_nothing() {
    let job = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: ddp
spec:
  nprocPerNode: "4"
  runPolicy:
    backoffLimit: 2
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              # The training image.
              image: example.com/train:1
              command: ["torchrun", "train.py"]
"#;
    let run = dljob(&["convert", "-f", "-"], Some(job));
    assert!(run.success(), "{run:?}");
    assert_eq!(run.stderr, "", "nothing to say");
    assert!(
        run.stdout.contains("          # The training image.\n"),
        "{}",
        run.stdout
    );
    let out = values(&run.stdout);
    assert_eq!(
        out[0]["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "PET_NPROC_PER_NODE", "value": "4"}])
    );
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    assert!(pods.success(), "{pods:?}");
    assert_eq!(pods.stderr, "", "no warning about the user's own choice");
    let env = &values(&pods.stdout)[0]["spec"]["containers"][0]["env"];
    let nproc: Vec<&Value> = env
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "PET_NPROC_PER_NODE")
        .collect();
    assert_eq!(
        nproc,
        [&json!({"name": "PET_NPROC_PER_NODE", "value": "4"})]
    );
}

const TRAINER: &str = "tests/fixtures/trainer";

fn runtime(name: &str) -> String {
    format!("{TRAINER}/runtimes/{name}.yaml")
}

/// `dljob convert` of `job` on standard input, its runtime read from the
/// file `runtime` (`--runtime`).
fn convert_on(runtime: &str, job: &str) -> common::Run {
    dljob(&["convert", "-f", "-", "--runtime", runtime], Some(job))
}

#[test]
fn a_trainjob_becomes_its_runtimes_trainer_with_trainers_torch_env() {
    let (run, out) = converted("trainjob-torch.yaml");
    assert_eq!(
        kinds_and_names(&out),
        [
            ("ClusterTrainingRuntime", "torch-distributed"),
            ("Job", "multi-node-example-worker")
        ]
    );
    let input = values(&std::fs::read_to_string(fixture("trainjob-torch.yaml")).unwrap());
    assert_eq!(out[0], input[0], "the runtime passes through");
    let job = &out[1];
    assert_eq!(
        annotations(job),
        json!({
            "dljob.dev/framework": "pytorch",
            "dljob.dev/replicas": "worker=3",
            "dljob.dev/port": "29500",
            "dljob.dev/container": "node",
            "dljob.dev/clean-pod-policy": "None",
        })
    );
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(
        (&spec["completions"], &spec["parallelism"]),
        (&json!(3), &json!(3))
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "OnFailure", "JobSet's default");
    let node = &pod["containers"][0];
    assert_eq!(node["name"], "node");
    assert_eq!(node["image"], input[0].pointer("/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image").unwrap().clone());
    assert_eq!(node["command"], input[1]["spec"]["trainer"]["command"]);
    // No GPU and no CPU request: Trainer's torch plugin gives torchrun
    // one process per node, where torchrun's auto would start one per CPU.
    assert_eq!(
        node["env"],
        json!([{"name": "PET_NPROC_PER_NODE", "value": "1"}])
    );
    assert!(
        run.stderr.contains(
            "ClusterTrainingRuntime/torch-distributed: a Trainer runtime, printed as it came"
        ),
        "{run:?}"
    );
    assert!(run.stderr.contains("TrainJob/multi-node-example: a failed container restarts in place (restartPolicy OnFailure, JobSet's default)"), "{run:?}");

    // Trainer's torch plugin (pkg/runtime/framework/plugins/torch): PET_NNODES
    // the node count, PET_NODE_RANK the completion index, the master node 0
    // on port 29500 (Trainer names it <job>-node-0-0.<job>).
    let pods = pods_env(&run.stdout);
    assert_eq!(pods.len(), 3, "{pods:?}");
    for (i, (host, env)) in pods.iter().enumerate() {
        assert_eq!(host, &format!("multi-node-example-worker-{i}"));
        for (name, want) in [
            ("PET_NNODES", "3"),
            ("PET_NODE_RANK", &i.to_string()),
            (
                "PET_MASTER_ADDR",
                "multi-node-example-worker-0.multi-node-example.default.svc",
            ),
            ("PET_MASTER_PORT", "29500"),
            ("PET_NPROC_PER_NODE", "1"),
        ] {
            assert_eq!(env_value(env, name), [want], "{host}: {name}");
        }
    }
}

#[test]
fn a_trainjobs_runtime_is_given_with_runtime_and_its_patches_are_laid_over() {
    let job = format!("{TRAINER}/02-runtime-patches.yaml");
    let refused = convert(&job);
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(refused.stderr.contains("spec.runtimeRef names the ClusterTrainingRuntime torch-distributed, which is not in the input"), "{refused:?}");
    assert!(refused.stderr.contains("`kubectl get clustertrainingruntime torch-distributed -o yaml > runtime.yaml`, then `dljob convert -f FILE --runtime runtime.yaml`"), "{refused:?}");

    let run = dljob(
        &[
            "convert",
            "-f",
            &job,
            "--runtime",
            &runtime("torch_distributed"),
        ],
        None,
    );
    assert!(run.success(), "{run:?}");
    assert!(
        !run.stderr.contains("printed as it came"),
        "--runtime's runtimes are not printed: {run:?}"
    );
    let out = values(&run.stdout);
    assert_eq!(
        kinds_and_names(&out),
        [("Job", "runtime-patches-example-worker")]
    );
    let w = &out[0];
    // The JobSet template's metadata patch: onto the workloads.
    assert_eq!(w["metadata"]["labels"]["team"], "ml-platform");
    assert_eq!(w["metadata"]["labels"]["cost-center"], "research");
    assert_eq!(w["metadata"]["annotations"]["prometheus.io/scrape"], "true");
    assert_eq!(
        w["metadata"]["annotations"]["dljob.dev/replicas"],
        "worker=2"
    );
    let pod = &w["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "training-sa");
    assert_eq!(pod["nodeSelector"], json!({"node-type": "training"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "training-workload", "operator": "Equal", "value": "true", "effect": "NoSchedule"}])
    );
    let node = &pod["containers"][0];
    assert_eq!(
        node["resources"],
        json!({"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}})
    );
    // spec.trainer.env, then Trainer's processes per node: the CPU request.
    assert_eq!(
        node["env"],
        json!([
            {"name": "CUSTOM_VAR", "value": "custom-value"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PET_NPROC_PER_NODE", "value": "2"},
        ])
    );

    // --runtime reads runtimes only, and not standard input twice.
    let wrong = dljob(
        &[
            "convert",
            "-f",
            &job,
            "--runtime",
            &fixture("pytorchjob-simple.yaml"),
        ],
        None,
    );
    assert_eq!(wrong.code, Some(2), "a usage error: {wrong:?}");
    assert!(
        wrong.stderr.contains("is not a Kubeflow Trainer runtime"),
        "{wrong:?}"
    );
    let twice = convert_on("-", "kind: List\nitems: []\n");
    assert!(
        twice.stderr.contains("both read standard input"),
        "{twice:?}"
    );
}

#[test]
fn a_trainjob_in_trainer_2_1s_form_has_its_pod_template_overrides() {
    let job = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: overridden
  namespace: team-a
spec:
  runtimeRef:
    name: torch-distributed
  labels:
    team: vision
  trainer:
    numNodes: 2
    numProcPerNode: 4
    image: docker.io/team/train:1
    env:
      - name: EPOCHS
        value: "3"
  podTemplateOverrides:
    - targetJobs:
        - name: node
      metadata:
        labels:
          tier: gold
      spec:
        nodeSelector:
          pool: a100
        containers:
          - name: node
            volumeMounts:
              - name: data
                mountPath: /data
        volumes:
          - name: data
            persistentVolumeClaim:
              claimName: imagenet
"#;
    let run = convert_on(&runtime("torch_distributed"), job);
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    let w = &out[0];
    assert_eq!(w["metadata"]["namespace"], "team-a");
    assert_eq!(w["metadata"]["labels"]["team"], "vision");
    let t = &w["spec"]["template"];
    assert_eq!(t["metadata"]["labels"]["tier"], "gold");
    assert_eq!(t["spec"]["nodeSelector"], json!({"pool": "a100"}));
    assert_eq!(
        t["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "imagenet"
    );
    let node = &t["spec"]["containers"][0];
    assert_eq!(node["image"], "docker.io/team/train:1");
    assert_eq!(
        node["volumeMounts"],
        json!([{"name": "data", "mountPath": "/data"}])
    );
    assert_eq!(
        node["env"],
        json!([{"name": "EPOCHS", "value": "3"}, {"name": "PET_NPROC_PER_NODE", "value": "4"}])
    );
    let pods = pods_env(&run.stdout);
    assert_eq!(
        env_value(&pods[1].1, "PET_MASTER_ADDR"),
        ["overridden-worker-0.overridden.team-a.svc"]
    );
}

#[test]
fn trainjobs_on_the_jax_xgboost_and_mpi_runtimes_get_trainers_env() {
    let job = |name: &str, runtime: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: {name}\nspec:\n  runtimeRef:\n    name: {runtime}\n  trainer:\n    numNodes: 2\n    command: [python3, train.py]\n"
        )
    };
    // Trainer's jax plugin: JAX_NUM_PROCESSES, JAX_PROCESS_ID the
    // completion index, JAX_COORDINATOR_ADDRESS node 0 on port 29500.
    let run = convert_on(&runtime("jax_distributed"), &job("j", "jax-distributed"));
    assert!(run.success(), "{run:?}");
    for (i, (_, env)) in pods_env(&run.stdout).iter().enumerate() {
        assert_eq!(env_value(env, "JAX_NUM_PROCESSES"), ["2"]);
        assert_eq!(env_value(env, "JAX_PROCESS_ID"), [i.to_string().as_str()]);
        assert_eq!(
            env_value(env, "JAX_COORDINATOR_ADDRESS"),
            ["j-worker-0.j.default.svc:29500"]
        );
    }
    // Trainer's xgboost plugin: the tracker on node 0, port 29500, the
    // task id the completion index, one worker per node.
    let run = convert_on(
        &runtime("xgboost_distributed"),
        &job("x", "xgboost-distributed"),
    );
    assert!(run.success(), "{run:?}");
    for (i, (_, env)) in pods_env(&run.stdout).iter().enumerate() {
        assert_eq!(
            env_value(env, "DMLC_TRACKER_URI"),
            ["x-worker-0.x.default.svc"]
        );
        assert_eq!(env_value(env, "DMLC_TRACKER_PORT"), ["29500"]);
        assert_eq!(env_value(env, "DMLC_TASK_ID"), [i.to_string().as_str()]);
        assert_eq!(env_value(env, "DMLC_NUM_WORKER"), ["2"]);
    }
    // The deepspeed runtime runs ranks on the launcher too: dljob lists a
    // launcher that asks for GPUs (by its own host name), so a job of GPU
    // nodes converts, and one of CPU nodes is refused, naming the way out.
    let ds = runtime("deepspeed_distributed");
    let gpu_job = job("g", "deepspeed-distributed").replace(
        "    numNodes: 2\n",
        "    numNodes: 3\n    resourcesPerNode: {limits: {nvidia.com/gpu: 2}}\n",
    );
    let run = convert_on(&ds, &gpu_job);
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    let a = annotations(&out[0]);
    // numNodes counts the launcher; the runtime's 1 process a node on
    // nodes of 2 GPUs is one per GPU.
    assert_eq!(a["dljob.dev/replicas"], "worker=2,launcher=1");
    assert_eq!(a["dljob.dev/slots"], "2");
    let pods = dljob(&["mutate", "--pods", "-f", "-"], Some(&run.stdout));
    let launcher = values(&pods.stdout)
        .into_iter()
        .find(|p| p["spec"]["hostname"] == "g-launcher-0")
        .unwrap();
    assert_eq!(
        launcher["metadata"]["annotations"]["dljob.dev/hostfile"],
        "g-launcher-0 slots=2\ng-worker-0.g.default.svc slots=2\ng-worker-1.g.default.svc slots=2\n"
    );
    let run = convert_on(&ds, &job("d", "deepspeed-distributed"));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(
            "ClusterTrainingRuntime deepspeed-distributed: spec.mlPolicy.mpi.runLauncherAsNode: the launcher runs ranks, and dljob's hostfile lists a launcher only when it asks for GPUs (this one asks for none)"
        ),
        "{run:?}"
    );
    // The same runtime with the launcher apart converts: a launcher and
    // the nodes as MPI workers, the operator's SSH layout at the runtime's
    // path, one slot per node.
    let text = std::fs::read_to_string(&ds)
        .unwrap()
        .replace("runLauncherAsNode: true", "runLauncherAsNode: false");
    let dir = scratch_dir("convert-tests", "trainjob-mpi");
    let apart = dir.join("runtime.yaml");
    std::fs::write(&apart, text).unwrap();
    let run = convert_on(apart.to_str().unwrap(), &job("d", "deepspeed-distributed"));
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    assert_eq!(
        kinds_and_names(&out),
        [("Job", "d-worker"), ("Job", "d-launcher")]
    );
    let a = annotations(&out[1]);
    assert_eq!(a["dljob.dev/framework"], "mpi");
    assert_eq!(a["dljob.dev/replicas"], "worker=2,launcher=1");
    assert_eq!(a["dljob.dev/compat"], "mpi-operator");
    assert_eq!(a["dljob.dev/ssh-path"], "/home/mpiuser/.ssh");
    assert_eq!(a["dljob.dev/slots"], "1");
    // The trainer's command is the launcher's; the nodes keep sshd.
    assert_eq!(
        out[1]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["python3", "train.py"])
    );
    assert_eq!(
        out[0]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["/usr/sbin/sshd"])
    );
    assert_eq!(
        a.get("dljob.dev/mpi-implementation"),
        None,
        "OpenMPI: the default"
    );
    // Its mpiImplementation as Intel: Hydra's names and hostfile.
    let intel = dir.join("runtime-intel.yaml");
    std::fs::write(
        &intel,
        std::fs::read_to_string(&apart)
            .unwrap()
            .replace("mpiImplementation: OpenMPI", "mpiImplementation: Intel"),
    )
    .unwrap();
    let run = convert_on(intel.to_str().unwrap(), &job("d", "deepspeed-distributed"));
    assert!(run.success(), "{run:?}");
    for workload in values(&run.stdout) {
        assert_eq!(
            annotations(&workload)["dljob.dev/mpi-implementation"],
            "Intel"
        );
    }
    let launcher = pods_env(&run.stdout)
        .into_iter()
        .find(|(host, _)| host == "d-launcher-0")
        .unwrap();
    assert_eq!(
        env_value(&launcher.1, "I_MPI_HYDRA_HOST_FILE"),
        ["/etc/dljob/hostfile"]
    );
}

#[test]
fn what_a_trainjob_cannot_bring_is_refused_by_name() {
    let run = convert(&format!("{TRAINER}/05-multi-step.yaml"));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("TrainJob/multi-step-example: spec.initializer: the dataset and model initializers are steps Trainer runs before the trainer; a dljob job has no steps"), "{run:?}");
    assert!(run.stderr.contains("TrainingRuntime torch-with-dataset-init: spec.template.spec.replicatedJobs[0] (dataset-initializer) is the dataset-initializer"), "{run:?}");
    let flux = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata:\n  name: f\nspec:\n  mlPolicy:\n    flux: {}\n  template:\n    spec:\n      replicatedJobs: []\n---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: j\nspec:\n  runtimeRef:\n    kind: TrainingRuntime\n    name: f\n  suspend: true\n  managedBy: kueue.x-k8s.io/multikueue\n";
    assert_refused(
        flux,
        &[
            "TrainingRuntime f: spec.mlPolicy.flux: the job runs under the Flux framework",
            "spec.suspend is true: a dljob job has no suspended state",
            "spec.managedBy is \"kueue.x-k8s.io/multikueue\"",
        ],
    );
    // A TrainingRuntime is its namespace's.
    let elsewhere = flux.replace("  name: f\nspec:", "  name: f\n  namespace: other\nspec:");
    assert_refused(
        &elsewhere,
        &["`kubectl get trainingruntime f -n default -o yaml > runtime.yaml`"],
    );
}

/// A TrainJob named `j` on the runtime `rt` (`ClusterTrainingRuntime r`
/// with `ml_policy` and `jobs`, the replicated Jobs), its spec `spec`.
fn trainjob_on(ml_policy: &str, jobs: &str, spec: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {{name: r}}\nspec:\n  mlPolicy: {ml_policy}\n  template:\n    spec:\n      replicatedJobs: {jobs}\n---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\nspec:\n  runtimeRef: {{name: r}}\n{spec}"
    )
}

/// A replicated Job named `name` (the trainer when `trainer`) whose pod
/// runs a container `node` (or `container`), with `extra` in its Job spec.
fn replicated(name: &str, trainer: bool, container: &str, extra: &str) -> String {
    let labels = if trainer {
        "metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}, "
    } else {
        ""
    };
    format!(
        "{{name: {name}, template: {{{labels}spec: {{{extra}template: {{spec: {{containers: [{{name: {container}, image: img, env: [{{name: TOKEN, value: placeholder}}], resources: {{limits: {{nvidia.com/gpu: 2}}}}}}]}}}}}}}}}}"
    )
}

fn converted_stdin(text: &str) -> Vec<Value> {
    let run = dljob(&["convert", "-f", "-"], Some(text));
    assert!(run.success(), "{run:?}\n{text}");
    values(&run.stdout)
        .into_iter()
        .filter(|v| v["kind"] == "Job")
        .collect()
}

#[test]
fn a_trainjobs_fields_are_read_as_trainers_controller_reads_them() {
    let node = replicated("node", true, "node", "");
    // spec.trainer.env replaces the runtime's entry of its name whole.
    let out = converted_stdin(&trainjob_on(
        "{torch: {}}",
        &format!("[{node}]"),
        "  trainer:\n    env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}]\n    resourcesPerNode: {requests: {cpu: 4}}\n",
    ));
    let c = &out[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["env"][0],
        json!({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}})
    );
    // Processes per node from the TrainJob's resources where it gives them
    // (4 CPUs, no GPU), not the runtime's GPUs; resources merged key by key.
    assert_eq!(
        c["env"][1],
        json!({"name": "PET_NPROC_PER_NODE", "value": "4"})
    );
    assert_eq!(
        c["resources"],
        json!({"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": 4}})
    );
    // With the runtime's GPUs, torchrun's auto, written as Trainer does.
    let out = converted_stdin(&trainjob_on("{torch: {}}", &format!("[{node}]"), ""));
    assert_eq!(
        out[0]["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"],
        "auto"
    );

    // Plain ML: the trainer's count from its Job's parallelism, and another
    // replicated Job its own role, with its own container.
    let out = converted_stdin(&trainjob_on(
        "null",
        &format!(
            "[{}, {}]",
            replicated("node", true, "node", "parallelism: 3, "),
            replicated("sidecar", false, "s", "")
        ),
        "",
    ));
    assert_eq!(
        annotations(&out[0])["dljob.dev/replicas"],
        "node=3,sidecar=1"
    );
    assert_eq!(annotations(&out[1]).get("dljob.dev/container"), None);

    // MPI: the nodes' count from their Job where the TrainJob gives none.
    // A launcher without GPUs (Trainer's hostfile lists the nodes only).
    let launcher = replicated("launcher", true, "node", "").replace("nvidia.com/gpu: 2", "cpu: 1");
    let nodes = replicated("node", false, "node", "parallelism: 2, ");
    let mpi = format!("[{launcher}, {nodes}]");
    let out = converted_stdin(&trainjob_on("{mpi: {numProcPerNode: 1}}", &mpi, ""));
    assert_eq!(
        annotations(&out[0])["dljob.dev/replicas"],
        "launcher=1,worker=2"
    );
    // Trainer counts a node's GPUs in the first of the `node` Job and the
    // trainer step it finds: here the launcher, which has none.
    assert_eq!(annotations(&out[0])["dljob.dev/slots"], "1");
    // The nodes first: the runtime's 1 on nodes of 2 GPUs is one process
    // per GPU.
    let out = converted_stdin(&trainjob_on(
        "{mpi: {numProcPerNode: 1}}",
        &format!("[{nodes}, {launcher}]"),
        "",
    ));
    assert_eq!(annotations(&out[0])["dljob.dev/slots"], "2");

    for (text, said) in [
        (
            trainjob_on("{torch: {}}", &format!("[{node}]"), "  trainer: {numNodes: \"3\", command: \"python train.py\"}\n"),
            vec!["spec.trainer.numNodes is \"3\", not a count", "spec.trainer.command is \"python train.py\", not a list"],
        ),
        (
            trainjob_on("{torch: {}}", &format!("[{node}]"), "  trainer: {env: [{name: PET_NNODES, value: \"9\"}]}\n"),
            vec!["spec.trainer.env sets PET_NNODES, which Trainer's torch plugin sets itself"],
        ),
        (
            trainjob_on("{xgboost: {}}", &format!("[{node}]"), ""),
            vec!["Trainer's xgboost plugin counts one worker per GPU, 2 a node"],
        ),
        (
            trainjob_on("{mpi: {}}", &mpi, "  trainer: {resourcesPerNode: {limits: {nvidia.com/gpu: 4}}}\n"),
            vec!["the launcher asks for GPUs (spec.trainer.resourcesPerNode, which Trainer gives the launcher"],
        ),
        (
            trainjob_on("{torch: {}}", &format!("[{node}]"), "  runtimePatches: [{trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {volumes: [{name: v, $patch: delete}]}}}}}]}}}}]\n"),
            vec!["spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.volumes[0].$patch: a strategic merge patch directive"],
        ),
        (
            trainjob_on("{torch: {}}", &format!("[{node}]"), "  runtimePatches: [{trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: extra}]}}}}]\n"),
            vec!["spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]: the runtime has no replicated Job extra; it has node"],
        ),
        (
            trainjob_on("{torch: {}, jax: {}}", &format!("[{node}]"), ""),
            vec!["ClusterTrainingRuntime r: spec.mlPolicy has jax and torch: a runtime has one policy"],
        ),
        (
            trainjob_on("{torch: {}}", &format!("[{node}, {}]", replicated("other", false, "node", "")), ""),
            vec!["ClusterTrainingRuntime r: spec.template.spec.replicatedJobs[1] (other): a replicated Job besides the trainer's; the torch policy's job is the trainer's nodes only"],
        ),
    ] {
        assert_refused(&text, &said);
    }

    // Runtimes: a typed list is read; the same runtime twice is one; two
    // that differ are refused; a --runtime List with anything else too.
    let job = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec: {runtimeRef: {name: torch-distributed}}\n";
    let rt = std::fs::read_to_string(runtime("torch_distributed")).unwrap();
    let dir = scratch_dir("convert-tests", "trainjob-runtimes");
    let typed = dir.join("typed.yaml");
    let items: Value = values(&rt).remove(0);
    std::fs::write(&typed, serde_json::to_string(&json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntimeList", "items": [items]})).unwrap()).unwrap();
    let run = dljob(
        &[
            "convert",
            "-f",
            "-",
            "--runtime",
            typed.to_str().unwrap(),
            "--runtime",
            &runtime("torch_distributed"),
        ],
        Some(job),
    );
    assert!(run.success(), "{run:?}");
    let other = dir.join("other.yaml");
    std::fs::write(&other, rt.replace("pytorch/pytorch", "example.com/torch")).unwrap();
    let run = dljob(
        &[
            "convert",
            "-f",
            "-",
            "--runtime",
            other.to_str().unwrap(),
            "--runtime",
            &runtime("torch_distributed"),
        ],
        Some(job),
    );
    assert!(
        run.stderr
            .contains("which the input gives 2 times, not alike"),
        "{run:?}"
    );
    let mixed = dir.join("mixed.yaml");
    std::fs::write(&mixed, "kind: List\napiVersion: v1\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: cm}}]\n").unwrap();
    let run = convert_on(mixed.to_str().unwrap(), job);
    assert!(
        run.stderr
            .contains("ConfigMap/cm is not a Kubeflow Trainer runtime"),
        "{run:?}"
    );
}
