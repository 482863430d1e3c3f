//! `include/gpuslice.h`, rendered from the Rust layout.
//!
//! The header is not written by hand. [`render`] spells each record of
//! `ledger/src/layout.rs` in C, taking every field's offset, size, element
//! type and signedness from the Rust field itself (`offset_of!`, `size_of`
//! and [`CType`]) and every constant's value from the Rust constant. The
//! tables below add only what Rust cannot say: C names, the order of the
//! constants, and comments. `tests/c_layout.rs` fails when the header on
//! disk is not what [`render`] returns, and compiles [`static_checks`] (C
//! `_Static_assert`s of the same facts) against the rendered header, so that
//! the C compiler confirms the spelling.
//!
//! The tables cannot fall behind the layout silently: a field that is not
//! listed leaves bytes of its record uncovered, and a `pub const` or
//! `pub struct` of `layout.rs` missing here is found by reading its source;
//! either stops [`render`] with a message that says what to add.

use ledger::layout::*;
use std::any::type_name;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8};

/// The command that rewrites `include/gpuslice.h` from [`render`].
pub const BLESS_COMMAND: &str = "GPUSLICE_BLESS=1 cargo test -p gpuslice-ledger --test c_layout";

/// What one element of a field is in C.
#[derive(Clone, Copy)]
enum Element {
    /// A fixed-width integer.
    Integer { bytes: usize, signed: bool },
    /// A record of the layout, by its C struct tag.
    Record(&'static str),
}

impl Element {
    fn c_type(self) -> String {
        match self {
            Element::Integer { bytes, signed } => format!("{}int{}_t", if signed { "" } else { "u" }, bytes * 8),
            Element::Record(tag) => format!("struct {tag}"),
        }
    }
}

/// A Rust type that a field of the layout can have, as C sees it.
trait CType {
    /// What one element is.
    const ELEMENT: Element;
    /// How many elements, for an array.
    const LEN: Option<usize> = None;
}

/// Atomics: the C integer of the width and signedness of the integer the
/// atomic holds.
macro_rules! atomic_types {
    ($($atomic:ty: $int:ty),* $(,)?) => {$(
        impl CType for $atomic {
            const ELEMENT: Element = {
                // Compiles only if `$atomic` holds an `$int`.
                let _holds: fn($atomic) -> $int = <$atomic>::into_inner;
                assert!(size_of::<$atomic>() == size_of::<$int>());
                Element::Integer { bytes: size_of::<$int>(), signed: <$int>::MIN != 0 }
            };
        }
    )*};
}

atomic_types!(AtomicU8: u8, AtomicU32: u32, AtomicI32: i32, AtomicU64: u64, AtomicI64: i64);

impl CType for u8 {
    const ELEMENT: Element = Element::Integer { bytes: 1, signed: false };
}

/// The records of the layout and their C struct tags.
macro_rules! record_types {
    ($($rust:ty => $tag:literal),* $(,)?) => {$(
        impl CType for $rust {
            const ELEMENT: Element = Element::Record($tag);
        }
    )*};
}

record_types!(
    DeviceRecord => "gpuslice_device",
    Header => "gpuslice_header",
    PolicyRecord => "gpuslice_policy",
    PolicyPage => "gpuslice_policy_page",
    UsageRecord => "gpuslice_usage",
    UsagePage => "gpuslice_usage_page",
    ComputeRecord => "gpuslice_compute",
    ComputePage => "gpuslice_compute_page",
    SlotRecord => "gpuslice_slot",
    LedgerFile => "gpuslice_ledger",
);

impl<T: CType, const N: usize> CType for [T; N] {
    const ELEMENT: Element = {
        assert!(T::LEN.is_none(), "an array of arrays has no C spelling here");
        T::ELEMENT
    };
    const LEN: Option<usize> = Some(N);
}

/// One field of a record: what Rust says about it, and its comments.
struct Field {
    /// The same in Rust and C.
    name: &'static str,
    offset_bytes: usize,
    size_bytes: usize,
    element: Element,
    /// Elements, for an array.
    len: Option<usize>,
    /// The constant that spells `len` in C (its value is checked).
    len_constant: Option<&'static str>,
    /// A NUL-padded `u8` array, spelled `char` so that C string functions take it.
    text: bool,
    /// Comment lines before the field.
    comment: &'static [&'static str],
    /// Comment after the field, on its line.
    note: Option<&'static str>,
}

