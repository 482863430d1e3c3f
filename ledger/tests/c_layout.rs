//! Checks `include/gpuslice.h` against the Rust layout: a C program built
//! from the header prints every size, offset and constant, and reads a ledger
//! file made by this crate; both must agree with what Rust says.

use ledger::layout::{self, *};
use ledger::{Ledger, PolicySource};
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// (name printed by the C program, value according to Rust).
fn rust_values() -> Vec<(&'static str, u64)> {
    macro_rules! off {
        ($c:literal, $t:ty, $f:ident) => {
            ($c, offset_of!($t, $f) as u64)
        };
    }
    vec![
        ("sizeof_device", size_of::<DeviceRecord>() as u64),
        off!("device.state", DeviceRecord, state),
        off!("device.uuid", DeviceRecord, uuid),
        off!("device.total_memory_bytes", DeviceRecord, total_memory_bytes),
        ("sizeof_header", size_of::<Header>() as u64),
        off!("header.magic", Header, magic),
        off!("header.layout_version", Header, layout_version),
        off!("header.header_bytes", Header, header_bytes),
        off!("header.policy_offset", Header, policy_offset),
        off!("header.usage_offset", Header, usage_offset),
        off!("header.slots_offset", Header, slots_offset),
        off!("header.slot_bytes", Header, slot_bytes),
        off!("header.max_devices", Header, max_devices),
        off!("header.max_slots", Header, max_slots),
        off!("header.file_bytes", Header, file_bytes),
        off!("header.initialised", Header, initialised),
        off!("header.created_unix_s", Header, created_unix_s),
        off!("header.tenant_name", Header, tenant_name),
        off!("header.devices", Header, devices),
        ("sizeof_policy", size_of::<PolicyRecord>() as u64),
        off!("policy.memory_limit_bytes", PolicyRecord, memory_limit_bytes),
        off!("policy.policy_source", PolicyRecord, policy_source),
        off!("policy.compute_share_ratio_e4", PolicyRecord, compute_share_ratio_e4),
        off!("policy.compute_limit_ratio_e4", PolicyRecord, compute_limit_ratio_e4),
        off!("policy.priority", PolicyRecord, priority),
        off!("policy.policy_epoch", PolicyRecord, policy_epoch),
        ("sizeof_policy_page", size_of::<PolicyPage>() as u64),
        ("sizeof_usage", size_of::<UsageRecord>() as u64),
        off!("usage.used_bytes", UsageRecord, used_bytes),
        off!("usage.alloc_denied_total", UsageRecord, alloc_denied_total),
        off!("usage.context_overhead_bytes", UsageRecord, context_overhead_bytes),
        off!("usage.launches_total", UsageRecord, launches_total),
        off!("usage.throttled_ns_total", UsageRecord, throttled_ns_total),
        off!("usage.compute_tokens", UsageRecord, compute_tokens),
        off!("usage.compute_refill_ns", UsageRecord, compute_refill_ns),
        ("sizeof_usage_page", size_of::<UsagePage>() as u64),
        off!("usage_page.reclaimed_processes_total", UsagePage, reclaimed_processes_total),
        off!("usage_page.slots_claimed_total", UsagePage, slots_claimed_total),
        ("sizeof_slot", size_of::<SlotRecord>() as u64),
        off!("slot.state_word", SlotRecord, state_word),
        off!("slot.pid", SlotRecord, pid),
        off!("slot.ns_pid", SlotRecord, ns_pid),
        off!("slot.pidns_inode", SlotRecord, pidns_inode),
        off!("slot.start_time_ticks", SlotRecord, start_time_ticks),
        off!("slot.in_flight_word", SlotRecord, in_flight_word),
        off!("slot.bytes", SlotRecord, bytes),
        ("sizeof_ledger", FILE_BYTES as u64),
        ("policy_offset", POLICY_OFFSET as u64),
        ("usage_offset", USAGE_OFFSET as u64),
        ("slots_offset", SLOTS_OFFSET as u64),
        ("slot_lock_offset_5", ledger::slot_lock_offset(5)),
        ("MAX_DEVICES", MAX_DEVICES as u64),
        ("MAX_SLOTS", MAX_SLOTS as u64),
        ("UNLIMITED", UNLIMITED),
        ("MAGIC", MAGIC),
        ("LAYOUT_VERSION", LAYOUT_VERSION as u64),
        ("IN_FLIGHT_BEGIN", layout::in_flight::BEGIN),
        ("IN_FLIGHT_FINISH", layout::in_flight::FINISH),
        ("INITIALISED", INITIALISED as u64),
        ("DEVICE_READY", layout::device_state::READY as u64),
        ("SLOT_ALIVE", layout::slot_state::ALIVE as u64),
        ("SLOT_RECLAIMING", layout::slot_state::RECLAIMING as u64),
        ("POLICY_MONITOR", layout::policy_source::MONITOR as u64),
    ]
}

