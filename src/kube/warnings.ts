/** The API server's `Warning:` headers (RFC 7234 `299 - "text"`): deprecations and admission warnings, printed as kubectl does. */
import { sanitizeText } from '../sanitize.js'

/** One warning-value: code, agent, quoted text, optional quoted date; values separated by commas (node:http joins repeated headers so). */
const WARNING_VALUE = /\s*(\d{3})\s+\S+\s+"((?:[^"\\]|\\.)*)"(?:\s+"[^"]*")?\s*(?:,|$)/y

/** The texts of the 299 warnings of a `warning` header (as node:http gives it: joined, or an array); malformed values are skipped. */
export function parseWarningHeader(header: string | readonly string[] | undefined): string[] {
  if (header === undefined) return []
  const texts: string[] = []
  for (const value of typeof header === 'string' ? [header] : header) {
    WARNING_VALUE.lastIndex = 0
    for (let m = WARNING_VALUE.exec(value); m; m = WARNING_VALUE.exec(value)) {
      // 299: "miscellaneous persistent warning", the code the API server uses (kubectl shows only these).
      if (m[1] === '299') texts.push(m[2]!.replace(/\\(.)/g, '$1'))
      if (WARNING_VALUE.lastIndex >= value.length) break
    }
  }
  return texts
}

/** `Warning: <text>` once per distinct text, cleaned and cut like any outside text. */
export function warningPrinter(stream: Pick<NodeJS.WritableStream, 'write'>): (text: string) => void {
  const seen = new Set<string>()
  return (text) => {
    const clean = sanitizeText(text)
    if (clean === '' || seen.has(clean)) return
    seen.add(clean)
    stream.write(`Warning: ${clean}\n`)
  }
}
