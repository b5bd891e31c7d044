/**
 * The good-neighbour case's foreground client: another tenant of the API server, a
 * non-exempt user (a client certificate outside system:masters, so API Priority and
 * Fairness puts it in global-default like any authenticated user) doing steady reads and
 * writes of another resource: GET and a merge PATCH of ConfigMaps, alternately, at a fixed
 * rate (open loop: each request leaves on schedule whatever the earlier ones are doing, so
 * a slow API server shows as latency, not as fewer requests). The requests go round
 * {@link FOREGROUND_CONFIGMAPS} ConfigMaps: concurrent patches of one object conflict and
 * are retried inside the API server, so a backlog on a single object feeds itself (an
 * early version of this bench measured that, 50 s stalls, not the migration).
 *
 * Raw node:https with one keep-alive agent, like the ceiling, so the client itself adds
 * next to nothing to the latency it measures. Runs in a child process of the bench
 * (child.js foreground) until told to stop, and hands back every request (when it was
 * sent, how long it took): the bench takes the ones sent while the migration ran
 * ({@link foregroundStats}), not those of the migrating process starting up.
 */
import https from 'node:https'
import type { CeilingConnection } from './ceiling.js'
import { LatencyHistogram } from './stats.js'

/** How many ConfigMaps the foreground reads and writes, in turn (`<configMap>-<i>`). */
export const FOREGROUND_CONFIGMAPS = 16

export interface ForegroundOptions {
  connection: CeilingConnection
  namespace: string
  /** The ConfigMaps' name prefix: `<configMap>-0` ... `<configMap>-15`. */
  configMap: string
  /** Requests per second, reads and writes together. */
  ratePerSecond: number
}

/** Every request: sent at (Date.now()), latency in ms, and whether it failed (or answered anything but 200). */
export interface ForegroundSamples {
  at: number[]
  ms: number[]
  failed: number[]
}

export interface ForegroundStats {
  requests: number
  errors: number
  seconds: number
  p50Ms: number | null
  p99Ms: number | null
  maxMs: number | null
  /** The five slowest: seconds after the window's start, latency in ms. */
  slowest: Array<{ atSeconds: number; ms: number }>
}

export interface ForegroundRun {
  /** Resolves once every request sent has been answered. */
  stop(): Promise<ForegroundSamples>
}

export function startForeground(o: ForegroundOptions): ForegroundRun {
  const server = new URL(o.connection.server)
  // Enough sockets that no request waits for one here: its latency is the API server's.
  const agent = new https.Agent({ keepAlive: true, maxSockets: 256, ...o.connection.tls })
  const path = (seq: number) => `/api/v1/namespaces/${o.namespace}/configmaps/${o.configMap}-${(seq >> 1) % FOREGROUND_CONFIGMAPS}`
  const samples: ForegroundSamples = { at: [], ms: [], failed: [] }
  let inFlight = 0
  let stopping = false
  let drained: (() => void) | undefined

  const send = (seq: number) => {
    const write = seq % 2 === 1
    const body = write ? JSON.stringify({ data: { seq: String(seq) } }) : undefined
    const headers: Record<string, string | number> = { ...o.connection.headers, Accept: 'application/json' }
    if (body) {
      headers['Content-Type'] = 'application/merge-patch+json'
      headers['Content-Length'] = Buffer.byteLength(body)
    }
    inFlight++
    const sentAt = Date.now()
    const t0 = performance.now()
    let settled = false
    const done = (ok: boolean) => {
      if (settled) return
      settled = true
      samples.at.push(sentAt)
      samples.ms.push(performance.now() - t0)
      samples.failed.push(ok ? 0 : 1)
      if (--inFlight === 0 && stopping) drained?.()
    }
    const req = https.request(
      { host: server.hostname, port: server.port, path: path(seq), method: write ? 'PATCH' : 'GET', headers, agent },
      (res) => {
        res.resume()
        res.on('end', () => done(res.statusCode === 200))
        res.on('error', () => done(false))
      },
    )
    req.on('error', () => done(false))
    req.end(body)
  }

  // One timer per request would drift; a tick every 5 ms sends whatever is due.
  const started = performance.now()
  let sent = 0
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - started) / 1000) * o.ratePerSecond)
    while (sent < due) send(sent++)
  }, 5)

  return {
    async stop() {
      clearInterval(timer)
      stopping = true
      if (inFlight > 0) await new Promise<void>((resolve) => (drained = resolve))
      agent.destroy()
      return samples
    },
  }
}

/** The requests sent within [from, to] (Date.now(); default all of them), summarised. */
export function foregroundStats(s: ForegroundSamples, from = Number.NEGATIVE_INFINITY, to = Number.POSITIVE_INFINITY): ForegroundStats {
  const latency = new LatencyHistogram()
  const picked: Array<{ at: number; ms: number }> = []
  let errors = 0
  let first = Number.POSITIVE_INFINITY
  let last = Number.NEGATIVE_INFINITY
  for (let i = 0; i < s.at.length; i++) {
    const at = s.at[i]!
    if (at < from || at > to) continue
    latency.record(s.ms[i]! / 1000)
    errors += s.failed[i]!
    picked.push({ at, ms: s.ms[i]! })
    first = Math.min(first, at)
    last = Math.max(last, at)
  }
  const summary = latency.summary()
  const start = Number.isFinite(from) ? from : first
  return {
    requests: latency.count,
    errors,
    seconds: latency.count ? Math.round((last - first) / 100) / 10 : 0,
    p50Ms: summary.p50Ms,
    p99Ms: summary.p99Ms,
    maxMs: summary.maxMs,
    slowest: picked
      .sort((a, b) => b.ms - a.ms)
      .slice(0, 5)
      .map((x) => ({ atSeconds: Math.round((x.at - start) / 100) / 10, ms: Math.round(x.ms * 10) / 10 })),
  }
}
