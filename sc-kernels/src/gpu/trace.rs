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
        PhaseTrace {
            on: std::env::var_os(TRACE_ENV).is_some_and(|v| !v.is_empty()),
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
