//! The docs cannot go stale: every `console` block in the README and under
//! `docs/` is run against the binary and its output compared, and every
//! relative link in the repository's Markdown resolves.
//!
//! A `console` block holds commands (`$ ` lines; a trailing `\` continues
//! one) each followed by its expected output, stdout and stderr together as
//! a terminal shows them. In expected output a line `...` stands for any
//! number of lines and `[..]` for any text within a line. Every command must
//! exit 0 (a doc that shows a failure writes `|| echo "exit status $?"`).
//! A command ending in ` &` runs in the background (`dljob serve`): the
//! block's port 8443 is replaced by a free loopback port, the harness waits
//! for it to accept connections and stops the server when the block ends.
//! Commands run with `sh`, each in a process group of its own (stopped
//! whole), with only PATH and HOME from the environment, in a scratch
//! directory whose entries link to the repository's, so `examples/…` paths
//! work; files they write must stay in the scratch directory itself (the
//! repository's `git status` is compared before and after).
//! Blocks that need a cluster, cargo or root are written as `sh`, not run.
//! Besides dljob and `sh`, the examples use curl, jq, base64 and grep.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

mod common;

/// Longest a foreground command may take before it counts as hung.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a background server may take to accept connections.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// The port the docs name for a server on localhost.
const DOC_PORT: &str = "8443";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Directories whose Markdown is not the project's own.
const SKIP_DIRS: [&str; 6] = [
    "target",
    ".git",
    ".venv",
    ".venv-conformance",
    "fuzz/target",
    "node_modules",
];

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let rel = path.strip_prefix(repo()).expect("under the repo");
        if SKIP_DIRS.iter().any(|skip| rel == Path::new(skip)) {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            out.push(path);
        }
    }
}

fn all_markdown() -> Vec<PathBuf> {
    let mut files = Vec::new();
    markdown_files(repo(), &mut files);
    files
}

/// The Markdown a user reads to run dljob: the README and `docs/`.
fn user_docs() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    markdown_files(&repo().join("docs"), &mut files);
    files
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].lines().count() + 1
}

// ---- links ----------------------------------------------------------------

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as hyphens, repeats numbered.
fn slug(heading: &str, seen: &mut HashMap<String, usize>) -> String {
    let base: String = heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect();
    let n = seen.entry(base.clone()).or_insert(0);
    let slug = if *n == 0 {
        base.clone()
    } else {
        format!("{base}-{n}")
    };
    *n += 1;
    slug
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = HashMap::new();
    let mut anchors = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    anchors.insert(slug(&h, &mut seen));
                }
            }
            _ => {}
        }
    }
    anchors
}

#[test]
fn every_relative_link_resolves() {
    let files = all_markdown();
    assert!(files.len() > 10, "found only {files:?}");
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("reads");
        for (event, range) in Parser::new(&text).into_offset_iter() {
            let dest = match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
                _ => continue,
            };
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match dest.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (&*dest, None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("has a dir").join(path)
            };
            let at = format!(
                "{}:{}: {dest}",
                file.strip_prefix(repo()).unwrap().display(),
                line_of(&text, range.start)
            );
            if !target.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target.extension().is_some_and(|e| e == "md") {
                let target_text = std::fs::read_to_string(&target).expect("reads");
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{at}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(checked >= 30, "only {checked} relative links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_github() {
    let mut seen = HashMap::new();
    assert_eq!(
        slug("Install on a cluster", &mut seen),
        "install-on-a-cluster"
    );
    assert_eq!(
        slug("Job status: kubectl get dljobs", &mut seen),
        "job-status-kubectl-get-dljobs"
    );
    assert_eq!(slug("The image", &mut seen), "the-image");
    assert_eq!(slug("The image", &mut seen), "the-image-1");
    assert_eq!(slug("dljob logs JOB", &mut seen), "dljob-logs-job");
}

// ---- console blocks ---------------------------------------------------------

struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
    background: bool,
}

struct Block {
    file: PathBuf,
    line: usize,
    steps: Vec<Step>,
}

fn console_blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).expect("reads");
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (event, range) in Parser::new(&text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if &*info == "console" => {
                current = Some((line_of(&text, range.start), String::new()));
            }
            Event::Text(t) => {
                if let Some((_, body)) = current.as_mut() {
                    body.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((line, body)) = current.take() {
                    blocks.push(Block {
                        file: file.to_path_buf(),
                        line,
                        steps: steps(line, &body),
                    });
                }
            }
            _ => {}
        }
    }
    blocks
}

