//! `docs/reference.md` is held to the code, as `tests/readme_demo.rs` holds
//! the README's demo to what the demo prints. Each list is read from the
//! code's own answer, never from a copy kept here:
//!
//! - flags: `gpuslice --help` names the commands, and each command's
//!   `--help` its flags (commands with subcommands are followed down);
//! - configuration keys: the monitor's parser names the keys it accepts
//!   when it refuses an unknown one (`gpuslice monitor --config F --check`),
//!   at the top of the file and inside each table;
//! - metrics: the families a running monitor on simgpu serves on `/metrics`
//!   (every family has its TYPE line on every page, series or not);
//! - variables: the `GPUSLICE_` names in the shim's sources, outside their
//!   unit tests.
//!
//! Both ways: what the code has and the page lacks fails, naming it, and so
//! does what the page lists and the code no longer has. Adding a metric,
//! flag, key or variable to the page is one table row in its section.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{gpuslice_bin, repo_root, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const PAGE: &str = "docs/reference.md";

fn reference() -> String {
    let path = repo_root().join(PAGE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text of the page's `## {title}` section, up to the next `## `.
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let start = page.find(&heading).unwrap_or_else(|| panic!("{PAGE} has no section `## {title}`")) + heading.len();
    let rest = &page[start..];
    rest.find("\n## ").map_or(rest, |end| &rest[..end])
}

/// The code spans (`…`) of `text`, in order.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The cells of each table row in `text` (header and separator rows left
/// out: a row counts when its first cell holds a code span).
fn table_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|line| line.starts_with('|'))
        .map(|line| line.trim().trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>())
        .filter(|cells| cells.first().is_some_and(|first| first.contains('`')))
        .collect()
}

/// `found` minus `listed`, and `listed` minus `found`, as one failure
/// message naming each item, or `None` when they agree.
fn differences(what: &str, found: &BTreeSet<String>, listed: &BTreeSet<String>, source: &str) -> Option<String> {
    let missing: Vec<&String> = found.difference(listed).collect();
    let stale: Vec<&String> = listed.difference(found).collect();
    let mut message = String::new();
    if !missing.is_empty() {
        message += &format!("{what}: in {source}, missing from {PAGE}: {missing:?}\n");
    }
    if !stale.is_empty() {
        message += &format!("{what}: in {PAGE}, not in {source}: {stale:?}\n");
    }
    (!message.is_empty()).then_some(message)
}

// --- Flags --------------------------------------------------------------------

