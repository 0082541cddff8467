//! `.npy` reading with the dtype taken from the file, and atomic writing.

use crate::error::IoError;
use masked_core::{BitMask, DynVec};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadNpyError, ReadNpyExt, ReadableElement, WritableElement, WriteNpyExt};
use std::borrow::Cow;
use std::path::Path;

/// A dense array read from a file, with its dtype.
pub struct DynArray {
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub values: DynVec,
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|e| IoError::file(path, e.to_string()))
}

/// The magic string of a `.npy` file.
const MAGIC: &[u8] = b"\x93NUMPY";

/// The header length a `.npy` prefix declares and where the header starts (`None` when
/// the prefix is not a `.npy` magic and version the reader knows).
fn header_len(bytes: &[u8]) -> Option<(u64, usize)> {
    match (bytes.get(..6), bytes.get(6), bytes.get(8..)) {
        (Some(MAGIC), Some(1), Some([a, b, ..])) => {
            Some((u64::from(u16::from_le_bytes([*a, *b])), 10))
        }
        (Some(MAGIC), Some(2 | 3), Some([a, b, c, d, ..])) => {
            Some((u64::from(u32::from_le_bytes([*a, *b, *c, *d])), 12))
        }
        _ => None,
    }
}

/// The bytes with a modern `.npy` header: numpy wrote the shapes of Python 2 files as
/// `(2L, 3L)`, and still reads them, while ndarray-npy's parser refuses the `L`. Such a
/// header is rewritten in a copy: each `L` after a digit inside the shape's parentheses
/// dropped and the header padded with a space instead, so its length and the data's
/// offset do not change. Any other input is returned as it is, without a copy.
fn modern_header(bytes: &[u8]) -> Cow<'_, [u8]> {
    let Some((len, start)) = header_len(bytes) else {
        return Cow::Borrowed(bytes);
    };
    let Some(h) = bytes.get(start..start.saturating_add(len as usize)) else {
        return Cow::Borrowed(bytes);
    };
    let (Some(open), Some(close)) = (
        h.iter().position(|&b| b == b'('),
        h.iter().position(|&b| b == b')'),
    ) else {
        return Cow::Borrowed(bytes);
    };
    let legacy = |i: usize| {
        i > open && i < close && matches!(h[i], b'L' | b'l') && h[i - 1].is_ascii_digit()
    };
    let dropped = (0..h.len()).filter(|&i| legacy(i)).count();
    if dropped == 0 || h.last() != Some(&b'\n') {
        return Cow::Borrowed(bytes);
    }
    let mut header: Vec<u8> = (0..h.len() - 1)
        .filter(|&i| !legacy(i))
        .map(|i| h[i])
        .collect();
    header.extend(std::iter::repeat_n(b' ', dropped));
    header.push(b'\n');
    let mut out = bytes.to_vec();
    out[start..start + header.len()].copy_from_slice(&header);
    Cow::Owned(out)
}

/// The bytes an item of a `.npy` type descriptor takes, for the descriptors the readers
/// accept (ndarray-npy's spellings); `None` for any other.
fn item_size(descr: &str) -> Option<usize> {
    Some(match descr {
        "|b1" | "|u1" | "u1" | "B" | "|i1" | "i1" | "b" => 1,
        "<f2" | ">f2" | "<u2" | ">u2" => 2,
        "<f4" | ">f4" | "<i4" | ">i4" => 4,
        "<f8" | ">f8" | "<i8" | ">i8" => 8,
        _ => return None,
    })
}

/// What a checked `.npy` header declares.
pub struct Declared {
    /// The type descriptor, as written (`<f4`, `|b1`, ...).
    pub descr: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The bytes of one item.
    pub item: usize,
    /// The bytes of data the header promises.
    pub bytes: u128,
}

