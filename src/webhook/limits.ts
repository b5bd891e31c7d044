/**
 * Bounds on what one webhook request may cost beyond the body limit: the JSON shape before
 * JSON.parse, and how much request text reaches a log line.
 * Why scan first: JSON.parse is synchronous and costs per object/array, not per byte (~0.4 µs
 * per empty array: 3 MiB of `[[[...]]]` blocks the shared event loop ~0.8 s, past the API
 * server's timeout for every other review). The scan is one allocation-free pass.
 */
import { cutText } from '../sanitize.js'

/**
 * Deepest nesting accepted: real CRDs stay under ~100 levels (HTTPRoute: 24) plus 3 for the
 * envelope; 512 refuses none, and keeps recursive walks (JSON.stringify, log serializers) far
 * from the stack limit.
 */
export const MAX_JSON_DEPTH = 512

/**
 * Bytes of body limit per object/array accepted (262,144 at 3 MiB): a real schema's smallest
 * node takes 21 bytes and CRDs average 150-250, while `[[],[],...]` packs one into 3. Bounds
 * JSON.parse of one body at ~0.1 s.
 */
export const MIN_BYTES_PER_JSON_CONTAINER = 12

export interface JsonShapeViolation {
  limit: 'depth' | 'containers'
  max: number
}

export function jsonShapeLimits(bodyLimitBytes: number) {
  return {
    maxDepth: MAX_JSON_DEPTH,
    maxContainers: Math.max(1024, Math.floor(bodyLimitBytes / MIN_BYTES_PER_JSON_CONTAINER)),
  }
}

/** Bytes of a string scanned one by one before jumping with indexOf (see checkJsonShape). */
const SHORT_STRING = 64
const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d

/**
 * Depth and containers outside strings, stopping at the first limit crossed. Raw bytes, since
 * a 3 MiB JS string alone costs 10-20 ms; safe because UTF-8 never uses bytes < 0x80 inside a
 * multi-byte character. May miscount only past a syntax error, where JSON.parse stops anyway.
 */
export function checkJsonShape(body: Buffer, limits: ReturnType<typeof jsonShapeLimits>): JsonShapeViolation | undefined {
  let depth = 0
  let containers = 0
  const length = body.length
  for (let i = 0; i < length; i++) {
    const c = body[i]
    if (c === QUOTE) {
      // Byte by byte first: most strings are short, and an indexOf call per string cost
      // more than the rest of the scan. Long ones jump with indexOf.
      const short = Math.min(length, i + 1 + SHORT_STRING)
      let j = i + 1
      for (; j < short; j++) {
        const b = body[j]
        if (b === QUOTE) break
        if (b === BACKSLASH) j++ // the escaped byte is never the end
      }
      if (j < short) {
        i = j
        continue
      }
      if (j >= length) return undefined // unterminated string: JSON.parse refuses it
      // Long: the closing quote is one preceded by an even run of backslashes.
      for (let from = j - 1; ;) {
        const end = body.indexOf(QUOTE, from + 1)
        if (end < 0) return undefined
        let backslashes = 0
        while (body[end - 1 - backslashes] === BACKSLASH) backslashes++
        from = end
        i = end
        if (backslashes % 2 === 0) break
      }
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > limits.maxDepth) return { limit: 'depth', max: limits.maxDepth }
      if (++containers > limits.maxContainers) return { limit: 'containers', max: limits.maxContainers }
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--
    }
  }
  return undefined
}

/** Longest request string in a log line (names, users, groups). */
export const LOG_STRING_MAX = 256
/** Longest message put into a log line (decision details, parse errors). */
export const LOG_MESSAGE_MAX = 1024
/** Most list items put into a log line (groups, warnings). */
export const LOG_LIST_MAX = 32

/** Cut for a log line, saying how long it was: a 7 MB `request.name` logged three times made a 21 MB line. */
export function truncateForLog(value: string, max = LOG_STRING_MAX): string {
  return cutText(value, max, ' ')
}

/** At most `maxItems` items, each cut to `maxLength`; a last item says how many were left out. */
export function truncateListForLog(values: readonly string[], maxItems = LOG_LIST_MAX, maxLength = LOG_STRING_MAX): string[] {
  const kept = values.slice(0, maxItems).map((v) => truncateForLog(v, maxLength))
  if (values.length > maxItems) kept.push(`… (${values.length - maxItems} more)`)
  return kept
}
