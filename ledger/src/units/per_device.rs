//! A setting with a value per device, and the one grammar it is written in.
//!
//! Every per-device setting (a memory cap, a compute limit or share, a
//! priority) is one value for every device, values for single devices, or
//! both (HAMi-core's `CUDA_DEVICE_MEMORY_LIMIT` with `…_1` overriding it for
//! device 1; the configuration's `{ 0 = 30, all = 60 }`). [`PerDevice`]
//! holds any of them; [`parse_per_device`] reads the text form people write
//! in the environment and on the command line, `VALUE` or
//! `INDEX=VALUE,INDEX=VALUE`, given the parser of one value.

use super::{parse_device_index, refuse_non_ascii, ParseError};
use crate::layout::MAX_DEVICES;
use std::fmt;

/// A value for every device, values for single devices (which win over it),
/// or both. `K` names a device: an ordinal as a process sees it (`u32`),
/// or the monitor's configuration key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerDevice<T, K = u32> {
    /// The value of every device not in `devices`.
    pub all: Option<T>,
    /// Values of single devices, each device once, in the order written.
    pub devices: Vec<(K, T)>,
}

impl<T, K> Default for PerDevice<T, K> {
    fn default() -> Self {
        PerDevice { all: None, devices: Vec::new() }
    }
}

impl<T: Copy, K: PartialEq> PerDevice<T, K> {
    /// The same value on every device.
    pub fn all_devices(value: T) -> Self {
        PerDevice { all: Some(value), devices: Vec::new() }
    }

    /// Whether any device has a value.
    pub fn is_set(&self) -> bool {
        self.all.is_some() || !self.devices.is_empty()
    }

    /// The value of device `key`: its own, else the one for every device.
    pub fn get(&self, key: &K) -> Option<T> {
        self.listed(key).or(self.all)
    }

    /// The value given for device `key` itself, not for every device.
    pub fn listed(&self, key: &K) -> Option<T> {
        self.devices.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The one value for every device, when no device has its own (the
    /// form a caller that chooses the devices itself can take).
    pub fn single(&self) -> Option<T> {
        self.all.filter(|_| self.devices.is_empty())
    }

    /// Gives device `key` its own value; a device given twice is refused
    /// (and keeps its first value).
    pub fn insert(&mut self, key: K, value: T) -> Result<(), DuplicateDevice> {
        if self.devices.iter().any(|(k, _)| *k == key) {
            return Err(DuplicateDevice);
        }
        self.devices.push((key, value));
        Ok(())
    }

    /// The devices that have values of their own.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.devices.iter().map(|(k, _)| k)
    }

    /// The same devices with each value mapped.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerDevice<U, K> {
        PerDevice { all: self.all.map(&mut f), devices: self.devices.into_iter().map(|(k, v)| (k, f(v))).collect() }
    }
}

impl<T: Copy> PerDevice<T> {
    /// The value of device `ordinal`, if it has one.
    pub fn for_device(&self, ordinal: u32) -> Option<T> {
        self.get(&ordinal)
    }

    /// For a process that sees `visible` devices (or at most that many): a
    /// listed device it does not see, paired with a device it sees that is
    /// left without a value. Such a list missed its device (`1=1GiB` where
    /// the process's only device is 0): the typo would mean "no cap". A
    /// list that gives every device the process sees a value and names more
    /// (one list shared by processes that each see some of the host's
    /// devices) misses nothing.
    pub fn missed_device(&self, visible: u32) -> Option<(u32, u32)> {
        let unseen = self.devices.iter().map(|(i, _)| *i).find(|i| *i >= visible)?;
        let unset = (0..visible.min(MAX_DEVICES as u32)).find(|ordinal| self.for_device(*ordinal).is_none())?;
        Some((unseen, unset))
    }
}

/// A device given twice in one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateDevice;

/// Why a per-device list was refused, apart from its values: each value
/// parser's error type takes these in (`From<ListError>`), so that one
/// error says what was wrong with the text, whichever part it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListError {
    /// The text holds a character that is not ASCII.
    NotAscii(char),
    /// An entry is not `INDEX=VALUE` (as written).
    BadEntry(String),
    /// A device index (as written) that is not `0` to `MAX_DEVICES - 1` in
    /// plain decimal.
    BadDeviceIndex(String),
    /// A device index appears twice.
    DuplicateDevice(u32),
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListError::NotAscii(c) => ParseError::NotAscii(*c).fmt(f),
            ListError::BadEntry(entry) => write!(f, "entry {entry:?} is not INDEX=VALUE"),
            ListError::BadDeviceIndex(index) => ParseError::BadDeviceIndex(index.clone()).fmt(f),
            ListError::DuplicateDevice(index) => ParseError::DuplicateDevice(*index).fmt(f),
        }
    }
}

