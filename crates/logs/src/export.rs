//! `tessera logs export --parquet`: the parsed log as a Parquet file with typed columns,
//! for DuckDB, ClickHouse or Spark when one machine's logs are not enough.
//!
//! Every core parses blocks of lines into Arrow arrays and encodes them into one Parquet row
//! group each (the parquet crate's `ArrowColumnWriter`, made for encoding row groups in
//! parallel); the row groups are appended to the file in the order of the lines, whichever
//! thread finishes first. A block is at least 4 MiB of log (some 20,000 lines), so that the
//! row groups are large enough for a reader to skip by their statistics.
//!
//! The columns ([`COLUMNS`]) are what the report reads, typed: `time` a UTC timestamp (the
//! log's offset applied), `status` a small unsigned integer, `bytes` a 64-bit integer, the
//! others UTF-8 strings as logged (escapes of the log's own kept, as the report keeps them;
//! a byte that is not UTF-8 becomes U+FFFD). A field the format has not, or that is empty,
//! is null. Malformed lines are skipped and counted, as the report counts them.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::builder::{
    Int64Builder, StringBuilder, TimestampMillisecondBuilder, UInt16Builder,
};
use arrow_array::ArrayRef;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use crate::time::{utc_seconds, HourCache};
use crate::{Error, LogFormat, Opened, Options};

/// The columns of the file, in order, with their Arrow types (all nullable).
pub const COLUMNS: [(&str, &str); 15] = [
    ("time", "timestamp (ms, UTC)"),
    ("client", "string"),
    ("host", "string"),
    ("method", "string"),
    ("path", "string"),
    ("status", "uint16"),
    ("bytes", "int64"),
    ("referer", "string"),
    ("user_agent", "string"),
    ("duration_us", "int64"),
    ("route", "string"),
    ("upstream_addr", "string"),
    ("upstream_status", "string"),
    ("upstream_response_time", "string"),
    ("cache", "string"),
];

/// The smallest block of mapped log encoded as one row group.
const MIN_BLOCK: usize = 4 << 20;
/// The largest: a row group's arrays and encoded pages stay in memory until it is written.
const MAX_BLOCK: usize = 64 << 20;

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Exported {
    /// Lines read (empty lines not counted).
    pub lines: u64,
    /// Rows written: the lines that matched the format.
    pub rows: u64,
    /// Lines that did not match the format, skipped.
    pub malformed: u64,
    /// Row groups written.
    pub row_groups: u64,
}

