//! The lists packed for the tensor-core scan (`knn_tensor.cu`): the cells again in chunks of
//! 128 per list, list `l` in the chunks `cstart[l] .. cstart[l] + ccount[l]` ([`Slots`]), its
//! last chunk padded (a padding slot has bounds no threshold passes), in FP16 with their bound
//! terms ([`Packed`]); the inverted file and the pruned exact kNN stream them.

use crate::error::Result;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use crate::neighbors::scan::device::{
    refine, RefTable, QT, SRC as SCAN_SRC, THREADS as SCAN_THREADS,
};
use crate::neighbors::scan::tensor::{Frame, Plan, TensorBound, SRC};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const CHUNK: usize = 128;
/// Threads of a tensor block (`KT_THREADS`).
pub(crate) const THREADS: u32 = 256;
/// Slots per batch of pass 2 and the refinement (a multiple of [`CHUNK`]): the candidates
/// (`width` u32 each) and the refinement's scratch (12 bytes a candidate) of 2^20 slots at
/// width 96 take about 1.6 GB.
pub(crate) const BATCH_SLOTS: usize = 1 << 20;

/// The cells laid out for the tensor passes: list `l` in chunks `cstart[l] ..` (`ccount[l]`
/// of them), `chunk_list[c]` the list of chunk `c`, `cells[slot]` the cell in a slot (~0 for
/// padding), `positions[slot]` its position in the f32 scan's list-by-list layout.
#[derive(Debug, PartialEq)]
pub(crate) struct Slots {
    pub cstart: Vec<u32>,
    pub ccount: Vec<u32>,
    pub chunk_list: Vec<u32>,
    pub cells: Vec<u32>,
    pub positions: Vec<u32>,
    /// For [`Slots::contiguous`]: each slot's list (the f32 scan's probe row of its cell);
    /// empty where a chunk's list is its row.
    pub slot_lists: Vec<u32>,
}

impl Slots {
    /// From the f32 layout: list `l` at positions `starts[l] .. starts[l] + sizes[l]`,
    /// `perm[position]` its cells.
    pub(crate) fn new(perm: &[u32], starts: &[u64], sizes: &[u32]) -> Slots {
        let ccount: Vec<u32> = sizes
            .iter()
            .map(|&s| (s as usize).div_ceil(CHUNK) as u32)
            .collect();
        let mut cstart = Vec::with_capacity(sizes.len());
        let mut chunk_list = Vec::new();
        let mut chunks = 0u32;
        for (l, &c) in ccount.iter().enumerate() {
            cstart.push(chunks);
            chunk_list.extend(std::iter::repeat_n(l as u32, c as usize));
            chunks += c;
        }
        let slots = chunks as usize * CHUNK;
        let (mut cells, mut positions) = (vec![u32::MAX; slots], vec![u32::MAX; slots]);
        for (l, (&start, &size)) in starts.iter().zip(sizes).enumerate() {
            let s0 = cstart[l] as usize * CHUNK;
            for i in 0..size as usize {
                let p = start as usize + i;
                cells[s0 + i] = perm[p];
                positions[s0 + i] = p as u32;
            }
        }
        Slots {
            cstart,
            ccount,
            chunk_list,
            cells,
            positions,
            slot_lists: Vec::new(),
        }
    }

    /// The cells in the f32 layout's positions as they are (`perm`, list `l` at positions
    /// `starts[l] .. starts[l] + sizes[l]`, not padded to chunks), for passes whose tiles
    /// stream ranges of chunks rather than lists: chunk `c` is its own tile row
    /// (`chunk_list[c] = c`), slot = position, no list has chunks of its own (`cstart`,
    /// `ccount` empty), and the f32 scan groups its cells by list (`slot_lists`).
    pub(crate) fn contiguous(perm: &[u32], starts: &[u64], sizes: &[u32]) -> Slots {
        let chunks = perm.len().div_ceil(CHUNK);
        let mut cells = perm.to_vec();
        cells.resize(chunks * CHUNK, u32::MAX);
        let positions = (0..cells.len() as u32)
            .map(|p| {
                if (p as usize) < perm.len() {
                    p
                } else {
                    u32::MAX
                }
            })
            .collect();
        let mut slot_lists = vec![0u32; cells.len()];
        for (l, (&s, &z)) in starts.iter().zip(sizes).enumerate() {
            slot_lists[s as usize..s as usize + z as usize].fill(l as u32);
        }
        Slots {
            cstart: Vec::new(),
            ccount: Vec::new(),
            chunk_list: (0..chunks as u32).collect(),
            cells,
            positions,
            slot_lists,
        }
    }

