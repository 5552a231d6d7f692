//! Labels of a cluster (docs/labels.md): key/value pairs a user attaches to
//! their clusters to find them by, with the syntax of Kubernetes labels, and
//! the selectors that find them. They are the platform's records of the
//! clusters, not objects inside them.

pub mod selector;
pub mod store;

use std::collections::BTreeMap;

use crate::{
    domain,
    error::{ApiError, FieldError},
};

/// A cluster's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// The most labels one cluster holds.
pub const MAX_LABELS: usize = 64;

// What `check_key` and `check_value` take, as the parts of JSON Schema
// patterns (ECMA 262) for the OpenAPI document.
const NAME: &str = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?";
const DNS_LABEL: &str = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?";

/// A key as a pattern, unanchored: not under the platform's prefix (a
/// lookahead), then an optional prefix of DNS labels of at most 253
/// characters (a lookahead) and `/`, then a name.
pub fn key_pattern() -> String {
    format!(
        r"(?!(?:[a-z0-9.-]*\.)?kubebyon\.io/)(?:(?=[a-z0-9.-]{{1,253}}/){DNS_LABEL}(?:\.{DNS_LABEL})*/)?{NAME}"
    )
}

/// A value as a pattern, unanchored: empty, or a name.
pub fn value_pattern() -> String {
    format!("(?:{NAME})?")
}

/// Key prefixes the platform keeps for its own labels.
const RESERVED_PREFIX: &str = "kubebyon.io";

/// A key with Kubernetes' syntax (`domain::label_key_parts`: an optional
/// lowercase DNS prefix and `/`, then a name of 1–63 letters, digits, `-`,
/// `_` and `.`), only ASCII, so a look-alike letter is refused; and not under
/// the platform's prefix (`kubebyon.io/`, its subdomains too).
pub fn check_key(key: &str) -> Result<(), String> {
    let (prefix, _) = domain::label_key_parts(key).map_err(|m| format!("{key:?}: {m}"))?;
    if let Some(prefix) = prefix
        && (prefix == RESERVED_PREFIX || prefix.ends_with(&format!(".{RESERVED_PREFIX}")))
    {
        return Err(format!(
            "the prefix {prefix}/ is the platform's: choose another"
        ));
    }
    Ok(())
}

/// A value with Kubernetes' syntax (`domain::is_label_value`): empty, or at
/// most 63 letters, digits, `-`, `_` and `.`, starting and ending with a
/// letter or digit.
pub fn check_value(value: &str) -> Result<(), String> {
    if domain::is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

/// Every problem of a set of labels, each under `labels.<key>`.
pub fn check(labels: &Labels) -> Result<(), ApiError> {
    if labels.len() > MAX_LABELS {
        return Err(ApiError::invalid(
            "labels",
            format!("at most {MAX_LABELS} labels, not {}", labels.len()),
        ));
    }
    let problems: Vec<FieldError> = labels
        .iter()
        .filter_map(|(key, value)| {
            let field = format!("labels.{}", key.chars().take(320).collect::<String>());
            check_key(key)
                .and_then(|()| check_value(value))
                .err()
                .map(|message| FieldError::new(field, message))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(problems))
    }
}

/// What labels brings to the platform: its route that sets a cluster's
/// labels, and the labels an organisation's API key may read.
pub const CAPABILITY: crate::capability::Capability = crate::capability::Capability {
    cluster_routes: &[crate::capability::ClusterRoute::new(
        "PUT",
        "/labels",
        crate::organizations::Action::Operate,
    )],
    organization_key_routes: &["/api/console/cluster-labels"],
    ..crate::capability::Capability::named("labels")
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kubernetes_and_keep_off_the_platforms_prefix() {
        for key in [
            "env",
            "app.kubernetes.io/name",
            "example.com/tier",
            "notkubebyon.io/x",
        ] {
            assert_eq!(check_key(key), Ok(()), "{key}");
        }
        for key in [
            "kubebyon.io/plan",
            "nodes.kubebyon.io/x",
            "\u{435}nv",
            "Example.com/x",
            "",
        ] {
            assert!(check_key(key).is_err(), "{key:?} was accepted");
        }
        assert!(check_value("prod").is_ok() && check_value("").is_ok());
        assert!(check_value("pr\u{43e}d").is_err() && check_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn a_set_names_each_bad_label_and_its_size() {
        let labels: Labels = [("env", "prod"), ("bad key", "x"), ("tier", "no way")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let ApiError::Validation(problems) = check(&labels).unwrap_err() else {
            panic!("not a validation error");
        };
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["labels.bad key", "labels.tier"]);
        let many: Labels = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check(&many).is_err());
        let most: Labels = (0..MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check(&most).is_ok());
    }
}
