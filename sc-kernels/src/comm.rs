//! Steps over cells split across ranks (GPUs, processes or test threads): each rank holds a
//! block of rows, and the per-gene statistics (sums, sums of squares, the PCA Gram matrix) are
//! combined through a [`Communicator`] where a one-rank run would have summed them itself.
//!
//! [`SingleRank`] is the one-rank communicator every plain call uses (every collective is a
//! no-op); [`LocalGroup`] joins threads of one process through host memory, so the split and
//! merge logic is tested without a GPU; the NCCL communicator is
//! [`crate::gpu::NcclCommunicator`].

use crate::error::{KernelError, Result};
use std::sync::{Arc, Condvar, Mutex};

/// The collectives the steps need. Every rank of a group calls the same collectives in the
/// same order with the same lengths (where a length is required to match).
pub trait Communicator: Send + Sync {
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;
    /// How many ranks the group has.
    fn size(&self) -> usize;
    /// Element-wise sum over the ranks, in place (every rank passes the same length).
    fn all_reduce_sum(&self, values: &mut [f64]) -> Result<()>;
    /// Overwrites `values` with `root`'s (every rank passes the same length).
    fn broadcast(&self, values: &mut [f64], root: usize) -> Result<()>;
    /// Every rank's bytes, in rank order; the lengths may differ between ranks.
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Called by a rank that stops on an error: the other ranks' pending and later collectives
    /// fail instead of waiting for it forever.
    fn abort(&self, why: &str);
    /// [`Communicator::all_reduce_sum`] of `len` f64 at device address `ptr`, in place and in
    /// the order of `stream` (no host round trip); `None` where the group has no device path
    /// (the caller sums through the host).
    ///
    /// # Safety
    /// `ptr` must hold `len` f64 on this rank's GPU, and stay allocated until `stream` has run
    /// the collective.
    unsafe fn all_reduce_sum_device_f64(
        &self,
        _ptr: u64,
        _len: usize,
        _stream: &rmm_cuda::Stream,
    ) -> Option<Result<()>> {
        None
    }
}

/// The communicator of a run that is not split: one rank, every collective leaves its input
/// as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleRank;

impl Communicator for SingleRank {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, _: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: &mut [f64], root: usize) -> Result<()> {
        check_root(root, 1)
    }
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![local.to_vec()])
    }
    fn abort(&self, _: &str) {}
}

/// What the in-process group's collectives fail with once a rank has aborted it.
const ABORTED: &str = "the group was aborted";

/// The block of `n` rows that rank `rank` of `size` holds: contiguous, in rank order, sizes
/// differing by at most one. Every split of cells across ranks uses it, so a rank's rows are the
/// same in every step.
pub fn rank_rows(n: usize, size: usize, rank: usize) -> std::ops::Range<usize> {
    rank * n / size..(rank + 1) * n / size
}

/// The ranks' results (in rank order), or the error to report: the first that is not a rank
/// released by another rank's abort, else the first.
pub fn all_ranks_ok<T, E: std::fmt::Display>(
    results: Vec<std::result::Result<T, E>>,
) -> std::result::Result<Vec<T>, E> {
    let (oks, mut errors): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    if errors.is_empty() {
        return Ok(oks.into_iter().filter_map(|r| r.ok()).collect());
    }
    let i = errors
        .iter()
        .position(|e| !matches!(e, Err(e) if e.to_string().contains(ABORTED)))
        .unwrap_or(0);
    Err(errors.swap_remove(i).err().expect("an error"))
}

fn check_root(root: usize, size: usize) -> Result<()> {
    if root >= size {
        return Err(KernelError::Comm(format!(
            "broadcast root {root} outside the group of {size} ranks"
        )));
    }
    Ok(())
}

/// The sum over ranks of a count.
pub fn sum_count(comm: &dyn Communicator, n: usize) -> Result<usize> {
    let mut v = [n as f64];
    comm.all_reduce_sum(&mut v)?;
    Ok(v[0] as usize)
}

/// Element-wise sum over ranks of integer counts (exact below 2^53, far above any count of
/// cells or stored values).
pub fn all_reduce_counts(comm: &dyn Communicator, counts: &mut [i64]) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let mut v: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    comm.all_reduce_sum(&mut v)?;
    for (c, s) in counts.iter_mut().zip(v) {
        *c = s as i64;
    }
    Ok(())
}