    /// The f32 scan's probe row of the cell in `slot`: its list's, or its chunk's.
    fn row_of(&self, slot: u64) -> usize {
        match self.slot_lists.is_empty() {
            true => self.chunk_list[slot as usize / CHUNK] as usize,
            false => self.slot_lists[slot as usize] as usize,
        }
    }

    /// The blocks of the passes: (list, chunk) for every chunk of every list, in slot order.
    pub(crate) fn tiles(&self) -> Vec<u32> {
        (0u32..)
            .zip(&self.chunk_list)
            .flat_map(|(chunk, &l)| [l, chunk])
            .collect()
    }
}

/// The f32 scan's blocks for the listed `slots` (sorted; each a cell the tensor scan could not
/// certify), grouped by probe row ([`Slots::row_of`]), at most [`QT`] a block: `(tiles, qpos, crow)` for
/// `ivf_scan_listed`: tiles (list, first entry, end entry) over `qpos` (positions) and `crow`
/// (candidate rows, `slot - s0`).
pub(crate) fn listed_tiles(
    slots: &Slots,
    listed: &[u64],
    s0: u64,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let list_of = |slot: u64| slots.row_of(slot);
    let (mut tiles, mut qpos, mut crow) = (Vec::new(), Vec::new(), Vec::new());
    let mut current: Option<(usize, usize)> = None; // (list, first entry of the open tile)
    for &slot in listed {
        let l = list_of(slot);
        let e = qpos.len();
        match current {
            Some((cl, first)) if cl == l && e - first < QT => {}
            _ => {
                if let Some((cl, first)) = current {
                    tiles.extend([cl as u32, first as u32, e as u32]);
                }
                current = Some((l, e));
            }
        }
        qpos.push(slots.positions[slot as usize]);
        crow.push((slot - s0) as u32);
    }
    if let Some((cl, first)) = current {
        tiles.extend([cl as u32, first as u32, qpos.len() as u32]);
    }
    (tiles, qpos, crow)
}

/// What the f32 layout of the index holds, for the fallback scan.
pub(crate) struct F32Layout<'a> {
    pub xp: &'a DeviceVec<f32>,
    pub table: &'a RefTable,
    pub perm: &'a DeviceVec<u32>,
    pub starts: &'a DeviceVec<u64>,
    pub sizes: &'a DeviceVec<u32>,
}

/// The probe table: list `l` probes `probes[ptr[l] .. ptr[l + 1]]`, on the device (`ptr`,
/// `probes`) and on the host (`host_ptr`, `host_probes`).
pub(crate) struct DeviceProbes<'a> {
    pub ptr: &'a DeviceVec<u32>,
    pub probes: &'a DeviceVec<u32>,
    pub host_ptr: &'a [u32],
    pub host_probes: &'a [u32],
}

/// What the tiles of the tensor passes stream: tile row `r` (its list, or its chunk for
/// [`Slots::contiguous`]) the chunk ranges `ranges[ptr[r] .. ptr[r + 1]]`, range `g` the
/// chunks `cstart[g] .. cstart[g] + ccount[g]` (for the inverted file: the probed lists, each
/// list its own range).
pub(crate) struct Streams<'a> {
    pub ptr: &'a DeviceVec<u32>,
    pub ranges: &'a DeviceVec<u32>,
    pub cstart: &'a DeviceVec<u32>,
    pub ccount: &'a DeviceVec<u32>,
}

/// Part `rank` of `ranks` of the tiles, split by their work (each tile streams the chunks of
/// the lists its list probes) rather than by their count, so that parts take alike times.
pub(crate) fn balanced_share(
    slots: &Slots,
    probes: (&[u32], &[u32]),
    ranks: usize,
    rank: usize,
) -> std::ops::Range<usize> {
    let (ptr, table) = probes;
    let list_work: Vec<u64> = (0..slots.cstart.len())
        .map(|l| {
            let probed = &table[ptr[l] as usize..ptr[l + 1] as usize];
            probed
                .iter()
                .map(|&p| slots.ccount[p as usize] as u64)
                .sum::<u64>()
                + 1
        })
        .collect();
    let mut ends = Vec::with_capacity(slots.chunk_list.len() + 1);
    ends.push(0u64);
    for &l in &slots.chunk_list {
        ends.push(ends.last().unwrap() + list_work[l as usize]);
    }
    let total = *ends.last().unwrap();
    // The tiles whose work's midpoint lies in [rank, rank + 1) * total / ranks (in halves, to
    // stay in integers).
    let twice_mid: Vec<u64> = ends.windows(2).map(|w| w[0] + w[1]).collect();
    let bound = |r: usize| -> usize {
        let at = 2 * (total as u128 * r as u128 / ranks.max(1) as u128) as u64;
        twice_mid.partition_point(|&m| m < at)
    };
    bound(rank)..bound(rank + 1)
}

