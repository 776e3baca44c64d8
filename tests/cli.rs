//! The offline commands as a user runs them: `dljob mutate` and
//! `dljob validate` on files and standard input, their exit codes, and what
//! they print where. Every subprocess is bounded by a deadline.

use std::path::{Path, PathBuf};

mod common;
use common::{dljob, repo, CONFIG_MAP};

fn example(rel: &str) -> String {
    repo().join("examples").join(rel).display().to_string()
}

/// A scratch file under the target directory, unique to this test.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("scratch file");
    path
}

const BAD_FRAMEWORK: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  labels: {dljob.dev/job: typo, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: tensorflw, dljob.dev/replicas: worker=1}
spec:
  containers: [{name: tensorflow, image: tensorflow/tensorflow:2.15.0}]
";

const SIZE_MISMATCH: &str = "\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: workers
  labels: {dljob.dev/job: ddp, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: pytorch, dljob.dev/replicas: \"master=1,worker=4\"}
spec:
  replicas: 3
  selector: {matchLabels: {dljob.dev/job: ddp, dljob.dev/role: worker}}
  template:
    metadata: {labels: {dljob.dev/job: ddp, dljob.dev/role: worker}}
    spec:
      containers: [{name: pytorch, image: pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime}]
";

const WORKER_POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: jax-0
  labels: {dljob.dev/job: jx, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: jax, dljob.dev/replicas: worker=1}
spec:
  containers: [{name: jax, image: ghcr.io/nvidia/jax:jax}]
";

#[test]
fn mutate_file_prints_yaml_with_tf_config_and_exits_0() {
    let run = dljob(&["mutate", "-f", &example("tensorflow-ps/job.yaml")], None);
    assert!(run.success(), "{run:?}");
    assert!(run.stdout.contains("- name: TF_CONFIG"), "{run:?}");
    assert!(
        run.stdout
            .contains(r#"\"task\":{\"type\":\"chief\",\"index\":0}"#),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("tf-ps-ps-1.tf-ps.default.svc:2222"),
        "{run:?}"
    );
    assert_eq!(run.stderr, "", "no warnings expected");
    // Four documents: the ConfigMap and three members.
    assert_eq!(run.stdout.matches("\n---\n").count(), 3, "{run:?}");
}

#[test]
fn mutate_pods_previews_every_pod_of_every_member_with_its_env() {
    let run = dljob(
        &["mutate", "--pods", "-f", &example("tensorflow-ps/job.yaml")],
        None,
    );
    assert!(run.success(), "{run:?}");
    assert_eq!(run.stderr, "", "no warnings expected");
    let pods: Vec<serde_json::Value> = run
        .stdout
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("each document parses"))
        .collect();
    // The chief Pod, 2 worker and 2 ps StatefulSet pods; the ConfigMap is left out.
    let seen: Vec<(String, String)> = pods
        .iter()
        .map(|p| {
            let tf: serde_json::Value = serde_json::from_str(
                p["spec"]["containers"][0]["env"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|e| e["name"] == "TF_CONFIG")
                    .expect("TF_CONFIG")["value"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
            (
                p["spec"]["hostname"].as_str().unwrap().to_owned(),
                format!("{}/{}", tf["task"]["type"], tf["task"]["index"]),
            )
        })
        .collect();
    let want = [
        ("tf-ps-chief-0", "\"chief\"/0"),
        ("tf-ps-worker-0", "\"worker\"/0"),
        ("tf-ps-worker-1", "\"worker\"/1"),
        ("tf-ps-ps-0", "\"ps\"/0"),
        ("tf-ps-ps-1", "\"ps\"/1"),
    ];
    assert_eq!(
        seen,
        want.map(|(h, t)| (h.to_owned(), t.to_owned())).to_vec()
    );
    // Controller pods as their controllers create them.
    assert_eq!(pods[2]["metadata"]["name"], "tf-ps-worker-1");
    assert_eq!(
        pods[2]["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
        "1"
    );
    assert_eq!(pods[2]["spec"]["subdomain"], "tf-ps");
}

#[test]
fn mutate_reads_standard_input_with_a_dash() {
    let text = std::fs::read_to_string(example("tensorflow-ps/job.yaml")).unwrap();
    let run = dljob(&["mutate", "-f", "-"], Some(&text));
    assert!(run.success(), "{run:?}");
    assert!(run.stdout.contains("- name: TF_CONFIG"), "{run:?}");
    // Same output as from the file.
    let from_file = dljob(&["mutate", "-f", &example("tensorflow-ps/job.yaml")], None);
    assert_eq!(run.stdout, from_file.stdout);
}

#[test]
fn mutate_output_mutates_to_itself() {
    let first = dljob(&["mutate", "-f", &example("chainermn/job.yaml")], None);
    assert!(first.success(), "{first:?}");
    let second = dljob(&["mutate", "-f", "-"], Some(&first.stdout));
    assert!(second.success(), "{second:?}");
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(second.stderr, "");
}

#[test]
fn mutate_namespace_flag_sets_the_hosts_namespace() {
    let run = dljob(
        &[
            "mutate",
            "-n",
            "ml",
            "-f",
            &example("mxnet-linear/job.yaml"),
        ],
        None,
    );
    assert!(run.success(), "{run:?}");
    assert!(
        run.stdout
            .contains("value: mxnet-linear-scheduler-0.mxnet-linear.ml.svc"),
        "{run:?}"
    );
    assert!(!run.stdout.contains(".default.svc"), "{run:?}");
}

#[test]
fn mutate_config_flag_adds_gpu_libraries() {
    let job = example("mxnet-cifar10-gpu/job.yaml");
    let config = example("mxnet-cifar10-gpu/config.yaml");
    // The scheduler is a plain Pod without GPUs; put a GPU pod through it.
    let gpu_pod = "\
apiVersion: v1
kind: Pod
metadata:
  name: cifar10-worker-extra
  labels: {dljob.dev/job: cifar10, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: mxnet, dljob.dev/replicas: \"scheduler=1,server=1,worker=2\", dljob.dev/index: \"1\"}
spec:
  containers:
  - name: mxnet
    image: mxjob/mxnet:gpu
    resources: {limits: {nvidia.com/gpu: 1}}
";
    let with = dljob(&["mutate", "--config", &config, "-f", "-"], Some(gpu_pod));
    assert!(with.success(), "{with:?}");
    // The shipped config mounts the libraries where CUDA images' own ENV
    // LD_LIBRARY_PATH looks, and leaves the image's own LD_LIBRARY_PATH alone.
    assert!(
        with.stdout.contains("mountPath: /usr/local/nvidia/lib64"),
        "{with:?}"
    );
    assert!(!with.stdout.contains("LD_LIBRARY_PATH"), "{with:?}");
    assert!(
        with.stdout
            .contains("path: /home/kubernetes/bin/nvidia/lib64"),
        "{with:?}"
    );
    let without = dljob(&["mutate", "-f", "-"], Some(gpu_pod));
    assert!(without.success(), "{without:?}");
    assert!(!without.stdout.contains("LD_LIBRARY_PATH"), "{without:?}");
    // And the whole example passes with its config.
    let run = dljob(&["validate", "--config", &config, "-f", &job], None);
    assert!(run.success(), "{run:?}");
}

#[test]
fn non_member_documents_pass_through_byte_for_byte() {
    let only = dljob(&["mutate", "-f", "-"], Some(CONFIG_MAP));
    assert!(only.success(), "{only:?}");
    assert_eq!(only.stdout, CONFIG_MAP);

    let mixed = format!("{CONFIG_MAP}---\n{WORKER_POD}");
    let run = dljob(&["mutate", "-f", "-"], Some(&mixed));
    assert!(run.success(), "{run:?}");
    let (first, rest) = run
        .stdout
        .split_once("---\n")
        .expect("two documents in the output");
    assert_eq!(first, CONFIG_MAP);
    assert!(rest.contains("JAX_COORDINATOR_ADDRESS"), "{run:?}");

    let file = scratch("configmap.yaml", CONFIG_MAP);
    let run = dljob(&["mutate", "-f", file.to_str().unwrap()], None);
    assert_eq!(run.stdout, CONFIG_MAP, "{run:?}");
}

#[test]
fn mutate_prints_warnings_on_stderr_only() {
    let pod = WORKER_POD.replace(
        "image: ghcr.io/nvidia/jax:jax}",
        "image: ghcr.io/nvidia/jax:jax, env: [{name: JAX_PROCESS_ID, value: \"7\"}]}",
    );
    let run = dljob(&["mutate", "-f", "-"], Some(&pod));
    assert!(run.success(), "{run:?}");
    assert_eq!(
        run.stderr,
        "Warning: Pod/jax-0: container \"jax\": env JAX_PROCESS_ID is set by the user and kept; dljob would set \"0\"\n"
    );
    assert!(!run.stdout.contains("Warning"), "{run:?}");
    assert!(run.stdout.contains("value: \"7\""), "{run:?}");
}

#[test]
fn validate_unknown_framework_lists_the_frameworks() {
    let file = scratch("bad-framework.yaml", BAD_FRAMEWORK);
    let run = dljob(&["validate", "-f", file.to_str().unwrap()], None);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "Pod/trainer: dljob.dev/framework: unknown framework \"tensorflw\"; frameworks are tensorflow, pytorch, mxnet, mpi, chainer, jax, xgboost, paddle, generic\n"
    );
    assert_eq!(run.stderr, "1 problem found\n");
    // mutate refuses it too.
    let run = dljob(&["mutate", "-f", "-"], Some(BAD_FRAMEWORK));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr
            .contains("unknown framework \"tensorflw\"; frameworks are tensorflow,"),
        "{run:?}"
    );
}

#[test]
fn validate_statefulset_size_mismatch_names_both_numbers() {
    let run = dljob(&["validate", "-f", "-"], Some(SIZE_MISMATCH));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "StatefulSet/workers: StatefulSet replicas is 3 but dljob.dev/replicas \"master=1,worker=4\" declares worker=4; make them equal (change the topology on every member of the job)\n"
    );
}

#[test]
fn validate_reports_every_problem_of_a_file() {
    let both = format!("{BAD_FRAMEWORK}---\n{SIZE_MISMATCH}");
    let run = dljob(&["validate", "-f", "-"], Some(&both));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout.lines().count(), 2, "{run:?}");
    assert!(run.stdout.starts_with("Pod/trainer: "), "{run:?}");
    assert!(
        run.stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("StatefulSet/workers: "),
        "{run:?}"
    );
    assert_eq!(run.stderr, "2 problems found\n");
}

#[test]
fn validate_good_examples_exit_0_silently() {
    for rel in [
        "tensorflow-ps/job.yaml",
        "chainermn/job.yaml",
        "pytorch-elastic/job.yaml",
    ] {
        let run = dljob(&["validate", "-f", &example(rel)], None);
        assert!(run.success(), "{rel}: {run:?}");
        assert_eq!(run.stdout, "", "{rel}");
        assert_eq!(run.stderr, "", "{rel}");
    }
}

#[test]
fn missing_file_is_a_clear_error() {
    for command in ["mutate", "validate"] {
        let run = dljob(&[command, "-f", "no/such/job.yaml"], None);
        assert!(!run.success(), "{command}: {run:?}");
        assert_eq!(run.stdout, "", "{command}");
        assert!(
            run.stderr.contains("reading no/such/job.yaml"),
            "{command}: {run:?}"
        );
        assert!(
            run.stderr.contains("No such file or directory"),
            "{command}: {run:?}"
        );
        assert!(!run.stderr.contains("backtrace"), "{command}: {run:?}");
        assert_eq!(run.code, Some(2), "{command}");
    }
    let run = dljob(
        &[
            "mutate",
            "--config",
            "no/such/config.yaml",
            "-f",
            &example("jax/job.yaml"),
        ],
        None,
    );
    assert!(!run.success(), "{run:?}");
    assert!(
        run.stderr.contains("reading config no/such/config.yaml"),
        "{run:?}"
    );
}

#[test]
fn subcommand_help_mentions_its_flags() {
    for (command, flags) in [
        (
            "mutate",
            &[
                "-f",
                "--filename",
                "FILE|DIR|-",
                "--config",
                "-n",
                "--namespace",
                "--pods",
            ][..],
        ),
        (
            "validate",
            &[
                "-f",
                "--filename",
                "FILE|DIR|-",
                "--config",
                "-n",
                "--namespace",
            ][..],
        ),
        (
            "serve",
            &["--listen", "--tls-cert", "--tls-key", "--config"][..],
        ),
    ] {
        let run = dljob(&[command, "--help"], None);
        assert!(run.success(), "{command}: {run:?}");
        for flag in flags {
            assert!(
                run.stdout.contains(flag),
                "{command} --help does not mention {flag}: {run:?}"
            );
        }
    }
}

#[test]
fn validate_cross_checks_the_members_of_one_file() {
    let text = std::fs::read_to_string(example("tensorflow-ps/job.yaml")).unwrap();
    // The chief alone declares one parameter server.
    let text = text.replacen(
        "dljob.dev/replicas: chief=1,worker=2,ps=2",
        "dljob.dev/replicas: chief=1,worker=2,ps=1",
        1,
    );
    let run = dljob(&["validate", "-f", "-"], Some(&text));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout.lines().next(),
        Some("Pod/tf-ps-chief: dljob.dev/replicas is chief=1,worker=2,ps=1 here but chief=1,worker=2,ps=2 on StatefulSet \"tf-ps-worker\" of job \"tf-ps\"; every member of a job must agree"),
        "{run:?}"
    );
    // Both sides of each disagreement are reported, once per spec: the
    // chief names the first of the two StatefulSets that agree with each
    // other, not both; each of them names the chief.
    assert_eq!(run.stdout.lines().count(), 3, "{run:?}");
    assert_eq!(run.stderr, "3 problems found\n");
}

