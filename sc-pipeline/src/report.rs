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
    /// Where the step ran (`cpu` or `gpu`), in a run that has a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Device memory and transfers of the step, in a GPU run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<DeviceStepStats>,
    /// When the step started, in seconds from the start of the run (see [`run_clock`]): with
    /// `seconds`, the run's timeline, which shows the steps that overlapped and the time spent
    /// in none.
    pub started_seconds: f64,
}

/// The start of the run, which step records count their start from: the first call of this
/// function (`scpipe run` calls it where its total time starts).
pub fn run_clock() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

impl StepRecord {
    /// Bytes per second moved over the bus (both directions) during the step, when it moved
    /// any (a streamed step's figure to compare with the copy floor).
    pub fn bus_rate(&self) -> Option<f64> {
        let g = self.gpu?;
        let bytes = g.host_to_device_bytes + g.device_to_host_bytes;
        (bytes > 0 && self.seconds > 0.0).then(|| bytes as f64 / self.seconds)
    }
}

/// What a step did with the GPU's memory (from the statistics adaptor) and the bus.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct DeviceStepStats {
    /// Peak bytes allocated on the device during the step (everything live, not only the step's).
    pub peak_bytes: u64,
    /// Allocations the step made.
    pub allocations: u64,
    pub host_to_device_bytes: u64,
    pub device_to_host_bytes: u64,
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
    /// The GPU of a GPU run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_name: Option<String>,
    /// The memory resource of a GPU run (`--allocator`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
    /// Whole-run GPU figures: peak device bytes (statistics adaptor), allocations, transfers,
    /// and the NVRTC compile time of this process (zero when every module came from the cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuTotals>,
    /// The pictures of `--plot`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plots: Option<PlotSummary>,
    /// Where the run held X, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_placement: Option<XPlacement>,
}

/// Where a run held X while its per-cell steps ran (on the GPU, in host memory streamed
/// through the GPU, split across GPUs, on the host for a CPU run, or nowhere: read from the
/// file or generated on the GPU for every pass), and why that place was chosen.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct XPlacement {
    pub place: String,
    pub why: String,
}

impl XPlacement {
    pub fn new(place: impl Into<String>, why: impl Into<String>) -> Self {
        let why: String = why.into();
        XPlacement {
            place: place.into(),
            why: why.strip_prefix("notice: ").unwrap_or(&why).to_string(),
        }
    }
}

/// The pictures `--plot DIR` wrote and those it skipped, with why.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PlotSummary {
    pub dir: String,
    pub written: Vec<WrittenPlot>,
    pub skipped: Vec<SkippedPlot>,
}

/// A picture written: its name, its files (in the folder) and what it leaves out, if anything.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenPlot {
    pub name: String,
    pub files: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A picture not drawn, because the run did not make what it shows.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedPlot {
    pub name: String,
    pub reason: String,
}

impl PlotSummary {
    /// Lines for the end of the run's table.
    pub fn lines(&self) -> String {
        let mut out = String::new();
        let files: Vec<&str> = self
            .written
            .iter()
            .flat_map(|w| w.files.iter().map(String::as_str))
            .collect();
        match files.is_empty() {
            true => out += &format!("pictures in {}: none\n", self.dir),
            false => out += &format!("pictures in {}: {}\n", self.dir, files.join(", ")),
        }
        for w in &self.written {
            if let Some(note) = &w.note {
                out += &format!("  {}: {note}\n", w.name);
            }
        }
        for s in &self.skipped {
            out += &format!("  skipped {}: {}\n", s.name, s.reason);
        }
        out
    }
}

/// Whole-run GPU figures.
#[derive(Debug, Clone, Serialize, Default)]
pub struct GpuTotals {
    pub peak_device_bytes: u64,
    pub allocations: u64,
    pub host_to_device_bytes: u64,
    pub device_to_host_bytes: u64,
    /// Modules loaded from the binary (compiled ahead of time).
    pub kernels_built_in: u64,
    pub kernels_compiled: u64,
    pub kernel_compile_seconds: f64,
    pub kernels_from_disk_cache: u64,
    /// Modules the driver compiled from the binary's PTX (a GPU the build had no CUBIN for,
    /// on a machine without NVRTC).
    pub kernels_from_ptx: u64,
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
            device: None,
            gpu: None,
            started_seconds: self
                .start
                .saturating_duration_since(run_clock())
                .as_secs_f64(),
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
        let dev_width = self
            .steps
            .iter()
            .filter_map(|s| s.device.as_ref().map(|d| d.len()))
            .max()
            .unwrap_or(0)
            .max(6);
        let mut out = format!(
            "{:<width$}  {:>9}  {:>9}  {:>7}  {:>8}  {:>dev_width$}  {:>8}  {:>8}  note\n",
            "step", "seconds", "cells", "genes", "peak GiB", "device", "dev GiB", "bus GB/s"
        );
        for s in &self.steps {
            out += &format!(
                "{:<width$}  {:>9.3}  {:>9}  {:>7}  {:>8}  {:>dev_width$}  {:>8}  {:>8}  {}\n",
                s.step,
                s.seconds,
                s.n_obs,
                s.n_vars,
                gib(s.peak_rss_bytes),
                s.device.as_deref().unwrap_or("cpu"),
                gib(s.gpu.map(|g| g.peak_bytes)),
                s.bus_rate()
                    .map_or("-".into(), |r| format!("{:.1}", r / 1e9)),
                s.note
            );
        }
        out += &format!(
            "{:<width$}  {:>9.3}  {:>9}  {:>7}  {:>8}  {:>dev_width$}  {:>8}\n",
            "total",
            self.total_seconds,
            "",
            "",
            gib(self.peak_rss_bytes),
            "",
            gib(self.gpu.as_ref().map(|g| g.peak_device_bytes))
        );
        if let Some(x) = &self.x_placement {
            out += &format!("X: {} ({})\n", x.place, x.why);
        }
        if let Some(g) = &self.gpu {
            out += &format!(
                "GPU {} ({} allocator): {} allocations, {:.2} GB to the device, {:.2} GB back; kernels: {} built in, {} compiled in {:.2} s, {} from the disk cache{}\n",
                self.gpu_name.as_deref().unwrap_or("?"),
                self.allocator.as_deref().unwrap_or("?"),
                g.allocations,
                g.host_to_device_bytes as f64 / 1e9,
                g.device_to_host_bytes as f64 / 1e9,
                g.kernels_built_in,
                g.kernels_compiled,
                g.kernel_compile_seconds,
                g.kernels_from_disk_cache,
                if g.kernels_from_ptx > 0 {
                    format!(", {} from PTX", g.kernels_from_ptx)
                } else {
                    String::new()
                }
            );
        }
        if let Some(p) = &self.plots {
            out += &p.lines();
        }
        out
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }
}