const C_PROGRAM: &str = r#"
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include "gpuslice.h"

#define P(name, value) printf("%s %" PRIu64 "\n", name, (uint64_t)(value))
#define OFF(name, type, field) P(name, offsetof(struct type, field))

int main(int argc, char **argv) {
    P("sizeof_device", sizeof(struct gpuslice_device));
    OFF("device.state", gpuslice_device, state);
    OFF("device.uuid", gpuslice_device, uuid);
    OFF("device.total_memory_bytes", gpuslice_device, total_memory_bytes);
    P("sizeof_header", sizeof(struct gpuslice_header));
    OFF("header.magic", gpuslice_header, magic);
    OFF("header.layout_version", gpuslice_header, layout_version);
    OFF("header.header_bytes", gpuslice_header, header_bytes);
    OFF("header.policy_offset", gpuslice_header, policy_offset);
    OFF("header.usage_offset", gpuslice_header, usage_offset);
    OFF("header.slots_offset", gpuslice_header, slots_offset);
    OFF("header.slot_bytes", gpuslice_header, slot_bytes);
    OFF("header.max_devices", gpuslice_header, max_devices);
    OFF("header.max_slots", gpuslice_header, max_slots);
    OFF("header.file_bytes", gpuslice_header, file_bytes);
    OFF("header.initialised", gpuslice_header, initialised);
    OFF("header.created_unix_s", gpuslice_header, created_unix_s);
    OFF("header.tenant_name", gpuslice_header, tenant_name);
    OFF("header.devices", gpuslice_header, devices);
    P("sizeof_policy", sizeof(struct gpuslice_policy));
    OFF("policy.memory_limit_bytes", gpuslice_policy, memory_limit_bytes);
    OFF("policy.policy_source", gpuslice_policy, policy_source);
    OFF("policy.compute_share_ratio_e4", gpuslice_policy, compute_share_ratio_e4);
    OFF("policy.compute_limit_ratio_e4", gpuslice_policy, compute_limit_ratio_e4);
    OFF("policy.priority", gpuslice_policy, priority);
    OFF("policy.policy_epoch", gpuslice_policy, policy_epoch);
    P("sizeof_policy_page", sizeof(struct gpuslice_policy_page));
    P("sizeof_usage", sizeof(struct gpuslice_usage));
    OFF("usage.used_bytes", gpuslice_usage, used_bytes);
    OFF("usage.alloc_denied_total", gpuslice_usage, alloc_denied_total);
    OFF("usage.context_overhead_bytes", gpuslice_usage, context_overhead_bytes);
    OFF("usage.launches_total", gpuslice_usage, launches_total);
    OFF("usage.throttled_ns_total", gpuslice_usage, throttled_ns_total);
    OFF("usage.compute_tokens", gpuslice_usage, compute_tokens);
    OFF("usage.compute_refill_ns", gpuslice_usage, compute_refill_ns);
    P("sizeof_usage_page", sizeof(struct gpuslice_usage_page));
    OFF("usage_page.reclaimed_processes_total", gpuslice_usage_page, reclaimed_processes_total);
    OFF("usage_page.slots_claimed_total", gpuslice_usage_page, slots_claimed_total);
    P("sizeof_slot", sizeof(struct gpuslice_slot));
    OFF("slot.state_word", gpuslice_slot, state_word);
    OFF("slot.pid", gpuslice_slot, pid);
    OFF("slot.ns_pid", gpuslice_slot, ns_pid);
    OFF("slot.pidns_inode", gpuslice_slot, pidns_inode);
    OFF("slot.start_time_ticks", gpuslice_slot, start_time_ticks);
    OFF("slot.in_flight_word", gpuslice_slot, in_flight_word);
    OFF("slot.bytes", gpuslice_slot, bytes);
    P("sizeof_ledger", GPUSLICE_FILE_BYTES);
    P("policy_offset", GPUSLICE_POLICY_OFFSET);
    P("usage_offset", GPUSLICE_USAGE_OFFSET);
    P("slots_offset", GPUSLICE_SLOTS_OFFSET);
    P("slot_lock_offset_5", GPUSLICE_SLOT_LOCK_OFFSET(5));
    P("MAX_DEVICES", GPUSLICE_MAX_DEVICES);
    P("MAX_SLOTS", GPUSLICE_MAX_SLOTS);
    P("UNLIMITED", GPUSLICE_UNLIMITED);
    P("MAGIC", GPUSLICE_MAGIC);
    P("LAYOUT_VERSION", GPUSLICE_LAYOUT_VERSION);
    P("IN_FLIGHT_BEGIN", GPUSLICE_IN_FLIGHT_BEGIN);
    P("IN_FLIGHT_FINISH", GPUSLICE_IN_FLIGHT_FINISH);
    P("INITIALISED", GPUSLICE_INITIALISED);
    P("DEVICE_READY", GPUSLICE_DEVICE_READY);
    P("SLOT_ALIVE", GPUSLICE_SLOT_ALIVE);
    P("SLOT_RECLAIMING", GPUSLICE_SLOT_RECLAIMING);
    P("POLICY_MONITOR", GPUSLICE_POLICY_MONITOR);

    if (argc > 1) {
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
        for (int i = 0; i < GPUSLICE_MAX_SLOTS; i++) {
            uint64_t word = __atomic_load_n(&l->slots[i].state_word, __ATOMIC_ACQUIRE);
            if ((uint32_t)word == GPUSLICE_SLOT_ALIVE) {
                P("file.alive_slot.index", i);
                P("file.alive_slot.ns_pid", l->slots[i].ns_pid);
                P("file.alive_slot.bytes1", l->slots[i].bytes[1]);
            }
        }
    }
    return 0;
}
"#;