/// Parses a `.npy` header with the reader's own parser (ndarray-npy's), after checking
/// that the header's length fits in the bytes present: the parser allocates that length
/// before reading. An unknown type descriptor is an error here, before the data reader
/// would allocate for it.
fn declared(path: &Path, bytes: &[u8]) -> Result<(Declared, usize), IoError> {
    use ndarray_npy::npy::header::Header;
    let bad = |what: String| IoError::file(path, what);
    if let Some((len, start)) = header_len(bytes) {
        let have = bytes.len().saturating_sub(start) as u64;
        if len > have {
            return Err(bad(format!(
                "truncated .npy header: it declares {len} bytes, the file holds {have} after \
                 the magic"
            )));
        }
    }
    // a .npy header is one flat dict: `{'descr': '<f4', 'fortran_order': False,
    // 'shape': (3, 4), }`. The parser (pest) backtracks exponentially on nested
    // brackets (a 118-byte header of `{{{{` took over 10 s): refuse any nesting first
    if let Some((len, start)) = header_len(bytes) {
        let text = &bytes[start..start + len as usize];
        let count = |c: u8| text.iter().filter(|&&b| b == c).count();
        if count(b'{') > 1 || count(b'(') > 1 || count(b'[') > 0 {
            return Err(bad(
                "malformed .npy header: nested brackets (a header is one flat dict)".into(),
            ));
        }
    }
    let mut rest = bytes;
    let h =
        Header::from_reader(&mut rest).map_err(|e| bad(format!("malformed .npy header: {e}")))?;
    // a Python literal: a string descriptor prints as '<f4' (a structured dtype as a
    // list, which no descriptor below matches)
    let text = h.type_descriptor.to_string();
    let descr = text
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .unwrap_or(&text)
        .to_string();
    let item = item_size(&descr).ok_or_else(|| {
        bad(format!(
            "unsupported dtype '{descr}': expected float16, float32, float64, int32, int64, \
             bool, uint8 or int8"
        ))
    })?;
    // ndarray (as numpy) refuses a shape whose non-zero sizes overflow even when a 0
    // makes it empty, and ndarray-npy unwraps that refusal: refuse it here first
    let fits = h
        .shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .and_then(|n| n.checked_mul(item))
        .is_some_and(|b| b <= isize::MAX as usize);
    if !fits {
        return Err(bad(format!(
            "the .npy shape {:?} of {item}-byte values overflows",
            h.shape
        )));
    }
    let count = h
        .shape
        .iter()
        .fold(1u128, |n, &d| n.saturating_mul(d as u128));
    let data = bytes.len() - rest.len();
    Ok((
        Declared {
            descr,
            shape: h.shape,
            item,
            bytes: count.saturating_mul(item as u128),
        },
        data,
    ))
}

/// Reads one `.npy` stream (a member of an `.npz` archive, compressed or not) without
/// trusting its sizes: the header first, its declared data size checked against the
/// memory ceiling, then at most that many bytes (and one more, to see extra data), the
/// buffer growing with the bytes that actually arrive.
pub fn read_stream(
    path: &Path, what: &str, r: &mut impl std::io::Read,
) -> Result<Vec<u8>, IoError> {
    use std::io::Read;
    let io = |e: std::io::Error| IoError::file(path, format!("array '{what}': {e}"));
    let mut head = Vec::new();
    r.by_ref().take(12).read_to_end(&mut head).map_err(io)?;
    let len = match (head.get(6), head.get(8..12)) {
        (Some(1), Some(b)) => u64::from(u16::from_le_bytes([b[0], b[1]])).saturating_sub(2),
        (Some(2 | 3), Some(b)) => u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => 0,
    };
    const MAX_HEADER: u64 = 1 << 20;
    if len > MAX_HEADER {
        return Err(IoError::file(
            path,
            format!("array '{what}': a .npy header of {len} bytes (at most 1 MiB is read)"),
        ));
    }
    r.by_ref().take(len).read_to_end(&mut head).map_err(io)?;
    if let Cow::Owned(h) = modern_header(&head) {
        head = h;
    }
    let (d, _) = declared(path, &head).map_err(|e| match e {
        IoError::File { what: w, .. } => IoError::file(path, format!("array '{what}': {w}")),
        other => other,
    })?;
    crate::limits::check(
        format!("{}: array '{what}' of shape {:?}", path.display(), d.shape),
        d.bytes,
    )?;
    let rest = u64::try_from(d.bytes).unwrap_or(u64::MAX);
    r.by_ref()
        .take(rest.saturating_add(1))
        .read_to_end(&mut head)
        .map_err(io)?;
    preflight(path, &head)?;
    Ok(head)
}

