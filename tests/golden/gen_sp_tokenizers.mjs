// Writes the SentencePiece-style (Llama-2 layout) BPE tokenizer fixtures and their goldens:
//   tests/fixtures/sp_tokenizers/{llama2_legacy,metaspace_first,metaspace_split,unk_fused}/
//       tokenizer.json, tokenizer_config.json            (see tests/fixtures/sp_tokenizers/README.md)
//   tests/golden/sp_tokenizers.json                      encodings / decodings by HF tokenizers
// The pieces are learned here by a small deterministic BPE trainer (plain JS, below) on the GSM8K
// train questions+answers and MATH-500 problems in <repo>/../shared/data (gsm8k/train.jsonl,
// math500/test.jsonl), plus a tiny synthetic code snippet so that runs of spaces are merged.
// The goldens come from Hugging Face `tokenizers` (Rust core) through its Node binding.
// Dataset texts are not copied into the goldens: a case names {source, line (0-based), field}, and
// its decodings are given only as FNV-1a 64 hashes (UTF-8 bytes) with byte lengths.
// Not run by CI; run it by hand to regenerate (the package is resolved from the current directory):
//   mkdir /tmp/g && cd /tmp/g && npm install tokenizers@0.23.2
//   node /path/to/repo/tests/golden/gen_sp_tokenizers.mjs [DATA_DIR]   (default: <repo>/../shared/data)
// Output is deterministic: re-running gives byte-identical files.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const req = createRequire(path.join(process.cwd(), '_'));
const { Tokenizer } = req('tokenizers');
const TOK_VERSION = JSON.parse(fs.readFileSync(req.resolve('tokenizers/package.json'), 'utf8')).version;

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const dataDir = path.resolve(process.argv[2] ?? path.join(repo, '..', 'shared', 'data'));
const fixDir = path.join(repo, 'tests', 'fixtures', 'sp_tokenizers');
const goldenPath = path.join(repo, 'tests', 'golden', 'sp_tokenizers.json');

const SP = '\u2581'; // ▁
const N_MERGES = 1000;
const MIN_CHAR_COUNT = 20;
// Always in the alphabet although (nearly) absent from the corpus: multi-byte chars looked up as pieces.
const FORCED_CHARS = ['\u00e9', '\u00b0', '\u20ac', '\u2014']; // é ° € —
// Never in the alphabet: Llama 2 encodes these through byte fallback (<0x0A>, <0x09>, <0x0D>).
const EXCLUDED_CHARS = new Set(['\n', '\t', '\r']);
// Synthetic (written for this generator) indented code, counted CODE_WEIGHT times, so that the
// merges build runs of ▁ (▁▁, ▁▁▁, ▁▁▁▁) as Llama 2's vocabulary has.
const CODE_SNIPPET = [
  'def total_cost(items):',
  '    total = 0',
  '    for item in items:',
  '        if item.price > 0:',
  '            total += item.price * item.count',
  '    return total',
  '',
].join('\n');
const CODE_WEIGHT = 100;

