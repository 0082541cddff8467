//! Sparse files: Matrix Market `.mtx` (2-D) and COO `.npz` (n-D), read with errors that
//! name the line or entry, and written atomically.

use crate::error::IoError;
use crate::npy;
use crate::npy::write_atomic;
use crate::npy::FileValue;
use masked_core::sparse::unravel;
use masked_core::DynVec;
use ndarray::{Array1, Array2};
use ndarray_npy::{NpzWriter, ReadNpyError, ReadNpyExt};
use std::io::{BufRead, Cursor};
use std::path::Path;

/// A sparse array as read: shape, one coordinate vector per dim, values, and for each
/// entry where it came from (for messages).
#[derive(Debug)]
pub struct SparseFile {
    /// Shape.
    pub shape: Vec<usize>,
    /// `coords[d][k]`: coordinate along dim `d` of entry `k`.
    pub coords: Vec<Vec<usize>>,
    /// Values (`f64` for real and pattern files, `i64` for integer ones; any npz dtype).
    pub values: DynVec,
    /// Where entry `k` came from ("line 7", "entry 3").
    origin: Origin,
}

#[derive(Debug)]
enum Origin {
    Lines(Vec<usize>),
    Entries,
}

impl SparseFile {
    fn origin(&self, k: usize) -> String {
        match &self.origin {
            Origin::Lines(l) => format!("line {}", l[k]),
            Origin::Entries => format!("entry {k}"),
        }
    }

    /// Number of entries.
    pub fn nnz(&self) -> usize {
        self.coords.first().map_or(self.values_len(), Vec::len)
    }

    fn values_len(&self) -> usize {
        self.values.len()
    }

    /// The entries in row-major order (a permutation of `0..nnz`), or an error naming
    /// both places of a duplicate position.
    pub fn sorted_order(&self, path: &Path) -> Result<Vec<usize>, IoError> {
        let nd = self.shape.len();
        let flat = |k: usize| -> u128 {
            (0..nd).fold(0u128, |f, d| {
                f * self.shape[d] as u128 + self.coords[d][k] as u128
            })
        };
        let mut order: Vec<(u128, usize)> = (0..self.nnz()).map(|k| (flat(k), k)).collect();
        order.sort_unstable();
        for w in order.windows(2) {
            if w[0].0 == w[1].0 {
                let (a, b) = (w[0].1.min(w[1].1), w[0].1.max(w[1].1));
                let at: Vec<usize> = (0..nd).map(|d| self.coords[d][a]).collect();
                return Err(IoError::file(
                    path,
                    format!(
                        "duplicate entry at {:?} ({} and {})",
                        at,
                        self.origin(a),
                        self.origin(b)
                    ),
                ));
            }
        }
        Ok(order.into_iter().map(|(_, k)| k).collect())
    }

    /// The 2-D compressed-row form: row pointer, column indices, values (`f64` or
    /// `i64`, in file order permuted to row-major).
    pub fn to_csr(&self, path: &Path) -> Result<(Vec<usize>, Vec<usize>, DynVec), IoError> {
        let nd = self.shape.len();
        if nd != 2 {
            let what = format!("a {nd}-d array cannot run on --layout csr (2-d only)");
            return Err(IoError::file(path, what));
        }
        let rows = self.shape[0];
        crate::limits::check(
            format!(
                "{}: CSR row pointers for {rows} rows (--layout coo needs memory for the \
                 stored entries only)",
                path.display()
            ),
            (rows as u128 + 1) * std::mem::size_of::<usize>() as u128,
        )?;
        let order = self.sorted_order(path)?;
        let mut indptr = Vec::new();
        indptr.try_reserve_exact(rows + 1).map_err(|_| {
            IoError::file(
                path,
                format!("cannot allocate CSR row pointers for {rows} rows: use --layout coo"),
            )
        })?;
        indptr.resize(rows + 1, 0usize);
        for &k in &order {
            indptr[self.coords[0][k] + 1] += 1;
        }
        for r in 0..self.shape[0] {
            indptr[r + 1] += indptr[r];
        }
        let indices = order.iter().map(|&k| self.coords[1][k]).collect();
        let values = permute(&self.values, &order);
        Ok((indptr, indices, values))
    }
}

