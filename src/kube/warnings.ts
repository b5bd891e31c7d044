/**
 * The API server's warnings (`Warning:` response headers, RFC 7234 form `299 - "text"`):
 * deprecated APIs, and what admission webhooks and policies add to their answers, e.g. the
 * storage-freeze webhook's break-glass warning. kubectl prints each as `Warning: text` on
 * stderr, once per distinct text; the CLI does the same (cli/command-http.ts), every
 * request's headers read in one place (KubeHttp, http.ts).
 */
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

/**
 * A handler that writes each warning as kubectl does, `Warning: <text>`, to `stream`, once
 * per distinct text; the text is the server's, so cleaned and cut like any text from outside.
 */
export function warningPrinter(stream: Pick<NodeJS.WritableStream, 'write'>): (text: string) => void {
  const seen = new Set<string>()
  return (text) => {
    const clean = sanitizeText(text)
    if (clean === '' || seen.has(clean)) return
    seen.add(clean)
    stream.write(`Warning: ${clean}\n`)
  }
}
