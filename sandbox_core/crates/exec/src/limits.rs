//! Limits of one execution, with the agent's defaults and validation of absurd values.

use std::time::Duration;

/// Limits of one execution. Built from the request with zeros replaced by defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub wall_time: Duration,
    pub cpu_time: Duration,
    pub memory_bytes: u64,
    pub max_pids: u32,
    pub max_output_bytes: u64,
    pub max_file_size_bytes: u64,
    pub max_open_files: u32,
    pub kill_on_output_limit: bool,
}

/// Hard ceilings: a request above one of these is refused as invalid, not clamped silently.
pub const MAX_WALL_TIME: Duration = Duration::from_secs(24 * 3600);
pub const MAX_MEMORY_BYTES: u64 = 1 << 40;
pub const MAX_PIDS: u32 = 1 << 20;
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;
pub const MAX_OPEN_FILES: u32 = 1 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall_time: Duration::from_secs(30),
            cpu_time: Duration::from_secs(30),
            memory_bytes: 512 << 20,
            max_pids: 256,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 256 << 20,
            max_open_files: 1024,
            kill_on_output_limit: false,
        }
    }
}

impl Limits {
    /// Checks every field against the ceilings above. A zero where a positive amount is needed is
    /// refused too: the agent replaces zeros by defaults before this point, so a zero here is a bug
    /// or a hostile request, never "unlimited".
    pub fn validate(&self) -> Result<(), String> {
        fn range<T: PartialOrd + std::fmt::Debug>(
            name: &str,
            v: T,
            min: T,
            max: T,
        ) -> Result<(), String> {
            if v < min || v > max {
                return Err(format!("{name} = {v:?} is outside {min:?}..={max:?}"));
            }
            Ok(())
        }
        let one_ms = Duration::from_millis(1);
        range("wall_time", self.wall_time, one_ms, MAX_WALL_TIME)?;
        range("cpu_time", self.cpu_time, one_ms, MAX_WALL_TIME)?;
        range("memory_bytes", self.memory_bytes, 1, MAX_MEMORY_BYTES)?;
        range("max_pids", self.max_pids, 1, MAX_PIDS)?;
        range(
            "max_output_bytes",
            self.max_output_bytes,
            0,
            MAX_OUTPUT_BYTES,
        )?;
        range("max_open_files", self.max_open_files, 1, MAX_OPEN_FILES)?;
        Ok(())
    }

    /// `self` with every zero field replaced by the field of `defaults` (the request convention:
    /// zero means "the agent's default").
    pub fn or_defaults(&self, defaults: &Limits) -> Limits {
        fn pick<T: PartialEq + Default + Copy>(v: T, d: T) -> T {
            if v == T::default() {
                d
            } else {
                v
            }
        }
        Limits {
            wall_time: pick(self.wall_time, defaults.wall_time),
            cpu_time: pick(self.cpu_time, defaults.cpu_time),
            memory_bytes: pick(self.memory_bytes, defaults.memory_bytes),
            max_pids: pick(self.max_pids, defaults.max_pids),
            max_output_bytes: pick(self.max_output_bytes, defaults.max_output_bytes),
            max_file_size_bytes: pick(self.max_file_size_bytes, defaults.max_file_size_bytes),
            max_open_files: pick(self.max_open_files, defaults.max_open_files),
            kill_on_output_limit: self.kill_on_output_limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Limits::default().validate(), Ok(()));
    }

    #[test]
    fn out_of_range_is_refused() {
        let d = Limits::default;
        let l = Limits {
            wall_time: MAX_WALL_TIME + Duration::from_secs(1),
            ..d()
        };
        assert!(l.validate().unwrap_err().contains("wall_time"));
        let l = Limits {
            memory_bytes: 0,
            ..d()
        };
        assert!(l.validate().unwrap_err().contains("memory_bytes"));
        assert!(Limits {
            max_pids: MAX_PIDS + 1,
            ..d()
        }
        .validate()
        .is_err());
        assert!(Limits {
            max_output_bytes: MAX_OUTPUT_BYTES + 1,
            ..d()
        }
        .validate()
        .is_err());
        assert!(Limits {
            cpu_time: Duration::ZERO,
            ..d()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn zeros_take_defaults() {
        let zero = Limits {
            wall_time: Duration::ZERO,
            cpu_time: Duration::ZERO,
            memory_bytes: 0,
            max_pids: 0,
            max_output_bytes: 0,
            max_file_size_bytes: 0,
            max_open_files: 0,
            kill_on_output_limit: true,
        };
        let d = Limits::default();
        let r = zero.or_defaults(&d);
        assert_eq!(
            r,
            Limits {
                kill_on_output_limit: true,
                ..d
            }
        );
    }
}
