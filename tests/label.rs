//! `dljob label` as a user runs it: every example stripped of its dljob
//! keys and labelled again gets exactly the example's keys back; roles it
//! cannot tell are asked for; its output is a fixed point and validates;
//! what it does not change survives byte for byte. Every subprocess is
//! bounded by a deadline.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dljob::manifest;
use dljob::object::Kind;
use serde_json::{Map, Value};

mod common;
use common::{dljob, repo, scratch_dir, values, CONFIG_MAP};

/// `dljob label -f FILE --job tf --framework tensorflow EXTRA…`.
fn label_tf(file: &str, extra: &[&str], stdin: Option<&str>) -> common::Run {
    let mut args = vec![
        "label",
        "-f",
        file,
        "--job",
        "tf",
        "--framework",
        "tensorflow",
    ];
    args.extend_from_slice(extra);
    dljob(&args, stdin)
}

/// The metadata maps dljob keys live in.
const PLACES: [(&str, &[&str]); 4] = [
    ("labels", &["metadata", "labels"]),
    ("annotations", &["metadata", "annotations"]),
    (
        "template labels",
        &["spec", "template", "metadata", "labels"],
    ),
    (
        "template annotations",
        &["spec", "template", "metadata", "annotations"],
    ),
];

/// Every `dljob.dev/*` key of a member, by place.
fn dljob_keys(v: &Value) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for (place, path) in PLACES {
        let Some(map) = dljob::object::at(v, path).and_then(Value::as_object) else {
            continue;
        };
        let keys: BTreeMap<String, Value> = map
            .iter()
            .filter(|(k, _)| k.starts_with("dljob.dev/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !keys.is_empty() {
            out.insert(place.to_owned(), keys);
        }
    }
    out
}

/// The member with its dljob labels and annotations removed (maps left
/// empty are removed too).
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if Kind::of(&v).is_none() {
        return v;
    }
    for (_, path) in PLACES {
        let (parent, last) = path.split_at(path.len() - 1);
        if dljob::object::at(&v, parent).is_none() {
            continue;
        }
        let Some(meta) = dljob::object::object_at_mut(&mut v, parent) else {
            continue;
        };
        let Some(map) = meta.get_mut(last[0]).and_then(Value::as_object_mut) else {
            continue;
        };
        map.retain(|k, _| !k.starts_with("dljob.dev/"));
        if map.is_empty() {
            meta.remove(last[0]);
        }
    }
    // A template left with no metadata at all.
    if let Some(t) = dljob::object::at(&v, &["spec", "template", "metadata"]) {
        if t.as_object().is_some_and(Map::is_empty) {
            v["spec"]["template"]
                .as_object_mut()
                .unwrap()
                .remove("metadata");
        }
    }
    v
}

/// The options each example needs beyond its job and framework: roles only
/// where the names do not tell.
fn extra_roles(example: &str) -> &'static [&'static str] {
    match example {
        // paddle-check-0 and -1: a paddle job may have a master too.
        "paddle" => &[
            "--role",
            "Pod/paddle-check-0=worker",
            "--role",
            "Pod/paddle-check-1=worker",
        ],
        // The sets are named for their GPUs, not their role.
        "chainermn-heterogeneous" => &[
            "--role",
            "StatefulSet/cmn-het-gpu4=worker",
            "--role",
            "StatefulSet/cmn-het-gpu2=worker",
        ],
        _ => &[],
    }
}