/// Checks the size a `.npy` header declares against the bytes the file holds and the
/// memory ceiling, before a reader allocates from it: a 200-byte file that claims
/// 10^16 values is an error naming both sizes, not an allocation.
pub fn preflight(path: &Path, bytes: &[u8]) -> Result<Declared, IoError> {
    let (d, data) = declared(path, bytes)?;
    let have = bytes.len().saturating_sub(data) as u128;
    if d.bytes > have {
        return Err(IoError::file(
            path,
            format!(
                "truncated .npy data: the header declares shape {:?} of {}-byte values \
                 ('{}', {}), the file holds {}",
                d.shape,
                d.item,
                d.descr,
                crate::limits::human(d.bytes),
                crate::limits::human(have)
            ),
        ));
    }
    crate::limits::check(
        format!("{}: an array of shape {:?}", path.display(), d.shape),
        d.bytes,
    )?;
    Ok(d)
}

fn try_read<T: ReadableElement>(bytes: &[u8]) -> Result<ArrayD<T>, ReadNpyError> {
    ArrayD::<T>::read_npy(bytes)
}

fn describe(path: &Path, e: ReadNpyError) -> IoError {
    let what = match &e {
        ReadNpyError::Io(_) | ReadNpyError::MissingData => {
            "truncated or unreadable .npy data (fewer bytes than the header promises)".to_string()
        }
        ReadNpyError::ParseHeader(h) => format!("malformed .npy header: {h}"),
        ReadNpyError::ExtraBytes(n) => format!("{n} bytes after the .npy data"),
        other => other.to_string(),
    };
    IoError::file(path, what)
}

