//! The benchmark tables in `docs/benchmarks.md` are the ones
//! `scripts/bench.sh` wrote: each block between its markers is, line for
//! line, the copy the script keeps of its last run in `benches/`. A figure
//! typed into the page by hand, or a run whose results were not kept, fails
//! here.

use gpuslice_tests::repo_root;

const PAGE: &str = "docs/benchmarks.md";

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text between `<!-- bench.sh{name}: begin -->` and its end marker.
fn block<'a>(page: &'a str, name: &str) -> &'a str {
    let (begin, end) = (format!("<!-- bench.sh{name}: begin -->\n"), format!("\n<!-- bench.sh{name}: end -->"));
    let (_, after) = page.split_once(&begin).unwrap_or_else(|| panic!("{PAGE} has no {begin:?} marker"));
    let (block, _) = after.split_once(&end).unwrap_or_else(|| panic!("{PAGE} has no {end:?} marker"));
    block
}

#[test]
fn the_benchmark_table_is_the_last_runs() {
    let page = read(PAGE);
    let results = read("benches/results.md");
    assert_eq!(
        block(&page, "").trim_end(),
        results.trim_end(),
        "{PAGE}'s benchmark table differs from benches/results.md: run `bash scripts/bench.sh`"
    );
    // What the script writes: the header, a separator, the nine rows, then
    // simgpu's figures and the machine and load it was measured under.
    let rows: Vec<&str> = results.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 10, "a header and nine rows\n{results}");
    assert!(results.contains("simgpu's own figures") && results.contains("load average"), "{results}");
}

#[test]
fn the_launch_path_table_is_the_last_runs() {
    let page = read(PAGE);
    let results = read("benches/results-launch-path.md");
    assert_eq!(
        block(&page, " launch-path").trim_end(),
        results.trim_end(),
        "{PAGE}'s launch-path table differs from benches/results-launch-path.md: run \
         `BENCH_ONLY=launch_path bash scripts/bench.sh`"
    );
    assert!(results.contains("load average before") && results.contains("load average after"), "{results}");
}