/// Every rank's values, concatenated in rank order (the rows of all ranks, in order).
pub fn all_gather<T: bytemuck::Pod>(comm: &dyn Communicator, local: &[T]) -> Result<Vec<T>> {
    if comm.size() == 1 {
        return Ok(local.to_vec());
    }
    let parts = comm.all_gather_bytes(bytemuck::cast_slice(local))?;
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() / 4);
    for p in parts {
        // The bytes of a Vec<u8> need not be aligned for T: copy element by element.
        out.extend(
            p.chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned::<T>),
        );
    }
    Ok(out)
}

/// A group of ranks that are threads of one process, exchanging through host memory: the
/// simulated communicator of tests (and of a CPU run split across threads).
pub struct LocalGroup;

impl LocalGroup {
    /// `size` communicators, one per rank; hand each to its own thread.
    pub fn new(size: usize) -> Vec<LocalComm> {
        assert!(size > 0, "a group has at least one rank");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                slots: vec![Vec::new(); size],
                arrived: 0,
                generation: 0,
                aborted: None,
            }),
            turn: Condvar::new(),
        });
        (0..size)
            .map(|rank| LocalComm {
                rank,
                size,
                shared: shared.clone(),
            })
            .collect()
    }
}

struct State {
    slots: Vec<Vec<u8>>,
    /// Ranks waiting at the current barrier.
    arrived: usize,
    /// Barriers passed so far.
    generation: u64,
    /// Why the group was aborted; every waiting and later collective fails with it.
    aborted: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    turn: Condvar,
}

/// One rank of a [`LocalGroup`].
pub struct LocalComm {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
}

impl LocalComm {
    /// Waits until every rank has arrived (or the group is aborted).
    fn barrier<'a>(
        &self,
        mut st: std::sync::MutexGuard<'a, State>,
    ) -> Result<std::sync::MutexGuard<'a, State>> {
        let aborted = |st: &State| {
            st.aborted
                .as_ref()
                .map(|why| KernelError::Comm(format!("{ABORTED}: {why}")))
        };
        if let Some(e) = aborted(&st) {
            return Err(e);
        }
        st.arrived += 1;
        if st.arrived == self.size {
            st.arrived = 0;
            st.generation += 1;
            self.shared.turn.notify_all();
            return Ok(st);
        }
        let generation = st.generation;
        while st.generation == generation && st.aborted.is_none() {
            st = self.shared.turn.wait(st).expect("a rank panicked");
        }
        match aborted(&st) {
            Some(e) if st.generation == generation => Err(e),
            _ => Ok(st),
        }
    }

    /// Deposits `local`, waits for every rank, reads every slot, and waits again before the
    /// slots can be reused by the next collective.
    fn exchange(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut st = self.shared.state.lock().expect("a rank panicked");
        st.slots[self.rank] = local.to_vec();
        let st = self.barrier(st)?;
        let all = st.slots.clone();
        drop(self.barrier(st)?);
        Ok(all)
    }

    fn check_lengths(&self, what: &str, parts: &[Vec<u8>]) -> Result<()> {
        match parts.iter().find(|p| p.len() != parts[self.rank].len()) {
            Some(p) => Err(KernelError::Comm(format!(
                "{what}: ranks passed different lengths ({} and {} bytes)",
                parts[self.rank].len(),
                p.len()
            ))),
            None => Ok(()),
        }
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&self, values: &mut [f64]) -> Result<()> {
        let parts = self.exchange(bytemuck::cast_slice(values))?;
        self.check_lengths("all_reduce_sum", &parts)?;
        values.iter_mut().for_each(|v| *v = 0.0);
        // Every rank adds in rank order, so every rank gets the same bits.
        for p in &parts {
            for (v, x) in values.iter_mut().zip(p.chunks_exact(8)) {
                *v += bytemuck::pod_read_unaligned::<f64>(x);
            }
        }
        Ok(())
    }

    fn broadcast(&self, values: &mut [f64], root: usize) -> Result<()> {
        check_root(root, self.size)?;
        let parts = self.exchange(bytemuck::cast_slice(values))?;
        self.check_lengths("broadcast", &parts)?;
        for (v, x) in values.iter_mut().zip(parts[root].chunks_exact(8)) {
            *v = bytemuck::pod_read_unaligned::<f64>(x);
        }
        Ok(())
    }

    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.exchange(local)
    }

    fn abort(&self, why: &str) {
        let mut st = self.shared.state.lock().expect("a rank panicked");
        st.aborted.get_or_insert_with(|| why.to_string());
        self.shared.turn.notify_all();
    }
}

