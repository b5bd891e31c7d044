import t from 'tap'
import { cutText, ellipsize, escapeInvisible, fitUtf8, headOf, OUTSIDE_TEXT_MAX, plainText, sanitizeText } from '../../src/sanitize.js'
import { truncateForLog } from '../../src/webhook/limits.js'
import { shorten } from '../../src/webhook/messages.js'

const ESC = '\u001b'

t.test('sanitizeText: what is left of text from outside', async (t) => {
  const cases: [string, string, string][] = [
    ['plain', 'conversion refused: spec.replicas must be >= 0', 'conversion refused: spec.replicas must be >= 0'],
    ['newline forging a line', 'refused\nFailed: CRDM_INTERNAL: all good', 'refused Failed: CRDM_INTERNAL: all good'],
    ['CRLF and tabs', 'a\r\n\tb', 'a b'],
    ['colour (CSI)', `${ESC}[31mred${ESC}[0m text`, 'red text'],
    ['clear screen and home', `${ESC}[2J${ESC}[Hgone`, 'gone'],
    ['window title (OSC, BEL)', `${ESC}]0;pwned${'\u0007'}after`, 'after'],
    ['window title (OSC, ST)', `${ESC}]2;pwned${ESC}\\after`, 'after'],
    ['hyperlink (OSC 8)', `${ESC}]8;;https://evil.example${ESC}\\click${ESC}]8;;${ESC}\\`, 'click'],
    ['DCS string', `${ESC}Pq#0;2;0;0;0${ESC}\\x`, 'x'],
    ['unterminated OSC: introducer dropped, text kept', `${ESC}]0;title`, '0;title'],
    ['two-character ESC (reset)', `${ESC}cx${ESC}7y`, 'xy'],
    ['lone ESC at the end', `x${ESC}`, 'x'],
    ['C1 CSI', '\u009b31mred', 'red'],
    ['C1 OSC with ST', '\u009d0;t\u009cafter', 'after'],
    ['BEL, NUL, backspace, DEL', 'a\u0007b\u0000c\u0008d\u007fe', 'abcde'],
    ['other C1 dropped', 'a\u0085b\u0080c\u009fd', 'a bcd'],
    ['bidirectional override', 'a\u202etxt.exe', 'atxt.exe'],
    ['isolates, zero-width, BOM', '\ufeffa\u2066b\u2069\u200bc', 'abc'],
    ['line and paragraph separators', 'a\u2028b\u2029c', 'a b c'],
    ['runs of white space, trimmed', '  a   b  ', 'a b'],
    ['non-ASCII kept', 'überprüft: ✓ 😀 日本', 'überprüft: ✓ 😀 日本'],
    ['empty', '', ''],
  ]
  for (const [name, input, expected] of cases) t.equal(sanitizeText(input), expected, name)
})

t.test('sanitizeText cuts at a bound, between characters, and says so', async (t) => {
  t.equal(OUTSIDE_TEXT_MAX, 1024)
  t.equal(sanitizeText('x'.repeat(1024)), 'x'.repeat(1024), 'at the bound: whole')
  t.equal(sanitizeText('x'.repeat(5000)), `${'x'.repeat(1024)}…(5000 characters)`)
  t.equal(sanitizeText('abcdef', 3), 'abc…(6 characters)')
  t.equal(sanitizeText('😀'.repeat(5), 3), '😀😀😀…(5 characters)', 'code points, not UTF-16 halves')
  t.equal(sanitizeText(`${ESC}[31m${'y'.repeat(10)}`, 10), 'y'.repeat(10), 'counted after cleaning')
  const huge = sanitizeText(`${'z\n'.repeat(1_000_000)}`)
  t.ok(huge.length < 1100, `a 2 MB text comes out short (${huge.length})`)
})

t.test('plainText keeps indentation and length; only drops and replaces', async (t) => {
  t.equal(plainText('  failed key: a\nb'), '  failed key: a b')
  t.equal(plainText(`  ${ESC}]0;t\u0007x  y`), '  x  y')
  t.equal(plainText('y'.repeat(3000)).length, 3000)
})