impl Field {
    /// `_field` only lets the compiler find the field's type `T`.
    fn of<S, T: CType>(name: &'static str, offset_bytes: usize, _field: fn(&S) -> &T) -> Field {
        Field {
            name,
            offset_bytes,
            size_bytes: size_of::<T>(),
            element: T::ELEMENT,
            len: T::LEN,
            len_constant: None,
            text: false,
            comment: &[],
            note: None,
        }
    }

    fn comment(self, lines: &'static [&'static str]) -> Field {
        Field { comment: lines, ..self }
    }

    fn note(self, note: &'static str) -> Field {
        Field { note: Some(note), ..self }
    }

    fn text(self) -> Field {
        Field { text: true, ..self }
    }

    fn len_constant(self, constant: &'static str) -> Field {
        Field { len_constant: Some(constant), ..self }
    }

    fn c_type(&self) -> String {
        if self.text {
            "char".to_string()
        } else {
            self.element.c_type()
        }
    }

    fn c_declaration(&self) -> String {
        let dimension = match (self.len_constant, self.len) {
            (Some(constant), _) => format!("[{constant}]"),
            (None, Some(len)) => format!("[{len}]"),
            (None, None) => String::new(),
        };
        let note = self.note.map(|note| format!(" /* {note} */")).unwrap_or_default();
        format!("{} {}{dimension};{note}", self.c_type(), self.name)
    }

    /// An expression for one element of the field of a `struct tag`, for
    /// the C checks.
    fn c_element(&self, tag: &str) -> String {
        let index = if self.len.is_some() { "[0]" } else { "" };
        format!("((struct {tag} *)0)->{}{index}", self.name)
    }
}

/// One record of the layout: a C struct.
struct Record {
    tag: &'static str,
    /// The Rust type's name.
    rust: &'static str,
    size_bytes: usize,
    comment: &'static [&'static str],
    /// In the order of their offsets, as C declares them.
    fields: Vec<Field>,
}

impl Record {
    fn new<R: CType>(comment: &'static [&'static str], fields: Vec<Field>) -> Record {
        let Element::Record(tag) = R::ELEMENT else { unreachable!("record_types! gives every record a tag") };
        let rust = type_name::<R>().rsplit("::").next().unwrap_or_default();
        Record { tag, rust, size_bytes: size_of::<R>(), comment, fields }
    }
}

/// `record!(RustType, ["comment"], { field.modifier(..), .. })`: the record,
/// with the offset, size and type of each field taken from `RustType`.
macro_rules! record {
    ($rust:ty, [$($comment:literal),* $(,)?], { $($field:ident $(. $modifier:ident ($($arg:expr),*))*),* $(,)? }) => {
        Record::new::<$rust>(
            &[$($comment),*],
            vec![$(
                Field::of(stringify!($field), offset_of!($rust, $field), |r: &$rust| &r.$field)
                    $(.$modifier($($arg),*))*
            ),*],
        )
    };
}

