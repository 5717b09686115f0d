//! Man pages and shell completions generated from the clap definitions and the annotated
//! example configuration, so the installed documentation cannot drift from the code.
//!
//! `smartmig manpages DIR` writes `smartmig(1)`, one `smartmig-<subcommand>(1)` page per
//! subcommand and `smartmig.toml(5)`; `smartmigd manpages DIR` writes `smartmigd(8)` and its
//! subcommand pages. `smartmig completions SHELL` / `smartmigd completions SHELL` print a
//! completion script. Both subcommands are hidden: they serve `scripts/package.sh`.
//! The clap-generic part (pages of a command and its subcommands, completions) is the
//! smartmig-clidoc crate, re-exported here; `smartmig.toml(5)` is made here.

use std::path::{Path, PathBuf};

use roff::{bold, italic, roman, Inline, Roff};
pub use smartmig_clidoc::{write_completions, write_man_pages, PageText, WriteError};

/// The annotated example configuration, installed as /etc/smartmig/smartmig.toml.
pub const EXAMPLE_CONFIG: &str = include_str!("../etc/smartmig.toml");

/// Why documentation could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// Writing a page failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The example configuration has a line the page generator does not understand.
    #[error("etc/smartmig.toml line {line}: {message}")]
    Config {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
}

/// Writes `smartmig(1)` and one page per subcommand into `dir`, each with its own
/// [`page_text`].
pub fn write_smartmig_man_pages(dir: &Path) -> Result<Vec<PathBuf>, WriteError> {
    use clap::CommandFactory;
    write_man_pages(crate::cli::Cli::command(), "1", dir, &page_text)
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The exit codes every smartmig command shares (src/cli/mod.rs).
const EXIT_CODES: [(&str, &str); 4] = [
    ("0", "Success."),
    ("1", "A run failed: I/O, an internal error, or (where the page says so) a check that did not pass."),
    ("2", "Usage error: a bad option or argument."),
    ("3", "Invalid input: a config, scenario, trace, layout or model file, with one line naming it and the problem."),
];

/// The sections of `smartmig`'s pages that clap cannot know, by page name.
pub fn page_text(name: &str) -> PageText {
    let guides = "/usr/share/doc/smartmig/admin-guide.md, user-guide.md and model.md";
    let mut t = PageText {
        exit_status: pairs(&EXIT_CODES),
        see_also: vec![
            "smartmig(1)".into(),
            "smartmig.toml(5)".into(),
            "smartmigd(8)".into(),
            guides.into(),
        ],
        ..PageText::default()
    };
    let config = (
        "/etc/smartmig/smartmig.toml",
        "The configuration (smartmig.toml(5)); also looked for beside slurm.conf.",
    );
    let scenarios = (
        "/usr/share/smartmig/scenarios/*.toml",
        "Scenarios: cluster, workload and baselines (the paper's reference is built in).",
    );
    let policies = (
        "/usr/share/smartmig/onnx/<gpu-key>-<semantics>.onnx",
        "Shipped learned policies; ./onnx/ is looked at first.",
    );
    let runtime = ("~/.cache/smartmig/onnxruntime/1.32.0/, /usr/lib/smartmig/", "ONNX Runtime, downloaded once by `smartmig policy fetch-runtime` (`--system`: for every user and smartmigd).");
    match name {
        "smartmig" => {
            t.description = vec![
                "smartmig routes MIG GPU requests in Slurm to the slice size that fits, repartitions MIG GPUs with a learned mean-field policy (smartmigd(8)), and, before anything touches hardware, simulates a site's workload to compare policies, compute lower bounds and tune layouts. Each command has its own page, smartmig-COMMAND(1).".into(),
            ];
            t.files = pairs(&[config, scenarios, policies, runtime]);
            t.examples = pairs(&[
                (
                    "smartmig compare --seeds 20",
                    "Every baseline on the paper's reference scenario over 20 days, with the lower bounds.",
                ),
                (
                    "smartmig mig configs --gpu a100-40gb",
                    "The named configurations c1..c12 and their placements.",
                ),
                (
                    "smartmig doctor",
                    "Check an installation: Slurm, plugin, config, snapshot, NVML, ONNX Runtime, gres.conf.",
                ),
            ]);
            t.exit_status.push((
                "4, 5".into(),
                "smartmig doctor only: the worst finding is a warning (4) or a failure (5).".into(),
            ));
        }
        "smartmig-compare" | "smartmig-simulate" | "smartmig-tune-static" | "smartmig-bounds" => {
            t.description = vec![
                "Scenarios are TOML files (or the built-in reference, 8 A100-40GB at 20x load); every key can be overridden with --set KEY=VALUE, checked like the file. The model simulated (jobs, power, ET, schedulers, baselines, bounds) is described in /usr/share/doc/smartmig/model.md.".into(),
            ];
            t.files = pairs(&[scenarios, policies, runtime]);
            t.examples = match name {
                "smartmig-compare" => pairs(&[
                    (
                        "smartmig compare --seeds 20",
                        "The reference scenario over 20 evaluation days.",
                    ),
                    (
                        "smartmig compare --set workload.multiplier=12 --format json",
                        "At 12x load, as JSON.",
                    ),
                    (
                        "smartmig compare --model p.onnx --plot out/",
                        "With a trained policy, and figures as SVG in out/.",
                    ),
                ]),
                "smartmig-simulate" => pairs(&[
                    (
                        "smartmig simulate --policy static --layout c6 --scheduler edf --seed 7",
                        "One day with every GPU in c6 under EDF.",
                    ),
                    (
                        "smartmig simulate --trace history.sacct --trace-format sacct --plot out/",
                        "A site's own history, with figures.",
                    ),
                ]),
                "smartmig-tune-static" => pairs(&[(
                    "smartmig tune-static --scenario my-site.toml --write",
                    "Search the best fixed layout and record it as baselines.static_best.",
                )]),
                _ => pairs(&[
                    (
                        "smartmig bounds",
                        "Energy and tardiness lower bounds of the reference day.",
                    ),
                    (
                        "smartmig bounds --set workload.multiplier=26 --relaxed",
                        "A congested day, LP relaxation only.",
                    ),
                ]),
            };
        }
        "smartmig-doctor" => {
            t.description = vec![
                "Each check prints one line as soon as it ends, with a fix for every problem; each has a time limit, so a hanging driver or a Slurm without configuration cannot stall the run. Everything is read-only.".into(),
            ];
            t.exit_status = pairs(&[
                ("0", "Every check is ok or skipped."),
                ("2", "Usage error."),
                ("4", "The worst finding is a warning."),
                ("5", "A check failed."),
            ]);
            t.files = pairs(&[
                (
                    "$SLURM_CONF, /etc/slurm/slurm.conf",
                    "slurm.conf (Includes read in place) and gres.conf beside it.",
                ),
                config,
                (
                    "/run/smartmig/snapshot.json",
                    "The controller snapshot the plugin routes with.",
                ),
                (
                    "/usr/lib/smartmig/libonnxruntime.so.1.32.0",
                    "The ONNX Runtime smartmigd-central loads when controller.onnxruntime is unset.",
                ),
            ]);
            t.examples = pairs(&[
                ("smartmig doctor", "Check this host."),
                (
                    "smartmig doctor --skip nvml --format json",
                    "On a controller-only host, as JSON.",
                ),
            ]);
            t.see_also.push("smartmigd-central(8), smartmigd-node(8)".into());
        }
        "smartmig-mig-plan" => {
            t.exit_status[1] = (
                "1".into(),
                "The plan destroys a busy instance (--busy): it cannot run until that instance is idle."
                    .into(),
            );
            t.examples = pairs(&[(
                "smartmig mig plan --gpu a100-40gb --from c2 --to c6 --busy 3g.20gb@4",
                "The driver calls from c2 to c6, keeping the busy 3g.",
            )]);
        }
        "smartmig-mig-probe" => {
            t.exit_status[1] = (
                "1".into(),
                "A GPU's MIG profiles differ from the catalogue, or NVML cannot be used.".into(),
            );
            t.files = pairs(&[("libnvidia-ml.so.1", "NVML, loaded at run time.")]);
        }
        "smartmig-mig-configs" => {
            t.examples = pairs(&[
                (
                    "smartmig mig configs --gpu a100-40gb",
                    "c1..c12 on the A100-40GB.",
                ),
                (
                    "smartmig mig configs --pre-r510 --format json",
                    "Every model, marking what drivers before R510 refuse.",
                ),
            ]);
        }
        "smartmig-replay" => {
            t.files = pairs(&[policies, runtime]);
            t.examples = pairs(&[(
                "smartmig replay --sacct history.sacct --html replay.html",
                "What-if on a site's sacct history (see the admin guide for the sacct command line).",
            )]);
        }
        "smartmig-sweep" => {
            t.examples = pairs(&[
                (
                    "smartmig sweep --seeds 200 --emit-sbatch /shared/s1",
                    "Write an array job, one task per day.",
                ),
                (
                    "smartmig sweep --collect /shared/s1",
                    "Merge the results into the table compare prints.",
                ),
            ]);
        }
        "smartmig-status" => {
            t.exit_status[1] = ("1".into(), "The central role has written no status yet.".into());
            t.files = pairs(&[
                config,
                (
                    "/var/lib/smartmig/central-status.json",
                    "The status smartmigd-central writes (controller.state_dir).",
                ),
            ]);
            t.examples = pairs(&[(
                "smartmig status --json",
                "The status file as JSON, from any host that sees state_dir.",
            )]);
        }
        "smartmig-policy-fetch-runtime" => {
            t.files = pairs(&[runtime]);
            t.examples = pairs(&[(
                "smartmig policy fetch-runtime --system",
                "As root: ONNX Runtime for every user and for smartmigd.",
            )]);
        }
        "smartmig-config-check" => {
            t.files = pairs(&[config]);
            t.examples = pairs(&[(
                "smartmig config check /etc/smartmig/smartmig.toml",
                "Report the first bad key with its line.",
            )]);
        }
        _ => {}
    }
    t
}

/// Writes `smartmig.toml.5`, generated from [`EXAMPLE_CONFIG`], into `dir`.
pub fn write_config_man_page(dir: &Path) -> Result<PathBuf, DocsError> {
    let page = config_man_page(EXAMPLE_CONFIG, env!("CARGO_PKG_VERSION"))?;
    let path = dir.join("smartmig.toml.5");
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, page))
        .map_err(|source| DocsError::Io {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// One key of the example file, set or shown commented out.
#[derive(Debug)]
struct Key {
    name: String,
    value: String,
    doc: Vec<String>,
    /// Shown commented out: unset by default.
    commented: bool,
}

/// Something inside a section: explanatory text or a key.
#[derive(Debug)]
enum Item {
    Prose(Vec<String>),
    Key(Key),
}

/// A `[table]` or `[[array]]` of the example file ("" for the top level).
#[derive(Debug)]
struct Section {
    header: String,
    items: Vec<Item>,
}

/// Matches a TOML header `[a.b]` / `[[a.b]]`, returning it as written.
fn header(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let inner = inner
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(inner);
    let ok = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    ok.then_some(s)
}

/// Matches `key = value`, returning both.
fn key_value(s: &str) -> Option<(&str, &str)> {
    let (k, v) = s.split_once(" = ")?;
    let ok = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    ok.then_some((k, v.trim()))
}

/// Bracket depth a value leaves open (values spanning lines are arrays or inline tables).
fn open_brackets(v: &str) -> i32 {
    let mut depth = 0;
    let mut in_string = false;
    for c in v.chars() {
        match c {
            '"' => in_string = !in_string,
            '[' | '{' if !in_string => depth += 1,
            ']' | '}' if !in_string => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// Splits the annotated example into sections of prose and documented keys. Comments
/// directly above a key document it; comments followed by a blank line or a header are
/// prose; commented-out headers and keys are shown as unset examples.
fn parse_example(text: &str) -> Result<Vec<Section>, DocsError> {
    let mut sections = vec![Section {
        header: String::new(),
        items: Vec::new(),
    }];
    let mut pending: Vec<String> = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let line = raw.trim();
        let current = sections.len() - 1;
        let (content, commented) = match line.strip_prefix('#') {
            Some(c) => (c.strip_prefix(' ').unwrap_or(c).trim_end(), true),
            None => (line, false),
        };
        if line.is_empty() {
            if !pending.is_empty() {
                sections[current]
                    .items
                    .push(Item::Prose(std::mem::take(&mut pending)));
            }
        } else if let Some(h) = header(content) {
            let prose = std::mem::take(&mut pending);
            // A commented example may repeat its header (two entries of one array).
            if let Some(pos) = sections.iter().position(|s| s.header == h) {
                let s = sections.remove(pos);
                sections.push(s);
            } else {
                let mut items = Vec::new();
                if !prose.is_empty() {
                    items.push(Item::Prose(prose));
                }
                sections.push(Section {
                    header: h.to_owned(),
                    items,
                });
            }
        } else if let Some((k, v)) = key_value(content) {
            let mut value = v.to_owned();
            let mut depth = open_brackets(v);
            while depth > 0 {
                let Some((_, more)) = lines.next() else {
                    return Err(DocsError::Config {
                        line: i + 1,
                        message: format!("value of `{k}` is never closed"),
                    });
                };
                let more = more.trim().trim_start_matches('#').trim();
                depth += open_brackets(more);
                value.push(' ');
                value.push_str(more);
            }
            let doc = std::mem::take(&mut pending);
            let known = sections[current]
                .items
                .iter()
                .any(|it| matches!(it, Item::Key(key) if key.name == k));
            if !known {
                sections[current].items.push(Item::Key(Key {
                    name: k.to_owned(),
                    value,
                    doc,
                    commented,
                }));
            }
        } else if commented {
            pending.push(content.to_owned());
        } else {
            return Err(DocsError::Config {
                line: i + 1,
                message: format!("expected a comment, `[table]` or `key = value`, found `{line}`"),
            });
        }
    }
    if !pending.is_empty() {
        let last = sections.len() - 1;
        sections[last].items.push(Item::Prose(pending));
    }
    Ok(sections)
}

/// Adds a paragraph; comment lines indented further (tables inside comments) keep their breaks.
fn paragraph(roff: &mut Roff, lines: &[String]) {
    for l in lines {
        if l.starts_with(' ') {
            roff.control("br", []);
        }
        roff.text(code_spans(l.trim()));
    }
}

/// Renders `code` spans of a comment in bold, the rest in roman.
fn code_spans(s: &str) -> Vec<Inline> {
    s.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(i, part)| if i % 2 == 1 { bold(part) } else { roman(part) })
        .collect()
}

/// The `smartmig.toml(5)` page generated from the annotated example `text`.
pub fn config_man_page(text: &str, version: &str) -> Result<String, DocsError> {
    let sections = parse_example(text)?;
    let source = format!("smartmig {version}");
    let mut roff = Roff::new();
    roff.control("TH", ["smartmig.toml", "5", "", &source, "File Formats"]);
    roff.control("SH", ["NAME"]);
    // The file's first comment line reads "smartmig.toml: <what it is>".
    let summary = text
        .lines()
        .next()
        .and_then(|l| l.trim_start_matches('#').trim().split_once(": "))
        .map(|(_, what)| what.trim_end_matches('.').to_owned())
        .unwrap_or_else(|| "configuration of smartmig".to_owned());
    roff.text([roman(format!("smartmig.toml - {summary}"))]);
    roff.control("SH", ["DESCRIPTION"]);
    for (n, section) in sections.iter().enumerate() {
        if section.header.is_empty() {
            roff.control("SS", ["Top level"]);
        } else {
            roff.control("SS", [section.header.as_str()]);
        }
        for item in &section.items {
            match item {
                Item::Prose(lines) => {
                    // The title line is the NAME section already.
                    let lines = match lines.split_first() {
                        Some((first, rest)) if n == 0 && first.starts_with("smartmig.toml:") => rest,
                        _ => lines,
                    };
                    if lines.is_empty() {
                        continue;
                    }
                    roff.control("PP", []);
                    paragraph(&mut roff, lines);
                }
                Item::Key(key) => {
                    roff.control("TP", []);
                    roff.text([bold(key.name.as_str()), roman(" = "), italic(key.value.as_str())]);
                    paragraph(&mut roff, &key.doc);
                    if key.commented {
                        roff.control("br", []);
                        roff.text([roman("Not set in the example file (shown commented out).")]);
                    }
                }
            }
        }
    }
    roff.control("SH", ["FILES"]);
    roff.control("TP", []);
    roff.text([bold("/etc/smartmig/smartmig.toml")]);
    roff.text([roman(
        "The configuration read by smartmigd, the job_submit plugin and smartmig doctor.",
    )]);
    roff.control("TP", []);
    roff.text([bold("/usr/share/doc/smartmig/examples/smartmig.toml")]);
    roff.text([roman("This annotated example with every default.")]);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("smartmig"),
        roman("(1), "),
        bold("smartmig-config"),
        roman("(1), "),
        bold("smartmigd"),
        roman("(8)"),
    ]);
    Ok(roff.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every visible subcommand path of `cmd`, e.g. `mig-layouts`.
    fn subcommand_paths(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let path = format!("{prefix}-{}", sub.get_name());
            out.push(path.clone());
            subcommand_paths(sub, &path, out);
        }
    }

    #[test]
    fn smartmig_man_pages_name_every_subcommand_and_have_one_page_each() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = crate::cli::Cli::command();
        let written = write_smartmig_man_pages(dir.path()).unwrap();
        // roff writes `-` as `\\-`.
        let main = std::fs::read_to_string(dir.path().join("smartmig.1"))
            .unwrap()
            .replace("\\-", "-");
        let mut paths = Vec::new();
        subcommand_paths(&cmd, "smartmig", &mut paths);
        assert!(paths.len() > 10, "command tree too small: {paths:?}");
        for top in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let reference = format!("smartmig-{}(1)", top.get_name());
            assert!(main.contains(&reference), "smartmig(1) lacks {reference}");
        }
        for path in &paths {
            let page = dir.path().join(format!("{path}.1"));
            assert!(page.is_file(), "no page {}", page.display());
        }
        // The hidden generators and `help` get no page.
        assert_eq!(written.len(), paths.len() + 1);
        assert!(!dir.path().join("smartmig-manpages.1").exists());
        assert!(!main.contains("smartmig-completions"));
    }

    #[test]
    fn config_man_page_documents_every_key_of_the_example_under_its_section() {
        let page = config_man_page(EXAMPLE_CONFIG, "0.0.0").unwrap();
        let doc: toml::Table = toml::from_str(EXAMPLE_CONFIG).unwrap();
        // Section headers in the page, each with the source text up to the next one.
        let blocks: Vec<(&str, &str)> = page
            .split("\n.SS ")
            .skip(1)
            .map(|b| b.split_once('\n').unwrap())
            .collect();
        let block_of = |header: &str| -> &str {
            blocks
                .iter()
                .find(|(h, _)| h.trim_matches('"') == header)
                .map(|(_, body)| *body)
                .unwrap_or_else(|| panic!("no section {header} in smartmig.toml(5)"))
        };
        fn walk(table: &toml::Table, prefix: &str, out: &mut Vec<(String, String)>) {
            for (k, v) in table {
                match v {
                    toml::Value::Table(t) => walk(t, &format!("{prefix}{k}."), out),
                    _ => out.push((prefix.trim_end_matches('.').to_owned(), k.clone())),
                }
            }
        }
        let mut keys = Vec::new();
        walk(&doc, "", &mut keys);
        assert!(keys.len() > 30, "too few keys found: {keys:?}");
        for (section, key) in &keys {
            let body = if section.is_empty() {
                block_of("Top level")
            } else {
                block_of(&format!("[{section}]"))
            };
            assert!(
                body.contains(&format!("\\fB{key}\\fR = ")),
                "smartmig.toml(5) section [{section}] lacks key {key}"
            );
        }
        // The comment text comes along, not only the names.
        assert!(page.contains("Seconds between decisions of the central controller"));
        // Commented-out examples are documented as such.
        let periodic = block_of("[[policy.periodic]]");
        assert!(periodic.contains("\\fBat\\fR = "), "{periodic}");
        assert!(block_of("[gpu]").contains("\\fBcatalogue\\fR = "));
    }

    #[test]
    fn config_man_page_rejects_a_line_it_cannot_place() {
        let err = config_man_page("version = 1\nthis is not toml\n", "0").unwrap_err();
        assert!(matches!(err, DocsError::Config { line: 2, .. }), "{err}");
    }

    #[test]
    fn bash_completions_offer_every_subcommand() {
        let mut cmd = crate::cli::Cli::command();
        let mut out = Vec::new();
        write_completions(&mut cmd, clap_complete::Shell::Bash, &mut out);
        let script = String::from_utf8(out).unwrap();
        let root_words = script
            .lines()
            .find(|l| l.trim_start().starts_with("opts=\"-v -h -V"))
            .expect("no option list for smartmig itself");
        let mut paths = Vec::new();
        subcommand_paths(&cmd, "smartmig", &mut paths);
        for top in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            assert!(
                root_words.split([' ', '"']).any(|w| w == top.get_name()),
                "bash completion does not offer {}",
                top.get_name()
            );
        }
        // Every subcommand, nested ones included, has its own case arm `<parent>,<name>)`.
        for path in &paths {
            let name = cmd_name(&cmd, path);
            assert!(
                script.contains(&format!(",{name})")),
                "bash completion lacks {path}"
            );
        }
    }

    /// The last component of a subcommand path, found in the tree (names may contain `-`).
    fn cmd_name(cmd: &clap::Command, path: &str) -> String {
        let rest = path.strip_prefix("smartmig-").unwrap();
        fn find(cmd: &clap::Command, rest: &str) -> Option<String> {
            for sub in cmd.get_subcommands() {
                let n = sub.get_name();
                if rest == n {
                    return Some(n.to_owned());
                }
                if let Some(r) = rest.strip_prefix(&format!("{n}-")) {
                    if let Some(found) = find(sub, r) {
                        return Some(found);
                    }
                }
            }
            None
        }
        find(cmd, rest).unwrap()
    }

    /// Renders `page` as `man -l` does (preconv for UTF-8, man macros); returns its warnings, or None without groff.
    fn groff_warnings(page: &Path) -> Option<String> {
        let out = std::process::Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(page)
            .output();
        match out {
            Ok(o) => {
                assert!(o.status.success(), "groff failed on {}", page.display());
                Some(String::from_utf8_lossy(&o.stderr).into_owned())
            }
            Err(e) => {
                println!("skipped: groff not runnable ({e})");
                None
            }
        }
    }

    /// Issue 17: the pages were bare option lists.
    #[test]
    fn every_page_has_description_exit_status_and_see_also_and_the_main_ones_files_and_examples() {
        let dir = tempfile::tempdir().unwrap();
        for page in write_smartmig_man_pages(dir.path()).unwrap() {
            let text = std::fs::read_to_string(&page).unwrap();
            let name = page.file_stem().unwrap().to_string_lossy().into_owned();
            let mut want = vec![".SH DESCRIPTION", ".SH \"EXIT STATUS\"", ".SH \"SEE ALSO\""];
            if [
                "smartmig",
                "smartmig-doctor",
                "smartmig-compare",
                "smartmig-status",
            ]
            .contains(&name.as_str())
            {
                want.extend([".SH FILES", ".SH EXAMPLES"]);
            }
            for w in want {
                assert!(text.contains(w), "{name} lacks {w}");
            }
        }
    }

    #[test]
    fn generated_pages_render_with_groff_without_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let mut pages = write_smartmig_man_pages(dir.path()).unwrap();
        pages.push(write_config_man_page(dir.path()).unwrap());
        for page in &pages {
            let Some(warnings) = groff_warnings(page) else {
                return;
            };
            assert!(warnings.is_empty(), "{}: {warnings}", page.display());
        }
    }
}
