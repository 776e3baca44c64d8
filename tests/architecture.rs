//! The module map holds: no import circle between modules.
//!
//! Every file under `src/` is parsed (syn); every path it names outside
//! its tests — `use` trees, paths in code and in macro arguments — that
//! starts with `crate::` or `super::` is resolved to the module it reaches.
//! A module's use of its own ancestors or descendants is how a module tree
//! works (a parent declares and re-exports its children, a child reads its
//! parent); every other use is an edge between two sibling subtrees, at
//! the level of their closest common parent: `reconciler::index` using
//! `reconciler::observe` is an edge index → observe among the reconciler's
//! children, `webhook::admission` using `member::keys` is webhook → member
//! among the crate's. A circle among the siblings of any parent fails the
//! test, with the uses that make it.
//!
//! ARCHITECTURE.md's module map says which siblings each module may import;
//! an import its row does not list, or a module without a row, fails too,
//! so the map cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type Module = Vec<String>;

/// The module a source file defines: `src/a/b.rs` and `src/a/b/mod.rs` are
/// `a::b`; `lib.rs` and `main.rs` are the crate root.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The `crate::`/`super::` paths one file names outside its tests, each as
/// the module path it is relative to plus its segments.
struct Paths {
    /// The module of the code being visited (inline modules included).
    here: Module,
    found: Vec<Vec<String>>,
    /// Names imported (`use`), by the module (inline ones included) that
    /// imports them, with the absolute path each stands for: a child that
    /// names its parent's import reaches where the import points.
    imports: Vec<(Module, String, Vec<String>)>,
    /// Glob imports of an ancestor (`use super::*`): they would hide
    /// which siblings a module reaches.
    globs: Vec<String>,
}

impl Paths {
    /// Records `segments` (as written) if they start at `crate` or `super`,
    /// made absolute.
    fn record(&mut self, segments: Vec<String>) {
        if let Some(path) = self.absolute(&segments) {
            self.found.push(path);
        }
    }