fn steps(block_line: usize, body: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = body.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if let Some(command) = line.strip_prefix("$ ") {
            let mut command = command.to_string();
            while command.ends_with('\\') {
                let (_, next) = lines.next().expect("a continued command goes on");
                command.push('\n');
                command.push_str(next);
            }
            let background = command.trim_end().ends_with(" &");
            if background {
                command = command
                    .trim_end()
                    .trim_end_matches('&')
                    .trim_end()
                    .to_string();
            }
            steps.push(Step {
                line: block_line + 1 + i,
                command,
                expected: Vec::new(),
                background,
            });
        } else {
            let step = steps.last_mut().unwrap_or_else(|| {
                panic!(
                    "line {}: output before any `$ ` command",
                    block_line + 1 + i
                )
            });
            step.expected.push(line.to_string());
        }
    }
    steps
}

/// Does `actual` match `pattern`, where `[..]` stands for any text?
fn line_matches(pattern: &str, actual: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == actual;
    }
    let (first, rest) = parts.split_first().expect("non-empty");
    let (last, middle) = rest.split_last().expect("has a last");
    let Some(mut left) = actual.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

/// Do the lines match, where a `...` line stands for any number of lines?
fn output_matches(pattern: &[String], actual: &[&str]) -> bool {
    match pattern.split_first() {
        None => actual.is_empty(),
        Some((p, rest)) if p == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((p, rest)) => match actual.split_first() {
            Some((a, more)) => line_matches(p, a) && output_matches(rest, more),
            None => false,
        },
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("binds a loopback port")
        .local_addr()
        .expect("has an address")
        .port()
}

fn shell(command: &str, dir: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_dljob"))
        .parent()
        .expect("binary's dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    // The developer's environment stays out (a DLJOB_CONFIG or RUST_LOG
    // would change what the examples print): PATH and HOME only.
    cmd.arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .env("KUBECONFIG", dir.join("no-cluster/kubeconfig"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        // Its own process group, so that everything it starts is stopped
        // with it (a pipeline, a server behind `cd … &&`).
        .process_group(0);
    cmd
}

/// A scratch directory whose entries are links to the repository's.
fn scratch(name: &str) -> PathBuf {
    let dir = common::scratch_dir("docs", name);
    for entry in std::fs::read_dir(repo()).expect("repo") {
        let entry = entry.expect("entry");
        let file_name = entry.file_name();
        let name = file_name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.join(&*file_name)).expect("links");
    }
    dir
}

fn wait_with_timeout(mut child: Child, limit: Duration) -> Result<(i32, String), String> {
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waits") {
            let out = reader.join().expect("reader");
            return Ok((status.code().unwrap_or(-1), out));
        }
        if start.elapsed() > limit {
            stop_group(&mut child);
            return Err(format!("did not finish within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills `child`'s whole process group (it leads one: [`shell`]).
#[allow(
    unsafe_code,
    reason = "kill(2) on a process group has no safe wrapper in std"
)]
fn stop_group(child: &mut Child) {
    let group = i32::try_from(child.id()).expect("a pid");
    // SAFETY: kill(2) with a negative pid signals that process group; no
    // memory is passed.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
}

/// Kills the background servers of a block when it ends, however it ends.
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            stop_group(child);
        }
    }
}

fn run_block(block: &Block, failures: &mut Vec<String>) -> usize {
    let rel = block.file.strip_prefix(repo()).expect("in repo");
    let name = format!(
        "{}-{}",
        rel.display().to_string().replace('/', "_"),
        block.line
    );
    let dir = scratch(&name);
    let port = block
        .steps
        .iter()
        .any(|s| s.background)
        .then(|| free_port().to_string());
    let localize = |s: &str| match &port {
        Some(port) => s.replace(DOC_PORT, port),
        None => s.to_string(),
    };
    let mut background = Background(Vec::new());
    let mut ran = 0;
    for step in &block.steps {
        let at = format!("{}:{}: $ {}", rel.display(), step.line, step.command);
        let command = localize(&step.command);
        ran += 1;
        if step.background {
            if !step.expected.is_empty() {
                failures.push(format!("{at}\nshow no output after a background command"));
            }
            let log = std::fs::File::create(dir.join(format!("background-{}.log", step.line)))
                .expect("log file");
            let child = shell(&format!("exec {command}"), &dir)
                .stdout(log)
                .spawn()
                .expect("sh starts");
            background.0.push(child);
            let port = port.as_deref().expect("a background block has a port");
            let log = dir.join(format!("background-{}.log", step.line));
            let start = Instant::now();
            while TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
                let exited = background
                    .0
                    .last_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if exited.is_some() || start.elapsed() > LISTEN_TIMEOUT {
                    let why = match exited {
                        Some(status) => format!("it exited ({status})"),
                        None => format!("nothing listened on {port} within {LISTEN_TIMEOUT:?}"),
                    };
                    let printed = std::fs::read_to_string(&log).unwrap_or_default();
                    failures.push(format!("{at}\n{why}; it printed:\n{printed}"));
                    return ran;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        }
        let child = shell(&command, &dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh starts");
        let (code, out) = match wait_with_timeout(child, COMMAND_TIMEOUT) {
            Ok(done) => done,
            Err(e) => {
                failures.push(format!("{at}\n{e}"));
                return ran;
            }
        };
        let expected: Vec<String> = step.expected.iter().map(|l| localize(l)).collect();
        let actual: Vec<&str> = out.lines().collect();
        if code != 0 {
            failures.push(format!("{at}\nexited {code}:\n{out}"));
        } else if !output_matches(&expected, &actual) {
            failures.push(format!(
                "{at}\n--- expected\n{}\n--- printed\n{out}",
                expected.join("\n")
            ));
        }
    }
    ran
}

/// The programs the examples use besides dljob and a POSIX shell.
const TOOLS: [&str; 4] = ["curl", "jq", "base64", "grep"];

/// `git status --porcelain` of the repository: the examples must not
/// change it (their scratch directory links to its folders).
fn repo_status() -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(repo())
        .output()
        .expect("git runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn console_examples_print_what_the_docs_say() {
    let missing: Vec<&str> = TOOLS
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {tool}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the docs' examples need {missing:?} on the PATH (Debian: apt-get install curl jq); .ci/run installs them"
    );
    let before = repo_status();
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut readme_ran = 0;
    for file in user_docs() {
        for block in console_blocks(&file) {
            let n = run_block(&block, &mut failures);
            ran += n;
            if file == repo().join("README.md") {
                readme_ran += n;
            }
        }
    }
    assert_eq!(
        repo_status(),
        before,
        "an example wrote into the repository through its scratch directory's links; write to the scratch directory itself"
    );
    assert!(
        readme_ran >= 3,
        "the README runs only {readme_ran} commands"
    );
    assert!(ran >= 30, "the docs run only {ran} commands");
    assert!(
        failures.is_empty(),
        "{} console examples differ from what they print:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn output_patterns_match_as_documented() {
    let lines = |s: &str| s.lines().map(String::from).collect::<Vec<_>>();
    assert!(output_matches(&lines("a\n...\nd"), &["a", "b", "c", "d"]));
    assert!(output_matches(&lines("a\n...\nd"), &["a", "d"]));
    assert!(!output_matches(&lines("a\n...\nd"), &["a", "b"]));
    assert!(!output_matches(&lines("a\nb"), &["a", "b", "c"]));
    assert!(output_matches(&lines("x [..] z"), &["x y y z"]));
    assert!(!output_matches(&lines("x [..] z"), &["x y y"]));
    assert!(line_matches("[..]", ""));
    assert!(line_matches("ab[..]", "abc"));
    assert!(!line_matches("ab[..]b", "ab"));
    assert!(line_matches("a[..]b[..]c", "a1b2c"));
    assert!(!line_matches("a[..]b[..]c", "a1c2b"));
}

#[test]
fn anchors_cover_every_heading_level() {
    let text = "# One\n## Two `code`\n###### Six\n";
    let got = anchors(text);
    assert_eq!(
        got,
        ["one", "two-code", "six"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

/// The `dljob.dev/*` keys named in the first column of a table row.
fn table_keys(text: &str) -> BTreeSet<String> {
    let key = regex::Regex::new(r"`(dljob\.dev/[a-z-]+)`").expect("regex");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| {
            key.captures_iter(cell)
                .map(|c| c[1].to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The labels and annotations reference lists every key of the contract
/// (`src/contract.rs`) in a table, and no other.
#[test]
fn the_labels_reference_lists_every_key_of_the_contract() {
    let contract = std::fs::read_to_string(repo().join("src/contract.rs")).expect("contract");
    let declared =
        regex::Regex::new(r#"const [A-Z_]+: &str = "(dljob\.dev/[a-z-]+)";"#).expect("regex");
    let keys: BTreeSet<String> = declared
        .captures_iter(&contract)
        .map(|c| c[1].to_owned())
        .collect();
    assert!(keys.len() > 25, "read only {keys:?}");
    let reference = std::fs::read_to_string(repo().join("docs/reference/labels.md")).expect("doc");
    let listed = table_keys(&reference);
    let missing: Vec<_> = keys.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&keys).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/reference/labels.md lacks {missing:?} and lists keys the contract does not have: {unknown:?}"
    );
}

/// The config reference's table lists the top-level keys the binary
/// names when it refuses a misspelt one (the executed example on the same
/// page shows that list).
#[test]
fn the_config_reference_lists_every_key_the_binary_knows() {
    let page = std::fs::read_to_string(repo().join("docs/reference/config.md")).expect("doc");
    let known: BTreeSet<String> = page
        .lines()
        .find_map(|l| l.split_once("expected one of ").map(|(_, list)| list))
        .expect("the page shows the refusal of a misspelt key")
        .split(", ")
        .map(str::to_owned)
        .collect();
    assert!(known.len() >= 9, "{known:?}");
    let listed: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|k| !k.contains(' '))
        .map(|k| k.split('.').next().unwrap_or(k).to_owned())
        .filter(|k| k.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .collect();
    assert_eq!(listed, known, "docs/reference/config.md's table");
}

/// The `yaml` blocks of a Markdown file, as written.
fn yaml_blocks(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("reads");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if &*info == "yaml" => {
                current = Some(String::new());
            }
            Event::Text(t) => {
                if let Some(body) = current.as_mut() {
                    body.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
            _ => {}
        }
    }
    blocks
}

/// The HorizontalPodAutoscaler of docs/frameworks/pytorch.md is an
/// autoscaling/v2 object (the same block is validated against the
/// Kubernetes schemas by .ci/run) that targets the elastic example's DLJob
/// through the CRD's scale subresource, within its workers' range.
#[test]
fn the_autoscaler_example_targets_an_elastic_dljob_within_its_range() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let blocks = yaml_blocks(&repo().join("docs/frameworks/pytorch.md"));
    let hpas: Vec<&String> = blocks
        .iter()
        .filter(|b| b.contains("kind: HorizontalPodAutoscaler"))
        .collect();
    assert_eq!(hpas.len(), 1, "{blocks:?}");
    let hpa: HorizontalPodAutoscaler = serde_saphyr::from_str(hpas[0]).unwrap();
    let spec = hpa.spec;
    let target = &spec.scale_target_ref;
    assert_eq!(
        (
            target.api_version.as_deref(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        (Some("dljob.dev/v1alpha1"), "DLJob", "imagenet-elastic")
    );
    // The example job it names: elastic 2:4 over worker=3.
    let example =
        std::fs::read_to_string(repo().join("examples/pytorch-elastic/job.yaml")).unwrap();
    assert!(
        example.contains("name: imagenet-elastic")
            && example.contains("dljob.dev/elastic: \"2:4\"")
    );
    let role = dljob::frameworks::ElasticRole::of(
        dljob::frameworks::by_name("pytorch").unwrap(),
        &dljob::contract::Topology::parse("worker=3").unwrap(),
        Some(dljob::contract::Elastic { min: 2, max: 4 }),
    )
    .unwrap();
    let (min, max) = (spec.min_replicas.unwrap(), spec.max_replicas);
    assert!(
        role.range.contains(&u32::try_from(min).unwrap())
            && role.range.contains(&u32::try_from(max).unwrap()),
        "{min}..{max} outside {:?}",
        role.range
    );
    let crd = std::fs::read_to_string(repo().join("crds/dljob.yaml")).unwrap();
    assert!(crd.contains("specReplicasPath: .spec.elasticReplicas"));
}

/// docs/operations.md's table of `dljob serve` flags names every flag
/// `dljob serve --help` has (a new flag is documented where operators read
/// about running the webhook).
#[test]
fn every_serve_flag_is_in_the_operations_table() {
    let help = Command::new(env!("CARGO_BIN_EXE_dljob"))
        .args(["serve", "--help"])
        .output()
        .expect("dljob serve --help runs");
    let help = String::from_utf8(help.stdout).unwrap();
    let ops = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let flags: BTreeSet<&str> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            let l = l.split_once(", ").map_or(l, |(_, long)| long);
            let flag = l.split([' ', '=']).next()?;
            (flag.starts_with("--") && flag != "--help").then_some(flag)
        })
        .collect();
    assert!(flags.len() > 15, "{flags:?}");
    let missing: Vec<&&str> = flags
        .iter()
        .filter(|f| !ops.contains(&format!("`{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md does not name {missing:?}"
    );
}
