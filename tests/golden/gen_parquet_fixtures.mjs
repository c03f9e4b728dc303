// Writes the Parquet test fixtures in tests/fixtures/parquet/ (see the README.md there):
//   gsm8k_verl, gsm8k_raw, types_{none,snappy,gzip,zstd,lz4raw,brotli,v2}, map, empty,
//   logical, u64_big, blob, flba, maps                                                  -- written by DuckDB
//   v1_plain_snappy, v2_{plain,delta,dict}_zstd, bss_zstd, lz4_hadoop                  -- written by parquet-wasm (arrow-rs)
// and, for every X.parquet except u64_big and blob (the reader must refuse those), X.jsonl: DuckDB's reading of X.parquet,
// one JSON object per row, in file order, keys in schema order (identical ones become symlinks).
// Two files DuckDB cannot read whole, whose expectation is DuckDB's reading of a twin (same table,
// same writer) that arrow-rs reads exactly like the file: lz4_hadoop (DuckDB has no LZ4 (5) codec; twin
// v1_plain_snappy) and bss_zstd (DuckDB reads BYTE_STREAM_SPLIT only for FLOAT/DOUBLE; twin: the same
// table and settings with PLAIN, written to a temporary directory; DuckDB's reading of bss_zstd's float
// columns is checked against it too).
// All content is synthetic. Not run by CI; run it by hand to regenerate (packages are resolved
// from the current directory):
//   mkdir /tmp/g && cd /tmp/g && npm install @duckdb/node-api@1.5.6-r.1 parquet-wasm@0.8.0 apache-arrow@21.2.0
//   node /path/to/repo/tests/golden/gen_parquet_fixtures.mjs [OUTDIR]   (default: <repo>/tests/fixtures/parquet)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
const load = (m) => import(pathToFileURL(createRequire(path.join(process.cwd(), '_')).resolve(m)));
const { DuckDBInstance } = await load('@duckdb/node-api');
const arrow = await load('apache-arrow');
const pw = await load('parquet-wasm/node');

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(process.argv[2] ?? path.join(here, '..', 'fixtures', 'parquet'));
fs.mkdirSync(out, { recursive: true });
const P = (name) => path.join(out, name);

const db = await (await DuckDBInstance.create(':memory:', { threads: '1' })).connect();
const rows = async (sql) => (await db.runAndReadAll(sql)).getRows();