const LIST: &str = "\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: plain}
- apiVersion: v1
  kind: Pod
  metadata:
    name: jx-0
    labels: {dljob.dev/job: jx, dljob.dev/role: worker}
    annotations: {dljob.dev/framework: jax, dljob.dev/replicas: worker=2, dljob.dev/index: \"1\"}
  spec:
    containers: [{name: jax, image: ghcr.io/nvidia/jax:jax}]
";

#[test]
fn members_inside_a_list_document_are_mutated_and_validated() {
    // `kubectl get -o yaml` prints a List: its members are wired too.
    let run = dljob(&["mutate", "-f", "-"], Some(LIST));
    assert!(run.success(), "{run:?}");
    assert!(run.stdout.contains("hostname: jx-worker-1"), "{run:?}");
    assert!(
        run.stdout
            .contains("value: jx-worker-0.jx.default.svc:6666"),
        "{run:?}"
    );
    assert!(run.stdout.contains("name: plain"), "{run:?}");

    let broken = LIST.replace("dljob.dev/index: \"1\"", "dljob.dev/index: \"2\"");
    let run = dljob(&["validate", "-f", "-"], Some(&broken));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "Pod/jx-0: dljob.dev/index 2 is out of range: role \"worker\" has 2 replicas in dljob.dev/replicas \"worker=2\" (indexes 0 to 1)\n"
    );
}