/// `values[order[k]]` for every `k`.
pub fn permute(values: &DynVec, order: &[usize]) -> DynVec {
    fn pick<T: masked_core::Element>(v: &[T], order: &[usize]) -> DynVec {
        T::into_dyn(order.iter().map(|&k| v[k]).collect())
    }
    masked_core::with_dyn_vec!(values, v => pick(v, order))
}

/// The field of a Matrix Market file.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

/// The symmetry of a Matrix Market file.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Symmetry {
    General,
    Symmetric,
    Skew,
}

/// The numbered lines of a text file (1-based), I/O errors naming the line.
struct Lines<'p> {
    path: &'p Path,
    inner: std::iter::Enumerate<std::io::Lines<Box<dyn BufRead + 'p>>>,
}

impl Lines<'_> {
    fn next(&mut self) -> Result<Option<(usize, String)>, IoError> {
        match self.inner.next() {
            Some((i, l)) => {
                let l = l.map_err(|e| IoError::file(self.path, format!("line {}: {e}", i + 1)))?;
                Ok(Some((i + 1, l)))
            }
            None => Ok(None),
        }
    }
    /// The next line that is neither blank nor a `%` comment.
    fn next_data(&mut self) -> Result<Option<(usize, String)>, IoError> {
        while let Some((i, l)) = self.next()? {
            let t = l.trim();
            if !t.is_empty() && !t.starts_with('%') {
                return Ok(Some((i, l)));
            }
        }
        Ok(None)
    }
    fn err(&self, line: usize, what: String) -> IoError {
        IoError::file(self.path, format!("line {line}: {what}"))
    }
}

/// The banner line: `%%MatrixMarket matrix coordinate <field> <symmetry>`.
fn mtx_banner(lines: &mut Lines<'_>) -> Result<(Field, Symmetry), IoError> {
    let Some((_, header)) = lines.next()? else {
        return Err(IoError::file(
            lines.path,
            "empty file: expected a %%MatrixMarket header".into(),
        ));
    };
    let h: Vec<String> = header
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    if h.len() != 5 || h[0] != "%%matrixmarket" || h[1] != "matrix" {
        return Err(lines.err(
            1,
            format!(
                "expected '%%MatrixMarket matrix coordinate <field> <symmetry>', got '{header}'"
            ),
        ));
    }
    if h[2] != "coordinate" {
        return Err(lines.err(
            1,
            format!("format '{}' is not supported: expected coordinate", h[2]),
        ));
    }
    let field = match h[3].as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        f => {
            return Err(lines.err(
                1,
                format!("field '{f}' is not supported: expected real, integer or pattern"),
            ))
        }
    };
    let sym = match h[4].as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::Skew,
        s => {
            return Err(lines.err(
                1,
                format!(
                    "symmetry '{s}' is not supported: expected general, symmetric or skew-symmetric"
                ),
            ))
        }
    };
    Ok((field, sym))
}