// ---- gsm8k_verl: verl examples/data_preprocess/gsm8k.py row layout ----------------------------
const INSTR = ` Let's think step by step and output the final answer after "####".`;
const problems = [ // [split, index, question, answer (gsm8k style: steps, <<calc>>, "#### n")]
  ['train', 0, 'A baker makes 12 muffins per tray and bakes 5 trays. How many muffins does she bake?',
    'She bakes 12 * 5 = <<12*5=60>>60 muffins.\n#### 60'],
  ['train', 1, 'Tom has 45 marbles and gives 17 to his sister. How many marbles does Tom have left?',
    'Tom has 45 - 17 = <<45-17=28>>28 marbles left.\n#### 28'],
  ['train', 2, 'A bus ticket costs $3. How much do 4 adults and 3 children pay if children ride at half price?',
    'Adults pay 4 * 3 = <<4*3=12>>12 dollars.\nA child ticket costs 3 / 2 = <<3/2=1.5>>1.5 dollars, so children pay 3 * 1.5 = <<3*1.5=4.5>>4.5 dollars.\nIn total they pay 12 + 4.5 = <<12+4.5=16.5>>16.5 dollars.\n#### 16.5'],
  ['train', 3, 'A garden has 8 rows of 9 tulips. 14 tulips are picked. How many tulips remain?',
    'There are 8 * 9 = <<8*9=72>>72 tulips.\n72 - 14 = <<72-14=58>>58 remain.\n#### 58'],
  ['train', 4, 'A train travels 60 km per hour for 2.5 hours. How far does it go?',
    'It goes 60 * 2.5 = <<60*2.5=150>>150 km.\n#### 150'],
  ['test', 0, 'Mia reads 25 pages a day. How many days does she need for a 300-page book?',
    'She needs 300 / 25 = <<300/25=12>>12 days.\n#### 12'],
  ['test', 1, 'A tank holds 1,200 liters and is 3/4 full. How many liters are in it?',
    'It holds 1200 * 3 / 4 = <<1200*3/4=900>>900 liters.\n#### 900'],
  ['test', 2, 'Pens cost $2 each. Leo pays with a $20 bill for 7 pens. How much change does he get?',
    '7 pens cost 7 * 2 = <<7*2=14>>14 dollars.\nHis change is 20 - 14 = <<20-14=6>>6 dollars.\n#### 6'],
  ['test', 3, 'Ana saves $15 a week. After how many weeks has she saved $135?',
    'She needs 135 / 15 = <<135/15=9>>9 weeks.\n#### 9'],
  ['test', 4, 'A class of 28 students splits into teams of 4. Each team gets 3 balls. How many balls are needed?',
    'There are 28 / 4 = <<28/4=7>>7 teams.\nThey need 7 * 3 = <<7*3=21>>21 balls.\n#### 21'],
];
const q = (s) => `'${s.replaceAll("'", "''")}'`;
await db.run(`CREATE TABLE gsm8k (data_source VARCHAR, prompt STRUCT(content VARCHAR, role VARCHAR)[],
  ability VARCHAR, reward_model STRUCT(ground_truth VARCHAR, style VARCHAR),
  extra_info STRUCT(split VARCHAR, "index" BIGINT, answer VARCHAR, question VARCHAR))`);
for (const [split, idx, question, answer] of problems) {
  const truth = answer.split('#### ').pop();
  await db.run(`INSERT INTO gsm8k VALUES ('openai/gsm8k', [{'content': ${q(question + INSTR)}, 'role': 'user'}], 'math',
    {'ground_truth': ${q(truth)}, 'style': 'rule'},
    {'split': ${q(split)}, 'index': ${idx}, 'answer': ${q(answer)}, 'question': ${q(question)}})`);
}
// DuckDB only cuts a row group at a chunk boundary (a table scan is one chunk), and it dictionary-encodes
// only in row groups of >= 5 rows (and then only near-constant columns). The UNION ALL feeds two 5-row
// chunks -> two row groups, each with its own dictionaries (split: 'train' in the first, 'test' in the second).
await db.run(`COPY (FROM gsm8k WHERE rowid < 5 UNION ALL FROM gsm8k WHERE rowid >= 5)
  TO '${P('gsm8k_verl.parquet')}' (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 5)`);
await db.run(`COPY (FROM gsm8k LIMIT 0) TO '${P('empty.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);

// ---- gsm8k_raw: Hugging Face openai/gsm8k 'main' parquet layout (question, answer) -------------
const raw = [ // made-up problems, gsm8k answer style: steps with <<calc>>, then "#### n"
  ['A farmer plants 6 rows of corn with 7 plants in each row. How many corn plants does he plant?',
    'He plants 6 * 7 = <<6*7=42>>42 corn plants.\n#### 42'],
  ['Lena buys 3 notebooks at $4 each and a backpack for $25. How much does she spend in total?',
    'The notebooks cost 3 * 4 = $<<3*4=12>>12.\nShe spends 12 + 25 = $<<12+25=37>>37 in total.\n#### 37'],
  ['A library has 240 books. It lends out 1/3 of them on Monday and 25 more on Tuesday. How many books are still in the library?',
    'On Monday it lends out 240 / 3 = <<240/3=80>>80 books.\nAfter Monday 240 - 80 = <<240-80=160>>160 books are left.\nAfter Tuesday 160 - 25 = <<160-25=135>>135 books are left.\n#### 135'],
];
await db.run(`CREATE TABLE gsm8k_raw (question VARCHAR, answer VARCHAR)`);
for (const [question, answer] of raw) await db.run(`INSERT INTO gsm8k_raw VALUES (${q(question)}, ${q(answer)})`);
await db.run(`COPY gsm8k_raw TO '${P('gsm8k_raw.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);

