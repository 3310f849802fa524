//! The CSV format of allocation logs: `Thread,Time,Action,Pointer,Size,Stream`, as RMM's logging
//! adaptor writes it (so logs of either can be replayed by either).

use crate::error::{MemoryError, Result};
use std::fmt;
use std::io::BufRead;
use std::time::{SystemTime, UNIX_EPOCH};

/// The header line of a log.
///
/// ```
/// assert_eq!(rmm_core::adaptors::LOG_HEADER, "Thread,Time,Action,Pointer,Size,Stream");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const LOG_HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// What a log line records.
///
/// ```
/// use rmm_core::adaptors::{LogAction, LogRecord};
/// let r = LogRecord::parse("0,12:00:00.000001,free,0x7f00,256,0x0", 2)?;
/// assert_eq!(r.action, LogAction::Free);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAction {
    Allocate,
    AllocateFailure,
    Free,
}

impl LogAction {
    fn as_str(self) -> &'static str {
        match self {
            LogAction::Allocate => "allocate",
            LogAction::AllocateFailure => "allocate failure",
            LogAction::Free => "free",
        }
    }
}

/// One line of a log.
///
/// ```
/// use rmm_core::adaptors::LogRecord;
/// let r = LogRecord::parse("3,12:00:00.000001,allocate,0x7f00,1024,0x2", 2)?;
/// assert_eq!((r.thread, r.ptr, r.size, r.stream), (3, 0x7f00, 1024, 2));
/// assert_eq!(r.to_string(), "3,12:00:00.000001,allocate,0x7f00,1024,0x2");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// The calling thread (a number unique in the logging process).
    pub thread: u64,
    /// Wall-clock time of day, `HH:MM:SS.ffffff` (UTC).
    pub time: String,
    pub action: LogAction,
    /// The address (0 for a failed allocation).
    pub ptr: u64,
    pub size: usize,
    /// The stream's handle (0: legacy default stream, 2: per-thread default stream).
    pub stream: u64,
}

impl fmt::Display for LogRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{},", self.thread, self.time, self.action.as_str())?;
        if self.ptr == 0 {
            write!(f, "(nil)")?;
        } else {
            write!(f, "{:#x}", self.ptr)?;
        }
        write!(f, ",{},{:#x}", self.size, self.stream)
    }
}

/// The current time of day, `HH:MM:SS.ffffff`, UTC.
pub(crate) fn time_of_day() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_micros()
    )
}

/// A hexadecimal (`0x...`) or decimal number; `(nil)` is 0.
fn parse_number(field: &str) -> Option<u64> {
    let field = field.trim();
    if field == "(nil)" {
        return Some(0);
    }
    match field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => field.parse().ok(),
    }
}

impl LogRecord {
    /// Parses one data line; `line` is its 1-based number, for the error message.
    pub fn parse(text: &str, line: usize) -> Result<LogRecord> {
        let bad = |what: &str| {
            MemoryError::InvalidArgument(format!("allocation log line {line}: {what}: {text:?}"))
        };
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if fields.len() != 6 {
            return Err(bad("expected 6 comma-separated fields"));
        }
        let action = match fields[2] {
            "allocate" => LogAction::Allocate,
            "allocate failure" => LogAction::AllocateFailure,
            "free" => LogAction::Free,
            _ => return Err(bad("unknown action")),
        };
        Ok(LogRecord {
            thread: fields[0].parse().map_err(|_| bad("bad thread"))?,
            time: fields[1].to_string(),
            action,
            ptr: parse_number(fields[3]).ok_or_else(|| bad("bad pointer"))?,
            size: fields[4].parse().map_err(|_| bad("bad size"))?,
            stream: parse_number(fields[5]).ok_or_else(|| bad("bad stream"))?,
        })
    }
}

/// Reads a whole log: the header, then one record per non-empty line.
///
/// ```
/// use rmm_core::adaptors::parse_log;
/// let log = "Thread,Time,Action,Pointer,Size,Stream\n0,12:00:00.000001,allocate,0x7f00,1024,0x0\n";
/// let records = parse_log(log.as_bytes())?;
/// assert_eq!(records.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_log(reader: impl BufRead) -> Result<Vec<LogRecord>> {
    let mut lines = reader.lines();
    let io =
        |e: std::io::Error| MemoryError::InvalidArgument(format!("reading an allocation log: {e}"));
    match lines.next() {
        Some(header)
            if header
                .as_ref()
                .map(|h| h.trim() == LOG_HEADER)
                .unwrap_or(false) => {}
        Some(Err(e)) => return Err(io(e)),
        _ => {
            return Err(MemoryError::InvalidArgument(format!(
                "an allocation log starts with the header {LOG_HEADER:?}"
            )))
        }
    }
    let mut records = Vec::new();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(io)?;
        if !line.trim().is_empty() {
            records.push(LogRecord::parse(&line, i + 2)?);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_read_rmm_logs() {
        let r = LogRecord {
            thread: 3,
            time: "12:34:56.000123".into(),
            action: LogAction::Allocate,
            ptr: 0x7f00_0000_1000,
            size: 1000,
            stream: 0x55aa,
        };
        let line = r.to_string();
        assert_eq!(
            line,
            "3,12:34:56.000123,allocate,0x7f0000001000,1000,0x55aa"
        );
        assert_eq!(LogRecord::parse(&line, 2).unwrap(), r);
        let failed = LogRecord::parse("140,01:02:03.4,allocate failure,(nil),77,0", 9).unwrap();
        assert_eq!(
            (failed.action, failed.ptr, failed.stream),
            (LogAction::AllocateFailure, 0, 0)
        );
        let err = LogRecord::parse("1,t,grow,0x1,2,0", 5).unwrap_err();
        assert!(err.to_string().contains("line 5"), "{err}");
        let log = format!("{LOG_HEADER}\n{line}\n\n1,t,free,0x7f0000001000,1000,0x55aa\n");
        assert_eq!(parse_log(log.as_bytes()).unwrap().len(), 2);
        assert!(parse_log("nope\n".as_bytes()).is_err());
        assert_eq!(time_of_day().len(), 15);
    }
}