/// The records in the order C declares them (a struct before its users).
fn records() -> Vec<Record> {
    vec![
        record!(DeviceRecord, ["One GPU the tenant has used, keyed by UUID."], {
            state.note("GPUSLICE_DEVICE_*; uuid and total are valid once READY"),
            reserved0,
            uuid.note("as cuDeviceGetUuid returns it"),
            total_memory_bytes,
            reserved,
        }),
        record!(Header, ["Page 0: identity, sizes and the device table."], {
            magic,
            layout_version,
            header_bytes,
            policy_offset,
            usage_offset,
            slots_offset,
            slot_bytes,
            max_devices,
            max_slots,
            file_bytes,
            initialised.note("written last, with release ordering"),
            compute_offset.comment(&[
                "GPUSLICE_COMPUTE_OFFSET; 0 in files created before the field was",
                "written (it was reserved), whose compute page is there all the same.",
            ]),
            created_unix_s,
            tenant_name.text().note("NUL-padded"),
            devices.len_constant("GPUSLICE_MAX_DEVICES").note("appended as the tenant first uses them"),
            reserved.note("pads the header to one page"),
        }),
        record!(PolicyRecord, ["What the tenant may use on one device."], {
            memory_limit_bytes.note("GPUSLICE_UNLIMITED when no cap"),
            policy_source.note("GPUSLICE_POLICY_*: who set the cap"),
            compute_share_ratio_e4.note("ratio x 10000, 0 = none"),
            compute_limit_ratio_e4.note("ratio x 10000; 0 and 10000 (the whole device) = no ceiling"),
            priority.note("higher runs first when time is spare"),
            policy_epoch.comment(&[
                "Writers of memory_limit_bytes + policy_source claim it with a CAS from",
                "the even value they decided on to an odd one, store both, then make it",
                "even again: the pair changes as one decision.",
            ]),
            compute_limit_source.note("GPUSLICE_POLICY_*: who set the compute limit"),
            reserved0,
            compute_epoch.note("as policy_epoch, for compute_limit_ratio_e4 + compute_limit_source"),
            reserved,
        }),
        record!(PolicyPage, ["Page 1: what the tenant may use, by device index."], {
            devices.len_constant("GPUSLICE_MAX_DEVICES"),
            reserved.note("pads the policy to one page"),
        }),
        record!(UsageRecord, ["What the tenant uses on one device."], {
            used_bytes.note("the sum of the slots' bytes[d]; admission is a CAS on it"),
            alloc_denied_total,
            context_overhead_bytes,
            reserved,
        }),
        record!(UsagePage, ["Page 2: usage by device index, then tenant-wide counters."], {
            devices.len_constant("GPUSLICE_MAX_DEVICES"),
            reclaimed_processes_total,
            slots_claimed_total,
            reserved.note("pads the usage to one page"),
        }),
        record!(ComputeRecord, ["The tenant's device time on one device: a token bucket and its counters."], {
            tokens_ns.comment(&[
                "Device time left, ns; negative: measured work ran past the refill.",
                "Refilled at limit x elapsed CLOCK_MONOTONIC time since refill_ns (a",
                "CAS on refill_ns claims the interval first), up to the limit's earnings",
                "in 100 ms; measured busy time is subtracted after the work ran.",
            ]),
            refill_ns.note("CLOCK_MONOTONIC ns of the last refill"),
            launches_total.note("launch calls while the device had a limit"),
            busy_ns_total.note("device time charged, ns"),
            throttled_ns_total.note("time launches waited for the bucket, ns"),
            reserved0,
            reserved.note("the second cache line, for shares"),
        }),
        record!(ComputePage, ["Page 3: device time by device index, two cache lines per device."], {
            devices.len_constant("GPUSLICE_MAX_DEVICES"),
            reserved.note("pads the compute state to one page"),
        }),
        record!(SlotRecord, ["One process of the tenant."], {
            state_word.note("low 32 bits: GPUSLICE_SLOT_*; high 32 bits: generation"),
            in_flight_word.comment(&[
                "Low 32 bits: reservations/releases between their two steps (usage,",
                "then slot; or slot, then usage); high 32 bits: how many finished.",
                "A writer adds GPUSLICE_IN_FLIGHT_BEGIN before its first step and",
                "GPUSLICE_IN_FLIGHT_FINISH after its second.",
            ]),
            bytes.len_constant("GPUSLICE_MAX_DEVICES").comment(&[
                "By device index. state_word, in_flight_word and bytes[0..5] share the",
                "record's first cache line: the owner's threads touch them together.",
            ]),
            pid.note("as the ledger directory's /proc sees it"),
            ns_pid.note("in the process's own PID namespace"),
            pidns_inode.note("of /proc/self/ns/pid"),
            start_time_ticks.note("clock ticks after boot, /proc/PID/stat field 22"),
            reserved,
        }),
        record!(LedgerFile, ["A whole ledger file."], {
            header,
            policy,
            usage,
            compute,
            slots.len_constant("GPUSLICE_MAX_SLOTS").note("never compacted"),
        }),
    ]
}

