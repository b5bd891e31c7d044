/**
 * Text crd-migrator did not write (webhook refusals, API errors, others' annotations), made
 * fit to store and print: its author could hide escape sequences (retitle or clear the
 * terminal of whoever runs `status`), forge lines with newlines, or make it huge. Escape
 * sequences are dropped whole, line breaks become spaces, other control and format (Cf:
 * bidi overrides, zero-width) characters are dropped. Also the one place that cuts text
 * to a length: never between the two UTF-16 halves of a character (not valid UTF-8).
 */

/** Longest text from outside kept, in characters (code points), before the note of how long it was. */
export const OUTSIDE_TEXT_MAX = 1024

/**
 * CSI (ESC [ or U+009B, parameters, intermediates, a final byte); an OSC, DCS, SOS, PM or
 * APC string with its terminator (BEL, ESC \ or U+009C; one without a terminator is left
 * to the rules below, which drop its introducer and keep its text visible); any other ESC
 * with its intermediates and final byte.
 */
/* eslint-disable no-control-regex -- control characters are what it matches */
const ESCAPE_SEQUENCE =
  /(?:\u001b\[|\u009b)[0-?]*[ -/]*[@-~]?|(?:\u001b[\]PX^_]|[\u0090\u0098\u009d-\u009f])[^\u0007\u001b\u009c]*(?:\u0007|\u001b\\|\u009c)|\u001b[ -/]*[0-~]?/g
/* eslint-enable no-control-regex */
const LINE_BREAK = /[\t\n\v\f\r\u0085\u2028\u2029]/g
const INVISIBLE = /[\p{Cc}\p{Cf}]/gu

/** Escape sequences and invisible characters dropped, line breaks and tabs made spaces; nothing cut (for printing: keeps indentation). */
export function plainText(text: string): string {
  return text.replace(ESCAPE_SEQUENCE, '').replace(LINE_BREAK, ' ').replace(INVISIBLE, '')
}

/**
 * plainText, one space for each run of white space, trimmed, and cut to `max` characters
 * (never inside one), followed by `…(N characters)` when it was longer.
 */
export function sanitizeText(text: string, max = OUTSIDE_TEXT_MAX): string {
  const clean = plainText(text).replace(/\s+/g, ' ').trim()
  if (clean.length <= max) return clean
  const chars = [...clean]
  return chars.length > max ? `${chars.slice(0, max).join('')}…(${chars.length} characters)` : clean
}

/** The first `max` UTF-16 code units of `text`, one fewer when the last would be the first half of a surrogate pair. */
export function headOf(text: string, max: number): string {
  if (text.length <= max) return text
  const end = max > 0 && isHighSurrogate(text.charCodeAt(max - 1)) ? max - 1 : max
  return text.slice(0, Math.max(0, end))
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/**
 * `text` as it is when at most `max` UTF-16 code units long; else its head (headOf) and
 * `…(N characters)`, N its length in code units, with `gap` after the ellipsis: names and
 * values from a request in messages and log lines.
 */
export function cutText(text: string, max: number, gap = ''): string {
  return text.length <= max ? text : `${headOf(text, max)}…${gap}(${text.length} characters)`
}

/** At most `max` UTF-16 code units, the last an ellipsis when cut (never inside a surrogate pair): a line or a cell that must fit. */
export const ellipsize = (text: string, max: number): string => (text.length > max ? `${headOf(text, max - 1)}…` : text)

/** At most `maxBytes` bytes of UTF-8, cut between characters, ending in `…` when cut (Event notes are limited in bytes). */
export function fitUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return text
  let bytes = 3 // the ellipsis
  let out = ''
  for (const c of text) {
    bytes += Buffer.byteLength(c, 'utf8')
    if (bytes > maxBytes) break
    out += c
  }
  return `${out}…`
}

/**
 * JSON text (JSON.stringify's) with the characters JSON leaves raw and a terminal would
 * act on or hide (DEL, C1, format characters, U+2028/U+2029) written as \u escapes too:
 * for a log line that keeps every character of a value, visibly.
 */
export function escapeInvisible(json: string): string {
  return json.replace(/[\u007f-\u009f\p{Cf}\u2028\u2029]/gu, (c) =>
    // A character past U+FFFF as its two UTF-16 halves, as JSON writes them.
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join(''),
  )
}
