/**
 * Who keeps a connection to the webhook when connections run short: the one owner of the
 * connection policy. Pure (no sockets, no clock): given the connections open, their peers
 * and idle times, and the caps, it says what to do with a new connection. server.ts does
 * the I/O (tracks the sockets, closes the victim, counts and logs).
 *
 * Why (issue 44, item 1): with one global cap and "refuse the newest", one client that
 * holds the cap's worth of idle connections and re-opens one every 100 ms takes every slot
 * the API server's pooled connection gives up, and every review fails. So:
 * - a peer (remote address) holds at most `maxPerPeer` connections, far below the global
 *   cap, so one client cannot fill it;
 * - at a cap, the oldest idle connection goes, not the new one: the newest connection is
 *   the likeliest to carry a review now, and a client holding idle connections gains
 *   nothing by re-opening;
 * - `reserved` slots of the global cap are for the API server's addresses only (when they
 *   are known, webhook.apiServerAddresses): other peers together hold at most
 *   max - reserved; the API server is exempt from the per-peer cap (its pooled connections
 *   all come from one address) and its connections are never evicted (Go does not retry a
 *   POST on a connection closed under it);
 * - a connection busy with a request is never evicted: the request finishes or times out.
 *
 * Which idle connection goes, in this order: those of the peer holding the most
 * connections (the flooder, not a bystander), then those that never carried a valid
 * AdmissionReview, then the longest idle. None evictable: the new one waits up to
 * SLOT_WAIT_MS for one to go idle (mayWait), then is refused. Reviews arrive in bursts,
 * and a burst keeps every connection busy for a moment: refusing the API server's new
 * connection in that moment fails its call (a CI run caught it, 1 in 8 admin requests).
 */

import { BlockList, isIPv6 } from 'node:net'

export interface ConnectionCaps {
  /** Connections open at most (webhook.maxConnections). */
  maxConnections: number
  /** Connections of one peer other than the API server at most (webhook.maxConnectionsPerPeer). */
  maxPerPeer: number
  /** Slots of maxConnections only the API server's addresses may take (webhook.reservedConnections; 0 when they are unknown). */
  reserved: number
}

export interface TrackedConnection<Id = number> {
  id: Id
  /** Remote address. */
  peer: string
  /** From one of the API server's addresses. */
  apiServer: boolean
  /** A request is being received or answered on it. */
  busy: boolean
  /** Milliseconds since its last request was answered (or since it was opened, before any). */
  idleMs: number
  /** It carried a valid AdmissionReview (answered 200). */
  reviewed: boolean
}

/** Which cap a refusal or an eviction was for: `peer` (maxConnectionsPerPeer), `shared` (maxConnections - reserved), `total` (maxConnections). */
export type CapReason = 'peer' | 'shared' | 'total'
export const CAP_REASONS: readonly CapReason[] = Object.freeze(['peer', 'shared', 'total'])

export type ConnectionVerdict<Id = number> =
  { action: 'accept' } | { action: 'evict'; victim: Id; reason: CapReason } | { action: 'refuse'; reason: CapReason }

/** Oldest idle first among `candidates`, by the order in the module comment. */
function pickVictim<Id>(
  candidates: readonly TrackedConnection<Id>[],
  perPeer: ReadonlyMap<string, number>,
): TrackedConnection<Id> | undefined {
  let best: TrackedConnection<Id> | undefined
  for (const c of candidates) {
    if (c.busy || c.apiServer) continue
    if (!best) {
      best = c
      continue
    }
    const byPeer = (perPeer.get(c.peer) ?? 0) - (perPeer.get(best.peer) ?? 0)
    if (byPeer !== 0) {
      if (byPeer > 0) best = c
      continue
    }
    if (c.reviewed !== best.reviewed) {
      if (!c.reviewed) best = c
      continue
    }
    if (c.idleMs > best.idleMs) best = c
  }
  return best
}

/** What to do with a new connection from `peer` (`apiServer`: one of the API server's addresses), given those `open`. */
export function admitConnection<Id>(
  incoming: { peer: string; apiServer: boolean },
  open: readonly TrackedConnection<Id>[],
  caps: ConnectionCaps,
): ConnectionVerdict<Id> {
  const perPeer = new Map<string, number>()
  let others = 0
  for (const c of open) {
    perPeer.set(c.peer, (perPeer.get(c.peer) ?? 0) + 1)
    if (!c.apiServer) others++
  }
  const evictOr = (candidates: readonly TrackedConnection<Id>[], reason: CapReason): ConnectionVerdict<Id> => {
    const victim = pickVictim(candidates, perPeer)
    return victim ? { action: 'evict', victim: victim.id, reason } : { action: 'refuse', reason }
  }

  if (!incoming.apiServer) {
    const own = open.filter((c) => c.peer === incoming.peer)
    if (own.length >= caps.maxPerPeer) return evictOr(own, 'peer')
    const shared = Math.max(0, caps.maxConnections - caps.reserved)
    if (others >= shared) return evictOr(open, 'shared')
  }
  if (open.length >= caps.maxConnections) return evictOr(open, 'total')
  return { action: 'accept' }
}

/**
 * How long a new connection that found every connection under its cap busy may wait for
 * one to go idle (and be closed for it) before it is refused. A review takes milliseconds;
 * a connection held busy for longer is a request in flight that the cap protects.
 */
export const SLOT_WAIT_MS = 1000

/**
 * Whether a new connection that found nothing to evict may wait (SLOT_WAIT_MS) rather than be
 * refused at once, given those already waiting: one at a time per address (the API server's
 * addresses: up to maxPerPeer, its pooled connections share one), maxPerPeer in all. Waiting
 * connections are tracked and may complete their handshake meanwhile, so the bound keeps
 * them from becoming a second cap.
 */
export function mayWait(
  incoming: { peer: string; apiServer: boolean },
  waiting: readonly { peer: string }[],
  caps: ConnectionCaps,
): boolean {
  if (waiting.length >= caps.maxPerPeer) return false
  const samePeer = waiting.filter((w) => w.peer === incoming.peer).length
  return samePeer < (incoming.apiServer ? caps.maxPerPeer : 1)
}

/** Whether `address` (as a socket reports it, IPv4-mapped IPv6 included) is one of `cidrs` (IPs or CIDRs, IPv4 or IPv6). */
export function addressMatcher(cidrs: readonly string[]): (address: string | undefined) => boolean {
  if (cidrs.length === 0) return () => false
  // node:net's BlockList does the CIDR arithmetic for both families.
  const list = new BlockList()
  for (const entry of cidrs) {
    const [ip, bits] = entry.split('/') as [string, string | undefined]
    const family = isIPv6(ip) ? 'ipv6' : 'ipv4'
    if (bits === undefined) list.addAddress(ip, family)
    else list.addSubnet(ip, Number(bits), family)
  }
  return (address) => {
    if (!address) return false
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
    if (mapped) return list.check(mapped[1]!, 'ipv4')
    return list.check(address, isIPv6(address) ? 'ipv6' : 'ipv4')
  }
}