t.test('fitUtf8 bounds bytes, not characters', async (t) => {
  t.equal(fitUtf8('abc', 3), 'abc')
  t.equal(fitUtf8('abcdef', 5), 'ab…')
  const note = fitUtf8('é'.repeat(1000), 1024)
  t.ok(Buffer.byteLength(note) <= 1024, `${Buffer.byteLength(note)} bytes`)
  t.equal(note, `${'é'.repeat(510)}…`)
  t.equal(fitUtf8('😀😀', 6), '…', 'never half a character')
})

t.test('escapeInvisible writes what JSON leaves raw as \\u escapes', async (t) => {
  t.equal(escapeInvisible(JSON.stringify('a\u009bb\u007fc\u202ed\u2028')), '"a\\u009bb\\u007fc\\u202ed\\u2028"')
  t.equal(escapeInvisible(JSON.stringify('\u{e0001}x')), '"\\udb40\\udc01x"', 'a format character past U+FFFF')
  t.equal(escapeInvisible('"plain ü"'), '"plain ü"')
})

t.test('headOf: the first max UTF-16 code units, never half a character', async (t) => {
  const rows: [string, string, number, string][] = [
    ['shorter', 'abc', 5, 'abc'],
    ['exact', 'abc', 3, 'abc'],
    ['cut', 'abcdef', 3, 'abc'],
    ['zero', 'abc', 0, ''],
    ['negative (a terminal narrower than the line)', 'abc', -1, ''],
    ['cut before a pair, not inside it', 'ab😀', 3, 'ab'],
    ['a whole pair kept', 'ab😀c', 4, 'ab😀'],
    ['only a pair, cut at 1', '😀', 1, ''],
    ['BMP text is code units', 'überprüft', 4, 'über'],
  ]
  for (const [name, text, max, expected] of rows) t.equal(headOf(text, max), expected, name)
  for (let max = 0; max <= 12; max++) {
    const head = headOf('😀'.repeat(6), max)
    t.equal(Buffer.from(head, 'utf8').toString('utf8'), head, `'😀'×6 at ${max}: valid UTF-8`)
  }
})

t.test('cutText: whole when it fits, else its head and how long it was', async (t) => {
  const rows: [string, string, number, string, string][] = [
    ['fits', 'abc', 3, '', 'abc'],
    ['cut', 'abcdef', 3, '', 'abc…(6 characters)'],
    ['with a gap (log lines)', 'abcdef', 3, ' ', 'abc… (6 characters)'],
    ['never half a pair; the length stays in code units', 'ab😀cd', 3, '', 'ab…(6 characters)'],
    ['empty', '', 0, '', ''],
  ]
  for (const [name, text, max, gap, expected] of rows) t.equal(cutText(text, max, gap), expected, name)
})

t.test('ellipsize: whole when it fits, else its head and an ellipsis, max code units in all', async (t) => {
  const rows: [string, string, number, string][] = [
    ['shorter', 'abc', 5, 'abc'],
    ['equal', 'abcde', 5, 'abcde'],
    ['longer', 'abcdef', 5, 'abcd…'],
    ['a surrogate pair at the cut: dropped whole', 'ab😀cd', 4, 'ab…'],
    ['a surrogate pair before the cut: kept whole', 'ab😀cd', 5, 'ab😀…'],
    ['empty', '', 0, ''],
  ]
  for (const [name, text, max, expected] of rows) t.equal(ellipsize(text, max), expected, name)
})

t.test('the webhook cuts through cutText: messages and log lines', async (t) => {
  const long = 'x'.repeat(252) + '😀' + 'y'.repeat(10)
  t.equal(shorten(long), `${'x'.repeat(252)}…(${long.length} characters)`, 'a message never ends in half a character')
  t.equal(shorten('widgets.example.com'), 'widgets.example.com')
  t.equal(truncateForLog('z'.repeat(300)), `${'z'.repeat(256)}… (300 characters)`)
  t.equal(truncateForLog('z'.repeat(255) + '😀'), `${'z'.repeat(255)}… (257 characters)`)
})