/// Runs `f` on each rank of a new [`LocalGroup`] of `size` threads; returns the results in
/// rank order (a rank's panic is re-raised here).
pub fn run_local_group<R: Send>(size: usize, f: impl Fn(&dyn Communicator) -> R + Sync) -> Vec<R> {
    let comms = LocalGroup::new(size);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| s.spawn(|| f(c as &dyn Communicator)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_of_a_local_group() {
        for size in 1..=4 {
            let out = run_local_group(size, |c| {
                let r = c.rank() as f64;
                let mut v = vec![r, 2.0 * r, 1.0];
                c.all_reduce_sum(&mut v).unwrap();
                let mut b = vec![r + 10.0; 2];
                c.broadcast(&mut b, size - 1).unwrap();
                let g = all_gather(c, &vec![c.rank() as u32; c.rank()]).unwrap();
                let n = sum_count(c, c.rank() + 1).unwrap();
                let mut counts = vec![1i64, c.rank() as i64];
                all_reduce_counts(c, &mut counts).unwrap();
                (v, b, g, n, counts)
            });
            let total: f64 = (0..size).map(|r| r as f64).sum();
            for (v, b, g, n, counts) in out {
                assert_eq!(v, vec![total, 2.0 * total, size as f64]);
                assert_eq!(b, vec![(size - 1) as f64 + 10.0; 2]);
                let expect: Vec<u32> = (0..size as u32)
                    .flat_map(|r| std::iter::repeat_n(r, r as usize))
                    .collect();
                assert_eq!(g, expect);
                assert_eq!(n, size * (size + 1) / 2);
                assert_eq!(counts, vec![size as i64, total as i64]);
            }
        }
    }

    #[test]
    fn rank_rows_cover_the_rows_once_in_order() {
        for n in [0, 1, 7, 100] {
            for size in 1..=5 {
                let blocks: Vec<_> = (0..size).map(|r| rank_rows(n, size, r)).collect();
                assert_eq!(blocks[0].start, 0);
                assert_eq!(blocks[size - 1].end, n);
                assert!(blocks.windows(2).all(|w| w[0].end == w[1].start));
                let lens: Vec<_> = blocks.iter().map(|b| b.len()).collect();
                assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn mismatched_lengths_and_roots_are_refused() {
        let out = run_local_group(2, |c| {
            let mut v = vec![0.0; 1 + c.rank()];
            let a = c.all_reduce_sum(&mut v).unwrap_err().to_string();
            let b = c.broadcast(&mut [0.0], 5).unwrap_err().to_string();
            (a, b)
        });
        for (a, b) in out {
            assert!(a.contains("different lengths"), "{a}");
            assert!(b.contains("root 5"), "{b}");
        }
        assert!(SingleRank.broadcast(&mut [1.0], 1).is_err());
    }

    #[test]
    fn an_aborting_rank_releases_the_others() {
        let out = run_local_group(3, |c| {
            if c.rank() == 1 {
                c.abort("rank 1 ran out of memory");
                return String::new();
            }
            c.all_reduce_sum(&mut [1.0]).unwrap_err().to_string()
        });
        assert!(out[0].contains("rank 1 ran out of memory"), "{}", out[0]);
        assert!(out[2].contains("aborted"), "{}", out[2]);
        // The rank that failed, not the ranks its abort released, is the one reported.
        let mut results: Vec<std::result::Result<u8, String>> =
            out.into_iter().filter(|e| !e.is_empty()).map(Err).collect();
        results.push(Err("rank 1: out of memory".into()));
        results.push(Ok(3));
        assert_eq!(all_ranks_ok(results).unwrap_err(), "rank 1: out of memory");
        assert_eq!(
            all_ranks_ok::<u8, String>(vec![Ok(1), Ok(2)]),
            Ok(vec![1, 2])
        );
        assert_eq!(
            all_ranks_ok::<u8, String>(vec![Err("x".into())]),
            Err("x".into())
        );
    }
}
