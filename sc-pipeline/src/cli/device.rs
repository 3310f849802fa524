//! `--device auto|cpu|gpu`: which device runs the steps.
//!
//! Only CPU implementations of the steps exist so far, so a GPU is detected and reported but
//! not used: `auto` runs on the CPU with a notice saying why, `gpu` is refused with that reason.

use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Gpu,
}

/// The device a run uses and the notice to print about the choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub device: &'static str,
    pub notice: Option<String>,
}

/// What this machine has, as `rmm_cuda` reports it.
fn gpu_presence() -> Result<usize, String> {
    match rmm_cuda::device_count() {
        Ok(0) => Err("no CUDA device found".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub fn resolve(choice: DeviceChoice) -> Result<Resolved, Error> {
    resolve_with(choice, gpu_presence())
}

/// The decision for a given GPU presence (`Ok(devices)` or `Err(why there is none)`).
pub fn resolve_with(choice: DeviceChoice, gpus: Result<usize, String>) -> Result<Resolved, Error> {
    const NOT_BUILT: &str = "the GPU implementations of the pipeline steps are not built yet";
    match (choice, gpus) {
        (DeviceChoice::Cpu, _) => Ok(Resolved {
            device: "cpu",
            notice: None,
        }),
        (DeviceChoice::Auto, Ok(n)) => Ok(Resolved {
            device: "cpu",
            notice: Some(format!(
                "notice: {n} GPU(s) found, but {NOT_BUILT}: running on the CPU"
            )),
        }),
        (DeviceChoice::Auto, Err(why)) => Ok(Resolved {
            device: "cpu",
            notice: Some(format!("notice: no GPU ({why}): running on the CPU")),
        }),
        (DeviceChoice::Gpu, Ok(n)) => Err(Error::Device(format!(
            "--device gpu: {n} GPU(s) found, but {NOT_BUILT}; use --device cpu (or auto)"
        ))),
        (DeviceChoice::Gpu, Err(why)) => Err(Error::Device(format!(
            "--device gpu: no GPU is available ({why}); use --device cpu (or auto)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_the_cpu_and_says_why() {
        let r = resolve_with(DeviceChoice::Auto, Err("no CUDA driver".into())).unwrap();
        assert_eq!(r.device, "cpu");
        assert!(r.notice.unwrap().contains("no CUDA driver"));
        let r = resolve_with(DeviceChoice::Auto, Ok(1)).unwrap();
        assert_eq!(r.device, "cpu");
        assert!(r.notice.unwrap().contains("not built yet"));
    }

    #[test]
    fn gpu_is_refused_with_the_reason() {
        let e = resolve_with(DeviceChoice::Gpu, Err("no CUDA driver".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no GPU is available") && e.contains("no CUDA driver"),
            "{e}"
        );
        let e = resolve_with(DeviceChoice::Gpu, Ok(2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not built yet"), "{e}");
    }

    #[test]
    fn cpu_needs_no_notice() {
        assert_eq!(
            resolve_with(DeviceChoice::Cpu, Ok(1)).unwrap(),
            Resolved {
                device: "cpu",
                notice: None
            }
        );
    }
}