// ---------------------------------------------------------------- corpus
const readJsonl = (rel) =>
  fs.readFileSync(path.join(dataDir, rel), 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
const gsm = readJsonl('gsm8k/train.jsonl');
const math = readJsonl('math500/test.jsonl');
const corpus = []; // [text, weight]
for (const o of gsm) { corpus.push([o.question, 1]); corpus.push([o.answer, 1]); }
for (const o of math) corpus.push([o.problem, 1]);
corpus.push([CODE_SNIPPET, CODE_WEIGHT]);

// ---------------------------------------------------------------- alphabet
const charCount = new Map();
for (const [t, w] of corpus) for (const c of SP + t.replaceAll(' ', SP)) charCount.set(c, (charCount.get(c) ?? 0) + w);
const cmpStr = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
const alphabet = new Set();
for (const [c, n] of charCount) if (n >= MIN_CHAR_COUNT && !EXCLUDED_CHARS.has(c)) alphabet.add(c);
for (const c of FORCED_CHARS) alphabet.add(c);
// Single chars go at the end of the vocabulary (as in Llama 2), most frequent first.
const alphabetOrder = [...alphabet].sort((a, b) => (charCount.get(b) ?? 0) - (charCount.get(a) ?? 0) || cmpStr(a, b));

// ---------------------------------------------------------------- words (SentencePiece-like)
// Text -> '▁' + text with ' ' -> '▁'. Chars outside the alphabet separate words (they would be
// byte-fallback tokens). A word is a ▁ followed by non-▁ chars; a run of k > 1 ▁ before a word
// gives a whitespace-only word of k-1 ▁ and then the word with one ▁; a trailing run stays whole.
const wordCount = new Map();
const addWord = (w, n) => { if (w.length) wordCount.set(w, (wordCount.get(w) ?? 0) + n); };
function flush(cur, n) {
  if (!cur.length) return;
  let k = 0;
  while (k < cur.length && cur[k] === SP) k++;
  if (k === cur.length) { addWord(cur.join(''), n); return; }
  if (k > 1) addWord(SP.repeat(k - 1), n);
  addWord(cur.slice(Math.max(k - 1, 0)).join(''), n);
}
for (const [t, n] of corpus) {
  let cur = [];
  for (const c of SP + t.replaceAll(' ', SP)) {
    if (!alphabet.has(c)) { flush(cur, n); cur = []; continue; }
    if (c === SP && cur.some((x) => x !== SP)) { flush(cur, n); cur = []; }
    cur.push(c);
  }
  flush(cur, n);
}

// ---------------------------------------------------------------- BPE training
// Most frequent adjacent pair wins; ties: smaller left symbol, then smaller right symbol (UTF-16 order).
const words = [...wordCount].sort((a, b) => cmpStr(a[0], b[0])).map(([w, n]) => ({ s: [...w], n }));
const merges = [];
const pairs = new Map(); // 'a\0b' -> weighted count, kept up to date as words are merged
const addPairs = (s, n) => {
  for (let i = 0; i + 1 < s.length; i++) {
    const k = s[i] + '\u0000' + s[i + 1];
    const v = (pairs.get(k) ?? 0) + n;
    if (v) pairs.set(k, v); else pairs.delete(k);
  }
};
for (const { s, n } of words) addPairs(s, n);
for (let it = 0; it < N_MERGES; it++) {
  let best = null, bestN = 0;
  for (const [k, n] of pairs) if (n > bestN || (n === bestN && best !== null && cmpStr(k, best) < 0)) { best = k; bestN = n; }
  if (best === null || bestN < 2) break;
  const [a, b] = best.split('\u0000');
  merges.push([a, b]);
  for (const w of words) {
    const s = w.s;
    let hit = false;
    for (let i = 0; i + 1 < s.length; i++) if (s[i] === a && s[i + 1] === b) { hit = true; break; }
    if (!hit) continue;
    const out = [];
    for (let i = 0; i < s.length; i++) {
      if (i + 1 < s.length && s[i] === a && s[i + 1] === b) { out.push(a + b); i++; } else out.push(s[i]);
    }
    addPairs(s, -w.n);
    addPairs(out, w.n);
    w.s = out;
  }
}

// ---------------------------------------------------------------- vocabulary
// A Map, not an object: JS would put integer-like keys ("0", "12", ...) first; the file lists ids in order.
const vocab = new Map([['<unk>', 0], ['<s>', 1], ['</s>', 2]]);
for (let b = 0; b < 256; b++) vocab.set('<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>', 3 + b);
let nextId = 259;
for (const [a, b] of merges) if (!vocab.has(a + b)) vocab.set(a + b, nextId++);
for (const c of alphabetOrder) if (!vocab.has(c)) vocab.set(c, nextId++);
const VOCAB_SIZE = nextId;
for (const [a, b] of merges) for (const x of [a, b, a + b]) if (!vocab.has(x)) throw new Error('merge part not in vocab: ' + x);
for (const need of [SP + SP, SP + SP + SP + SP, '\u00e9', '\u20ac']) if (!vocab.has(need)) throw new Error('missing piece ' + need);
if (vocab.has('\n') || vocab.has('\t')) throw new Error('newline/tab must not be pieces');

// ---------------------------------------------------------------- tokenizer.json layouts
const added = (id, content, special) =>
  ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special });
