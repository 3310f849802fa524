//! Per-step measurements of a pipeline run: wall time, cells and genes after the step, and the
//! peak resident memory of the process during the step; printed as a table and written as JSON.

use serde::Serialize;
use std::time::Instant;

/// One step's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub step: String,
    pub seconds: f64,
    pub n_obs: usize,
    pub n_vars: usize,
    /// Peak resident set size during the step, when the platform reports it (Linux).
    pub peak_rss_bytes: Option<u64>,
    /// A short note (parameters or what the step found).
    pub note: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RunReport {
    pub input: String,
    pub output: Option<String>,
    pub device: String,
    pub threads: usize,
    pub steps: Vec<StepRecord>,
    pub total_seconds: f64,
    pub peak_rss_bytes: Option<u64>,
}

/// Peak resident memory since the last [`reset_peak_rss`] (Linux: `VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Restarts the peak-memory measurement (Linux: writing 5 to `clear_refs` resets `VmHWM` to
/// the current resident size). Without it, per-step peaks are peaks since the start.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Times a step and records it.
pub struct StepTimer {
    name: String,
    start: Instant,
}

impl StepTimer {
    pub fn start(name: impl Into<String>) -> Self {
        reset_peak_rss();
        StepTimer {
            name: name.into(),
            start: Instant::now(),
        }
    }

    pub fn finish(self, n_obs: usize, n_vars: usize, note: impl Into<String>) -> StepRecord {
        StepRecord {
            step: self.name,
            seconds: self.start.elapsed().as_secs_f64(),
            n_obs,
            n_vars,
            peak_rss_bytes: peak_rss_bytes(),
            note: note.into(),
        }
    }
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("-".to_string(), |b| {
        format!("{:.2}", b as f64 / (1u64 << 30) as f64)
    })
}

impl RunReport {
    /// The summary table: one line per step and a total.
    pub fn table(&self) -> String {
        let width = self
            .steps
            .iter()
            .map(|s| s.step.len())
            .max()
            .unwrap_or(4)
            .max(5);
        let mut out = format!(
            "{:<width$}  {:>9}  {:>9}  {:>7}  {:>8}  note\n",
            "step", "seconds", "cells", "genes", "peak GiB"
        );
        for s in &self.steps {
            out += &format!(
                "{:<width$}  {:>9.3}  {:>9}  {:>7}  {:>8}  {}\n",
                s.step,
                s.seconds,
                s.n_obs,
                s.n_vars,
                gib(s.peak_rss_bytes),
                s.note
            );
        }
        out += &format!(
            "{:<width$}  {:>9.3}  {:>9}  {:>7}  {:>8}\n",
            "total",
            self.total_seconds,
            "",
            "",
            gib(self.peak_rss_bytes)
        );
        out
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }
}
