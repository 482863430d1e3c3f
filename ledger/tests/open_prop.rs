//! The ledger file opener fed random, cut-short and damaged files: it never
//! panics, never rewrites a file it refuses (or any file it opens), and
//! answers with a typed error that describes the file.
//!
//! A property test stands in for a fuzzer (none runs here). Case counts are
//! small so that it runs with every `cargo test`; `PROPTEST_CASES` raises
//! them. Failures are kept by proptest in
//! `tests/open_prop.proptest-regressions` and replayed first on every run;
//! `tests/open_corpus.txt` lists hand-picked damages that are replayed on
//! every run too (one per line: see [`apply_corpus_line`]).

use ledger::layout::{self, FILE_BYTES, INITIALISED, LAYOUT_VERSION, MAGIC, PAGE_BYTES};
use ledger::{Ledger, OpenError};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Offset of the header's `initialised` word.
fn initialised_at() -> usize {
    std::mem::offset_of!(layout::Header, initialised)
}

/// A fresh directory for one case, removed on drop.
struct Case(PathBuf);

impl Case {
    fn new() -> Case {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpuslice-open-prop-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Case(dir)
    }

    fn path(&self) -> PathBuf {
        ledger::tenant_path(&self.0, "t")
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The bytes of a sound ledger of tenant "t" with one device registered.
fn sound_ledger() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let case = Case::new();
        let ledger = Ledger::open_or_create(&case.0, "t").unwrap();
        ledger.device_index(b"GPU-prop-uuid-00", 1 << 30).unwrap();
        std::fs::read(ledger.path()).unwrap()
    })
}

/// What a refused file's error must say about it, by its bytes.
fn check_error(bytes: &[u8], error: &OpenError) -> Result<(), TestCaseError> {
    let len = bytes.len();
    let word =
        |at: usize, n: usize| -> Option<u64> { bytes.get(at..at + n).map(|b| b.iter().rev().fold(0u64, |acc, x| (acc << 8) | *x as u64)) };
    let message = error.to_string();
    prop_assert!(!message.is_empty());
    match error {
        OpenError::Truncated { len: found, expected, .. } => {
            prop_assert_eq!(*found, len as u64);
            prop_assert_eq!(*expected, FILE_BYTES as u64);
            prop_assert!(len < FILE_BYTES, "a file of {} bytes called truncated", len);
        }
        OpenError::NotALedger { found_magic, .. } => {
            prop_assert_eq!(Some(*found_magic), word(0, 8));
            prop_assert_ne!(*found_magic, MAGIC);
        }
        OpenError::OtherVersion { found, .. } => {
            prop_assert_eq!(word(0, 8), Some(MAGIC));
            prop_assert_eq!(Some(*found as u64), word(8, 4));
            prop_assert_ne!(*found, LAYOUT_VERSION);
        }
        OpenError::Corrupt { field, .. } => {
            prop_assert_eq!(word(0, 8), Some(MAGIC));
            prop_assert_eq!(word(8, 4), Some(LAYOUT_VERSION as u64));
            prop_assert!(!field.is_empty());
        }
        OpenError::OtherTenant { stored, expected, .. } => {
            // Only a tenant's own opening compares the name to the path's.
            prop_assert_eq!(expected.as_str(), "t");
            prop_assert_ne!(stored.as_str(), "t");
            prop_assert!(ledger::units::validate_tenant_name(stored).is_ok());
        }
        OpenError::Io { .. } | OpenError::BadTenantName { .. } | OpenError::UnsafeDir { .. } => {
            prop_assert!(false, "a file's contents gave {:?}", error);
        }
    }
    // Only an empty file or one whose creator has not finished may be
    // waited for.
    let uninitialised = len == 0 || (len == FILE_BYTES && word(initialised_at(), 4) == Some(0));
    if error.is_uninitialised() {
        prop_assert!(uninitialised, "{} is not a file still being created", message);
    }
    Ok(())
}

/// Opens `bytes` as a ledger both ways (the monitor's and a tenant's) and
/// checks the answers; the file must be left exactly as it was.
fn open_both_ways(bytes: &[u8]) -> Result<(), TestCaseError> {
    let case = Case::new();
    let path = case.path();
    std::fs::write(&path, bytes).unwrap();
    let before = std::fs::metadata(&path).unwrap();
    for (how, opened) in [("open", Ledger::open(&path)), ("open_or_create", Ledger::open_or_create(&case.0, "t"))] {
        match opened {
            Ok(ledger) => {
                prop_assert_eq!(bytes.len(), FILE_BYTES, "{} accepted a file of {} bytes", how, bytes.len());
                // The monitor's opening checks the stored name against the
                // path itself; a tenant's gets its own tenant only.
                if how == "open_or_create" {
                    prop_assert_eq!(ledger.tenant(), "t");
                } else {
                    prop_assert!(ledger::units::validate_tenant_name(&ledger.tenant()).is_ok());
                }
                prop_assert!(ledger.damage().is_none());
                // Reading every part of an accepted file is sound.
                let _ = (ledger.devices(), ledger.slots(), ledger.used_bytes(0), ledger.memory_limit_bytes(0));
            }
            Err(error) => check_error(bytes, &error)?,
        }
    }
    let after = std::fs::read(&path).unwrap();
    prop_assert!(after == bytes, "the file was rewritten");
    let meta = std::fs::metadata(&path).unwrap();
    prop_assert_eq!((meta.ino(), meta.mtime(), meta.mtime_nsec()), (before.ino(), before.mtime(), before.mtime_nsec()));
    prop_assert_eq!(std::fs::read_dir(&case.0).unwrap().count(), 1, "something was created beside the file");
    Ok(())
}