const SPECIALS = [added(0, '<unk>', true), added(1, '<s>', true), added(2, '</s>', true)];
const TOOL = '<|tool|>';
const TOOL_ID = VOCAB_SIZE;
const bosTemplate = {
  type: 'TemplateProcessing',
  single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
  pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
    { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
  special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
};
const llamaDecoder = {
  type: 'Sequence',
  decoders: [
    { type: 'Replace', pattern: { String: SP }, content: ' ' },
    { type: 'ByteFallback' },
    { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 },
  ],
};
const legacyNormalizer = {
  type: 'Sequence',
  normalizers: [{ type: 'Prepend', prepend: SP }, { type: 'Replace', pattern: { String: ' ' }, content: SP }],
};
const bpeModel = (byteFallback) => ({
  type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
  fuse_unk: true, byte_fallback: byteFallback, ignore_merges: false,
  vocab, merges: merges.map(([a, b]) => a + ' ' + b),
});
const tokJson = (o) => ({ version: '1.0', truncation: null, padding: null, ...o });
const VARIANTS = {
  llama2_legacy: {
    legacy: true,
    json: tokJson({ added_tokens: SPECIALS, normalizer: legacyNormalizer, pre_tokenizer: null,
      post_processor: bosTemplate, decoder: llamaDecoder, model: bpeModel(true) }),
  },
  metaspace_first: {
    legacy: false,
    json: tokJson({ added_tokens: [...SPECIALS, added(TOOL_ID, TOOL, false)], normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: SP, prepend_scheme: 'first', split: false },
      post_processor: bosTemplate, decoder: llamaDecoder, model: bpeModel(true) }),
  },
  metaspace_split: {
    legacy: true,
    json: tokJson({ added_tokens: SPECIALS, normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: SP, prepend_scheme: 'always', split: true },
      post_processor: bosTemplate,
      decoder: { type: 'Metaspace', replacement: SP, prepend_scheme: 'always', split: true },
      model: bpeModel(true) }),
  },
  unk_fused: {
    legacy: true,
    json: tokJson({ added_tokens: SPECIALS, normalizer: legacyNormalizer, pre_tokenizer: null,
      post_processor: bosTemplate, decoder: llamaDecoder, model: bpeModel(false) }),
  },
};

// Pretty JSON like HF's save(pretty=true): 2-space indent, but small objects/arrays (added tokens,
// template pieces, decoders) on one line each; vocab and merges one entry per line.
function pretty(v, ind = '') {
  const inner = ind + '  ';
  if (v instanceof Map) return '{\n' + [...v].map(([k, x]) => inner + JSON.stringify(k) + ': ' + JSON.stringify(x)).join(',\n') + '\n' + ind + '}';
  if (Array.isArray(v)) {
    if (!v.length) return '[]';
    if (v.every((x) => typeof x !== 'object' || x === null)) return '[\n' + v.map((x) => inner + JSON.stringify(x)).join(',\n') + '\n' + ind + ']';
    return '[\n' + v.map((x) => inner + pretty(x, inner)).join(',\n') + '\n' + ind + ']';
  }
  if (v && typeof v === 'object') {
    const flat = JSON.stringify(v);
    if (flat.length <= 120) return flat.replace(/,"/g, ', "').replace(/":/g, '": ');
    const ks = Object.keys(v);
    if (!ks.length) return '{}';
    return '{\n' + ks.map((k) => inner + JSON.stringify(k) + ': ' + pretty(v[k], inner)).join(',\n') + '\n' + ind + '}';
  }
  return JSON.stringify(v);
}

const tokenizers = {};
for (const [name, v] of Object.entries(VARIANTS)) {
  const dir = path.join(fixDir, name);
  fs.mkdirSync(dir, { recursive: true });
  const text = pretty(v.json) + '\n';
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), text);
  const cfg = { add_bos_token: true, add_eos_token: false, bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>',
    pad_token: null, clean_up_tokenization_spaces: false, legacy: v.legacy, tokenizer_class: 'LlamaTokenizer' };
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg, null, 2) + '\n');
  const back = JSON.parse(text);
  if (JSON.stringify({ ...back, model: null }) !== JSON.stringify({ ...v.json, model: null }) ||
      JSON.stringify({ ...back.model, vocab: null }) !== JSON.stringify({ ...v.json.model, vocab: null }) ||
      Object.keys(back.model.vocab).length !== vocab.size || [...vocab].some(([k, i]) => back.model.vocab[k] !== i))
    throw new Error('pretty printer changed ' + name);
  tokenizers[name] = Tokenizer.fromString(text);
}

// ---------------------------------------------------------------- cases
const GSM_CASES = [ // [line, field]: plain, ’, €, é, ñ, double spaces, £, ×/−, ÷, √, –
  [0, 'question'], [0, 'answer'], [22, 'question'], [10, 'answer'], [423, 'question'], [423, 'answer'],
  [2190, 'question'], [45, 'question'], [4, 'question'], [44, 'answer'], [75, 'question'], [53, 'answer'],
  [267, 'answer'], [1323, 'answer'], [28, 'answer'], [7472, 'answer'],
];
const MATH_CASES = [0, 1, 4, 11, 17, 44, 62, 88, 426, 499]; // LaTeX, [asy], \begin, tabs (17, 426), double spaces
const LONG = ('The train leaves at 3:45 pm and travels 120 miles at 60 mph, so it arrives 2 hours later, at 5:45 pm.\n' +
  'Tickets cost $12.50 each; 4 tickets cost 4 * 12.50 = <<4*12.5=50>>50 dollars.\n').repeat(13);
