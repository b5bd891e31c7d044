/**
 * Waits until every API server stores the CRD in the new version: a lagging one writes the old
 * version after the rewrite passed an object, and storedVersions would be narrowed over it. Before
 * rewriting and again before narrowing, each server is asked by address for the new
 * storageVersionHash until all agree for the settle time (docs/several-api-servers.md: which
 * servers, and the fallback to the one in use).
 */
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { describeEndpoint, sharedApiServers } from '../../kube/apiservers.js'
import { storageVersionHash, waitForStorageVersion } from '../../kube/discovery.js'
import { sharedDiscovery } from '../../kube/discovery-cache.js'
import type { KubeHttp } from '../../kube/http.js'
import { sharedAgreements } from '../../kube/storage-agreement.js'
import { connectionErrorCode } from '../../kube/connection-errors.js'
import { getCrd } from '../../kube/crds.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { runInParallel } from '../parallel.js'
import { planCrd } from '../plan.js'
import { wholeSeconds } from '../../duration.js'

export type StorageSwitchMode = 'all-servers' | 'single-server'

export interface StorageSwitchReport {
  mode: StorageSwitchMode
  /** API servers listed (EndpointSlices or configuration). */
  listed: number
  /** API servers asked one by one (0 in single-server mode). */
  checked: number
  fallbackReason?: string
}

/** Agreement time before rewriting: a server that just switched settles its watch caches and storage a moment (not a setting). */
export const STORAGE_SETTLE_MS = 2_000

interface StorageSwitchOptions {
  settleMs: number
  signal?: AbortSignal | undefined
  /** Told which servers it waits for, whenever that changes. */
  onWaiting?: (servers: string[]) => void
  logger: Logger
}

/**
 * What the servers are asked about: the CRD's resource, and its generation as the run froze it (earlier
 * answers for it count towards the settle, storage-agreement.ts; undefined: none count).
 */
function switchTarget(crd: CustomResourceDefinition, generation: number | undefined) {
  return { group: crd.spec.group, plural: crd.spec.names.plural, kind: crd.spec.names.kind, generation }
}
type SwitchTarget = ReturnType<typeof switchTarget>

/** A client per API server, asked by address, each answer within 2 s. */
function serverClients(http: KubeHttp, servers: readonly URL[]) {
  return servers.map((url) => ({
    url,
    name: describeEndpoint(url),
    http: http.forEndpoint(url, { maxSockets: 2, defaultTimeoutMs: 2_000 }),
  }))
}

/** Records an answer of `server` in the shared agreements, for CRDs whose generation is known. */
function agreement(crd: SwitchTarget, want: string, server: string): ((shows: boolean) => number | undefined) | undefined {
  const generation = crd.generation
  if (generation === undefined) return undefined
  return (shows) => sharedAgreements.observe({ server, group: crd.group, plural: crd.plural, hash: want, generation }, shows)
}

/**
 * Connection failures that mean "this address cannot be reached from here": refused, unroutable,
 * untrusted, or timed out (dropped by a firewall). The client wraps them (CRDM_UNREACHABLE, CRDM_TLS):
 * their errno or TLS code decides.
 */
const UNREACHABLE =
  /^(ETIMEDOUT|ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|ERR_TLS_CERT_ALTNAME_INVALID|UNABLE_TO_VERIFY_LEAF_SIGNATURE|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|CERT_HAS_EXPIRED|ERR_SSL_WRONG_VERSION_NUMBER)$/

/** Fallback reasons already said in this process: the warning comes once, later runs log it at debug. */
const said = new Set<string>()

