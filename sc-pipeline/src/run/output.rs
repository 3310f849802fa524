//! A run's output: the h5ad written while the cell-graph steps run (X, `.raw` and the cell
//! names, final by then, on a thread of their own), or after the steps; then the pictures of the data
//! (`--plot`), the memory pictures, logs and the report, moved into place with the output only
//! when everything succeeded.

use super::gpu::GpuRun;
use super::in_memory::{cell_graph_steps_on, GraphRuns};
use super::observer::StepObserver;
use super::plan::{Input, Outputs, RunPlan};
use super::recorders::MemoryRecorders;
use super::PipelineConfig;
use crate::anndata::Matrix;
use crate::io::{OutputFormat, OutputWrite, RowNames, StagedFile};
use crate::report::{RunReport, StepTimer};
use crate::{memory_timeline, AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::{Communicator, CsrMatrix};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A finished run's report (its files are in place).
pub struct Finished {
    pub report: RunReport,
}

/// The steps over the cell x cell structure still to run, and where.
pub(crate) struct CellGraph<'a> {
    pub(crate) config: &'a PipelineConfig,
    pub(crate) gpu: Option<&'a GpuRun>,
    /// In a split run, the GPU for the step that runs beside the others.
    pub(crate) beside: Option<&'a GpuRun>,
    pub(crate) gpus: &'a [Arc<GpuContext>],
    /// The GPUs' communicators, destroyed once the steps are done (see `run_while_writing`).
    pub(crate) group: Vec<Arc<dyn Communicator>>,
}

impl CellGraph<'_> {
    /// Runs the cell-graph steps (harmony to the marker genes) while another thread writes the output's X and `.raw` (final
    /// by then, and most of the file's bytes), and writes the rest as soon as they end, while X
    /// and `.raw` may still be written; the records go to `report`. Without those steps, or when
    /// neighbors would read X itself (no PCA), it runs them and then writes the whole file.
    pub(crate) fn run_while_writing(
        self,
        adata: &mut AnnData,
        (output, format): (&Path, OutputFormat),
        early: Option<OutputWrite>,
        observer: &mut dyn StepObserver,
        report: &mut RunReport,
    ) -> Result<StagedFile> {
        let CellGraph {
            config,
            gpu,
            beside,
            gpus,
            group,
        } = self;
        let runs = GraphRuns { first: gpu, beside };
        if !writes_during_graph_steps(config, adata) {
            // The file created ahead has the name write_step writes to: it goes first.
            drop(early);
            report.steps.extend(cell_graph_steps_on(
                adata, config, runs, gpus, &group, None, observer,
            )?);
            drop(group);
            return write_step(adata, (output, format), true, observer, report);
        }
        crate::io::prepare_device_write(&adata.x)?;
        if let Some(r) = &adata.raw {
            crate::io::prepare_device_write(&r.x)?;
        }
        if matches!(format, OutputFormat::Zarr(_)) {
            crate::io::prepare_zarr_write(&adata.x)?;
            if let Some(r) = &adata.raw {
                crate::io::prepare_zarr_write(&r.x)?;
            }
        }
        let (n, g) = (adata.n_obs(), adata.n_vars());
        let file = match early {
            Some(file) => file,
            None => OutputWrite::create(output, format)?,
        };
        // The steps read obsm and obs only; X is an empty stand-in of the same shape meanwhile.
        let x = std::mem::replace(&mut adata.x, Matrix::Sparse(CsrMatrix::zeros(n, g)));
        let raw = adata.raw.take();
        let names = RowNames::of(&adata.obs);
        let (bulk, records, rest, destroying) = std::thread::scope(|s| {
            let writing = s.spawn(|| {
                // The cell names first: short beside X, and the rest needs them.
                file.write_obs_names(names)?;
                let timer = StepTimer::start(&format!("write {}: X and .raw", format.name()));
                let mut note = "while the cell-graph steps ran".to_string();
                if file.reserves() {
                    note += ", into pages reserved meanwhile";
                }
                file.write_x_and_raw(&x, raw.as_ref())?;
                Ok::<_, Error>(timer.finish(n, g, note))
            });
            let records =
                cell_graph_steps_on(adata, config, runs, gpus, &group, raw.as_ref(), observer);
            // NCCL's communicators are done with: destroyed on a thread of their own (0.3 s on
            // 2 and 4 H100s) while the rest of the output is written. On an error it is left to
            // end with the process: after a failed collective, ncclCommDestroy may wait for
            // work that never completes, and waiting for it would hang the failed run.
            let destroying = (!group.is_empty()).then(|| std::thread::spawn(move || drop(group)));
            // The rest goes in as soon as the steps end, while X and `.raw` may still be on
            // their way (on several GPUs neighbors ends well before them). Since the pages are
            // reserved ahead, the two parts no longer wait on each other's fallocate.
            let rest = records.is_ok().then(|| {
                observer.started(&format!("write {}", format.name()));
                let timer = StepTimer::start(&format!("write {}: the rest", format.name()));
                let beside = !writing.is_finished();
                let written = file.write_rest(adata);
                observer.stopped();
                let note = match beside {
                    true => format!("{}, begun while X and .raw were written", output.display()),
                    false => output.display().to_string(),
                };
                written.map(|()| timer.finish(n, g, note))
            });
            let bulk = writing
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (bulk, records, rest, destroying)
        });
        adata.x = x;
        adata.raw = raw;
        report.steps.extend(records?);
        report.steps.push(bulk?);
        let mut rest = rest.expect("written once the steps succeeded")?;
        // Closing (HDF5's metadata) belongs to the rest; waiting for X and `.raw` does not.
        let closing = std::time::Instant::now();
        let written = file.close();
        if let Some(h) = destroying {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
        let written = written?;
        rest.seconds += closing.elapsed().as_secs_f64();
        report.steps.push(rest);
        Ok(written)
    }
}

