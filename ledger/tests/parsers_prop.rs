//! The parsers of `ledger::units` under random input, as a fuzzer would
//! drive them, for a bounded number of cases on every `cargo test`; then the
//! committed corpus of values people and tenants have written
//! (`parsers_corpus.txt`), each with the verdict it must get.
//!
//! What must hold, whatever the input:
//! - no parser panics;
//! - an accepted size is what the text says (to the byte, fractions rounded
//!   down), at least one byte, and prints back to itself in bytes (`4096B`);
//! - a number without a unit is refused, whatever it is;
//! - an accepted text holds nothing but the grammar: text with junk in it
//!   (a character that is not ASCII, a sign, a separator, a second dot…) is
//!   refused;
//! - a per-device list names each device once, below the ledger's device
//!   table, and prints back to the same caps;
//! - a tenant name is accepted exactly when it follows the rule.
//!
//! proptest keeps the seed of any case that ever failed in
//! `proptest-regressions/` and runs it first.

use ledger::units::{parse_device_index, parse_memory, parse_size, validate_tenant_name, ParseError};
use ledger::MAX_DEVICES;
use proptest::prelude::*;

const CASES: u32 = 2000;

/// Units and the power of two they stand for.
const UNITS: &[(&str, u32)] = &[
    ("", 0),
    ("b", 0),
    ("B", 0),
    ("k", 10),
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("K", 10),
    ("KiB", 10),
    ("kib", 10),
    ("m", 20),
    ("M", 20),
    ("MiB", 20),
    ("g", 30),
    ("G", 30),
    ("GiB", 30),
    ("gIb", 30),
    ("t", 40),
    ("T", 40),
    ("TiB", 40),
];

fn unit() -> impl Strategy<Value = (&'static str, u32)> {
    prop::sample::select(UNITS)
}

/// A number as people write it: no leading zeros.
fn whole() -> impl Strategy<Value = u128> {
    prop_oneof![0u128..10, 0u128..100_000, any::<u64>().prop_map(u128::from), any::<u128>()]
}

/// Characters that no size, list or name may hold anywhere: not ASCII, or
/// ASCII that is not part of any grammar here.
fn junk() -> impl Strategy<Value = char> {
    prop_oneof![
        any::<char>().prop_filter("not ASCII", |c| !c.is_ascii()),
        prop::sample::select(vec![
            '\u{0}', '\u{7}', '\u{1b}', '\u{7f}', '-', '+', '_', ';', ':', '/', '\\', '#', '*', '%', '!', '?', '"', '\'', 'x', 'e', 'p',
            'q', 'z'
        ]),
    ]
}

/// Exactly the bytes `whole.fraction` × 2^shift, rounded down, if it fits.
fn exact_bytes(whole: u128, fraction: &str, shift: u32) -> Option<u64> {
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction_value: u128 = if fraction.is_empty() { 0 } else { fraction.parse().ok()? };
    let whole_bytes = whole.checked_mul(1u128 << shift)?;
    let bytes = whole_bytes.checked_add(fraction_value * (1u128 << shift) / scale)?;
    u64::try_from(bytes).ok()
}