const HAND = [
  ['empty', ''], ['space', ' '], ['two_spaces', '  '], ['a', 'a'], ['hello_world', 'Hello world'],
  ['leading_space', ' leading space'], ['trailing_space', 'trailing space '], ['multiple_spaces', 'multiple   spaces'],
  ['five_spaces', '     five spaces'], ['only_spaces_8', '        '],
  ['tab', 'tab\there'], ['tabs_indent', '\t\tindented with tabs'], ['line_break', 'line\nbreak\n\n'], ['newline', '\n'],
  ['crlf', 'a\r\nb'], ['emoji', '\u{1F680} rocket'], ['cjk', '\u4f60\u597d\uff0c\u4e16\u754c'],
  ['e_acute_nfc', '\u00e9'], ['e_acute_nfd', 'e\u0301'], ['naive_cafe', 'na\u00efve caf\u00e9'],
  ['in_vocab_non_ascii', 'It\u2019s 12 \u20ac \u2014 about 20 \u00b0C, 5\u00d73 \u00f7 2 \u2212 1 = 6.5'],
  ['nbsp', 'x\u00a0y'], ['literal_metaspace', 'x\u2581y'], ['literal_metaspace_start', '\u2581start'],
  ['literal_byte_token', '<0x41>'], ['specials_middle', 'Hello <s> world </s> end'], ['bos_start', '<s>Hello'],
  ['eos_middle', 'Hello</s>world'], ['eos_alone', '</s>'], ['bos_alone', '<s>'], ['bos_bos_spaces', ' <s> <s> x'],
  ['unk_text', '<unk>'], ['unk_in_text', 'a <unk> b'],
  ['tool_call', '<|tool|>call'], ['tool_middle', 'x <|tool|> y'], ['tool_alone', '<|tool|>'],
  ['tool_leading_space', '<|tool|> leading'], ['tool_twice', 'a<|tool|>b<|tool|>c'], ['bos_tool', '<s><|tool|>x'],
  ['exclaim_bytes', 'Wow!!! Really?!'], ['calculator', '<<48/2=24>>24 clips'],
  ['l_x300', 'l'.repeat(300)], ['l_x301', 'l'.repeat(301)], ['zero_x300', '0'.repeat(300)], ['digits', '1234567890'],
  ['code', 'def f():\n    return 1'], ['code_deep', 'if x:\n        y = 2\n            z = 3'],
  ['long_2k', LONG],
];
if (LONG.length < 2000) throw new Error('LONG too short');

const ids = (tok) => (s) => s.map((p) => { const i = tok.tokenToId(p); if (i === null || i === undefined) throw new Error('no piece ' + p); return i; });
const B = (h) => '<0x' + h + '>';
function decodeCases(name) {
  const P = ids(tokenizers[name]);
  const c = [
    ['emoji_bytes', P([B('F0'), B('9F'), B('9A'), B('80')])],
    ['truncated_then_piece', P([B('E6'), B('97'), SP + 'the'])],
    ['lone_continuation', P([B('80')])],
    ['byte_ff', P([B('FF')])],
    ['valid_and_invalid_one_run', P([B('41'), B('FF'), B('42')])],
    ['valid_char_then_truncated', P([B('E6'), B('97'), B('A5'), B('E6')])],
    ['bytes_between_pieces', P([SP + 'The', SP, B('C3'), B('A9'), SP + 'is', B('0A'), SP + 'the'])],
    ['first_piece_metaspace', P([SP + 'The', SP + 'is'])],
    ['first_byte_space', P([B('20'), 'is'])],
    ['first_two_byte_spaces', P([B('20'), B('20'), 'is'])],
    ['first_byte_newline', P([B('0A'), SP + 'The'])],
    ['first_space_runs', P([SP + SP + SP + SP, SP + 'total'])],
    ['first_lone_metaspaces', P([SP, SP, 'a'])],
    ['bos_then_piece', P(['<s>', SP + 'The'])],
    ['bos_bos_piece_eos', P(['<s>', '<s>', SP + 'The', '</s>'])],
    ['eos_then_piece', P(['</s>', SP + 'the'])],
    ['unk_alone', P(['<unk>'])],
    ['unk_between', P([SP + 'the', '<unk>', SP + 'is', '<unk>', '<unk>'])],
    ['empty', []],
  ];
  if (name === 'metaspace_first') {
    c.push(['tool_then_piece', [TOOL_ID, ...P([SP + 'the'])]]);
    c.push(['piece_tool_piece', [...P([SP + 'the']), TOOL_ID, ...P(['is'])]]);
  }
  return c;
}