/// The output of a GPU run that writes X and `.raw` while the cell-graph steps run, created
/// before its data, with a bound on its bytes (for an input of `size`: cells, genes, stored
/// values) reserved on a thread of its own meanwhile (see `io::create_h5ad`: on tmpfs the
/// reservation is most of a large write's time). `None` for a run without those steps.
pub(crate) fn started_early(
    config: &PipelineConfig,
    (n_obs, n_vars, nnz): (usize, usize, u64),
    (output, format): (&Path, OutputFormat),
) -> Result<Option<OutputWrite>> {
    if !config.has_cell_graph_steps() || config.n_comps.is_none() || format != OutputFormat::H5ad {
        return Ok(None);
    }
    let bytes = crate::run::memory_plan::output_bytes(n_obs, n_vars, nnz as usize, config);
    let memory = super::generated::host_available_bytes();
    crate::io::create_h5ad(output, bytes, memory).map(|w| Some(OutputWrite::H5ad(w)))
}

/// The input's cells, genes and stored values, known before it is read: a demo's bound (2% above
/// the count expected: what is reserved beyond the output's end costs time to give back, and a
/// dataset beyond the bound is reserved by its fill), an h5ad file's metadata. `None` for a 10x
/// file, or an h5ad file whose X cannot be sized (its read then says why).
pub(crate) fn input_size(plan: &RunPlan) -> Option<(usize, usize, u64)> {
    match &plan.input {
        Input::Demo { params, .. } => {
            let expected = crate::synthetic::expected_stored_values(params) as f64 * 1.02;
            let most = crate::synthetic::max_stored_values(params);
            Some((params.n_cells, params.n_genes, most.min(expected as u64)))
        }
        Input::File { path, .. } if !crate::io::is_10x_h5(path) => {
            crate::io::h5ad_x_size(path).ok()
        }
        Input::File { .. } => None,
    }
}

/// Whether X and `.raw` are written while the cell-graph steps run: there are such steps, and
/// they read `obsm['X_pca']` (not X itself).
fn writes_during_graph_steps(config: &PipelineConfig, adata: &AnnData) -> bool {
    config.has_cell_graph_steps() && adata.obsm.contains_key("X_pca")
}

/// Writes `adata` (without X: a generated run's result) under a temporary name, timed as the
/// "write h5ad" step of `report`.
pub(crate) fn write_step(
    adata: &AnnData,
    (output, format): (&Path, OutputFormat),
    with_x: bool,
    observer: &mut dyn StepObserver,
    report: &mut RunReport,
) -> Result<StagedFile> {
    let note = match with_x {
        true => output.display().to_string(),
        false => format!("{} (no X)", output.display()),
    };
    timed_write(adata, format, note, observer, report, || {
        crate::io::write_output_staged(adata, output, format, with_x)
    })
}

/// Writes everything of `adata` but X (a run without X: the generated demo's result) into
/// `file`, created before the run (the cell names may be in it already), and closes it; timed
/// as [`write_step`] is.
pub(crate) fn write_rest_step(
    file: OutputWrite,
    adata: &AnnData,
    (output, format): (&Path, OutputFormat),
    observer: &mut dyn StepObserver,
    report: &mut RunReport,
) -> Result<StagedFile> {
    let note = format!("{} (no X)", output.display());
    timed_write(adata, format, note, observer, report, || {
        file.write_rest(adata)?;
        file.close()
    })
}

