use fastcdc::v2020;
use serde::{Deserialize, Serialize};

/// How a stream is cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkerParams {
    /// FastCDC with the given minimum, average (target) and maximum chunk size.
    ContentDefined { min: u32, avg: u32, max: u32 },
    /// Every chunk is `size` bytes, except a shorter last one.
    Fixed { size: u32 },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamsError {
    #[error("chunk size {name} = {value} is out of range {lo}..={hi}")]
    OutOfRange {
        name: &'static str,
        value: u32,
        lo: usize,
        hi: usize,
    },
    #[error("chunk size {name} = {value} must be even")]
    Odd { name: &'static str, value: u32 },
    #[error("chunk sizes must satisfy min <= avg <= max (got {min}, {avg}, {max})")]
    Order { min: u32, avg: u32, max: u32 },
}

impl Default for ChunkerParams {
    /// 64 KiB average: large enough that per-chunk metadata (about 40 bytes in
    /// a recipe, 4 in the compact index) stays under 0.1% of the data, small
    /// enough that a small edit re-stores little.
    fn default() -> Self {
        ChunkerParams::ContentDefined {
            min: 16 * 1024,
            avg: 64 * 1024,
            max: 256 * 1024,
        }
    }
}

impl ChunkerParams {
    /// The largest chunk these parameters can produce.
    pub fn max_chunk(&self) -> usize {
        match *self {
            ChunkerParams::ContentDefined { max, .. } => max as usize,
            ChunkerParams::Fixed { size } => size as usize,
        }
    }

    /// Checks the sizes against what the chunker supports.
    pub fn validate(&self) -> Result<(), ParamsError> {
        match *self {
            ChunkerParams::ContentDefined { min, avg, max } => {
                check("min", min, v2020::MINIMUM_MIN, v2020::MINIMUM_MAX)?;
                check("avg", avg, v2020::AVERAGE_MIN, v2020::AVERAGE_MAX)?;
                check("max", max, v2020::MAXIMUM_MIN, v2020::MAXIMUM_MAX)?;
                if !(min <= avg && avg <= max) {
                    return Err(ParamsError::Order { min, avg, max });
                }
                Ok(())
            }
            ChunkerParams::Fixed { size } => check("size", size, 512, v2020::MAXIMUM_MAX),
        }
    }
}

fn check(name: &'static str, value: u32, lo: usize, hi: usize) -> Result<(), ParamsError> {
    if (value as usize) < lo || (value as usize) > hi {
        return Err(ParamsError::OutOfRange {
            name,
            value,
            lo,
            hi,
        });
    }
    if !value.is_multiple_of(2) {
        return Err(ParamsError::Odd { name, value });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        ChunkerParams::default().validate().unwrap();
    }

    #[test]
    fn rejects_bad_sizes() {
        let p = ChunkerParams::ContentDefined {
            min: 8192,
            avg: 4096,
            max: 65536,
        };
        assert!(matches!(p.validate(), Err(ParamsError::Order { .. })));
        let p = ChunkerParams::ContentDefined {
            min: 10,
            avg: 4096,
            max: 65536,
        };
        assert!(matches!(
            p.validate(),
            Err(ParamsError::OutOfRange { name: "min", .. })
        ));
        assert!(ChunkerParams::Fixed { size: 4097 }.validate().is_err());
    }
}