/// How a constant is spelled in C.
#[derive(Clone, Copy)]
enum Value {
    /// A plain `int`, for counts used as array lengths.
    Count(usize),
    /// `2u`.
    U32(u32),
    /// `UINT32_C(0x54494E49)`, for values that are bytes.
    U32Hex(u32),
    /// `UINT64_C(1)`.
    U64(u64),
    /// `UINT64_C(0x4543494C53555047)`, or `UINT64_MAX`.
    U64Hex(u64),
}

impl Value {
    fn c(self) -> String {
        match self {
            Value::Count(n) => n.to_string(),
            Value::U32(v) => format!("{v}u"),
            Value::U32Hex(v) => format!("UINT32_C(0x{v:08X})"),
            Value::U64(v) => format!("UINT64_C({v})"),
            Value::U64Hex(u64::MAX) => "UINT64_MAX".to_string(),
            Value::U64Hex(v) => format!("UINT64_C(0x{v:X})"),
        }
    }

    fn as_u64(self) -> u64 {
        match self {
            Value::Count(n) => n as u64,
            Value::U32(v) | Value::U32Hex(v) => v.into(),
            Value::U64(v) | Value::U64Hex(v) => v,
        }
    }

    /// The size of the C type the spelling has (`None` for a plain `int`).
    fn c_size_bytes(self) -> Option<usize> {
        match self {
            Value::Count(_) => None,
            Value::U32(_) | Value::U32Hex(_) => Some(4),
            Value::U64(_) | Value::U64Hex(_) => Some(8),
        }
    }
}

/// A `#define` of a constant of `layout.rs`.
struct Constant {
    c: &'static str,
    /// The Rust path under `layout`, as written in the table.
    rust: &'static str,
    value: Value,
    /// Comment lines before the `#define`.
    comment: &'static [&'static str],
}

impl Constant {
    fn comment(self, lines: &'static [&'static str]) -> Constant {
        Constant { comment: lines, ..self }
    }
}

/// `constant!("GPUSLICE_NAME" = Kind(rust::PATH))`.
macro_rules! constant {
    ($c:literal = $kind:ident($($rust:tt)+)) => {
        Constant { c: $c, rust: stringify!($($rust)+), value: Value::$kind($($rust)+), comment: &[] }
    };
}

/// The constants, in groups separated by a blank line.
fn constants() -> Vec<Vec<Constant>> {
    vec![
        vec![
            constant!("GPUSLICE_MAX_DEVICES" = Count(MAX_DEVICES)),
            constant!("GPUSLICE_MAX_SLOTS" = Count(MAX_SLOTS)),
            constant!("GPUSLICE_UNLIMITED" = U64Hex(UNLIMITED)),
            constant!("GPUSLICE_PAGE_BYTES" = Count(PAGE_BYTES)),
        ],
        vec![
            constant!("GPUSLICE_MAGIC" = U64Hex(MAGIC)).comment(&["\"GPUSLICE\" read as a little-endian uint64_t."]),
            constant!("GPUSLICE_LAYOUT_VERSION" = U32(LAYOUT_VERSION)),
            constant!("GPUSLICE_IN_FLIGHT_BEGIN" = U64(in_flight::BEGIN)).comment(&["struct gpuslice_slot.in_flight_word increments"]),
            constant!("GPUSLICE_IN_FLIGHT_FINISH" = U64Hex(in_flight::FINISH)),
            constant!("GPUSLICE_INITIALISED" = U32Hex(INITIALISED))
                .comment(&["\"INIT\" read as a little-endian uint32_t; 0 = still being created."]),
        ],
        vec![
            constant!("GPUSLICE_DEVICE_EMPTY" = U32(device_state::EMPTY)).comment(&["struct gpuslice_device.state"]),
            constant!("GPUSLICE_DEVICE_CLAIMING" = U32(device_state::CLAIMING)),
            constant!("GPUSLICE_DEVICE_READY" = U32(device_state::READY)),
        ],
        vec![
            constant!("GPUSLICE_SLOT_FREE" = U32(slot_state::FREE)).comment(&[
                "Low 32 bits of struct gpuslice_slot.state_word; the high 32 bits are the",
                "slot's generation, raised each time the slot becomes FREE again.",
            ]),
            constant!("GPUSLICE_SLOT_CLAIMED" = U32(slot_state::CLAIMED)),
            constant!("GPUSLICE_SLOT_ALIVE" = U32(slot_state::ALIVE)),
            constant!("GPUSLICE_SLOT_RECLAIMING" = U32(slot_state::RECLAIMING)),
        ],
        vec![
            constant!("GPUSLICE_POLICY_UNSET" = U32(policy_source::UNSET))
                .comment(&["struct gpuslice_policy.policy_source and .compute_limit_source"]),
            constant!("GPUSLICE_POLICY_ENVIRONMENT" = U32(policy_source::ENVIRONMENT)),
            constant!("GPUSLICE_POLICY_MONITOR" = U32(policy_source::MONITOR)),
        ],
    ]
}

