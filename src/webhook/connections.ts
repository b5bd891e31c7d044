/**
 * The connection policy's I/O (decisions: connection-policy.ts). Connections are tracked from
 * accept, before the TLS handshake; one with no valid review within firstReviewSeconds is
 * closed. Refusals and evictions are counted, warned about once a minute, and at the shared or
 * total cap fail `webhook-connections` readiness for a while.
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

/** Refusals and evictions: counted, warned about once a minute each kind, and the readiness they fail. */
class Refusals {
  private refusedAt = Number.NEGATIVE_INFINITY
  private refusedRecently = 0
  private lastRefusalReason: CapReason = 'total'
  private readonly warnedAt = new Map<string, number>()

  constructor(
    private readonly caps: ConnectionCaps,
    private readonly options: ConnectionGuardOptions,
  ) {}

  warn(kind: string, fields: Record<string, unknown>, msg: string): void {
    const now = Date.now()
    if (now - (this.warnedAt.get(kind) ?? Number.NEGATIVE_INFINITY) < WARNING_INTERVAL_MS) return
    this.warnedAt.set(kind, now)
    const { maxConnections, maxPerPeer: maxConnectionsPerPeer, reserved: reservedConnections } = this.caps
    const caps = { maxConnections, maxConnectionsPerPeer, reservedConnections }
    this.options.logger.warn({ ...fields, ...caps }, `${msg} (each one counted; warned once a minute)`)
  }

  refused(peer: string, reason: CapReason): void {
    this.options.metrics.countConnectionRefused(reason)
    if (reason !== 'peer') {
      const now = Date.now()
      this.refusedRecently = now - this.refusedAt < REFUSED_NOT_READY_MS ? this.refusedRecently + 1 : 1
      this.refusedAt = now
      this.lastRefusalReason = reason
    }
    this.warn(
      `refused-${reason}`,
      { remoteAddress: peer, reason },
      `webhook connection refused at the ${reason} cap: every connection busy for ${SLOT_WAIT_MS} ms, none idle to close instead`,
    )
  }

  failing(): string | undefined {
    const reason = this.lastRefusalReason
    return Date.now() - this.refusedAt < REFUSED_NOT_READY_MS
      ? `${this.refusedRecently} connection(s) refused in the last ${REFUSED_NOT_READY_MS / 1000} s at the ${reason} cap (webhook.maxConnections${reason === 'shared' ? ' - reservedConnections' : ''}), every open one busy for ${SLOT_WAIT_MS / 1000} s`
      : undefined
  }
}

const key = (address: string | undefined, port: number | undefined) => `${address ?? ''}|${port ?? ''}`

export class ConnectionGuard {
  /** The caps in force (reserved is 0 without apiServerAddresses). */
  readonly caps: Readonly<ConnectionCaps>
  /** `webhook-connections`: fails for REFUSED_NOT_READY_MS after a refusal at the shared or total cap. */
  readonly readiness: ReadinessCheck
  private readonly refusals: Refusals
  private readonly isApiServer: (address: string) => boolean
  private readonly connections = new Map<number, Connection>()
  private readonly byAddress = new Map<string, Connection>()
  /** Connections waiting for a slot (Connection.waiting), in arrival order. */
  private readonly waiting = new Set<Connection>()
  private nextId = 1

  constructor(
    private readonly server: Server,
    private readonly options: ConnectionGuardOptions,
  ) {
    const { caps } = options
    this.caps = Object.freeze({ ...caps, reserved: options.apiServerAddresses.length > 0 ? caps.reserved : 0 })
    this.isApiServer = addressMatcher(options.apiServerAddresses)
    this.refusals = new Refusals(this.caps, options)
    this.readiness = { name: 'webhook-connections', failing: () => this.refusals.failing() }
    // Before tls.Server's own listener: a refused connection never starts its handshake.
    server.prependListener('connection', this.accept)
    server.on('secureConnection', this.secured)
    server.on('request', this.request)
  }

  stop(): void {
    this.server.removeListener('connection', this.accept)
    this.server.removeListener('secureConnection', this.secured)
    this.server.removeListener('request', this.request)
    for (const c of this.connections.values()) {
      if (c.deadline) clearTimeout(c.deadline)
      if (c.waiting) clearTimeout(c.waiting.timer)
    }
  }