// ---- types_*: one table, four codecs; special cases repeat via rownum modulo --------------------
await db.run(`CREATE TABLE types AS SELECT r AS rownum,
  CASE WHEN r % 7 = 3 THEN NULL ELSE r % 3 = 0 END AS b,
  CASE r % 11 WHEN 0 THEN NULL WHEN 1 THEN -2147483648 WHEN 2 THEN 2147483647
    ELSE (r * 37) % 2001 - 1000 END::INTEGER AS i32,
  CASE r % 13 WHEN 0 THEN NULL WHEN 1 THEN 9007199254740993 WHEN 2 THEN -9223372036854775808
    WHEN 3 THEN 9223372036854775807 WHEN 4 THEN -9007199254740993 ELSE r * 1000003 - 1500000000 END::BIGINT AS i64,
  ((r % 41 - 20) * 0.25)::FLOAT AS f,
  CASE r % 17 WHEN 0 THEN NULL WHEN 1 THEN 1e10 WHEN 2 THEN -0.5 ELSE (r - 1500) * 0.125 END::DOUBLE AS d,
  CASE r % 10 WHEN 0 THEN NULL WHEN 1 THEN '' WHEN 2 THEN 'naïve 数学 🚀'
    WHEN 3 THEN 'quote " backslash \\ newline' || chr(10) || 'end'
    WHEN 4 THEN repeat(chr(97 + (r % 26)::INTEGER), 200) || r ELSE 'row ' || r END AS s,
  CASE r % 6 WHEN 0 THEN NULL WHEN 1 THEN [] WHEN 2 THEN [r, NULL, -r] WHEN 3 THEN [NULL]
    ELSE [r % 5, r % 7, r] END::INTEGER[] AS li,
  CASE r % 5 WHEN 0 THEN NULL WHEN 1 THEN [] WHEN 2 THEN [[], NULL, ['a']]
    WHEN 3 THEN [['x' || r, NULL], []] ELSE [['p', 'q', 'r' || r]] END::VARCHAR[][] AS lls,
  CASE r % 4 WHEN 0 THEN NULL WHEN 1 THEN {'a': NULL, 'b': 'b' || r} WHEN 2 THEN {'a': r, 'b': NULL}
    ELSE {'a': -r, 'b': 'ok'} END::STRUCT(a INTEGER, b VARCHAR) AS st,
  CASE r % 5 WHEN 0 THEN NULL WHEN 1 THEN [] WHEN 2 THEN [{'x': r, 'y': 'y' || r}, NULL, {'x': NULL, 'y': NULL}]
    WHEN 3 THEN [{'x': 9007199254740993, 'y': 'big'}] ELSE [{'x': -r, 'y': NULL}, {'x': r, 'y': 'z'}]
    END::STRUCT(x BIGINT, y VARCHAR)[] AS lst
  FROM range(360) t(r) ORDER BY r`);
for (const [name, codec] of [['none', 'uncompressed'], ['snappy', 'snappy'], ['gzip', 'gzip'], ['zstd', 'zstd']])
  await db.run(`COPY types TO '${P(`types_${name}.parquet`)}' (FORMAT parquet, COMPRESSION ${codec})`);
// Added later. 'lz4_raw' (DuckDB's 'lz4' is the same) writes codec LZ4_RAW (7), not the deprecated LZ4 (5).
// PARQUET_VERSION v2 keeps DATA_PAGE (v1) headers but switches encodings: DELTA_BINARY_PACKED ints,
// DELTA_LENGTH_BYTE_ARRAY strings, BYTE_STREAM_SPLIT double, RLE_DICTIONARY (not PLAIN_DICTIONARY) for f.
for (const [name, opts] of [['lz4raw', 'COMPRESSION lz4_raw'], ['brotli', 'COMPRESSION brotli'],
  ['v2', 'COMPRESSION snappy, PARQUET_VERSION v2']])
  await db.run(`COPY types TO '${P(`types_${name}.parquet`)}' (FORMAT parquet, ${opts})`);