/// The size line (after comments and blank lines): rows, columns, entries.
fn mtx_size(lines: &mut Lines<'_>, sym: Symmetry) -> Result<(usize, usize, usize), IoError> {
    let Some((line, size)) = lines.next_data()? else {
        return Err(IoError::file(lines.path, "missing size line".into()));
    };
    let nums: Vec<&str> = size.split_whitespace().collect();
    if nums.len() != 3 {
        return Err(lines.err(
            line,
            format!("expected 'rows cols entries', got '{}'", size.trim()),
        ));
    }
    let parse = |t: &str, what: &str| {
        t.parse::<usize>().map_err(|_| {
            lines.err(
                line,
                format!("cannot parse {what} '{t}' as a non-negative integer"),
            )
        })
    };
    let (nrows, ncols) = (
        parse(nums[0], "row count")?,
        parse(nums[1], "column count")?,
    );
    let nnz = parse(nums[2], "entry count")?;
    if sym != Symmetry::General && nrows != ncols {
        let name = if sym == Symmetry::Skew {
            "skew-symmetric"
        } else {
            "symmetric"
        };
        return Err(lines.err(
            line,
            format!("a {name} matrix must be square, got {nrows} x {ncols}"),
        ));
    }
    Ok((nrows, ncols, nnz))
}

/// One entry line: 0-based row and column, and the value (`f64` for real and pattern
/// files, `i64` for integer ones).
fn mtx_entry(
    lines: &Lines<'_>, line: usize, t: &str, field: Field, shape: (usize, usize),
) -> Result<(usize, usize, f64, i64), IoError> {
    let parts: Vec<&str> = t.split_whitespace().collect();
    let want = if field == Field::Pattern { 2 } else { 3 };
    if parts.len() != want {
        return Err(lines.err(
            line,
            format!("expected {want} fields, got {}: '{t}'", parts.len()),
        ));
    }
    let idx = |k: usize, size: usize, what: &str| -> Result<usize, IoError> {
        let v: i64 = parts[k].parse().map_err(|_| {
            lines.err(
                line,
                format!("cannot parse {what} index '{}' as an integer", parts[k]),
            )
        })?;
        if v == 0 {
            return Err(lines.err(
                line,
                format!("{what} index 0: Matrix Market indices are 1-based"),
            ));
        }
        if v < 0 || v as u64 > size as u64 {
            return Err(lines.err(line, format!("{what} index {v} is out of range 1..={size}")));
        }
        Ok(v as usize - 1)
    };
    let r = idx(0, shape.0, "row")?;
    let c = idx(1, shape.1, "column")?;
    let (x, n) = match field {
        Field::Pattern => (1.0, 1),
        Field::Real => (
            parts[2].parse::<f64>().map_err(|_| {
                lines.err(
                    line,
                    format!("cannot parse value '{}' as a number", parts[2]),
                )
            })?,
            0,
        ),
        Field::Integer => (
            0.0,
            parts[2].parse::<i64>().map_err(|_| {
                lines.err(
                    line,
                    format!("cannot parse value '{}' as an integer", parts[2]),
                )
            })?,
        ),
    };
    Ok((r, c, x, n))
}

/// Reads a Matrix Market coordinate file (1-based; `real` as f64, `integer` as i64,
/// `pattern` as 1.0; `symmetric` and `skew-symmetric` expanded). A duplicate or
/// out-of-range index, a 0 index, a wrong entry count or an unparsable number is an
/// error naming the line. The entry count of the size line is checked against the
/// lines present, never trusted for an allocation: storage grows with the entries read.
pub fn read_mtx(path: &Path) -> Result<SparseFile, IoError> {
    let file = std::fs::File::open(path).map_err(|e| IoError::file(path, e.to_string()))?;
    parse_mtx(path, std::io::BufReader::new(file))
}

