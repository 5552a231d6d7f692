//! Property tests over the parsers that read what clients and tenants send
//! (email addresses, names, tokens, URLs) or what tenants' clusters report
//! (quantities): no input panics one (release builds abort
//! on a panic), and what one accepts is in its canonical form.

use proptest::prelude::*;
use shared::{
    domain::{ClusterName, EmailAddress, KubernetesVersion},
    host,
    nodes::jointoken,
    outbound,
};

/// Characters hostile input is made of: ASCII (control characters too),
/// the separators of address syntax, and look-alike Unicode.
fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range('\0', '\u{7f}'),
        2 => proptest::sample::select(vec!['@', '.', '-', '<', '>', ',', '"', '\\', ' ', '\t', '\n', '/', ':', '%']),
        1 => proptest::sample::select(vec!['İ', 'ı', 'ſ', 'K', 'ｇ', 'а', 'е', 'о', '\u{200b}', '\u{fe0f}', '\u{0301}', 'ß']),
        1 => any::<char>(),
    ]
}

fn hostile_string(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(hostile_char(), 0..max).prop_map(|c| c.into_iter().collect())
}

/// Strings shaped like an address, to reach the deeper checks.
fn address_like() -> impl Strategy<Value = String> {
    (hostile_string(20), hostile_string(12), hostile_string(6))
        .prop_map(|(local, domain, tld)| format!("{local}@{domain}.{tld}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn an_accepted_email_address_is_one_plain_canonical_ascii_mailbox(
        raw in prop_oneof![hostile_string(80), address_like()]
    ) {
        if let Ok(email) = EmailAddress::parse(&raw) {
            let text = email.as_str();
            prop_assert!(text.len() <= EmailAddress::MAX_LEN);
            prop_assert!(text.is_ascii());
            prop_assert_eq!(text, text.to_ascii_lowercase());
            prop_assert_eq!(text.matches('@').count(), 1);
            prop_assert!(!text.contains(|c: char| c.is_ascii_whitespace() || c.is_ascii_control()
                || "<>,\"()[]\\;:".contains(c)));
            // The canonical form is a fixed point: stored, looked up and
            // rate-limited under one spelling.
            let again = EmailAddress::parse(text);
            prop_assert_eq!(again.as_ref().map(EmailAddress::as_str), Ok(text));
        }
    }

    #[test]
    fn a_look_alike_letter_never_lands_on_the_ascii_address(
        local in "[a-z]{1,10}", domain in "[a-z]{2,10}", at in 0usize..10,
        look_alike in proptest::sample::select(vec!['İ', 'ı', 'і', 'ο', 'а'])
    ) {
        let real = EmailAddress::parse(&format!("{local}@{domain}.com")).unwrap();
        let mut spoofed: Vec<char> = domain.chars().collect();
        let at = at % spoofed.len();
        spoofed[at] = look_alike;
        let spoofed: String = spoofed.into_iter().collect();
        if let Ok(other) = EmailAddress::parse(&format!("{local}@{spoofed}.com")) {
            prop_assert_ne!(other, real);
        }
    }

    #[test]
    fn an_accepted_cluster_name_is_an_rfc_1123_label(raw in hostile_string(60)) {
        if let Ok(name) = ClusterName::parse(&raw) {
            let text = name.as_str();
            prop_assert!((1..=ClusterName::MAX_LEN).contains(&text.len()));
            prop_assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            prop_assert!(text.as_bytes()[0].is_ascii_lowercase() && !text.ends_with('-'));
        }
        let _ = KubernetesVersion::parse(&raw);
    }

    #[test]
    fn a_well_formed_join_token_is_six_dot_sixteen(raw in hostile_string(40)) {
        if jointoken::well_formed(&raw) {
            prop_assert_eq!(raw.len(), 23);
            prop_assert_eq!(raw.find('.'), Some(6));
        }
    }

    #[test]
    fn outbound_urls_are_checked_without_panicking(raw in hostile_string(80), tail in hostile_string(30)) {
        for candidate in [raw.clone(), format!("https://{raw}"), format!("https://{raw}/{tail}"), format!("http://[{raw}]:{tail}/")] {
            if outbound::check(&candidate, false).is_ok() {
                prop_assert!(candidate.starts_with("https://"));
            }
            let _ = outbound::check_join_base(&candidate, false);
        }
    }

    /// Nodes are the tenants' own: whatever their kubelets report is input.
    #[test]
    fn a_quantity_is_a_finite_number_or_nothing(
        raw in prop_oneof![
            hostile_string(30),
            (any::<f64>(), proptest::sample::select(vec!["", "m", "Ki", "Gi", "Pi", "e", "e308", "e-400", "E99999999999", "n"]))
                .prop_map(|(n, s)| format!("{n}{s}")),
        ],
        scale in proptest::sample::select(vec![1.0, 1000.0])
    ) {
        if let Some(value) = host::quantity_value(&raw) {
            prop_assert!(value.is_finite(), "{raw:?} gave {value}");
        }
        let _ = host::quantity(&raw, scale);
    }
}
