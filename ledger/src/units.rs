//! Parsers for the values people write: sizes, per-device lists, tenant names.
//!
//! Shared by the shim (environment), the monitor (configuration file) and the
//! CLI (`gpuslice run --memory`), so that every front accepts the same words.
//! Every error says what was wrong and what is accepted: a typo must never
//! turn into "unlimited".

use std::fmt;

/// What a size may look like, for error messages.
pub const SIZE_FORMAT: &str =
    "a size like 8GiB, 8G, 512MiB, 1.5GiB, 3000m or plain bytes (K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024)";

/// What a memory limit may look like, for error messages.
pub const MEMORY_LIMIT_FORMAT: &str =
    "one size for every device (8GiB, 512MiB, 3000m, bytes) or a per-device list like 0=8GiB,1=4GiB";

/// What a tenant name may look like, for error messages.
pub const TENANT_FORMAT: &str = "1 to 63 characters from A-Z a-z 0-9 . _ -";

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The text is not a size.
    NotASize,
    /// The size is zero; an explicit cap of nothing is almost always a mistake.
    Zero,
    /// The size does not fit in 64 bits.
    TooLarge,
    /// A per-device entry is not `INDEX=SIZE`.
    BadEntry(String),
    /// A device index appears twice.
    DuplicateDevice(u32),
    /// A tenant name breaks the naming rule.
    BadTenantName,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotASize => write!(f, "expected {SIZE_FORMAT}"),
            ParseError::Zero => write!(f, "a cap of 0 bytes is refused; unset the variable for no cap"),
            ParseError::TooLarge => write!(f, "the size does not fit in 64 bits"),
            ParseError::BadEntry(entry) => write!(f, "entry {entry:?} is not INDEX=SIZE; expected {MEMORY_LIMIT_FORMAT}"),
            ParseError::DuplicateDevice(index) => write!(f, "device {index} is given twice"),
            ParseError::BadTenantName => write!(f, "expected {TENANT_FORMAT}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses a size in bytes: `8GiB`, `8G`, `8g`, `512MiB`, `1.5GiB`, `3000m`,
/// `1073741824`. All suffixes are powers of 1024 (HAMi-core reads `3000m` as
/// 3000 MiB). A fraction that does not come out in whole bytes is rounded
/// down, so a cap can only shrink. `GB`/`MB` are refused as ambiguous.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let text = text.trim();
    let number_len = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_len);
    let shift = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return Err(ParseError::NotASize),
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(ParseError::NotASize);
    }
    if fraction.len() > 18 {
        return Err(ParseError::NotASize);
    }
    let whole: u128 = whole.parse().map_err(|_| ParseError::TooLarge)?;
    let fraction_value: u128 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| ParseError::NotASize)? };
    let fraction_scale = 10u128.pow(fraction.len() as u32);
    let bytes = whole
        .checked_shl(shift)
        .filter(|b| b >> shift == whole)
        .ok_or(ParseError::TooLarge)?
        + ((fraction_value << shift) / fraction_scale);
    let bytes = u64::try_from(bytes).map_err(|_| ParseError::TooLarge)?;
    if bytes == 0 {
        return Err(ParseError::Zero);
    }
    Ok(bytes)
}

/// A memory limit as written: one size for all devices, or one per device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryLimit {
    /// The same cap on every device.
    AllDevices(u64),
    /// Caps by device ordinal (as the process sees it, after
    /// `CUDA_VISIBLE_DEVICES`); devices not listed are not capped.
    PerDevice(Vec<(u32, u64)>),
}

impl MemoryLimit {
    /// The cap of device `ordinal`, if it has one.
    pub fn for_device(&self, ordinal: u32) -> Option<u64> {
        match self {
            MemoryLimit::AllDevices(bytes) => Some(*bytes),
            MemoryLimit::PerDevice(list) => list.iter().find(|(i, _)| *i == ordinal).map(|(_, b)| *b),
        }
    }
}

