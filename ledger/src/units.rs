//! Parsers for the values people write: sizes, per-device lists, device
//! indices, tenant names.
//!
//! Shared by the shim (environment), the monitor (configuration file) and the
//! CLI (`gpuslice run --memory`), so that every front accepts the same words.
//! Every error says what was wrong and what is accepted: a typo must never
//! turn into "unlimited".
//!
//! The grammar is strict on purpose, because a tenant controls its own
//! environment and every value it writes is input, not intent:
//! - only ASCII is accepted, and only ASCII whitespace is trimmed (a no-break
//!   space or a look-alike digit copied from a document is refused, never
//!   read as something else);
//! - a number with a leading zero (`010G`) is refused: HAMi-core reads these
//!   variables with `strtoul(…, 0)`, for which `010` is octal 8 and `0x10` is
//!   16, so such a value means different caps to the two readers;
//! - `GB`, `MB`, `KB` and `TB` are refused: they may mean powers of 1000 or
//!   of 1024, and the message says to write `GiB`;
//! - a number without a unit is refused unless the bytes are spelt out
//!   (`4096B`): `--memory 3` is far more often a forgotten `GiB` than a cap
//!   of three bytes. HAMi-core's own variables (`CUDA_DEVICE_MEMORY_LIMIT`)
//!   keep HAMi-core's grammar, where a plain number is bytes
//!   ([`parse_hami_size`]);
//! - Kubernetes' quantities `Ki`, `Mi`, `Gi` and `Ti` are the binary units
//!   they are (`8Gi` is `8GiB`), so a value copied from a pod spec works;
//! - a device index is plain decimal without sign or leading zeros, below
//!   [`MAX_DEVICES`](crate::MAX_DEVICES), so `0` and `00` cannot both name
//!   device 0.

use crate::layout::MAX_DEVICES;
use std::fmt;

mod per_device;
pub use per_device::{parse_per_device, DuplicateDevice, ListError, PerDevice};

/// What a size may look like, for error messages.
pub const SIZE_FORMAT: &str =
    "a size like 8GiB, 8Gi, 8G, 512MiB, 1.5GiB, 3000m or bytes with their unit, 4096B (K/M/G/T, Ki/Mi/Gi/Ti and KiB/MiB/GiB/TiB are powers of 1024)";

/// What a memory limit may look like, for error messages.
pub const MEMORY_LIMIT_FORMAT: &str = "one size for every device (8GiB, 512MiB, 3000m, 4096B) or a per-device list like 0=8GiB,1=4GiB";

/// What a tenant name may look like, for error messages.
pub const TENANT_FORMAT: &str = "1 to 63 characters from A-Z a-z 0-9 . _ -, not starting with . or -";

/// The largest device index any ledger can hold.
const MAX_DEVICE_INDEX: u32 = MAX_DEVICES as u32 - 1;

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The text is not a size.
    NotASize,
    /// The text holds a character that is not ASCII.
    NotAscii(char),
    /// A number (as written) starts with a zero and is not `0` or `0.…`.
    LeadingZero(String),
    /// A unit that may mean powers of 1000 or of 1024 (`GB`): the number and
    /// the unit as written.
    AmbiguousUnit { number: String, unit: String },
    /// A number without a unit (the number as written): bytes must be
    /// spelt out as `B`.
    NoUnit(String),
    /// The size is zero; an explicit cap of nothing is almost always a mistake.
    Zero,
    /// The size does not fit in 64 bits.
    TooLarge,
    /// A per-device entry is not `INDEX=SIZE`.
    BadEntry(String),
    /// A device index (as written) that is not `0` to `MAX_DEVICES - 1` in
    /// plain decimal.
    BadDeviceIndex(String),
    /// A device index appears twice.
    DuplicateDevice(u32),
    /// A tenant name breaks the naming rule; says which part.
    BadTenantName(String),
}

