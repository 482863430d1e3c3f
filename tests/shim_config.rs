//! Configuration under the shim on simgpu: every accepted form of the cap
//! (sizes, per-device lists, HAMi-core's variables), fail-closed on invalid
//! values, and ledger files that are not ours left untouched.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Output, Sim, GIB, MIB};
use std::path::Path;

const TENANT: &str = "conf";

fn sim() -> Sim {
    Sim::new().memory("16GiB").context_memory("64MiB").shim().tenant(TENANT)
}

fn totals(sim: &Sim, envs: &[(&str, &str)], devices: &[u32]) -> Output {
    let mut cmd = sim.c("memctl");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.arg("init");
    for d in devices {
        cmd.arg(format!("totalmem:{d}"));
    }
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("init", cu::SUCCESS);
    out
}

#[test]
fn sizes_in_every_accepted_form_set_the_cap() {
    let cases: &[(&str, &str, u64)] = &[
        ("GPUSLICE_MEMORY_LIMIT", "8GiB", 8 * GIB),
        ("GPUSLICE_MEMORY_LIMIT", "8G", 8 * GIB),
        ("GPUSLICE_MEMORY_LIMIT", "512MiB", 512 * MIB),
        ("GPUSLICE_MEMORY_LIMIT", "1.5GiB", 1536 * MIB),
        ("GPUSLICE_MEMORY_LIMIT", "3000m", 3000 * MIB),
        ("GPUSLICE_MEMORY_LIMIT", "1073741824B", GIB),
        ("GPUSLICE_MEMORY_LIMIT", "8Gi", 8 * GIB),
        ("GPUSLICE_MEMORY_LIMIT", "500Mi", 500 * MIB),
        ("CUDA_DEVICE_MEMORY_LIMIT", "3000m", 3000 * MIB),
        // HAMi-core's grammar: a plain number is bytes.
        ("CUDA_DEVICE_MEMORY_LIMIT", "1073741824", GIB),
        ("CUDA_DEVICE_MEMORY_LIMIT", "2g", 2 * GIB),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "700m", 700 * MIB),
    ];
    for &(var, value, bytes) in cases {
        let sim = sim();
        let out = totals(&sim, &[(var, value)], &[0]);
        assert_eq!(out.u64("totalmem.bytes"), bytes, "{var}={value}\n{out}");
    }
}

#[test]
fn per_device_caps_and_precedence() {
    // GPUSLICE_MEMORY_LIMIT as a list.
    let sim = sim().devices(2);
    let out = totals(&sim, &[("GPUSLICE_MEMORY_LIMIT", "0=512MiB,1=1GiB")], &[0, 1]);
    assert_eq!(out.all("totalmem.bytes"), [(512 * MIB).to_string(), GIB.to_string()], "{out}");
    // HAMi's per-device variable overrides its all-device one.
    let sim = self::sim().devices(2);
    let out = totals(&sim, &[("CUDA_DEVICE_MEMORY_LIMIT", "3000m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")], &[0, 1]);
    assert_eq!(out.all("totalmem.bytes"), [(3000 * MIB).to_string(), GIB.to_string()], "{out}");
    // gpuslice's own name wins over HAMi's.
    let sim = self::sim();
    let out = totals(&sim, &[("CUDA_DEVICE_MEMORY_LIMIT", "3000m"), ("GPUSLICE_MEMORY_LIMIT", "1GiB")], &[0]);
    assert_eq!(out.u64("totalmem.bytes"), GIB, "{out}");
}

