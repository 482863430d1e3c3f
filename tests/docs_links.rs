//! Every relative link in the README and the guides leads somewhere: the
//! file or directory it names exists, and a `#anchor` names a heading of
//! the page it points to (as GitHub makes anchors of headings). Links to
//! other sites are not followed. Text in code blocks and code spans is not
//! read for links.

use gpuslice_tests::repo_root;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pages checked: the README, the guides in `docs/`, and the deployment
/// guides.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "deploy", "deploy/kubernetes", "deploy/slurm"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut found: Vec<PathBuf> =
            entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
        found.sort();
        pages.extend(found);
    }
    pages
}

/// The lines of a Markdown page outside fenced code blocks, with their
/// numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => lines.push((number + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` with its code spans blanked out.
fn without_code_spans(line: &str) -> String {
    line.split('`').enumerate().map(|(i, part)| if i % 2 == 0 { part } else { "" }).collect::<Vec<_>>().join("``")
}

/// The targets of the inline links and images (`[text](target)`) on a line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        // `[text](target "title")`: the target ends at the first space.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !anchors.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    anchors
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root()).unwrap_or(path).display().to_string()
}

#[test]
fn every_relative_link_resolves_to_a_file_and_every_anchor_to_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    let pages = pages();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("cannot read {}: {e}", page.display()));
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
                let file = if path.is_empty() { page.clone() } else { page.parent().expect("a page's directory").join(path) };
                let at = format!("{}:{number}: ({target})", relative(page));
                if !file.exists() {
                    broken.push(format!("{at}: {} does not exist", relative(&file)));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    broken.push(format!("{at}: an anchor into {}, which is not a Markdown page", relative(&file)));
                    continue;
                }
                let target_text = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{at}: {} has no heading whose anchor is #{anchor}", relative(&file)));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
    assert!(checked > 50, "only {checked} links found in {} pages: is the link parser reading them?", pages.len());
    eprintln!("{checked} relative links in {} pages, each resolved", pages.len());
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let page = "# gpuslice\n## Quick start\n## Configuration file (monitor.toml)\n```\n# not a heading\n```\n## NVIDIA's device plugin\n## Quick start\n### `gpuslice run`\n";
    let expected = ["gpuslice", "quick-start", "configuration-file-monitortoml", "nvidias-device-plugin", "quick-start-1", "gpuslice-run"];
    assert_eq!(anchors(page), expected.iter().map(|a| a.to_string()).collect());
    assert_eq!(link_targets("see [a](b.md#c), `[x](not-a-link)` and ![img](d.svg \"title\")"), ["b.md#c", "d.svg"]);
}
