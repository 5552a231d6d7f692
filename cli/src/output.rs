//! `--output table|json|yaml`: a table of the columns a person reads, or
//! the platform's answer whole, as JSON or YAML, for scripts.

use std::io::Write;

use clap::ValueEnum;
use serde_json::Value;

use crate::error::{CliError, Exit, one_line};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
}

/// Prints `raw` as JSON or YAML, or, for a table, the `rows` under `header`.
pub fn print(
    format: Format,
    raw: &Value,
    header: &[&str],
    rows: Vec<Vec<String>>,
) -> Result<(), CliError> {
    let text = match format {
        Format::Json => {
            let mut text = serde_json::to_string_pretty(raw).expect("JSON serializes");
            text.push('\n');
            text
        }
        Format::Yaml => serde_saphyr::to_string(raw)
            .map_err(|e| CliError::new(Exit::Failure, format!("cannot write YAML: {e}")))?,
        Format::Table => table(header, &rows),
    };
    write_stdout(&text)
}

pub fn write_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A reader that went away (`| head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::new(
            Exit::Failure,
            format!("writing the output: {e}"),
        )),
    }
}

/// Columns padded to their widest cell, two spaces apart; cells on one line.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| one_line(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut text = line(header.to_vec());
    for row in &rows {
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

/// How long ago an RFC 3339 time was, as `5m`, `3h`, `2d`.
pub fn age(rfc3339: &str) -> String {
    let Ok(at) = chrono::DateTime::parse_from_rfc3339(rfc3339) else {
        return "-".into();
    };
    let seconds = (chrono::Utc::now() - at.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

pub fn or_dash(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "-".into())
}

/// Progress on standard error: a line for each step done and, on a
/// terminal, a live line under them (a spinner, where things are, the time
/// so far), redrawn in place and gone when the work ends. Without a
/// terminal (CI, a pipe) only the lines are written.
pub struct Progress {
    live: bool,
    frame: usize,
    drawn: bool,
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The live line's text for the `frame`th redraw: erase the line, then the
/// spinner and `text`, on one line.
pub fn live_line(frame: usize, text: &str) -> String {
    format!(
        "\r\x1b[2K{} {}",
        SPINNER[frame % SPINNER.len()],
        one_line(text)
    )
}

impl Progress {
    pub fn new() -> Self {
        use std::io::IsTerminal;
        Self {
            live: std::io::stderr().is_terminal(),
            frame: 0,
            drawn: false,
        }
    }

    /// A step done: a line of its own.
    pub fn line(&mut self, text: &str) {
        self.clear();
        eprintln!("{}", crate::error::printable(text));
    }

    /// Where things are now, on the live line (on a terminal only).
    pub fn status(&mut self, text: &str) {
        if self.live {
            eprint!("{}", live_line(self.frame, text));
            self.frame += 1;
            self.drawn = true;
        }
    }

    /// Erases the live line, so other output starts on a clean line.
    pub fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_line_erases_itself_and_stays_on_one_line() {
        assert_eq!(live_line(0, "installing"), "\r\x1b[2K⠋ installing");
        assert_eq!(live_line(11, "a\nb\x1b[31m"), "\r\x1b[2K⠙ a b [31m");
    }

    #[test]
    fn a_table_aligns_its_columns_and_keeps_each_row_on_one_line() {
        let text = table(
            &["NAME", "STATUS"],
            &[
                vec!["web".into(), "ready".into()],
                vec!["a-longer-name".into(), "fail\ned".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME           STATUS\nweb            ready\na-longer-name  fail ed\n"
        );
    }
}