impl std::error::Error for ListError {}

/// Parses a per-device setting: one value for every device (`8GiB`, `30`)
/// or a list of `INDEX=VALUE` entries separated by commas (`0=8GiB,1=4GiB`),
/// each device once. The whole text is ASCII; ASCII whitespace around an
/// index is allowed (around a value, as `value` allows); indices follow
/// [`parse_device_index`]. `value` parses one value.
pub fn parse_per_device<T: Copy, E: From<ListError>>(text: &str, value: impl Fn(&str) -> Result<T, E>) -> Result<PerDevice<T>, E> {
    if let Err(ParseError::NotAscii(c)) = refuse_non_ascii(text) {
        return Err(ListError::NotAscii(c).into());
    }
    if !text.contains('=') {
        return value(text).map(PerDevice::all_devices);
    }
    let mut setting = PerDevice::default();
    for entry in text.split(',') {
        let bad_entry = || E::from(ListError::BadEntry(entry.to_string()));
        let (index, written) = entry.split_once('=').ok_or_else(bad_entry)?;
        let index = index.trim_ascii();
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad_entry());
        }
        let index = parse_device_index(index).map_err(|_| ListError::BadDeviceIndex(index.to_string()))?;
        let parsed = value(written)?;
        setting.insert(index, parsed).map_err(|DuplicateDevice| ListError::DuplicateDevice(index))?;
    }
    Ok(setting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> Result<u32, ListError> {
        text.trim_ascii().parse().map_err(|_| ListError::BadEntry(format!("value {text}")))
    }

    #[test]
    fn one_value_or_a_list_each_device_once() {
        assert_eq!(parse_per_device("7", number), Ok(PerDevice::all_devices(7)));
        let list = parse_per_device(" 0 = 7 , 3=9", number).unwrap();
        assert_eq!(list.devices, vec![(0, 7), (3, 9)]);
        assert_eq!((list.for_device(0), list.for_device(1), list.for_device(3)), (Some(7), None, Some(9)));
        assert_eq!(list.single(), None);
        assert_eq!(PerDevice::<u32>::all_devices(4).single(), Some(4));
        for (bad, error) in [
            ("0=1,0=2", ListError::DuplicateDevice(0)),
            ("0=1,00=2", ListError::BadDeviceIndex("00".into())),
            ("16=1", ListError::BadDeviceIndex("16".into())),
            ("0=1,", ListError::BadEntry(String::new())),
            ("+1=1", ListError::BadEntry("+1=1".into())),
            ("x=1", ListError::BadEntry("x=1".into())),
            ("0=1\u{a0}", ListError::NotAscii('\u{a0}')),
        ] {
            assert_eq!(parse_per_device(bad, number), Err(error), "{bad:?}");
        }
        assert_eq!(parse_per_device("0=x", number), Err(ListError::BadEntry("value x".into())), "the value's own error");
    }

    #[test]
    fn a_device_of_its_own_wins_over_every_device() {
        let mut setting = PerDevice::all_devices(1u32);
        setting.insert(2, 5).unwrap();
        assert_eq!(setting.insert(2, 6), Err(DuplicateDevice));
        assert_eq!((setting.for_device(0), setting.for_device(2)), (Some(1), Some(5)));
        assert_eq!((setting.listed(&0), setting.listed(&2)), (None, Some(5)));
        assert!(setting.is_set() && !PerDevice::<u32>::default().is_set());
        assert_eq!(setting.map(|v| v * 10).for_device(2), Some(50));
    }

    #[test]
    fn a_list_that_missed_its_device_is_found() {
        let list = parse_per_device("1=2", number).unwrap();
        assert_eq!(list.missed_device(1), Some((1, 0)), "device 0 unset, device 1 unseen");
        assert_eq!(list.missed_device(2), None, "device 1 is seen: setting only it is what the list says");
        let list = parse_per_device("0=1,2=2", number).unwrap();
        assert_eq!(list.missed_device(2), Some((2, 1)));
        assert_eq!(list.missed_device(3), None);
        assert_eq!(parse_per_device("0=1,1=2", number).unwrap().missed_device(1), None);
        assert_eq!(parse_per_device("0=1", number).unwrap().missed_device(0), None);
        assert_eq!(parse_per_device("1", number).unwrap().missed_device(0), None);
        let mut both = PerDevice::all_devices(1);
        both.insert(5, 2).unwrap();
        assert_eq!(both.missed_device(1), None, "every device has the value for every device");
    }
}