export async function waitForStorageEverywhere(
  http: KubeHttp,
  definition: CustomResourceDefinition,
  version: string,
  // The run's settings (MigrationSettings): its timeout, and the servers to ask instead of the EndpointSlices'.
  settings: { storageSettleTimeoutMs: number; apiServerEndpoints?: readonly string[] | undefined },
  o: StorageSwitchOptions,
): Promise<StorageSwitchReport> {
  const crd = switchTarget(definition, definition.metadata.generation)
  const { storageSettleTimeoutMs: timeoutMs, apiServerEndpoints: endpoints } = settings
  const want = storageVersionHash(crd.group, version, crd.kind)
  // The servers cannot be asked one by one: the one in use is checked, plus the settle time.
  const fallback = async (listed: number, reason: string): Promise<StorageSwitchReport> => {
    const level = said.has(reason) ? 'debug' : 'warn'
    said.add(reason)
    o.logger[level]({ reason }, 'checking the storage version on one API server only (plus the settle time)')
    const agreedSince = agreement(crd, want, http.server.href)
    await waitForStorageVersion(http, crd, version, {
      timeoutMs,
      settleMs: o.settleMs,
      ...(o.signal ? { signal: o.signal } : {}),
      served: (c, group, v, plural, want) => sharedDiscovery.storageVersionHash(c, group, v, plural, want),
      ...(agreedSince ? { agreedSince } : {}),
    })
    return { mode: 'single-server', listed, checked: 0, fallbackReason: reason }
  }
  let servers: URL[]
  try {
    servers = endpoints?.length ? endpoints.map((e) => new URL(e)) : await sharedApiServers.get(http)
  } catch (err) {
    return fallback(0, `the API servers cannot be listed (${errorMessage(err)})`)
  }
  if (servers.length === 0) return fallback(0, 'no API server is listed in the default/kubernetes EndpointSlices')

  const clients = serverClients(http, servers)
  try {
    const deadline = Date.now() + timeoutMs
    let agreedSince: number | undefined
    let waitingFor = ''
    for (let round = 0; ; round++) {
      o.signal?.throwIfAborted()
      const answers = await Promise.all(
        clients.map(async (c) => {
          try {
            return { c, hash: await sharedDiscovery.storageVersionHash(c.http, crd.group, version, crd.plural, want) }
          } catch (err) {
            return { c, err }
          }
        }),
      )
      // None answers at all: from here the servers cannot be reached one by one (refused,
      // or dropped by a firewall: timeouts). One that answers while another does not is a
      // lagging server, waited for.
      if (round === 0 && answers.every((a) => 'err' in a && UNREACHABLE.test(connectionErrorCode(a.err) ?? ''))) {
        const first = answers[0] as { c: { name: string }; err: unknown }
        return fallback(
          servers.length,
          `the API servers cannot be reached one by one from here (${first.c.name}: ${errorMessage(first.err)})`,
        )
      }
      const lagging = answers.filter((a) => !('hash' in a) || a.hash !== want).map((a) => a.c.name)
      // Since when each server has shown it, earlier answers of this generation included.
      const since = answers.map((a) => agreement(crd, want, a.c.url.href)?.('hash' in a && a.hash === want))
      if (lagging.length === 0) {
        agreedSince = since.every((t): t is number => t !== undefined) ? Math.max(...since) : (agreedSince ?? Date.now())
        if (Date.now() - agreedSince >= o.settleMs) return { mode: 'all-servers', listed: servers.length, checked: servers.length }
      } else {
        agreedSince = undefined
        if (lagging.join() !== waitingFor) {
          waitingFor = lagging.join()
          o.logger.info({ servers: lagging, storageVersion: version }, 'waiting for API servers to store the new version')
          o.onWaiting?.(lagging)
        }
        if (Date.now() > deadline) {
          throw new CrdMigratorError(
            'CRDM_STORAGE_NOT_SWITCHED',
            `API server(s) ${lagging.join(', ')} did not switch to storage version ${version} within ${wholeSeconds(timeoutMs)} (of ${servers.length} listed)`,
          )
        }
      }
      await new Promise((r) => setTimeout(r, Math.min(250, Math.max(50, o.settleMs / 4))))
    }
  } finally {
    for (const c of clients) c.http.close()
  }
}

/**
 * A batch's first look, before its CRDs' turns: asks each API server once whether it serves each
 * CRD's storage version and records the answers (storage-agreement.ts), so a fleet waits the
 * settle time about once, not once per CRD. Decides nothing: each run still asks every server.
 */
export async function observeStorageSwitches(
  http: KubeHttp,
  crds: readonly CustomResourceDefinition[],
  o: { endpoints?: readonly string[] | undefined; concurrency?: number },
): Promise<number> {
  const pending = crds
    .map((crd) => ({ crd, plan: planCrd(crd) }))
    .filter(({ plan }) => plan.storageMigrationNeeded && plan.blockedReason === undefined)
  if (pending.length === 0) return 0
  const servers = o.endpoints?.length ? o.endpoints.map((e) => new URL(e)) : await sharedApiServers.get(http).catch(() => [])
  // Where the servers are not listed, the runs ask the one in use (single-server mode): so does this.
  const clients = servers.length
    ? serverClients(http, servers).map((c) => ({ key: c.url.href, http: c.http, own: true }))
    : [{ key: http.server.href, http, own: false }]
  let recorded = 0
  try {
    await runInParallel(pending, o.concurrency ?? 8, async ({ crd, plan }) => {
      const target = switchTarget(crd, plan.generation)
      const want = storageVersionHash(target.group, plan.storageVersion!, target.kind)
      for (const c of clients) {
        const hash = await sharedDiscovery
          .storageVersionHash(c.http, target.group, plan.storageVersion!, target.plural, want)
          .catch(() => undefined)
        if (hash === undefined) continue // no answer is no evidence either way
        agreement(target, want, c.key)!(hash === want)
        recorded++
      }
    })
  } finally {
    for (const c of clients) if (c.own) c.http.close()
  }
  return recorded
}

/** {@link observeStorageSwitches} for CRDs known by name (read here; one that cannot be read is left to its run). */
export async function observeStorageSwitchesOf(
  http: KubeHttp,
  names: readonly string[],
  o: { endpoints?: readonly string[] | undefined; concurrency?: number },
): Promise<number> {
  const crds = await runInParallel(names, o.concurrency ?? 8, (name) => getCrd(http, name).catch(() => undefined))
  const readable = crds.filter((c) => c !== undefined)
  return observeStorageSwitches(http, readable, o)
}