/// The cells packed for the tensor passes in the slots' order, with their bound terms: what
/// both passes read.
pub(crate) struct Packed {
    pub ids: DeviceVec<u32>,
    rb_lo: DeviceVec<f32>,
    rb_up: DeviceVec<f32>,
    /// `|q|` of each slot in the frame (centred, times `scale`), rounded up.
    pub nrm: DeviceVec<f32>,
    pub scale: f32,
    refs: DeviceVec<u32>,
    /// Every tile (list, chunk), in slot order.
    tiles: DeviceVec<u32>,
    n_slots: usize,
    bound: TensorBound,
}

impl Packed {
    pub(crate) fn new(
        ctx: &GpuContext,
        xd: &DeviceVec<f32>,
        (n, d): (usize, usize),
        slots: &Slots,
        ks: usize,
    ) -> Result<Packed> {
        let bound = TensorBound::for_dims(d);
        let n_slots = slots.cells.len();
        let ids = ctx.upload(&slots.cells)?;
        let frame = Frame::new(ctx, xd, n, d)?;
        let (rb_lo, rb_up, nrm) = frame.row_terms(ctx, xd, Some(&ids), n_slots, &bound)?;
        let refs = frame.pack(ctx, xd, Some(&ids), 0, n_slots, ks)?;
        Ok(Packed {
            ids,
            rb_lo,
            rb_up,
            nrm,
            scale: frame.scale(),
            refs,
            tiles: ctx.upload(&slots.tiles())?,
            n_slots,
            bound,
        })
    }

    /// The tiles from tile `t`, as a kernel argument.
    fn tiles_from(&self, t: usize) -> u64 {
        self.tiles.ptr() + (2 * t * std::mem::size_of::<u32>()) as u64
    }

    /// Pass 1 (`ivf_tensor_bound`) of the tiles `share` over what `streams` names: `tau` of
    /// their slots (the others' are left undefined).
    pub(crate) fn bound_pass(
        &self,
        ctx: &GpuContext,
        share: std::ops::Range<usize>,
        streams: &Streams<'_>,
        plan: Plan,
        k: usize,
    ) -> Result<DeviceVec<f32>> {
        let tau = ctx.alloc::<f32>(self.n_slots.max(1))?;
        if share.is_empty() {
            return Ok(tau);
        }
        let (ns64, ks32, k32, nbuf32) = (
            self.n_slots as u64,
            plan.ks as u32,
            k as u32,
            plan.nbuf as u32,
        );
        let tiles = self.tiles_from(share.start);
        let f = ctx.function_with_shared(SRC, "ivf_tensor_bound", plan.smem[0])?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.refs)
            .arg(&self.rb_up)
            .arg(&self.nrm)
            .arg(&ns64)
            .arg(&ks32)
            .arg(&self.ids)
            .arg(&tiles)
            .arg(streams.ptr)
            .arg(streams.ranges)
            .arg(streams.cstart)
            .arg(streams.ccount)
            .arg(&k32)
            .arg(&self.bound.ka)
            .arg(&self.bound.kc)
            .arg(&self.bound.kf)
            .arg(&self.bound.ke)
            .arg(&nbuf32)
            .arg(&tau);
        let cfg = LaunchConfig {
            grid_dim: (share.len() as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: plan.smem[0] as u32,
        };
        ctx.launch(l, cfg, "ivf_tensor_bound")?;
        Ok(tau)
    }