fn help(path: &[String]) -> String {
    let out = Command::new(gpuslice_bin()).args(path).arg("--help").output().unwrap_or_else(|e| panic!("cannot run gpuslice: {e}"));
    assert!(out.status.success(), "gpuslice {} --help failed: {}", path.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a `--help` page lists under `Commands:` (not `help`).
fn subcommands(help: &str) -> Vec<String> {
    let Some((_, list)) = help.split_once("\nCommands:\n") else { return Vec::new() };
    list.lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a `--help` page lists under `Options:` (not `--help`
/// and `--version`, which every command has).
fn flags(help: &str) -> BTreeSet<String> {
    let Some((_, options)) = help.split_once("\nOptions:\n") else { return BTreeSet::new() };
    options
        .lines()
        .take_while(|line| !line.starts_with(|c: char| c.is_alphabetic()))
        // An option's own line is indented by at most 6 spaces; its
        // description, when on lines of its own, by more.
        .filter(|line| line.len() - line.trim_start().len() <= 6)
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line.strip_prefix('-').filter(|l| !l.starts_with('-')).map_or(line, |l| l.get(3..).unwrap_or(""));
            let name = line.strip_prefix("--")?;
            let end = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(name.len());
            Some(format!("--{}", &name[..end]))
        })
        .filter(|flag| flag != "--help" && flag != "--version")
        .collect()
}

/// Every command (as its words after `gpuslice`) with its flags, from the
/// binary's own help pages.
fn commands_and_flags() -> BTreeMap<String, BTreeSet<String>> {
    let mut found = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = subcommands(&help(&[])).into_iter().map(|c| vec![c]).collect();
    assert!(!todo.is_empty(), "gpuslice --help lists no commands:\n{}", help(&[]));
    while let Some(path) = todo.pop() {
        let page = help(&path);
        let subs = subcommands(&page);
        todo.extend(subs.iter().map(|sub| [path.clone(), vec![sub.clone()]].concat()));
        let flags = flags(&page);
        // A command that only groups others (`tenant`) has no flags of its
        // own and no section.
        let only_groups = flags.is_empty() && !subs.is_empty();
        if !only_groups {
            found.insert(path.join(" "), flags);
        }
    }
    found
}

/// The flags `docs/reference.md` lists, by command: each `### \`gpuslice
/// CMD\`` heading of the flags section, and the `--flag` words in the first
/// cell of its table's rows.
fn documented_flags(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut documented = BTreeMap::new();
    for part in section(page, "Command-line flags").split("\n### ").skip(1) {
        let (heading, body) = part.split_once('\n').unwrap_or((part, ""));
        let command = code_spans(heading).first().and_then(|c| c.strip_prefix("gpuslice ")).map(str::to_string);
        let command = command.unwrap_or_else(|| panic!("{PAGE}: flags heading {heading:?} is not `gpuslice COMMAND`"));
        let flags = table_rows(body)
            .iter()
            .flat_map(|cells| code_spans(cells[0]))
            .flat_map(|span| span.split_whitespace())
            .filter(|word| word.starts_with("--"))
            .map(str::to_string)
            .collect();
        assert!(documented.insert(command.clone(), flags).is_none(), "{PAGE}: `gpuslice {command}` has two sections");
    }
    documented
}

#[test]
fn every_flag_of_every_command_is_in_the_reference_and_no_other() {
    let found = commands_and_flags();
    let documented = documented_flags(&reference());
    let mut failures = String::new();
    let commands: BTreeSet<String> = found.keys().cloned().collect();
    let listed: BTreeSet<String> = documented.keys().cloned().collect();
    failures += &differences("commands", &commands, &listed, "`gpuslice --help`").unwrap_or_default();
    for (command, flags) in &found {
        let listed = documented.get(command).cloned().unwrap_or_default();
        if documented.contains_key(command) {
            let source = format!("`gpuslice {command} --help`");
            failures += &differences(&format!("flags of `gpuslice {command}`"), flags, &listed, &source).unwrap_or_default();
        }
    }
    assert!(failures.is_empty(), "{failures}");
    eprintln!("{} commands, {} flags: each in {PAGE}", found.len(), found.values().map(BTreeSet::len).sum::<usize>());
}

// --- Configuration keys ----------------------------------------------------------

/// What the monitor's parser says of a configuration holding `text`: the
/// keys it accepts where the unknown key `zz_probe` stands, or `None` when
/// it refuses the file for another reason (the place holds a value, not a
/// table of known keys).
fn accepted_keys(dir: &Path, text: &str) -> Option<Vec<String>> {
    let file = dir.join("probe.toml");
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    let out = Command::new(gpuslice_bin())
        .args(["monitor", "--no-nvml", "--check", "--dir"])
        .arg(dir)
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gpuslice: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the monitor accepted a configuration with an unknown key:\n{text}\n{stderr}");
    let (_, expected) = stderr.split_once("unknown field `zz_probe`, expected ")?;
    Some(code_spans(expected.lines().next().unwrap_or("")).into_iter().map(str::to_string).collect())
}

/// Every key of the configuration file, from the parser's answers: a key
/// at the top (`on_violation`), in a table (`priority_ceilings.default`),
/// or in a table of named tables (`tenants.<name>.memory`).
fn configuration_keys() -> BTreeSet<String> {
    let sim = Sim::new();
    let top = accepted_keys(sim.dir(), "zz_probe = 1\n")
        .unwrap_or_else(|| panic!("the monitor's refusal of an unknown top-level key no longer names the keys it accepts"));
    let mut keys = BTreeSet::new();
    for key in top {
        if let Some(inner) = accepted_keys(sim.dir(), &format!("[{key}]\nzz_probe = 1\n")) {
            keys.extend(inner.iter().map(|k| format!("{key}.{k}")));
        } else if let Some(inner) = accepted_keys(sim.dir(), &format!("[{key}.probe]\nzz_probe = 1\n")) {
            keys.extend(inner.iter().map(|k| format!("{key}.<name>.{k}")));
        } else {
            keys.insert(key);
        }
    }
    keys
}

#[test]
fn every_configuration_key_the_parser_accepts_is_in_the_reference_and_no_other() {
    let found = configuration_keys();
    let page = reference();
    let listed: BTreeSet<String> = table_rows(section(&page, "Configuration file (monitor.toml)"))
        .iter()
        .flat_map(|cells| code_spans(cells[0]))
        .map(str::to_string)
        .collect();
    if let Some(failure) = differences("configuration keys", &found, &listed, "what the monitor's parser accepts") {
        panic!("{failure}");
    }
    eprintln!("{} configuration keys: each in {PAGE}", found.len());
}

// --- Metrics ---------------------------------------------------------------------

#[test]
fn every_metric_the_monitor_serves_is_in_the_reference_and_every_one_listed_is_served() {
    let sim = Sim::new();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let served: BTreeSet<String> = monitor.metrics().types.keys().cloned().collect();
    drop(monitor.stop());
    assert!(!served.is_empty(), "the monitor served no metric family");

    let page = reference();
    let rows = table_rows(section(&page, "Metrics"));
    let mut failures = String::new();
    let mut listed = BTreeSet::new();
    let mut always = BTreeSet::new();
    for cells in &rows {
        let name = code_spans(cells[0]).first().map(|n| n.to_string()).unwrap_or_default();
        match cells.get(3).copied() {
            Some("always") => {
                always.insert(name.clone());
            }
            Some(when) if when.starts_with("when ") => {}
            other => failures += &format!("{PAGE}: metric {name}: its `served` cell is {other:?}, not `always` or `when …`\n"),
        }
        if !listed.insert(name.clone()) {
            failures += &format!("{PAGE}: metric {name} is listed twice\n");
        }
    }
    let missing: Vec<&String> = served.difference(&listed).collect();
    if !missing.is_empty() {
        failures += &format!("metrics the monitor serves that {PAGE} does not list: {missing:?}\n");
    }
    let absent: Vec<&String> = always.difference(&served).collect();
    if !absent.is_empty() {
        failures += &format!(
            "metrics {PAGE} lists as served `always` that the monitor did not serve (gone, or served only \
             sometimes: then say when in the `served` cell): {absent:?}\n"
        );
    }
    assert!(failures.is_empty(), "{failures}");
    eprintln!("{} metric families served: each in {PAGE}", served.len());
}

// --- Variables ---------------------------------------------------------------------

/// The `GPUSLICE_` names that appear as string literals in the shim's
/// sources, outside each file's unit tests (everything from its first
/// unindented `#[cfg(test)]` on).
fn shim_variables() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![repo_root().join("shim/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let code = text.split("\n#[cfg(test)]\n").next().unwrap_or("");
            for (at, _) in code.match_indices("\"GPUSLICE_") {
                let name: String =
                    code[at + 1..].chars().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_').collect();
                // `"GPUSLICE_"` alone is the prefix the shim checks names against.
                if !name.ends_with('_') {
                    names.insert(name);
                }
            }
        }
    }
    names
}

#[test]
fn every_variable_the_shim_reads_is_in_the_reference() {
    let found = shim_variables();
    assert!(found.contains("GPUSLICE_MEMORY_LIMIT"), "no GPUSLICE_ variable found in shim/src: {found:?}");
    let page = reference();
    let variables = section(&page, "Environment variables");
    let listed: BTreeSet<String> = table_rows(variables)
        .iter()
        .flat_map(|cells| code_spans(cells[0]))
        .filter(|name| name.starts_with("GPUSLICE_"))
        .map(str::to_string)
        .collect();
    if let Some(failure) = differences("GPUSLICE_ variables", &found, &listed, "shim/src") {
        panic!("{failure}");
    }
    eprintln!("{} GPUSLICE_ variables: each in {PAGE}", found.len());
}
