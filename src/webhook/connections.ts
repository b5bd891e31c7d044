/**
 * The connection policy's I/O (the decisions are connection-policy.ts's): every TCP
 * connection the webhook's listener accepts is tracked from the moment it is accepted,
 * before its TLS handshake, with its peer, whether a request is in flight on it, when it
 * was last active and whether it carried a valid AdmissionReview. A new connection is
 * accepted, or an idle one closed to make room for it, or (every one busy) it waits up to
 * SLOT_WAIT_MS for one to go idle, or it is refused; a connection
 * with no valid review within webhook.timeouts.firstReviewSeconds is closed. Each
 * refusal and eviction is counted (crd_migrator_webhook_connections_refused_total,
 * _evicted_total) and warned about once a minute with the address; refusals at the shared
 * or total cap fail the `webhook-connections` readiness check for a while.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Server, Socket } from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { Logger } from 'pino'
import type { ReadinessCheck } from '../health/plugin.js'
import {
  addressMatcher,
  admitConnection,
  mayWait,
  SLOT_WAIT_MS,
  type CapReason,
  type ConnectionCaps,
  type TrackedConnection,
} from './connection-policy.js'
import type { WebhookMetrics } from './metrics.js'

/** Warn of refused or evicted connections at most this often (each one is counted). */
const WARNING_INTERVAL_MS = 60_000
/** How long a refusal at the shared or total cap keeps `webhook-connections` failing. */
export const REFUSED_NOT_READY_MS = 30_000

export interface ConnectionGuardOptions {
  caps: ConnectionCaps
  /** webhook.apiServerAddresses: IPs or CIDRs. */
  apiServerAddresses: readonly string[]
  firstReviewMs: number
  metrics: WebhookMetrics
  logger: Logger
}

interface Connection {
  id: number
  raw: Socket
  tls?: TLSSocket
  peer: string
  apiServer: boolean
  inFlight: number
  lastActive: number
  reviewed: boolean
  overdue: boolean
  deadline?: NodeJS.Timeout
  /** Accepted over its cap with every connection busy, waiting SLOT_WAIT_MS for one to go idle; not yet counted in the caps. */
  waiting?: { reason: CapReason; timer: NodeJS.Timeout }
  /** Refused while waiting, with a request in flight: closed once it is answered. */
  closeWhenIdle?: boolean
}

export interface ConnectionGuard {
  /** `webhook-connections`: fails for REFUSED_NOT_READY_MS after a refusal at the shared or total cap. */
  readiness: ReadinessCheck
  /** The caps in force (reserved is 0 without apiServerAddresses). */
  readonly caps: Readonly<ConnectionCaps>
  /** Connections tracked now (tests). */
  open(): number
  /** Stop the timers (at close). */
  stop(): void
}

