//! `SCPIPE_TRACE_PHASES`: where a step's time goes, phase by phase, on standard error. Each
//! mark synchronises the device, so the time of a phase is its own work, launches and waits
//! included; without the variable a mark does nothing (no synchronisation, no clock read).

use super::GpuContext;
use crate::error::Result;
use std::time::Instant;

/// The environment variable that turns the phase marks on (any value but empty).
pub const TRACE_ENV: &str = "SCPIPE_TRACE_PHASES";

/// The phase marks of one call of a step (`what`, e.g. `pca`).
pub struct PhaseTrace<'a> {
    ctx: Option<&'a GpuContext>,
    what: &'static str,
    last: Instant,
}

impl<'a> PhaseTrace<'a> {
    /// Starts the clock of the first phase (when [`TRACE_ENV`] is set).
    pub fn new(ctx: &'a GpuContext, what: &'static str) -> Self {
        PhaseTrace {
            ctx: std::env::var_os(TRACE_ENV)
                .filter(|v| !v.is_empty())
                .map(|_| ctx),
            what,
            last: Instant::now(),
        }
    }

    /// Ends the phase `phase`: prints its time and starts the next one's clock.
    pub fn mark(&mut self, phase: &str) -> Result<()> {
        if let Some(ctx) = self.ctx {
            ctx.synchronize()?;
            eprintln!(
                "{} {phase}: {:.2} ms",
                self.what,
                self.last.elapsed().as_secs_f64() * 1e3
            );
            self.last = Instant::now();
        }
        Ok(())
    }
}
