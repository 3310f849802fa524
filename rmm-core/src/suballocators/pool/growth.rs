//! How much a pool asks its upstream for when it grows (RMM's rule): at least the request, about
//! the current pool size otherwise (so the pool roughly doubles), never past the maximum; when the
//! upstream refuses, half of the last attempt, down to the request itself.

use crate::resource::aligned_size;

/// Why the pool cannot grow at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaximumReached {
    /// Bytes the pool may still grow by.
    pub(crate) headroom: usize,
}

/// The first size to ask the upstream for, for a request of `request` (aligned) bytes.
pub(crate) fn first_attempt(
    request: usize,
    pool_size: usize,
    maximum: Option<usize>,
) -> Result<usize, MaximumReached> {
    let wanted = request.max(pool_size);
    match maximum {
        None => Ok(wanted),
        Some(max) => {
            let headroom = max.saturating_sub(pool_size);
            if request > headroom {
                Err(MaximumReached { headroom })
            } else {
                Ok(wanted.min(headroom))
            }
        }
    }
}

/// The size to try after the upstream refused `attempt`; `None` once the request itself failed.
pub(crate) fn next_attempt(attempt: usize, request: usize) -> Option<usize> {
    if attempt <= request {
        None
    } else {
        Some(aligned_size(attempt / 2).max(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    #[test]
    fn grows_by_the_pool_size_or_the_request() {
        assert_eq!(first_attempt(M, 64 * M, None), Ok(64 * M));
        assert_eq!(first_attempt(100 * M, 64 * M, None), Ok(100 * M));
        assert_eq!(first_attempt(M, 0, None), Ok(M));
    }

    #[test]
    fn never_past_the_maximum() {
        assert_eq!(first_attempt(M, 64 * M, Some(80 * M)), Ok(16 * M));
        assert_eq!(
            first_attempt(17 * M, 64 * M, Some(80 * M)),
            Err(MaximumReached { headroom: 16 * M })
        );
        assert_eq!(first_attempt(16 * M, 64 * M, Some(80 * M)), Ok(16 * M));
    }

    #[test]
    fn halves_down_to_the_request() {
        let mut seen = vec![64 * M];
        while let Some(next) = next_attempt(*seen.last().unwrap(), 5 * M) {
            seen.push(next);
        }
        assert_eq!(seen, vec![64 * M, 32 * M, 16 * M, 8 * M, 5 * M]);
    }
}