/// Parses `GPUSLICE_MEMORY_LIMIT`: `8GiB` or `0=8GiB,1=4GiB`.
pub fn parse_memory_limit(text: &str) -> Result<MemoryLimit, ParseError> {
    if !text.contains('=') {
        return parse_size(text).map(MemoryLimit::AllDevices);
    }
    let mut list: Vec<(u32, u64)> = Vec::new();
    for entry in text.split(',') {
        let (index, size) = entry.split_once('=').ok_or_else(|| ParseError::BadEntry(entry.to_string()))?;
        let index: u32 = index.trim().parse().map_err(|_| ParseError::BadEntry(entry.to_string()))?;
        let bytes = parse_size(size)?;
        if list.iter().any(|(i, _)| *i == index) {
            return Err(ParseError::DuplicateDevice(index));
        }
        list.push((index, bytes));
    }
    Ok(MemoryLimit::PerDevice(list))
}

/// Checks a tenant name: `[A-Za-z0-9._-]{1,63}`, and not `.` or `..`, since
/// it names a file.
pub fn validate_tenant_name(name: &str) -> Result<(), ParseError> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok_chars && (1..=63).contains(&name.len()) && name != "." && name != ".." {
        Ok(())
    } else {
        Err(ParseError::BadTenantName)
    }
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
        assert_eq!(parse_size("1073741824"), Ok(GIB));
        assert_eq!(parse_size("4 KiB"), Ok(4096));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("0.5k"), Ok(512));
    }

    #[test]
    fn fractions_round_down() {
        assert_eq!(parse_size("0.1k"), Ok(102));
    }

    #[test]
    fn bad_sizes_are_refused_never_unlimited() {
        for bad in ["", "4GG", "GiB", "8GB", "8 MB", "-1", "1..5G", "1.G", ".5G", "1e9", "8GiBs", "0x10"] {
            assert_eq!(parse_size(bad), Err(ParseError::NotASize), "{bad:?}");
        }
        assert_eq!(parse_size("0"), Err(ParseError::Zero));
        assert_eq!(parse_size("0GiB"), Err(ParseError::Zero));
        assert_eq!(parse_size("16777216T"), Err(ParseError::TooLarge));
        assert_eq!(parse_size("99999999999999999999999"), Err(ParseError::TooLarge));
    }

    #[test]
    fn error_message_names_the_accepted_format() {
        let message = parse_size("4GG").unwrap_err().to_string();
        assert!(message.contains("8GiB") && message.contains("3000m"), "{message}");
    }

    #[test]
    fn per_device_lists() {
        assert_eq!(
            parse_memory_limit("0=8GiB,1=4GiB"),
            Ok(MemoryLimit::PerDevice(vec![(0, 8 * GIB), (1, 4 * GIB)]))
        );
        let limit = parse_memory_limit("1=3000m").unwrap();
        assert_eq!(limit.for_device(1), Some(3000 * MIB));
        assert_eq!(limit.for_device(0), None);
        assert_eq!(parse_memory_limit("2GiB").unwrap().for_device(7), Some(2 * GIB));
        assert_eq!(parse_memory_limit("0=1G,0=2G"), Err(ParseError::DuplicateDevice(0)));
        assert!(matches!(parse_memory_limit("0=1G,x=2G"), Err(ParseError::BadEntry(_))));
        assert!(matches!(parse_memory_limit("0=1G,"), Err(ParseError::BadEntry(_))));
        assert_eq!(parse_memory_limit("0=1GG"), Err(ParseError::NotASize));
    }

    #[test]
    fn tenant_names() {
        for good in ["a", "team-a", "ns.pod_1", &"x".repeat(63)] {
            assert_eq!(validate_tenant_name(good), Ok(()), "{good:?}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(64)] {
            assert_eq!(validate_tenant_name(bad), Err(ParseError::BadTenantName), "{bad:?}");
        }
    }
}
