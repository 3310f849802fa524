//! What a run tells as its steps go (the command line draws its progress from it).

use crate::report::StepRecord;

/// Told when each step starts and ends (the command line draws progress from it).
pub trait StepObserver {
    fn started(&mut self, step: &str);
    fn finished(&mut self, record: &StepRecord);
    /// Work begun with `started` ended, or failed, without a record of its own yet (the
    /// input's read, the output's write).
    fn stopped(&mut self) {}
}

/// An observer that does nothing.
pub struct Silent;
impl StepObserver for Silent {
    fn started(&mut self, _: &str) {}
    fn finished(&mut self, _: &StepRecord) {}
}