fn pod_with(labels: &str, annotations: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: mnist-0\n  labels: {{{labels}}}\n  annotations: {{{annotations}}}\nspec: {{containers: [{{name: jax, image: x}}]}}\n"
    )
}

#[test]
fn a_typo_in_the_job_label_is_a_problem_not_silence() {
    let text = pod_with(
        "dljob.dev/jobs: mnist, dljob.dev/role: worker",
        "dljob.dev/framework: jax, dljob.dev/replicas: worker=1",
    );
    let run = dljob(&["validate", "-f", "-"], Some(&text));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "Pod/mnist-0: it has dljob.dev/jobs, dljob.dev/role, dljob.dev/framework, dljob.dev/replicas but no dljob.dev/job label, so the webhooks never see it and dljob wires nothing: add the label (check its spelling)\n"
    );
    // mutate passes it through unchanged and says why on stderr.
    let run = dljob(&["mutate", "-f", "-"], Some(&text));
    assert!(run.success(), "{run:?}");
    assert_eq!(run.stdout, text);
    assert!(
        run.stderr
            .starts_with("Warning: Pod/mnist-0: it has dljob.dev/jobs"),
        "{run:?}"
    );
}

#[test]
fn an_annotation_written_as_a_label_is_named_as_such() {
    let text = pod_with(
        "dljob.dev/job: mnist, dljob.dev/role: worker, dljob.dev/framework: jax",
        "dljob.dev/replicas: worker=1",
    );
    let run = dljob(&["validate", "-f", "-"], Some(&text));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "Pod/mnist-0: dljob.dev/framework is set as a label, but dljob reads it as an annotation: move it under metadata.annotations\n"
    );
    let text = pod_with(
        "dljob.dev/job: mnist",
        "dljob.dev/role: worker, dljob.dev/framework: jax, dljob.dev/replicas: worker=1",
    );
    let run = dljob(&["validate", "-f", "-"], Some(&text));
    assert_eq!(
        run.stdout,
        "Pod/mnist-0: dljob.dev/role is set as an annotation, but dljob reads it as a label: move it under metadata.labels\n"
    );
}

