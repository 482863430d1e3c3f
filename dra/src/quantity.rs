//! Kubernetes quantities (`8Gi`, `500Mi`, `30`, `1.5`, `2500m`, `1e3`), as
//! the API server writes them in ResourceClaims: the consumed `memory` of
//! a claim in bytes, its `compute` in percent.
//!
//! The grammar is the API's: an optional sign, a decimal number, then one
//! suffix: a binary one (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`), a decimal one (`n`
//! `u` `m` `k` `M` `G` `T` `P` `E`, or none) or an exponent (`e3`, `E-2`).

use std::fmt;

/// What a quantity may look like, for error messages.
pub const QUANTITY_FORMAT: &str =
    "a Kubernetes quantity: a decimal number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei, m, k, M, G, T, P, E or exponent (8Gi, 500Mi, 30, 1.5)";

/// A parsed quantity: `digits × 10^exp10 × 1024^exp1024`, never negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    digits: u128,
    exp10: i32,
    exp1024: u32,
}

/// A quantity that did not parse or does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError(pub String);

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Quantity {
    /// Parses `text`; a negative quantity is refused (no amount here is).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let bad = || QuantityError(format!("{text:?} is not {QUANTITY_FORMAT}"));
        let body = text.strip_prefix('+').unwrap_or(text);
        if body.starts_with('-') {
            return Err(QuantityError(format!("{text:?} is negative; an amount is zero or more")));
        }
        let number_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
        let (number, suffix) = body.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return Err(bad());
        }
        let mut digits: u128 = 0;
        for c in whole.chars().chain(fraction.chars()) {
            let d = u128::from(c.to_digit(10).ok_or_else(bad)?);
            digits = digits.checked_mul(10).and_then(|v| v.checked_add(d)).ok_or_else(bad)?;
        }
        let mut exp10 = -i32::try_from(fraction.len()).map_err(|_| bad())?;
        let mut exp1024 = 0;
        match suffix {
            "" => {}
            "Ki" => exp1024 = 1,
            "Mi" => exp1024 = 2,
            "Gi" => exp1024 = 3,
            "Ti" => exp1024 = 4,
            "Pi" => exp1024 = 5,
            "Ei" => exp1024 = 6,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            exponent if exponent.starts_with(['e', 'E']) => {
                let value: i32 = exponent[1..].parse().map_err(|_| bad())?;
                if !(-30..=30).contains(&value) {
                    return Err(bad());
                }
                exp10 += value;
            }
            _ => return Err(bad()),
        }
        Ok(Quantity { digits, exp10, exp1024 })
    }

    /// The amount as a whole number, rounded up as the API server rounds a
    /// quantity's value (`0.5` is 1); `None` past `u64`.
    pub fn ceil_u64(self) -> Option<u64> {
        let mut value = self.digits.checked_mul(1024u128.checked_pow(self.exp1024)?)?;
        if self.exp10 >= 0 {
            value = value.checked_mul(10u128.checked_pow(self.exp10.unsigned_abs())?)?;
        } else {
            let divisor = 10u128.checked_pow(self.exp10.unsigned_abs()).unwrap_or(u128::MAX);
            value = value.div_ceil(divisor);
        }
        u64::try_from(value).ok()
    }

    /// The amount as a float (for percentages).
    pub fn as_f64(self) -> f64 {
        self.digits as f64 * 10f64.powi(self.exp10) * 1024f64.powi(self.exp1024 as i32)
    }
}

/// A size in bytes from a quantity (`8Gi` is 8589934592).
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    Quantity::parse(text)?.ceil_u64().ok_or_else(|| QuantityError(format!("{text:?} is more bytes than fit in 64 bits")))
}

