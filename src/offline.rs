//! The offline commands — `dljob mutate`, `validate` and `label` — over
//! manifest files: the same core the webhook runs, with files and standard
//! streams for the wire.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::args::{ConvertArgs, LabelArgs, ManifestArgs, MutateArgs};
use crate::config::Config;
use crate::manifest;

/// Reads a file, every `.yaml`, `.yml` and `.json` file of a directory (in
/// name order, not recursing, as `kubectl apply -f DIR` does), or standard
/// input for `-`.
pub(crate) fn read_input(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        return Ok(s);
    }
    let path = Path::new(file);
    if !path.is_dir() {
        return std::fs::read_to_string(path).with_context(|| format!("reading {file}"));
    }
    let mut all = String::new();
    for f in input_files(file)? {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        if !all.is_empty() {
            all.push_str("---\n");
        }
        all.push_str(&text);
        if !all.ends_with('\n') {
            all.push('\n');
        }
    }
    Ok(all)
}

/// The files `-f FILE|DIR` names: the file, or a directory's `.yaml`,
/// `.yml` and `.json` files in name order.
fn input_files(file: &str) -> anyhow::Result<Vec<PathBuf>> {
    let path = Path::new(file);
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading directory {file}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let mut files: Vec<PathBuf> = entries
        .iter()
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .cloned()
        .collect();
    files.sort();
    let mut subdirectories: Vec<String> = entries
        .iter()
        .filter(|p| p.is_dir())
        .map(|p| terminal(&p.display().to_string()).into_owned())
        .collect();
    subdirectories.sort();
    if !subdirectories.is_empty() {
        // As `kubectl apply -f DIR` without -R: said, so that a job kept
        // one level down is not missed without a word.
        eprintln!(
            "skipped {}: -f DIR reads the files directly in DIR, not its subdirectories; name each with -f",
            subdirectories.join(", ")
        );
    }
    if files.is_empty() {
        anyhow::bail!("{file} has no .yaml, .yml or .json files");
    }
    Ok(files)
}

/// `text` as a terminal line: control characters (a newline among them)
/// and the Unicode marks that reorder text (bidi embeddings, overrides,
/// isolates and marks) written as `\u{…}` escapes, so that a name or value
/// a manifest carries cannot forge lines or hide what a message says.
fn terminal(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                format!("\\u{{{:04x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// Parses the input's documents; no object at all is an error, as it is
/// for `kubectl apply`.
fn read_documents(file: &str) -> anyhow::Result<Vec<manifest::Document>> {
    let docs = manifest::parse(&read_input(file)?).with_context(|| format!("parsing {file}"))?;
    if docs.iter().all(|d| d.value.is_none()) {
        anyhow::bail!("no objects in {file}");
    }
    Ok(docs)
}

/// Loads the config file, or the default config when none is given.
pub(crate) fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        None => Ok(Config::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config {}", p.display()))?;
            Config::from_yaml(&text).with_context(|| format!("config {}", p.display()))
        }
    }
}

/// [`load_config`], saying on standard error what the config itself does
/// that may not be meant ([`Config::warnings`]).
fn load_config_warning(path: Option<&Path>) -> anyhow::Result<Config> {
    let config = load_config(path)?;
    if let Some(p) = path {
        let mut stderr = std::io::stderr().lock();
        for w in config.warnings() {
            writeln!(stderr, "Warning: config {}: {}", p.display(), terminal(&w))?;
        }
    }
    Ok(config)
}