#[test]
fn a_label_value_yaml_reads_as_a_boolean_is_refused() {
    let text = pod_with(
        "dljob.dev/job: y, dljob.dev/role: worker",
        "dljob.dev/framework: jax, dljob.dev/replicas: worker=1",
    );
    let run = dljob(&["validate", "-f", "-"], Some(&text));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        "Pod/mnist-0: label dljob.dev/job is true, not a string (YAML reads unquoted y, yes, true, 1 as booleans or numbers); Kubernetes refuses it: quote the value\n"
    );
}

#[test]
fn an_empty_file_is_an_error() {
    for cmd in ["validate", "mutate"] {
        let run = dljob(&[cmd, "-f", "-"], Some("# nothing here\n"));
        assert_eq!(run.code, Some(2), "{run:?}");
        assert_eq!(run.stderr, "error: no objects in -\n");
    }
}

#[test]
fn a_directory_reads_its_manifest_files_in_name_order() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tests-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example("tensorflow-ps/job.yaml"), dir.join("b.yaml")).unwrap();
    std::fs::copy(example("jax/job.yaml"), dir.join("a.yml")).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a manifest").unwrap();
    let d = dir.display().to_string();
    let run = dljob(&["validate", "-f", &d], None);
    assert!(run.success(), "{run:?}");
    let run = dljob(&["mutate", "-f", &d], None);
    assert!(run.success(), "{run:?}");
    let kinds: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        ["Job", "ConfigMap", "Pod", "StatefulSet", "StatefulSet"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mutate --owned` prints what the reconciler creates for each job: the
/// DLJob from its first member, the headless Service and, for mpi, the SSH
/// Secret (its ssh config naming every host), owner references without a
/// uid; a key made for the run, a different one each time.
#[test]
fn mutate_owned_prints_what_the_reconciler_creates() {
    let horovod = example("horovod/job.yaml");
    let args = ["mutate", "--owned", "-n", "ml", "-f", &horovod];
    let run = dljob(&args, None);
    assert!(run.success(), "{run:?}");
    let docs: Vec<serde_json::Value> = run
        .stdout
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("DLJob", "horovod"),
            ("Service", "horovod"),
            ("Secret", "horovod-ssh")
        ]
    );
    assert_eq!(docs[0]["spec"]["replicas"], "launcher=1,worker=2");
    assert_eq!(docs[1]["spec"]["clusterIP"], "None");
    assert_eq!(docs[1]["metadata"]["ownerReferences"][0]["uid"], "");
    let data = docs[2]["stringData"].as_object().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub"]
    );
    assert!(data["config"].as_str().unwrap().contains(
        "Host horovod-worker-1 horovod-worker-1.horovod horovod-worker-1.horovod.ml.svc\n"
    ));
    let again = dljob(&args, None);
    assert_ne!(run.stdout, again.stdout, "a new key each run");
    // Not with --pods.
    let both = dljob(
        &[
            "mutate",
            "--owned",
            "--pods",
            "-f",
            &example("horovod/job.yaml"),
        ],
        None,
    );
    assert_eq!(both.code, Some(2), "{both:?}");
}

/// A config that sets an env var images set themselves: `validate
/// --config` says so of the config itself, on standard error, and still
/// passes the manifests.
#[test]
fn validate_config_says_an_accelerator_env_replaces_the_images_own() {
    let dir = std::env::temp_dir().join(format!("dljob-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "accelerators:\n  nvidia.com/gpu:\n    env:\n    - {name: LD_LIBRARY_PATH, value: /usr/local/nvidia/lib64}\n    - {name: NCCL_DEBUG, value: INFO}\n",
    )
    .unwrap();
    let run = dljob(
        &[
            "validate",
            "--config",
            config.to_str().unwrap(),
            "-f",
            &example("mxnet-linear/job.yaml"),
        ],
        None,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(run.success(), "{run:?}");
    assert_eq!(
        run.stderr.lines().filter(|l| l.contains("replaces the image's own")).collect::<Vec<_>>(),
        [format!(
            "Warning: config {}: accelerators.nvidia.com/gpu.env sets LD_LIBRARY_PATH: in every container it is injected into, that value replaces the image's own LD_LIBRARY_PATH (its ENV) whole, and dljob cannot see what the image had (Kubernetes expands $(LD_LIBRARY_PATH) only from the container's earlier env entries, not the image's). CUDA images' own ENV LD_LIBRARY_PATH already lists /usr/local/nvidia/lib64: mount the driver libraries there and leave the env out.",
            config.display()
        )]
    );
}

#[test]
fn a_pod_with_only_a_generate_name_is_not_its_own_peer() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: train-worker-\n  labels: {dljob.dev/job: train, dljob.dev/role: worker}\n  annotations: {dljob.dev/framework: pytorch, dljob.dev/replicas: \"master=1,worker=1\"}\nspec:\n  containers: [{name: pytorch, image: torch}]\n";
    let one = dljob(&["validate", "-f", "-"], Some(pod));
    assert!(one.success(), "{one:?}");
    // Two of them still claim the same replica.
    let two = dljob(&["validate", "-f", "-"], Some(&format!("{pod}---\n{pod}")));
    assert_eq!(two.code, Some(1), "{two:?}");
    assert!(two.stdout.contains("already is worker 0"), "{two:?}");
}

/// Every flag of `dljob serve` can be given by an environment variable,
/// as docs/operations.md says, and `--help` names it.
#[test]
fn every_serve_flag_has_an_environment_variable() {
    let run = dljob(&["serve", "--help"], None);
    assert!(run.success(), "{run:?}");
    // Each option's help runs from its `--flag` line to the next one.
    let mut options: Vec<(String, String)> = Vec::new();
    for line in run.stdout.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("--") || (trimmed.starts_with('-') && trimmed.contains(", --")) {
            let flag = trimmed
                .split_whitespace()
                .find(|w| w.starts_with("--"))
                .unwrap()
                .trim_end_matches(',')
                .to_owned();
            options.push((flag, String::new()));
        } else if let Some((_, help)) = options.last_mut() {
            help.push_str(line);
            help.push('\n');
        }
    }
    let flags: Vec<&str> = options.iter().map(|(f, _)| f.as_str()).collect();
    assert!(flags.len() >= 19, "{flags:?}");
    for (flag, help) in &options {
        if flag == "--help" {
            continue;
        }
        let want = format!(
            "[env: DLJOB_{}",
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        // --self-signed-san takes a comma-separated list: DLJOB_SELF_SIGNED_SANS.
        assert!(
            help.contains(&want)
                || (flag == "--self-signed-san" && help.contains("[env: DLJOB_SELF_SIGNED_SANS")),
            "{flag} names no environment variable ({want}]):\n{help}"
        );
    }
}