#[test]
fn every_example_stripped_and_relabelled_gets_its_keys_back() {
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("job.yaml").is_file())
        .collect();
    examples.sort();
    assert_eq!(examples.len(), 17, "{examples:?}");
    let policies = [
        "dljob.dev/port",
        "dljob.dev/slots",
        "dljob.dev/elastic",
        "dljob.dev/restart-policy",
        "dljob.dev/backoff-limit",
        "dljob.dev/clean-pod-policy",
        "dljob.dev/ttl-seconds-after-finished",
        "dljob.dev/active-deadline-seconds",
        "dljob.dev/ssh-path",
        "dljob.dev/gang",
        "dljob.dev/queue",
        "dljob.dev/topology",
        "dljob.dev/restart-scope",
        "dljob.dev/tensorboard",
    ];
    for dir in examples {
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let original = values(&std::fs::read_to_string(dir.join("job.yaml")).unwrap());
        let first = original
            .iter()
            .find(|v| Kind::of(v).is_some())
            .expect("a member");
        let job = first["metadata"]["labels"]["dljob.dev/job"]
            .as_str()
            .unwrap()
            .to_owned();
        let framework = first["metadata"]["annotations"]["dljob.dev/framework"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut args: Vec<String> = vec![
            "label".into(),
            "-f".into(),
            "-".into(),
            "--job".into(),
            job,
            "--framework".into(),
            framework,
        ];
        args.extend(extra_roles(&name).iter().map(|s| s.to_string()));
        for key in policies {
            if let Some(v) = first["metadata"]["annotations"].get(key) {
                args.push("--set".into());
                args.push(format!("{}={}", key, v.as_str().unwrap()));
            }
        }
        if dir.join("config.yaml").is_file() {
            args.push("--config".into());
            args.push(dir.join("config.yaml").display().to_string());
        }
        let stripped: String = original
            .iter()
            .map(|v| serde_saphyr::to_string(&strip(v)).unwrap())
            .collect::<Vec<_>>()
            .join("---\n");
        assert!(
            !stripped.contains("dljob.dev/framework"),
            "{name}: {stripped}"
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = dljob(&args, Some(&stripped));
        assert!(run.success(), "{name}: {args:?}\n{run:?}");
        // yaml-edit edited every member in place: no fallback.
        assert!(!run.stderr.contains("re-serialised"), "{name}: {run:?}");
        let labelled = values(&run.stdout);
        assert_eq!(labelled.len(), original.len(), "{name}: {run:?}");
        for (got, want) in labelled.iter().zip(&original) {
            assert_eq!(
                dljob_keys(got),
                dljob_keys(want),
                "{name}: {}",
                manifest::describe(want)
            );
            // Nothing but the dljob keys differs.
            assert_eq!(strip(got), strip(want), "{name}");
        }
    }
}

const TF_STRIPPED: &str = "\
# The training workloads, as a user has them before dljob.
apiVersion: v1
kind: Pod
metadata:
  name: tf-chief
spec:
  containers:
  - name: tensorflow   # the framework container
    image: tensorflow/tensorflow:2.15.0
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: tf-workers
  labels:
    app: tf   # kept
spec:
  replicas: 3   # three workers
  selector:
    matchLabels:
      app: tf
  template:
    metadata:
      labels:
        app: tf
    spec:
      containers:
      - name: tensorflow
        image: tensorflow/tensorflow:2.15.0
";

#[test]
fn ambiguous_roles_are_asked_for_naming_each_workload_and_the_roles() {
    let text = TF_STRIPPED
        .replace("tf-chief", "trainer")
        .replace("tf-workers", "tf-pool");
    let run = label_tf("-", &[], Some(&text));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert_eq!(
        run.stderr,
        "Pod/trainer: cannot tell its role; pass --role Pod/trainer=ROLE (tensorflow roles: chief, master, worker, ps, evaluator)\n\
         StatefulSet/tf-pool: cannot tell its role; pass --role StatefulSet/tf-pool=ROLE (tensorflow roles: chief, master, worker, ps, evaluator)\n\
         error: 2 problems; nothing was printed\n"
    );
    // Told, it labels; the topology is in tensorflow's role order.
    let run = label_tf(
        "-",
        &[
            "--role",
            "Pod/trainer=chief",
            "--role",
            "StatefulSet/tf-pool=worker",
        ],
        Some(&text),
    );
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    assert_eq!(out[0]["metadata"]["labels"]["dljob.dev/role"], "chief");
    assert_eq!(out[1]["metadata"]["labels"]["dljob.dev/role"], "worker");
    assert_eq!(
        out[1]["metadata"]["annotations"]["dljob.dev/replicas"],
        "chief=1,worker=3"
    );
    // generic takes any name suffix, but not the job's own name.
    let run = dljob(
        &[
            "label",
            "-f",
            "-",
            "--job",
            "tf-pool",
            "--framework",
            "generic",
        ],
        Some(&text),
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains(
            "StatefulSet/tf-pool: cannot tell its role; pass --role StatefulSet/tf-pool=ROLE (generic roles: any DNS label, e.g. worker)\n"
        ),
        "{run:?}"
    );
    assert!(!run.stderr.contains("Pod/trainer"), "{run:?}");
}

#[test]
fn output_is_labelled_in_place_keeping_comments_and_validates() {
    let run = label_tf("-", &[], Some(TF_STRIPPED));
    assert!(run.success(), "{run:?}");
    let want = "\
# The training workloads, as a user has them before dljob.
apiVersion: v1
kind: Pod
metadata:
  name: tf-chief
  labels:
    dljob.dev/job: tf
    dljob.dev/role: chief
  annotations:
    dljob.dev/framework: tensorflow
    dljob.dev/replicas: chief=1,worker=3
spec:
  containers:
  - name: tensorflow   # the framework container
    image: tensorflow/tensorflow:2.15.0
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: tf-workers
  labels:
    app: tf   # kept
    dljob.dev/job: tf
    dljob.dev/role: worker
  annotations:
    dljob.dev/framework: tensorflow
    dljob.dev/replicas: chief=1,worker=3
spec:
  replicas: 3   # three workers
  selector:
    matchLabels:
      app: tf
  template:
    metadata:
      labels:
        app: tf
        dljob.dev/job: tf
        dljob.dev/role: worker
    spec:
      containers:
      - name: tensorflow
        image: tensorflow/tensorflow:2.15.0
";
    assert_eq!(run.stdout, want);
    assert!(run.stderr.is_empty(), "{run:?}");
    let check = dljob(&["validate", "-f", "-"], Some(&run.stdout));
    assert!(check.success(), "{check:?}");
}

#[test]
fn label_on_its_own_output_prints_the_same_bytes() {
    let first = label_tf(
        "-",
        &[
            "--set",
            "backoff-limit=5",
            "--set",
            "dljob.dev/clean-pod-policy=All",
        ],
        Some(TF_STRIPPED),
    );
    assert!(first.success(), "{first:?}");
    let out = values(&first.stdout);
    for member in &out {
        assert_eq!(
            member["metadata"]["annotations"]["dljob.dev/backoff-limit"],
            "5"
        );
        assert_eq!(
            member["metadata"]["annotations"]["dljob.dev/clean-pod-policy"],
            "All"
        );
    }
    // Again, with or without the flags: nothing changes.
    for args in [
        &[
            "label",
            "-f",
            "-",
            "--job",
            "tf",
            "--framework",
            "tensorflow",
        ][..],
        &[
            "label",
            "-f",
            "-",
            "--job",
            "tf",
            "--framework",
            "tensorflow",
            "--set",
            "backoff-limit=5",
        ][..],
    ] {
        let again = dljob(args, Some(&first.stdout));
        assert!(again.success(), "{again:?}");
        assert_eq!(again.stdout, first.stdout);
    }
    // A disagreeing key is named, not overwritten.
    let other = label_tf("-", &["--set", "backoff-limit=7"], Some(&first.stdout));
    assert_eq!(other.code, Some(1), "{other:?}");
    assert!(
        other.stderr.starts_with(
            "Pod/tf-chief: annotation dljob.dev/backoff-limit is \"5\", but --set backoff-limit=7; dljob label does not overwrite it: remove it, or leave out --set\n"
        ),
        "{other:?}"
    );
    let other = dljob(
        &[
            "label",
            "-f",
            "-",
            "--job",
            "other",
            "--framework",
            "tensorflow",
        ],
        Some(&first.stdout),
    );
    assert_eq!(other.code, Some(1), "{other:?}");
    assert!(
        other.stderr.contains(
            "Pod/tf-chief: label dljob.dev/job is \"tf\", not \"other\"; dljob label does not overwrite it: remove it, or pass --job tf\n"
        ),
        "{other:?}"
    );
}

#[test]
fn set_refuses_unknown_keys_listing_the_known_ones_and_bad_values_as_validate_does() {
    let run = label_tf("-", &["--set", "dljob.dev/retries=3"], Some(TF_STRIPPED));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stderr,
        "--set dljob.dev/retries: not a key dljob label sets; known keys are port, slots, mpi-implementation, elastic, restart-policy, backoff-limit, clean-pod-policy, ttl-seconds-after-finished, active-deadline-seconds, ssh-path, gang, queue, topology, restart-scope, tensorboard, compat (with or without the dljob.dev/ prefix)\n\
         error: 1 problem; nothing was printed\n"
    );
    let run = label_tf("-", &["--set", "restart-policy=Always"], Some(TF_STRIPPED));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(
        run.stderr.starts_with(
            "Pod/tf-chief: dljob.dev/restart-policy \"Always\" is not a restart policy; use one of ExitCode, Never\n"
        ),
        "{run:?}"
    );
}

