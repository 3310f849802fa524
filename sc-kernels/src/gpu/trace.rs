//! `SCPIPE_TRACE_PHASES`: where a step's time goes, phase by phase, on standard error. Each
//! mark synchronises the device, so the time of a phase is its own work, launches and waits
//! included; without the variable a mark does nothing (no synchronisation, no clock read).

use super::GpuContext;
use crate::error::Result;
use std::sync::OnceLock;
use std::time::Instant;

/// When the first trace of the process began: each mark also says how long after it it ended,
/// so phases on different threads (the warm-up's, the run's) can be put in order.
static FIRST: OnceLock<Instant> = OnceLock::new();

/// The environment variable that turns the phase marks on (any value but empty).
pub const TRACE_ENV: &str = "SCPIPE_TRACE_PHASES";

/// Whether [`TRACE_ENV`] turns the phase marks on (any value but empty).
pub fn tracing() -> bool {
    std::env::var_os(TRACE_ENV).is_some_and(|v| !v.is_empty())
}

/// The phase marks of one call of a step (`what`, e.g. `pca`).
pub struct PhaseTrace<'a> {
    on: bool,
    /// The device each mark waits for (none: the phases run on the host).
    ctx: Option<&'a GpuContext>,
    what: &'static str,
    last: Instant,
}

impl<'a> PhaseTrace<'a> {
    /// Starts the clock of the first phase (when [`TRACE_ENV`] is set).
    pub fn new(ctx: &'a GpuContext, what: &'static str) -> Self {
        PhaseTrace {
            ctx: Some(ctx),
            ..PhaseTrace::on_host(what)
        }
    }

    /// The marks of phases that run on the host (nothing to wait for).
    pub fn on_host(what: &'static str) -> Self {
        let on = tracing();
        if on {
            FIRST.get_or_init(Instant::now);
        }
        PhaseTrace {
            on,
            ctx: None,
            what,
            last: Instant::now(),
        }
    }

    /// Ends the phase `phase`: prints its time and starts the next one's clock.
    pub fn mark(&mut self, phase: &str) -> Result<()> {
        if self.on {
            if let Some(ctx) = self.ctx {
                ctx.synchronize()?;
            }
            let first = FIRST.get_or_init(Instant::now);
            eprintln!(
                "{} {phase}: {:.2} ms (at {:.3} s)",
                self.what,
                self.last.elapsed().as_secs_f64() * 1e3,
                first.elapsed().as_secs_f64()
            );
            self.last = Instant::now();
        }
        Ok(())
    }

    /// Prints a part of the current phase measured by the caller (`seconds` of `part`), without
    /// ending the phase.
    pub fn part(&self, part: &str, seconds: f64) {
        if self.on {
            eprintln!("{} ({part}: {:.2} ms)", self.what, seconds * 1e3);
        }
    }
}