    /// `segments` made absolute: from `crate`, `self` or `super`, and
    /// otherwise relative to the module (a 2018 path such as `use
    /// events::Recorder;` names a child; one that names no module of the
    /// crate, `std::…`, is dropped when resolved).
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut base = self.here.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            Some(_) => {}
            None => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Records an imported `name` standing for `full` (as written).
    fn import(&mut self, name: String, full: &[String]) {
        if let Some(path) = self.absolute(full) {
            self.imports.push((self.here.clone(), name, path));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                let name = full.last().cloned().unwrap_or_default();
                self.import(name, &full);
                self.record(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.import(r.rename.to_string(), &full);
                self.record(full);
            }
            syn::UseTree::Glob(_) => {
                if let Some(target) = self.absolute(prefix) {
                    if self.here.starts_with(&target) {
                        self.globs.push(format!(
                            "{}: use {}::*",
                            show(&self.here),
                            prefix.join("::")
                        ));
                    }
                }
                self.record(prefix.clone())
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `crate :: a :: b` and `super :: a` sequences in a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" || id == "self" => {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                        (trees.get(j), trees.get(j + 1))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        match trees.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.record(segments);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_cfg_test(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.record(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Who uses whom among the children of one parent module, and the uses
/// (file module → reached module) behind each edge.
type Level = BTreeMap<(String, String), BTreeSet<(String, String)>>;

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

/// Every edge between sibling subtrees, per parent.
fn levels() -> BTreeMap<Module, Level> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut levels: BTreeMap<Module, Level> = BTreeMap::new();
    let mut parsed = Vec::new();
    let mut imports: BTreeMap<Module, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in &files {
        if file.ends_with("main.rs") {
            continue; // the binary: a crate of its own, using the library
        }
        let here = module_of(&src, file);
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let mut paths = Paths {
            here: here.clone(),
            found: Vec::new(),
            imports: Vec::new(),
            globs: Vec::new(),
        };
        paths.visit_file(&ast);
        for (module, name, path) in &paths.imports {
            imports
                .entry(module.clone())
                .or_default()
                .insert(name.clone(), path.clone());
        }
        parsed.push((here, paths));
    }
    for (here, paths) in parsed {
        for path in paths.found {
            let path = through_imports(&imports, &modules, path);
            // The longest prefix that is a module.
            let Some(target) = (0..=path.len())
                .rev()
                .map(|k| path[..k].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == here.len() || common == target.len() {
                continue; // an ancestor or a descendant
            }
            let parent = here[..common].to_vec();
            levels
                .entry(parent)
                .or_default()
                .entry((here[common].clone(), target[common].clone()))
                .or_default()
                .insert((show(&here), show(&target)));
        }
    }
    levels
}

/// `path` with a name a module imports from one of its own descendants
/// replaced by what the import stands for, again until it names no such
/// import: `super::Meta` in `member::container` reaches `member::keys` when
/// `member` imports `self::keys::Meta`.
fn through_imports(
    imports: &BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    modules: &BTreeSet<Module>,
    mut path: Vec<String>,
) -> Vec<String> {
    for _ in 0..8 {
        let Some(k) = (0..path.len())
            .rev()
            .find(|k| modules.contains(&path[..*k].to_vec()))
        else {
            return path;
        };
        let module = path[..k].to_vec();
        // Only an import of the module's own descendant is followed: that
        // is how a child reaches a sibling through its parent. (Another
        // import may share its name with an item of the module's own, in
        // the other namespace: `manifest::validate`, a function, beside
        // `use crate::validate`.)
        let Some(full) = imports
            .get(&module)
            .and_then(|m| m.get(&path[k]))
            .filter(|full| full.len() > module.len() && full.starts_with(&module))
        else {
            return path;
        };
        if full == &path[..=k] {
            return path;
        }
        let mut next = full.clone();
        next.extend(path[k + 1..].iter().cloned());
        path = next;
    }
    path
}

/// Every `use super::*` (or other glob of an ancestor) outside tests.
fn ancestor_globs() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = Vec::new();
    for file in &files {
        // The binary (its tests are cfg(all(test, …))) and test-only files.
        if file.ends_with("main.rs") || file.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let ast = syn::parse_file(&text).expect("parses");
        let mut paths = Paths {
            here: module_of(&src, file),
            found: Vec::new(),
            imports: Vec::new(),
            globs: Vec::new(),
        };
        paths.visit_file(&ast);
        out.extend(paths.globs);
    }
    out.sort();
    out
}

#[test]
fn no_module_imports_all_of_an_ancestor() {
    let globs = ancestor_globs();
    assert!(
        globs.is_empty(),
        "a glob of an ancestor hides which siblings a module reaches; name what it uses:\n{}",
        globs.join("\n")
    );
}

#[test]
fn imports_are_followed_through_an_ancestor() {
    let modules: BTreeSet<Module> = [
        vec![],
        vec!["m".to_owned()],
        vec!["m".into(), "keys".into()],
    ]
    .into_iter()
    .collect();
    let imports = BTreeMap::from([(
        vec!["m".to_owned()],
        BTreeMap::from([(
            "Meta".to_owned(),
            vec!["m".into(), "keys".into(), "Meta".into()],
        )]),
    )]);
    let path = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        through_imports(&imports, &modules, path("m::Meta")),
        path("m::keys::Meta")
    );
    assert_eq!(
        through_imports(&imports, &modules, path("m::Other")),
        path("m::Other")
    );
}

/// The circles among one level's nodes: strongly connected components of
/// more than one node.
fn circles(level: &Level) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in level.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    // Kosaraju: reachability both ways.
    let reach = |from: &str, forward: bool| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            for (a, b) in level.keys() {
                let (x, y) = if forward { (a, b) } else { (b, a) };
                if *x == n {
                    stack.push(y.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in next.keys() {
        if done.contains(*n) {
            continue;
        }
        let both: Vec<String> = reach(n, true)
            .intersection(&reach(n, false))
            .cloned()
            .collect();
        done.extend(both.iter().cloned());
        if both.len() > 1 {
            out.push(both);
        }
    }
    out
}

#[test]
fn no_module_imports_in_a_circle() {
    let levels = levels();
    let mut report = String::new();
    for (parent, level) in &levels {
        for circle in circles(level) {
            report.push_str(&format!(
                "circle among the children of {}: {}\n",
                show(parent),
                circle.join(", ")
            ));
            for ((a, b), uses) in level {
                if circle.contains(a) && circle.contains(b) {
                    for (from, to) in uses {
                        report.push_str(&format!("  {a} -> {b}: {from} uses {to}\n"));
                    }
                }
            }
        }
    }
    assert!(report.is_empty(), "{report}");
}

/// ARCHITECTURE.md's module map: each row's module and the siblings it may
/// import.
fn module_map() -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md is readable");
    let start = text.find("## Module map").expect("a Module map section");
    let end = text[start..]
        .find("\n## ")
        .map_or(text.len(), |e| start + e);
    let mut map = BTreeMap::new();
    for line in text[start..end].lines() {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let Some(name) = cells
            .first()
            .and_then(|c| c.strip_prefix("| `"))
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        let imports = cells
            .get(2)
            .unwrap_or_else(|| panic!("the row of {name} has no import column"))
            .trim_end_matches(" |")
            .trim_end_matches('|')
            .split(',')
            .map(|s| s.trim().trim_matches('`').to_owned())
            .filter(|s| !s.is_empty() && s != "—")
            .collect();
        assert!(
            map.insert(name.to_owned(), imports).is_none(),
            "{name} has two rows"
        );
    }
    map
}

#[test]
fn every_import_is_in_the_module_map() {
    let map = module_map();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    // Every module of the crate has its row.
    let roots: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(&src, f))
        .filter(|m| m.len() == 1)
        .map(|m| m[0].clone())
        .collect();
    for m in &roots {
        if !map.contains_key(m) {
            problems.push(format!("{m}: no row in ARCHITECTURE.md's module map"));
        }
    }
    for (parent, level) in levels() {
        for ((a, b), uses) in level {
            let mut full = parent.clone();
            full.push(a.clone());
            let row = show(&full);
            match map.get(&row) {
                None => problems.push(format!(
                    "{row}: no row in ARCHITECTURE.md's module map (it imports {b})"
                )),
                Some(allowed) if !allowed.contains(&b) => {
                    let list: Vec<String> =
                        uses.iter().map(|(f, t)| format!("{f} uses {t}")).collect();
                    problems.push(format!(
                        "{row} imports {b}, which its row in ARCHITECTURE.md does not list: {}",
                        list.join("; ")
                    ));
                }
                Some(_) => {}
            }
        }
    }
    // A row for a module that no longer exists is stale.
    let modules: BTreeSet<String> = files.iter().map(|f| show(&module_of(&src, f))).collect();
    for row in map.keys() {
        if !modules.contains(row) {
            problems.push(format!(
                "ARCHITECTURE.md lists {row}, which is not a module"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check sees what it must: the crate's known uses are edges, so an
/// edge the other way would be a circle.
#[test]
fn the_import_graph_sees_known_uses() {
    let levels = levels();
    let root = &levels[&Vec::<String>::new()];
    for (from, to) in [
        ("webhook", "mutate"),
        ("reconciler", "crd"),
        ("member", "crd"),
        ("crd", "gang"),
        ("inspect", "tensorboard"),
    ] {
        assert!(
            root.contains_key(&(from.to_owned(), to.to_owned())),
            "{from} -> {to} not seen; the edges are {:?}",
            root.keys().collect::<Vec<_>>()
        );
    }
    let reconciler = &levels[&vec!["reconciler".to_owned()]];
    assert!(reconciler.contains_key(&("index".to_owned(), "observe".to_owned())));
    // A circle is found: the crate's edges plus one back.
    let mut with_back = root.clone();
    with_back
        .entry(("gang".to_owned(), "crd".to_owned()))
        .or_default()
        .insert(("gang".to_owned(), "crd".to_owned()));
    assert_eq!(circles(&with_back), [vec!["crd", "gang"]]);
    // The map is read: rows with their imports, and "—" for none.
    let map = module_map();
    assert!(map["validate"].contains("mutate"));
    assert!(map["contract"].is_empty());
    assert!(map["reconciler::controller"].contains("status"));
}

/// The modules of the standard library: a module of the crate named like
/// one reads, in a `use` or a path, as if it were std's.
const STD_MODULES: [&str; 51] = [
    "alloc",
    "any",
    "arch",
    "array",
    "ascii",
    "backtrace",
    "borrow",
    "boxed",
    "cell",
    "char",
    "clone",
    "cmp",
    "collections",
    "convert",
    "default",
    "env",
    "error",
    "f32",
    "f64",
    "ffi",
    "fmt",
    "fs",
    "future",
    "hash",
    "hint",
    "io",
    "iter",
    "marker",
    "mem",
    "net",
    "num",
    "ops",
    "option",
    "os",
    "panic",
    "path",
    "pin",
    "prelude",
    "primitive",
    "process",
    "ptr",
    "rc",
    "result",
    "slice",
    "str",
    "string",
    "sync",
    "task",
    "thread",
    "time",
    "vec",
];

#[test]
fn no_module_is_named_like_a_std_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let clashes: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(&src, f))
        .filter(|m| m.iter().any(|part| STD_MODULES.contains(&part.as_str())))
        .map(|m| show(&m))
        .collect();
    assert!(clashes.is_empty(), "modules named like std's: {clashes:?}");
}

/// What varies by framework is asked of the `Framework` trait, never
/// decided by comparing a framework's name: outside each framework's own
/// file (`src/frameworks/<name>.rs`), no code (tests aside) compares
/// `name()` with a string.
#[test]
fn no_code_outside_the_frameworks_decides_by_a_frameworks_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in &files {
        // A framework's own file may name itself; their shared module may not.
        if file.starts_with(src.join("frameworks")) && !file.ends_with("frameworks/mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.contains("name() == \"") || line.contains("name() != \"") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 50, "{files:?}");
    assert_eq!(found, Vec::<String>::new());
}
