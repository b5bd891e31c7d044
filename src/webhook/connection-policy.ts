/**
 * Which connection the webhook keeps when connections run short; pure (connections.ts does the I/O).
 * The caps: docs/webhook.md#the-webhook. Why: under one global cap refusing the newest, a client
 * holding idle connections and re-opening one every 100 ms took every slot the API server gave up.
 * At a cap the oldest idle one goes, not the new one (likeliest to carry a review); the API server
 * is exempt from the per-peer cap (its pool shares one address) and never evicted (Go does not
 * retry a POST on a closed connection); a busy connection never is.
 * Victim order: the biggest peer's, then never-reviewed, then longest idle; never one of a peer
 * holding fewer than the newcomer's own (but for the API server's newcomers). None evictable:
 * wait up to SLOT_WAIT_MS (reviews come in bursts; refusing at once failed 1 in 8 CI requests).
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
  peer: string
  /** From one of the API server's addresses. */
  apiServer: boolean
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
  // Never at the expense of a peer holding fewer: with the API server's address unknown, its pooled
  // connection is one such, and closing it as Go writes a review on it fails that review.
  const held = perPeer.get(incoming.peer) ?? 0
  const fair = (c: TrackedConnection<Id>) => incoming.apiServer || c.peer === incoming.peer || (perPeer.get(c.peer) ?? 0) > held
  const evictOr = (candidates: readonly TrackedConnection<Id>[], reason: CapReason): ConnectionVerdict<Id> => {
    const victim = pickVictim(candidates.filter(fair), perPeer)
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

/** How long a new connection may wait for a busy one to go idle (and be evicted) before refusal; a review takes milliseconds. */
export const SLOT_WAIT_MS = 1000

/**
 * Whether a connection with nothing to evict may wait: one per address (the API server's pool:
 * maxPerPeer), maxPerPeer in all, so waiting connections cannot become a second cap.
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
