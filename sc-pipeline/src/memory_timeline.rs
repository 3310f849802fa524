//! Memory over time of a run, as an SVG (`scpipe run --memory-timeline FILE`): the live bytes,
//! and where the resource keeps a free list (pool, binning's pool, arena) what it holds (live +
//! free) and its largest free block; the steps' ends are marked. Drawn from a
//! [`rmm_core::adaptors::TimelineAdaptor`]'s record.

use crate::io::StagedFile;
use crate::{Error, Result};
use plotters::prelude::*;
use rmm_core::adaptors::Timeline;
use std::path::Path;

const GIB: f64 = (1u64 << 30) as f64;

/// A step line through `(t, value)` samples: each value holds until the next sample.
fn steps_of(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut last: Option<f64> = None;
    for (t, v) in points {
        if let Some(l) = last {
            out.push((t, l));
        }
        out.push((t, v));
        last = Some(v);
    }
    out
}

/// The `(seconds, label)` ends of `steps` on a recorder's clock that started `recorder_start`
/// seconds into the run, in time order. The ends come from each step's own start and length,
/// not from adding the steps up: some run beside others (the output's write beside neighbors,
/// the GPUs' setup beside the input's read). Steps that ended before the recorder started are
/// left out.
pub fn step_marks(steps: &[crate::report::StepRecord], recorder_start: f64) -> Vec<(f64, String)> {
    let mut marks: Vec<(f64, String)> = steps
        .iter()
        .map(|s| {
            (
                s.started_seconds + s.seconds - recorder_start,
                s.step.clone(),
            )
        })
        .filter(|&(t, _)| t >= 0.0)
        .collect();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    marks
}

/// Width of the picture's plotting area in pixels (the SVG's 1000 less the margins and the
/// y axis's labels), and how far apart two rotated step labels must be not to overlap.
const PLOT_WIDTH_PX: f64 = 916.0;
const LABEL_GAP_PX: f64 = 14.0;

/// The labels drawn for `marks` (sorted by time): marks less than `gap` seconds after the
/// first of a run share one label at that first mark, `first … last (N steps)`, so that the
/// short steps' names do not print over each other. Each mark keeps its own line.
fn grouped_labels(marks: &[(f64, String)], gap: f64) -> Vec<(f64, String)> {
    let mut labels = Vec::new();
    let mut i = 0;
    while i < marks.len() {
        let (first_t, first) = &marks[i];
        let n = marks[i..]
            .iter()
            .take_while(|(t, _)| t - first_t < gap)
            .count();
        let label = match n {
            1 => first.clone(),
            _ => format!("{first} … {} ({n} steps)", marks[i + n - 1].1),
        };
        labels.push((*first_t, label));
        i += n;
    }
    labels
}

/// Draws `timeline` into the SVG `path`, under a temporary name (see
/// [`crate::io::StagedFile`]) that the caller moves into place with the run's other outputs.
/// `marks` are `(seconds, label)` step ends.
pub fn write_svg(
    path: &Path,
    title: &str,
    timeline: &Timeline,
    marks: &[(f64, String)],
) -> Result<StagedFile> {
    let staged = StagedFile::new(path);
    draw(staged.path(), title, timeline, marks).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("drawing the memory timeline: {e}"),
    })?;
    Ok(staged)
}

