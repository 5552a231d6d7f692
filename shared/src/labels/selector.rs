//! Label selectors, as Kubernetes writes them (k8s.io/apimachinery's
//! `labels.Parse`): requirements joined by commas, each one of `key`
//! (exists), `!key` (does not exist), `key=value` (also `==`), `key!=value`
//! (a cluster without the key matches too), `key in (a,b)` and
//! `key notin (a,b)`. Kubernetes' `>` and `<` are not taken: label values
//! here are not numbers. Spaces may stand around the words and signs; no
//! other white space is taken. The OpenAPI document states the same grammar
//! as a pattern ([`pattern`]).

use super::{NAME, check_key, check_value, key_pattern, value_pattern};

/// The longest selector taken, in bytes.
pub const MAX_LENGTH: usize = 4096;
/// The most requirements in one selector.
pub const MAX_REQUIREMENTS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Op {
    /// The word the store's query matches on.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::NotIn => "not_in",
            Self::Exists => "exists",
            Self::DoesNotExist => "not_exists",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
    /// The values of `in` and `notin` (one for `=` and `!=`); none otherwise.
    pub values: Vec<String>,
}

/// The grammar [`parse`] takes, as a JSON Schema pattern: requirements
/// ([`MAX_REQUIREMENTS`] at most) joined by commas, each `!key`, `key` with
/// `=`, `==` or `!=` and a value, `key in|notin (values)` (not blank: one
/// name, or two values or more, any of them empty), or `key` alone.
pub fn pattern() -> String {
    let (key, value) = (key_pattern(), value_pattern());
    let set = format!(r"\( *(?:{NAME}(?: *, *{value})*|{value}(?: *, *{value})+) *\)");
    let requirement =
        format!(r"(?:! *{key}|{key} *(?:==|=|!=) *{value}|{key} +(?:in|notin) *{set}|{key})");
    format!(
        r"^ *(?:{requirement}(?: *, *{requirement}){{0,{}}})? *$",
        MAX_REQUIREMENTS - 1
    )
}

/// The requirements of a selector; an empty selector selects everything.
pub fn parse(raw: &str) -> Result<Vec<Requirement>, String> {
    if raw.len() > MAX_LENGTH {
        return Err(format!("must be at most {MAX_LENGTH} bytes"));
    }
    let mut requirements = Vec::new();
    let mut rest = raw.trim_matches(' ');
    while !rest.is_empty() {
        let (requirement, after) = requirement(rest)?;
        requirements.push(requirement);
        rest = after.trim_start_matches(' ');
        if !rest.is_empty() {
            rest = rest
                .strip_prefix(',')
                .ok_or_else(|| format!("expected ',' before {:?}", clip(rest)))?
                .trim_start_matches(' ');
            if rest.is_empty() {
                return Err("ends with ','".into());
            }
        }
    }
    if requirements.len() > MAX_REQUIREMENTS {
        return Err(format!("at most {MAX_REQUIREMENTS} requirements"));
    }
    Ok(requirements)
}

fn requirement(text: &str) -> Result<(Requirement, &str), String> {
    if let Some(rest) = text.strip_prefix('!') {
        let (key, rest) = word(rest.trim_start_matches(' '));
        check_key(key)?;
        return Ok((make(key, Op::DoesNotExist, vec![]), rest));
    }
    let (key, rest) = word(text);
    check_key(key)?;
    let after_key = rest.trim_start_matches(' ');
    if after_key.is_empty() || after_key.starts_with(',') {
        return Ok((make(key, Op::Exists, vec![]), rest));
    }
    if let Some(rest) = after_key.strip_prefix("!=") {
        let (value, rest) = word(rest.trim_start_matches(' '));
        check_value(value)?;
        return Ok((make(key, Op::NotIn, vec![value.into()]), rest));
    }
    if let Some(rest) = after_key
        .strip_prefix("==")
        .or_else(|| after_key.strip_prefix('='))
    {
        let (value, rest) = word(rest.trim_start_matches(' '));
        check_value(value)?;
        return Ok((make(key, Op::In, vec![value.into()]), rest));
    }
    let (operator, rest) = word(after_key);
    let op = match operator {
        "in" => Op::In,
        "notin" => Op::NotIn,
        _ => {
            return Err(format!(
                "expected =, ==, !=, in or notin after {key:?}, found {:?}",
                clip(after_key)
            ));
        }
    };
    let inside = rest
        .trim_start_matches(' ')
        .strip_prefix('(')
        .ok_or_else(|| format!("expected '(' after {operator}"))?;
    let (set, rest) = inside
        .split_once(')')
        .ok_or_else(|| format!("the values of {key:?} have no ')'"))?;
    if set.trim_matches(' ').is_empty() {
        return Err(format!(
            "the values of {key:?} are empty: name one at least"
        ));
    }
    let values: Vec<String> = set
        .split(',')
        .map(|v| v.trim_matches(' ').to_string())
        .collect();
    for value in &values {
        check_value(value)?;
    }
    Ok((make(key, op, values), rest))
}

fn make(key: &str, op: Op, values: Vec<String>) -> Requirement {
    Requirement {
        key: key.into(),
        op,
        values,
    }
}

/// The longest prefix of `text` up to a space or one of `,=!()`.
fn word(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| " ,=!()".contains(c))
        .unwrap_or(text.len());
    text.split_at(end)
}

fn clip(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: Op, values: &[&str]) -> Requirement {
        make(key, op, values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn parses_what_kubectl_takes() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("  ").unwrap(), vec![]);
        assert_eq!(
            parse("env=prod, tier != db,example.com/team==a ,gpu,!legacy, zone in (a, b,c), x notin (y)")
                .unwrap(),
            vec![
                req("env", Op::In, &["prod"]),
                req("tier", Op::NotIn, &["db"]),
                req("example.com/team", Op::In, &["a"]),
                req("gpu", Op::Exists, &[]),
                req("legacy", Op::DoesNotExist, &[]),
                req("zone", Op::In, &["a", "b", "c"]),
                req("x", Op::NotIn, &["y"]),
            ]
        );
        assert_eq!(parse("env=").unwrap(), vec![req("env", Op::In, &[""])]);
    }

    #[test]
    fn refuses_what_kubectl_refuses() {
        for bad in [
            "env=prod,",
            ",env",
            "env=prod tier=db",
            "env>1",
            "env in a,b",
            "env in (a,b",
            "env=(a)",
            "env=pr od",
            "kubebyon.io/x",
            "énv=prod",
            "env=prоd",
            "!",
            "env in (a b)",
            "x notin ()",
            "x in ( )",
            "env=prod\t",
            "env\n=prod",
            "env=prod,\u{a0}tier",
        ] {
            assert!(
                parse(bad).is_err(),
                "{bad:?} was accepted: {:?}",
                parse(bad)
            );
        }
        let long = "a,".repeat(MAX_LENGTH / 2 + 1);
        assert!(parse(&long).unwrap_err().contains("bytes"));
        let many = vec!["k"; MAX_REQUIREMENTS + 1].join(",");
        assert!(parse(&many).unwrap_err().contains("requirements"));
    }
}