/// Why an export failed: the input could not be read, or the file not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error(transparent)]
    Read(#[from] Error),
    #[error("writing the Parquet file")]
    Write(#[from] parquet::errors::ParquetError),
    #[error("writing the Parquet file")]
    Io(#[from] std::io::Error),
}

/// One block's rows, encoded: a row group ready to append.
struct Encoded {
    columns: Vec<ArrowColumnChunk>,
    lines: u64,
    rows: u64,
}

/// The file being written, with the row groups that finished before one that comes
/// earlier in the log.
struct Out<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    next: usize,
    waiting: BTreeMap<usize, Encoded>,
    done: Exported,
}

impl<W: Write + Send> Out<W> {
    /// Takes block `index`'s row group; appends it and every waiting one after it that is
    /// now next in order.
    fn put(&mut self, index: usize, encoded: Encoded) -> Result<(), ExportError> {
        self.waiting.insert(index, encoded);
        while let Some(encoded) = self.waiting.remove(&self.next) {
            self.next += 1;
            self.done.lines += encoded.lines;
            self.done.rows += encoded.rows;
            self.done.malformed += encoded.lines - encoded.rows;
            if encoded.rows == 0 {
                continue;
            }
            let mut group = self.writer.next_row_group()?;
            for column in encoded.columns {
                column.append_to_row_group(&mut group)?;
            }
            group.close()?;
            self.done.row_groups += 1;
        }
        Ok(())
    }
}

/// Writes every line of `inputs` that `format` reads as one row of a Parquet file (Snappy
/// pages, dictionary-encoded where it pays) to `out`, on `opts.threads` threads.
pub fn export<W: Write + Send>(
    format: &LogFormat,
    inputs: &mut Opened,
    opts: &Options,
    out: W,
) -> Result<Exported, ExportError> {
    let schema = schema();
    // Dictionaries pay for the strings (a log repeats its paths, clients and agents) but
    // not for times, sizes and durations, nearly all distinct: hashing each into a
    // dictionary that is then dropped cost more than the plain encoding.
    let mut props = WriterProperties::builder().set_compression(Compression::SNAPPY);
    for column in ["time", "bytes", "duration_us"] {
        props = props.set_column_dictionary_enabled(ColumnPath::from(column), false);
    }
    let props = Arc::new(props.build());
    let parquet_schema = ArrowSchemaConverter::new()
        .with_coerce_types(props.coerce_types())
        .convert(&schema)?;
    let writer = SerializedFileWriter::new(out, parquet_schema.root_schema_ptr(), props)?;
    let factory = ArrowRowGroupWriterFactory::new(&writer, Arc::clone(&schema));
    let out = Mutex::new(Out {
        writer,
        next: 0,
        waiting: BTreeMap::new(),
        done: Exported::default(),
    });
    let encode = |index: usize, block: &[u8]| -> Result<(), ExportError> {
        let encoded = encode_block(format, &schema, &factory, index, block)?;
        out.lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(index, encoded)
    };
    let threads = opts.threads.max(1);
    // Streamed blocks come after the mapped ones, numbered on from them.
    let index = std::cell::Cell::new(0);
    inputs.in_order(
        block_target(inputs.mapped_bytes() as usize, threads),
        opts.block_size.max(MIN_BLOCK),
        |blocks| {
            index.set(blocks.len());
            encode_all(blocks, threads, &encode)
        },
        &mut |block| {
            index.set(index.get() + 1);
            encode(index.get() - 1, block)
        },
    )?;
    let out = out.into_inner().unwrap_or_else(|e| e.into_inner());
    out.writer.close()?;
    Ok(out.done)
}

/// A block of about an eighth of a thread's share of the mapped bytes, between 4 and 64
/// MiB: several blocks per thread keep the threads finishing together.
fn block_target(mapped: usize, threads: usize) -> usize {
    (mapped / (threads * 8)).clamp(MIN_BLOCK, MAX_BLOCK)
}

/// Encodes block `index` and appends it to the file in its turn.
type EncodeFn<'a> = dyn Fn(usize, &[u8]) -> Result<(), ExportError> + Sync + 'a;

/// Encodes the blocks on `threads` threads, each taking the next block not yet taken.
fn encode_all(blocks: &[&[u8]], threads: usize, encode: &EncodeFn<'_>) -> Result<(), ExportError> {
    let next = AtomicUsize::new(0);
    let work = || -> Result<(), ExportError> {
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(block) = blocks.get(index) else {
                return Ok(());
            };
            encode(index, block)?;
        }
    };
    let workers = threads.min(blocks.len()).max(1);
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
        let mut result = work();
        for handle in others {
            let theirs = handle
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            result = result.and(theirs);
        }
        result
    })
}

fn schema() -> SchemaRef {
    let string = |name| Field::new(name, DataType::Utf8, true);
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        string("client"),
        string("host"),
        string("method"),
        string("path"),
        Field::new("status", DataType::UInt16, true),
        Field::new("bytes", DataType::Int64, true),
        string("referer"),
        string("user_agent"),
        Field::new("duration_us", DataType::Int64, true),
        string("route"),
        string("upstream_addr"),
        string("upstream_status"),
        string("upstream_response_time"),
        string("cache"),
    ]))
}

/// The arrays of one block, filled line by line.
struct Columns {
    time: TimestampMillisecondBuilder,
    client: StringBuilder,
    host: StringBuilder,
    method: StringBuilder,
    path: StringBuilder,
    status: UInt16Builder,
    bytes: Int64Builder,
    referer: StringBuilder,
    user_agent: StringBuilder,
    duration: Int64Builder,
    route: StringBuilder,
    upstream_addr: StringBuilder,
    upstream_status: StringBuilder,
    upstream_time: StringBuilder,
    cache: StringBuilder,
}

impl Columns {
    fn with_capacity(rows: usize, bytes: usize) -> Columns {
        let string = |share: usize| StringBuilder::with_capacity(rows, bytes / share);
        Columns {
            time: TimestampMillisecondBuilder::with_capacity(rows).with_timezone("UTC"),
            client: string(16),
            host: string(32),
            method: string(64),
            path: string(4),
            status: UInt16Builder::with_capacity(rows),
            bytes: Int64Builder::with_capacity(rows),
            referer: string(4),
            user_agent: string(2),
            duration: Int64Builder::with_capacity(rows),
            route: string(64),
            upstream_addr: string(64),
            upstream_status: string(256),
            upstream_time: string(256),
            cache: string(256),
        }
    }

