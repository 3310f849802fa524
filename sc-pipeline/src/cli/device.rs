//! `--device auto|cpu|gpu`: which device runs the steps. `auto` takes the GPU when there is
//! one (saying so), else the CPU with the reason; `gpu` without a GPU is refused with the reason.

use crate::run::Target;
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
    pub target: Target,
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
    match (choice, gpus) {
        (DeviceChoice::Cpu, _) => Ok(Resolved {
            target: Target::Cpu,
            notice: None,
        }),
        (DeviceChoice::Auto, Ok(n)) => Ok(Resolved {
            target: Target::Gpu,
            notice: Some(format!("notice: {n} GPU(s) found: running on GPU 0")),
        }),
        (DeviceChoice::Auto, Err(why)) => Ok(Resolved {
            target: Target::Cpu,
            notice: Some(format!("notice: no GPU ({why}): running on the CPU")),
        }),
        (DeviceChoice::Gpu, Ok(_)) => Ok(Resolved {
            target: Target::Gpu,
            notice: None,
        }),
        (DeviceChoice::Gpu, Err(why)) => Err(Error::Device(format!(
            "--device gpu: no GPU is available ({why}); use --device cpu (or auto)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_gpu_when_there_is_one_and_says_why_not() {
        let r = resolve_with(DeviceChoice::Auto, Err("no CUDA driver".into())).unwrap();
        assert_eq!(r.target, Target::Cpu);
        assert!(r.notice.unwrap().contains("no CUDA driver"));
        let r = resolve_with(DeviceChoice::Auto, Ok(1)).unwrap();
        assert_eq!(r.target, Target::Gpu);
    }

    #[test]
    fn gpu_without_one_is_refused_with_the_reason() {
        let e = resolve_with(DeviceChoice::Gpu, Err("no CUDA driver".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no GPU is available") && e.contains("no CUDA driver"),
            "{e}"
        );
        assert_eq!(
            resolve_with(DeviceChoice::Gpu, Ok(2)).unwrap().target,
            Target::Gpu
        );
    }

    #[test]
    fn cpu_needs_no_notice() {
        assert_eq!(
            resolve_with(DeviceChoice::Cpu, Ok(1)).unwrap(),
            Resolved {
                target: Target::Cpu,
                notice: None
            }
        );
    }
}