/// Parses a Matrix Market coordinate stream, as [`read_mtx`] reads a file; `path` names
/// it in messages.
pub fn parse_mtx<'p>(path: &'p Path, input: impl BufRead + 'p) -> Result<SparseFile, IoError> {
    let input: Box<dyn BufRead + 'p> = Box::new(input);
    let mut lines = Lines {
        path,
        inner: input.lines().enumerate(),
    };
    let (field, sym) = mtx_banner(&mut lines)?;
    let (nrows, ncols, nnz) = mtx_size(&mut lines, sym)?;
    // a hint, capped: a size line that claims 10^11 entries must not reserve them
    let hint = nnz.min(1 << 16);
    let (mut rows, mut cols, mut from) = (
        Vec::with_capacity(hint),
        Vec::with_capacity(hint),
        Vec::with_capacity(hint),
    );
    let (mut fv, mut iv) = (Vec::new(), Vec::new());
    let mut seen = 0usize;
    while let Some((line, l)) = lines.next_data()? {
        seen += 1;
        if seen > nnz {
            return Err(lines.err(
                line,
                format!("more entries than the {nnz} the size line declares"),
            ));
        }
        let (r, c, x, n) = mtx_entry(&lines, line, l.trim(), field, (nrows, ncols))?;
        if sym == Symmetry::Skew && r == c {
            return Err(lines.err(
                line,
                "a skew-symmetric matrix has no diagonal entries".into(),
            ));
        }
        let mut push = |r: usize, c: usize, x: f64, n: i64| {
            rows.push(r);
            cols.push(c);
            from.push(line);
            if field == Field::Integer {
                iv.push(n);
            } else {
                fv.push(x);
            }
        };
        push(r, c, x, n);
        if sym != Symmetry::General && r != c {
            // the mirrored entry: negated for skew-symmetric (integers wrap)
            let (sx, sn) = match sym {
                Symmetry::Skew => (-x, n.wrapping_neg()),
                _ => (x, n),
            };
            push(c, r, sx, sn);
        }
    }
    if seen < nnz {
        return Err(IoError::file(
            path,
            format!("the size line declares {nnz} entries but the file holds {seen}"),
        ));
    }
    Ok(SparseFile {
        shape: vec![nrows, ncols],
        coords: vec![rows, cols],
        values: if field == Field::Integer {
            DynVec::I64(iv)
        } else {
            DynVec::F64(fv)
        },
        origin: Origin::Lines(from),
    })
}

fn npz_err(path: &Path, what: &str, e: ReadNpyError) -> IoError {
    IoError::file(path, format!("array '{what}': {e}"))
}

/// The members of an `.npz` archive, each read by [`npy::read_stream`] (sizes checked
/// before anything is allocated from them).
struct Npz<'p, R> {
    zip: zip::ZipArchive<R>,
    path: &'p Path,
}

impl<R: std::io::Read + std::io::Seek> Npz<'_, R> {
    fn has(&self, n: &str) -> bool {
        self.zip
            .file_names()
            .any(|x| x == n || x == format!("{n}.npy"))
    }

    fn bytes(&mut self, n: &str) -> Result<Vec<u8>, IoError> {
        let name = if self.zip.index_for_name(n).is_some() {
            n.to_string()
        } else {
            format!("{n}.npy")
        };
        let mut f = self
            .zip
            .by_name(&name)
            .map_err(|e| IoError::file(self.path, format!("array '{n}': {e}")))?;
        npy::read_stream(self.path, n, &mut f)
    }
}

/// Reads a COO `.npz` (`coords` int64 ndim x nnz, `data`, `shape` int64, optional
/// `fill_value` that must be 0); compressed or not.
pub fn read_npz(path: &Path) -> Result<SparseFile, IoError> {
    let file = std::fs::File::open(path).map_err(|e| IoError::file(path, e.to_string()))?;
    parse_npz(path, file)
}