/// A percentage of a device's time from a quantity (`30`, `37.5`, `37500m`): 0 to 100.
pub fn parse_percent(text: &str) -> Result<f64, QuantityError> {
    let value = Quantity::parse(text)?.as_f64();
    if !(0.0..=100.0).contains(&value) {
        return Err(QuantityError(format!("{text:?} is not a percentage of a device's time: 0 to 100 are accepted")));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_the_api_server_means_them() {
        assert_eq!(parse_bytes("8Gi"), Ok(8 << 30));
        assert_eq!(parse_bytes("500Mi"), Ok(500 << 20));
        assert_eq!(parse_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_bytes("8G"), Ok(8_000_000_000));
        assert_eq!(parse_bytes("1e3"), Ok(1000));
        assert_eq!(parse_bytes("8589934592"), Ok(8 << 30));
        assert_eq!(parse_bytes("1500m"), Ok(2), "a fraction of a byte rounds up");
        assert_eq!(parse_bytes("+1Ki"), Ok(1024));
    }

    #[test]
    fn percentages_accept_decimals_and_refuse_more_than_the_device() {
        assert_eq!(parse_percent("30"), Ok(30.0));
        assert_eq!(parse_percent("37.5"), Ok(37.5));
        assert_eq!(parse_percent("37500m"), Ok(37.5));
        assert!(parse_percent("101").unwrap_err().0.contains("0 to 100"));
    }

    #[test]
    fn bad_quantities_say_what_is_accepted() {
        for bad in ["", "8GB", "8 Gi", "Gi", "1.2.3", "-1Gi", "0x10", "8gi", "1e99"] {
            let error = parse_bytes(bad).unwrap_err().0;
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
        assert!(parse_bytes("99999999Ei").unwrap_err().0.contains("64 bits"));
        assert!(parse_bytes("8GB").unwrap_err().0.contains("Kubernetes quantity"));
    }

    use proptest::prelude::*;

    /// Text shaped like a quantity, and near misses: a sign, digits, a
    /// point, a suffix or exponent, anything after.
    fn quantity_text() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["", "+", "-", "+-", "--"]),
            "[0-9]{0,45}",
            prop::option::of("\\.[0-9]{0,45}"),
            prop::sample::select(vec![
                "",
                "Ki",
                "Mi",
                "Gi",
                "Ti",
                "Pi",
                "Ei",
                "n",
                "u",
                "m",
                "k",
                "M",
                "G",
                "T",
                "P",
                "E",
                "e",
                "E",
                "e3",
                "E-2",
                "e-30",
                "e30",
                "e31",
                "e-999999999999",
                "e+5",
                "i",
                "KiB",
                "gi",
            ]),
            prop::option::of(any::<String>()),
        )
            .prop_map(|(sign, whole, fraction, suffix, tail)| {
                format!("{sign}{whole}{}{suffix}{}", fraction.unwrap_or_default(), tail.unwrap_or_default())
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        /// Any text: no panic; a percentage is finite and 0 to 100; a size
        /// is never read from a negative quantity; an error names the text.
        #[test]
        fn any_text_is_read_within_bounds_or_refused(text in prop_oneof![quantity_text(), any::<String>()]) {
            match parse_percent(&text) {
                Ok(percent) => prop_assert!(percent.is_finite() && (0.0..=100.0).contains(&percent), "{text:?}: {percent}"),
                Err(e) => prop_assert!(e.0.contains(&format!("{text:?}")), "{e}"),
            }
            match parse_bytes(&text) {
                Ok(_) => prop_assert!(!text.trim_start_matches('+').starts_with('-'), "{text:?} is negative and was accepted"),
                Err(e) => prop_assert!(e.0.contains(&format!("{text:?}")), "{e}"),
            }
        }

        /// A whole number with a binary suffix is exactly that many bytes,
        /// or refused as past 64 bits: never wrapped.
        #[test]
        fn binary_sizes_are_exact_or_refused(n in any::<u64>(), power in 0u32..=6) {
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power as usize];
            let exact = u128::from(n) << (10 * power);
            match parse_bytes(&format!("{n}{suffix}")) {
                Ok(bytes) => prop_assert_eq!(u128::from(bytes), exact),
                Err(e) => prop_assert!(exact > u128::from(u64::MAX) && e.0.contains("64 bits"), "{n}{suffix}: {e}"),
            }
        }

        /// A fraction rounds up, never down: a claim is never capped below
        /// what the scheduler allotted.
        #[test]
        fn fractions_of_a_byte_round_up(whole in 0u64..1_000_000, thousandths in 0u64..1000) {
            let bytes = parse_bytes(&format!("{whole}.{thousandths:03}")).unwrap();
            prop_assert_eq!(bytes, whole + u64::from(thousandths > 0));
        }
    }
}