/// Runs `write` as the "write h5ad" (or zarr) step of `report`, its record's note `note`.
fn timed_write(
    adata: &AnnData,
    format: OutputFormat,
    note: String,
    observer: &mut dyn StepObserver,
    report: &mut RunReport,
    write: impl FnOnce() -> Result<StagedFile>,
) -> Result<StagedFile> {
    let name = format!("write {}", format.name());
    observer.started(&name);
    let timer = StepTimer::start(&name);
    let written = write();
    observer.stopped();
    let written = written?;
    report
        .steps
        .push(timer.finish(adata.n_obs(), adata.n_vars(), note));
    Ok(written)
}

/// The run's pictures of `adata` (the final data), memory pictures and logs, its report, and
/// the output moved into place.
pub(crate) fn finish(
    plan: &RunPlan,
    adata: &AnnData,
    mut report: RunReport,
    start: Instant,
    written: StagedFile,
    recorders: &MemoryRecorders,
) -> Result<Finished> {
    let outputs = &plan.outputs;
    // Moved into place together, the output last.
    let mut files = Vec::new();
    if let Some(dir) = &outputs.plot {
        let timer = StepTimer::start("draw pictures");
        let drawn = crate::plot::draw(adata, &plot_request(&plan.config, outputs), dir)?;
        let note = format!(
            "{} written, {} skipped, into {}",
            drawn.summary.written.len(),
            drawn.summary.skipped.len(),
            dir.display()
        );
        report
            .steps
            .push(timer.finish(adata.n_obs(), adata.n_vars(), note));
        files.extend(drawn.files);
        report.plots = Some(drawn.summary);
    }
    report.total_seconds = start.elapsed().as_secs_f64();
    if let (Some(path), Some(rec)) = (&outputs.memory_timeline, &recorders.timeline) {
        // Step ends on the recorder's clock, which starts when the first GPU's memory pool is
        // made (`start` is the run's clock, which the steps' starts count from).
        let recorder_start = rec.started().saturating_duration_since(start).as_secs_f64();
        let marks = memory_timeline::step_marks(&report.steps, recorder_start);
        let title = format!(
            "scpipe run: GPU memory over time ({} allocator)",
            report.allocator.as_deref().unwrap_or("?")
        );
        files.push(memory_timeline::write_svg(
            path,
            &title,
            &rec.timeline(),
            &marks,
        )?);
    }
    if let (Some(path), Some(log)) = (&outputs.memory_snapshot, &recorders.log) {
        files.push(log.write_snapshot(path)?);
    }
    if let (Some(path), Some(log)) = (&outputs.allocation_log, &recorders.log) {
        files.push(log.write_csv(path)?);
    }
    report.peak_rss_bytes = report.steps.iter().filter_map(|s| s.peak_rss_bytes).max();
    if let Some(path) = &outputs.report {
        files.push(stage_report(&report, path)?);
    }
    files.push(written);
    crate::io::commit_all(files)?;
    Ok(Finished { report })
}
/// What the run's configuration made that the pictures show.
fn plot_request(config: &PipelineConfig, outputs: &Outputs) -> crate::plot::Request {
    let leiden_keys = match &config.leiden {
        Some(l) if config.runs_leiden() => (0..l.resolutions.len()).map(|i| l.key(i)).collect(),
        _ => Vec::new(),
    };
    let batch_key = match (&config.harmony, &config.hvg) {
        (Some(h), _) => Some(h.key.clone()),
        (None, Some(hvg)) => hvg.batch_key.clone(),
        (None, None) => None,
    };
    let other_clusterings = [
        ("louvain", config.runs_louvain()),
        ("kmeans", config.runs_kmeans()),
    ]
    .iter()
    .filter(|(_, ran)| *ran)
    .map(|(key, _)| key.to_string())
    .collect();
    crate::plot::Request {
        leiden_keys,
        other_clusterings,
        batch_key,
        filtered: config.min_genes.is_some(),
        genes_per_group: outputs.plot_genes,
    }
}

/// Writes the report under a temporary name next to `path`, to be moved into place with the
/// output.
fn stage_report(report: &RunReport, path: &Path) -> Result<StagedFile> {
    let staged = StagedFile::new(path);
    std::fs::write(staged.path(), report.to_json()).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("cannot write the report: {e}"),
    })?;
    Ok(staged)
}
