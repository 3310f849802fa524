//! [`RunPlan`]: everything a run needs to know before it starts, typed and checked. The
//! command line builds one from its options (`cli::run`); [`super::execute()`] carries it out.

use super::gpu::DeviceOptions;
use super::PipelineConfig;
use crate::run::memory_plan::Execution;
use crate::synthetic::SyntheticParams;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// Where the steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Cpu,
    Gpu,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Gpu => "gpu",
        }
    }
}

/// What the run reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// An h5ad file or a 10x Genomics HDF5 matrix (`genome`: which of several).
    File {
        path: PathBuf,
        genome: Option<String>,
    },
    /// The generated demo dataset; `on_gpu`: `--demo-on-gpu` (its cells generated on the GPU
    /// for every pass, never held).
    Demo {
        params: SyntheticParams,
        on_gpu: bool,
    },
}

/// The files a run writes, each moved into place only when the whole run succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    pub h5ad: PathBuf,
    pub report: Option<PathBuf>,
    pub memory_timeline: Option<PathBuf>,
    pub memory_snapshot: Option<PathBuf>,
    pub allocation_log: Option<PathBuf>,
    /// `--plot DIR`: the folder of the run's pictures (see [`crate::plot`]).
    pub plot: Option<PathBuf>,
    /// `--plot-genes N`: the marker genes per group in the dot plot.
    pub plot_genes: usize,
    /// The format of `h5ad` (named for the default): h5ad, or a zarr store for `*.zarr`.
    pub format: crate::io::OutputFormat,
}

impl Outputs {
    /// Each output with the option that names it.
    fn named(&self) -> [(&'static str, Option<&PathBuf>); 5] {
        [
            ("-o", Some(&self.h5ad)),
            ("--report", self.report.as_ref()),
            ("--memory-timeline", self.memory_timeline.as_ref()),
            ("--memory-snapshot", self.memory_snapshot.as_ref()),
            ("--allocation-log", self.allocation_log.as_ref()),
        ]
    }
}

/// A run: input, outputs, steps, where they run and with what device memory.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    pub input: Input,
    pub outputs: Outputs,
    pub config: PipelineConfig,
    pub target: Target,
    /// What to tell the user about the choice of device (auto's choice and why).
    pub target_notice: Option<String>,
    pub device: DeviceOptions,
    /// `--gpus`: the GPUs to split the cells across, when asked.
    pub gpus: Option<usize>,
    /// Host memory the run may use (`--host-memory-limit`); `None`: what the machine has
    /// available when it starts.
    pub host_memory_limit: Option<u64>,
}

impl RunPlan {
    /// Refuses, before any work, what cannot run: an output that is the input, an output place
    /// that cannot be written, GPU options on the CPU.
    pub fn check(&self) -> Result<()> {
        if let Input::File { path, .. } = &self.input {
            check_output_is_not_input(path, &self.outputs.h5ad)?;
        }
        for (flag, path) in self.outputs.named() {
            if let Some(path) = path {
                check_output_place(flag, path)?;
            }
        }
        if let Some(dir) = &self.outputs.plot {
            crate::plot::create_dir(dir)?;
        }
        if self.target == Target::Gpu {
            return Ok(());
        }
        let needs_gpu = [
            (
                self.outputs.memory_snapshot.is_some(),
                "--memory-snapshot",
                "records the GPU allocations of a run",
            ),
            (
                self.outputs.allocation_log.is_some(),
                "--allocation-log",
                "records the GPU allocations of a run",
            ),
            (
                self.outputs.memory_timeline.is_some(),
                "--memory-timeline",
                "records the GPU memory of a run",
            ),
            (
                self.device.device_memory_limit.is_some(),
                "--device-memory-limit",
                "applies to GPU runs",
            ),
            (
                self.device.execution != Execution::Auto,
                "--execution",
                "applies to GPU runs",
            ),
        ];
        match needs_gpu.into_iter().find(|(given, ..)| *given) {
            Some((_, flag, what)) => Err(Error::param(
                flag,
                format!("{what}: it needs the GPU (--device gpu, or auto on a machine with one)"),
            )),
            None => Ok(()),
        }
    }

