//! The names of the managed ingress's DNS: each cluster's CNAME under the
//! platform's base domain, the labels the platform keeps for itself, and
//! which hostnames fall under the base domain. The `sync-dns` function keeps
//! the Route53 zone to them.

use uuid::Uuid;

/// The CNAME name of a cluster under the base domain.
pub fn cluster_record(vcluster_name: &str, cluster_id: Uuid, base_domain: &str) -> String {
    format!(
        "{vcluster_name}-{}.{base_domain}",
        &cluster_id.simple().to_string()[..8]
    )
}

/// Labels right under the base domain the platform keeps for itself: its
/// own hosts, and the names a phishing page under the platform's domain
/// would want (billing, sign-in, support).
pub const RESERVED_LABELS: &[&str] = &[
    "account",
    "accounts",
    "admin",
    "api",
    "app",
    "auth",
    "billing",
    "checkout",
    "console",
    "dashboard",
    "docs",
    "edge",
    "help",
    "id",
    "ingress",
    "join",
    "kubebyon",
    "login",
    "mail",
    "ns1",
    "ns2",
    "oauth",
    "pay",
    "payment",
    "payments",
    "portal",
    "security",
    "signin",
    "smtp",
    "sso",
    "status",
    "support",
    "www",
];

/// A label's look: the ASCII confusables of UTS #39 folded (`rn` reads as
/// `m`, `vv` as `w`, `cl` as `d`, `0` as `o`, `1` and `i` as `l`), so
/// `c0nsole` and `rnail` look like what they mimic.
fn skeleton(label: &str) -> String {
    label
        .replace("rn", "m")
        .replace("vv", "w")
        .replace("cl", "d")
        .replace('0', "o")
        .replace(['1', 'i'], "l")
}

/// Whether a label has the form of a cluster's own name, `<name>-<8 hex>`.
fn is_cluster_label(label: &str) -> bool {
    label.rsplit_once('-').is_some_and(|(name, id)| {
        !name.is_empty()
            && id.len() == 8
            && id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Why `hostname`, under `base_domain`, cannot be bound to the cluster whose
/// own name starts with `own_label` — if it cannot: a label the platform
/// keeps, a cluster's own name (another's, or the form clusters' names take,
/// which a later cluster may get; names under the binding cluster's own are
/// free), or at or under one of the platform's own hosts (`platform_hosts`:
/// the edge target, the API's and join's hosts).
pub fn reserved(
    hostname: &str,
    base_domain: &str,
    own_label: &str,
    platform_hosts: &[String],
) -> Option<String> {
    if let Some(host) = platform_hosts
        .iter()
        .map(|h| normalize(h))
        .find(|h| hostname == h || hostname.ends_with(&format!(".{h}")))
    {
        return Some(format!("{hostname} is the platform's own ({host})"));
    }
    let label = hostname
        .strip_suffix(&format!(".{base_domain}"))?
        .rsplit('.')
        .next()?;
    if label.starts_with("xn--") {
        return Some(format!(
            "{label}.{base_domain}: internationalized labels right under the platform's domain are refused (they can mimic its names)"
        ));
    }
    let look = skeleton(label);
    if let Some(kept) = RESERVED_LABELS.iter().find(|kept| skeleton(kept) == look) {
        return Some(format!(
            "{label}.{base_domain} is kept for the platform (it reads as {kept})"
        ));
    }
    if is_cluster_label(label)
        && (label != own_label || hostname == format!("{label}.{base_domain}"))
    {
        return Some(format!(
            "{label}.{base_domain} has the form of a cluster's own name (<name>-<8 hex digits>)"
        ));
    }
    None
}

/// Whether `hostname` is under (not equal to) the base domain.
pub fn is_under(hostname: &str, base_domain: &str) -> bool {
    hostname.len() > base_domain.len() + 1 && hostname.ends_with(&format!(".{base_domain}"))
}

/// A DNS name as Route53 and the database compare it: lowercase, no final dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_names_and_cluster_names_are_reserved() {
        let base = "apps.example.com";
        let own = "shop-0a1b2c3d";
        let hosts = [
            "edge.apps.example.com".to_string(),
            "kubebyon.example.com".to_string(),
        ];
        for taken in [
            "console.apps.example.com",
            "x.console.apps.example.com",
            "www.apps.example.com",
            "other-deadbeef.apps.example.com",
            "www.other-deadbeef.apps.example.com",
            "shop-0a1b2c3d.apps.example.com",
            "edge.apps.example.com",
            "a.edge.apps.example.com",
            // The review's names: a billing page, and look-alikes of the
            // console's name, by punycode or by ASCII confusables.
            "billing.apps.example.com",
            "xn--cnsole-9ve.apps.example.com",
            "c0nsole.apps.example.com",
            "consoie.apps.example.com",
            "rnail.apps.example.com",
            "vvww.apps.example.com",
        ] {
            assert!(reserved(taken, base, own, &hosts).is_some(), "{taken}");
        }
        for free in [
            "blog.apps.example.com",
            "www.shop-0a1b2c3d.apps.example.com",
            "shop-0a1b2c3.apps.example.com",
            "console.example.org",
            "xn--80ak6aa92e.blog.apps.example.com",
            "consoles.apps.example.com",
        ] {
            assert!(reserved(free, base, own, &hosts).is_none(), "{free}");
        }
    }

    #[test]
    fn names_under_the_base_domain() {
        let id = Uuid::parse_str("12345678-9abc-def0-1234-56789abcdef0").unwrap();
        assert_eq!(
            cluster_record("shop", id, "apps.example.com"),
            "shop-12345678.apps.example.com"
        );
        assert!(is_under("www.apps.example.com", "apps.example.com"));
        assert!(!is_under("apps.example.com", "apps.example.com"));
        assert!(!is_under("evilapps.example.com", "apps.example.com"));
        assert_eq!(normalize("Shop.Example.com."), "shop.example.com");
    }
}