fn draw(
    path: &Path,
    title: &str,
    t: &Timeline,
    marks: &[(f64, String)],
) -> std::result::Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    crate::plot::font::register();
    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let t_end = t
        .points
        .last()
        .map_or(0.0, |p| p.seconds)
        .max(marks.iter().map(|m| m.0).fold(0.0, f64::max))
        .max(1e-6);
    let held = |p: &rmm_core::adaptors::TimelinePoint| {
        p.free_space
            .map(|f| (p.live_bytes as f64 + f.free_bytes as f64) / GIB)
    };
    let y_max = t
        .points
        .iter()
        .map(|p| held(p).unwrap_or(0.0).max(p.live_bytes as f64 / GIB))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_end, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("GiB")
        .draw()
        .map_err(|e| err(&e))?;
    for (x, _) in marks {
        chart
            .draw_series(LineSeries::new(
                vec![(*x, 0.0), (*x, y_max)],
                BLACK.mix(0.2),
            ))
            .map_err(|e| err(&e))?;
    }
    for (x, label) in &grouped_labels(marks, LABEL_GAP_PX * t_end / PLOT_WIDTH_PX) {
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                (*x, y_max * 0.98),
                ("sans-serif", 10)
                    .into_font()
                    .transform(FontTransform::Rotate90),
            )))
            .map_err(|e| err(&e))?;
    }
    let live = steps_of(
        t.points
            .iter()
            .map(|p| (p.seconds, p.live_bytes as f64 / GIB)),
    );
    chart
        .draw_series(LineSeries::new(live, &BLUE))
        .map_err(|e| err(&e))?
        .label("live bytes")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
    if t.points.iter().any(|p| p.free_space.is_some()) {
        let held_line = steps_of(
            t.points
                .iter()
                .filter_map(|p| held(p).map(|h| (p.seconds, h))),
        );
        chart
            .draw_series(LineSeries::new(held_line, &RED))
            .map_err(|e| err(&e))?
            .label("held by the resource (live + free)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        let largest = steps_of(t.points.iter().filter_map(|p| {
            p.free_space
                .map(|f| (p.seconds, f.largest_free_block as f64 / GIB))
        }));
        chart
            .draw_series(LineSeries::new(largest, &GREEN))
            .map_err(|e| err(&e))?
            .label("largest free block")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREEN));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmm_core::adaptors::{FreeSpace, TimelinePoint};

    #[test]
    fn draws_every_series_and_leaves_no_partial_file() {
        let dir = std::env::temp_dir().join(format!("scpipe-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let point = |s: f64, live: u64, free: usize| TimelinePoint {
            seconds: s,
            live_bytes: live,
            free_space: Some(FreeSpace {
                free_bytes: free,
                largest_free_block: free / 2,
            }),
        };
        let t = Timeline {
            points: vec![
                point(0.0, 0, 1 << 30),
                point(0.5, 1 << 29, 1 << 29),
                point(1.0, 0, 1 << 30),
            ],
            peak_bytes: 1 << 29,
            allocations: 1,
            allocated_bytes: 1 << 29,
            free_space_at_peak: None,
        };
        let marks = [
            (0.5, "qc".into()),
            (0.5001, "filter_cells".into()),
            (0.9, "pca".into()),
        ];
        write_svg(&path, "test run", &t, &marks)
            .unwrap()
            .commit()
            .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let labels = ["qc … filter_cells (2 steps)", "pca"];
        for needle in ["test run", "live bytes", "largest free block"]
            .iter()
            .chain(&labels)
        {
            assert!(svg.contains(needle), "{needle} missing");
        }
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn close_marks_share_one_label() {
        let marks: Vec<(f64, String)> = [(0.0, "a"), (0.004, "b"), (0.009, "c"), (0.011, "d")]
            .into_iter()
            .chain([(1.0, "e")])
            .map(|(t, l)| (t, l.to_string()))
            .collect();
        let labels = grouped_labels(&marks, 0.01);
        let want = [(0.0, "a … c (3 steps)"), (0.011, "d"), (1.0, "e")];
        assert_eq!(labels.len(), want.len(), "{labels:?}");
        for ((t, l), (wt, wl)) in labels.iter().zip(want) {
            assert!(*t == wt && l == wl, "{labels:?}");
        }
        assert!(grouped_labels(&[], 0.01).is_empty());
    }

    #[test]
    fn step_marks_sit_at_each_steps_own_end() {
        let step = |name: &str, started: f64, seconds: f64| crate::report::StepRecord {
            step: name.into(),
            seconds,
            n_obs: 0,
            n_vars: 0,
            peak_rss_bytes: None,
            note: String::new(),
            device: None,
            gpu: None,
            started_seconds: started,
        };
        // The write starts before neighbors and ends after it; setup ended before the recorder.
        let steps = [
            step("setup", 0.0, 0.5),
            step("qc", 1.0, 1.0),
            step("write", 2.0, 3.0),
            step("neighbors", 2.0, 1.5),
        ];
        let marks = step_marks(&steps, 1.0);
        let want = [(1.0, "qc"), (2.5, "neighbors"), (4.0, "write")];
        assert_eq!(marks.len(), want.len(), "{marks:?}");
        for ((t, label), (wt, wl)) in marks.iter().zip(want) {
            assert!((t - wt).abs() < 1e-12 && label == wl, "{marks:?}");
        }
    }
}