// ---- map.parquet: a MAP column ---------------------------------------------------------------------
await db.run(`COPY (SELECT * FROM (VALUES (MAP {'a': 1, 'b': 2}, 1), (MAP {}, 2), (NULL, 3)) t(m, k))
  TO '${P('map.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);

// ---- Added later. logical: unsigned / small ints, decimals, enum (all nullable) -----------------
// DuckDB writes DECIMAL(9,2) as INT32 and DECIMAL(18,3) as INT64 (DECIMAL annotation), the unsigned
// types as INT32/INT64 with UINT_* / INTEGER(bits, false), TINYINT/SMALLINT as INT32 with INT_8/INT_16,
// and ENUM as a plain UTF8 BYTE_ARRAY. Decimals have <= 15 significant digits (|dec_b| < 10^12, unscaled
// < 10^15), so the JSON number DuckDB prints reads back as exactly the stored decimal's double (checked below).
await db.run(`CREATE TABLE logical AS SELECT
  CASE r % 9 WHEN 0 THEN NULL WHEN 1 THEN 0 WHEN 2 THEN 255 WHEN 3 THEN 128 ELSE (r * 37) % 256 END::UTINYINT AS u8,
  CASE r % 10 WHEN 0 THEN NULL WHEN 1 THEN 0 WHEN 2 THEN 65535 WHEN 3 THEN 32768 ELSE (r * 7919) % 65536 END::USMALLINT AS u16,
  CASE r % 11 WHEN 0 THEN NULL WHEN 1 THEN 4294967295 WHEN 2 THEN 2147483648 WHEN 3 THEN 0 WHEN 4 THEN 2147483647
    ELSE (r * 2654435761) % 4294967296 END::UINTEGER AS u32,
  CASE r % 12 WHEN 0 THEN NULL WHEN 1 THEN 9223372036854775807 WHEN 2 THEN 9007199254740993 WHEN 3 THEN 0
    WHEN 4 THEN 9223372036854775806 WHEN 5 THEN 4294967296 ELSE r * 123456789012345678 END::UBIGINT AS u64,
  CASE r % 8 WHEN 0 THEN NULL WHEN 1 THEN -128 WHEN 2 THEN 127 WHEN 3 THEN 0 ELSE (r * 37) % 256 - 128 END::TINYINT AS i8,
  CASE r % 9 WHEN 0 THEN NULL WHEN 1 THEN -32768 WHEN 2 THEN 32767 WHEN 3 THEN -1 ELSE (r * 7919) % 65536 - 32768 END::SMALLINT AS i16,
  CASE r % 7 WHEN 0 THEN NULL WHEN 1 THEN 1234567.89 WHEN 2 THEN -1234567.89 WHEN 3 THEN 0 WHEN 4 THEN -0.01
    WHEN 5 THEN 9999999.99 ELSE ((r * 1234567891) % 1999999999 - 999999999) * 0.01 END::DECIMAL(9,2) AS dec_a,
  CASE r % 6 WHEN 0 THEN NULL WHEN 1 THEN 123456789012.345 WHEN 2 THEN -123456789012.345 WHEN 3 THEN 0 WHEN 4 THEN 0.001
    ELSE ((r * 28147497671065) % 1999999999999999 - 999999999999999) * 0.001 END::DECIMAL(18,3) AS dec_b,
  CASE WHEN r % 5 = 0 THEN NULL ELSE (['a', 'bb', 'ccc'])[r % 3 + 1] END::ENUM('a', 'bb', 'ccc') AS e
  FROM range(40) t(r) ORDER BY r`);
await db.run(`COPY logical TO '${P('logical.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);
for (const [a, b] of await rows(`SELECT to_json(t)::VARCHAR, [dec_a::VARCHAR, dec_b::VARCHAR]::VARCHAR
    FROM read_parquet('${P('logical.parquet')}') t`)) {
  const j = JSON.parse(a), [da, db_] = b.slice(1, -1).split(', ');
  if (j.dec_a !== (da === 'NULL' ? null : Number(da)) || j.dec_b !== (db_ === 'NULL' ? null : Number(db_)))
    throw new Error(`logical: decimals ${b} printed as ${a}`);
}
// u64_big: a UBIGINT above INT64_MAX; blob: a BLOB (no UTF8 annotation) whose 2nd value is not UTF-8.
// The reader is expected to refuse both values, so neither has a .jsonl.
await db.run(`COPY (SELECT * FROM (VALUES (1::UBIGINT), (18446744073709551615::UBIGINT)) t(u))
  TO '${P('u64_big.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);
await db.run(`COPY (SELECT * FROM (VALUES ('ok'::BLOB), ('\\xff\\xfe\\x00\\x80'::BLOB)) t(b))
  TO '${P('blob.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);