/// A `#define` that C derives from the structs; the C checks compare
/// `probe` with `value`.
struct Derived {
    /// What is defined: a name, or a macro with its parameters.
    c: &'static str,
    expression: &'static str,
    /// The constant of `layout.rs` it mirrors, if it is one.
    rust: Option<&'static str>,
    comment: &'static [&'static str],
    probe: &'static str,
    value: u64,
}

/// `derived!("GPUSLICE_NAME" = "C expression", RUST_CONSTANT)`.
macro_rules! derived {
    ($c:literal = $expression:literal, $rust:ident) => {
        Derived { c: $c, expression: $expression, rust: Some(stringify!($rust)), comment: &[], probe: $c, value: $rust as u64 }
    };
}

fn derived() -> Vec<Derived> {
    vec![
        derived!("GPUSLICE_POLICY_OFFSET" = "offsetof(struct gpuslice_ledger, policy)", POLICY_OFFSET),
        derived!("GPUSLICE_USAGE_OFFSET" = "offsetof(struct gpuslice_ledger, usage)", USAGE_OFFSET),
        derived!("GPUSLICE_COMPUTE_OFFSET" = "offsetof(struct gpuslice_ledger, compute)", COMPUTE_OFFSET),
        derived!("GPUSLICE_SLOTS_OFFSET" = "offsetof(struct gpuslice_ledger, slots)", SLOTS_OFFSET),
        derived!("GPUSLICE_SLOT_BYTES" = "sizeof(struct gpuslice_slot)", SLOT_BYTES),
        derived!("GPUSLICE_FILE_BYTES" = "sizeof(struct gpuslice_ledger)", FILE_BYTES),
        Derived {
            c: "GPUSLICE_SLOT_LOCK_OFFSET(i)",
            expression: "(GPUSLICE_SLOTS_OFFSET + (size_t)(i) * GPUSLICE_SLOT_BYTES)",
            rust: None,
            comment: &["The byte the owner of slot i keeps locked: the first byte of its record."],
            probe: "GPUSLICE_SLOT_LOCK_OFFSET(5)",
            value: ledger::slot_lock_offset(5),
        },
    ]
}

const PREAMBLE: &str = r#"/*
 * gpuslice.h - the layout of a gpuslice ledger file, for C tools.
 *
 * Generated from ledger/src/layout.rs (C names and comments in
 * ledger/tests/c_header/mod.rs); do not edit. After changing either, run
 *     GPUSLICE_BLESS=1 cargo test -p gpuslice-ledger --test c_layout
 *
 * One file per tenant, <GPUSLICE_DIR>/<tenant>.ledger, mapped MAP_SHARED by
 * every process of the tenant and by the monitor. All multi-byte words are
 * native-endian and must be accessed atomically (e.g. __atomic_load_n /
 * __atomic_compare_exchange_n) once the file is published.
 *
 * Rules a writer must follow:
 *  - Never write to a file whose magic, layout_version, sizes or
 *    `initialised` word differ from the constants below.
 *  - A memory reservation is a compare-and-swap on usage.devices[d].used_bytes
 *    that keeps it <= policy.devices[d].memory_limit_bytes, then an add to the
 *    process's slots[i].bytes[d].
 *  - Device time is taken out of compute.devices[d].tokens_ns after the work
 *    ran (an atomic subtract); only the CAS on refill_ns that claims an
 *    interval may add that interval's tokens.
 *  - A process owning slot i holds an OFD write lock (F_OFD_SETLK) on the one
 *    byte at GPUSLICE_SLOT_LOCK_OFFSET(i), taken before the slot leaves FREE
 *    and dropped after it is FREE again. A slot that is not FREE and whose
 *    lock can be taken belongs to a dead process.
 */