    /// The options that apply to a run on one GPU only, as given.
    fn single_gpu_options(&self) -> Option<&'static str> {
        [
            (self.outputs.memory_timeline.is_some(), "--memory-timeline"),
            (self.outputs.memory_snapshot.is_some(), "--memory-snapshot"),
            (self.outputs.allocation_log.is_some(), "--allocation-log"),
            (
                self.device.execution == Execution::Streamed,
                "--execution streamed",
            ),
        ]
        .into_iter()
        .find_map(|(given, option)| given.then_some(option))
    }

    /// How many GPUs the run splits its cells across, of `visible`: `--gpus`, else every
    /// visible GPU when there are several and no single-GPU option is given.
    pub fn gpu_count(&self, visible: usize) -> Result<usize> {
        let on_gpu = self.target == Target::Gpu;
        let visible = if on_gpu { visible } else { 1 };
        match self.gpus {
            Some(0) => Err(Error::param("--gpus", "must be at least 1")),
            Some(n) if !on_gpu && n > 1 => Err(Error::param(
                "--gpus",
                "splits the cells across GPUs: it needs the GPU (--device gpu, or auto on a machine with one)",
            )),
            Some(n) if n > visible => Err(Error::param(
                "--gpus",
                format!("{n} GPUs asked, {visible} visible"),
            )),
            Some(n) if n > 1 => match self.single_gpu_options() {
                Some(option) => Err(Error::param(
                    "--gpus",
                    format!("{option} applies to a run on one GPU: use --gpus 1"),
                )),
                None => Ok(n),
            },
            Some(n) => Ok(n),
            None if self.single_gpu_options().is_some() => Ok(1),
            None => Ok(visible.max(1)),
        }
    }

    /// Whether a demo run generates its cells on the GPU for every pass (`--demo-on-gpu`, or X
    /// too large for host memory with `available` bytes), and the notice that says so; a clear
    /// error where that run cannot be made on `n_gpus`.
    pub fn generated_on_gpu(
        &self,
        available: Option<u64>,
        n_gpus: usize,
    ) -> Result<Option<String>> {
        let Input::Demo { params, on_gpu } = &self.input else {
            return Ok(None);
        };
        let too_large = available.is_some_and(|a| super::generated::too_large_for_host(params, a));
        if !on_gpu && !too_large {
            return Ok(None);
        }
        let why = if *on_gpu {
            "--demo-on-gpu".to_string()
        } else {
            format!(
                "its X (up to {:.0} GB) does not fit in host memory ({:.0} GB available)",
                crate::synthetic::max_stored_values(params) as f64 * 8e-9,
                available.unwrap_or(0) as f64 * 1e-9
            )
        };
        let option = if *on_gpu { "--demo-on-gpu" } else { "--demo" };
        if self.target != Target::Gpu {
            return Err(Error::param(
                option,
                format!(
                    "the demo is generated on the GPU ({why}): it needs the GPU (--device gpu)"
                ),
            ));
        }
        if n_gpus != 1 {
            return Err(Error::param(
                option,
                format!("the demo is generated on one GPU ({why}): run it with --gpus 1"),
            ));
        }
        if self.device.execution != Execution::Auto {
            return Err(Error::param(
                "--execution",
                format!("the demo is generated on the GPU for every pass ({why}): X is never held"),
            ));
        }
        Ok(Some(format!(
            "notice: the demo's cells are generated on the GPU block by block for every pass ({why}); \
             the output holds no X"
        )))
    }
}

