//! What a command that fails says (one line on standard error) and the exit
//! code scripts can rely on (docs/cli.md).

use std::fmt;

/// The exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Anything not below.
    Failure = 1,
    /// Wrong use: a bad argument, no context, an unreadable configuration.
    Usage = 2,
    /// Not signed in, or the key was refused (expired, revoked) or may not
    /// do this (401, 403).
    Auth = 3,
    /// What was named does not exist (404).
    NotFound = 4,
    /// The platform refused the request as it stands (400, 409, 422, 429).
    Refused = 5,
    /// A followed operation failed (`--wait`).
    OperationFailed = 6,
    /// The platform did not answer, or answered with a 5xx.
    Unavailable = 7,
    /// `--wait` gave up (`--timeout`), or the device sign-in expired or was denied.
    TimedOut = 8,
}

#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }

    /// The error a problem+json answer carries: its `detail`, its `code`,
    /// and the fields it names, on one line.
    pub fn from_problem(status: u16, body: &serde_json::Value) -> Self {
        let text = |key: &str| body.get(key).and_then(|v| v.as_str());
        let mut message = text("detail")
            .or_else(|| text("title"))
            .map(str::to_string)
            .unwrap_or_else(|| format!("the platform answered {status}"));
        if let Some(errors) = body.get("errors").and_then(|v| v.as_array()) {
            let fields: Vec<String> = errors
                .iter()
                .filter_map(|e| {
                    Some(format!(
                        "{} {}",
                        e.get("field")?.as_str()?,
                        e.get("message")?.as_str()?
                    ))
                })
                .collect();
            if !fields.is_empty() {
                message = format!("{message}: {}", fields.join("; "));
            }
        }
        if let Some(code) = text("code") {
            message = format!("{message} [{code}]");
        }
        let exit = match status {
            401 | 403 => Exit::Auth,
            404 => Exit::NotFound,
            500.. => Exit::Unavailable,
            _ => Exit::Refused,
        };
        Self::new(exit, one_line(&message))
    }
}

/// Whether `c` changes how text around it reads rather than being read: a
/// control character (a terminal's escape sequences start with one), a
/// direction mark or override, a zero-width character, a line or paragraph
/// separator, or another of Unicode's format characters.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}'
            | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
            | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// Text from the platform, on one line, with nothing hidden in it: each
/// control or format character as a space.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if hidden(c) { ' ' } else { c })
        .collect()
}

/// Text for a terminal, lines kept: every other control or format
/// character (an escape sequence's start, a direction override) as a
/// space.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if hidden(c) && c != '\n' { ' ' } else { c })
        .collect()
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_one_line_with_its_code_and_fields() {
        let body = serde_json::json!({
            "title": "Invalid request",
            "detail": "the request has invalid fields",
            "code": "validation_failed",
            "errors": [{ "field": "name", "message": "must be\na label\u{1b}[31m" }],
        });
        let error = CliError::from_problem(422, &body);
        assert_eq!(error.exit, Exit::Refused);
        assert_eq!(
            error.message,
            "the request has invalid fields: name must be a label [31m [validation_failed]"
        );
        assert_eq!(CliError::from_problem(401, &body).exit, Exit::Auth);
        assert_eq!(CliError::from_problem(404, &body).exit, Exit::NotFound);
        assert_eq!(
            CliError::from_problem(503, &serde_json::json!({})).message,
            "the platform answered 503"
        );
    }

    #[test]
    fn nothing_the_platform_sends_hides_or_reorders_what_is_printed() {
        // A direction override turning `gpj.exe` around, zero-width and
        // line separators, a terminal escape.
        let sent = "invoice\u{202e}gpj.exe\u{200b}\u{2028}next\u{1b}[2J\nline";
        assert_eq!(one_line(sent), "invoice gpj.exe  next [2J line");
        assert_eq!(printable(sent), "invoice gpj.exe  next [2J\nline");
    }
}