#ifndef GPUSLICE_H
#define GPUSLICE_H

#include <stddef.h>
#include <stdint.h>
"#;

/// A C comment of `lines`, indented by `indent`.
fn c_comment(indent: &str, lines: &[&str]) -> Vec<String> {
    match lines {
        [] => vec![],
        [line] => vec![format!("{indent}/* {line} */")],
        [first, rest @ ..] => {
            let mut out = vec![format!("{indent}/* {first}")];
            out.extend(rest.iter().map(|line| format!("{indent} * {line}")));
            if let Some(last) = out.last_mut() {
                last.push_str(" */");
            }
            out
        }
    }
}

/// The text `include/gpuslice.h` must have. Panics, saying what to add to
/// this module, if the tables do not cover `layout.rs`.
pub fn render() -> String {
    let (records, constants, derived) = (records(), constants(), derived());
    let problems = problems(&records, &constants, &derived);
    let problems = problems.join("\n");
    assert!(problems.is_empty(), "ledger/tests/c_header/mod.rs does not describe the Rust layout:\n{problems}");

    let mut lines: Vec<String> = PREAMBLE.lines().map(str::to_string).collect();
    for group in &constants {
        lines.push(String::new());
        for constant in group {
            lines.extend(c_comment("", constant.comment));
            lines.push(format!("#define {} {}", constant.c, constant.value.c()));
        }
    }
    for record in &records {
        lines.push(String::new());
        lines.extend(c_comment("", record.comment));
        lines.push(format!("struct {} {{", record.tag));
        for field in &record.fields {
            lines.extend(c_comment("    ", field.comment));
            lines.push(format!("    {}", field.c_declaration()));
        }
        lines.push("};".to_string());
    }
    lines.push(String::new());
    for d in &derived {
        lines.extend(c_comment("", d.comment));
        lines.push(format!("#define {} {}", d.c, d.expression));
    }
    lines.push(String::new());
    lines.push("/* The layout as ledger/src/layout.rs pins it. */".to_string());
    for record in &records {
        let tag = record.tag;
        lines.push(format!("_Static_assert(sizeof(struct {tag}) == {}, \"{tag} size\");", record.size_bytes));
        for field in &record.fields {
            let (name, offset) = (field.name, field.offset_bytes);
            lines.push(format!("_Static_assert(offsetof(struct {tag}, {name}) == {offset}, \"{tag}.{name}\");"));
        }
    }
    lines.push(String::new());
    lines.push("#endif /* GPUSLICE_H */".to_string());
    lines.join("\n") + "\n"
}

/// C `_Static_assert`s, to compile after `#include "gpuslice.h"`, of what
/// Rust says about every field (offset, size, element size, signedness),
/// every record's size and every constant's value. The signedness check
/// skips text fields: C leaves the signedness of `char` to the platform.
pub fn static_checks() -> String {
    let mut lines = Vec::new();
    for record in records() {
        let tag = record.tag;
        lines.push(format!("_Static_assert(sizeof(struct {tag}) == {}, \"{tag}: size\");", record.size_bytes));
        for field in &record.fields {
            let what = format!("{tag}.{}", field.name);
            let element = field.c_element(tag);
            lines.push(format!("_Static_assert(offsetof(struct {tag}, {}) == {}, \"{what}: offset\");", field.name, field.offset_bytes));
            lines.push(format!("_Static_assert(sizeof(((struct {tag} *)0)->{}) == {}, \"{what}: size\");", field.name, field.size_bytes));
            if let Element::Integer { bytes, signed } = field.element {
                lines.push(format!("_Static_assert(sizeof({element}) == {bytes}, \"{what}: element size\");"));
                if !field.text {
                    // -1 converts to the largest value of an unsigned type only.
                    let unsigned = format!("((__typeof__({element}))-1 > (__typeof__({element}))0)");
                    lines.push(format!("_Static_assert({unsigned} == {}, \"{what}: signedness\");", u8::from(!signed)));
                }
            }
        }
    }
    for constant in constants().iter().flatten() {
        let (name, value) = (constant.c, constant.value.as_u64());
        lines.push(format!("_Static_assert({name} == UINT64_C({value}), \"{name}: value\");"));
        if let Some(bytes) = constant.value.c_size_bytes() {
            lines.push(format!("_Static_assert(sizeof({name}) == {bytes}, \"{name}: width\");"));
        }
    }
    for d in derived() {
        lines.push(format!("_Static_assert({} == {}, \"{}: value\");", d.probe, d.value, d.probe));
    }
    lines.join("\n") + "\n"
}