/// A damage to a sound ledger, for the corpus: `truncate N`, `set OFFSET
/// BYTE`, `word32 OFFSET VALUE` or `word64 OFFSET VALUE` (numbers in decimal
/// or 0x hex; `FILE` stands for the ledger's length, `A-B` subtracts).
/// Returns `None` for a blank one.
fn apply_corpus_line(line: &str, bytes: &mut Vec<u8>) -> Option<()> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    // A number, or `FILE` (the ledger's length), minus another.
    let number = |s: &str| -> u64 {
        let term = |t: &str| if t == "FILE" { FILE_BYTES as u64 } else { number_of(t) };
        match s.split_once('-') {
            Some((a, b)) => term(a) - term(b),
            None => term(s),
        }
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        ["truncate", n] => bytes.truncate(number(n) as usize),
        ["set", at, value] => bytes[number(at) as usize] = number(value) as u8,
        ["word32", at, value] => {
            let at = number(at) as usize;
            bytes[at..at + 4].copy_from_slice(&(number(value) as u32).to_ne_bytes());
        }
        ["word64", at, value] => {
            let at = number(at) as usize;
            bytes[at..at + 8].copy_from_slice(&number(value).to_ne_bytes());
        }
        other => panic!("bad corpus line {other:?}"),
    }
    Some(())
}

fn number_of(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("bad number {s:?}")),
        None => s.parse().unwrap_or_else(|_| panic!("bad number {s:?}")),
    }
}

fn corpus_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/open_corpus.txt")
}

#[test]
fn the_corpus_of_damaged_ledgers_is_refused_typed_and_untouched() {
    let corpus = std::fs::read_to_string(corpus_path()).unwrap();
    let mut cases = 0;
    for (number, line) in corpus.lines().enumerate() {
        let mut bytes = sound_ledger().to_vec();
        // A line may hold several damages separated by `;`.
        let damages = line.split('#').next().unwrap_or_default();
        let applied = damages.split(';').map(|part| apply_corpus_line(part, &mut bytes)).filter(Option::is_some).count();
        if applied == 0 {
            continue;
        }
        cases += 1;
        if let Err(e) = open_both_ways(&bytes) {
            panic!("corpus line {}: {line}: {e}", number + 1);
        }
    }
    assert!(cases >= 20, "the corpus lost its cases ({cases})");
}

/// Where failing cases are kept, and replayed first on every run.
const REGRESSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/open_prop.proptest-regressions");

/// A length near the boundaries the opener looks at, or anywhere.
fn interesting_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..16,
        0usize..64,
        (PAGE_BYTES - 8)..(PAGE_BYTES + 8),
        (FILE_BYTES - 16)..(FILE_BYTES + 16),
        0usize..(FILE_BYTES + 4096),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..ProptestConfig::default()
    })]

    /// Arbitrary bytes of any length: refused with a fitting error.
    #[test]
    fn random_files_are_refused_typed_and_untouched(seed in any::<u64>(), len in interesting_len(), ledger_magic in any::<bool>()) {
        let mut state = seed | 1;
        let mut bytes: Vec<u8> = (0..len).map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        }).collect();
        if ledger_magic && bytes.len() >= 12 {
            bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
            bytes[8..12].copy_from_slice(&LAYOUT_VERSION.to_ne_bytes());
        }
        open_both_ways(&bytes)?;
    }

    /// A sound ledger cut short anywhere: refused as truncated (or, cut
    /// before its version, as what is left of it).
    #[test]
    fn truncated_ledgers_are_refused_typed_and_untouched(len in interesting_len().prop_map(|len| len.min(FILE_BYTES - 1))) {
        let bytes = &sound_ledger()[..len];
        open_both_ways(bytes)?;
    }

    /// A sound ledger with a few bytes changed: opened if every changed word
    /// still holds a value some writer writes, else refused; never changed.
    #[test]
    fn damaged_ledgers_are_opened_or_refused_and_untouched(
        damages in proptest::collection::vec((prop_oneof![0usize..PAGE_BYTES, 0usize..FILE_BYTES], any::<u8>()), 1..6),
        finished in proptest::bool::weighted(0.9),
    ) {
        let mut bytes = sound_ledger().to_vec();
        for (at, value) in &damages {
            bytes[*at] = *value;
        }
        let at = initialised_at();
        if !finished {
            bytes[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
        } else if bytes[at..at + 4] == [0, 0, 0, 0] {
            bytes[at..at + 4].copy_from_slice(&INITIALISED.to_ne_bytes());
        }
        open_both_ways(&bytes)?;
    }
}