#[test]
fn non_members_pass_through_byte_for_byte_and_in_place_rewrites_only_changed_files() {
    let input = format!("---\n{CONFIG_MAP}---\n{TF_STRIPPED}");
    let run = label_tf("-", &[], Some(&input));
    assert!(run.success(), "{run:?}");
    let (first, _) = run.stdout["---\n".len()..]
        .split_once("---\n")
        .expect("documents");
    assert!(run.stdout.starts_with("---\n"), "{run:?}");
    assert_eq!(first, CONFIG_MAP);

    let dir = scratch_dir("label-tests", "in-place");
    std::fs::write(dir.join("a-config.yaml"), CONFIG_MAP).unwrap();
    std::fs::write(dir.join("b-job.yaml"), TF_STRIPPED).unwrap();
    let d = dir.to_str().unwrap();
    let refused = label_tf("-", &["--in-place"], Some(TF_STRIPPED));
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert_eq!(
        refused.stderr,
        "error: --in-place rewrites files: it cannot be used with -f -\n"
    );
    let run = label_tf(d, &["--in-place"], None);
    assert!(run.success(), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert_eq!(
        run.stderr,
        format!("labelled {}\n", dir.join("b-job.yaml").display())
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a-config.yaml")).unwrap(),
        CONFIG_MAP
    );
    let job = std::fs::read_to_string(dir.join("b-job.yaml")).unwrap();
    assert!(job.contains("  replicas: 3   # three workers\n"), "{job}");
    assert!(
        job.contains("    dljob.dev/replicas: chief=1,worker=3\n"),
        "{job}"
    );
    // Labelled already: a second run writes nothing.
    let again = label_tf(d, &["--in-place"], None);
    assert!(again.success(), "{again:?}");
    assert!(again.stderr.is_empty(), "{again:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("b-job.yaml")).unwrap(),
        job
    );
}

#[test]
fn plain_pods_of_a_role_get_indexes_in_document_order() {
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers: [{{name: pytorch, image: pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime}}]\n"
        )
    };
    let text = [pod("ddp-master"), pod("ddp-worker-b"), pod("ddp-worker-a")].join("---\n");
    let text = text
        .replace("ddp-worker-b", "ddp-worker-1")
        .replace("ddp-worker-a", "ddp-worker-0");
    let run = dljob(
        &["label", "-f", "-", "--job", "ddp", "--framework", "pytorch"],
        Some(&text),
    );
    assert!(run.success(), "{run:?}");
    let out = values(&run.stdout);
    let ann = |i: usize| out[i]["metadata"]["annotations"].clone();
    assert_eq!(ann(0)["dljob.dev/replicas"], "master=1,worker=2");
    assert_eq!(ann(0).get("dljob.dev/index"), None);
    // Document order, whatever the names say.
    assert_eq!(ann(1)["dljob.dev/index"], "0");
    assert_eq!(ann(2)["dljob.dev/index"], "1");
    assert!(
        run.stdout.contains("    dljob.dev/index: \"0\"\n")
            || run.stdout.contains("    dljob.dev/index: '0'\n"),
        "{}",
        run.stdout
    );
}