impl RunPlan {
    /// Whether the input file's X is read from the file block by block for every pass instead
    /// of being held: when X in memory (`x`: cells, genes and stored values; 8 bytes a stored
    /// value and 8 a row offset) is over half of the host memory the run may use
    /// (`--host-memory-limit`, else `available`), the run holding X and its copies beside it.
    /// The notice that says so, or a clear error where that run cannot be made on `n_gpus`;
    /// `x` is `None` for an input that is neither h5ad nor zarr (refused with a limit given).
    pub fn read_from_disk(
        &self,
        x: Option<(usize, usize, u64)>,
        available: Option<u64>,
        n_gpus: usize,
    ) -> Result<Option<String>> {
        const FLAG: &str = "--host-memory-limit";
        let Input::File { path, .. } = &self.input else {
            return Ok(None);
        };
        let Some((n_obs, n_vars, stored)) = x else {
            return match self.host_memory_limit {
                Some(_) => Err(Error::param(
                    FLAG,
                    format!(
                        "reading X from the file block by block takes h5ad and zarr inputs; {} is neither",
                        path.display()
                    ),
                )),
                None => Ok(None),
            };
        };
        let Some(limit) = self.host_memory_limit.or(available) else {
            return Ok(None);
        };
        let x_bytes = stored * 8 + (n_obs as u64 + 1) * 8;
        if x_bytes <= limit / 2 {
            return Ok(None);
        }
        let gb = |b: u64| b as f64 * 1e-9;
        let why = format!(
            "X ({n_obs} x {n_vars}, {:.2} GB in memory) is over half of {:.2} GB{}",
            gb(x_bytes),
            gb(limit),
            match self.host_memory_limit {
                Some(_) => " (--host-memory-limit)",
                None => " available",
            }
        );
        let refuse = |option: &'static str, what: &str| {
            Err(Error::param(
                option,
                format!("{why}: it is read from the file block by block, {what}"),
            ))
        };
        if self.target != Target::Gpu {
            return refuse(FLAG, "which needs the GPU (--device gpu)");
        }
        if n_gpus != 1 {
            return refuse("--gpus", "on one GPU: run it with --gpus 1");
        }
        if self.device.execution != Execution::Auto {
            return refuse("--execution", "for every pass: X is never held");
        }
        Ok(Some(format!(
            "notice: {why}: it is read from the file block by block for every pass, onto the \
             GPU; the output holds no X"
        )))
    }
}

