/**
 * The API server's own record of clients asking for deprecated versions: the gauge
 * apiserver_requested_deprecated_apis, 1 per deprecated group/version/resource requested since
 * that server started (a CRD version counts once marked `deprecated: true`). Pure text parsing.
 */

const REQUESTED_DEPRECATED_APIS = 'apiserver_requested_deprecated_apis'

export interface RequestedApi {
  group: string
  version: string
  resource: string
}

/** The label set of each sample of `metric` (value non-zero) in the Prometheus text exposition format. */
export function samplesOf(text: string, metric: string): Record<string, string>[] {
  const out: Record<string, string>[] = []
  for (const line of text.split('\n')) {
    if (!line.startsWith(metric) || (line[metric.length] !== '{' && line[metric.length] !== ' ')) continue
    const parsed = parseSample(line.slice(metric.length))
    if (parsed && parsed.value !== 0) out.push(parsed.labels)
  }
  return out
}

/** `{a="x",b="y\"z"} 1` → labels and value; undefined when the line is not one sample. */
function parseSample(rest: string): { labels: Record<string, string>; value: number } | undefined {
  const labels: Record<string, string> = {}
  let i = 0
  if (rest[0] === '{') {
    // Separators, then `}` or one label: name="value" (backslash escapes, \n a line break).
    const label = /[ ,]*(?:\}|([^=]*)="((?:[^"\\]|\\[^])*)")/y
    label.lastIndex = 1
    for (;;) {
      const m = label.exec(rest)
      if (!m) return undefined
      if (m[1] === undefined) break
      labels[m[1].trim()] = m[2]!.replace(/\\([^])/g, (_, c: string) => (c === 'n' ? '\n' : c))
    }
    i = label.lastIndex
  }
  const value = Number(rest.slice(i).trim().split(/\s+/)[0])
  return Number.isNaN(value) ? undefined : { labels, value }
}

/** The deprecated group/version/resources the API server says were requested. */
export function requestedDeprecatedApis(metricsText: string): RequestedApi[] {
  return samplesOf(metricsText, REQUESTED_DEPRECATED_APIS).map((l) => ({
    group: l['group'] ?? '',
    version: l['version'] ?? '',
    resource: l['resource'] ?? '',
  }))
}

export function wasRequested(requested: readonly RequestedApi[], api: RequestedApi): boolean {
  return requested.some((r) => r.group === api.group && r.version === api.version && r.resource === api.resource)
}