#[test]
fn invalid_values_fail_closed_and_name_the_variable() {
    use ledger::units::{MEMORY_LIMIT_FORMAT, SIZE_FORMAT, TENANT_FORMAT};
    // (variable, value, what stderr must say is accepted)
    let cases: &[(&str, &str, &str)] = &[
        ("GPUSLICE_MEMORY_LIMIT", "4GG", MEMORY_LIMIT_FORMAT),
        ("GPUSLICE_MEMORY_LIMIT", "lots", MEMORY_LIMIT_FORMAT),
        ("GPUSLICE_MEMORY_LIMIT", "0=1GiB,x=2GiB", MEMORY_LIMIT_FORMAT),
        ("GPUSLICE_MEMORY_LIMIT", "-1GiB", MEMORY_LIMIT_FORMAT),
        // Three bytes is never what `3` meant.
        ("GPUSLICE_MEMORY_LIMIT", "3", "write 3GiB, 3MiB or another unit, or 3B if you mean bytes"),
        ("GPUSLICE_MEMORY_LIMIT", "0=1073741824", "or 1073741824B if you mean bytes"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "lots", SIZE_FORMAT),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "1q", SIZE_FORMAT),
        ("GPUSLICE_TENANT", "bad/name", TENANT_FORMAT),
        ("GPUSLICE_LOG", "loud", "debug"),
    ];
    for &(var, value, accepted) in cases {
        let sim = sim();
        let mut cmd = sim.c("memctl");
        cmd.env(var, value).args(["init", "ctx", "alloc:a:1M", "info", "nvml"]);
        let out = sim.run(&mut cmd);
        out.assert_success();
        // The line names the variable, shows the value, and says what is accepted.
        out.assert_fails_closed("a", &[var, value, accepted]);
    }
}

/// A ledger file for `TENANT` in `sim`'s ledger directory, made by a real
/// process of the tenant.
fn real_ledger(sim: &Sim) -> Vec<u8> {
    let out = sim.run(sim.c("memctl").env("GPUSLICE_MEMORY_LIMIT", "1GiB").args(["init", "ctx", "alloc:a:1M"]));
    out.assert_success().assert_rc("a", cu::SUCCESS);
    std::fs::read(ledger::tenant_path(&sim.ledger_dir(), TENANT)).expect("the tenant's ledger")
}

fn header_offset(field: usize) -> usize {
    std::mem::offset_of!(ledger::layout::LedgerFile, header) + field
}

fn assert_refused_and_untouched(sim: &Sim, path: &Path, what: &str) {
    let before = std::fs::read(path).expect("ledger file");
    let out = sim.run(sim.c("memctl").env("GPUSLICE_MEMORY_LIMIT", "1GiB").args(["init", "ctx", "alloc:a:1M", "info"]));
    eprintln!("{what}:");
    out.assert_success().assert_fails_closed("a", &[&path.display().to_string()]);
    assert!(std::fs::read(path).expect("ledger file") == before, "{what}: the file must not be rewritten\n{out}");
}

#[test]
fn foreign_truncated_and_corrupt_ledgers_are_refused_and_never_rewritten() {
    let path_of = |sim: &Sim| ledger::tenant_path(&sim.ledger_dir(), TENANT);

    let sim = sim();
    std::fs::write(path_of(&sim), b"this is a text file, not a ledger\n".repeat(200)).unwrap();
    assert_refused_and_untouched(&sim, &path_of(&sim), "not a ledger");

    let sim = self::sim();
    std::fs::write(path_of(&sim), b"").unwrap();
    assert_refused_and_untouched(&sim, &path_of(&sim), "empty file");

    let sim = self::sim();
    let mut bytes = real_ledger(&sim);
    bytes.truncate(bytes.len() / 2);
    std::fs::write(path_of(&sim), &bytes).unwrap();
    assert_refused_and_untouched(&sim, &path_of(&sim), "truncated ledger");

    let sim = self::sim();
    let mut bytes = real_ledger(&sim);
    let at = header_offset(std::mem::offset_of!(ledger::layout::Header, layout_version));
    let version = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
    bytes[at..at + 4].copy_from_slice(&(version + 1).to_ne_bytes());
    std::fs::write(path_of(&sim), &bytes).unwrap();
    assert_refused_and_untouched(&sim, &path_of(&sim), "ledger of another layout version");

    let sim = self::sim();
    let mut bytes = real_ledger(&sim);
    let at = header_offset(std::mem::offset_of!(ledger::layout::Header, tenant_name));
    bytes[at] = b'/';
    std::fs::write(path_of(&sim), &bytes).unwrap();
    assert_refused_and_untouched(&sim, &path_of(&sim), "corrupt tenant name");
}