/// Worker sets of a chainer job, stripped of every dljob key: label gives
/// each set the next range of worker indexes (document order) and, with no
/// slots given, the hostfile slots of its GPUs — the master's GPUs for
/// every other host — exactly as the example has them.
#[test]
fn worker_sets_get_their_offsets_and_slots_from_their_gpus() {
    let path = repo().join("examples/chainermn-heterogeneous/job.yaml");
    let original = values(&std::fs::read_to_string(&path).unwrap());
    let stripped: String = original
        .iter()
        .map(|v| serde_saphyr::to_string(&strip(v)).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    let run = dljob(
        &[
            "label",
            "-f",
            "-",
            "--job",
            "cmn-het",
            "--framework",
            "chainer",
            "--role",
            "StatefulSet/cmn-het-gpu4=worker",
            "--role",
            "StatefulSet/cmn-het-gpu2=worker",
        ],
        Some(&stripped),
    );
    assert!(run.success(), "{run:?}");
    let labelled = values(&run.stdout);
    for (got, want) in labelled.iter().zip(&original) {
        assert_eq!(
            dljob_keys(got),
            dljob_keys(want),
            "{}",
            manifest::describe(want)
        );
    }
    assert_eq!(
        labelled[2]["metadata"]["annotations"]["dljob.dev/index-offset"],
        "1"
    );
    assert_eq!(
        labelled[0]["metadata"]["annotations"]["dljob.dev/slots"],
        "2,0=4,1-2=2"
    );
}

/// Slots from DRA claims: `examples/chainermn-dra` stripped of its keys
/// and labelled without `--set slots` gets the example's `0-1=4` — the
/// worker set's 4 from its ResourceClaimTemplate's device count. A claim
/// whose devices the manifests cannot tell (template absent, or
/// `allocationMode: All`) is a problem naming the fix, and nothing is
/// printed.
#[test]
fn worker_slots_come_from_the_dra_claim_templates_among_the_manifests() {
    let path = repo().join("examples/chainermn-dra/job.yaml");
    let original = values(&std::fs::read_to_string(&path).unwrap());
    let stripped: Vec<String> = original
        .iter()
        .map(|v| serde_saphyr::to_string(&strip(v)).unwrap())
        .collect();
    let label = |docs: &[String]| {
        dljob(
            &[
                "label",
                "-f",
                "-",
                "--job",
                "cmn-dra",
                "--framework",
                "chainer",
            ],
            Some(&docs.join("---\n")),
        )
    };
    let run = label(&stripped);
    assert!(run.success(), "{run:?}");
    let labelled = values(&run.stdout);
    for (got, want) in labelled.iter().zip(&original) {
        assert_eq!(
            dljob_keys(got),
            dljob_keys(want),
            "{}",
            manifest::describe(want)
        );
    }
    assert_eq!(
        labelled[1]["metadata"]["annotations"]["dljob.dev/slots"],
        "0-1=4"
    );

    // Without the template: it cannot count, and says how to go on.
    let run = label(&stripped[1..]);
    assert!(!run.success(), "{run:?}");
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("StatefulSet/cmn-dra-worker: ResourceClaimTemplate \"cmn-dra-four-gpus\" is not among the manifests, so its devices cannot be counted; give every host's slots with --set slots=N (or per worker range, e.g. \"0-3=4\")"),
        "{run:?}"
    );
    // allocationMode: All is the node's to count.
    let all = stripped[0].replace("count: 4", "allocationMode: All");
    assert_ne!(all, stripped[0]);
    let mut docs = stripped.clone();
    docs[0] = all;
    let run = label(&docs);
    assert!(!run.success(), "{run:?}");
    assert!(
        run.stderr.contains("request \"gpus\" of ResourceClaimTemplate \"cmn-dra-four-gpus\" has allocationMode: All (every matching device of the node), a count only the node knows; give every host's slots with --set slots=N"),
        "{run:?}"
    );
    // GPUs and a NIC in one template: which are slots is not said.
    let mut two = original[0].clone();
    two["spec"]["spec"]["devices"]["requests"] = serde_json::json!([
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}},
        {"name": "nic", "exactly": {"deviceClassName": "rdma.example.com"}}
    ]);
    let mut docs = stripped.clone();
    docs[0] = serde_saphyr::to_string(&two).unwrap();
    let run = label(&docs);
    assert!(!run.success(), "{run:?}");
    assert!(
        run.stderr.contains("ResourceClaimTemplate \"cmn-dra-four-gpus\" makes 2 device requests (gpus, nic), and which of them are a host's slots is not said; give every host's slots with --set slots=N"),
        "{run:?}"
    );
    // --set slots decides, and nothing needs counting.
    let run = dljob(
        &[
            "label",
            "-f",
            "-",
            "--job",
            "cmn-dra",
            "--framework",
            "chainer",
            "--set",
            "slots=4",
        ],
        Some(&stripped[1..].join("---\n")),
    );
    assert!(run.success(), "{run:?}");
}