    /// Pass 2 (`ivf_tensor_collect`) of the tiles `share` over what `streams` names, with
    /// `tau` from [`Packed::bound_pass`], in batches of slots: the candidates, the f32 scan of
    /// the queries the bound could not certify (over the lists `probes` gives each tile row),
    /// the f64 refinement and the rows into `out` (cell order). Returns how many queries the
    /// f32 scan took.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn collect_pass(
        &self,
        ctx: &GpuContext,
        xd: &DeviceVec<f32>,
        (d, k): (usize, usize),
        slots: &Slots,
        f32_layout: &F32Layout<'_>,
        share: std::ops::Range<usize>,
        streams: &Streams<'_>,
        probes: &DeviceProbes<'_>,
        plan: Plan,
        tau: &DeviceVec<f32>,
        out: (&DeviceVec<u32>, &DeviceVec<f32>),
    ) -> Result<usize> {
        let (ns64, ks32, nbuf32, width) = (
            self.n_slots as u64,
            plan.ks as u32,
            plan.nbuf as u32,
            plan.width,
        );
        let width32 = width as u32;
        let per_batch = BATCH_SLOTS / CHUNK;
        let mut f32_queries = 0;
        for t0 in (0..share.len()).step_by(per_batch) {
            let t1 = (t0 + per_batch).min(share.len());
            let (s0, s1) = ((share.start + t0) * CHUNK, (share.start + t1) * CHUNK);
            let rows = s1 - s0;
            let cand = ctx.alloc::<u32>(rows * width)?;
            let counts = ctx.alloc::<u32>(rows)?;
            let uncertain = ctx.zeros::<u8>(rows)?;
            let n_uncertain = ctx.zeros::<u32>(1)?;
            let s064 = s0 as u64;
            let f = ctx.function_with_shared(SRC, "ivf_tensor_collect", plan.smem[1])?;
            let mut l = ctx.launcher(&f);
            let batch_tiles = self.tiles_from(share.start + t0);
            l.arg(&self.refs)
                .arg(&self.rb_lo)
                .arg(&self.nrm)
                .arg(&ns64)
                .arg(&ks32)
                .arg(&self.ids)
                .arg(&batch_tiles)
                .arg(streams.ptr)
                .arg(streams.ranges)
                .arg(streams.cstart)
                .arg(streams.ccount)
                .arg(&self.bound.ka)
                .arg(&nbuf32)
                .arg(tau)
                .arg(&s064)
                .arg(&width32)
                .arg(&cand)
                .arg(&counts)
                .arg(&uncertain)
                .arg(&n_uncertain);
            let cfg = LaunchConfig {
                grid_dim: ((t1 - t0) as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: plan.smem[1] as u32,
            };
            ctx.launch(l, cfg, "ivf_tensor_collect")?;
            if ctx.download(&n_uncertain)?[0] > 0 {
                let flags = ctx.download(&uncertain)?;
                let listed: Vec<u64> = (0..rows)
                    .filter(|&r| flags[r] != 0)
                    .map(|r| (s0 + r) as u64)
                    .collect();
                f32_queries += listed.len();
                scan_listed(ctx, slots, f32_layout, probes, &listed, s0, d, width, &cand)?;
            }
            // Their counts already say `width`: the f32 scan filled every slot.
            let (idx, dist) = refine(
                ctx,
                xd,
                &cand,
                Some(&counts),
                Some(&self.ids),
                s0..s1,
                d,
                width,
                k,
            )?;
            drop((cand, counts));
            let (count, k32) = (rows as u64, k as u32);
            let f = ctx.function(SCAN_SRC, "ivf_scatter")?;
            let mut l = ctx.launcher(&f);
            l.arg(&idx)
                .arg(&dist)
                .arg(&self.ids)
                .arg(&s064)
                .arg(&count)
                .arg(&k32)
                .arg(out.0)
                .arg(out.1);
            ctx.launch(l, grid_stride(rows * k), "ivf_scatter")?;
        }
        Ok(f32_queries)
    }
}

