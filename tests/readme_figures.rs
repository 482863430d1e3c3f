//! The README's benchmark table is the one `scripts/bench.sh` wrote: the
//! block between its markers is, line for line, `benches/results.md`, the
//! copy the script keeps of its last run. A figure typed into the README by
//! hand, or a run whose results were not kept, fails here.

use gpuslice_tests::repo_root;

#[test]
fn the_readme_benchmark_table_is_the_last_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let results = std::fs::read_to_string(repo_root().join("benches/results.md")).unwrap();
    let (_, after) = readme.split_once("<!-- bench.sh: begin -->\n").expect("README.md has the bench.sh begin marker");
    let (block, _) = after.split_once("\n<!-- bench.sh: end -->").expect("README.md has the bench.sh end marker");
    assert_eq!(
        block.trim_end(),
        results.trim_end(),
        "README.md's benchmark table differs from benches/results.md: run `bash scripts/bench.sh`"
    );
    // What the script writes: the header, a separator, the nine rows, then
    // simgpu's figures and the machine and load it was measured under.
    let rows: Vec<&str> = results.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 10, "a header and nine rows\n{results}");
    assert!(results.contains("simgpu's own figures") && results.contains("load average"), "{results}");
}
