//! Results written into a caller's buffer on a sparse layout: a normalization or an
//! elementwise op keeps its input's stored entries, so its values fit one slot per
//! stored entry, in the input's entry order. A layout's map kernels take an optional
//! [`OutSlots`] (dtype-erased: no generic parameter, so no kernel is instantiated twice)
//! and either return a fresh result or write there ([`Written`]); [`EntriesInto`] runs
//! any op of the registry that way by name. The dense layout's counterpart, which also
//! copies a reduction's small result in, is its `WriteInto`.

use crate::dims::Dims;
use crate::element::{ByDType, Element, SliceMutOf};
use crate::error::{MaskedError, Result};
use crate::fold::Fold;
use crate::lane::{LaneMap, LaneStat};
use crate::layout::MaskedReduce;
use crate::mask::BitMask;
use std::cell::RefCell;

/// A caller's output buffer of any dtype, lent to the kernels that write into it.
pub type OutSlots<'r, 'o> = &'r RefCell<ByDType<SliceMutOf<'o>>>;

/// Runs `f` on `out` as exactly `n` slots of `O`.
///
/// # Errors
/// [`MaskedError::InvalidArgument`] for a buffer of another dtype,
/// [`MaskedError::InvalidData`] for one of another length.
pub fn with_slots<O: Element, R>(
    out: OutSlots<'_, '_>, n: usize, f: impl FnOnce(&mut [O]) -> R,
) -> Result<R> {
    let mut b = out.borrow_mut();
    let dtype = b.dtype();
    let Some(slice) = O::unerase_mut(&mut b) else {
        return Err(MaskedError::InvalidArgument {
            name: "out",
            value: format!("{dtype} values"),
            reason: "the output buffer has the result's dtype",
        });
    };
    if slice.len() != n {
        return Err(MaskedError::InvalidData(format!(
            "an output buffer of {} values for a result of {n}",
            slice.len()
        )));
    }
    Ok(f(slice))
}

/// What a sparse layout's map kernel gave: a fresh result, or its values written into
/// the caller's [`OutSlots`], one per stored entry, with the validity of each slot
/// (`None`: all valid; masked-out slots hold the op's values for masked-out elements,
/// as a dense result's do).
#[derive(Debug)]
pub enum Written<M> {
    /// A result of its own.
    Fresh(M),
    /// Written into the caller's slots; their validity bits.
    Slots(Option<Vec<u64>>),
}

impl<M> Written<M> {
    /// The fresh result (a kernel called without slots gives one).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] where the kernel wrote into slots instead.
    pub fn fresh(self) -> Result<M> {
        match self {
            Written::Fresh(m) => Ok(m),
            Written::Slots(_) => Err(MaskedError::InvalidData(
                "a map kernel wrote into slots where a fresh result was asked".into(),
            )),
        }
    }

    /// The slots' validity bits (a kernel called with slots gives them).
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] where the kernel returned a fresh result instead.
    pub fn slots(self) -> Result<Option<Vec<u64>>> {
        match self {
            Written::Slots(w) => Ok(w),
            Written::Fresh(_) => Err(MaskedError::InvalidData(
                "a map kernel returned a fresh result where slots were given".into(),
            )),
        }
    }
}

/// A sparse layout's maps written into a caller's buffer of one slot per stored entry:
/// what [`EntriesInto`] needs of a layout's lanes.
pub trait MapInto<T: Element> {
    /// The number of slots: the stored entries.
    fn slots(&self) -> usize;

    /// [`MaskedReduce::map_lanes`] into `out`; returns the slots' validity bits.
    ///
    /// # Errors
    /// As `map_lanes`, and [`MaskedError::Unsupported`] where the result would store
    /// more than the stored entries (no mask: every position valid).
    fn map_lanes_into<M: LaneMap<T>>(
        &self, map: &M, dim: isize, out: OutSlots<'_, '_>,
    ) -> Result<Option<Vec<u64>>>;

    /// [`MaskedReduce::map_elements`] into `out`; returns the slots' validity bits.
    ///
    /// # Errors
    /// As `map_elements`.
    fn map_elements_into<M: LaneMap<T>>(
        &self, map: &M, zero_preserving: bool, out: OutSlots<'_, '_>,
    ) -> Result<Option<Vec<u64>>>;
}

/// Sparse lanes whose op results go into `out`, one slot per stored entry: run an op on
/// it by name (`registry::apply_to` with the [`SlotMask`] sink) or by method. Its results
/// are the slots' validity ([`BitMask`] of shape `[slots]`). Normalizations and
/// elementwise ops only: a reduction's result has positions of its own.
#[derive(Clone)]
pub struct EntriesInto<'r, 'o, L> {
    lanes: L,
    out: OutSlots<'r, 'o>,
}

impl<'r, 'o, L> EntriesInto<'r, 'o, L> {
    /// `lanes`' map results written into `out`.
    pub fn new(lanes: L, out: OutSlots<'r, 'o>) -> Self {
        EntriesInto { lanes, out }
    }

    fn mask<T: Element>(&self, words: Option<Vec<u64>>) -> Result<BitMask>
    where
        L: MapInto<T>,
    {
        let n = [self.lanes.slots()];
        match words {
            Some(w) => BitMask::from_words(&n, w),
            None => BitMask::filled(&n[..], true),
        }
    }
}

fn reduction(op: &'static str) -> MaskedError {
    MaskedError::Unsupported {
        op,
        context: "into a caller's buffer on sparse input (a reduction's result has \
                  positions of its own: use apply)"
            .into(),
    }
}

impl<'r, 'o, T: Element, L: MapInto<T>> MaskedReduce<T> for EntriesInto<'r, 'o, L> {
    crate::reduce_types!(<O> BitMask, BitMask, <'b> EntriesInto<'r, 'o, L>);

    fn without_nans(&self) -> Result<Self> {
        Err(reduction("a nan-family op"))
    }

    fn fold_lanes<F: Fold<T>>(&self, op: &F, _: &Dims, _: bool) -> Result<BitMask> {
        Err(reduction(op.name()))
    }

    fn stat_lanes<S: LaneStat<T>>(&self, stat: &S, _: &Dims, _: bool) -> Result<BitMask> {
        Err(reduction(stat.name()))
    }

    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<BitMask> {
        let w = self.lanes.map_lanes_into(map, dim, self.out)?;
        self.mask(w)
    }

    fn map_elements<M: LaneMap<T>>(&self, map: &M, zero_preserving: bool) -> Result<BitMask> {
        let w = self
            .lanes
            .map_elements_into(map, zero_preserving, self.out)?;
        self.mask(w)
    }
}

/// The `Sink` of an op run by name on an [`EntriesInto`]: the slots' validity (the
/// values are in the buffer).
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotMask;

impl<'r, 'o, T: Element, L: MapInto<T>> crate::registry::Sink<T, EntriesInto<'r, 'o, L>>
    for SlotMask
{
    type Out = BitMask;
    fn reduced<O: Element>(&self, r: BitMask) -> BitMask {
        r
    }
    fn mapped<O: Element>(&self, m: BitMask) -> BitMask {
        m
    }
}