    /// Appends a line's record; `utf8`: the block it comes from is valid UTF-8.
    fn push(&mut self, record: &crate::Record<'_>, utf8: bool) {
        self.time
            .append_option(utc_seconds(record.time).map(|s| s * 1000));
        text(&mut self.client, record.client, utf8);
        text(&mut self.host, record.vhost, utf8);
        text(&mut self.method, record.method, utf8);
        text(&mut self.path, record.path, utf8);
        self.status
            .append_option((record.status != 0).then_some(record.status));
        self.bytes.append_value(record.bytes as i64);
        text(&mut self.referer, record.referer, utf8);
        text(&mut self.user_agent, record.user_agent, utf8);
        self.duration
            .append_option(record.micros.map(|us| us as i64));
        text(&mut self.route, record.route, utf8);
        text(&mut self.upstream_addr, record.upstream_addr, utf8);
        text(&mut self.upstream_status, record.upstream_status, utf8);
        text(&mut self.upstream_time, record.upstream_time, utf8);
        text(&mut self.cache, record.cache, utf8);
    }

    fn finish(mut self) -> [ArrayRef; COLUMNS.len()] {
        [
            Arc::new(self.time.finish()),
            Arc::new(self.client.finish()),
            Arc::new(self.host.finish()),
            Arc::new(self.method.finish()),
            Arc::new(self.path.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.referer.finish()),
            Arc::new(self.user_agent.finish()),
            Arc::new(self.duration.finish()),
            Arc::new(self.route.finish()),
            Arc::new(self.upstream_addr.finish()),
            Arc::new(self.upstream_status.finish()),
            Arc::new(self.upstream_time.finish()),
            Arc::new(self.cache.finish()),
        ]
    }
}

/// A field's bytes as a string value; null when empty. `utf8`: `value` is a field of a
/// block that is valid UTF-8 as a whole.
fn text(column: &mut StringBuilder, value: &[u8], utf8: bool) {
    if value.is_empty() {
        column.append_null();
        return;
    }
    if utf8 {
        // SAFETY: every field is cut from its line at ASCII bytes (spaces, quotes,
        // brackets, a JSON string's quotes), which are never inside a multi-byte UTF-8
        // sequence, so a field of a valid UTF-8 block is valid UTF-8 itself. Checking
        // each field instead was a tenth of an export's time in `perf` (nine short
        // fields per line; simdutf8 hands inputs that short to the standard check).
        column.append_value(unsafe { std::str::from_utf8_unchecked(value) });
        return;
    }
    match simdutf8::basic::from_utf8(value) {
        Ok(s) => column.append_value(s),
        Err(_) => column.append_value(String::from_utf8_lossy(value).as_ref() as &str),
    }
}

/// Parses a block's lines into arrays and encodes them as row group `index`.
fn encode_block(
    format: &LogFormat,
    schema: &SchemaRef,
    factory: &ArrowRowGroupWriterFactory,
    index: usize,
    block: &[u8],
) -> Result<Encoded, ExportError> {
    // A log line is some 200 bytes: size the arrays once for the block.
    let mut columns = Columns::with_capacity(block.len() / 180 + 16, block.len());
    let mut hours = HourCache::default();
    let utf8 = simdutf8::basic::from_utf8(block).is_ok();
    let (mut lines, mut rows) = (0, 0);
    let mut rest = block;
    while !rest.is_empty() {
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        lines += 1;
        if let Some(record) = format.parse_line_with(line, &mut hours) {
            columns.push(&record, utf8);
            rows += 1;
        }
    }
    let arrays = columns.finish();
    let mut writers = factory.create_column_writers(index)?;
    let mut writer = writers.iter_mut();
    for (field, array) in schema.fields().iter().zip(&arrays) {
        for leaf in compute_leaves(field, array)? {
            if let Some(w) = writer.next() {
                w.write(&leaf)?;
            }
        }
    }
    let columns = writers
        .into_iter()
        .map(|w| w.close())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Encoded {
        columns,
        lines,
        rows,
    })
}
