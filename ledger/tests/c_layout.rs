//! `include/gpuslice.h` against the Rust layout. The header is generated
//! from `ledger/src/layout.rs` by [`c_header::render`]; these tests fail when
//! the file on disk is not the generated text, when C compiles the generated
//! text to another layout than Rust's, or when C cannot read a ledger file
//! this crate made.

mod c_header;

use ledger::{Ledger, PolicySource};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/gpuslice.h")
}

/// `include/gpuslice.h` is exactly what the Rust layout renders; with
/// `GPUSLICE_BLESS=1` the test writes the rendered text there instead.
#[test]
fn the_c_header_is_generated_from_the_rust_layout() {
    let generated = c_header::render();
    let path = header_path();
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk == generated {
        return;
    }
    if std::env::var_os("GPUSLICE_BLESS").is_some_and(|v| v == "1") {
        // Through a rename, so that a test compiling the header never reads half of it.
        let temporary = path.with_extension(format!("h.{}", std::process::id()));
        std::fs::write(&temporary, &generated).unwrap();
        std::fs::rename(&temporary, &path).unwrap();
        eprintln!("rewrote {}", path.display());
        return;
    }
    panic!(
        "include/gpuslice.h is not the header generated from ledger/src/layout.rs \
         (- on disk, + generated; line numbers of each):\n{}\n\
         If the Rust layout is right, regenerate the header with:\n    {}\n",
        line_diff(&on_disk, &generated),
        c_header::BLESS_COMMAND
    );
}

/// The lines only in `old` (`-`) and only in `new` (`+`), each with its line
/// number, from a longest common subsequence of the two.
fn line_diff(old: &str, new: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    // common[i][j]: lines in a longest common subsequence of old[i..] and new[j..].
    let mut common = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            common[i][j] = if old[i] == new[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut diff) = (0, 0, String::new());
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            (i, j) = (i + 1, j + 1);
        } else if i < old.len() && (j == new.len() || common[i + 1][j] >= common[i][j + 1]) {
            diff += &format!("-{:>4} {}\n", i + 1, old[i]);
            i += 1;
        } else {
            diff += &format!("+{:>4} {}\n", j + 1, new[j]);
            j += 1;
        }
    }
    diff
}

/// Reads a ledger file through `gpuslice.h`, printing `name value` lines.
const C_READER: &str = r#"
#define P(name, value) printf("%s %" PRIu64 "\n", name, (uint64_t)(value))

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s LEDGER-FILE\n", argv[0]); return 2; }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror("open"); return 1; }
    const struct gpuslice_ledger *l = mmap(NULL, GPUSLICE_FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (l == MAP_FAILED) { perror("mmap"); return 1; }
    P("file.magic_ok", __atomic_load_n(&l->header.magic, __ATOMIC_ACQUIRE) == GPUSLICE_MAGIC);
    P("file.initialised_ok", __atomic_load_n(&l->header.initialised, __ATOMIC_ACQUIRE) == GPUSLICE_INITIALISED);
    printf("file.tenant %s\n", l->header.tenant_name);
    P("file.device1.total_memory_bytes", l->header.devices[1].total_memory_bytes);
    P("file.device1.uuid0", l->header.devices[1].uuid[0]);
    P("file.policy1.memory_limit_bytes", __atomic_load_n(&l->policy.devices[1].memory_limit_bytes, __ATOMIC_ACQUIRE));
    P("file.policy1.policy_source", l->policy.devices[1].policy_source);
    P("file.usage1.used_bytes", __atomic_load_n(&l->usage.devices[1].used_bytes, __ATOMIC_ACQUIRE));
    P("file.usage1.alloc_denied_total", l->usage.devices[1].alloc_denied_total);
    /* The compute page found from the file alone, as a reader of any build would. */
    uint32_t compute_offset = l->header.compute_offset;
    P("file.compute_offset", compute_offset);
    if (compute_offset != 0) {
        const struct gpuslice_compute_page *compute = (const void *)((const char *)l + compute_offset);
        P("file.compute1.launches_total", __atomic_load_n(&compute->devices[1].launches_total, __ATOMIC_ACQUIRE));
    }
    for (int i = 0; i < GPUSLICE_MAX_SLOTS; i++) {
        uint64_t word = __atomic_load_n(&l->slots[i].state_word, __ATOMIC_ACQUIRE);
        if ((uint32_t)word == GPUSLICE_SLOT_ALIVE) {
            P("file.alive_slot.index", i);
            P("file.alive_slot.ns_pid", l->slots[i].ns_pid);
            P("file.alive_slot.bytes1", l->slots[i].bytes[1]);
        }
    }
    return 0;
}
"#;