  /** A new TCP connection: accepted, accepted after closing an idle one, left waiting for a slot, or refused. */
  private readonly accept = (raw: Socket): void => {
    const peer = raw.remoteAddress ?? 'unknown'
    const apiServer = this.isApiServer(peer)
    const now = Date.now()
    const verdict = admitConnection({ peer, apiServer }, this.settled(now), this.caps)
    if (verdict.action === 'refuse' && !mayWait({ peer, apiServer }, [...this.waiting], this.caps)) {
      raw.destroy()
      this.refusals.refused(peer, verdict.reason)
      return
    }
    if (verdict.action === 'evict') this.evict(verdict.victim, verdict.reason, peer)
    const c: Connection = { id: this.nextId++, raw, peer, apiServer, inFlight: 0, lastActive: now, reviewed: false, overdue: false }
    if (verdict.action === 'refuse') {
      c.waiting = { reason: verdict.reason, timer: setTimeout(() => this.giveUp(c), SLOT_WAIT_MS).unref() }
      this.waiting.add(c)
    }
    this.connections.set(c.id, c)
    this.byAddress.set(key(raw.remoteAddress, raw.remotePort), c)
    raw.once('close', () => {
      if (!this.connections.has(c.id)) return
      this.forget(c)
      this.settle()
    })
    c.deadline = setTimeout(() => {
      c.deadline = undefined
      if (c.reviewed) return
      if (c.inFlight > 0) c.overdue = true
      else this.evictNoReview(c)
    }, this.options.firstReviewMs).unref()
    this.publish()
  }

  private readonly secured = (tls: TLSSocket): void => {
    const c = this.byAddress.get(key(tls.remoteAddress, tls.remotePort))
    if (c) c.tls = tls
  }

  /** A request on a tracked connection: busy until answered; a 200 is a valid review. */
  private readonly request = (req: IncomingMessage, res: ServerResponse): void => {
    const c = this.byAddress.get(key(req.socket.remoteAddress, req.socket.remotePort))
    if (!c) return
    c.inFlight++
    let done = false
    const finish = () => {
      if (done) return
      done = true
      c.inFlight--
      c.lastActive = Date.now()
      if (res.statusCode === 200) c.reviewed = true
      if (c.inFlight === 0 && this.connections.has(c.id)) {
        if (c.closeWhenIdle) this.close(c)
        else if (c.overdue && !c.reviewed) this.evictNoReview(c)
      }
      this.settle()
    }
    res.once('finish', finish)
    res.once('close', finish)
  }

  /** The connections the policy weighs: every tracked one but those still waiting for a slot. */
  private settled(now: number): TrackedConnection[] {
    const open: TrackedConnection[] = []
    for (const c of this.connections.values()) {
      if (c.waiting) continue
      open.push({ id: c.id, peer: c.peer, apiServer: c.apiServer, busy: c.inFlight > 0, idleMs: now - c.lastActive, reviewed: c.reviewed })
    }
    return open
  }

  /**
   * Waiting connections take the slots that came free, in the order they arrived. Called at
   * every answered request (the hot path): nothing to do unless some connection waits.
   */
  private settle(): void {
    for (const c of this.waiting) {
      const verdict = admitConnection({ peer: c.peer, apiServer: c.apiServer }, this.settled(Date.now()), this.caps)
      if (verdict.action === 'refuse') continue
      if (verdict.action === 'evict') this.evict(verdict.victim, verdict.reason, c.peer)
      clearTimeout(c.waiting!.timer)
      c.waiting = undefined
      this.waiting.delete(c)
    }
  }

  /** SLOT_WAIT_MS passed with no slot: refused (after the request in flight on it, if any). */
  private giveUp(c: Connection): void {
    if (!c.waiting || !this.connections.has(c.id)) return
    // Refused: no longer waiting for a slot (settle skips it), still outside the caps until it closes.
    this.waiting.delete(c)
    this.refusals.refused(c.peer, c.waiting.reason)
    if (c.inFlight > 0) c.closeWhenIdle = true
    else this.close(c)
  }

  private evict(victimId: number, reason: CapReason, forPeer: string): void {
    const victim = this.connections.get(victimId)
    if (!victim) return
    this.options.metrics.countConnectionEvicted(reason)
    this.refusals.warn(
      `evicted-${reason}`,
      { remoteAddress: victim.peer, newRemoteAddress: forPeer, reason },
      `webhook connection closed at the ${reason} cap: the oldest idle one, for a new one`,
    )
    this.close(victim)
  }

  private evictNoReview(c: Connection): void {
    this.options.metrics.countConnectionEvicted('no-review')
    this.refusals.warn(
      'no-review',
      { remoteAddress: c.peer },
      'webhook connection closed: no valid AdmissionReview within webhook.timeouts.firstReviewSeconds',
    )
    this.close(c)
  }

  private close(c: Connection): void {
    ;(c.tls ?? c.raw).destroy()
    c.raw.destroy()
    this.forget(c)
  }

  private forget(c: Connection): void {
    if (!this.connections.delete(c.id)) return
    this.byAddress.delete(key(c.raw.remoteAddress, c.raw.remotePort))
    if (c.deadline) clearTimeout(c.deadline)
    if (c.waiting) clearTimeout(c.waiting.timer)
    this.waiting.delete(c)
    this.publish()
  }

  private publish(): void {
    let apiServer = 0
    for (const c of this.connections.values()) if (c.apiServer) apiServer++
    this.options.metrics.setConnectionsOpen(apiServer, this.connections.size - apiServer)
  }
}