// ---- Added later. flba: FIXED_LEN_BYTE_ARRAY columns (all nullable) -------------------------------
// DuckDB writes DECIMAL with precision > 18 as FIXED_LEN_BYTE_ARRAY(16) (big-endian two's complement; 16
// bytes even for DECIMAL(20,0), which would fit in 9) with ConvertedType DECIMAL + LogicalType
// DECIMAL, and UUID as FIXED_LEN_BYTE_ARRAY(16) with LogicalType UUID only (checked below); all PLAIN.
// Values cover 0, ±1 unscaled, byte boundaries (unscaled 128, -128, -129, 256, 255, -256), 2^63 / -2^64
// unscaled, 2^64, -(2^63+1), ±(10^precision - 1), and hash-scattered 20-35 digit values. Unlike the
// INT32 decimals in logical, to_json prints these as exact JSON numbers keeping all `scale` digits
// (0.0000, -1.5000; dec20 as plain integers), i.e. exactly dec::VARCHAR (checked below).
await db.run(`CREATE TABLE flba AS SELECT
  CASE r % 15 WHEN 0 THEN NULL WHEN 1 THEN '12345678901234567890.1234' WHEN 2 THEN '-99999999999999999999999999999999.9999'
    WHEN 3 THEN '0' WHEN 4 THEN '0.0001' WHEN 5 THEN '-0.0001' WHEN 6 THEN '9999999999999999999999999999999999.9999'
    WHEN 7 THEN '-9999999999999999999999999999999999.9999' WHEN 8 THEN (CASE WHEN r < 15 THEN '0.0128' ELSE '-0.0129' END)
    WHEN 9 THEN (CASE WHEN r < 15 THEN '-0.0128' ELSE '0.0256' END) WHEN 10 THEN '-1.5'
    WHEN 11 THEN '922337203685477.5808' WHEN 12 THEN '-1844674407370955.1616'
    ELSE CASE WHEN h < 0 THEN '-' ELSE '' END || abs(h) // 10000 || '.' || lpad((abs(h) % 10000)::VARCHAR, 4, '0')
    END::DECIMAL(38,4) AS dec38,
  CASE r % 10 WHEN 0 THEN NULL WHEN 1 THEN 99999999999999999999 WHEN 2 THEN -99999999999999999999 WHEN 3 THEN 0
    WHEN 4 THEN (CASE WHEN r < 10 THEN 1 ELSE -1 END) WHEN 5 THEN 18446744073709551616 WHEN 6 THEN -9223372036854775809
    WHEN 7 THEN (CASE WHEN r < 10 THEN 255 ELSE -256 END) ELSE (r * 2345678901234567891::HUGEINT) * (r % 2 * 2 - 1) END::DECIMAL(20,0) AS dec20,
  CASE r % 8 WHEN 0 THEN NULL WHEN 1 THEN '00000000-0000-0000-0000-000000000000' WHEN 2 THEN 'ffffffff-ffff-ffff-ffff-ffffffffffff'
    WHEN 3 THEN (CASE WHEN r < 8 THEN '80000000-0000-0000-0000-000000000000' ELSE '7fffffff-ffff-ffff-ffff-ffffffffffff' END)
    ELSE md5('uuid ' || r) END::UUID AS u
  FROM (SELECT r, (r * 1234567890123456789012345678901234567::HUGEINT) % 100000000000000000000000000000000000::HUGEINT
    - 50000000000000000000000000000000000::HUGEINT AS h FROM range(30) t(r)) ORDER BY r`);
