//! `CUDA_VISIBLE_DEVICES`: which physical devices the driver API shows, and
//! in what order.
//!
//! The value is a comma-separated list of device indices or UUIDs
//! (`GPU-8932f937-…`, or any prefix of it, `GPU-` included, that names exactly
//! one device). Visible devices are numbered in list order: the first entry is
//! ordinal 0. An entry that names no device (out of range, negative,
//! malformed, an ambiguous UUID prefix, or a device already listed) ends the
//! list: only the entries before it are visible. An empty value hides every
//! device. Unset, every device is visible in index order.
//!
//! Only the driver API applies it; NVML, as on a real system, always shows
//! every device.

/// Maps the variable's value to the physical indices it makes visible, in
/// ordinal order. `uuids` are the devices' UUID strings (`GPU-…`), by index.
pub fn visible_devices(spec: Option<&str>, uuids: &[String]) -> Vec<usize> {
    let Some(spec) = spec else { return (0..uuids.len()).collect() };
    let mut visible = Vec::new();
    for entry in spec.split(',') {
        match resolve(entry.trim(), uuids) {
            Some(i) if !visible.contains(&i) => visible.push(i),
            _ => break,
        }
    }
    visible
}

fn resolve(entry: &str, uuids: &[String]) -> Option<usize> {
    if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<usize>().ok().filter(|&i| i < uuids.len());
    }
    let is_uuid = entry.len() > 4 && entry.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("GPU-"));
    if !is_uuid {
        return None;
    }
    let mut matches = uuids.iter().enumerate().filter(|(_, u)| u.len() >= entry.len() && u.get(..entry.len()).is_some_and(|p| p.eq_ignore_ascii_case(entry)));
    match (matches.next(), matches.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuids() -> Vec<String> {
        vec![
            "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6".into(),
            "GPU-89aa0000-0000-4000-8000-000000000001".into(),
            "GPU-12345678-0000-4000-8000-000000000002".into(),
        ]
    }

    #[test]
    fn unset_shows_all_and_empty_shows_none() {
        assert_eq!(visible_devices(None, &uuids()), vec![0, 1, 2]);
        assert_eq!(visible_devices(Some(""), &uuids()), Vec::<usize>::new());
    }

    #[test]
    fn indices_reorder_and_an_invalid_entry_truncates() {
        assert_eq!(visible_devices(Some("2,1"), &uuids()), vec![2, 1]);
        assert_eq!(visible_devices(Some("0,2,-1,1"), &uuids()), vec![0, 2]);
        assert_eq!(visible_devices(Some("3,0"), &uuids()), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("1,1,0"), &uuids()), vec![1]);
        assert_eq!(visible_devices(Some("0,,1"), &uuids()), vec![0]);
        assert_eq!(visible_devices(Some(" 1 , 0 "), &uuids()), vec![1, 0]);
        assert_eq!(visible_devices(Some("1x"), &uuids()), Vec::<usize>::new());
    }

    #[test]
    fn uuids_and_unique_prefixes_name_devices() {
        let u = uuids();
        assert_eq!(visible_devices(Some(&format!("{},0", u[2])), &u), vec![2, 0]);
        assert_eq!(visible_devices(Some("GPU-1234"), &u), vec![2]);
        assert_eq!(visible_devices(Some("gpu-8932F937"), &u), vec![0]);
        // "GPU-89" is shared by two devices: ambiguous, so invalid.
        assert_eq!(visible_devices(Some("1,GPU-89,0"), &u), vec![1]);
        assert_eq!(visible_devices(Some("GPU-"), &u), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("8932f937"), &u), Vec::<usize>::new());
        assert_eq!(visible_devices(Some("MIG-GPU-8932f937/1/2"), &u), Vec::<usize>::new());
    }
}