/// Parses a COO `.npz` archive from any seekable reader, as [`read_npz`] reads a file;
/// `path` names it in messages.
pub fn parse_npz(
    path: &Path, input: impl std::io::Read + std::io::Seek,
) -> Result<SparseFile, IoError> {
    let zip = zip::ZipArchive::new(input)
        .map_err(|e| IoError::file(path, format!("not a readable .npz archive: {e}")))?;
    let mut npz = Npz { zip, path };
    for n in ["coords", "data", "shape"] {
        if !npz.has(n) {
            return Err(IoError::file(
                path,
                format!("missing array '{n}' (a COO .npz holds coords, data and shape)"),
            ));
        }
    }
    let b = npz.bytes("shape")?;
    let shape = Array1::<i64>::read_npy(&b[..]).map_err(|e| npz_err(path, "shape", e))?;
    let b = npz.bytes("coords")?;
    let coords = Array2::<i64>::read_npy(&b[..]).map_err(|e| npz_err(path, "coords", e))?;
    if npz.has("fill_value") {
        let b = npz.bytes("fill_value")?;
        let fv: ndarray::ArrayD<f64> = ndarray::ArrayD::<f64>::read_npy(&b[..])
            .or_else(|_| ndarray::ArrayD::<i64>::read_npy(&b[..]).map(|a| a.mapv(|x| x as f64)))
            .map_err(|e| npz_err(path, "fill_value", e))?;
        if fv.iter().any(|&x| x != 0.0) {
            return Err(IoError::file(
                path,
                "fill_value must be 0 (unspecified values are zero)".into(),
            ));
        }
    }
    let data = npz.bytes("data")?;
    macro_rules! data_as {
        ($($t:ty => $v:ident),*) => {{
            let mut got = None;
            $(
                if got.is_none() {
                    if let Ok(a) = ndarray::Array1::<$t>::read_npy(&data[..]) {
                        got = Some(DynVec::$v(a.to_vec()));
                    }
                }
            )*
            got
        }};
    }
    // a bool `data` (a mask file) reads as 0 / 1
    let values = data_as!(f32 => F32, f64 => F64, i32 => I32, i64 => I64);
    let values = values.or_else(|| {
        ndarray::Array1::<bool>::read_npy(&data[..])
            .ok()
            .map(|a| DynVec::I32(a.iter().map(|&b| i32::from(b)).collect()))
    });
    let values = values.ok_or_else(|| {
        IoError::file(
            path,
            "array 'data' must be 1-d float32, float64, int32, int64 or bool".into(),
        )
    })?;
    let shape: Vec<usize> = shape
        .iter()
        .map(|&s| {
            usize::try_from(s)
                .map_err(|_| IoError::file(path, format!("negative size {s} in 'shape'")))
        })
        .collect::<Result<_, _>>()?;
    let (nd, nnz) = coords.dim();
    if nd != shape.len() {
        return Err(IoError::file(
            path,
            format!(
                "'coords' has {nd} rows but 'shape' has {} dims",
                shape.len()
            ),
        ));
    }
    let sf = SparseFile {
        shape: shape.clone(),
        coords: Vec::new(),
        values,
        origin: Origin::Entries,
    };
    let have = sf.values_len();
    if have != nnz {
        let what = format!("'coords' holds {nnz} entries but 'data' {have}");
        return Err(IoError::file(path, what));
    }
    let mut cs = vec![Vec::with_capacity(nnz); nd];
    for d in 0..nd {
        for k in 0..nnz {
            let c = coords[[d, k]];
            if c < 0 || c as u64 >= shape[d] as u64 {
                return Err(IoError::file(
                    path,
                    format!(
                        "entry {k}: index {c} is out of range for dim {d} of size {}",
                        shape[d]
                    ),
                ));
            }
            cs[d].push(c as usize);
        }
    }
    Ok(SparseFile { coords: cs, ..sf })
}

/// Reads a sparse file by extension.
pub fn read_sparse(path: &Path) -> Result<SparseFile, IoError> {
    match crate::extension(path).as_str() {
        "mtx" => read_mtx(path),
        "npz" => read_npz(path),
        e => Err(IoError::file(
            path,
            format!("unknown sparse extension '.{e}': expected .mtx or .npz"),
        )),
    }
}

/// The positions of a sparse output.
struct Entries<'a> {
    shape: &'a [usize],
    indices: &'a [usize],
}

impl Entries<'_> {
    fn coords(&self) -> Vec<Vec<usize>> {
        unravel(self.shape, self.indices)
    }
}