fn build_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuslice-c-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run_c_program(ledger_file: &Path) -> BTreeMap<String, String> {
    let dir = build_dir();
    let source = dir.join("layout.c");
    let binary = dir.join("layout");
    std::fs::write(&source, C_PROGRAM).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include");
    let compiled = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&binary)
        .arg(&source)
        .arg("-I")
        .arg(&include)
        .output()
        .expect("gcc is needed to check include/gpuslice.h");
    assert!(compiled.status.success(), "gpuslice.h does not compile:\n{}", String::from_utf8_lossy(&compiled.stderr));
    let output = Command::new(&binary).arg(ledger_file).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

#[test]
fn c_header_matches_rust_layout_and_reads_a_real_ledger() {
    let dir = build_dir().join("ledger");
    let ledger = Ledger::open_or_create(&dir, "c-reader").unwrap();
    ledger.device_index(b"first-device-id!", 1 << 30).unwrap();
    let dev = ledger.device_index(b"Xecond-device-id", 24 << 30).unwrap();
    ledger.set_memory_limit_bytes(dev, 5 << 20, PolicySource::Monitor);
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 3 << 20).unwrap();
    assert!(ledger.try_reserve(&slot, dev, 3 << 20).is_err());

    let c = run_c_program(ledger.path());
    let mut mismatches = Vec::new();
    for (name, rust) in rust_values() {
        match c.get(name) {
            Some(value) if *value == rust.to_string() => {}
            other => mismatches.push(format!("{name}: C says {other:?}, Rust says {rust}")),
        }
    }
    assert!(mismatches.is_empty(), "gpuslice.h disagrees with ledger/src/layout.rs:\n{}", mismatches.join("\n"));

    let expect = |name: &str, value: String| assert_eq!(c.get(name), Some(&value), "{name}");
    expect("file.magic_ok", "1".into());
    expect("file.initialised_ok", "1".into());
    expect("file.tenant", "c-reader".into());
    expect("file.device1.total_memory_bytes", (24u64 << 30).to_string());
    expect("file.device1.uuid0", (b'X').to_string());
    expect("file.policy1.memory_limit_bytes", (5u64 << 20).to_string());
    expect("file.policy1.policy_source", "2".into());
    expect("file.usage1.used_bytes", (3u64 << 20).to_string());
    expect("file.usage1.alloc_denied_total", "1".into());
    expect("file.alive_slot.index", slot.index().to_string());
    expect("file.alive_slot.ns_pid", std::process::id().to_string());
    expect("file.alive_slot.bytes1", (3u64 << 20).to_string());
    ledger.release_slot(slot);
}