/// The characters an accepted size, or list, may consist of.
fn grammar_char(c: char) -> bool {
    c.is_ascii_digit() || c.is_ascii_whitespace() || "kmgtibKMGTIB.".contains(c)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn any_text_never_panics(text in any::<String>()) {
        let _ = parse_size(&text);
        let _ = parse_memory(&text);
        let _ = parse_device_index(&text);
        let _ = validate_tenant_name(&text);
    }

    #[test]
    fn size_ish_text_never_panics_and_what_is_accepted_is_in_the_grammar(
        text in "[ \t0-9.kmgtibKMGTIB=,\u{a0}x+-]{0,24}"
    ) {
        if let Ok(bytes) = parse_size(&text) {
            prop_assert!(bytes >= 1);
            prop_assert!(text.chars().all(grammar_char), "{text:?} accepted as {bytes}");
            let number = text.trim_ascii().split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap_or("");
            let leading_zero = number.len() > 1 && number.starts_with('0') && !number.starts_with("0.");
            prop_assert!(!leading_zero, "{text:?} has a leading zero and was accepted as {bytes}");
            prop_assert_eq!(parse_size(&format!("{bytes}B")), Ok(bytes), "the form in bytes round-trips");
            prop_assert!(parse_size(&bytes.to_string()).is_err(), "{} without a unit was accepted", bytes);
        }
        if let Ok(limit) = parse_memory(&text) {
            let list = limit.devices;
            let mut indices: Vec<u32> = list.iter().map(|(i, _)| *i).collect();
            indices.sort_unstable();
            indices.dedup();
            prop_assert_eq!(indices.len(), list.len(), "{:?}: a device given twice", text);
            prop_assert!(list.iter().all(|(i, b)| (*i as usize) < MAX_DEVICES && *b >= 1));
        }
    }

    #[test]
    fn whole_sizes_are_exactly_what_they_say((n, (unit, shift)) in (whole(), unit()), space in prop::bool::ANY) {
        let text = format!("{n}{}{unit}", if space && !unit.is_empty() { " " } else { "" });
        match exact_bytes(n, "", shift) {
            Some(0) => prop_assert_eq!(parse_size(&text), Err(ParseError::Zero)),
            Some(_) if unit.is_empty() => prop_assert_eq!(parse_size(&text), Err(ParseError::NoUnit(n.to_string()))),
            Some(bytes) => prop_assert_eq!(parse_size(&text), Ok(bytes)),
            None => prop_assert_eq!(parse_size(&text), Err(ParseError::TooLarge)),
        }
    }

    #[test]
    fn fractions_are_rounded_down_never_up(
        n in 0u128..1_000_000,
        fraction in "[0-9]{1,18}",
        (unit, shift) in unit(),
    ) {
        let text = format!("{n}.{fraction}{unit}");
        match exact_bytes(n, &fraction, shift) {
            Some(0) => prop_assert_eq!(parse_size(&text), Err(ParseError::Zero)),
            Some(_) if unit.is_empty() => prop_assert_eq!(parse_size(&text), Err(ParseError::NoUnit(format!("{n}.{fraction}")))),
            Some(bytes) => {
                prop_assert_eq!(parse_size(&text), Ok(bytes));
                // bytes <= the exact value < bytes + 1
                let scale = 10u128.pow(fraction.len() as u32);
                let exact_scaled = (n * scale + fraction.parse::<u128>().unwrap()) << shift;
                prop_assert!(u128::from(bytes) * scale <= exact_scaled && exact_scaled < (u128::from(bytes) + 1) * scale);
            }
            None => prop_assert_eq!(parse_size(&text), Err(ParseError::TooLarge)),
        }
    }

    #[test]
    fn junk_anywhere_in_a_size_is_refused(
        (n, (unit, _)) in (1u64..1_000_000, unit()),
        c in junk(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut text: Vec<char> = format!("{n}{unit}").chars().collect();
        let at = at.index(text.len() + 1);
        text.insert(at, c);
        let text: String = text.into_iter().collect();
        prop_assert!(parse_size(&text).is_err(), "{:?} was accepted as {:?}", text, parse_size(&text));
        prop_assert!(parse_memory(&text).is_err(), "{:?}", text);
    }

    #[test]
    fn a_leading_zero_is_refused((n, (unit, _)) in (1u64..1_000_000, unit()), zeros in 1usize..4) {
        let text = format!("{}{n}{unit}", "0".repeat(zeros));
        prop_assert!(matches!(parse_size(&text), Err(ParseError::LeadingZero(_))), "{:?}", text);
    }

    #[test]
    fn per_device_lists_round_trip(caps in prop::collection::btree_map(0u32..MAX_DEVICES as u32, 1u64..u64::MAX, 1..MAX_DEVICES)) {
        let text: Vec<String> = caps.iter().map(|(i, b)| format!("{i}={b}B")).collect();
        let text = text.join(",");
        let list = match parse_memory(&text) {
            Ok(limit) if limit.all.is_none() => limit.devices,
            other => return Err(TestCaseError::fail(format!("{text:?}: {other:?}"))),
        };
        prop_assert_eq!(list, caps.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_device_given_twice_is_refused_however_it_is_written(
        index in 0u32..MAX_DEVICES as u32,
        padding in 0usize..3,
        leading_zeros in 0usize..2,
    ) {
        let again = format!("{}{}{index}{}", " ".repeat(padding), "0".repeat(leading_zeros), " ".repeat(padding));
        let text = format!("{index}=1G,{again}=2G");
        prop_assert!(parse_memory(&text).is_err(), "{:?}", text);
    }

    #[test]
    fn device_indices_are_accepted_exactly_when_plain_and_in_range(text in "[0-9+ -]{0,4}") {
        let plain = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'))
            && text.parse::<usize>().is_ok_and(|i| i < MAX_DEVICES);
        prop_assert_eq!(parse_device_index(&text).is_ok(), plain, "{:?}", text);
        if let Ok(index) = parse_device_index(&text) {
            prop_assert_eq!(index.to_string(), text);
        }
    }

    #[test]
    fn tenant_names_are_accepted_exactly_when_they_follow_the_rule(
        name in prop_oneof!["[A-Za-z0-9._/ \u{a0}ü-]{0,70}", "[.]?[a-z0-9._-]{0,64}", any::<String>()]
    ) {
        let follows = (1..=63).contains(&name.len())
            && !name.starts_with('.')
            && !name.starts_with('-')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        match validate_tenant_name(&name) {
            Ok(()) => prop_assert!(follows, "{:?} accepted", name),
            Err(e) => {
                prop_assert!(!follows, "{:?} refused: {}", name, e);
                prop_assert!(e.to_string().contains(ledger::units::TENANT_FORMAT));
            }
        }
    }
}

/// `\u{XXXX}`, `\t`, `\n` and `""` in the corpus, decoded.
fn unescape(text: &str) -> String {
    if text == "\"\"" {
        return String::new();
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at..];
        if let Some(after) = escape.strip_prefix("\\u{") {
            let end = after.find('}').expect("an escape \\u{…} is closed");
            let code = u32::from_str_radix(&after[..end], 16).expect("\\u{…} holds hex");
            out.push(char::from_u32(code).expect("\\u{…} is a character"));
            rest = &after[end + 1..];
        } else if let Some(after) = escape.strip_prefix("\\t") {
            out.push('\t');
            rest = after;
        } else if let Some(after) = escape.strip_prefix("\\n") {
            out.push('\n');
            rest = after;
        } else {
            panic!("unknown escape in the corpus: {escape}");
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn the_corpus_gets_its_verdicts() {
    let corpus = include_str!("parsers_corpus.txt");
    let mut checked = 0;
    for (number, line) in corpus.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let (kind, verdict, text) = match fields.as_slice() {
            [kind, verdict, text, ..] => (*kind, *verdict, unescape(text)),
            _ => panic!("parsers_corpus.txt:{}: expected KIND, VERDICT and TEXT: {line:?}", number + 1),
        };
        let at = format!("parsers_corpus.txt:{}: {kind} {text:?}", number + 1);
        let accepted = match kind {
            "size" => parse_size(&text).map(Some),
            "limit" => parse_memory(&text).map(|_| None),
            "index" => parse_device_index(&text).map(|_| None),
            "tenant" => validate_tenant_name(&text).map(|_| None),
            other => panic!("{at}: unknown kind {other}"),
        };
        match (verdict, accepted) {
            ("accept", Ok(bytes)) => {
                if let (Some(expected), Some(bytes)) = (fields.get(3), bytes) {
                    assert_eq!(bytes.to_string(), *expected, "{at}");
                }
            }
            ("refuse", Err(e)) => assert!(!e.to_string().is_empty(), "{at}"),
            (verdict, result) => panic!("{at}: expected {verdict}, got {result:?}"),
        }
        checked += 1;
    }
    assert!(checked > 100, "the corpus was read: {checked} cases");
}
