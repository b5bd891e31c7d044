/**
 * Bounds on what one request to the webhook may cost, beyond the body limit: how a JSON
 * body may be shaped before JSON.parse sees it, and how much of a request's text reaches
 * a log line.
 *
 * Why a scan before JSON.parse: JSON.parse is synchronous and its cost grows with the
 * number of objects and arrays, not with the bytes (measured on Node 20: ~0.35–0.5 µs per
 * empty array, so 3 MiB of `[[[...]]]` blocks the event loop for ~0.8 s, and 8 MiB of it
 * nested a few million deep for ~3 s). Every review shares the one event loop, so ten
 * such bodies in parallel delay a real review past the API server's timeout. The scan is
 * one linear pass over the raw bytes, without allocation, and stops at the first limit
 * crossed, so a refused body costs little more than receiving it.
 */
import { cutText } from '../sanitize.js'

/**
 * Deepest nesting of objects and arrays accepted. An openAPIV3Schema nests two levels per
 * schema level (`properties`, then the field); real CRDs reach a few dozen levels as a
 * whole object (Gateway API's HTTPRoute: 24) and the deepest generated schemas stay under
 * ~100, plus 3 for the AdmissionReview envelope. 512 is five times that, so no real review
 * is refused, while a recursive walk of a parsed review (JSON.stringify, a logger's
 * serializer) stays far from the stack limit. Deep nesting is also the cheapest way to
 * pack many arrays into few bytes; the container limit below bounds that in every shape.
 */
export const MAX_JSON_DEPTH = 512

/**
 * Objects and arrays accepted per byte of the body limit: one per 12 bytes (262,144 at
 * the default 3 MiB). The smallest node of a real schema, `"f":{"type":"string"}`, takes
 * 21 bytes, and real CRDs average 150–250 bytes per object (descriptions), so no real
 * review comes near; `[[],[],...]` packs one into 3 bytes. It bounds JSON.parse of one
 * body at ~0.1 s where 3 MiB of arrays nested 500 deep (under the depth limit) took ~0.8 s.
 */
export const MIN_BYTES_PER_JSON_CONTAINER = 12

export interface JsonShapeLimits {
  maxDepth: number
  maxContainers: number
}

export interface JsonShapeViolation {
  limit: 'depth' | 'containers'
  max: number
}

export function jsonShapeLimits(bodyLimitBytes: number): JsonShapeLimits {
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
 * Count nesting depth and objects/arrays of a JSON body outside strings, stopping at the
 * first limit crossed. It reads the raw bytes, before any string is made of them: making
 * a JS string of 3 MiB alone takes 10–20 ms, which a refused body need not cost. Bytes are
 * enough because UTF-8 encodes every non-ASCII character with bytes >= 0x80, so quotes,
 * backslashes and brackets are always themselves. Exact for valid JSON; on invalid JSON it
 * may count wrongly only past the first syntax error, where JSON.parse stops anyway, so
 * whatever JSON.parse would build has been counted here.
 */
export function checkJsonShape(body: Buffer, limits: JsonShapeLimits): JsonShapeViolation | undefined {
  let depth = 0
  let containers = 0
  const length = body.length
  for (let i = 0; i < length; i++) {
    const c = body[i]
    if (c === QUOTE) {
      // To the closing quote: byte by byte through the first bytes (most strings of a
      // review are short, and a Buffer.indexOf call per string cost more than the whole
      // rest of the scan), then jumping with indexOf through a long one.
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

/** Longest string from a request put into a log line (names, users, groups). */
export const LOG_STRING_MAX = 256
/** Longest message put into a log line (decision details, parse errors). */
export const LOG_MESSAGE_MAX = 1024
/** Most list items put into a log line (groups, warnings). */
export const LOG_LIST_MAX = 32

/**
 * Cut a string from a request to `max` characters for a log line, saying how long it was.
 * A 7 MB `request.name` logged three times made a 21 MB log line.
 */
export function truncateForLog(value: string, max = LOG_STRING_MAX): string {
  return cutText(value, max, ' ')
}

/** At most `maxItems` items, each cut to `maxLength`; a last item says how many were left out. */
export function truncateListForLog(values: readonly string[], maxItems = LOG_LIST_MAX, maxLength = LOG_STRING_MAX): string[] {
  const kept = values.slice(0, maxItems).map((v) => truncateForLog(v, maxLength))
  if (values.length > maxItems) kept.push(`… (${values.length - maxItems} more)`)
  return kept
}