/// A temporary directory of this test process, removed on drop.
struct BuildDir(PathBuf);

impl BuildDir {
    fn new() -> BuildDir {
        let dir = std::env::temp_dir().join(format!("gpuslice-c-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        BuildDir(dir)
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles the generated header, with the checks of what Rust says about
/// it and the reader, and runs the reader on `ledger_file`.
fn run_c_reader(build: &BuildDir, ledger_file: &Path) -> BTreeMap<String, String> {
    let (header, source, binary) = (build.0.join("gpuslice.h"), build.0.join("layout.c"), build.0.join("layout"));
    std::fs::write(&header, c_header::render()).unwrap();
    let program = format!(
        "#include <fcntl.h>\n#include <inttypes.h>\n#include <stdio.h>\n#include <sys/mman.h>\n#include <unistd.h>\n\
         #include \"gpuslice.h\"\n\n{}{C_READER}",
        c_header::static_checks()
    );
    std::fs::write(&source, program).unwrap();
    let compiled = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&binary)
        .arg(&source)
        .arg("-I")
        .arg(&build.0)
        .output()
        .expect("gcc is needed to check the C header");
    assert!(
        compiled.status.success(),
        "C does not see the layout Rust has ({} with the checks of ledger/tests/c_header/mod.rs):\n{}",
        source.display(),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let output = Command::new(&binary).arg(ledger_file).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

#[test]
fn c_sees_every_field_and_constant_as_rust_does_and_reads_a_real_ledger() {
    let build = BuildDir::new();
    let ledger = Ledger::open_or_create(&build.0.join("ledger"), "c-reader").unwrap();
    ledger.device_index(b"first-device-id!", 1 << 30).unwrap();
    let dev = ledger.device_index(b"Xecond-device-id", 24 << 30).unwrap();
    ledger.set_memory_limit_bytes(dev, 5 << 20, PolicySource::Monitor);
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 3 << 20).unwrap();
    assert!(ledger.try_reserve(&slot, dev, 3 << 20).is_err());
    ledger.layout().compute.devices[dev].launches_total.store(29, std::sync::atomic::Ordering::Release);

    let c = run_c_reader(&build, ledger.path());
    let expect = |name: &str, value: String| assert_eq!(c.get(name), Some(&value), "{name}");
    expect("file.magic_ok", "1".into());
    expect("file.initialised_ok", "1".into());
    expect("file.tenant", "c-reader".into());
    expect("file.device1.total_memory_bytes", (24u64 << 30).to_string());
    expect("file.device1.uuid0", (b'X').to_string());
    expect("file.policy1.memory_limit_bytes", (5u64 << 20).to_string());
    expect("file.policy1.policy_source", PolicySource::Monitor.as_u32().to_string());
    expect("file.usage1.used_bytes", (3u64 << 20).to_string());
    expect("file.usage1.alloc_denied_total", "1".into());
    expect("file.compute_offset", ledger::layout::COMPUTE_OFFSET.to_string());
    expect("file.compute1.launches_total", "29".into());
    expect("file.alive_slot.index", slot.index().to_string());
    expect("file.alive_slot.ns_pid", std::process::id().to_string());
    expect("file.alive_slot.bytes1", (3u64 << 20).to_string());
    ledger.release_slot(slot);
}

#[test]
fn a_line_diff_shows_changed_lines_with_their_numbers() {
    let diff = line_diff("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n");
    assert_eq!(diff, "-   2 b\n+   2 B\n+   5 e\n");
    assert_eq!(line_diff("same\n", "same\n"), "");
}
