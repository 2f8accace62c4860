// Writes the tokenizer parity corpus (deterministic: fixed seed, Debian-shipped sources)
// as JSON [{name, text}] to argv[2]. Categories: English prose, code, CJK, Arabic and
// other scripts, emoji with ZWJ sequences, combining marks, whitespace runs, digits,
// special-token strings, odd Unicode and byte-looking text, and random mixtures.
'use strict';
const fs = require('fs');
const path = require('path');

let seed = 0x10043;
function rnd() {  // xorshift32
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const ri = (a, b) => a + Math.floor(rnd() * (b - a + 1));
const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
const cp = (c) => String.fromCodePoint(c);

function readIf(p, limit) {
  try { return fs.readFileSync(p, 'utf8').slice(0, limit); } catch (e) { return ''; }
}

const cases = [];
function add(name, text) { if (text.length) cases.push({ name, text }); }

// ---- English prose: Debian's license texts, in paragraphs of varying length.
const licenses = ['GPL-3', 'Apache-2.0', 'LGPL-2.1', 'MPL-2.0', 'Artistic', 'GFDL-1.3', 'BSD', 'CC0-1.0'];
let prose = '';
for (const l of licenses) prose += readIf(path.join('/usr/share/common-licenses', l), 60000) + '\n\n';
if (prose.length < 50000) throw new Error('gen_corpus: /usr/share/common-licenses is missing');
{
  let i = 0, k = 0;
  while (i < prose.length && k < 60) {
    const len = k % 10 === 0 ? ri(4000, 9000) : ri(300, 2500);
    add(`prose_${k}`, prose.slice(i, i + len));
    i += len; k++;
  }
}

// ---- Code: C headers and Python sources shipped by Debian.
const codeFiles = ['/usr/include/stdio.h', '/usr/include/string.h', '/usr/include/stdlib.h',
  '/usr/include/nlohmann/json.hpp', '/usr/lib/python3.11/textwrap.py', '/usr/lib/python3.11/json/encoder.py',
  '/usr/lib/python3.11/base64.py', '/usr/include/oniguruma.h'];
{
  let k = 0;
  for (const f of codeFiles) {
    const src = readIf(f, 30000);
    for (let i = 0; i < src.length && i < 12000; k++) {
      const len = ri(400, 3000);
      add(`code_${k}`, src.slice(i, i + len));
      i += len;
    }
  }
  add('code_js', fs.readFileSync(__filename, 'utf8').slice(0, 6000));
}

// ---- Scripts other than Latin.
const sentences = {
  zh: ['今天天气很好，我们去公园散步吧。', '机器学习是人工智能的一个分支。', '中华人民共和国成立于1949年。', '你好，世界！这是一个测试。'],
  ja: ['東京は日本の首都です。', 'ひらがなとカタカナと漢字を使います。', 'すみません、駅はどこですか？', 'ﾊﾝｶｸｶﾀｶﾅもあります。'],
  ko: ['안녕하세요, 만나서 반갑습니다.', '한국어는 한글로 씁니다.', '서울은 대한민국의 수도입니다.'],
  ar: ['مرحبا بالعالم، هذا اختبار.', 'اللغة العربية جميلة جداً.', 'القاهرة هي عاصمة مصر ٢٠٢٤.', 'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ'],
  he: ['שלום עולם, זה מבחן.', 'ירושלים היא עיר עתיקה.'],
  hi: ['नमस्ते दुनिया, यह एक परीक्षण है।', 'हिन्दी भारत की राजभाषा है।', 'क्षत्रिय ज्ञान श्री'],
  ru: ['Привет, мир! Это тест.', 'Москва — столица России.', 'Съешь же ещё этих мягких французских булок.'],
  el: ['Γειά σου κόσμε! Αυτό είναι μια δοκιμή.', 'ΣΟΦΟΣ σοφός ς'],
  th: ['สวัสดีชาวโลก นี่คือการทดสอบ', 'ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ'],
  vi: ['Xin chào thế giới, đây là một bài kiểm tra.', 'Tiếng Việt có nhiều dấu thanh.'],
  misc: ['Ἀρχὴ σοφίας', 'Ȃ Ḁ ẞ ǅ ǈ', 'İstanbul ılık ISTANBUL', 'Straße STRASSE ß ẞ', 'ﬁnance ﬂow Ⅻ ① ² ⁴ ½', 'Ａｂｃ１２３！', '𝔾𝕠𝕠𝕕 𝕞𝕠𝕣𝕟𝕚𝕟𝕘 𝐀𝐁𝐂', 'KELVIN K Ω Å'],
};
const langs = Object.keys(sentences);
for (let k = 0; k < 40; k++) {
  let s = '';
  const n = ri(3, 14);
  for (let i = 0; i < n; i++) {
    const l = k < langs.length * 2 ? langs[k % langs.length] : pick(langs);
    s += pick(sentences[l]) + pick([' ', '', '\n', '  ', '\t']);
  }
  add(`scripts_${k}`, s);
}
// Random CJK / Hangul / kana text (common ranges only).
for (let k = 0; k < 12; k++) {
  let s = '';
  const n = ri(50, 400);
  for (let i = 0; i < n; i++) {
    const r = rnd();
    if (r < 0.6) s += cp(ri(0x4E00, 0x9FA5));
    else if (r < 0.75) s += cp(ri(0x3041, 0x3096));
    else if (r < 0.85) s += cp(ri(0xAC00, 0xD7A3));
    else if (r < 0.9) s += cp(ri(0x30A1, 0x30FA));
    else s += pick(['，', '。', '！', '？', ' ', '\n', '「', '」', '、', '1', '2']);
  }
  add(`cjk_random_${k}`, s);
}

// ---- Emoji, skin tones, ZWJ families, flags, keycaps, variation selectors.
const emoji = ['😀', '🙂', '👍', '👍🏽', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '🇺🇸', '1️⃣', '#️⃣', '❤️', '❤', '☺︎', '🧑🏿‍🚀',
  '👁️‍🗨️', '🤷‍♀️', '🫠', '🥰', '🐈‍⬛', '✈️', '©', '™', '🔥🔥🔥', '🤖', '💯', '🏴󠁧󠁢󠁳󠁣󠁴󠁿'];
for (let k = 0; k < 20; k++) {
  let s = '';
  const n = ri(5, 60);
  for (let i = 0; i < n; i++) s += pick(emoji) + (rnd() < 0.5 ? pick([' ', '', 'ok', ' great ', '\n', '!']) : '');
  add(`emoji_${k}`, s);
}

// ---- Combining marks, decomposed / reordered sequences, Hangul jamo.
for (let k = 0; k < 20; k++) {
  let s = '';
  const n = ri(20, 150);
  for (let i = 0; i < n; i++) {
    const r = rnd();
    if (r < 0.4) {
      s += pick(['a', 'e', 'o', 'u', 'A', 'E', 'n', 'c', 'i', 'ı', 'ω', 'α', 'и', 'q']);
      const m = ri(1, 4);
      for (let j = 0; j < m; j++) s += cp(pick([0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x323, 0x327, 0x328, 0x331, 0x345, 0x35C, 0x361, ri(0x300, 0x36F)]));
    } else if (r < 0.5) {
      s += cp(ri(0x1100, 0x1112)) + cp(ri(0x1161, 0x1175)) + (rnd() < 0.5 ? cp(ri(0x11A8, 0x11C2)) : '');
    } else if (r < 0.6) {
      s += pick(['é', 'è', 'ñ', 'ü', 'Å', 'ǖ', 'ṩ', 'ệ', 'ḱ', 'ő', 'ŷ', '가', '각', 'ゔ', 'が', 'ﾊﾟ', 'क़', 'ড়']);
    } else if (r < 0.7) {
      s += cp(pick([0x301, 0x308, 0x20DD, 0x0E31, 0x093C, 0x05B4, 0x064B, 0x0651]));  // leading / non-Latin marks
    } else {
      s += pick([' ', 'word', 'text', ', ', '\n', 'e', 'x']);
    }
  }
  add(`combining_${k}`, s);
}

// ---- Whitespace runs.
const ws = [' ', '  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r', ' \n ', '\u00A0', '\u3000', '\u2028', '\u2009', '\u200B', '\u000B', '\u000C', '\u0085', '        '];
for (let k = 0; k < 20; k++) {
  let s = k % 3 === 0 ? pick(ws) + pick(ws) : '';
  const n = ri(10, 80);
  for (let i = 0; i < n; i++) s += (rnd() < 0.5 ? pick(['word', 'a', 'Hello', 'x1', 'über', '日本', '.', 'def', '{']) : '') + pick(ws);
  add(`whitespace_${k}`, s);
}
add('whitespace_only', '     \t\t\n\n   ');
add('single_space', ' ');
add('single_newline', '\n');

// ---- Digits and numbers.
for (let k = 0; k < 15; k++) {
  let s = '';
  const n = ri(10, 60);
  for (let i = 0; i < n; i++) {
    const r = rnd();
    if (r < 0.3) s += String(ri(0, 10 ** ri(1, 12)));
    else if (r < 0.45) s += (rnd() * 1000).toFixed(ri(1, 6));
    else if (r < 0.55) s += `+1 (${ri(100, 999)}) ${ri(100, 999)}-${ri(1000, 9999)}`;
    else if (r < 0.65) s += pick(['٣٤٥', '１２３', '²³', '½', 'Ⅻ', '०१२', '๑๒', '1,000,000', '3.14159', '1e-9', '0x1F', '2024-01-31']);
    else s += pick([' ', ', ', '\n', ' + ', '=', 'abc', '%', '$']);
  }
  add(`digits_${k}`, s);
}

// ---- Special-token strings of every tokenizer under test, plus near misses.
const specials = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>',
  '<|reserved_special_token_5|>', '<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|endofprompt|>', '<s>', '</s>', '<unk>',
  '<pad>', '<bos>', '<eos>', '<start_of_turn>', '<end_of_turn>', '<mask>', '[CLS]', '[SEP]', '[MASK]', '[PAD]', '[UNK]',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<|fim_prefix|>', '<think>', '</think>', '<tool_call>',
  '<|im_st', '< s>', '<s >', '<|endoftext', 'endoftext|>', '<<s>>', '<s><s>', '</s></s>', '<0x41>', '<0xFF>', '▁', '▁▁', 'Ġ', 'Ċ'];
