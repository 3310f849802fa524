//! Progress on stderr while steps run: a spinner with the step's name and elapsed time. indicatif
//! hides it when stderr is not a terminal, so logs stay clean.

use crate::report::StepRecord;
use crate::run::StepObserver;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

#[derive(Default)]
pub struct Spinner {
    bar: Option<ProgressBar>,
}

impl Spinner {
    pub fn start(&mut self, message: &str) {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"),
        );
        bar.set_message(message.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        self.bar = Some(bar);
    }

    pub fn stop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl StepObserver for Spinner {
    fn started(&mut self, step: &str) {
        self.start(step);
    }

    fn finished(&mut self, _: &StepRecord) {
        self.stop();
    }

    fn stopped(&mut self) {
        self.stop();
    }
}