/// `dljob mutate`.
pub fn mutate(mutate_args: &MutateArgs) -> anyhow::Result<ExitCode> {
    let args = &mutate_args.manifest;
    let config = load_config_warning(args.config.as_deref())?;
    let docs = read_documents(&args.file)?;
    let result = if mutate_args.pods {
        manifest::pods(&docs, Some(&args.namespace), &config)
    } else if mutate_args.owned {
        owned(&docs, Some(&args.namespace), &config)
    } else {
        manifest::mutate(&docs, Some(&args.namespace), &config)
    };
    let operator_jobs = manifest::operator_jobs(&docs);
    match result {
        Ok(out) => {
            let mut stderr = std::io::stderr().lock();
            for (name, advice) in &operator_jobs {
                writeln!(stderr, "Warning: {}: {}", terminal(name), terminal(advice))?;
            }
            for w in &out.warnings {
                writeln!(stderr, "Warning: {}", terminal(w))?;
            }
            std::io::stdout().lock().write_all(out.yaml.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Err((name, violations)) => {
            let mut stderr = std::io::stderr().lock();
            writeln!(stderr, "error: {} is refused by dljob:", terminal(&name))?;
            for v in violations.0 {
                writeln!(stderr, "  - {}", terminal(&v.to_string()))?;
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `dljob mutate --owned`: per job (in the order its first member comes),
/// the DLJob the reconciler creates from that member, then what
/// [`crate::reconciler::resources::owned`] declares for it (a PodGroup's
/// `minResources` from the job's members in the manifests).
fn owned(
    docs: &[manifest::Document],
    namespace: Option<&str>,
    config: &Config,
) -> Result<manifest::MutatedManifest, (String, crate::violation::Violations)> {
    use crate::reconciler::resources;
    let mut jobs: Vec<(crate::member::MemberSpec, Option<serde_json::Value>)> = Vec::new();
    let mut members: Vec<crate::member::MemberSpec> = Vec::new();
    let values = docs
        .iter()
        .filter_map(|d| d.value.as_ref())
        .flat_map(manifest::objects);
    for value in values {
        let Some(kind) = crate::object::Kind::of(value) else {
            continue;
        };
        let parsed = crate::member::parse(kind, value, namespace, config)
            .map_err(|v| (manifest::describe(value), v))?;
        let Some(m) = parsed.map(|p| p.member) else {
            continue;
        };
        let first = !jobs
            .iter()
            .any(|(j, _)| (&j.namespace, &j.job) == (&m.namespace, &m.job));
        if first {
            let volume = m
                .spec
                .tensorboard
                .as_ref()
                .and_then(|tb| crate::tensorboard::volume(kind, value, &tb.volume))
                .cloned();
            jobs.push((m.clone(), volume));
        }
        members.push(m);
    }
    let mut out = manifest::MutatedManifest::default();
    let now = k8s_openapi::jiff::Timestamp::now();
    for (m, volume) in jobs {
        let mut job = resources::dljob_for(&m, volume.as_ref());
        let min_resources = job
            .spec
            .scheduler()
            .filter(|s| s.wants_min_resources())
            .and_then(|_| {
                let of_job = members
                    .iter()
                    .filter(|o| (&o.namespace, &o.job) == (&m.namespace, &m.job));
                resources::min_resources(&job.spec, of_job)
            });
        // Owner references need a uid, which only the API server gives.
        job.metadata.uid = Some(String::new());
        // A key the system's random source cannot make is not the
        // manifests' fault: the rest is shown, with a word on stderr (as
        // if the Secret were recorded already, so no key is drawn).
        let objects = match resources::owned(
            &job,
            config,
            now,
            min_resources.clone(),
            resources::generate_key,
        ) {
            Ok(objects) => objects,
            Err(e) => {
                out.warnings.push(format!(
                    "no SSH Secret shown: generating its key failed: {e}"
                ));
                let mut recorded = job.clone();
                recorded.status = Some(crate::crd::DLJobStatus {
                    ssh_secret: Some(crate::mutate::ssh_secret_name(&m.job)),
                    ..Default::default()
                });
                resources::owned(
                    &recorded,
                    config,
                    now,
                    min_resources,
                    resources::generate_key,
                )
                .unwrap_or_default()
            }
        };
        job.metadata.uid = None;
        let mut all = vec![serde_json::to_value(&job).expect("a DLJob serialises")];
        all.extend(
            objects
                .iter()
                .map(|o| serde_json::to_value(&o.object).expect("an object serialises")),
        );
        for object in all {
            if !out.yaml.is_empty() {
                out.yaml.push_str("---\n");
            }
            out.yaml.push_str(
                &serde_saphyr::to_string(&object).expect("a JSON value serialises to YAML"),
            );
        }
    }
    Ok(out)
}

/// `dljob validate`.
pub fn validate(args: &ManifestArgs) -> anyhow::Result<ExitCode> {
    let config = load_config_warning(args.config.as_deref())?;
    let docs = read_documents(&args.file)?;
    let (problems, warnings) = manifest::validate(&docs, Some(&args.namespace), &config);
    let mut stderr = std::io::stderr().lock();
    for w in &warnings {
        writeln!(stderr, "Warning: {}", terminal(w))?;
    }
    let mut stdout = std::io::stdout().lock();
    for (name, p) in &problems {
        writeln!(stdout, "{}: {}", terminal(name), terminal(p))?;
    }
    if problems.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(
            stderr,
            "{} problem{} found",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        )?;
        Ok(ExitCode::FAILURE)
    }
}

/// Joins documents as one multi-document YAML text, starting with `---`
/// when the original text did.
fn join_documents(docs: &[manifest::Document], leading_marker: bool) -> String {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 || leading_marker {
            out.push_str("---\n");
        }
        out.push_str(&doc.text);
        if !doc.text.ends_with('\n') && !doc.text.is_empty() {
            out.push('\n');
        }
    }
    out
}

fn starts_with_marker(text: &str) -> bool {
    let first = text.split_inclusive('\n').next().unwrap_or("");
    first.trim_end() == "---" || first.starts_with("--- ")
}

/// One input file of a command that can rewrite it: its path (`None` for
/// standard input), whether its text starts with `---`, and how many of
/// the documents read are its.
struct Input {
    path: Option<PathBuf>,
    leading_marker: bool,
    count: usize,
}

/// Reads `-f FILE|DIR|-` file by file, so that --in-place can write each
/// back; `in_place` with `-` is refused, and so is a symbolic link named
/// as the file, while one in the directory is skipped (its target may be
/// anywhere, and is left alone).
fn read_files(file: &str, in_place: bool) -> anyhow::Result<(Vec<Input>, Vec<manifest::Document>)> {
    if in_place && file == "-" {
        anyhow::bail!("--in-place rewrites files: it cannot be used with -f -");
    }
    let mut inputs = Vec::new();
    let mut docs = Vec::new();
    let files: Vec<Option<PathBuf>> = if file == "-" {
        vec![None]
    } else {
        input_files(file)?.into_iter().map(Some).collect()
    };
    let is_link = |p: &Path| {
        p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    };
    let files = if in_place {
        // A link's target may be anywhere: it is left alone.
        if is_link(Path::new(file)) {
            anyhow::bail!(
                "--in-place rewrites regular files only, and {file} is a symbolic link: nothing was written; name its target, or run without --in-place"
            );
        }
        let mut stderr = std::io::stderr().lock();
        let mut kept = Vec::new();
        for path in files {
            match path {
                Some(p) if is_link(&p) => {
                    writeln!(
                        stderr,
                        "skipped {}: a symbolic link (--in-place rewrites regular files only)",
                        p.display()
                    )?;
                }
                other => kept.push(other),
            }
        }
        kept
    } else {
        files
    };
    for path in files {
        let (text, name) = match &path {
            None => (read_input("-")?, "standard input".to_owned()),
            Some(p) => (
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
                p.display().to_string(),
            ),
        };
        let parsed = manifest::parse(&text).with_context(|| format!("parsing {name}"))?;
        inputs.push(Input {
            path,
            leading_marker: starts_with_marker(&text),
            count: parsed.len(),
        });
        docs.extend(parsed);
    }
    if docs.iter().all(|d| d.value.is_none()) {
        anyhow::bail!("no objects in {file}");
    }
    Ok((inputs, docs))
}

/// Prints `documents` (per input document, what replaces it), or with
/// `in_place` writes each file whose documents changed, saying so as
/// `{verb} FILE`.
fn write_out(
    inputs: Vec<Input>,
    mut documents: Vec<Vec<manifest::Document>>,
    changed: &[bool],
    in_place: bool,
    verb: &str,
) -> anyhow::Result<()> {
    if !in_place {
        let leading = inputs.len() == 1 && inputs[0].leading_marker;
        let all: Vec<manifest::Document> = documents.into_iter().flatten().collect();
        let text = join_documents(&all, leading);
        std::io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(());
    }
    // What each changed file becomes, every one checked before any is
    // written: a file that cannot be replaced leaves them all as they were.
    let mut writes = Vec::new();
    let mut start = 0;
    for input in inputs {
        let these: Vec<manifest::Document> = documents.drain(..input.count).flatten().collect();
        let any_changed = changed[start..start + input.count].iter().any(|c| *c);
        start += input.count;
        let Some(path) = input.path else { continue };
        if any_changed {
            writes.push((path, join_documents(&these, input.leading_marker)));
        }
    }
    // A JSON file would get YAML: refused, before anything is written.
    let json: Vec<String> = writes
        .iter()
        .filter(|(p, _)| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        })
        .map(|(p, _)| terminal(&p.display().to_string()).into_owned())
        .collect();
    if !json.is_empty() {
        anyhow::bail!(
            "{} {} JSON, and dljob writes YAML: nothing was written; run without --in-place and save the output as a .yaml file",
            json.join(", "),
            if json.len() == 1 { "is" } else { "are" },
        );
    }
    let read_only: Vec<String> = writes
        .iter()
        .filter(|(p, _)| std::fs::metadata(p).is_ok_and(|m| m.permissions().readonly()))
        .map(|(p, _)| p.display().to_string())
        .collect();
    if !read_only.is_empty() {
        anyhow::bail!(
            "{} {} read-only: nothing was written; make {} writable, or run without --in-place",
            read_only.join(", "),
            if read_only.len() == 1 { "is" } else { "are" },
            if read_only.len() == 1 { "it" } else { "them" }
        );
    }
    let mut stderr = std::io::stderr().lock();
    for (path, text) in writes {
        replace_file(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        writeln!(stderr, "{verb} {}", path.display())?;
    }
    Ok(())
}

/// Replaces `path` with `text` whole: written to a new file beside it with
/// its permissions, then renamed over it, so that a failure midway leaves
/// the old file as it was (never a truncated one).
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let permissions = std::fs::metadata(path)?.permissions();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.dljob-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        f.write_all(text.as_bytes())?;
        f.set_permissions(permissions)?;
        f.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Says every problem and that nothing was printed or written.
fn refuse(problems: &[String], in_place: bool) -> anyhow::Result<ExitCode> {
    let mut stderr = std::io::stderr().lock();
    for p in problems {
        writeln!(stderr, "{}", terminal(p))?;
    }
    writeln!(
        stderr,
        "error: {} problem{}; nothing was {}",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        if in_place { "written" } else { "printed" }
    )?;
    Ok(ExitCode::FAILURE)
}

/// `dljob convert`.
pub fn convert(args: &ConvertArgs) -> anyhow::Result<ExitCode> {
    let (inputs, docs) = read_files(&args.manifest.file, args.in_place)?;
    let config = load_config(args.manifest.config.as_deref())?;
    // Where there are several files, each document's, for messages.
    let origins: Vec<String> = if inputs.len() > 1 {
        inputs
            .iter()
            .flat_map(|i| {
                let file = i
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                std::iter::repeat_n(file, i.count)
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut runtimes = Vec::new();
    for file in &args.runtimes {
        if file == "-" && args.manifest.file == "-" {
            anyhow::bail!("-f - and --runtime - both read standard input: give one of them a file");
        }
        let (_, runtime_docs) = read_files(file, false)?;
        for doc in runtime_docs {
            let Some(value) = doc.value else { continue };
            if let Some(other) = crate::migrate::not_runtimes(&value).first() {
                anyhow::bail!(
                    "--runtime {file}: {other} is not a Kubeflow Trainer runtime (ClusterTrainingRuntime or TrainingRuntime of trainer.kubeflow.org/v1alpha1); give jobs to convert with -f"
                );
            }
            runtimes.push(value);
        }
    }
    let converted = match crate::migrate::convert(
        &docs,
        &origins,
        &args.manifest.namespace,
        &runtimes,
        &config,
    ) {
        Ok(c) => c,
        Err(problems) => return refuse(&problems, args.in_place),
    };
    {
        let mut stderr = std::io::stderr().lock();
        for w in &converted.warnings {
            writeln!(stderr, "Warning: {}", terminal(w))?;
        }
        if !converted.changed.iter().any(|c| *c) {
            writeln!(
                stderr,
                "no job of another operator in {}: nothing to convert",
                args.manifest.file
            )?;
        }
    }
    write_out(
        inputs,
        converted.documents,
        &converted.changed,
        args.in_place,
        "converted",
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `dljob label`.
pub fn label(args: &LabelArgs) -> anyhow::Result<ExitCode> {
    let file = &args.manifest.file;
    let (inputs, docs) = read_files(file, args.in_place)?;
    let config = load_config(args.manifest.config.as_deref())?;
    let options = crate::label::Options {
        job: &args.job,
        framework: &args.framework,
        roles: &args.roles,
        set: &args.set,
        namespace: &args.manifest.namespace,
    };
    let labelled = match crate::label::label(&docs, &options, &config) {
        Ok(l) => l,
        Err(problems) => return refuse(&problems, args.in_place),
    };
    {
        let mut stderr = std::io::stderr().lock();
        for w in &labelled.warnings {
            writeln!(stderr, "Warning: {}", terminal(w))?;
        }
    }
    let documents = labelled.documents.into_iter().map(|d| vec![d]).collect();
    write_out(
        inputs,
        documents,
        &labelled.changed,
        args.in_place,
        "labelled",
    )?;
    Ok(ExitCode::SUCCESS)
}