/// `U+00A0` for a no-break space: how a character that is not plain ASCII is
/// named in messages, since printing it would show nothing useful.
fn describe_char(c: char) -> String {
    if c.is_ascii_graphic() {
        format!("{c:?}")
    } else {
        format!("U+{:04X}", c as u32)
    }
}

/// The binary unit to write instead of an ambiguous one.
fn binary_unit(unit: &str) -> &'static str {
    match unit.to_ascii_lowercase().as_str() {
        "kb" => "KiB",
        "mb" => "MiB",
        "gb" => "GiB",
        _ => "TiB",
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotASize => write!(f, "expected {SIZE_FORMAT}"),
            ParseError::NotAscii(c) => write!(
                f,
                "it contains {}, which is not ASCII (only ASCII letters, digits and spaces are accepted; \
                 a no-break space or look-alike character copied from a document is refused)",
                describe_char(*c)
            ),
            ParseError::LeadingZero(number) => write!(
                f,
                "{number:?} has a leading zero, which is ambiguous (HAMi-core reads 010 as octal 8); \
                 write the number without leading zeros"
            ),
            ParseError::AmbiguousUnit { number, unit } => write!(
                f,
                "{unit:?} is refused as ambiguous (powers of 1000 or of 1024?): write {number}{} for powers of 1024, \
                 or the size in bytes",
                binary_unit(unit)
            ),
            ParseError::NoUnit(number) => {
                write!(f, "{number:?} has no unit: write {number}GiB, {number}MiB or another unit, or {number}B if you mean bytes")
            }
            ParseError::Zero => write!(f, "a cap of 0 bytes is refused; unset the variable for no cap"),
            ParseError::TooLarge => write!(f, "the size does not fit in 64 bits"),
            ParseError::BadEntry(entry) => write!(f, "entry {entry:?} is not INDEX=SIZE; expected {MEMORY_LIMIT_FORMAT}"),
            ParseError::BadDeviceIndex(index) => write!(
                f,
                "device index {index:?} is invalid: expected 0 to {MAX_DEVICE_INDEX} in plain decimal, \
                 without sign or leading zeros"
            ),
            ParseError::DuplicateDevice(index) => write!(f, "device {index} is given twice"),
            ParseError::BadTenantName(problem) => write!(f, "{problem}; expected {TENANT_FORMAT}"),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<ListError> for ParseError {
    fn from(e: ListError) -> Self {
        match e {
            ListError::NotAscii(c) => ParseError::NotAscii(c),
            ListError::BadEntry(entry) => ParseError::BadEntry(entry),
            ListError::BadDeviceIndex(index) => ParseError::BadDeviceIndex(index),
            ListError::DuplicateDevice(index) => ParseError::DuplicateDevice(index),
        }
    }
}

fn refuse_non_ascii(text: &str) -> Result<(), ParseError> {
    match text.chars().find(|c| !c.is_ascii()) {
        Some(c) => Err(ParseError::NotAscii(c)),
        None => Ok(()),
    }
}

/// Parses a size in bytes: `8GiB`, `8Gi`, `8G`, `8g`, `512MiB`, `1.5GiB`,
/// `3000m`, `1073741824B`. All suffixes are powers of 1024 (HAMi-core reads
/// `3000m` as 3000 MiB). A number without a unit is refused
/// ([`ParseError::NoUnit`]). A fraction that does not come out in whole
/// bytes is rounded down, so a cap can only shrink. ASCII whitespace around
/// the value and spaces between the number and the unit are allowed;
/// anything else that is not part of the grammar (see the module docs) is
/// refused.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    parse_size_as(text, Unitless::Refused)
}

/// Parses a size in HAMi-core's grammar (`CUDA_DEVICE_MEMORY_LIMIT`): as
/// [`parse_size`], except that a plain number is bytes, as HAMi-core
/// documents it, so that values written for HAMi-core keep their meaning.
pub fn parse_hami_size(text: &str) -> Result<u64, ParseError> {
    parse_size_as(text, Unitless::Bytes)
}