/// What the tables get wrong about the layout, as messages that say what to
/// change.
fn problems(records: &[Record], constants: &[Vec<Constant>], derived: &[Derived]) -> Vec<String> {
    let mut problems = Vec::new();
    let all_constants: Vec<&Constant> = constants.iter().flatten().collect();
    for (index, record) in records.iter().enumerate() {
        // Every byte of the record is in exactly one listed field, in order:
        // a field added to layout.rs and not listed here leaves a hole.
        let mut end_bytes = 0;
        for field in &record.fields {
            if field.offset_bytes != end_bytes {
                problems.push(format!(
                    "{}: bytes {end_bytes}..{} before `{}` are in no listed field (list every field of layout.rs, in order)",
                    record.rust, field.offset_bytes, field.name
                ));
            }
            end_bytes = field.offset_bytes + field.size_bytes;
            if let Element::Record(tag) = field.element {
                if !records[..index].iter().any(|r| r.tag == tag) {
                    let (rust, name) = (record.rust, field.name);
                    problems.push(format!("{rust}.{name}: struct {tag} must be listed before {rust}"));
                }
            }
            if field.text && !matches!(field.element, Element::Integer { bytes: 1, signed: false }) {
                problems.push(format!("{}.{}: only a u8 array can be text", record.rust, field.name));
            }
            if let Some(name) = field.len_constant {
                let value = all_constants.iter().find(|c| c.c == name).map(|c| c.value.as_u64());
                if value != field.len.map(|len| len as u64) {
                    problems.push(format!("{}.{}: has {:?} elements, but {name} is {value:?}", record.rust, field.name, field.len));
                }
            }
        }
        if end_bytes != record.size_bytes {
            problems.push(format!(
                "{}: bytes {end_bytes}..{} are in no listed field (list every field of layout.rs, in order)",
                record.rust, record.size_bytes
            ));
        }
    }

    let (layout_constants, layout_structs) = layout_items();
    let described: Vec<String> =
        all_constants.iter().map(|c| c.rust).chain(derived.iter().filter_map(|d| d.rust)).map(|rust| rust.replace(' ', "")).collect();
    for constant in layout_constants {
        if !described.contains(&constant) {
            problems.push(format!("layout.rs has `pub const {constant}`: add it to constants() or derived()"));
        }
    }
    for name in layout_structs {
        if !records.iter().any(|r| r.rust == name) {
            problems.push(format!("layout.rs has `pub struct {name}`: add it to record_types! and records()"));
        }
    }
    problems
}

/// The `pub const` items (as `module::NAME` inside a `pub mod`) and the
/// `pub struct`s of `layout.rs`, read from its source: Rust cannot list a
/// module's items, and a constant the C header lacks must not go unnoticed.
fn layout_items() -> (Vec<String>, Vec<String>) {
    const SOURCE: &str = include_str!("../../src/layout.rs");
    let (mut constants, mut structs) = (Vec::new(), Vec::new());
    let mut module: Option<&str> = None;
    for line in SOURCE.lines() {
        if let Some(rest) = line.strip_prefix("pub mod ") {
            module = rest.strip_suffix(" {");
        } else if line == "}" {
            module = None;
        } else if let Some(rest) = line.trim_start().strip_prefix("pub const ") {
            if let Some((name, _)) = rest.split_once(':').filter(|_| !rest.starts_with("fn ")) {
                constants.push(module.map_or(name.to_string(), |module| format!("{module}::{name}")));
            }
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            structs.push(rest.split([' ', '{', '(', ';', '<']).next().unwrap_or_default().to_string());
        }
    }
    (constants, structs)
}
