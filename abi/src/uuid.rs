//! Device UUIDs in the text NVML and `nvidia-smi -L` print:
//! `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` for a device and `MIG-…` for
//! a MIG device, hex digits in lower case, over the 16 bytes
//! `cuDeviceGetUuid` gives (for a MIG device, its `MIG-…` UUID's).

use core::fmt;

/// What a UUID names, which its text says by its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UuidKind {
    /// A device: `GPU-…`.
    Gpu,
    /// A MIG device: `MIG-…`.
    Mig,
}

impl UuidKind {
    /// `GPU-` or `MIG-`.
    pub const fn prefix(self) -> &'static str {
        match self {
            UuidKind::Gpu => "GPU-",
            UuidKind::Mig => "MIG-",
        }
    }
}

/// A UUID as text (its `Display`): `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UuidText {
    pub kind: UuidKind,
    pub bytes: [u8; 16],
}

/// The text of a device's UUID, `GPU-…`.
pub const fn gpu_uuid(bytes: &[u8; 16]) -> UuidText {
    UuidText { kind: UuidKind::Gpu, bytes: *bytes }
}

impl fmt::Display for UuidText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.prefix())?;
        for (i, byte) in self.bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Parses a UUID's text: `GPU-` or `MIG-` (in any case), then 32 hex
/// digits (in any case), dashes between them ignored. `None` for anything
/// else.
pub fn parse_uuid(text: &str) -> Option<UuidText> {
    let (prefix, hex) = (text.get(..4)?, text.get(4..)?);
    let kind = [UuidKind::Gpu, UuidKind::Mig].into_iter().find(|k| prefix.eq_ignore_ascii_case(k.prefix()))?;
    let mut bytes = [0u8; 16];
    let mut digits = hex.bytes().filter(|b| *b != b'-');
    for byte in &mut bytes {
        let high = hex_digit(digits.next()?)?;
        let low = hex_digit(digits.next()?)?;
        *byte = high << 4 | low;
    }
    digits.next().is_none().then_some(UuidText { kind, bytes })
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn uuids_round_trip_through_their_text() {
        let raw: [u8; 16] = [0x5f, 0x1c, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x0a, 0x0b, 0x0c, 0xff];
        let text = gpu_uuid(&raw).to_string();
        assert_eq!(text, "GPU-5f1c0001-0203-0405-0607-08090a0b0cff");
        assert_eq!(parse_uuid(&text), Some(gpu_uuid(&raw)));
        assert_eq!(parse_uuid(&text.to_uppercase()), Some(gpu_uuid(&raw)));
        let mig = UuidText { kind: UuidKind::Mig, bytes: raw };
        assert_eq!(mig.to_string(), "MIG-5f1c0001-0203-0405-0607-08090a0b0cff");
        assert_eq!(parse_uuid("mig-5f1c0001-0203-0405-0607-08090a0b0cff"), Some(mig));
        for bad in [
            "GPU-123",
            "GPU-5f1c0001-0203-0405-0607-08090a0b0cff0",
            "GPU-5f1c0001-0203-0405-0607-08090a0b0cf",
            "GPU-+f1c0001-0203-0405-0607-08090a0b0cff",
            "GPU-5f1c0001-0203-0405-0607-08090a0b0cfg",
            "XYZ-5f1c0001-0203-0405-0607-08090a0b0cff",
            "5f1c0001-0203-0405-0607-08090a0b0cff",
            "MIG-GPU-5f1c0001-0203-0405-0607-08090a0b0cff/1/0",
            "GPU-5f1c0001-0203-0405-0607-08090a0b0cf\u{e9}",
            "",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad:?}");
        }
    }
}