/// `ivf_scan_listed`: the f32 scan's `width` best candidates of the listed slots into their
/// rows of `cand`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_listed(
    ctx: &GpuContext,
    slots: &Slots,
    f: &F32Layout<'_>,
    probes: &DeviceProbes<'_>,
    listed: &[u64],
    s0: usize,
    d: usize,
    width: usize,
    cand: &DeviceVec<u32>,
) -> Result<()> {
    let (tiles, qpos, crow) = listed_tiles(slots, listed, s0 as u64);
    let n_tiles = tiles.len() / 3;
    let (tiles, qpos, crow) = (ctx.upload(&tiles)?, ctx.upload(&qpos)?, ctx.upload(&crow)?);
    let smem = f.table.shared_bytes(width);
    let func = ctx.function_with_shared(SCAN_SRC, "ivf_scan_listed", smem)?;
    let (d32, dpad32, ld64, w32) = (
        d as u32,
        f.table.dpad as u32,
        f.table.ld as u64,
        width as u32,
    );
    let mut l = ctx.launcher(&func);
    l.arg(f.xp)
        .arg(&f.table.xt)
        .arg(&f.table.norms)
        .arg(f.perm)
        .arg(f.starts)
        .arg(f.sizes)
        .arg(probes.ptr)
        .arg(probes.probes)
        .arg(&tiles)
        .arg(&qpos)
        .arg(&crow)
        .arg(&d32)
        .arg(&dpad32)
        .arg(&ld64)
        .arg(&w32)
        .arg(cand);
    let cfg = LaunchConfig {
        grid_dim: (n_tiles as u32, 1, 1),
        block_dim: (SCAN_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    ctx.launch(l, cfg, "ivf_scan_listed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (Vec<u32>, Vec<u64>, Vec<u32>) {
        // Three lists of 130, 0 and 5 cells at positions aligned to 4, as `Lists` lays them.
        let sizes = vec![130u32, 0, 5];
        let starts = vec![0u64, 132, 132];
        let mut perm = vec![u32::MAX; 140];
        for i in 0..130 {
            perm[i] = (i * 2) as u32;
        }
        for i in 0..5 {
            perm[132 + i] = (1000 + i) as u32;
        }
        (perm, starts, sizes)
    }

    #[test]
    fn slots_hold_every_cell_once_in_whole_chunks() {
        let (perm, starts, sizes) = layout();
        let s = Slots::new(&perm, &starts, &sizes);
        assert_eq!(s.ccount, vec![2, 0, 1]);
        assert_eq!(s.cstart, vec![0, 2, 2]);
        assert_eq!(s.cells.len(), 3 * CHUNK);
        let mut cells: Vec<u32> = s.cells.iter().copied().filter(|&c| c != u32::MAX).collect();
        cells.sort_unstable();
        let mut want: Vec<u32> = perm.iter().copied().filter(|&c| c != u32::MAX).collect();
        want.sort_unstable();
        assert_eq!(cells, want);
        for (slot, &c) in s.cells.iter().enumerate() {
            if c != u32::MAX {
                assert_eq!(perm[s.positions[slot] as usize], c, "slot {slot}");
            }
        }
        assert_eq!(s.cells[2 * CHUNK], 1000);
        assert_eq!(s.cells[130], u32::MAX);
        assert_eq!(s.chunk_list, vec![0, 0, 2]);
        assert_eq!(s.tiles(), vec![0, 0, 0, 1, 2, 2]);
    }

    #[test]
    fn shares_split_the_tiles_by_their_work() {
        let (perm, starts, sizes) = layout();
        let s = Slots::new(&perm, &starts, &sizes);
        // List 0 probes itself and list 2 (3 chunks a tile), list 2 only itself (1 chunk).
        let (ptr, probes) = (vec![0u32, 2, 2, 3], vec![0u32, 2, 2]);
        let whole: Vec<_> = (0..1)
            .map(|r| balanced_share(&s, (&ptr, &probes), 1, r))
            .collect();
        assert_eq!(whole, vec![0..3]);
        for ranks in 1..5 {
            let parts: Vec<_> = (0..ranks)
                .map(|r| balanced_share(&s, (&ptr, &probes), ranks, r))
                .collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[ranks - 1].end, 3);
            assert!(
                parts.windows(2).all(|w| w[0].end == w[1].start),
                "{parts:?}"
            );
        }
        // Work 4, 4, 2 (each plus one): two parts take the first tile and the other two.
        assert_eq!(balanced_share(&s, (&ptr, &probes), 2, 0), 0..1);
        assert_eq!(balanced_share(&s, (&ptr, &probes), 2, 1), 1..3);
    }

    #[test]
    fn listed_cells_are_grouped_by_list_a_block_at_most() {
        let (perm, starts, sizes) = layout();
        let s = Slots::new(&perm, &starts, &sizes);
        // 70 slots of list 0 (more than one block), then two of list 2; the batch from slot 0.
        let mut listed: Vec<u64> = (0..70).collect();
        listed.extend([256, 259]);
        let (tiles, qpos, crow) = listed_tiles(&s, &listed, 0);
        assert_eq!(tiles, vec![0, 0, 64, 0, 64, 70, 2, 70, 72]);
        assert_eq!(qpos[..3], [0, 1, 2]);
        assert_eq!(qpos[70..], [132, 135]);
        assert_eq!(crow[70..], [256, 259]);
        // A batch from slot 256: rows from there.
        let (tiles, _, crow) = listed_tiles(&s, &[256, 259], 256);
        assert_eq!(tiles, vec![2, 0, 2]);
        assert_eq!(crow, vec![0, 3]);
    }
}