/// Result of one typed read attempt: the array, "not this dtype", or a real error.
fn attempt<T: ReadableElement>(bytes: &[u8]) -> Result<Option<ArrayD<T>>, ReadNpyError> {
    match try_read::<T>(bytes) {
        Ok(a) => Ok(Some(a)),
        Err(ReadNpyError::WrongDescriptor(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn to_std<T: Clone>(a: ArrayD<T>) -> (Vec<usize>, Vec<T>) {
    let shape = a.shape().to_vec();
    let v = if a.is_standard_layout() {
        a.into_raw_vec_and_offset().0
    } else {
        a.iter().cloned().collect()
    };
    (shape, v)
}

/// How each dtype is written to `.npy` / `.npz` / `.mtx` files: one impl per dtype of
/// the table in masked-core (`dtypes!`), so `with_dyn_vec!` reaches every one.
pub trait FileValue: masked_core::Element {
    /// Encodes an array of this type as `.npy` bytes.
    fn encode_npy(shape: &[usize], v: Vec<Self>, out: &mut Vec<u8>) -> Result<(), String>;
    /// The value as Matrix Market text.
    fn mtx_text(self) -> String;
}

macro_rules! native_file_value {
    ($($t:ty, $fmt:literal;)*) => {$(
        impl FileValue for $t {
            fn encode_npy(shape: &[usize], v: Vec<Self>, out: &mut Vec<u8>) -> Result<(), String> {
                encode(shape, v, out)
            }
            fn mtx_text(self) -> String {
                format!($fmt, self)
            }
        }
    )*};
}
native_file_value! { f32, "{:e}"; f64, "{:e}"; i32, "{}"; i64, "{}"; }

impl FileValue for half::f16 {
    /// numpy's `float16` (`<f2`): written as the `u16` bits, descriptor patched.
    fn encode_npy(shape: &[usize], v: Vec<Self>, out: &mut Vec<u8>) -> Result<(), String> {
        let start = out.len();
        encode(
            shape,
            v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>(),
            out,
        )?;
        patch_descr(&mut out[start..], b"u2", b"f2")
            .then_some(())
            .ok_or_else(|| "cannot write a float16 .npy header".to_string())
    }
    fn mtx_text(self) -> String {
        format!("{:e}", self.to_f32())
    }
}

impl FileValue for half::bf16 {
    fn encode_npy(_: &[usize], _: Vec<Self>, _: &mut Vec<u8>) -> Result<(), String> {
        Err("bf16 values have no .npy dtype (numpy has no bfloat16): cast to f32 first".into())
    }
    fn mtx_text(self) -> String {
        format!("{:e}", self.to_f32())
    }
}

/// Replaces the type code `from` (e.g. `u2`) of a `.npy` header's `descr` by `to` (same
/// length), in place; false when the header has no such descriptor.
fn patch_descr(bytes: &mut [u8], from: &[u8; 2], to: &[u8; 2]) -> bool {
    // the header is ASCII and ends at the first newline after the magic
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(0)
        .min(bytes.len());
    let header = &mut bytes[..end];
    for order in [b'<', b'>', b'|', b'='] {
        let pat = [b'\'', order, from[0], from[1], b'\''];
        if let Some(p) = header.windows(5).position(|w| w == pat) {
            header[p + 2] = to[0];
            header[p + 3] = to[1];
            return true;
        }
    }
    false
}

/// Reads a value array (f16, f32, f64, i32 or i64).
pub fn read_values(path: &Path) -> Result<DynArray, IoError> {
    parse_values(path, &read_bytes(path)?)
}

/// Reads a mask: bool, or any integer / float array with nonzero = valid.
pub fn read_mask(path: &Path) -> Result<BitMask, IoError> {
    parse_mask(path, &read_bytes(path)?)
}

/// The bytes of a `.npy` file with a header the reader takes (a legacy one rewritten)
/// and what the header declares, its size checked ([`preflight`]).
fn opened<'b>(path: &Path, bytes: &'b [u8]) -> Result<(Cow<'b, [u8]>, Declared), IoError> {
    let bytes = modern_header(bytes);
    let d = preflight(path, &bytes)?;
    Ok((bytes, d))
}

/// Parses the bytes of a `.npy` value array (f16, f32, f64, i32 or i64); `path` names
/// it in messages. The declared size is checked first ([`preflight`]).
pub fn parse_values(path: &Path, bytes: &[u8]) -> Result<DynArray, IoError> {
    let (bytes, d) = opened(path, bytes)?;
    // one read, of the type the descriptor names: the data reader allocates before it
    // looks at the descriptor, so trying types in turn would allocate for each
    macro_rules! read_as {
        ($t:ty, $bytes:expr, $conv:expr) => {
            if let Some(a) = attempt::<$t>($bytes).map_err(|e| describe(path, e))? {
                let (shape, v) = to_std(a);
                return Ok(DynArray {
                    shape,
                    values: $conv(v),
                });
            }
        };
    }
    match d.descr.trim_start_matches(['<', '>', '|']) {
        "f4" => read_as!(f32, &bytes, <f32 as masked_core::Element>::into_dyn),
        "f8" => read_as!(f64, &bytes, <f64 as masked_core::Element>::into_dyn),
        "i4" => read_as!(i32, &bytes, <i32 as masked_core::Element>::into_dyn),
        "i8" => read_as!(i64, &bytes, <i64 as masked_core::Element>::into_dyn),
        // float16: read as its u16 bits under a patched descriptor
        "f2" => {
            let mut patched = bytes.to_vec();
            if patch_descr(&mut patched, b"f2", b"u2") {
                read_as!(u16, &patched, |v: Vec<u16>| DynVec::F16(
                    v.into_iter().map(half::f16::from_bits).collect()
                ));
            }
        }
        _ => {}
    }
    Err(IoError::file(
        path,
        format!(
            "unsupported dtype '{}': values must be float16, float32, float64, int32 or int64",
            d.descr
        ),
    ))
}

/// Parses the bytes of a `.npy` mask (bool, or integers / floats with nonzero = valid);
/// `path` names it in messages.
pub fn parse_mask(path: &Path, bytes: &[u8]) -> Result<BitMask, IoError> {
    let (bytes, d) = opened(path, bytes)?;
    macro_rules! as_mask {
        ($t:ty, $pred:expr) => {
            if let Some(a) = attempt::<$t>(&bytes).map_err(|e| describe(path, e))? {
                let shape = a.shape().to_vec();
                let f = $pred;
                return BitMask::from_bools(&shape, a.iter().map(|x| f(*x)))
                    .map_err(|e| IoError::file(path, e.to_string()));
            }
        };
    }
    // one read, of the type the descriptor names (see `parse_values`)
    match d.descr.trim_start_matches(['<', '>', '|']) {
        "b1" => as_mask!(bool, |x: bool| x),
        "u1" | "B" => as_mask!(u8, |x: u8| x != 0),
        "i1" | "b" => as_mask!(i8, |x: i8| x != 0),
        "i4" => as_mask!(i32, |x: i32| x != 0),
        "i8" => as_mask!(i64, |x: i64| x != 0),
        "f4" => as_mask!(f32, |x: f32| x != 0.0),
        "f8" => as_mask!(f64, |x: f64| x != 0.0),
        _ => {}
    }
    Err(IoError::file(
        path,
        "unsupported mask dtype: expected bool (or integers/floats, nonzero = valid)".into(),
    ))
}

/// Writes `bytes` to `path` through a temporary file in the same folder, so a failure
/// never leaves a partial file behind.
pub fn write_atomic(
    path: &Path, write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), IoError> {
    let mut buf = Vec::new();
    write(&mut buf).map_err(|e| IoError::file(path, e))?;
    let tmp = path.with_extension("npy.tmp");
    std::fs::write(&tmp, &buf).map_err(|e| IoError::file(path, e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        IoError::file(path, e.to_string())
    })
}

/// Encodes an array as `.npy` bytes.
pub fn encode<T: WritableElement>(
    shape: &[usize], v: Vec<T>, out: &mut Vec<u8>,
) -> Result<(), String> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string())?;
    a.write_npy(out).map_err(|e| e.to_string())
}

/// Encodes a [`DynVec`] as `.npy` bytes.
pub fn encode_dyn(shape: &[usize], v: DynVec, out: &mut Vec<u8>) -> Result<(), String> {
    masked_core::with_dyn_vec!(v, v => FileValue::encode_npy(shape, v, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fuzz finding: nested braces in a header sent the header parser into
    /// exponential backtracking (over 10 s for 118 bytes); refused up front now.
    #[test]
    fn nested_header_brackets_are_refused_at_once() {
        let input = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/regressions/npy/nested-braces-parser-timeout"
        ))
        .unwrap();
        let e = parse_values(Path::new("x.npy"), &input[1..]).err().unwrap();
        assert!(e.to_string().contains("nested brackets"), "{e}");
        // a real header still reads
        let mut ok = Vec::new();
        encode(&[2, 3], vec![1.0f32; 6], &mut ok).unwrap();
        assert_eq!(parse_values(Path::new("x.npy"), &ok).unwrap().shape, [2, 3]);
    }

    /// A Python 2 header, `(2L, 3L)`, as numpy wrote it and still reads it.
    #[test]
    fn legacy_long_shapes_read() {
        let mut modern = Vec::new();
        encode(&[2, 3], (0..6).map(|i| i as f32).collect(), &mut modern).unwrap();
        let text = String::from_utf8_lossy(&modern[10..]).to_string();
        assert!(text.contains("(2, 3)"), "{text}");
        // the same file with `L`s, its padding two spaces shorter
        let pad = modern.iter().position(|&b| b == b'\n').unwrap();
        let mut legacy = modern[..pad - 2].to_vec();
        legacy.push(b'\n');
        legacy.extend_from_slice(&modern[pad + 1..]);
        let h = legacy.windows(6).position(|w| w == b"(2, 3)").unwrap();
        legacy.splice(h..h + 6, b"(2L, 3L)".iter().copied());
        assert_eq!(legacy.len(), modern.len());
        let a = parse_values(Path::new("x.npy"), &legacy).unwrap();
        assert_eq!(a.shape, [2, 3]);
        assert!(matches!(&a.values, DynVec::F32(v) if v == &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
        // and as a mask, and as an .npz member's stream
        assert_eq!(
            parse_mask(Path::new("m.npy"), &legacy)
                .unwrap()
                .count_ones(),
            5
        );
        let bytes = read_stream(Path::new("a.npz"), "x", &mut &legacy[..]).unwrap();
        assert_eq!(
            parse_values(Path::new("a.npz"), &bytes).unwrap().shape,
            [2, 3]
        );
    }
}