const esc = (s) => JSON.stringify(s);
// FNV-1a 64 over the UTF-8 bytes (as src/util/hash.h df_fnv1a_n), as "0x" + 16 lowercase hex digits.
function fnv1a64(str) {
  let h = 1469598103934665603n; // the offset basis of src/util/hash.h (not the standard 14695981039346656037)
  for (const byte of Buffer.from(str, 'utf8')) h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return '0x' + h.toString(16).padStart(16, '0');
}
const cases = [], dcases = [];
const lossy = {}; // variant -> cases whose decoded_skip differs from the text (printed, for information)
for (const name of Object.keys(VARIANTS)) {
  const tok = tokenizers[name];
  const notes = lossy[name] = [];
  const doCase = async (ref, text) => {
    const e = await tok.encode(text, null, { addSpecialTokens: false });
    const es = await tok.encode(text, null, { addSpecialTokens: true });
    const idsSp = es.getIds();
    const decoded = await tok.decode(idsSp, false), decodedSkip = await tok.decode(idsSp, true);
    const rec = { tokenizer: name, ...ref, ids: e.getIds(), ids_special: idsSp };
    if (ref.source) { // dataset text: no copy of it (nor of its decodings) in the repository, only hashes
      Object.assign(rec, { decoded_fnv1a64: fnv1a64(decoded), decoded_bytes: Buffer.byteLength(decoded),
        decoded_skip_fnv1a64: fnv1a64(decodedSkip), decoded_skip_bytes: Buffer.byteLength(decodedSkip),
        decoded_skip_is_text: decodedSkip === text });
    } else Object.assign(rec, { decoded, decoded_skip: decodedSkip });
    if (decodedSkip !== text) notes.push(ref.name ?? `${ref.source.split('/')[0]}:${ref.line}:${ref.field}`);
    cases.push(rec);
  };
  for (const [line, field] of GSM_CASES) await doCase({ source: 'gsm8k/train.jsonl', line, field }, gsm[line][field]);
  for (const line of MATH_CASES) await doCase({ source: 'math500/test.jsonl', line, field: 'problem' }, math[line].problem);
  for (const [n, text] of HAND) await doCase({ name: n, text }, text);
  for (const [n, idl] of decodeCases(name))
    dcases.push({ tokenizer: name, name: n, ids: idl, decoded: await tok.decode(idl, false), decoded_skip: await tok.decode(idl, true) });
}

const header = `gen_sp_tokenizers.mjs with tokenizers (npm, HF Rust core) ${TOK_VERSION}: ` +
  'ids = encode(text, null, {addSpecialTokens:false}).getIds(), ids_special = encode(text, null, {addSpecialTokens:true}).getIds(), ' +
  'decoded = decode(ids_special, false), decoded_skip = decode(ids_special, true); dataset texts: <repo>/../shared/data/<source>, 0-based line, field, ' +
  'and for them decoded/decoded_skip are given as FNV-1a 64 (UTF-8 bytes, hex) + byte length, plus decoded_skip_is_text';
const out = '{"generator": ' + esc(header) + ',\n"vocab_size": ' + VOCAB_SIZE + ',\n"tool_token_id": ' + TOOL_ID +
  ',\n"cases": [\n' + cases.map((c) => JSON.stringify(c)).join(',\n') +
  '\n],\n"decode_cases": [\n' + dcases.map((c) => JSON.stringify(c)).join(',\n') + '\n]}\n';
fs.writeFileSync(goldenPath, out);

console.log(`vocab ${VOCAB_SIZE} (alphabet ${alphabet.size}, merges ${merges.length}), <|tool|> = ${TOOL_ID}`);
console.log(`alphabet non-ASCII: ${alphabetOrder.filter((c) => c.codePointAt(0) > 127).join(' ')}`);
console.log(`cases ${cases.length}, decode_cases ${dcases.length}, golden ${out.length} chars`);
for (const [n, l] of Object.entries(lossy)) console.log(`${n}: decoded_skip != text for ${l.length} cases: ${l.join(' ')}`);