/// What a number without a unit means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unitless {
    Refused,
    Bytes,
}

fn parse_size_as(text: &str, unitless: Unitless) -> Result<u64, ParseError> {
    refuse_non_ascii(text)?;
    let text = text.trim_ascii();
    let number_len = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_len);
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(ParseError::NotASize);
    }
    let unit = suffix.trim_start_matches(' ');
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" => 10,
        "m" | "mi" | "mib" => 20,
        "g" | "gi" | "gib" => 30,
        "t" | "ti" | "tib" => 40,
        "kb" | "mb" | "gb" | "tb" => return Err(ParseError::AmbiguousUnit { number: number.to_string(), unit: unit.to_string() }),
        _ => return Err(ParseError::NotASize),
    };
    if whole.len() > 1 && whole.starts_with('0') {
        return Err(ParseError::LeadingZero(number.to_string()));
    }
    if fraction.len() > 18 {
        return Err(ParseError::NotASize);
    }
    // Only ASCII digits are left in `whole` and `fraction`: parsing fails
    // only by overflow.
    let whole: u128 = whole.parse().map_err(|_| ParseError::TooLarge)?;
    let fraction_value: u128 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| ParseError::NotASize)? };
    let fraction_scale = 10u128.pow(fraction.len() as u32);
    let whole_bytes = whole.checked_shl(shift).filter(|b| b >> shift == whole).ok_or(ParseError::TooLarge)?;
    // fraction_value < fraction_scale <= 10^18, so the shift cannot overflow
    // and the quotient is below 2^shift.
    let bytes = whole_bytes.checked_add((fraction_value << shift) / fraction_scale).ok_or(ParseError::TooLarge)?;
    let bytes = u64::try_from(bytes).map_err(|_| ParseError::TooLarge)?;
    if bytes == 0 {
        return Err(ParseError::Zero);
    }
    // Last, so that a unitless number that is wrong anyway (`010`, `0`)
    // gets the error that says what is wrong with it.
    if unit.is_empty() && unitless == Unitless::Refused {
        return Err(ParseError::NoUnit(number.to_string()));
    }
    Ok(bytes)
}

/// Parses a device index: `0` to `MAX_DEVICES - 1`, plain decimal, no sign,
/// no leading zeros, no whitespace (trim first where it is allowed).
pub fn parse_device_index(text: &str) -> Result<u32, ParseError> {
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    match text.parse::<u32>() {
        Ok(index) if plain && index <= MAX_DEVICE_INDEX => Ok(index),
        _ => Err(ParseError::BadDeviceIndex(text.to_string())),
    }
}

/// An upper bound on the number of devices a process sees, from the value of
/// its `CUDA_VISIBLE_DEVICES`: the driver shows at most one device per entry
/// (fewer when an entry is invalid, since it stops at the first), none for an
/// empty value. A device index at or above the bound names a device the
/// process cannot see.
pub fn visible_devices_at_most(cuda_visible_devices: &str) -> u32 {
    let text = cuda_visible_devices.trim_ascii();
    if text.is_empty() {
        0
    } else {
        u32::try_from(text.split(',').count()).unwrap_or(u32::MAX)
    }
}

/// Parses `GPUSLICE_MEMORY_LIMIT`: `8GiB` or `0=8GiB,1=4GiB` (see
/// [`parse_per_device`]).
pub fn parse_memory(text: &str) -> Result<PerDevice<u64>, ParseError> {
    parse_per_device(text, parse_size)
}