for (let k = 0; k < 30; k++) {
  let s = '';
  const n = ri(5, 40);
  for (let i = 0; i < n; i++) {
    s += pick(specials) + pick(['', ' ', '\n', 'Hello', ' world ', 'user\n', '  ', 'x', '日本']);
  }
  add(`specials_${k}`, s);
}
add('special_alone', '<|endoftext|>');
add('special_bos_text', '<s>Hello</s>');

// ---- Odd Unicode: controls, format chars, noncharacters, private use, unassigned,
// replacement char, byte-looking text and mojibake.
const odd = ['\u0000', '\u0001', '\u0007', '\u001B', '\u007F', '\u0080', '\u009F', '\u00AD', '\u200B', '\u200C', '\u200D',
  '\u200E', '\u200F', '\u202E', '\u2066', '\uFEFF', '\uFFFD', '\uFDD0', '\uFFFE', '\uFFFF', '\u{10FFFF}', '\uE000', '\u{F0000}',
  '\u0378', '\u{E0001}', '\u{1D11E}', '\u2581', '\u0120', '\u010A', 'Ã©', 'â€™', 'Ã¼ber', '\\xff\\xfe', '%E2%82%AC', '&#x1F600;',
  '\u{1F600}'.normalize('NFD'), 'ǅ', 'ﬀ', '\u1E9E', 'ΐ', '\u0345', '\u0F73', '\u0344', '\u212B', '\u2126', 'İ', 'ŉ'];
for (let k = 0; k < 20; k++) {
  let s = '';
  const n = ri(10, 80);
  for (let i = 0; i < n; i++) s += pick(odd) + (rnd() < 0.6 ? pick(['', ' ', 'a', 'text', '\n', '1']) : '');
  add(`odd_${k}`, s);
}

// ---- Random mixtures of everything above (long inputs included).
const pool = cases.map((c) => c.text);
for (let k = 0; k < 40; k++) {
  let s = '';
  const target = k % 8 === 0 ? ri(6000, 15000) : ri(200, 2500);
  while (s.length < target) {
    const src = pick(pool);
    const a = ri(0, Math.max(0, src.length - 1));
    s += src.slice(a, a + ri(1, 300));
  }
  // Never cut a surrogate pair in half.
  s = s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '');
  add(`mixed_${k}`, s);
}

let bytes = 0;
for (const c of cases) bytes += Buffer.byteLength(c.text, 'utf8');
fs.writeFileSync(process.argv[2], JSON.stringify(cases));
console.error(`gen_corpus: ${cases.length} cases, ${bytes} bytes`);