/// The values of a sparse output: numbers, or bools (comparisons).
pub enum Data<'a> {
    /// Numbers of any dtype.
    Num(&'a DynVec),
    /// Bools: `.npz` data of dtype bool, `.mtx` integers 0 / 1.
    Bool(&'a [bool]),
}

/// Writes stored entries (flat row-major `indices`, increasing) of `shape` as a COO
/// `.npz` (`coords` int64 ndim x nnz, `data`, `shape`) or, for a 2-D result, a Matrix
/// Market file; atomically.
pub fn write_entries(
    path: &Path, shape: &[usize], indices: &[usize], data: Data<'_>,
) -> Result<(), IoError> {
    let out = Entries { shape, indices };
    match crate::extension(path).as_str() {
        "npz" => write_atomic(path, |buf| {
            let coords = out.coords();
            let nd = out.shape.len();
            let nnz = out.indices.len();
            let mut c = Array2::<i64>::zeros((nd, nnz));
            for d in 0..nd {
                for k in 0..nnz {
                    c[[d, k]] = coords[d][k] as i64;
                }
            }
            let shape = Array1::from_iter(out.shape.iter().map(|&s| s as i64));
            let mut cur = Cursor::new(Vec::new());
            {
                let mut w = NpzWriter::new(&mut cur);
                let e = |e: ndarray_npy::WriteNpzError| e.to_string();
                w.add_array("coords", &c).map_err(e)?;
                let values = match data {
                    Data::Num(v) => v,
                    Data::Bool(b) => {
                        w.add_array("data", &Array1::from_vec(b.to_vec()))
                            .map_err(e)?;
                        w.add_array("shape", &shape).map_err(e)?;
                        w.finish().map_err(e)?;
                        *buf = cur.into_inner();
                        return Ok(());
                    }
                };
                match values {
                    DynVec::F32(v) => w.add_array("data", &Array1::from_vec(v.clone())),
                    DynVec::F64(v) => w.add_array("data", &Array1::from_vec(v.clone())),
                    DynVec::I32(v) => w.add_array("data", &Array1::from_vec(v.clone())),
                    DynVec::I64(v) => w.add_array("data", &Array1::from_vec(v.clone())),
                    // sparse files of half values are not read, so never written
                    other => {
                        return Err(format!(
                            "{} .npz data is not supported",
                            other.dtype().name()
                        ))
                    }
                }
                .map_err(e)?;
                w.add_array("shape", &shape).map_err(e)?;
                w.finish().map_err(e)?;
            }
            *buf = cur.into_inner();
            Ok(())
        }),
        "mtx" => {
            let nd = out.shape.len();
            if nd != 2 {
                let what =
                    format!("a {nd}-d result cannot be written as .mtx (2-d only): use .npz");
                return Err(IoError::file(path, what));
            }
            write_atomic(path, |buf| {
                use std::fmt::Write;
                let field = match data {
                    Data::Num(DynVec::I32(_) | DynVec::I64(_)) | Data::Bool(_) => "integer",
                    _ => "real",
                };
                let mut s = format!("%%MatrixMarket matrix coordinate {field} general\n");
                let _ = writeln!(s, "{} {} {}", out.shape[0], out.shape[1], out.indices.len());
                let ncols = out.shape[1].max(1);
                for (k, &flat) in out.indices.iter().enumerate() {
                    let (r, c) = (flat / ncols + 1, flat % ncols + 1);
                    let text = match data {
                        Data::Num(values) => {
                            masked_core::with_dyn_vec!(values, v => FileValue::mtx_text(v[k]))
                        }
                        Data::Bool(b) => u8::from(b[k]).to_string(),
                    };
                    let _ = writeln!(s, "{r} {c} {text}");
                }
                *buf = s.into_bytes();
                Ok(())
            })
        }
        _ => Err(IoError::file(
            path,
            "sparse output must be a .npz or .mtx file".into(),
        )),
    }
}
