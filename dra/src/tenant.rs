//! The tenant of a ResourceClaim: one name per namespace and claim, unique
//! across namespaces, within the monitor's tenant grammar
//! (`[A-Za-z0-9._-]{1,63}`).
//!
//! `<namespace>.<claim>` when it fits: a namespace is a DNS label (no dot),
//! so the first dot splits the name back into the pair and no two pairs
//! share a name. Longer pairs keep a prefix of that and end in `_` and 16
//! hex digits of a SHA-256 of `namespace/claim`; `_` appears in no
//! Kubernetes name, so a digested name never equals a plain one.

use sha2::{Digest, Sha256};

/// The longest tenant name the monitor accepts.
pub const TENANT_MAX: usize = 63;
/// Hex digits of the digest in a long pair's name.
const DIGEST_HEX: usize = 16;

/// The tenant name of the claim `claim` in `namespace`.
pub fn tenant_name(namespace: &str, claim: &str) -> String {
    let plain = format!("{namespace}.{claim}");
    let label = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    // A namespace with a dot is no DNS label; it would make the split ambiguous.
    let clean = namespace.chars().all(label) && claim.chars().all(|c| label(c) || c == '.');
    if plain.len() <= TENANT_MAX && clean {
        return plain;
    }
    let digest = Sha256::digest(format!("{namespace}/{claim}").as_bytes());
    let hex: String = digest.iter().take(DIGEST_HEX / 2).map(|b| format!("{b:02x}")).collect();
    let keep: String =
        plain.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-').take(TENANT_MAX - DIGEST_HEX - 1).collect();
    format!("{keep}_{hex}")
}

/// Whether `name` is in the monitor's tenant grammar.
pub fn valid_tenant(name: &str) -> bool {
    (1..=TENANT_MAX).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_pairs_read_back_and_differ_across_namespaces() {
        assert_eq!(tenant_name("team-a", "train"), "team-a.train");
        assert_ne!(tenant_name("a", "b.c"), tenant_name("a.b", "c"), "a namespace is a DNS label; one with a dot is digested");
        assert_ne!(tenant_name("team-a", "train"), tenant_name("team-b", "train"));
    }

    #[test]
    fn long_pairs_fit_and_stay_apart() {
        let claim = "x".repeat(200);
        let one = tenant_name("team-a", &claim);
        let two = tenant_name("team-a", &format!("{claim}y"));
        assert_eq!(one.len(), TENANT_MAX);
        assert!(valid_tenant(&one) && valid_tenant(&two), "{one} {two}");
        assert_ne!(one, two, "names equal in their first 46 characters still differ");
        assert!(one.contains('_'));
        assert_eq!(one, tenant_name("team-a", &claim), "the same pair, the same name");
    }

    #[test]
    fn every_name_is_in_the_monitor_grammar() {
        for (ns, claim) in [("a", "b"), (&"n".repeat(63)[..], "c"), ("ns", &"c.".repeat(120)[..])] {
            assert!(valid_tenant(&tenant_name(ns, claim)), "{ns}/{claim}");
        }
    }
}