/// Checks a tenant name: `[A-Za-z0-9._-]{1,63}`, not starting with `.`. The
/// name names a file (`<name>.ledger`), and the monitor skips files whose
/// name starts with a dot (temporary files being created), so such a
/// tenant would be capped by its own processes but never seen or governed.
pub fn validate_tenant_name(name: &str) -> Result<(), ParseError> {
    let problem = if name.is_empty() {
        "the name is empty".to_string()
    } else if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        format!("{} is not allowed in a tenant name", describe_char(c))
    } else if name.len() > 63 {
        format!("the name has {} characters, more than 63", name.len())
    } else if name.starts_with('.') {
        "the name starts with '.', which hides its ledger from the monitor".to_string()
    } else if name.starts_with('-') {
        "the name starts with '-', which commands would read as an option".to_string()
    } else {
        return Ok(());
    };
    Err(ParseError::BadTenantName(problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn sizes_in_every_accepted_form() {
        assert_eq!(parse_size("8GiB"), Ok(8 * GIB));
        assert_eq!(parse_size("8G"), Ok(8 * GIB));
        assert_eq!(parse_size("8g"), Ok(8 * GIB));
        assert_eq!(parse_size("512MiB"), Ok(512 * MIB));
        assert_eq!(parse_size("1.5GiB"), Ok(3 * GIB / 2));
        assert_eq!(parse_size("3000m"), Ok(3000 * MIB));
        assert_eq!(parse_size("1073741824B"), Ok(GIB));
        assert_eq!(parse_size("1073741824 b"), Ok(GIB));
        assert_eq!(parse_size("8Gi"), Ok(8 * GIB));
        assert_eq!(parse_size("500Mi"), Ok(500 * MIB));
        assert_eq!(parse_size("4Ki"), Ok(4096));
        assert_eq!(parse_size("1Ti"), Ok(1 << 40));
        assert_eq!(parse_size("4 KiB"), Ok(4096));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(" \t8GiB\n"), Ok(8 * GIB));
        assert_eq!(parse_size("10G"), Ok(10 * GIB));
        assert_eq!(parse_size("100B"), Ok(100));
    }

    #[test]
    fn a_number_without_a_unit_is_refused_unless_in_hamis_grammar() {
        for bare in ["3", "100", "1073741824", " 42 ", "1.5"] {
            assert_eq!(parse_size(bare), Err(ParseError::NoUnit(bare.trim().to_string())), "{bare:?}");
        }
        let message = parse_size("3").unwrap_err().to_string();
        assert!(message.contains("\"3\" has no unit") && message.contains("3GiB") && message.contains("3B"), "{message}");
        // HAMi-core documents a plain number as bytes: its variables keep that.
        assert_eq!(parse_hami_size("1073741824"), Ok(GIB));
        assert_eq!(parse_hami_size("3000m"), Ok(3000 * MIB));
        assert_eq!(parse_hami_size("1g"), Ok(GIB));
        // The rest of the grammar is the same in both.
        assert_eq!(parse_hami_size("010"), Err(ParseError::LeadingZero("010".into())));
        assert_eq!(parse_hami_size("1GB"), parse_size("1GB"));
        assert_eq!(parse_hami_size("0"), Err(ParseError::Zero));
        // A number that is wrong anyway says what is wrong with it.
        assert_eq!(parse_size("0"), Err(ParseError::Zero));
        assert_eq!(parse_size("010"), Err(ParseError::LeadingZero("010".into())));
        assert_eq!(parse_size("99999999999999999999999"), Err(ParseError::TooLarge));
    }

    #[test]
    fn fractions_round_down() {
        assert_eq!(parse_size("0.1k"), Ok(102));
    }

    #[test]
    fn bad_sizes_are_refused_never_unlimited() {
        for bad in ["", "4GG", "GiB", "8 MiBs", "-1", "+1G", "1..5G", "1.G", ".5G", "1e9", "8GiBs", "0x10", "8\tGiB", "8\nG"] {
            assert_eq!(parse_size(bad), Err(ParseError::NotASize), "{bad:?}");
        }
        assert_eq!(parse_size("0"), Err(ParseError::Zero));
        assert_eq!(parse_size("0GiB"), Err(ParseError::Zero));
        assert_eq!(parse_size("0.0000001k"), Err(ParseError::Zero));
        assert_eq!(parse_size("16777216T"), Err(ParseError::TooLarge));
        assert_eq!(parse_size("99999999999999999999999B"), Err(ParseError::TooLarge));
        assert_eq!(parse_size(&"9".repeat(200)), Err(ParseError::TooLarge));
    }

    #[test]
    fn leading_zeros_are_ambiguous_and_refused() {
        // HAMi-core reads 010g as octal: 8 GiB, not 10.
        for bad in ["010G", "00", "007", "01.5GiB", "00.5G", "0010"] {
            assert!(matches!(parse_size(bad), Err(ParseError::LeadingZero(_))), "{bad:?}");
        }
        assert_eq!(parse_size("0.5G"), Ok(GIB / 2));
        let message = parse_size("010G").unwrap_err().to_string();
        assert!(message.contains("\"010\"") && message.contains("leading zero") && message.contains("octal"), "{message}");
    }

    #[test]
    fn non_ascii_is_refused_and_named() {
        for (bad, c) in
            [("8GiB\u{a0}", '\u{a0}'), ("\u{a0}8GiB", '\u{a0}'), ("8\u{2009}GiB", '\u{2009}'), ("８G", '８'), ("1\u{0}G", '\u{0}')]
        {
            let expected = if c.is_ascii() { ParseError::NotASize } else { ParseError::NotAscii(c) };
            assert_eq!(parse_size(bad), Err(expected), "{bad:?}");
        }
        let message = parse_size("8GiB\u{a0}").unwrap_err().to_string();
        assert!(message.contains("U+00A0") && message.contains("not ASCII"), "{message}");
        assert_eq!(parse_memory("0=1G\u{a0}"), Err(ParseError::NotAscii('\u{a0}')));
    }

    #[test]
    fn decimal_units_are_refused_as_ambiguous_and_the_message_says_what_to_write() {
        for (bad, instead) in [("1GB", "1GiB"), ("8 MB", "8MiB"), ("1.5gb", "1.5GiB"), ("4KB", "4KiB"), ("2TB", "2TiB")] {
            let e = parse_size(bad).unwrap_err();
            assert!(matches!(e, ParseError::AmbiguousUnit { .. }), "{bad:?}: {e:?}");
            let message = e.to_string();
            assert!(message.contains("ambiguous") && message.contains(instead), "{bad:?}: {message}");
        }
    }

    #[test]
    fn error_message_names_the_accepted_format() {
        let message = parse_size("4GG").unwrap_err().to_string();
        assert!(message.contains("8GiB") && message.contains("3000m"), "{message}");
    }

    #[test]
    fn device_indices_are_plain_decimal_below_the_ledger_limit() {
        assert_eq!(parse_device_index("0"), Ok(0));
        assert_eq!(parse_device_index("15"), Ok(15));
        for bad in ["", "00", "01", "+1", "-1", " 1", "16", "99", "4294967296", "1a", "٣"] {
            assert_eq!(parse_device_index(bad), Err(ParseError::BadDeviceIndex(bad.to_string())), "{bad:?}");
        }
        let message = parse_device_index("99").unwrap_err().to_string();
        assert!(message.contains("\"99\"") && message.contains("0 to 15"), "{message}");
    }

    #[test]
    fn visible_devices_bound() {
        assert_eq!(visible_devices_at_most("1"), 1);
        assert_eq!(visible_devices_at_most("0,1"), 2);
        assert_eq!(visible_devices_at_most("GPU-abc,MIG-def,"), 3);
        assert_eq!(visible_devices_at_most(""), 0);
        assert_eq!(visible_devices_at_most(" "), 0);
    }

    #[test]
    fn per_device_lists() {
        assert_eq!(parse_memory("0=8GiB,1=4GiB").unwrap().devices, vec![(0, 8 * GIB), (1, 4 * GIB)]);
        assert_eq!(parse_memory(" 0 = 8GiB , 1=4GiB").unwrap().devices, vec![(0, 8 * GIB), (1, 4 * GIB)]);
        assert_eq!(parse_memory("0=8GiB,1=4GiB").unwrap().single(), None);
        assert_eq!(parse_memory("8GiB").unwrap().single(), Some(8 * GIB));
        let limit = parse_memory("1=3000m").unwrap();
        assert_eq!(limit.for_device(1), Some(3000 * MIB));
        assert_eq!(limit.for_device(0), None);
        assert_eq!(parse_memory("2GiB").unwrap().for_device(7), Some(2 * GIB));
        assert_eq!(parse_memory("0=1G,0=2G"), Err(ParseError::DuplicateDevice(0)));
        assert!(matches!(parse_memory("0=1G,x=2G"), Err(ParseError::BadEntry(_))));
        assert!(matches!(parse_memory("0=1G,"), Err(ParseError::BadEntry(_))));
        assert!(matches!(parse_memory("+1=1G"), Err(ParseError::BadEntry(_))));
        assert!(matches!(parse_memory("0=1G=2G"), Err(ParseError::NotASize)));
        assert_eq!(parse_memory("0=1GG"), Err(ParseError::NotASize));
    }

    #[test]
    fn a_device_written_two_ways_or_beyond_any_ledger_is_refused() {
        assert_eq!(parse_memory("0=1G,00=2G"), Err(ParseError::BadDeviceIndex("00".into())));
        assert_eq!(parse_memory("99=1GiB"), Err(ParseError::BadDeviceIndex("99".into())));
        assert_eq!(parse_memory("16=1GiB"), Err(ParseError::BadDeviceIndex("16".into())));
        assert_eq!(parse_memory("15=1GiB").unwrap().for_device(15), Some(GIB));
    }

    #[test]
    fn a_list_that_missed_its_device_is_found() {
        let list = parse_memory("1=2G").unwrap();
        assert_eq!(list.missed_device(1), Some((1, 0)), "device 0 uncapped, device 1 unseen");
        assert_eq!(list.missed_device(2), None, "device 1 is seen: capping only it is what the list says");
        let list = parse_memory("0=1G,2=2G").unwrap();
        assert_eq!(list.missed_device(2), Some((2, 1)));
        assert_eq!(list.missed_device(3), None);
        // Every device seen has a cap: the other entries are for other processes.
        assert_eq!(parse_memory("0=1G,1=2G").unwrap().missed_device(1), None);
        assert_eq!(parse_memory("0=1G").unwrap().missed_device(0), None);
        assert_eq!(parse_memory("1G").unwrap().missed_device(0), None);
    }

    #[test]
    fn tenant_names() {
        for good in ["a", "team-a", "ns.pod_1", "a.", "a-", "_a", &"x".repeat(63)] {
            assert_eq!(validate_tenant_name(good), Ok(()), "{good:?}");
        }
        for bad in ["", ".", "..", ".hidden", "-", "-rf", "a/b", "a b", "ü", "a\u{a0}", &"x".repeat(64)] {
            assert!(matches!(validate_tenant_name(bad), Err(ParseError::BadTenantName(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_refused_tenant_name_says_why_and_what_is_accepted() {
        for (bad, why) in [
            (".hidden", "starts with '.'"),
            ("-rf", "starts with '-'"),
            ("a/b", "'/' is not allowed"),
            ("a\u{a0}", "U+00A0 is not allowed"),
            ("", "empty"),
            (&"x".repeat(64), "64 characters"),
        ] {
            let message = validate_tenant_name(bad).unwrap_err().to_string();
            assert!(message.contains(why) && message.contains(TENANT_FORMAT), "{bad:?}: {message}");
        }
    }
}