/** Tracks `server`'s connections and applies the policy to each new one. */
export function guardConnections(server: Server, options: ConnectionGuardOptions): ConnectionGuard {
  const { caps, metrics, logger } = options
  const isApiServer = addressMatcher(options.apiServerAddresses)
  const effective: ConnectionCaps = { ...caps, reserved: options.apiServerAddresses.length > 0 ? caps.reserved : 0 }
  const connections = new Map<number, Connection>()
  const byAddress = new Map<string, Connection>()
  /** Connections waiting for a slot (Connection.waiting), in arrival order. */
  const waiting = new Set<Connection>()
  let nextId = 1
  let refusedAt = Number.NEGATIVE_INFINITY
  let refusedRecently = 0
  let lastRefusalReason: CapReason = 'total'
  const warnedAt = new Map<string, number>()

  const warn = (kind: string, fields: Record<string, unknown>, msg: string) => {
    const now = Date.now()
    if (now - (warnedAt.get(kind) ?? Number.NEGATIVE_INFINITY) < WARNING_INTERVAL_MS) return
    warnedAt.set(kind, now)
    logger.warn({ ...fields, ...capsFields() }, `${msg} (each one counted; warned once a minute)`)
  }
  const capsFields = () => ({
    maxConnections: effective.maxConnections,
    maxConnectionsPerPeer: effective.maxPerPeer,
    reservedConnections: effective.reserved,
  })
  const publish = () => {
    let apiServer = 0
    for (const c of connections.values()) if (c.apiServer) apiServer++
    metrics.setConnectionsOpen(apiServer, connections.size - apiServer)
  }
  const key = (address: string | undefined, port: number | undefined) => `${address ?? ''}|${port ?? ''}`
  const forget = (c: Connection) => {
    if (!connections.delete(c.id)) return
    byAddress.delete(key(c.raw.remoteAddress, c.raw.remotePort))
    if (c.deadline) clearTimeout(c.deadline)
    if (c.waiting) clearTimeout(c.waiting.timer)
    waiting.delete(c)
    publish()
  }
  const close = (c: Connection) => {
    ;(c.tls ?? c.raw).destroy()
    c.raw.destroy()
    forget(c)
  }
  const evictNoReview = (c: Connection) => {
    metrics.countConnectionEvicted('no-review')
    warn(
      'no-review',
      { remoteAddress: c.peer },
      'webhook connection closed: no valid AdmissionReview within webhook.timeouts.firstReviewSeconds',
    )
    close(c)
  }

  /** The connections the policy weighs: every tracked one but those still waiting for a slot. */
  const settled = (now: number): TrackedConnection[] => {
    const open: TrackedConnection[] = []
    for (const c of connections.values()) {
      if (c.waiting) continue
      open.push({ id: c.id, peer: c.peer, apiServer: c.apiServer, busy: c.inFlight > 0, idleMs: now - c.lastActive, reviewed: c.reviewed })
    }
    return open
  }
  const countRefusal = (peer: string, reason: CapReason) => {
    metrics.countConnectionRefused(reason)
    if (reason !== 'peer') {
      const now = Date.now()
      refusedRecently = now - refusedAt < REFUSED_NOT_READY_MS ? refusedRecently + 1 : 1
      refusedAt = now
      lastRefusalReason = reason
    }
    warn(
      `refused-${reason}`,
      { remoteAddress: peer, reason },
      `webhook connection refused at the ${reason} cap: every connection busy for ${SLOT_WAIT_MS} ms, none idle to close instead`,
    )
  }
  const evict = (victimId: number, reason: CapReason, forPeer: string) => {
    const victim = connections.get(victimId)
    if (!victim) return
    metrics.countConnectionEvicted(reason)
    warn(
      `evicted-${reason}`,
      { remoteAddress: victim.peer, newRemoteAddress: forPeer, reason },
      `webhook connection closed at the ${reason} cap: the oldest idle one, for a new one`,
    )
    close(victim)
  }
  /**
   * Waiting connections take the slots that came free, in the order they arrived. Called at
   * every answered request (the hot path): nothing to do unless some connection waits.
   */
  const settle = () => {
    for (const c of waiting) {
      const verdict = admitConnection({ peer: c.peer, apiServer: c.apiServer }, settled(Date.now()), effective)
      if (verdict.action === 'refuse') continue
      if (verdict.action === 'evict') evict(verdict.victim, verdict.reason, c.peer)
      clearTimeout(c.waiting!.timer)
      c.waiting = undefined
      waiting.delete(c)
    }
  }
  /** SLOT_WAIT_MS passed with no slot: refused (after the request in flight on it, if any). */
  const giveUp = (c: Connection) => {
    if (!c.waiting || !connections.has(c.id)) return
    // Refused: no longer waiting for a slot (settle skips it), still outside the caps until it closes.
    waiting.delete(c)
    countRefusal(c.peer, c.waiting.reason)
    if (c.inFlight > 0) c.closeWhenIdle = true
    else close(c)
  }

  const onConnection = (raw: Socket) => {
    const peer = raw.remoteAddress ?? 'unknown'
    const apiServer = isApiServer(peer)
    const now = Date.now()
    const verdict = admitConnection({ peer, apiServer }, settled(now), effective)
    if (verdict.action === 'refuse' && !mayWait({ peer, apiServer }, [...waiting], effective)) {
      raw.destroy()
      countRefusal(peer, verdict.reason)
      return
    }
    if (verdict.action === 'evict') evict(verdict.victim, verdict.reason, peer)
    const c: Connection = { id: nextId++, raw, peer, apiServer, inFlight: 0, lastActive: now, reviewed: false, overdue: false }
    if (verdict.action === 'refuse') {
      c.waiting = { reason: verdict.reason, timer: setTimeout(() => giveUp(c), SLOT_WAIT_MS).unref() }
      waiting.add(c)
    }
    connections.set(c.id, c)
    byAddress.set(key(raw.remoteAddress, raw.remotePort), c)
    raw.once('close', () => {
      if (!connections.has(c.id)) return
      forget(c)
      settle()
    })
    c.deadline = setTimeout(() => {
      c.deadline = undefined
      if (c.reviewed) return
      if (c.inFlight > 0) c.overdue = true
      else evictNoReview(c)
    }, options.firstReviewMs).unref()
    publish()
  }
  const onSecure = (tls: TLSSocket) => {
    const c = byAddress.get(key(tls.remoteAddress, tls.remotePort))
    if (c) c.tls = tls
  }
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const c = byAddress.get(key(req.socket.remoteAddress, req.socket.remotePort))
    if (!c) return
    c.inFlight++
    let done = false
    const finish = () => {
      if (done) return
      done = true
      c.inFlight--
      c.lastActive = Date.now()
      if (res.statusCode === 200) c.reviewed = true
      if (c.inFlight === 0 && connections.has(c.id)) {
        if (c.closeWhenIdle) close(c)
        else if (c.overdue && !c.reviewed) evictNoReview(c)
      }
      settle()
    }
    res.once('finish', finish)
    res.once('close', finish)
  }

  // Before tls.Server's own listener: a refused connection never starts its handshake.
  server.prependListener('connection', onConnection)
  server.on('secureConnection', onSecure)
  server.on('request', onRequest)

  return {
    readiness: {
      name: 'webhook-connections',
      failing: () =>
        Date.now() - refusedAt < REFUSED_NOT_READY_MS
          ? `${refusedRecently} connection(s) refused in the last ${REFUSED_NOT_READY_MS / 1000} s at the ${lastRefusalReason} cap (webhook.maxConnections${lastRefusalReason === 'shared' ? ' - reservedConnections' : ''}), every open one busy for ${SLOT_WAIT_MS / 1000} s`
          : undefined,
    },
    caps: Object.freeze(effective),
    open: () => connections.size,
    stop() {
      server.removeListener('connection', onConnection)
      server.removeListener('secureConnection', onSecure)
      server.removeListener('request', onRequest)
      for (const c of connections.values()) {
        if (c.deadline) clearTimeout(c.deadline)
        if (c.waiting) clearTimeout(c.waiting.timer)
      }
    },
  }
}