/// Refuses an output that is the input file itself (or a link to it): the input is never
/// replaced.
fn check_output_is_not_input(input: &Path, output: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    match std::fs::metadata(input) {
        Ok(inp) if (inp.dev(), inp.ino()) == (out.dev(), out.ino()) => Err(Error::param(
            "-o",
            format!(
                "{} is the input file; scpipe does not replace its input",
                output.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses, before any work, an output path that cannot be written: its directory missing or
/// not writable, or the path a directory. Found at the end, the error would cost the whole run.
pub(crate) fn check_output_place(flag: &'static str, path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if path.is_dir() {
        return Err(Error::param(
            flag,
            format!("{} is a directory; name a file", path.display()),
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::param(
            flag,
            format!("the directory {} does not exist", dir.display()),
        ));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::param(flag, "the path contains a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated path; access reads nothing else.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::param(
            flag,
            format!("cannot write in the directory {}: {e}", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(target: Target) -> RunPlan {
        RunPlan {
            input: Input::Demo {
                params: SyntheticParams::new(100, 50, 0),
                on_gpu: false,
            },
            outputs: Outputs {
                h5ad: PathBuf::from("out.h5ad"),
                report: None,
                memory_timeline: None,
                memory_snapshot: None,
                allocation_log: None,
                plot: None,
                plot_genes: crate::plot::GENES_PER_GROUP,
                format: crate::io::OutputFormat::H5ad,
            },
            config: PipelineConfig::default(),
            target,
            target_notice: None,
            device: DeviceOptions::default(),
            gpus: None,
            host_memory_limit: None,
        }
    }

    #[test]
    fn output_places_are_checked_before_any_work() {
        let dir = std::env::temp_dir().join(format!("scpipe-places-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(check_output_place("-o", &dir.join("out.h5ad")).is_ok());
        assert!(
            check_output_place("-o", Path::new("out.h5ad")).is_ok(),
            "the current directory"
        );
        let missing = check_output_place("--report", &dir.join("no/r.json")).unwrap_err();
        assert!(
            missing.to_string().contains("--report")
                && missing.to_string().contains("does not exist"),
            "{missing}"
        );
        let taken = check_output_place("-o", &dir).unwrap_err().to_string();
        assert!(taken.contains("is a directory"), "{taken}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn gpu_options_on_the_cpu_are_refused_by_name() {
        let mut p = plan(Target::Cpu);
        assert!(p.check().is_ok());
        p.device.execution = Execution::Streamed;
        let e = p.check().unwrap_err().to_string();
        assert!(
            e.contains("--execution") && e.contains("needs the GPU"),
            "{e}"
        );
        p.outputs.memory_timeline = Some(PathBuf::from("t.svg"));
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("--memory-timeline"), "{e}");
        let mut g = plan(Target::Gpu);
        g.device.execution = Execution::Streamed;
        assert!(g.check().is_ok());
    }

    #[test]
    fn the_gpu_count_takes_every_visible_gpu_unless_an_option_needs_one() {
        let mut p = plan(Target::Gpu);
        assert_eq!(p.gpu_count(4).unwrap(), 4);
        p.outputs.memory_snapshot = Some(PathBuf::from("s.pickle"));
        assert_eq!(p.gpu_count(4).unwrap(), 1);
        p.gpus = Some(2);
        let e = p.gpu_count(4).unwrap_err().to_string();
        assert!(
            e.contains("--memory-snapshot applies to a run on one GPU"),
            "{e}"
        );
        p.outputs.memory_snapshot = None;
        assert_eq!(p.gpu_count(4).unwrap(), 2);
        p.gpus = Some(8);
        assert!(p
            .gpu_count(4)
            .unwrap_err()
            .to_string()
            .contains("8 GPUs asked, 4 visible"));
        let mut c = plan(Target::Cpu);
        assert_eq!(c.gpu_count(4).unwrap(), 1);
        c.gpus = Some(2);
        assert!(c
            .gpu_count(4)
            .unwrap_err()
            .to_string()
            .contains("needs the GPU"));
    }

    #[test]
    fn an_x_over_half_the_host_memory_is_read_from_the_file_on_one_gpu() {
        let mut p = plan(Target::Gpu);
        p.input = Input::File {
            path: PathBuf::from("in.h5ad"),
            genome: None,
        };
        // 1 M cells x 2,000 values: 16 GB in memory.
        let x = Some((1_000_000, 20_000, 2_000_000_000));
        assert_eq!(p.read_from_disk(x, Some(64 << 30), 1).unwrap(), None);
        let note = p.read_from_disk(x, Some(16 << 30), 1).unwrap().unwrap();
        assert!(
            note.contains("16.01 GB in memory") && note.contains("available"),
            "{note}"
        );
        p.host_memory_limit = Some(8 << 30);
        let note = p.read_from_disk(x, Some(1 << 40), 1).unwrap().unwrap();
        assert!(
            note.contains("(--host-memory-limit)") && note.contains("no X"),
            "{note}"
        );
        let e = |p: &RunPlan, x, gpus| p.read_from_disk(x, None, gpus).unwrap_err().to_string();
        assert!(e(&p, x, 2).contains("--gpus 1"));
        assert!(e(&p, None, 1).contains("takes h5ad and zarr inputs"));
        let mut q = p.clone();
        q.device.execution = Execution::Streamed;
        assert!(e(&q, x, 1).contains("--execution"));
        q = p.clone();
        q.target = Target::Cpu;
        assert!(e(&q, x, 1).contains("needs the GPU"));
        // A demo is not read from a file; without a limit or an answer nothing is decided.
        assert_eq!(
            plan(Target::Gpu).read_from_disk(x, Some(1), 1).unwrap(),
            None
        );
        p.host_memory_limit = None;
        assert_eq!(p.read_from_disk(x, None, 1).unwrap(), None);
        assert_eq!(p.read_from_disk(None, Some(1), 1).unwrap(), None);
    }

    #[test]
    fn a_demo_generated_on_the_gpu_needs_one_gpu_and_the_auto_execution() {
        let mut p = plan(Target::Gpu);
        assert_eq!(p.generated_on_gpu(Some(1 << 40), 1).unwrap(), None);
        p.input = Input::Demo {
            params: SyntheticParams::new(100, 50, 0),
            on_gpu: true,
        };
        assert!(p.generated_on_gpu(None, 1).unwrap().is_some());
        assert!(p
            .generated_on_gpu(None, 2)
            .unwrap_err()
            .to_string()
            .contains("--gpus 1"));
        p.target = Target::Cpu;
        assert!(p
            .generated_on_gpu(None, 1)
            .unwrap_err()
            .to_string()
            .contains("--device gpu"));
    }
}