await db.run(`COPY flba TO '${P('flba.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);
{
  const want = 'dec38 FIXED_LEN_BYTE_ARRAY 16 DECIMAL|dec20 FIXED_LEN_BYTE_ARRAY 16 DECIMAL|u FIXED_LEN_BYTE_ARRAY 16 null';
  const got = (await rows(`SELECT name, type, type_length, converted_type FROM parquet_schema('${P('flba.parquet')}')
    WHERE type IS NOT NULL`)).map((r) => r.map(String).join(' ')).join('|');
  if (got !== want) throw new Error(`flba: schema ${got}`);
  for (const [j, a, b, c] of await rows(`SELECT to_json(t)::VARCHAR, dec38::VARCHAR, dec20::VARCHAR, u::VARCHAR
      FROM read_parquet('${P('flba.parquet')}') t`))
    if (j !== `{"dec38":${a ?? 'null'},"dec20":${b ?? 'null'},"u":${c === null ? 'null' : `"${c}"`}}`)
      throw new Error(`flba: ${[a, b, c]} printed as ${j}`);
}

// ---- Added later. maps: MAP columns (a readable counterpart of map.parquet) ----------------------
// DuckDB writes MAP as the standard 3-level layout: <name> OPTIONAL group (ConvertedType MAP, no
// LogicalType) > key_value REPEATED group (no annotation) > key REQUIRED, value OPTIONAL. to_json prints a
// MAP as a JSON object, keys as strings (integer keys in decimal), in map order; {} for an empty map.
// No NULL keys (DuckDB forbids them).
await db.run(`CREATE TABLE maps AS SELECT r::INTEGER AS id,
  CASE r % 8 WHEN 0 THEN NULL WHEN 1 THEN MAP {} WHEN 2 THEN MAP {'a': r} WHEN 3 THEN MAP {'a': 1, 'b': NULL}
    WHEN 4 THEN MAP {'k' || r: -r, '': 0, 'naïve 数学 🚀': 2147483647} WHEN 5 THEN MAP {'x': NULL}
    WHEN 6 THEN MAP {'quote " backslash \\': -2147483648, 'b': r * 1000}
    ELSE MAP {'z': r, 'y': NULL, 'a': r % 3} END::MAP(VARCHAR, INTEGER) AS m1,
  CASE r % 7 WHEN 0 THEN MAP {} WHEN 1 THEN NULL WHEN 2 THEN MAP {r: 'v' || r}
    WHEN 3 THEN MAP {-2147483648: 'min', 2147483647: NULL, 0: ''} WHEN 4 THEN MAP {-1: NULL}
    WHEN 5 THEN MAP {r * 100: 'a', -r: 'b'} ELSE MAP {1: 'one', 2: 'two', 3: 'three'} END::MAP(INTEGER, VARCHAR) AS m2
  FROM range(20) t(r) ORDER BY r`);
await db.run(`COPY maps TO '${P('maps.parquet')}' (FORMAT parquet, COMPRESSION snappy)`);

// ---- parquet-wasm (arrow-rs): data page v1/v2, plain / delta / dictionary -----------------------
const N = 250, ids = [], ss = [], xs = [], flags = [], lis = [];
for (let r = 0; r < N; r++) {
  ids.push(BigInt(r) * 4294967311n - 1000000000000n);          // crosses 2^32, negatives
  ss.push(r % 7 === 0 ? null : r % 5 === 0 ? '' : `s${r % 23}-é😀`);  // repeats -> dictionary-friendly
  xs.push(r % 6 === 0 ? null : (r - 250) * 0.5);
  flags.push(r % 3 === 1);
  lis.push(r % 9 === 0 ? null : r % 9 === 1 ? [] : [r, r % 4 === 0 ? null : -r, r % 10]);
}
const table = new arrow.Table({
  id: arrow.vectorFromArray(ids, new arrow.Int64()),
  s: arrow.vectorFromArray(ss, new arrow.Utf8()),
  x: arrow.vectorFromArray(xs, new arrow.Float64()),
  flag: arrow.vectorFromArray(flags, new arrow.Bool()),
  li: arrow.vectorFromArray(lis, new arrow.List(new arrow.Field('item', new arrow.Int32(), true))),
});
const pwWrite = (file, version, compression, dict, encoding, tbl = table) => {
  let b = new pw.WriterPropertiesBuilder().setWriterVersion(version).setCompression(compression)
    .setDictionaryEnabled(dict).setDataPageSizeLimit(1024).setWriteBatchSize(64); // several pages per chunk
  if (encoding !== undefined) b = b.setEncoding(encoding);
  const bytes = pw.writeParquet(pw.Table.fromIPCStream(arrow.tableToIPC(tbl, 'stream')), b.build());
  fs.writeFileSync(path.resolve(out, file), bytes);
};
const { V1, V2 } = pw.WriterVersion, { SNAPPY, ZSTD, LZ4 } = pw.Compression, { PLAIN, BYTE_STREAM_SPLIT } = pw.Encoding;
pwWrite('v1_plain_snappy.parquet', V1, SNAPPY, false, PLAIN);
pwWrite('v2_plain_zstd.parquet', V2, ZSTD, false, PLAIN);
pwWrite('v2_delta_zstd.parquet', V2, ZSTD, false);   // no dictionary: arrow-rs's V2 defaults (DELTA_*, RLE)
pwWrite('v2_dict_zstd.parquet', V2, ZSTD, true);
// Added later. lz4_hadoop: the deprecated codec LZ4 (5); arrow-rs writes each page as one Hadoop frame
// (big-endian u32 decompressed size, u32 compressed size, raw LZ4 block). Same table as v1_plain_snappy.
pwWrite('lz4_hadoop.parquet', V1, LZ4, false, PLAIN);
// bss_zstd: BYTE_STREAM_SPLIT for every column (floats and, since Parquet 2.11, ints), V2, ZSTD.
// Float values are short dyadic decimals exact in float32 (so any printer gives DuckDB's text), no NaN/Inf/-0.
const bss = { f: [], d: [], i: [], l: [] };
for (let r = 0; r < 300; r++) {
  bss.f.push(r % 10 === 0 ? null : r % 10 === 5 ? ((r * 31) % 1000 - 500) * 1048576 : ((r * 7919) % 4001 - 2000) * 0.125);
  bss.d.push(r % 7 === 0 ? null : r % 7 === 3 ? ((r * 131) % 255 + 1) / 256 : ((r * 104729) % 2000003 - 1000001) * 0.5);
  bss.i.push(r === 1 ? -2147483648 : r === 2 ? 2147483647 : Math.imul(r, 2654435761 | 0));
  bss.l.push(r === 1 ? -9223372036854775808n : r === 2 ? 9223372036854775807n
    : BigInt.asIntN(64, BigInt(r) * 0x9E3779B97F4A7C15n));
}
const shortest32 = (x) => { for (let p = 1; ; p++) { const t = Number(x.toPrecision(p)); if (Math.fround(t) === x) return t; } };
for (const x of [...bss.f, ...bss.d]) if (x !== null && (Math.fround(x) !== x || Object.is(x, -0) || shortest32(x) !== x))
  throw new Error(`bss: ${x} is not a short float32-exact value`);
const bssCols = [['f', new arrow.Float32(), true], ['d', new arrow.Float64(), true], // i, l: REQUIRED
  ['i', new arrow.Int32(), false], ['l', new arrow.Int64(), false]];
const bssSchema = new arrow.Schema(bssCols.map(([n, t, nullable]) => new arrow.Field(n, t, nullable)));
const bssTable = new arrow.Table(new arrow.RecordBatch(bssSchema, arrow.makeData({ type: new arrow.Struct(bssSchema.fields),
  length: 300, nullCount: 0, children: bssCols.map(([n, t]) => arrow.vectorFromArray(bss[n], t).data[0]) })));
pwWrite('bss_zstd.parquet', V2, ZSTD, false, BYTE_STREAM_SPLIT, bssTable);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pq-twin-'));
pwWrite(path.join(tmp, 'bss_plain_zstd.parquet'), V2, ZSTD, false, PLAIN, bssTable);

// ---- expected rows: DuckDB's reading of each file, then sanity checks --------------------------
// Files with the same content (types_*, v1_*/v2_*) read back identically; to keep the fixtures small
// the later X.jsonl are then relative symlinks to the first one with that exact text.
// Files added later go last, so that the older X.jsonl stay the real files (types_gzip, v1_plain_snappy).
const late = ['types_lz4raw', 'types_brotli', 'types_v2', 'bss_zstd', 'lz4_hadoop', 'logical', 'flba', 'maps'].map((n) => n + '.parquet');
const twin = { 'lz4_hadoop.parquet': P('v1_plain_snappy.parquet'), 'bss_zstd.parquet': path.join(tmp, 'bss_plain_zstd.parquet') };
const arrowRows = (file) => JSON.stringify(arrow.tableFromIPC(pw.readParquet(fs.readFileSync(file)).intoIPCStream()).toArray(),
  (k, v) => (typeof v === 'bigint' ? String(v) : v));
for (const [f, t] of Object.entries(twin))
  if (arrowRows(P(f)) !== arrowRows(t)) throw new Error(`${f}: arrow-rs reads it unlike its twin ${t}`);
const fd = async (file) => JSON.stringify(await rows(`SELECT to_json(t)::VARCHAR FROM (SELECT f, d FROM read_parquet('${file}')) t`));
if (await fd(P('bss_zstd.parquet')) !== await fd(twin['bss_zstd.parquet'])) throw new Error('bss_zstd: DuckDB reads f, d unlike the twin');
const seen = new Map();
const noJsonl = ['u64_big.parquet', 'blob.parquet'];
const files = fs.readdirSync(out).filter((f) => f.endsWith('.parquet') && !noJsonl.includes(f)).sort();
for (const f of [...files.filter((f) => !late.includes(f)), ...late.filter((f) => files.includes(f))]) {
  const src = P(f), dst = src.replace(/\.parquet$/, '.jsonl');
  const lines = (await rows(`SELECT to_json(t)::VARCHAR FROM read_parquet('${twin[f] ?? src}') t`)).map((r) => r[0]);
  const text = lines.map((l) => l + '\n').join('');
  fs.rmSync(dst, { force: true });
  if (seen.has(text)) fs.symlinkSync(seen.get(text), dst);
  else { fs.writeFileSync(dst, text); seen.set(text, path.basename(dst)); }
  const [[n]] = await rows(`SELECT num_rows FROM parquet_file_metadata('${src}')`);
  lines.forEach((l) => JSON.parse(l));
  if (BigInt(lines.length) !== BigInt(n)) throw new Error(`${f}: ${lines.length} lines, ${n} rows`);
  if (lines.some((l) => /\b(NaN|-?Infinity|inf|nan)\b/.test(l.replace(/"(\\.|[^"\\])*"/g, '""'))))
    throw new Error(`${f}: NaN/Inf in expected rows`);
  console.log(`${f}: ${n} rows -> ${path.basename(dst)}${fs.lstatSync(dst).isSymbolicLink() ? ' -> ' + fs.readlinkSync(dst) : ''}`);
}
fs.rmSync(tmp, { recursive: true });