#[test]
fn gpuslice_run_applies_its_options() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB");
    let memctl = gpuslice_tests::compile_c("memctl");
    let dir = sim.ledger_dir();
    let out = sim.run(
        sim.gpuslice().args(["run", "--sim", "--memory", "768MiB", "--tenant", "cli", "--dir"]).arg(&dir).arg("--").arg(memctl).args([
            "init",
            "ctx",
            "info",
            "alloc:over:free+1",
            "alloc:all:free",
            "hold",
        ]),
    );
    out.assert_success();
    assert_eq!(out.u64("info.total"), 768 * MIB, "{out}");
    assert_eq!(out.u64("info.free"), 704 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS);
    assert!(ledger::tenant_path(&dir, "cli").is_file(), "the ledger lives in --dir");
    assert_eq!(ledger_view::memory_limit_bytes(&dir, "cli", 0), 768 * MIB);
}

#[test]
fn the_shim_logs_to_stderr_only() {
    let sim = sim().memory_limit("1GiB");
    let script = ["init", "ctx", "alloc:a:100M", "alloc:over:2G", "free:a", "nvml"];
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_LOG", "debug").args(script);
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("a", cu::SUCCESS).assert_rc("over", cu::OUT_OF_MEMORY);
    // Every stdout line is the program's own key=value output.
    let program_keys = ["init", "ctx", "a", "over", "free.a", "nvmlinit", "nvml", "nvml.total", "nvml.used", "nvml.free", "done"];
    for line in out.stdout.lines() {
        let key = line.split('=').next().unwrap_or_default();
        assert!(program_keys.contains(&key), "a line on stdout that the program did not print: {line:?}\n{out}");
    }
    assert!(!out.stderr.trim().is_empty(), "GPUSLICE_LOG=debug must log something to stderr\n{out}");
}

#[test]
fn each_device_has_its_own_cap() {
    let sim = Sim::new().devices(2).memory("4GiB").context_memory("64MiB").memory_limit("0=512MiB,1=1GiB").tenant("perdev");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx:0",
        "info:d0",
        "alloc:a:free",
        "alloc:over:1",
        "ctx:1",
        "info:d1",
        "alloc:b:free",
        "alloc:over1:1",
    ]));
    out.assert_success();
    assert_eq!(out.u64("d0.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("d0.free"), 448 * MIB, "{out}");
    assert_eq!(out.u64("d1.total"), GIB, "device 1's own cap\n{out}");
    assert_eq!(out.u64("d1.free"), GIB - 64 * MIB, "device 0's usage is not device 1's\n{out}");
    out.assert_rc("a", cu::SUCCESS).assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("b", cu::SUCCESS).assert_rc("over1", cu::OUT_OF_MEMORY);
}

#[test]
fn device_indices_are_the_ordinals_after_cuda_visible_devices() {
    // Physical device 1 is the process's device 0: the cap for index 0 applies
    // to it, in gpuslice's and HAMi's variables alike.
    for (variable, value) in [("GPUSLICE_MEMORY_LIMIT", "0=512MiB,1=1GiB"), ("CUDA_DEVICE_MEMORY_LIMIT_0", "512m")] {
        let sim = Sim::new()
            .devices(2)
            .memory("4GiB")
            .context_memory("64MiB")
            .shim()
            .tenant("visible")
            .env(variable, value)
            .env("CUDA_VISIBLE_DEVICES", "1");
        let out = sim.run(sim.c("memctl").args(["init", "ctx:0", "info", "alloc:a:100M"]));
        out.assert_success();
        assert_eq!(out.u64("info.total"), 512 * MIB, "{variable}={value}\n{out}");
        let devices = ledger_view::open(&sim.ledger_dir(), "visible").devices();
        assert_eq!(devices.len(), 1, "only the visible device is registered\n{out}");
        assert_eq!(ledger_view::open(&sim.ledger_dir(), "visible").memory_limit_bytes(0), 512 * MIB, "{out}");
    }
}

#[test]
fn a_refused_nvml_memory_query_leaves_the_callers_record_untouched() {
    let sim = Sim::new().memory("4GiB").shim().tenant("nvmlbad").env("GPUSLICE_MEMORY_LIMIT", "4GG");
    let out = sim.run(sim.c("memctl").args(["nvml", "nvml2"]));
    assert_eq!(out.i64("nvml"), 4, "NVML_ERROR_NO_PERMISSION\n{out}");
    assert_eq!(out.u64("nvml.total"), 0, "an error writes nothing\n{out}");
    assert_eq!(out.i64("nvml2"), 4, "{out}");
    assert_eq!(out.u64("nvml2.total"), 0, "{out}");
}
